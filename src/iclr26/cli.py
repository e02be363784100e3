"""The iclr26 command: list, info, reproduce, report, models.

`list` and `info` import only the registry and the standard library, so they stay fast.
"""
from __future__ import annotations

import argparse
import os
import sys
import textwrap

from . import registry


def _console():
    from rich.console import Console

    import shutil

    return Console(highlight=False, width=max(shutil.get_terminal_size((140, 24)).columns, 140))


def cmd_list(args) -> int:
    rows = list(registry.papers().values())
    if args.domain:
        rows = [p for p in rows if p.domain == args.domain]
    if args.status:
        rows = [p for p in rows if p.status == args.status]
    width = max(len(p.id) for p in rows) if rows else 10
    print(f"{'id':<{width}}  {'status':<11}  {'domain':<16}  feas  summary")
    for p in rows:
        print(f"{p.id:<{width}}  {p.status:<11}  {p.domain:<16}  {p.feasibility:<4}  {p.summary[:70]}")
    n_impl = sum(p.status == "implemented" for p in registry.papers().values())
    print(f"\n{len(rows)} shown; {n_impl} of {len(registry.papers())} implemented")
    return 0


def _store_for_reading(arg):
    """The user's store that ``info`` and ``report`` read: None when the default one does not exist yet;
    a StoreError (one line, exit 2) when a named one is missing, a directory or under a file."""
    from .harness.store import existing_store

    return existing_store(arg)


def _stats_words(v) -> str:
    s = v.stats
    if s is None:
        return ""
    return (f"effect {s.effect:+.4g} [{s.ci_low:.4g}, {s.ci_high:.4g}], p(claimed direction)={s.pvalue:.3g}, "
            f"p(opposite)={s.pvalue_opposite:.3g}, n={s.n}, detectable {s.mde:+.4g}")


def cmd_info(args) -> int:
    p = registry.get(args.id)
    mine = _store_for_reading(args.store) if p.status == "implemented" else None
    print(f"{p.id}  [{p.status}]  domain={p.domain}  feasibility={p.feasibility} ({registry.FEASIBILITY[p.feasibility]})")
    print(f"seed: {p.seed} #{p.position}")
    print(f"summary: {p.summary}\n")
    print(textwrap.fill(p.abstract, 100) + "\n")
    if p.status != "implemented":
        print(f"not implemented yet: missing {', '.join(p.missing_files)}")
        return 0
    from .harness.experiments import claims_for
    from .harness.report import _claim_entry, comparator_floor_words, premise_words, tally, tally_words, what_it_would_take
    from .harness.store import PUBLISHED_PATH, Store
    from .harness.verdicts import judge_paper

    pc = claims_for(p)
    arxiv = pc.arxiv or "none (no arXiv version; the paper is on OpenReview)"
    print(f"title: {pc.title}\narXiv: {arxiv}   code: {pc.code or '-'}\n")

    sources = []  # (label, judged verdicts by scale and claim)
    for label, path in (("published", PUBLISHED_PATH if PUBLISHED_PATH.is_file() else None), ("yours", mine)):
        if path is None or label == "yours" and PUBLISHED_PATH.is_file() and path.resolve() == PUBLISHED_PATH.resolve():
            continue
        with Store(path, readonly=True) as st:
            sources.append((label, {scale: {v.claim.id: v for v in judge_paper(p, scale, st, save=False)}
                                    for scale in ("smoke", "quick", "paper")}))
    if mine is None:
        from .harness.store import store_path

        print(f"your store {store_path(args.store)} does not exist yet: `iclr26 reproduce {p.id} --scale quick` writes it")
    if not sources:
        print("no stored trials: run `iclr26 reproduce " + p.id + " --scale quick`")
    for label, judged in sources:
        for scale in ("quick", "smoke", "paper"):
            vs = judged[scale]
            if any(v.verdict != "not run" for v in vs.values()):
                entries = []
                for c in pc.claims:
                    e = _claim_entry(c)
                    e.update(verdict=vs[c.id].verdict, scale="quick", stale=None)  # stale: marked on the line
                    entries.append(e)
                stale = any(v.stale for v in vs.values())
                print(f"{label} {scale}: {tally_words(tally(entries))}" + (" [stale]" if stale else ""))
    print()
    for c in pc.claims:
        tags = [t for t, on in (("premise", c.premise), ("exploratory", c.exploratory)) if on]
        print(f"- {c.id}: {c.statement}" + (f"  ({', '.join(tags)})" if tags else ""))
        print(f"    paper: {c.paper_value} ({c.source}); paper effect {c.paper_effect:+.4g}")
        print(f"    test {c.test}, {c.method} {c.direction} {c.comparator}" + (f", margin {c.margin:g}" if c.margin else "")
              + (f", floor {c.floor:g}" if c.floor is not None else "")
              + (", items clustered by seed" if c.cluster == "seed" else ""))
        entry = _claim_entry(c)
        rel = premise_words(dict(entry, premise=False))
        if rel:
            print(f"    {rel}")
        for label, judged in sources:
            for scale in ("smoke", "quick", "paper"):
                v = judged[scale][c.id]
                if v.verdict == "not run":
                    continue
                print(f"    {label} {scale}: {v.verdict}" + (" [stale]" if v.stale else "") + f"  {_stats_words(v)}")
                if v.note and v.verdict != "reproduced" or v.claim.requires and v.note.startswith("significant on its own"):
                    print(f"      reason: {v.note}")
                full = dict(entry, verdict=v.verdict, stats=None if v.stats is None else v.stats.to_dict(), note=v.note)
                need = what_it_would_take(full)
                if need and "would detect" not in v.note:
                    print(f"      {need}")
                floor = comparator_floor_words(full)
                if floor:
                    print(f"      {floor}")
                if v.stale:
                    print(f"      stale: {v.stale}")
    return 0


def _ids(args) -> list[str]:
    if args.all:
        return [p.id for p in registry.implemented()]
    if not args.ids:
        raise SystemExit("name paper ids or pass --all (see `iclr26 list`)")
    for pid in args.ids:
        p = registry.get(pid)
        if p.status != "implemented":
            raise SystemExit(f"{pid} is not implemented yet (missing: {', '.join(p.missing_files)})")
    return list(args.ids)


def print_verdicts(console, verdicts_by_paper, scale: str) -> None:
    from rich.markup import escape
    from rich.table import Table

    from .harness.report import TERMINAL, _claim_entry, _reason, claim_cells

    table = Table(title=f"verdicts at scale {scale}" + (" (smoke: not evidence)" if scale == "smoke" else ""))
    longest = max((len(v.claim.id) for vs in verdicts_by_paper.values() for v in vs), default=10)
    for col in ("paper", "claim", "tested", "paper effect", "effect [one-sided bounds]", "detectable", "p", "n",
                "verdict"):
        # never cut a claim id: it wraps (folds) instead, and the claim column is wide enough for most
        table.add_column(col, overflow="fold", min_width=min(longest, 36) if col == "claim" else None)
    colours = TERMINAL
    for pid, verdicts in verdicts_by_paper.items():
        for v in verdicts:
            entry = _claim_entry(v.claim)
            entry.update(verdict=v.verdict, stale=v.stale, note=v.note, scale=scale,
                         stats=None if v.stats is None else v.stats.to_dict())
            cells = claim_cells(entry)
            reason = _reason(entry)
            label = f"[{colours.get(v.verdict, 'white')}]{v.verdict}[/]" + (escape(" [stale]") if v.stale else "")
            table.add_row(*(escape(x) for x in (pid, v.claim.id + (" (premise)" if v.claim.premise else ""), cells["tested"], cells["paper_effect"], cells["effect"],
                                                 cells["mde"], cells["p"], cells["n"])),
                          label + (f"\n{escape(reason)}" if reason else ""))
    console.print(table)


def _load_now() -> float | None:
    try:
        return os.getloadavg()[0]
    except (AttributeError, OSError):
        return None


class _EstimatedRemaining:
    """The progress bar's ETA: from the estimate until trials finish, then from the rate measured so far.

    Rich's own remaining-time column shows ``-:--:--`` until it has two progress samples within 30 s,
    which for trials of minutes is most of the run. Here the remaining work (in the bar's units, CPU
    seconds) is timed at the slowdown the estimate assumed, and, as trials finish, at the measured
    pace; the two are blended by the share of the work done.
    """

    def __init__(self, seconds_per_unit: float):
        self.seconds_per_unit = seconds_per_unit

    def __call__(self, task) -> str:
        total, done, elapsed = task.total or 0.0, task.completed or 0.0, task.elapsed or 0.0
        left = max(total - done, 0.0)
        prior = left * self.seconds_per_unit
        if done > 0 and elapsed > 0:
            w = done / total if total else 1.0
            remaining = (1 - w) * max(prior, 0.0) + w * left * elapsed / done
        else:
            remaining = max(total * self.seconds_per_unit - elapsed, 0.0)
        if task.finished:
            remaining = 0.0
        m, sec = divmod(int(round(remaining)), 60)
        h, m = divmod(m, 60)
        return f"ETA {h}:{m:02d}:{sec:02d}"


def cmd_reproduce(args) -> int:
    from rich.progress import BarColumn, Progress, ProgressColumn, TaskProgressColumn, TextColumn, TimeElapsedColumn
    from rich.text import Text

    from .harness.runner import estimate_seconds, plan, run_jobs
    from .harness.store import CORES, PUBLISHED_PATH, START_S, Store, fmt_minutes
    from .harness.verdicts import judge_paper

    console = _console()
    ids = _ids(args)
    if args.executor == "ray":
        from .harness.ray_executor import MISSING, ray_available

        if not ray_available():
            print(f"error: {MISSING}", file=sys.stderr)
            return 2
    with Store(args.store) as store:
        console.print(f"store: {store.path}" + (" (a new store, created now)" if store.created else ""))
        jobs, skipped = plan(ids, args.scale, args.seeds, store, args.force)
        if skipped:
            console.print(f"{skipped} trial(s) already in this store at the current code: skipped (--force reruns them)")
        reference = None
        if PUBLISHED_PATH.is_file():
            try:
                reference = Store(PUBLISHED_PATH, readonly=True)
            except Exception:  # noqa: BLE001 - the estimate is a courtesy
                reference = None
        ray_cluster = args.executor == "ray" and (args.address or os.environ.get("RAY_ADDRESS"))
        where = "on the Ray cluster" if ray_cluster else f"with {args.jobs} job(s)"
        cores, load = os.cpu_count() or 1, _load_now()
        total, per = estimate_seconds(jobs, reference, args.jobs)  # the nominal time, as the README and report give it
        here = None
        if total is not None and not ray_cluster:
            here = estimate_seconds(jobs, reference, args.jobs, cores=cores, load=load)[0]
        elif total is not None:
            total = estimate_seconds(jobs, reference, args.jobs, cores=None)[0]
        if reference is not None:
            reference.close()
        if jobs:
            if total is None:
                console.print(f"{len(jobs)} trial(s) to run {where}; no published durations to estimate from")
            elif ray_cluster:
                console.print(f"{len(jobs)} trial(s) to run {where}: about {fmt_minutes(total)} if the cluster has "
                              f"{args.jobs} free CPUs (from the published trials' CPU seconds)")
            else:
                line = (f"{len(jobs)} trial(s) to run {where}: about {fmt_minutes(total)} on a loaded {CORES}-core "
                        "machine (the time the README and the report give, from the published trials' CPU seconds)")
                if here is not None and load is not None and fmt_minutes(here) != fmt_minutes(total):
                    line += f"; at this machine's load now ({load:.1f} on {cores} cores) about {fmt_minutes(here)}"
                console.print(line)
        fill = sorted(per.values())[len(per) // 2] if per else 60.0
        failures, left_to_others = 0, []
        weights = {(j.paper, j.scale): per.get((j.paper, j.scale), fill) + START_S for j in jobs}
        units = sum(weights[(j.paper, j.scale)] for j in jobs) or 1
        eta = _EstimatedRemaining(((here or total) / units) if total else 0.0)

        class EtaColumn(ProgressColumn):
            def render(self, task):
                return Text(eta(task), style="progress.remaining")

        with Progress(TextColumn("{task.description}"), BarColumn(), TaskProgressColumn(), TimeElapsedColumn(),
                      EtaColumn(), console=console, transient=False) as prog:
            task = prog.add_task(f"{args.scale} trials", total=units)

            def on_trial(t):
                nonlocal failures
                prog.advance(task, weights.get((t.paper, t.scale), fill))
                msg = f"{t.paper} seed {t.seed}: {t.status} in {t.duration_s:.1f}s, peak {t.peak_mem_mb:.0f} MB"
                if t.status != "ok":
                    failures += 1
                    msg += "\n    " + (t.error or "").strip().splitlines()[-1][:300]
                prog.console.print(msg)

            def on_skip(job):
                left_to_others.append(job)
                prog.advance(task, weights.get((job.paper, job.scale), fill))

            finished = run_jobs(jobs, store, n_workers=args.jobs, timeout=args.timeout, progress=on_trial,
                                executor=args.executor, address=args.address, skipped=on_skip)
        held = None
        if left_to_others:
            holders = sorted({h for j in left_to_others
                              if (h := store.holder(j.paper, j.scale, j.seed, j.fingerprint)) is not None})
            held = ", ".join(f"pid {pid} on {host}" for host, pid in holders) or "a run that has since finished"
            console.print(f"{len(left_to_others)} trial(s) are being run by another run on this store ({held}): "
                          "left to it; rerun this command when it ends to judge them")
        verdicts = {pid: judge_paper(pid, args.scale, store) for pid in ids}
    if jobs and not finished and left_to_others:
        console.print(f"nothing was run by this process: every one of the {len(jobs)} trial(s) to run is held by "
                      f"another run on {store.path} ({held})")
        if any(v.verdict != "not run" for vs in verdicts.values() for v in vs):
            print_verdicts(console, verdicts, args.scale)
        return 3
    print_verdicts(console, verdicts, args.scale)
    errors = sum(v.verdict == "error" for vs in verdicts.values() for v in vs)
    if errors:
        console.print(f"{errors} verdict(s) are errors: a stored trial of this scale failed or lacks a measurement")
    return 1 if failures or errors else 0


def cmd_publish(args) -> int:
    """Copy the current trials of the named papers from the user's store into the published results."""
    from .harness.experiments import folder_fingerprint, staleness
    from .harness.store import PUBLISHED_PATH, Store

    ids = _ids(args)
    copied = 0
    with Store(args.store, readonly=True) as src, Store(PUBLISHED_PATH) as dst:
        for pid in ids:
            fp = folder_fingerprint(registry.get(pid))
            for t in src.trials_at(pid, args.scale, fp):
                if t.status == "ok" and staleness(t, fp) is None:
                    dst.put_trial(t)
                    copied += 1
    print(f"published {copied} trial(s) at the current code into {PUBLISHED_PATH}; "
          "`iclr26 report --readmes` regenerates the claim tables")
    return 0


def cmd_report(args) -> int:
    from .harness.report import build_report
    from .harness.store import PUBLISHED_PATH

    mine = _store_for_reading(args.store)
    if mine is None:
        from .harness.store import store_path

        print(f"your store {store_path(args.store)} does not exist yet: the report shows the published results only")

    out = build_report(args.out, store_path=args.store, published_path=args.published or PUBLISHED_PATH,
                       write_readmes=args.readmes)
    print(f"report written to {out}/index.html (also summary.json and summary.md)"
          + (f"; your runs from {mine}" if mine is not None else ""))
    return 0


def cmd_models(args) -> int:
    try:
        from .models import catalog as models
    except ImportError as e:
        raise SystemExit(f"the language-model extra is not installed ({e}); pip install 'iclr26[llm]'")
    if args.action == "list":
        for m in models.available_models():
            print("  ".join(f"{k}={v}" for k, v in m.items()))
    else:
        for name in args.names or [m["name"] for m in models.available_models() if m.get("installed")]:
            print(f"{name}: {models.prepare(name)}")
    return 0


STORE_HELP = "your result store (default: $ICLR26_STORE, else ~/.local/share/iclr26/runs.sqlite)"


def _positive_seconds(text: str) -> float:
    import math

    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected seconds, got {text!r}") from None
    if not (v > 0 and math.isfinite(v)):
        raise argparse.ArgumentTypeError(f"must be a positive number of seconds, got {text}")
    return v


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="iclr26", description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="command", required=True)
    p = sub.add_parser("list", help="all 76 papers with their status")
    p.add_argument("--domain")
    p.add_argument("--status", choices=("implemented", "planned"))
    p.set_defaults(func=cmd_list)
    p = sub.add_parser("info", help="abstract, claims and last verdicts of one paper")
    p.add_argument("id")
    p.add_argument("--store", help=STORE_HELP)
    p.set_defaults(func=cmd_info)
    p = sub.add_parser("reproduce", help="run experiments and store trials and verdicts")
    p.add_argument("ids", nargs="*")
    p.add_argument("--all", action="store_true", help="every implemented paper")
    p.add_argument("--scale", choices=("smoke", "quick", "paper"), default="quick")
    p.add_argument("--seeds", type=int, help="trials per paper (default: the experiment's SEEDS)")
    p.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="worker processes (default: all cores)")
    p.add_argument("--timeout", type=_positive_seconds, default=3600.0,
                   help="seconds per trial, counted from the start of run() (default 3600)")
    p.add_argument("--force", action="store_true", help="rerun trials already stored at the current code")
    p.add_argument("--store", help=STORE_HELP)
    p.add_argument("--executor", choices=("local", "ray"), default="local",
                   help="local process pool (default) or a Ray cluster")
    p.add_argument("--address", help="Ray cluster address, or 'auto' (with --executor ray; default: $RAY_ADDRESS, "
                   "else a local instance with --jobs CPUs)")
    p.set_defaults(func=cmd_reproduce)
    p = sub.add_parser("publish", help="maintainers: copy current trials from your store into results/")
    p.add_argument("ids", nargs="*")
    p.add_argument("--all", action="store_true", help="every implemented paper")
    p.add_argument("--scale", choices=("smoke", "quick", "paper"), default="quick")
    p.add_argument("--store", help=STORE_HELP)
    p.set_defaults(func=cmd_publish)
    p = sub.add_parser("report", help="render the static site, JSON and Markdown summaries")
    p.add_argument("--out", default="site")
    p.add_argument("--store", help=STORE_HELP + "; shown beside the published verdicts")
    p.add_argument("--published", help="the published results (default: results/iclr26.sqlite of the source tree)")
    p.add_argument("--readmes", action="store_true",
                   help="maintainers: rewrite the claim tables in the READMEs from the published results")
    p.set_defaults(func=cmd_report)
    p = sub.add_parser("models", help="bundled language models: list or prepare (convert and cache)")
    p.add_argument("action", choices=("list", "prepare"))
    p.add_argument("names", nargs="*")
    p.set_defaults(func=cmd_models)
    return ap


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    if getattr(args, "seeds", None) is not None and args.seeds < 1:
        raise SystemExit("--seeds must be >= 1")
    if getattr(args, "jobs", None) is not None and args.jobs < 1:
        raise SystemExit("--jobs must be >= 1")
    try:
        rc = args.func(args)
        sys.stdout.flush()  # a closed pipe shows up here, not at interpreter exit
        return rc
    except KeyError as e:
        print(f"error: {e.args[0]}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # output piped into a reader that stopped early (`iclr26 list | head`)
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error at exit
        return 0
    except Exception as e:  # noqa: BLE001 - store and file problems: one line, no traceback
        import sqlite3

        from .harness.store import StoreError

        missing_ray = type(e).__name__ == "RayMissing"  # --executor ray without Ray: one line
        if isinstance(e, (StoreError, sqlite3.DatabaseError, OSError)) or missing_ray:
            print(f"error: {e}", file=sys.stderr)
            return 2
        raise


if __name__ == "__main__":
    sys.exit(main())
