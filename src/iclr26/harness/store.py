"""The result store: one embedded SQLite database (WAL mode), one row per finished trial.

A trial is (paper, scale, seed) at a code fingerprint. Each row is committed as soon as the trial
ends, so an interrupted run loses nothing; the unique key makes a rerun replace rather than
duplicate a row. A trial in progress is claimed in the ``running`` table, so that two runs on one
store do not both run it.

Two stores are kept apart: the **published results** (``results/iclr26.sqlite`` in the source
tree, written only by ``iclr26 publish``) and **the user's own runs** (``$ICLR26_STORE``, else
``$XDG_DATA_HOME/iclr26/runs.sqlite``, else ``~/.local/share/iclr26/runs.sqlite``), which
``reproduce`` writes by default.
"""
from __future__ import annotations

import json
import os
import socket
import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path

#: the published results, in the source tree (absent from an installed wheel)
PUBLISHED_PATH = Path(__file__).resolve().parents[3] / "results" / "iclr26.sqlite"
#: how long a claim by a run on another machine is honoured (its process cannot be checked from here)
FOREIGN_CLAIM_S = 24 * 3600

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
    cpu_s REAL,
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
CREATE TABLE IF NOT EXISTS running (
    paper TEXT NOT NULL,
    scale TEXT NOT NULL,
    seed INTEGER NOT NULL,
    fingerprint TEXT NOT NULL,
    host TEXT NOT NULL,
    pid INTEGER NOT NULL,
    started_at REAL NOT NULL,
    PRIMARY KEY (paper, scale, seed, fingerprint)
);
"""


COLUMNS = ("paper, scale, seed, fingerprint, status, measurements, error, duration_s, peak_mem_mb, "
           "git_commit, versions, machine, finished_at, deps, cpu_s")


class StoreError(RuntimeError):
    """A store that cannot be opened or read; the message names the path and what is wrong."""


def user_store_path() -> Path:
    """The user's own runs: ``$ICLR26_STORE``, else the user's data directory."""
    if os.environ.get("ICLR26_STORE"):
        return Path(os.environ["ICLR26_STORE"]).expanduser()
    base = Path(os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share")
    return base / "iclr26" / "runs.sqlite"


def store_path(path: str | os.PathLike | None = None) -> Path:
    """The store's path: the argument, else the user's store (:func:`user_store_path`)."""
    return Path(path).expanduser() if path else user_store_path()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


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
    cpu_s: float | None = None  # user + system CPU seconds of run() (the trial's process and its children)


def core_seconds(durations: list[float], cpu: list[float | None]) -> list[float]:
    """What each trial takes on a core of its own, from its wall time and its CPU seconds.

    Trials are single-threaded, so on an unloaded core the wall time is about the CPU time, while a
    wall time measured on a shared, overloaded machine overstates it several times over. A trial with
    CPU seconds costs them, capped by its wall time (a trial that used several threads took no longer
    than that); where some trials of a paper have CPU seconds and others (stored before they were
    recorded) do not, those others cost the median of the CPU-timed ones; with none CPU-timed, the
    wall times are all there is.
    """
    timed = [min(d, c) for d, c in zip(durations, cpu) if c is not None]
    if not timed:
        return [float(d) for d in durations]
    fill = float(sorted(timed)[len(timed) // 2])
    return [float(min(d, c)) if c is not None else fill for d, c in zip(durations, cpu)]


def wall_seconds(costs: list[float], n_workers: int) -> float:
    """The wall time of trials costing ``costs`` seconds each on ``n_workers`` cores: the larger of
    their total shared over the workers and the longest single trial (which cannot be split)."""
    return max(sum(costs) / max(n_workers, 1), max(costs))


class Store:
    """Thin wrapper over the SQLite file; safe to open from several processes at once."""

    def __init__(self, path: str | os.PathLike | None = None, readonly: bool = False):
        """Open (and, unless ``readonly``, create) the store; :class:`StoreError` says what is wrong."""
        self.path = store_path(path)
        self.readonly = readonly
        if self.path.is_dir():
            raise StoreError(f"{self.path} is a directory; give the path of a store file (e.g. {self.path / 'runs.sqlite'})")
        try:
            if readonly:
                if not self.path.is_file():
                    raise StoreError(f"no store at {self.path}")
                self.conn = sqlite3.connect(f"file:{self.path}?mode=ro", uri=True, timeout=60, isolation_level=None)
                try:
                    self.conn.execute("SELECT COUNT(*) FROM sqlite_master").fetchone()
                except sqlite3.OperationalError:  # WAL in a folder it cannot write: read the file as it is
                    self.conn.close()
                    self.conn = sqlite3.connect(f"file:{self.path}?immutable=1", uri=True, isolation_level=None)
            else:
                try:
                    self.path.parent.mkdir(parents=True, exist_ok=True)
                except (FileExistsError, NotADirectoryError):
                    raise StoreError(f"cannot create the store {self.path}: a parent of it is a file") from None
                self.conn = sqlite3.connect(self.path, timeout=60, isolation_level=None)
                self.conn.execute("PRAGMA journal_mode=WAL")
                self.conn.execute("PRAGMA synchronous=NORMAL")
                self.conn.executescript(SCHEMA)
            cols = {r[1] for r in self.conn.execute("PRAGMA table_info(trials)")}
            if not cols:
                raise StoreError(f"{self.path} is an SQLite file but not an iclr26 store (no trials table)")
            # columns added after the first stores were written: dependencies, then CPU seconds
            for col, kind in (("deps", "TEXT"), ("cpu_s", "REAL")):
                if col not in cols:
                    if readonly:
                        self._columns = self.columns.replace(f", {col}", ", NULL")
                    else:
                        self.conn.execute(f"ALTER TABLE trials ADD COLUMN {col} {kind}")
            self.conn.execute("SELECT COUNT(*) FROM trials").fetchone()
        except sqlite3.DatabaseError as e:
            raise StoreError(f"{self.path} is not a readable iclr26 store: {e}") from None
        except PermissionError as e:
            raise StoreError(f"cannot open the store {self.path}: {e}") from None

    _columns = None

    @property
    def columns(self) -> str:
        return self._columns or COLUMNS

    def close(self) -> None:
        self.conn.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def put_trial(self, t: Trial) -> None:
        """Insert or replace one trial row and commit at once."""
        self.conn.execute(
            f"INSERT OR REPLACE INTO trials ({COLUMNS}) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
            (t.paper, t.scale, t.seed, t.fingerprint, t.status,
             None if t.measurements is None else json.dumps(t.measurements),
             t.error, t.duration_s, t.peak_mem_mb, t.git_commit,
             json.dumps(t.versions), json.dumps(t.machine), t.finished_at,
             None if t.deps is None else json.dumps(t.deps), t.cpu_s),
        )

    def set_deps(self, t: Trial, deps: dict | None) -> None:
        """Record the dependencies of a stored trial (used to backfill trials stored before they were recorded)."""
        self.conn.execute("UPDATE trials SET deps=? WHERE paper=? AND scale=? AND seed=? AND fingerprint=?",
                          (None if deps is None else json.dumps(deps), t.paper, t.scale, t.seed, t.fingerprint))

    def get_trial(self, paper: str, scale: str, seed: int, fingerprint: str) -> Trial | None:
        row = self.conn.execute(
            f"SELECT {self.columns} FROM trials WHERE paper=? AND scale=? AND seed=? AND fingerprint=?",
            (paper, scale, seed, fingerprint)).fetchone()
        return None if row is None else self._trial(row)

    def durations(self, paper: str, scale: str) -> list[float]:
        """How long each ok trial stored for (paper, scale), at any code, takes on a core of its own
        (:func:`core_seconds`)."""
        rows = self.conn.execute(
            "SELECT duration_s, cpu_s FROM trials WHERE paper=? AND scale=? AND status='ok' AND duration_s IS NOT NULL",
            (paper, scale)).fetchall()
        return core_seconds([r[0] for r in rows], [r[1] for r in rows])

    def claim(self, paper: str, scale: str, seed: int, fingerprint: str) -> bool:
        """Claim a trial for this process; False when another live run holds it."""
        host, pid = socket.gethostname(), os.getpid()
        self.conn.execute("BEGIN IMMEDIATE")
        try:
            row = self.conn.execute(
                "SELECT host, pid, started_at FROM running WHERE paper=? AND scale=? AND seed=? AND fingerprint=?",
                (paper, scale, seed, fingerprint)).fetchone()
            if row is not None and not (row[0] == host and row[1] == pid):
                held = _alive(row[1]) if row[0] == host else time.time() - row[2] < FOREIGN_CLAIM_S
                if held:
                    self.conn.execute("ROLLBACK")
                    return False
            self.conn.execute("INSERT OR REPLACE INTO running VALUES (?,?,?,?,?,?,?)",
                              (paper, scale, seed, fingerprint, host, pid, time.time()))
            self.conn.execute("COMMIT")
            return True
        except BaseException:
            self.conn.execute("ROLLBACK")
            raise

    def release(self, paper: str, scale: str, seed: int, fingerprint: str) -> None:
        self.conn.execute("DELETE FROM running WHERE paper=? AND scale=? AND seed=? AND fingerprint=? AND pid=? AND host=?",
                          (paper, scale, seed, fingerprint, os.getpid(), socket.gethostname()))

    def all_trials(self) -> list[Trial]:
        return [self._trial(r) for r in self.conn.execute(f"SELECT {self.columns} FROM trials ORDER BY paper, scale, seed")]

    def has_ok(self, paper: str, scale: str, seed: int, fingerprint: str) -> bool:
        row = self.conn.execute(
            "SELECT 1 FROM trials WHERE paper=? AND scale=? AND seed=? AND fingerprint=? AND status='ok'",
            (paper, scale, seed, fingerprint),
        ).fetchone()
        return row is not None

    def latest_trials(self, paper: str, scale: str) -> list[Trial]:
        """The most recent trial per seed for this paper and scale (any fingerprint)."""
        rows = self.conn.execute(
            f"""SELECT {self.columns} FROM trials t WHERE paper=? AND scale=? AND finished_at = (
                   SELECT MAX(finished_at) FROM trials u
                   WHERE u.paper=t.paper AND u.scale=t.scale AND u.seed=t.seed)
               ORDER BY seed""",
            (paper, scale),
        ).fetchall()
        return [self._trial(r) for r in rows]

    def trials_at(self, paper: str, scale: str, fingerprint: str) -> list[Trial]:
        rows = self.conn.execute(
            f"SELECT {self.columns} FROM trials WHERE paper=? AND scale=? AND fingerprint=? ORDER BY seed",
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
            deps=json.loads(r[13]) if r[13] else None, cpu_s=r[14],
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
