"""Move stored trials from byte hashes to code hashes (docstrings and comments do not count).

Trials stored before code hashing carry a folder fingerprint over the bytes of the paper folder and
byte hashes of the modules they imported. For each such trial this tool finds the exact files the
trial measured and re-hashes them as code:
- the paper folder: its files now, or the folder at the trial's git commit or at any later commit
  that touched it (a trial run on a checkout with uncommitted changes ran what was committed next),
  whichever has exactly the stored byte fingerprint;
- each imported module: the version of the file (now, or at any commit that touched it) whose byte
  hash is the stored one (16 hex digits of sha256: a match identifies the content).
Only what is proven identical by its byte hash is migrated; anything else keeps its byte hash and is
judged as before (stale where it changed). Nothing is re-run and no measurement changes.

    python tools/migrate_code_hashes.py [--store results/iclr26.sqlite] [--dry-run]
"""
from __future__ import annotations

import argparse
import hashlib
import json
import subprocess
import sys
from functools import lru_cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from iclr26.harness.experiments import (PACKAGE_ROOT, code_hash_of, folder_fingerprint_of,  # noqa: E402
                                        legacy_folder_fingerprint_of)
from iclr26.harness.store import COLUMNS, Store  # noqa: E402
from iclr26.registry import papers  # noqa: E402


@lru_cache(maxsize=None)
def _git_tree(commit: str, folder: str) -> tuple[str, ...]:
    out = subprocess.run(["git", "ls-tree", "-r", "--name-only", commit, "--", folder], cwd=ROOT,
                         capture_output=True, text=True)
    return tuple(out.stdout.split()) if out.returncode == 0 else ()


@lru_cache(maxsize=None)
def _git_show(commit: str, path: str) -> bytes | None:
    out = subprocess.run(["git", "show", f"{commit}:{path}"], cwd=ROOT, capture_output=True)
    return out.stdout if out.returncode == 0 else None


@lru_cache(maxsize=None)
def _commits_touching(path: str) -> tuple[str, ...]:
    out = subprocess.run(["git", "log", "--format=%H", "--", path], cwd=ROOT, capture_output=True, text=True)
    return tuple(out.stdout.split()) if out.returncode == 0 else ()


@lru_cache(maxsize=None)
def _versions(path: str) -> dict[str, bytes]:
    """Every committed version of ``src/iclr26/<path>`` and the file now, by byte hash."""
    found = {}
    now = PACKAGE_ROOT / path
    if now.is_file():
        data = now.read_bytes()
        found[_sha(data)] = data
    for commit in _commits_touching(f"src/iclr26/{path}"):
        data = _git_show(commit, f"src/iclr26/{path}")
        if data is not None:
            found.setdefault(_sha(data), data)
    return found


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:16]


def _folder_files_now(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*")
            if p.is_file() and "__pycache__" not in p.parts}


def _folder_files_at(commit: str, folder: Path) -> dict[str, bytes]:
    rel_folder = str(folder.relative_to(ROOT))
    files = {}
    for path in _git_tree(commit, rel_folder):
        data = _git_show(commit, path)
        if data is not None:
            files[str(Path(path).relative_to(rel_folder))] = data
    return files


def migrate(store_path: Path, dry_run: bool = False) -> dict:
    counts = {"trials": 0, "folder_migrated": 0, "folder_kept": 0, "modules_migrated": 0, "modules_kept": 0,
              "already": 0}
    folders = {p.id: p.folder for p in papers().values()}
    now_cache: dict[str, dict[str, bytes]] = {}
    with Store(store_path) as st:
        rows = st.conn.execute(f"SELECT {COLUMNS} FROM trials").fetchall()
        updates = []
        for row in rows:
            t = Store._trial(row)
            counts["trials"] += 1
            deps = t.deps or {}
            commit = (t.git_commit or "").split("+")[0]
            new_fp = t.fingerprint
            folder = folders.get(t.paper)
            if folder is not None and t.fingerprint == folder_fingerprint_of(
                    now_cache.setdefault(t.paper, _folder_files_now(folder))):
                folder = None  # already the code fingerprint of the folder now
            if folder is not None:
                now = now_cache.setdefault(t.paper, _folder_files_now(folder))
                files = now if legacy_folder_fingerprint_of(now) == t.fingerprint else None
                candidates = ([commit] if commit else []) + list(_commits_touching(str(folder.relative_to(ROOT))))
                for c in candidates:
                    if files is not None:
                        break
                    at = _folder_files_at(c, folder)
                    files = at if at and legacy_folder_fingerprint_of(at) == t.fingerprint else None
                if files is not None:
                    new_fp = folder_fingerprint_of(files)
                    counts["folder_migrated"] += 1
                else:
                    counts["folder_kept"] += 1
            new_deps = t.deps
            if "code" in deps:
                counts["already"] += 1
            elif t.deps is not None:
                code = {}
                for rel, h in t.deps.get("files", {}).items():
                    data = _versions(rel).get(h)
                    if data is not None:
                        code[rel] = code_hash_of(rel, data)
                        counts["modules_migrated"] += 1
                    else:
                        counts["modules_kept"] += 1
                new_deps = {**t.deps, "code": code}
            if new_fp != t.fingerprint or new_deps is not t.deps:
                updates.append((t, new_fp, new_deps))
        if dry_run:
            return counts
        groups: dict[tuple, list] = {}
        for t, new_fp, new_deps in updates:
            groups.setdefault((t.paper, t.scale, t.seed, new_fp), []).append((t, new_deps))
        with st.conn:  # one transaction: every row moves or none does
            for (paper, scale, seed, new_fp), members in groups.items():
                # trials of one seed that differed only in docstrings now share a fingerprint: keep the
                # latest, as a rerun at the same code would have replaced the earlier one
                existing = st.conn.execute("SELECT finished_at FROM trials WHERE paper=? AND scale=? AND seed=? "
                                           "AND fingerprint=?", (paper, scale, seed, new_fp)).fetchone()
                keep_t, keep_deps = max(members, key=lambda m: m[0].finished_at or 0)
                untouched = existing is not None and all(m[0].fingerprint != new_fp for m in members)
                for t, _ in members:
                    st.conn.execute("DELETE FROM trials WHERE paper=? AND scale=? AND seed=? AND fingerprint=?",
                                    (t.paper, t.scale, t.seed, t.fingerprint))
                if untouched and (existing[0] or 0) >= (keep_t.finished_at or 0):
                    counts["superseded"] = counts.get("superseded", 0) + len(members)
                    continue
                counts["superseded"] = counts.get("superseded", 0) + len(members) - 1
                st.conn.execute("DELETE FROM trials WHERE paper=? AND scale=? AND seed=? AND fingerprint=?",
                                (paper, scale, seed, new_fp))
                moved = type(keep_t)(**{**keep_t.__dict__, "fingerprint": new_fp, "deps": keep_deps})
                st.conn.execute(
                    f"INSERT INTO trials ({COLUMNS}) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                    (moved.paper, moved.scale, moved.seed, moved.fingerprint, moved.status,
                     None if moved.measurements is None else json.dumps(moved.measurements),
                     moved.error, moved.duration_s, moved.peak_mem_mb, moved.git_commit,
                     json.dumps(moved.versions), json.dumps(moved.machine), moved.finished_at,
                     None if moved.deps is None else json.dumps(moved.deps), moved.cpu_s))
            st.conn.execute("DELETE FROM verdicts")  # judged again from the trials on the next report
    return counts


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--store", default=str(ROOT / "results" / "iclr26.sqlite"))
    ap.add_argument("--dry-run", action="store_true")
    args = ap.parse_args(argv)
    print(json.dumps(migrate(Path(args.store), args.dry_run), indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
