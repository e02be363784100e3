"""The ``iclr26`` command: list, info, reproduce, report, models.

``list`` and ``info`` import only the registry and the standard library, so they stay fast.
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


def cmd_info(args) -> int:
    p = registry.get(args.id)
    print(f"{p.id}  [{p.status}]  domain={p.domain}  feasibility={p.feasibility} ({registry.FEASIBILITY[p.feasibility]})")
    print(f"seed: {p.seed} #{p.position}")
    print(f"summary: {p.summary}\n")
    print(textwrap.fill(p.abstract, 100) + "\n")
    if p.status != "implemented":
        print(f"not implemented yet: missing {', '.join(p.missing_files)}")
        return 0
    from .harness.experiments import claims_for
    from .harness.store import Store

    pc = claims_for(p)
    print(f"title: {pc.title}\narXiv: {pc.arxiv}   code: {pc.code or '-'}\n")
    from .harness.verdicts import judge_paper

    with Store(args.store) as st:
        judged = {scale: {v.claim.id: v for v in judge_paper(p, scale, st, save=False)}
                  for scale in ("smoke", "quick", "paper")}
    for c in pc.claims:
        print(f"- {c.id}: {c.statement}" + ("  (exploratory)" if c.exploratory else ""))
        print(f"    paper: {c.paper_value} ({c.source}); paper effect {c.paper_effect:+.4g}")
        print(f"    test {c.test}, {c.method} {c.direction} {c.comparator}" + (f", margin {c.margin:g}" if c.margin else "")
              + (f", floor {c.floor:g}" if c.floor is not None else "")
              + (f", items clustered by seed" if c.cluster == "seed" else ""))
        for scale in ("smoke", "quick", "paper"):
            v = judged[scale][c.id]
            if v.verdict == "not run":
                continue
            s = v.stats
            eff = (f"effect {s.effect:+.4g} [{s.ci_low:.4g}, {s.ci_high:.4g}], p={s.pvalue:.3g}, n={s.n}, "
                   f"detectable {s.mde:+.4g}") if s else ""
            print(f"    {scale}: {v.verdict}" + (" [stale]" if v.stale else "") + f"  {eff}")
            if v.note and v.verdict != "reproduced" or v.claim.requires and v.note.startswith("significant on its own"):
                print(f"      reason: {v.note}")
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

    from .harness.report import _claim_entry, _reason, claim_cells

    table = Table(title=f"verdicts at scale {scale}" + (" (smoke: not evidence)" if scale == "smoke" else ""))
    for col in ("paper", "claim", "tested", "paper effect", "effect [one-sided bounds]", "detectable", "p", "n",
                "verdict"):
        table.add_column(col)
    colours = {"reproduced": "green", "not reproduced": "yellow", "inconclusive": "blue", "contradicted": "red",
               "error": "red"}
    for pid, verdicts in verdicts_by_paper.items():
        for v in verdicts:
            entry = _claim_entry(v.claim)
            entry.update(verdict=v.verdict, stale=v.stale, note=v.note, scale=scale,
                         stats=None if v.stats is None else v.stats.to_dict())
            cells = claim_cells(entry)
            reason = _reason(entry)
            label = f"[{colours.get(v.verdict, 'white')}]{v.verdict}[/]" + (escape(" [stale]") if v.stale else "")
            table.add_row(*(escape(x) for x in (pid, v.claim.id, cells["tested"], cells["paper_effect"], cells["effect"],
                                                 cells["mde"], cells["p"], cells["n"])),
                          label + (f"\n{escape(reason)}" if reason else ""))
    console.print(table)


def cmd_reproduce(args) -> int:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from .harness.runner import plan, run_jobs
    from .harness.store import Store
    from .harness.verdicts import judge_paper

    console = _console()
    ids = _ids(args)
    with Store(args.store) as store:
        jobs, skipped = plan(ids, args.scale, args.seeds, store, args.force)
        if skipped:
            console.print(f"{skipped} trial(s) already stored at the current code: skipped (use --force to rerun)")
        failures = 0
        with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                      console=console, transient=False) as prog:
            task = prog.add_task(f"{args.scale} trials", total=len(jobs))

            def on_trial(t):
                nonlocal failures
                prog.advance(task)
                msg = f"{t.paper} seed {t.seed}: {t.status} in {t.duration_s:.1f}s, peak {t.peak_mem_mb:.0f} MB"
                if t.status != "ok":
                    failures += 1
                    msg += "\n    " + (t.error or "").strip().splitlines()[-1][:300]
                prog.console.print(msg)

            run_jobs(jobs, store, n_workers=args.jobs, timeout=args.timeout, progress=on_trial)
        verdicts = {pid: judge_paper(pid, args.scale, store) for pid in ids}
    print_verdicts(console, verdicts, args.scale)
    return 1 if failures else 0


def cmd_report(args) -> int:
    from .harness.report import build_report

    out = build_report(args.out, store_path=args.store, write_readmes=not args.no_readmes)
    print(f"report written to {out}/index.html (also summary.json and summary.md)")
    return 0


def cmd_models(args) -> int:
    try:
        from . import models
    except ImportError as e:
        raise SystemExit(f"the language-model extra is not installed ({e}); pip install 'iclr26[llm]'")
    if args.action == "list":
        for m in models.available_models():
            print("  ".join(f"{k}={v}" for k, v in m.items()))
    else:
        for name in args.names or [m["name"] for m in models.available_models() if m.get("installed")]:
            print(f"{name}: {models.prepare(name)}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="iclr26", description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="command", required=True)
    p = sub.add_parser("list", help="all 76 papers with their status")
    p.add_argument("--domain")
    p.add_argument("--status", choices=("implemented", "planned"))
    p.set_defaults(func=cmd_list)
    p = sub.add_parser("info", help="abstract, claims and last verdicts of one paper")
    p.add_argument("id")
    p.add_argument("--store", help="result database (default: $ICLR26_STORE or results/iclr26.sqlite)")
    p.set_defaults(func=cmd_info)
    p = sub.add_parser("reproduce", help="run experiments and store trials and verdicts")
    p.add_argument("ids", nargs="*")
    p.add_argument("--all", action="store_true", help="every implemented paper")
    p.add_argument("--scale", choices=("smoke", "quick", "paper"), default="quick")
    p.add_argument("--seeds", type=int, help="trials per paper (default: the experiment's SEEDS)")
    p.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="worker processes (default: all cores)")
    p.add_argument("--timeout", type=float, default=3600.0, help="seconds per trial (default 3600)")
    p.add_argument("--force", action="store_true", help="rerun trials already stored at the current code")
    p.add_argument("--store", help="result database (default: $ICLR26_STORE or results/iclr26.sqlite)")
    p.set_defaults(func=cmd_reproduce)
    p = sub.add_parser("report", help="render the static site, JSON and Markdown summaries")
    p.add_argument("--out", default="site")
    p.add_argument("--store")
    p.add_argument("--no-readmes", action="store_true", help="do not rewrite the claim tables in paper READMEs")
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


if __name__ == "__main__":
    sys.exit(main())
