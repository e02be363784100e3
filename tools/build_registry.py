"""Rebuild ``src/iclr26/registry.json`` from the seed abstract lists and the paper index.

Usage: python tools/build_registry.py [SHARED_DIR]   (default: ../shared)

The seed files are the source of truth for which papers exist (one abstract per paragraph after
the heading line); the index table gives each abstract's id, domain, CPU feasibility and a short
description. The JSON is committed, so the installed package never needs the shared folder.
"""
from __future__ import annotations

import json
import re
import sys
from pathlib import Path

ROW = re.compile(r"^\|\s*(\w+)\s*\|\s*(\d{3})\s*\|\s*(\d+)\s*\|\s*(\w+)\s*\|\s*([ABCD])\s*\|\s*(.+?)\s*\|$")


def main(shared: Path) -> None:
    seeds = {p.name[:3]: p for p in sorted((shared / "seeds").glob("*.txt"))}
    abstracts = {}
    for prefix, path in seeds.items():
        paras = [p.strip() for p in re.split(r"\n\s*\n", path.read_text()) if p.strip()]
        abstracts[prefix] = (path.name, paras[1:])  # paras[0] is the list's heading
    entries = []
    for line in (shared / "INDEX.md").read_text().splitlines():
        m = ROW.match(line.strip())
        if not m:
            continue
        pid, seed, pos, domain, feas, what = m.groups()
        seed_file, paras = abstracts[seed]
        entries.append(
            dict(id=pid, seed=seed_file, position=int(pos), domain=domain, feasibility=feas,
                 summary=what, abstract=paras[int(pos) - 1])
        )
    n_abstracts = sum(len(v[1]) for v in abstracts.values())
    if len(entries) != n_abstracts:
        raise SystemExit(f"index has {len(entries)} rows but the seeds hold {n_abstracts} abstracts")
    out = Path(__file__).resolve().parents[1] / "src" / "iclr26" / "registry.json"
    out.write_text(json.dumps(entries, indent=1, ensure_ascii=False) + "\n")
    print(f"wrote {len(entries)} entries to {out}")


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).resolve().parents[2] / "shared"))
