"""Record the dependencies of stored trials that ran before the worker recorded them.

For each such trial, the project modules its experiment can import are found statically (every
``import`` of an ``iclr26`` module, inside functions too, followed transitively from the paper's
``experiment.py``: a superset of what ran), and each is hashed **as it was at the trial's git
commit**. The number-changing packages are those the closure imports, at the versions the trial
stored. Judging then compares with the files now, so a trial whose shared code changed since its
commit shows as stale. Files inside the paper's own folder are taken as they are now when the
trial's folder fingerprint equals the current one (that fingerprint proves they are unchanged).

A trial that ran on a checkout with uncommitted changes (``+dirty``) is hashed at its commit too.
That is conservative in one direction only: a dependency that differs between that commit and now is
reported stale even if the uncommitted change was that very edit; one that is equal at the commit and
now could only have run differently if an uncommitted edit was made and later reverted.

    python tools/backfill_deps.py [--store results/iclr26.sqlite] [--dry-run]
"""
from __future__ import annotations

import argparse
import ast
import hashlib
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from iclr26.harness.experiments import (NOT_MEASURED, NUMERIC_PACKAGES, PACKAGE_ROOT, file_hash,  # noqa: E402
                                        folder_fingerprint)
from iclr26.harness.store import Store  # noqa: E402
from iclr26.registry import get  # noqa: E402


def _module_file(name: str) -> Path | None:
    if name == "iclr26":
        return PACKAGE_ROOT / "__init__.py"
    rel = Path(*name.split(".")[1:])
    for cand in (PACKAGE_ROOT / rel.with_suffix(".py"), PACKAGE_ROOT / rel / "__init__.py"):
        if cand.is_file():
            return cand
    return None


def static_closure(module: str) -> tuple[set[str], set[str]]:
    """Project files (relative to the package root) and top-level packages reachable by imports."""
    files, packages, todo, seen = set(), set(), [module], set()
    while todo:
        name = todo.pop()
        if name in seen or name.startswith(NOT_MEASURED):
            continue
        seen.add(name)
        path = _module_file(name)
        if path is None:
            continue
        files.add(str(path.relative_to(PACKAGE_ROOT)))
        parts = name.split(".")
        # importing a.b.c runs a/__init__ and a/b/__init__ first
        for i in range(1, len(parts)):
            todo.append(".".join(parts[:i]))
        pkg = parts if path.name == "__init__.py" else parts[:-1]
        for node in ast.walk(ast.parse(path.read_text())):
            targets = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = ".".join(pkg[: len(pkg) - node.level + 1]) if node.level else ""
                mod = node.module or ""
                full = f"{base}.{mod}".strip(".") if node.level else mod
                targets = [full] + [f"{full}.{a.name}" for a in node.names]
            for t in targets:
                top = t.split(".")[0]
                if top == "iclr26":
                    todo.append(t)
                elif top in NUMERIC_PACKAGES:
                    packages.add(NUMERIC_PACKAGES[top])
    return files, packages


def hash_at(commit: str, rel: str) -> str | None:
    out = subprocess.run(["git", "show", f"{commit}:src/iclr26/{rel}"], cwd=ROOT, capture_output=True)
    return hashlib.sha256(out.stdout).hexdigest()[:16] if out.returncode == 0 else None


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--store")
    ap.add_argument("--dry-run", action="store_true")
    args = ap.parse_args(argv)
    closures: dict[str, tuple[set[str], set[str]]] = {}
    done = skipped = 0
    with Store(args.store) as store:
        for t in store.all_trials():
            if t.deps is not None:
                continue
            commit = (t.git_commit or "").removesuffix("+dirty")
            if not commit:
                skipped += 1
                continue
            if t.paper not in closures:
                closures[t.paper] = static_closure(f"{get(t.paper).module}.experiment")
            files, packages = closures[t.paper]
            paper = get(t.paper)
            in_folder = str(paper.folder.relative_to(PACKAGE_ROOT)) + "/"
            same_folder = t.fingerprint == folder_fingerprint(paper)
            # the folder fingerprint proves the paper's own files equal the current ones
            hashes = {rel: (file_hash(PACKAGE_ROOT / rel) if same_folder and rel.startswith(in_folder) else None)
                      or hash_at(commit, rel) or "absent" for rel in sorted(files)}
            deps = {"files": hashes,
                    "packages": {p: t.versions[p] for p in sorted(packages) if p in t.versions},
                    "backfilled_from": t.git_commit}
            if not args.dry_run:
                store.set_deps(t, deps)
            done += 1
    print(f"recorded dependencies of {done} trial(s); {skipped} without a commit left unrecorded (stale)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
