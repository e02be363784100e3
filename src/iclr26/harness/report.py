"""The report: a static site (index of all papers + a page per paper with claim tables and plots),
``summary.json``, ``summary.md``, and the claim table inside each paper's README.

Verdicts are re-judged from the stored trials. Each is shown with the scale it came from, the
paper's effect, the bounds the test inverts, the smallest effect the check could detect, and its
reason; a verdict whose measured code (paper folder, imported project modules, package versions)
changed since its trials ran is marked stale, with the reason. Smoke verdicts never count as
evidence and are only shown where no quick verdict exists.
"""
from __future__ import annotations

import hashlib
import html
import inspect
import json
import math
import os
import shutil
import time
import urllib.parse
from pathlib import Path

import numpy as np

from ..registry import Paper, papers
from .experiments import claims_for, folder_fingerprint
from .stats import REPRODUCED
from .store import WALL_ONLY_SHARE, Store, core_seconds, fmt_minutes, wall_seconds
from .verdicts import judge, judge_paper, select_trials

SCALE_ORDER = ("paper", "quick", "smoke")


def _fmt(x, digits=3) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "–"
    return f"{x:.{digits}g}"


def _claim_entry(c) -> dict:
    return {"id": c.id, "statement": c.statement, "paper_value": c.paper_value, "source": c.source,
            "test": c.test, "direction": c.direction, "method": c.method, "comparator": c.comparator,
            "margin": c.margin, "proxy": c.proxy, "constant": c.baseline is None, "unit": c.unit,
            "cluster": c.cluster, "paper_effect": c.paper_effect, "effect_source": c.effect_source,
            "floor": c.floor, "floor_reason": c.floor_reason, "exploratory": c.exploratory,
            "requires": list(c.requires), "premise": c.premise, "premises": list(c.premises),
            "baseline_floor": c.baseline_floor, "baseline_floor_side": c.baseline_floor_side,
            "baseline_floor_reason": c.baseline_floor_reason, "baseline_floor_expected": c.baseline_floor_expected,
            "verdict": "not run", "scale": None, "stale": None, "stats": None, "note": ""}


#: verdicts in the order they are counted and drawn, with their colours (the page's CSS, the
#: overview figure and the terminal use the same ones)
KINDS = ("reproduced", "reproduced, smaller", "not reproduced", "inconclusive", "contradicted", "error", "not run")
COLOURS = {"reproduced": "#5cb85c", "reproduced, smaller": "#b5d96b", "not reproduced": "#f0ad4e",
           "inconclusive": "#7fa7d6", "contradicted": "#d9534f", "error": "#8b0000", "not run": "#cccccc"}
TERMINAL = {"reproduced": "green", "reproduced, smaller": "chartreuse3", "not reproduced": "yellow",
            "inconclusive": "blue", "contradicted": "red", "error": "red"}


def counted(c: dict) -> bool:
    """A claim that counts toward the paper's tally: quick scale, current code, neither exploratory nor a premise."""
    return c["scale"] == "quick" and not c.get("stale") and not c["exploratory"] and not c.get("premise")


def tally(claims: list[dict]) -> dict:
    """Counts of the paper's claims and, apart, of its premises: {"claims": {verdict: n}, "n_claims",
    "premises": {verdict: n}, "n_premises"}. Only quick verdicts at the current code count as
    verdicts; the others count as "not run"."""
    out = {"claims": {k: 0 for k in KINDS}, "premises": {k: 0 for k in KINDS}, "n_claims": 0, "n_premises": 0}
    for c in claims:
        if c["exploratory"]:
            continue
        which = "premises" if c.get("premise") else "claims"
        out["n_" + which] += 1
        v = c["verdict"] if c["scale"] == "quick" and not c.get("stale") else "not run"
        out[which][v] = out[which].get(v, 0) + 1
    return out


def tally_words(t: dict) -> str:
    """ "claims reproduced 3/5 (1 smaller than the paper's); premises 2/2" """
    c = t["claims"]
    words = f"claims reproduced {c['reproduced']}/{t['n_claims']}"
    if c["reproduced, smaller"]:
        words += f" (+{c['reproduced, smaller']} smaller than the paper's)"
    if t["n_premises"]:
        p = t["premises"]
        words += f"; premises {p['reproduced'] + p['reproduced, smaller']}/{t['n_premises']}"
    return words


def unit_words(c: dict, n: int | None = None) -> str:
    """What the test's units are, in words: seeds, or items (clustered items count as seeds)."""
    if c["unit"] == "seeds" or c.get("cluster") == "seed":
        return "seed" if n == 1 else "seeds"
    return "item" if n == 1 else "items"


def what_it_would_take(c: dict) -> str:
    """For an inconclusive verdict: how many units would detect the paper's effect, or ""."""
    s = c.get("stats") or {}
    need = s.get("units_needed")
    if c["verdict"] != "inconclusive" or not need:
        return ""
    return (f"what it would take: about {need} {unit_words(c, need)} (now {s['n']}) would detect the paper's "
            f"effect {c['paper_effect']:+.3g} with 80 % power")


def comparator_floor_words(c: dict) -> str:
    """The comparator's floor, its p-value and, where expected, that its failure is the paper's claim."""
    if c.get("baseline_floor") is None:
        return ""
    s = c.get("stats") or {}
    side = c.get("baseline_floor_side") or "above"
    words = f"comparator floor: {c['comparator']} must be {side} {c['baseline_floor']:g}"
    if c.get("baseline_floor_reason"):
        words += f" ({c['baseline_floor_reason']})"
    if s.get("baseline_floor_pvalue") is not None:
        words += f", p = {s['baseline_floor_pvalue']:.3g}"
    if c.get("baseline_floor_expected"):
        words += "; the comparator failing it is itself the paper's claim"
    return words


def premise_words(c: dict) -> str:
    """The premises a claim rests on, or that it is one."""
    parts = []
    if c.get("premise"):
        parts.append("premise (counted apart from the paper's claims)")
    if c.get("premises"):
        parts.append("rests on the premise" + ("s " if len(c["premises"]) > 1 else " ") + ", ".join(c["premises"]))
    if c.get("requires"):
        parts.append("stands only with " + ", ".join(c["requires"]))
    return "; ".join(parts)


def collect(store: Store, judged: dict | None = None) -> list[dict]:
    """One record per paper: status, claims, and for each claim its verdict at the best scale with trials.

    Verdicts are re-judged from the stored trials every time, so they follow the current statistics
    and claims; a verdict whose trials no longer measure the current code carries the reason in
    ``stale``. ``judged``, if given, receives the verdicts (with their values) keyed by
    (paper, scale, claim), so the plots need not judge the same trials again.
    """
    out = []
    for p in papers().values():
        rec = {"id": p.id, "domain": p.domain, "status": p.status, "feasibility": p.feasibility,
               "summary": p.summary, "claims": [], "title": None, "runtime_s": None, "cpu_s": None, "core_s": None,
               "two_jobs_s": None, "last_run": None, "git_commits": []}
        if p.status == "implemented":
            try:
                pc = claims_for(p)
            except ValueError as e:
                rec["claims_error"] = str(e)
                out.append(rec)
                continue
            rec["title"], rec["arxiv"], rec["code"] = pc.title, pc.arxiv, pc.code
            per_scale = {}
            for scale in SCALE_ORDER if store is not None else ():
                vs = judge_paper(p, scale, store, save=True)
                if any(v.verdict != "not run" for v in vs):
                    per_scale[scale] = {v.claim.id: v for v in vs}
            for c in pc.claims:
                entry = _claim_entry(c)
                for scale in SCALE_ORDER:
                    if scale in per_scale:
                        v = per_scale[scale][c.id]
                        entry.update(verdict=v.verdict, scale=scale, stale=v.stale, note=v.note, seeds=v.seeds,
                                     stats=None if v.stats is None else v.stats.to_dict())
                        if judged is not None:
                            judged[(p.id, scale, c.id)] = v
                        break
                rec["claims"].append(entry)
            runs = []
            for scale in ("quick", "smoke") if store is not None else ():
                runs = select_trials(p, scale, store)[0]
                if runs:
                    rec["runtime_scale"] = scale
                    break
            if runs:
                rec["runtime_s"] = float(sum(t.duration_s or 0 for t in runs))
                # CPU seconds do not grow with the load of a shared machine; trials stored before
                # they were recorded have none, and then the sum is not shown
                cpu = [t.cpu_s for t in runs]
                rec["cpu_s"] = float(sum(cpu)) if all(c is not None for c in cpu) else None
                # what each trial takes on a core of its own, as in the runner's estimate
                core = core_seconds([t.duration_s or 0.0 for t in runs], [t.cpu_s for t in runs])
                rec["core_s"] = float(sum(core))
                rec["trial_costs"] = [float(c) for c in core]
                rec["cpu_timed"] = all(t.cpu_s is not None for t in runs)
                rec["two_jobs_s"] = float(wall_seconds(core, 2))  # the one expected time: see store.wall_seconds
                rec["last_run"] = time.strftime("%Y-%m-%d %H:%M", time.gmtime(max(t.finished_at for t in runs)))
                rec["git_commits"] = sorted({t.git_commit for t in runs if t.git_commit})
        out.append(rec)
    return out


def _verdict_label(c: dict) -> str:
    v = c["verdict"]
    if c["scale"] and c["scale"] != "quick":
        v += f" ({c['scale']})"
    if c.get("stale"):
        v += " [stale]"
    if c.get("exploratory"):
        v += " (exploratory)"
    return v


def _bound(x) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "–"
    if math.isinf(x):
        return "-inf" if x < 0 else "+inf"
    return f"{x:.3g}"


def _reason(c: dict) -> str:
    """The reason shown beside a verdict: always for a verdict that is not a plain reproduction."""
    parts = []
    if c["verdict"] != "reproduced" or c.get("requires") and c.get("note", "").startswith("significant on its own"):
        parts.append(c.get("note") or "")
    if "would detect" not in (c.get("note") or ""):
        parts.append(what_it_would_take(c))
    if c.get("stale"):
        parts.append(f"stale: {c['stale']}")
    return "; ".join(x for x in parts if x)


def claim_cells(c: dict) -> dict:
    """The display cells of one claim, shared by the README table, the site and the CLI."""
    s = c["stats"] or {}
    margin = f", margin {c['margin']:g}" if c["margin"] else ""
    unit = c["unit"] + (f", clustered by seed" if c.get("cluster") == "seed" else "")
    tested = f"{c['method']} {c['direction']} {c['comparator']}{margin} ({c['test']}; {unit})"
    cells = {"tested": tested, "paper_effect": f"{c['paper_effect']:+.3g}" if c.get("paper_effect") is not None else "–",
             "measured": "–", "effect": "–", "mde": "–", "p": "–", "n": "–"}
    if s.get("test"):
        cells["measured"] = f"{c['method']} {_fmt(s['method_mean'])} vs " + (
            f"constant {c['comparator']}" if c["constant"] else f"{c['comparator']} {_fmt(s['baseline_mean'])}")
        level = 100 * (1 - s.get("alpha", 0.05))
        est = s.get("estimator", "mean")
        cells["effect"] = (f"{s['effect']:+.3g} [{_bound(s['ci_low'])}, {_bound(s['ci_high'])}]"
                           + (f" ({est})" if est != "mean" else "") + f" ({level:.0f}% one-sided bounds)")
        cells["mde"] = _bound(s.get("mde"))
        cells["p"] = _fmt(s["pvalue"])
        n = f"{s['n']}"
        if s.get("clustered"):
            n += f" seeds ({s['n_items']} items)"
        cells["n"] = n
    return cells


def claims_markdown(rec: dict) -> str:
    """The claim table of one paper, as Markdown."""
    lines = ["| claim | paper says | paper effect | tested | measured | effect [bounds] | detectable (80% power) "
             "| p | n | verdict |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for c in rec["claims"]:
        cells = claim_cells(c)
        claim = f"**{c['id']}**: {c['statement']}".replace("|", "/")
        said = f"{c['paper_value']} ({c['source']})".replace("|", "/")
        reason = _reason(c)
        label = _verdict_label(c) + (f": {reason}" if reason else "")
        row = [claim, said, cells["paper_effect"], cells["tested"], cells["measured"], cells["effect"], cells["mde"],
               cells["p"], cells["n"], label]
        lines.append("| " + " | ".join(x.replace("|", "/").replace("\n", " ") for x in row) + " |")
    lines.append("")
    lines.append("Effects are method minus comparator in the metric's units; the bounds are the two one-sided "
                 "bounds the test inverts (reproduced exactly when the bound on the claimed side clears the null). "
                 "\"Detectable\" is the smallest true effect this check finds with 80 % power: where it is "
                 "beyond the paper's effect, a negative result says little. Verdicts from `iclr26 reproduce "
                 + rec["id"] + " --scale quick`; regenerate with `iclr26 report`.")
    return "\n".join(lines)


def _update_block(path: Path, name: str, content: str) -> bool:
    """Replace the text between ``<!-- name:begin -->`` and ``<!-- name:end -->``; True if changed."""
    begin, end = f"<!-- {name}:begin -->", f"<!-- {name}:end -->"
    if not path.is_file():
        return False
    text = path.read_text()
    if begin not in text or end not in text:
        return False
    head, rest = text.split(begin, 1)
    _, tail = rest.split(end, 1)
    new = f"{head}{begin}\n{content}\n{end}{tail}"
    if new != text:
        path.write_text(new)
        return True
    return False


def update_readme(paper: Paper, rec: dict) -> bool:
    """Write the claim table between the claims markers of the paper's README."""
    return _update_block(paper.folder / "README.md", "claims", claims_markdown(rec))


def plot_claim(path: Path, claim, values, yours=None) -> list[str]:
    """Left: each arm's values and mean with its 95% interval (the published trials, and beside them
    the user's own, ``yours``, when given); right: the paired differences, coloured by the verdict, with
    the effect's one-sided bounds. Returns the colours of the difference histograms, in order."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    def arrays(v):
        x = np.asarray(v.method_values, dtype=float)
        y = None if v.baseline_values is None else np.asarray(v.baseline_values, dtype=float)
        return x, y

    x, y = arrays(values)
    sets = [("published", values, x, y)]
    if yours is not None and yours.method_values:
        sets.append(("yours", yours, *arrays(yours)))
    fig, axes = plt.subplots(1, 2, figsize=(13, 4.6), gridspec_kw={"width_ratios": [1, 1.2]})
    arm_names = [claim.method] + ([claim.baseline] if y is not None else [])
    width = 0.36 if len(sets) > 1 else 0.0
    for k, (label, v, xa, ya) in enumerate(sets):
        arms = [xa] + ([ya] if ya is not None else [])
        for i, a in enumerate(arms):
            pos = i + (k - (len(sets) - 1) / 2) * width
            m = a.mean()
            half = 1.96 * a.std(ddof=1) / math.sqrt(a.size) if a.size > 1 else 0
            axes[0].errorbar([pos], [m], yerr=[half], fmt="o" if k == 0 else "D", capsize=6, color=f"C{i}",
                             mfc="white" if k else None, label=f"{arm_names[i]} ({label})" if len(sets) > 1 else arm_names[i])
            if a.size <= 50:
                axes[0].scatter(np.full(a.size, pos) + np.linspace(-0.08, 0.08, a.size), a, s=14, alpha=0.5,
                                color=f"C{i}", marker="o" if k == 0 else "D")
        if ya is not None and ya.size <= 50:  # each pair's line joins its two jittered points
            jitter = np.linspace(-0.08, 0.08, xa.size)
            off = (k - (len(sets) - 1) / 2) * width
            for j, a, b in zip(jitter, xa, ya):
                axes[0].plot([0 + off + j, 1 + off + j], [a, b], color="grey", alpha=0.2, lw=0.8)
    if y is None:
        axes[0].axhline(claim.baseline_value, color="grey", ls="--", label=f"constant {claim.baseline_value:g}")
    axes[0].set_xticks(range(len(arm_names)), arm_names, fontsize=11)
    axes[0].set_xlim(-0.6, len(arm_names) - 0.4)
    axes[0].tick_params(labelsize=10)
    axes[0].set_title(f"{claim.metric} ({claim.unit}: n={x.size}"
                      + (", clustered by seed" if values.clusters is not None else "") + ")", fontsize=12)
    axes[0].legend(fontsize=9, loc="upper center", bbox_to_anchor=(0.5, -0.1), ncol=4, frameon=False)
    drawn = []
    for k, (label, v, xa, ya) in enumerate(sets):
        d = xa - (ya if ya is not None else claim.baseline_value)
        col = COLOURS.get(v.verdict, "#999999")
        drawn.append(col)
        lab = f"{label}: {v.verdict}" if len(sets) > 1 else None
        if np.unique(d).size > 2:
            axes[1].hist(d, bins=min(30, max(5, d.size // 3)), color=col, alpha=0.75 if k == 0 else 0.45,
                         histtype="bar" if k == 0 else "stepfilled", edgecolor="black" if k else None, label=lab)
        else:
            vals, counts = np.unique(d, return_counts=True)
            axes[1].bar(vals + (0.15 * k if k else 0), counts, width=0.3, color=col, alpha=0.75 if k == 0 else 0.45,
                        edgecolor="black" if k else None, label=lab)
    st = values.stats
    if st is not None:
        lo = st.ci_low if math.isfinite(st.ci_low) else float(np.min(x - (y if y is not None else claim.baseline_value)))
        hi = st.ci_high if math.isfinite(st.ci_high) else float(np.max(x - (y if y is not None else claim.baseline_value)))
        axes[1].axvspan(lo, hi, color="black", alpha=0.08, label=f"{100 * (1 - st.alpha):.0f}% one-sided bounds")
        axes[1].axvline(st.effect, color="black", label=f"effect {st.effect:+.3g}")
    if claim.paper_effect is not None:
        axes[1].axvline(claim.paper_effect, color="C4", ls="--", label=f"paper's effect {claim.paper_effect:+.3g}")
    axes[1].axvline(0, color="black", lw=0.8)
    for m in {claim.margin, -claim.margin} - {0.0}:
        axes[1].axvline(m, color="grey", ls=":", lw=0.8)
    axes[1].tick_params(labelsize=10)
    axes[1].legend(fontsize=9, loc="upper center", bbox_to_anchor=(0.5, -0.1), ncol=3, frameon=False)
    axes[1].set_title(f"paired difference: {values.verdict}", fontsize=12, color="black")
    fig.suptitle(claim.id, fontsize=13)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return drawn


def plot_cache_root() -> Path | None:
    """Where rendered claim figures are kept between reports: ``$ICLR26_PLOT_CACHE`` (an empty value
    turns the cache off), default ``~/.cache/iclr26/plots``."""
    env = os.environ.get("ICLR26_PLOT_CACHE")
    if env is not None:
        return Path(env) if env.strip() else None
    return Path.home() / ".cache" / "iclr26" / "plots"


def _plot_key(claim, values, yours) -> str:
    """A digest of everything :func:`plot_claim` draws (the claim's fields, each set's values, verdict
    and statistics) and of the plotting code itself, so a changed input or a changed figure renders anew."""

    def part(v):
        if v is None:
            return None
        st = v.stats
        return (list(map(float, v.method_values)),
                None if v.baseline_values is None else list(map(float, v.baseline_values)),
                v.clusters is not None, v.verdict,
                None if st is None else (st.effect, st.ci_low, st.ci_high, st.alpha))

    fields = (claim.id, claim.method, claim.baseline, claim.baseline_value, claim.metric, claim.unit,
              claim.paper_effect, claim.margin)
    text = repr((inspect.getsource(plot_claim), fields, part(values),
                 part(yours) if yours is not None and yours.method_values else None))
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def cached_plot(path: Path, claim, values, yours=None) -> None:
    """:func:`plot_claim`, reusing the figure of an earlier report when nothing it draws has changed
    (rendering the figures is most of a report's time). The cache is only an optimisation: when it
    cannot be read or written, the figure is rendered as usual."""
    root = plot_cache_root()
    if root is None:
        plot_claim(path, claim, values, yours=yours)
        return
    hit = root / f"{_plot_key(claim, values, yours)}.png"
    try:
        if hit.is_file() and hit.stat().st_size > 0:
            shutil.copyfile(hit, path)
            return
    except OSError:
        pass
    plot_claim(path, claim, values, yours=yours)
    try:
        root.mkdir(parents=True, exist_ok=True)
        tmp = hit.with_name(f"{hit.stem}.{os.getpid()}.tmp")
        shutil.copyfile(path, tmp)
        os.replace(tmp, hit)  # atomic: a concurrent report never reads half a file
    except OSError:
        pass


PAGE = """<!doctype html><html><head><meta charset="utf-8"><meta name="viewport" content="width=device-width">
<title>{title}</title>
<style>*{{box-sizing:border-box}}body{{font-family:system-ui,sans-serif;max-width:1500px;margin:1.5em auto;padding:0 1em}}
table{{border-collapse:collapse;width:100%;font-size:13px;table-layout:fixed}}
td,th{{border:1px solid #ccc;padding:4px 6px;vertical-align:top;overflow-wrap:anywhere;word-break:break-word;hyphens:auto}}
th{{text-align:left;background:#f6f6f6}}
.reproduced{{background:#d9f2d9}}.reproducedsmaller{{background:#eef6d0}}.notreproduced{{background:#fff3cd}}
.inconclusive{{background:#e7eef7}}.contradicted,.error{{background:#f8d7da}}
.notrun,.planned{{color:#888}}.premise{{font-style:italic}}img{{width:100%;height:auto}}
.tag{{font-size:11px;border:1px solid #999;border-radius:3px;padding:0 3px;margin-left:4px;white-space:nowrap}}
small{{color:#444}}</style></head><body>{body}</body></html>"""


def _cls(v: str) -> str:
    """The CSS class of a verdict label: "reproduced, smaller (smoke) [stale]" -> "reproducedsmaller"."""
    return "".join(ch for ch in v.split(" (")[0].split(" [")[0] if ch.isalnum())


def _json_clean(x):
    """Strict JSON: NaN and infinities become None."""
    if isinstance(x, float):
        return x if math.isfinite(x) else None
    if isinstance(x, dict):
        return {str(k): _json_clean(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_json_clean(v) for v in x]
    return x


def build_report(out: str | Path = "site", store_path=None, published_path=None, write_readmes: bool = False) -> Path:
    """Render the site from the published results and, beside them, the user's own runs.

    Both stores are opened read-only. ``write_readmes`` (maintainers) rewrites the claim tables in the
    paper READMEs and the README summary from the published results.
    """
    from .store import StoreError, existing_store

    out = Path(out)
    try:
        (out / "papers").mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise OSError(f"cannot write the report to {out}: {e}") from None
    pub = Path(published_path) if published_path else None
    user = existing_store(store_path)  # a store the user named must exist: StoreError otherwise
    sources = []
    if pub is not None and pub.is_file():
        sources.append(("published", pub))
    if user is not None and not (pub is not None and pub.is_file() and user.resolve() == pub.resolve()):
        sources.append(("yours", user))
    if write_readmes and not (sources and sources[0][0] == "published"):
        raise StoreError(f"no published results at {pub} to write the READMEs from")
    collected = {}
    for label, path in sources:
        with Store(path, readonly=True) as st:
            judged: dict = {}
            collected[label] = (collect(st, judged), judged)
    if not collected:
        collected["none"] = (collect(None), {})
    primary = next(iter(collected))
    records, judged = collected[primary]
    if "yours" in collected and primary != "yours":
        mine = {r["id"]: {c["id"]: c for c in r["claims"]} for r in collected["yours"][0]}
        for rec in records:
            for c in rec["claims"]:
                y = mine.get(rec["id"], {}).get(c["id"])
                if y is not None and y["scale"] is not None:
                    c["yours"] = {"verdict": y["verdict"], "label": _verdict_label(y), "stale": y["stale"],
                                  "note": y["note"], "scale": y["scale"], "stats": y["stats"],
                                  "differs": (y["verdict"], y["scale"]) != (c["verdict"], c["scale"])}
    for rec in records:
        if rec["status"] != "implemented" or "claims_error" in rec:
            continue
        p = papers()[rec["id"]]
        pc = claims_for(p)
        figs = []
        for c, entry in zip(pc.claims, rec["claims"]):
            if entry["scale"] is None:
                continue
            values = judged.get((p.id, entry["scale"], c.id))
            mine = None
            if "yours" in collected and primary != "yours":
                mine = collected["yours"][1].get((p.id, entry["scale"], c.id))
            if values is not None and values.method_values:
                name = f"{p.id}__{c.id}.png"
                cached_plot(out / "papers" / name, c, values, yours=mine)
                figs.append(name)
                entry["figure"] = f"papers/{name}"
        _paper_page(out, rec, figs, primary)
        if write_readmes:
            update_readme(p, rec)
    overview(out / "overview.png", records)
    yours = your_runs(collected["yours"][0], records if primary != "yours" else None) if "yours" in collected else None
    _index(out, records, primary, yours)
    if write_readmes:
        _update_block(Path(__file__).resolve().parents[3] / "README.md", "summary", summary_markdown(records))
        _update_block(Path(__file__).resolve().parents[3] / "README.md", "times", times_markdown(records))
    summary = {"source": primary, "papers": records, "your_runs": yours}
    (out / "summary.json").write_text(json.dumps(_json_clean(summary), indent=1, default=str, allow_nan=False))
    (out / "summary.md").write_text(summary_markdown(records))
    return out


def overview(path: Path, records: list[dict]) -> None:
    """One picture of the index: verdicts of the counted claims (premises and exploratory claims left
    out), by domain, as stacked bars in the verdicts' colours."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    domains = sorted({r["domain"] for r in records if r["status"] == "implemented"})
    counts = {k: [sum(c["verdict"] == k for r in records if r["domain"] == d for c in r["claims"]
                      if not c["exploratory"] and not c.get("premise")) for d in domains] for k in KINDS}
    fig, ax = plt.subplots(figsize=(13, 0.42 * len(domains) + 1.8))
    left = np.zeros(len(domains))
    for k in KINDS:
        ax.barh(domains, counts[k], left=left, color=COLOURS[k], label=k)
        left += counts[k]
    ax.tick_params(labelsize=11)
    ax.set_xlabel("claims (premises and exploratory claims left out)", fontsize=11)
    ax.legend(fontsize=10, ncol=len(KINDS), loc="lower center", bbox_to_anchor=(0.5, 1.0), frameon=False)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def summary_markdown(records: list[dict]) -> str:
    lines = ["| paper | domain | status | claims reproduced (quick, current code) | verdicts |", "|---|---|---|---|---|"]
    for r in records:
        if r["status"] != "implemented":
            lines.append(f"| {r['id']} | {r['domain']} | planned | – | – |")
            continue
        t = tally(r["claims"])
        n = f"{t['claims']['reproduced']}/{t['n_claims']}"
        if t["claims"]["reproduced, smaller"]:
            n += f" (+{t['claims']['reproduced, smaller']} smaller)"
        if t["n_premises"]:
            n += f"; premises {t['premises']['reproduced'] + t['premises']['reproduced, smaller']}/{t['n_premises']}"
        verdicts = "; ".join(f"{c['id']}: {_verdict_label(c)}" + (" (premise)" if c.get("premise") else "")
                             for c in r["claims"])
        lines.append(f"| {r['id']} | {r['domain']} | implemented | {n} | {verdicts} |")
    return "\n".join(lines) + "\n"


def expected_times(store: Store) -> list[dict]:
    """Each implemented paper's quick trials at the current code (else its latest) and their expected
    time with 2 jobs, as :func:`collect` records them, without judging any claim."""
    out = []
    for p in papers().values():
        if p.status != "implemented":
            continue
        runs = select_trials(p, "quick", store)[0]
        if not runs:
            continue
        core = core_seconds([t.duration_s or 0.0 for t in runs], [t.cpu_s for t in runs])
        out.append({"id": p.id, "trial_costs": core, "two_jobs_s": wall_seconds(core, 2), "core_s": sum(core),
                    "cpu_timed": all(t.cpu_s is not None for t in runs), "runtime_scale": "quick"})
    return out


def times_markdown(records: list[dict]) -> str:
    """The README's sentences on run times, from the same expected times as `reproduce` and the index."""
    timed = sorted((r for r in records if r.get("two_jobs_s") and r.get("runtime_scale", "quick") == "quick"),
                   key=lambda r: r["two_jobs_s"])
    if not timed:
        return "No published quick trials to time yet."
    median = timed[len(timed) // 2]["two_jobs_s"]
    whole = wall_seconds([c for r in timed for c in r["trial_costs"]], 2)
    wall_only = [r["id"] for r in timed if not r.get("cpu_timed")]
    longest = ", ".join(f"{r['id']} ({fmt_minutes(r['two_jobs_s'])})" for r in timed[::-1][:3])
    return (f"With 2 jobs on a loaded 2-core machine the median paper's quick check takes about {fmt_minutes(median)}, "
            f"and all {len(timed)} timed papers about {fmt_minutes(whole)}; the longest are {longest}. "
            f"{len(timed) - len(wall_only)} of them are timed by the CPU seconds of every trial"
            + (f", the other {len(wall_only)} partly by wall times measured on overloaded machines, taken at "
               f"{WALL_ONLY_SHARE:g} of a core" if wall_only else "")
            + ". `reproduce` prints the same estimate for what it is about to run (and one for the machine's load "
            "at that moment), and the report's index gives each paper's.")


def your_runs(mine: list[dict], published: list[dict] | None) -> dict:
    """The overview of the user's own runs: per paper they ran, the scale, the code (git commits), how
    many claims agree with the published verdicts, and each one that differs with both reasons."""
    pub = {r["id"]: {c["id"]: c for c in r["claims"]} for r in published or []}
    papers_run = []
    for r in mine:
        ran = [c for c in r["claims"] if c["scale"] is not None]
        if not ran:
            continue
        agree, differ = 0, []
        for c in ran:
            p = pub.get(r["id"], {}).get(c["id"])
            if p is None or p["scale"] is None:
                continue
            if (p["verdict"], p["scale"]) == (c["verdict"], c["scale"]):
                agree += 1
            else:
                differ.append({"claim": c["id"], "yours": _verdict_label(c), "published": _verdict_label(p),
                               "why": _reason(c) or c.get("note", ""), "published_why": _reason(p) or p.get("note", "")})
        papers_run.append({"id": r["id"], "scales": sorted({c["scale"] for c in ran}), "last_run": r.get("last_run"),
                           "git_commits": r.get("git_commits", []), "claims": len(ran),
                           "compared": agree + len(differ), "agree": agree, "differ": differ,
                           "tally": tally_words(tally(r["claims"]))})
    return {"papers": papers_run, "compared_with": "the published results" if published is not None else None}


def _yours_cell(c: dict) -> str:
    y = c.get("yours")
    if y is None:
        return "–"
    e = html.escape
    text = e(y["label"]) + (" <b>(differs)</b>" if y["differs"] else "")
    ys = dict(c, verdict=y["verdict"], stats=y.get("stats"), note=y["note"], stale=y["stale"])
    reason = _reason(ys)
    st = y.get("stats") or {}
    nums = ""
    if st.get("test"):
        nums = f"effect {st['effect']:+.3g} [{_bound(st['ci_low'])}, {_bound(st['ci_high'])}], p {_fmt(st['pvalue'])}, n {st['n']}"
    return (f"<span class='{_cls(y['label'])}'>{text}</span>" + (f"<br><small>{e(nums)}</small>" if nums else "")
            + (f"<br><small>{e(reason)}</small>" if reason else ""))


SOURCE_WORDS = {"published": "the published results", "yours": "your own runs", "none": "no stored results"}


def _claim_cell(c: dict) -> str:
    """The first cell of a claim row: id, statement, premise and floor notes."""
    e = html.escape
    tags = "".join(f"<span class='tag'>{t}</span>" for t, on in (("premise", c.get("premise")),
                                                                 ("exploratory", c["exploratory"])) if on)
    extra = [w for w in (premise_words(c) if c.get("premises") or c.get("requires") else "",
                         comparator_floor_words(c)) if w]
    if c.get("floor") is not None:
        extra.append(f"method floor: {c['method']} beyond {c['floor']:g}" + (f" ({c['floor_reason']})" if c.get("floor_reason") else ""))
    return (f"<b>{e(c['id'])}</b>{tags}<br>{e(c['statement'])}"
            + (f"<br><i>proxy: {e(c['proxy'])}</i>" if c["proxy"] else "")
            + "".join(f"<br><small>{e(x)}</small>" for x in extra))


COLGROUP = ("<colgroup><col style='width:19%'><col style='width:11%'><col style='width:7%'><col style='width:11%'>"
            "<col style='width:9%'><col style='width:10%'><col style='width:6%'><col style='width:5%'>"
            "<col style='width:5%'><col style='width:17%'>{extra}</colgroup>")


def _paper_page(out: Path, rec: dict, figs: list[str], source: str = "published") -> None:
    e = html.escape
    with_yours = any("yours" in c for c in rec["claims"])

    def rows(claims):
        out_rows = []
        for c in claims:
            cells = claim_cells(c)
            label = _verdict_label(c)
            reason = _reason(c)
            floor = comparator_floor_words(c) if c.get("baseline_floor_expected") and c["verdict"] in REPRODUCED else ""
            out_rows.append(
                f"<tr class='{_cls(label)}' id='claim-{e(c['id'])}'><td>{_claim_cell(c)}</td>"
                f"<td>{e(c['paper_value'])}<br><small>{e(c['source'])}</small></td>"
                f"<td>{e(cells['paper_effect'])}" + (f"<br><small>{e(c['effect_source'])}</small>" if c.get("effect_source") else "")
                + f"</td><td>{e(cells['tested'])}</td><td>{e(cells['measured'])}</td><td>{e(cells['effect'])}</td>"
                f"<td>{e(cells['mde'])}</td><td>{e(cells['p'])}</td><td>{e(cells['n'])}</td>"
                f"<td><b>{e(label)}</b>" + (f"<br><small>{e(reason)}</small>" if reason else "")
                + (f"<br><small class='expected'>{e(floor)}</small>" if floor else "") + "</td>"
                + (f"<td>{_yours_cell(c)}</td>" if with_yours else "") + "</tr>")
        return "".join(out_rows)

    head = ("<tr><th>claim</th><th>paper says</th><th>paper effect</th><th>tested</th><th>measured</th>"
            "<th>effect [one-sided bounds]</th><th>detectable (80% power)</th><th>p (claimed side)</th><th>n</th><th>verdict</th>"
            + ("<th>your run</th>" if with_yours else "") + "</tr>")
    colgroup = COLGROUP.format(extra="<col style='width:14%'>" if with_yours else "")
    claims = [c for c in rec["claims"] if not c.get("premise")]
    premises = [c for c in rec["claims"] if c.get("premise")]
    t = tally(rec["claims"])
    body = (f"<p><a href='../index.html'>all papers</a> · verdicts from {SOURCE_WORDS[source]}"
            + (" (your runs beside them)" if with_yours else "") + f"</p><h1>{e(rec['title'] or rec['id'])}</h1>"
            f"<p>id <code>{rec['id']}</code> · domain {rec['domain']} · "
            + (f"<a href='https://arxiv.org/abs/{e(rec['arxiv'])}'>arXiv {e(rec['arxiv'])}</a>" if rec.get("arxiv") else
               f"<a href='https://openreview.net/search?term={urllib.parse.quote(rec['title'] or rec['id'])}"
               "&amp;group=ICLR.cc%2F2026%2FConference'>the paper on OpenReview</a> (no arXiv version)")
            + (f" · <a href='{e(rec['code'])}'>code</a>" if rec.get("code") else "") + "</p>"
            f"<p class='tally'>{e(tally_words(t))} (quick scale, current code; exploratory claims left out)</p>"
            + (f"<h2>Premises</h2><p><small>What the claims rest on (the method learns the task, the comparator is "
               f"competent): a claim resting on a premise that is not reproduced is inconclusive.</small></p>"
               f"<table class='claims premises'>{colgroup}{head}{rows(premises)}</table><h2>Claims</h2>" if premises else "")
            + f"<table class='claims'>{colgroup}{head}{rows(claims)}</table>"
            "<p><small>Effects are method minus comparator in the metric's units. A verdict is <i>reproduced, smaller</i> "
            "when the claimed direction is significant but the bounds exclude the paper's effect; <i>not reproduced</i> "
            "only when the bounds rule out the paper's effect; <i>inconclusive</i> when the check could not tell, with "
            "what it would take to tell.</small></p>"
            + "".join(f"<p><img src='{f}' alt='{e(f)}'></p>" for f in figs))
    (out / "papers" / f"{rec['id']}.html").write_text(PAGE.format(title=e(rec["id"]), body=body))


def time_cell(r: dict) -> str:
    """A paper's expected quick time with 2 jobs (:func:`.store.wall_seconds`), as the index shows it."""
    if not r.get("runtime_s"):
        return "–"
    return (f"{fmt_minutes(r['two_jobs_s'])} <small>({r['core_s'] / 60:.1f} CPU-min of work; measured wall "
            f"{r['runtime_s'] / 60:.1f} min)</small>" + (" (smoke)" if r.get("runtime_scale") == "smoke" else ""))


def _your_runs_html(yours: dict | None) -> str:
    e = html.escape
    if yours is None:
        return ("<section id='your-runs'><h2>Your runs</h2><p>No store of your own runs was found: "
                "<code>iclr26 reproduce ID --scale quick</code> writes one, and the report then shows your "
                "verdicts beside the published ones.</p></section>")
    if not yours["papers"]:
        return "<section id='your-runs'><h2>Your runs</h2><p>Your store holds no trials yet.</p></section>"
    rows = []
    for p in yours["papers"]:
        code = ", ".join(f"<code>{e(g[:12])}</code>" for g in p["git_commits"][:3]) or "–"
        if yours["compared_with"] is None:
            agree = "–"
        else:
            agree = f"{p['agree']}/{p['compared']}"
        differ = "".join(f"<li><a href='papers/{p['id']}.html#claim-{e(d['claim'])}'>{e(d['claim'])}</a>: yours "
                         f"<span class='{_cls(d['yours'])}'>{e(d['yours'])}</span>, published "
                         f"<span class='{_cls(d['published'])}'>{e(d['published'])}</span>"
                         + (f"<br><small>yours: {e(d['why'])}</small>" if d["why"] else "")
                         + (f"<br><small>published: {e(d['published_why'])}</small>" if d["published_why"] else "")
                         + "</li>" for d in p["differ"])
        rows.append(f"<tr><td><a href='papers/{p['id']}.html'>{p['id']}</a></td><td>{', '.join(p['scales'])}</td>"
                    f"<td>{code}</td><td>{p['last_run'] or '–'}</td><td>{e(p['tally'])}</td><td>{agree}</td>"
                    f"<td>{'<ul>' + differ + '</ul>' if differ else '–'}</td></tr>")
    n_diff = sum(len(p["differ"]) for p in yours["papers"])
    return ("<section id='your-runs'><h2>Your runs</h2>"
            f"<p>{len(yours['papers'])} paper(s) in your store; {n_diff} claim verdict(s) differ from the published "
            "ones.</p><table id='your-runs-table'><colgroup><col style='width:10%'><col style='width:7%'>"
            "<col style='width:11%'><col style='width:9%'><col style='width:16%'><col style='width:7%'><col></colgroup>"
            "<tr><th>paper</th><th>scale</th><th>code (git commit)</th><th>last run</th><th>your verdicts</th>"
            "<th>agree with published</th><th>differ, and why</th></tr>" + "".join(rows) + "</table></section>")


def _index(out: Path, records: list[dict], source: str = "published", yours: dict | None = None) -> None:
    e = html.escape
    rows = []
    for r in records:
        if r["status"] == "implemented":
            link = f"<a href='papers/{r['id']}.html'>{r['id']}</a>"
            cells = "<br>".join(
                f"<span class='{_cls(_verdict_label(c))}' title='{e(_reason(c))}'>{e(c['id'])}: {e(_verdict_label(c))}"
                + (" (premise)" if c.get("premise") else "") + "</span>"
                + (f" <small>(yours: {e(c['yours']['label'])})</small>" if c.get("yours", {}).get("differs") else "")
                for c in r["claims"]) or e(r.get("claims_error", ""))
            cells = (f"<small>{e(tally_words(tally(r['claims'])))}</small><br>" if r["claims"] else "") + cells
        else:
            link, cells = r["id"], "<span class='planned'>planned</span>"
        rows.append(f"<tr><td>{link}</td><td>{r['domain']}</td><td>{r['feasibility']}</td><td>{e(r['summary'])}</td>"
                    f"<td>{r['status']}</td><td>{cells}</td><td>{r.get('last_run') or '–'}</td><td>{time_cell(r)}</td></tr>")
    n_impl = sum(r["status"] == "implemented" for r in records)
    t = {"claims": {k: 0 for k in KINDS}, "premises": {k: 0 for k in KINDS}, "n_claims": 0, "n_premises": 0}
    for r in records:
        one = tally(r["claims"])
        for key in ("claims", "premises"):
            for k, v in one[key].items():
                t[key][k] = t[key].get(k, 0) + v
            t["n_" + key] += one["n_" + key]
    counts = ", ".join(f"<span class='{_cls(k)}'>{t['claims'][k]} {k}</span>" for k in KINDS if k != "not run")
    prem = (f" Premises (counted apart): " + ", ".join(f"{t['premises'][k]} {k}" for k in KINDS if t["premises"][k] and k != "not run")
            + f" of {t['n_premises']}." if t["n_premises"] else "")
    body = (f"<h1>iclr26: {len(records)} ICLR 2026 papers</h1><p>{n_impl} implemented. Verdicts from "
            f"{SOURCE_WORDS[source]}. Quick-scale claims at the current code (premises and exploratory claims left "
            f"out), of {t['n_claims']}: " + counts + "." + prem + "</p>"
            + (_your_runs_html(yours) if source != "none" or yours is not None else "")
            + "<p><img src='overview.png' alt='verdicts by domain'></p>"
            "<table id='papers'><colgroup><col style='width:9%'><col style='width:7%'><col style='width:4%'>"
            "<col style='width:14%'><col style='width:7%'><col style='width:38%'><col style='width:8%'>"
            "<col style='width:13%'></colgroup>"
            "<tr><th>paper</th><th>domain</th><th>feas.</th><th>what</th><th>status</th><th>verdicts</th>"
            "<th>last run</th><th>quick time, 2 jobs on a loaded 2-core machine (every seed)</th></tr>"
            + "".join(rows) + "</table>")
    (out / "index.html").write_text(PAGE.format(title="iclr26 report", body=body))
