"""The report: a static site (index of all papers + a page per paper with claim tables and plots),
``summary.json``, ``summary.md``, and the claim table inside each paper's README.

Verdicts are re-judged from the stored trials. Each is shown with the scale it came from, the
paper's effect, the bounds the test inverts, the smallest effect the check could detect, and its
reason; a verdict whose measured code (paper folder, imported project modules, package versions)
changed since its trials ran is marked stale, with the reason. Smoke verdicts never count as
evidence and are only shown where no quick verdict exists.
"""
from __future__ import annotations

import html
import urllib.parse
import json
import math
import time
from pathlib import Path

import numpy as np

from ..registry import Paper, papers
from .experiments import claims_for, folder_fingerprint
from .store import Store, core_seconds, wall_seconds
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
            "floor": c.floor, "exploratory": c.exploratory, "requires": list(c.requires),
            "verdict": "not run", "scale": None, "stale": None, "stats": None, "note": ""}


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
               "two_jobs_s": None, "last_run": None}
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
                rec["two_jobs_s"] = float(wall_seconds(core, 2))
                rec["last_run"] = time.strftime("%Y-%m-%d %H:%M", time.gmtime(max(t.finished_at for t in runs)))
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


def plot_claim(path: Path, claim, values) -> None:
    """Left: arm means with 95% intervals; right: paired differences with the effect's interval."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    x = np.asarray(values.method_values, dtype=float)
    y = None if values.baseline_values is None else np.asarray(values.baseline_values, dtype=float)
    fig, axes = plt.subplots(1, 2, figsize=(8, 3.2))
    arms = [(claim.method, x)] + ([(claim.baseline, y)] if y is not None else [])
    for i, (name, v) in enumerate(arms):
        m = v.mean()
        half = 1.96 * v.std(ddof=1) / math.sqrt(v.size) if v.size > 1 else 0
        axes[0].errorbar([i], [m], yerr=[half], fmt="o", capsize=6, color=f"C{i}")
        if v.size <= 50:
            axes[0].scatter(np.full(v.size, i) + np.linspace(-0.15, 0.15, v.size), v, s=10, alpha=0.5, color=f"C{i}")
    if y is None:
        axes[0].axhline(claim.baseline_value, color="grey", ls="--", label=f"constant {claim.baseline_value:g}")
        axes[0].legend(fontsize=8)
    if y is not None and y.size <= 50:  # each pair's line joins its two jittered points
        jitter = np.linspace(-0.15, 0.15, x.size)
        for j, a, b in zip(jitter, x, y):
            axes[0].plot([0 + j, 1 + j], [a, b], color="grey", alpha=0.2, lw=0.8)
    axes[0].set_xticks(range(len(arms)), [a for a, _ in arms], fontsize=8)
    axes[0].set_title(f"{claim.metric} ({claim.unit}: n={x.size}"
                      + (", clustered by seed" if values.clusters is not None else "") + ")", fontsize=9)
    d = x - (y if y is not None else claim.baseline_value)
    if np.unique(d).size > 2:
        axes[1].hist(d, bins=min(30, max(5, d.size // 3)), color="C2", alpha=0.7)
    else:
        vals, counts = np.unique(d, return_counts=True)
        axes[1].bar(vals, counts, width=0.3, color="C2", alpha=0.7)
    st = values.stats
    if st is not None:
        lo = st.ci_low if math.isfinite(st.ci_low) else float(d.min())
        hi = st.ci_high if math.isfinite(st.ci_high) else float(d.max())
        axes[1].axvspan(lo, hi, color="C3", alpha=0.2, label=f"{100 * (1 - st.alpha):.0f}% one-sided bounds")
        axes[1].axvline(st.effect, color="C3", label=f"effect {st.effect:+.3g}")
    axes[1].axvline(0, color="black", lw=0.8)
    for m in {claim.margin, -claim.margin} - {0.0}:
        axes[1].axvline(m, color="grey", ls=":", lw=0.8)
    axes[1].legend(fontsize=7)
    axes[1].set_title(f"paired difference: {values.verdict}", fontsize=9)
    fig.suptitle(claim.id, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


PAGE = """<!doctype html><html><head><meta charset="utf-8"><title>{title}</title>
<style>body{{font-family:system-ui,sans-serif;max-width:1100px;margin:2em auto;padding:0 1em}}
table{{border-collapse:collapse;width:100%;font-size:14px}}td,th{{border:1px solid #ccc;padding:4px 6px;vertical-align:top}}
.reproduced{{background:#d9f2d9}}.notreproduced{{background:#fff3cd}}.inconclusive{{background:#e7eef7}}.contradicted,.error{{background:#f8d7da}}
.notrun,.planned{{color:#888}}img{{max-width:100%}}</style></head><body>{body}</body></html>"""


def _cls(v: str) -> str:
    return v.split(" (")[0].split(" [")[0].replace(" ", "")


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
    from .store import StoreError
    from .store import store_path as user_path

    out = Path(out)
    try:
        (out / "papers").mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise OSError(f"cannot write the report to {out}: {e}") from None
    pub = Path(published_path) if published_path else None
    user = user_path(store_path)
    sources = []
    if pub is not None and pub.is_file():
        sources.append(("published", pub))
    if user.is_file() and not (pub is not None and pub.is_file() and user.resolve() == pub.resolve()):
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
                                  "note": y["note"], "differs": (y["verdict"], y["scale"]) != (c["verdict"], c["scale"])}
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
            if values is not None and values.method_values:
                name = f"{p.id}__{c.id}.png"
                plot_claim(out / "papers" / name, c, values)
                figs.append(name)
                entry["figure"] = f"papers/{name}"
        _paper_page(out, rec, figs, primary)
        if write_readmes:
            update_readme(p, rec)
    overview(out / "overview.png", records)
    _index(out, records, primary)
    if write_readmes:
        _update_block(Path(__file__).resolve().parents[3] / "README.md", "summary", summary_markdown(records))
    summary = {"source": primary, "papers": records}
    (out / "summary.json").write_text(json.dumps(_json_clean(summary), indent=1, default=str, allow_nan=False))
    (out / "summary.md").write_text(summary_markdown(records))
    return out


def overview(path: Path, records: list[dict]) -> None:
    """One picture of the index: verdicts of the counted claims, by domain (stacked bars)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    kinds = ("reproduced", "not reproduced", "inconclusive", "contradicted", "error", "not run")
    colours = ("#5cb85c", "#f0ad4e", "#7fa7d6", "#d9534f", "#8b0000", "#cccccc")
    domains = sorted({r["domain"] for r in records if r["status"] == "implemented"})
    counts = {k: [sum(c["verdict"] == k and not c["exploratory"] for r in records if r["domain"] == d
                      for c in r["claims"]) for d in domains] for k in kinds}
    fig, ax = plt.subplots(figsize=(8, 3.8))
    left = np.zeros(len(domains))
    for k, col in zip(kinds, colours):
        ax.barh(domains, counts[k], left=left, color=col, label=k)
        left += counts[k]
    ax.set_xlabel("claims (exploratory ones left out)")
    ax.legend(fontsize=7, ncol=6, loc="upper center", bbox_to_anchor=(0.5, -0.22), frameon=False)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def summary_markdown(records: list[dict]) -> str:
    lines = ["| paper | domain | status | claims reproduced (quick, current code) | verdicts |", "|---|---|---|---|---|"]
    for r in records:
        if r["status"] != "implemented":
            lines.append(f"| {r['id']} | {r['domain']} | planned | – | – |")
            continue
        counted = [c for c in r["claims"] if not c["exploratory"]]
        n_rep = sum(c["verdict"] == "reproduced" and c["scale"] == "quick" and not c["stale"] for c in counted)
        verdicts = "; ".join(f"{c['id']}: {_verdict_label(c)}" for c in r["claims"])
        lines.append(f"| {r['id']} | {r['domain']} | implemented | {n_rep}/{len(counted)} | {verdicts} |")
    return "\n".join(lines) + "\n"


def _yours_cell(c: dict) -> str:
    y = c.get("yours")
    if y is None:
        return "–"
    e = html.escape
    text = e(y["label"]) + (" <b>(differs)</b>" if y["differs"] else "")
    reason = "; ".join(x for x in (y["note"] if y["verdict"] != "reproduced" else "",
                                   f"stale: {y['stale']}" if y["stale"] else "") if x)
    return f"<span class='{_cls(y['label'])}'>{text}</span>" + (f"<br><small>{e(reason)}</small>" if reason else "")


SOURCE_WORDS = {"published": "the published results", "yours": "your own runs", "none": "no stored results"}


def _paper_page(out: Path, rec: dict, figs: list[str], source: str = "published") -> None:
    e = html.escape
    rows = []
    with_yours = any("yours" in c for c in rec["claims"])
    for c in rec["claims"]:
        cells = claim_cells(c)
        label = _verdict_label(c)
        reason = _reason(c)
        rows.append(f"<tr class='{_cls(label)}'><td><b>{e(c['id'])}</b><br>{e(c['statement'])}"
                    + (f"<br><i>proxy: {e(c['proxy'])}</i>" if c["proxy"] else "")
                    + f"</td><td>{e(c['paper_value'])}<br><small>{e(c['source'])}</small></td>"
                    f"<td>{e(cells['paper_effect'])}" + (f"<br><small>{e(c['effect_source'])}</small>" if c.get("effect_source") else "")
                    + f"</td><td>{e(cells['tested'])}</td><td>{e(cells['measured'])}</td><td>{e(cells['effect'])}</td>"
                    f"<td>{e(cells['mde'])}</td><td>{e(cells['p'])}</td><td>{e(cells['n'])}</td>"
                    f"<td>{e(label)}" + (f"<br><small>{e(reason)}</small>" if reason else "") + "</td>"
                    + (f"<td>{_yours_cell(c)}</td>" if with_yours else "") + "</tr>")
    body = (f"<p><a href='../index.html'>all papers</a> · verdicts from {SOURCE_WORDS[source]}"
            + (" (your runs beside them)" if with_yours else "") + f"</p><h1>{e(rec['title'] or rec['id'])}</h1>"
            f"<p>id <code>{rec['id']}</code> · domain {rec['domain']} · "
            + (f"<a href='https://arxiv.org/abs/{e(rec['arxiv'])}'>arXiv {e(rec['arxiv'])}</a>" if rec.get("arxiv") else
               f"<a href='https://openreview.net/search?term={urllib.parse.quote(rec['title'] or rec['id'])}"
               "&amp;group=ICLR.cc%2F2026%2FConference'>the paper on OpenReview</a> (no arXiv version)")
            + (f" · <a href='{e(rec['code'])}'>code</a>" if rec.get("code") else "") + "</p>"
            "<table><tr><th>claim</th><th>paper says</th><th>paper effect</th><th>tested</th><th>measured</th>"
            "<th>effect [one-sided bounds]</th><th>detectable (80% power)</th><th>p</th><th>n</th><th>verdict</th>"
            + ("<th>your run</th>" if with_yours else "") + "</tr>"
            + "".join(rows) + "</table>"
            "<p><small>Effects are method minus comparator in the metric's units. A verdict is <i>not reproduced</i> "
            "only when the bounds rule out the paper's effect; <i>inconclusive</i> when the check could not tell.</small></p>"
            + "".join(f"<p><img src='{f}'></p>" for f in figs))
    (out / "papers" / f"{rec['id']}.html").write_text(PAGE.format(title=e(rec["id"]), body=body))


def _index(out: Path, records: list[dict], source: str = "published") -> None:
    e = html.escape
    rows = []
    for r in records:
        if r["status"] == "implemented":
            link = f"<a href='papers/{r['id']}.html'>{r['id']}</a>"
            cells = "<br>".join(
                f"<span class='{_cls(_verdict_label(c))}' title='{e(_reason(c))}'>{e(c['id'])}: {e(_verdict_label(c))}</span>"
                + (f" <small>(yours: {e(c['yours']['label'])})</small>" if c.get("yours", {}).get("differs") else "")
                for c in r["claims"]) or e(r.get("claims_error", ""))
        else:
            link, cells = r["id"], "<span class='planned'>planned</span>"
        rt = (f"{r['two_jobs_s'] / 60:.1f} min <small>({r['core_s'] / 60:.1f} min on one core; measured wall "
              f"{r['runtime_s'] / 60:.1f} min" + (f", CPU {r['cpu_s'] / 60:.1f} min" if r.get("cpu_s") else "") + ")</small>"
              + (" (smoke)" if r.get("runtime_scale") == "smoke" else "")
              if r.get("runtime_s") else "–")
        rows.append(f"<tr><td>{link}</td><td>{r['domain']}</td><td>{r['feasibility']}</td><td>{e(r['summary'])}</td>"
                    f"<td>{r['status']}</td><td>{cells}</td><td>{r.get('last_run') or '–'}</td><td>{rt}</td></tr>")
    n_impl = sum(r["status"] == "implemented" for r in records)
    claims = [c for r in records for c in r["claims"] if c["scale"] == "quick" and not c["stale"] and not c["exploratory"]]
    counts = {v: sum(c["verdict"] == v for c in claims)
              for v in ("reproduced", "not reproduced", "inconclusive", "contradicted", "error")}
    body = (f"<h1>iclr26: {len(records)} ICLR 2026 papers</h1><p>{n_impl} implemented. Verdicts from "
            f"{SOURCE_WORDS[source]}. Quick-scale claims at the current code (exploratory ones left out): "
            + ", ".join(f"{v} {k}" for k, v in counts.items()) + "</p><p><img src='overview.png' alt='verdicts by domain'></p>"
            "<table><tr><th>paper</th><th>domain</th><th>feas.</th><th>what</th><th>status</th><th>verdicts</th>"
            "<th>last run</th><th>quick time with 2 jobs (every seed; a trial costs its CPU time, at most its "
            "measured wall time)</th></tr>" + "".join(rows) + "</table>")
    (out / "index.html").write_text(PAGE.format(title="iclr26 report", body=body))
