"""The result store: one embedded SQLite database (WAL mode), one row per finished trial.

A trial is (paper, scale, seed) at a code fingerprint. Each row is committed as soon as the trial
ends, so an interrupted run loses nothing; the unique key makes a rerun replace rather than
duplicate a row.
"""
from __future__ import annotations

import json
import os
import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path

DEFAULT_PATH = Path("results") / "iclr26.sqlite"

SCHEMA = """
CREATE TABLE IF NOT EXISTS trials (
    paper TEXT NOT NULL,
    scale TEXT NOT NULL,
    seed INTEGER NOT NULL,
    fingerprint TEXT NOT NULL,
    status TEXT NOT NULL CHECK (status IN ('ok', 'error', 'timeout')),
    measurements TEXT,
    error TEXT,
    duration_s REAL,
    peak_mem_mb REAL,
    git_commit TEXT,
    versions TEXT,
    machine TEXT,
    finished_at REAL NOT NULL,
    deps TEXT,
    PRIMARY KEY (paper, scale, seed, fingerprint)
);
CREATE TABLE IF NOT EXISTS verdicts (
    paper TEXT NOT NULL,
    scale TEXT NOT NULL,
    claim TEXT NOT NULL,
    fingerprint TEXT NOT NULL,
    verdict TEXT NOT NULL,
    stats TEXT,
    seeds TEXT,
    computed_at REAL NOT NULL,
    PRIMARY KEY (paper, scale, claim)
);
"""


COLUMNS = ("paper, scale, seed, fingerprint, status, measurements, error, duration_s, peak_mem_mb, "
           "git_commit, versions, machine, finished_at, deps")


def store_path(path: str | os.PathLike | None = None) -> Path:
    """The store's path: the argument, else ``$ICLR26_STORE``, else ``results/iclr26.sqlite``."""
    return Path(path or os.environ.get("ICLR26_STORE") or DEFAULT_PATH)


@dataclass(frozen=True)
class Trial:
    paper: str
    scale: str
    seed: int
    fingerprint: str
    status: str
    measurements: dict | None
    error: str | None
    duration_s: float
    peak_mem_mb: float
    git_commit: str
    versions: dict
    machine: dict
    finished_at: float
    deps: dict | None = None  # {"files": {path: sha}, "packages": {dist: version}} measured after run()


class Store:
    """Thin wrapper over the SQLite file; safe to open from several processes at once."""

    def __init__(self, path: str | os.PathLike | None = None):
        self.path = store_path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.conn = sqlite3.connect(self.path, timeout=60, isolation_level=None)
        self.conn.execute("PRAGMA journal_mode=WAL")
        self.conn.execute("PRAGMA synchronous=NORMAL")
        self.conn.executescript(SCHEMA)
        cols = {r[1] for r in self.conn.execute("PRAGMA table_info(trials)")}
        if "deps" not in cols:  # a store written before dependencies were recorded
            self.conn.execute("ALTER TABLE trials ADD COLUMN deps TEXT")

    def close(self) -> None:
        self.conn.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def put_trial(self, t: Trial) -> None:
        """Insert or replace one trial row and commit at once."""
        self.conn.execute(
            f"INSERT OR REPLACE INTO trials ({COLUMNS}) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
            (t.paper, t.scale, t.seed, t.fingerprint, t.status,
             None if t.measurements is None else json.dumps(t.measurements),
             t.error, t.duration_s, t.peak_mem_mb, t.git_commit,
             json.dumps(t.versions), json.dumps(t.machine), t.finished_at,
             None if t.deps is None else json.dumps(t.deps)),
        )

    def set_deps(self, t: Trial, deps: dict | None) -> None:
        """Record the dependencies of a stored trial (used to backfill trials stored before they were recorded)."""
        self.conn.execute("UPDATE trials SET deps=? WHERE paper=? AND scale=? AND seed=? AND fingerprint=?",
                          (None if deps is None else json.dumps(deps), t.paper, t.scale, t.seed, t.fingerprint))

    def get_trial(self, paper: str, scale: str, seed: int, fingerprint: str) -> Trial | None:
        row = self.conn.execute(
            f"SELECT {COLUMNS} FROM trials WHERE paper=? AND scale=? AND seed=? AND fingerprint=?",
            (paper, scale, seed, fingerprint)).fetchone()
        return None if row is None else self._trial(row)

    def all_trials(self) -> list[Trial]:
        return [self._trial(r) for r in self.conn.execute(f"SELECT {COLUMNS} FROM trials ORDER BY paper, scale, seed")]

    def has_ok(self, paper: str, scale: str, seed: int, fingerprint: str) -> bool:
        row = self.conn.execute(
            "SELECT 1 FROM trials WHERE paper=? AND scale=? AND seed=? AND fingerprint=? AND status='ok'",
            (paper, scale, seed, fingerprint),
        ).fetchone()
        return row is not None

    def latest_trials(self, paper: str, scale: str) -> list[Trial]:
        """The most recent trial per seed for this paper and scale (any fingerprint)."""
        rows = self.conn.execute(
            f"""SELECT {COLUMNS} FROM trials t WHERE paper=? AND scale=? AND finished_at = (
                   SELECT MAX(finished_at) FROM trials u
                   WHERE u.paper=t.paper AND u.scale=t.scale AND u.seed=t.seed)
               ORDER BY seed""",
            (paper, scale),
        ).fetchall()
        return [self._trial(r) for r in rows]

    def trials_at(self, paper: str, scale: str, fingerprint: str) -> list[Trial]:
        rows = self.conn.execute(
            f"SELECT {COLUMNS} FROM trials WHERE paper=? AND scale=? AND fingerprint=? ORDER BY seed",
            (paper, scale, fingerprint),
        ).fetchall()
        return [self._trial(r) for r in rows]

    @staticmethod
    def _trial(r) -> Trial:
        return Trial(
            paper=r[0], scale=r[1], seed=r[2], fingerprint=r[3], status=r[4],
            measurements=json.loads(r[5]) if r[5] else None, error=r[6], duration_s=r[7],
            peak_mem_mb=r[8], git_commit=r[9], versions=json.loads(r[10] or "{}"),
            machine=json.loads(r[11] or "{}"), finished_at=r[12],
            deps=json.loads(r[13]) if r[13] else None,
        )

    def put_verdict(self, paper: str, scale: str, claim: str, fingerprint: str, verdict: str,
                    stats: dict | None, seeds: list[int]) -> None:
        self.conn.execute(
            "INSERT OR REPLACE INTO verdicts VALUES (?,?,?,?,?,?,?,?)",
            (paper, scale, claim, fingerprint, verdict, json.dumps(stats), json.dumps(seeds), time.time()),
        )

    def verdicts(self, paper: str, scale: str | None = None) -> list[dict]:
        q = "SELECT paper, scale, claim, fingerprint, verdict, stats, seeds, computed_at FROM verdicts WHERE paper=?"
        args: tuple = (paper,)
        if scale:
            q += " AND scale=?"
            args += (scale,)
        out = []
        for r in self.conn.execute(q, args).fetchall():
            out.append(dict(paper=r[0], scale=r[1], claim=r[2], fingerprint=r[3], verdict=r[4],
                            stats=json.loads(r[5]) if r[5] else None, seeds=json.loads(r[6]),
                            computed_at=r[7]))
        return out
