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


def store_named(path: str | os.PathLike | None = None) -> bool:
    """Whether the user named the store (``--store`` or ``$ICLR26_STORE``) rather than taking the default."""
    return bool(path) or bool(os.environ.get("ICLR26_STORE"))


def _file_above(path: Path) -> Path | None:
    """The nearest parent of ``path`` that exists and is not a directory, if any."""
    for parent in path.parents:
        if parent.exists():
            return None if parent.is_dir() else parent
    return None


def existing_store(path: str | os.PathLike | None = None) -> Path | None:
    """The user's store for ``info`` and ``report`` to read, or None when the default store does not exist yet.

    :class:`StoreError` when the path is a directory or sits under a file, and when a store the user
    named (``--store`` or ``$ICLR26_STORE``) does not exist: a typo must not render without their runs.
    """
    p = store_path(path)
    if p.is_dir():
        raise StoreError(f"{p} is a directory; give the path of a store file (e.g. {p / 'runs.sqlite'})")
    above = _file_above(p)
    if above is not None:
        raise StoreError(f"no store at {p}: {above} is a file, not a directory")
    if not p.exists():
        if store_named(path):
            how = "--store" if path else "$ICLR26_STORE"
            raise StoreError(f"no store at {p} (named by {how}); `iclr26 reproduce ID --store {p}` creates one")
        return None
    return p


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
    cpu_s: float | None = None  # user + system CPU seconds of run() (the trial's process, all its threads, its waited children)


#: CPU seconds a trial's worker spends outside ``run()``, which its stored seconds leave out: the
#: interpreter's start, the imports of numpy, scipy, torch and the experiment, and hashing the imported
#: modules afterwards (10 crc trials with 2 jobs on the project's shared 2-core machine used 80 CPU-s
#: beyond their ``run()`` seconds)
START_S = 8.0
#: the share of a core a trial stored without CPU seconds is taken to have had: all of them ran on
#: shared, overloaded machines (cda's published trial used 317 CPU-s in 2,677 s, a share of 0.12;
#: crc's took 8-28 s of wall time for 3.5 CPU-s on an idle core), and 0.15 is about the lower decile of
#: CPU / wall over the published trials timed both ways
WALL_ONLY_SHARE = 0.15
#: cores of the machine the expected times are for: the 2-core laptop or CI runner
CORES = 2
#: how much a trial's CPU seconds grow when every core is busy (shared caches and memory bandwidth, SMT
#: siblings): a crc trial used 3.5 CPU-s on an idle core and 10.3-11.6 CPU-s on the full 2-core machine.
#: The stored trials were all measured on a full machine (the project's runs use 2 jobs on 2 cores, most
#: of them beside other work), so their CPU seconds already carry this growth: a forecast for a machine
#: whose cores are not all busy scales them down, never up (crc's published trials, timed at a load of
#: 12-15, used a median 23 CPU-s; the same code used 10-16 CPU-s with 2 jobs on the quiet machine and
#: 10-23 CPU-s at a load of 4.7)
CONTENTION = 1.8
#: the load average besides the run on "a loaded 2-core machine", the one every time in the README and
#: the report is for: one other busy process
NOMINAL_LOAD = 1.0


def core_seconds(durations: list[float], cpu: list[float | None]) -> list[float]:
    """The work of each trial's ``run()`` in CPU seconds, from its wall time and its CPU seconds.

    The CPU seconds (user + system of the worker process, all its threads, and every child it
    waited for: ``getrusage`` ``RUSAGE_SELF`` and ``RUSAGE_CHILDREN``) are what the trial costs;
    they do not grow when the machine is shared, while wall time then grows several times over
    (trials' CPU / wall ratios in the published store run from 0.09 to 1). A trial stored without
    CPU seconds costs :data:`WALL_ONLY_SHARE` of its wall time, and never less than the median of the
    CPU-timed trials of the same set (a trial re-timed on an idle core tells what the others cost).
    """
    timed = [float(c) for c in cpu if c is not None]
    fill = float(sorted(timed)[len(timed) // 2]) if timed else 0.0
    return [float(c) if c is not None else max(fill, WALL_ONLY_SHARE * float(d or 0.0))
            for d, c in zip(durations, cpu)]


def wall_seconds(costs: list[float], n_workers: int, cores: int | None = CORES, load: float | None = None) -> float:
    """Expected wall time of trials costing ``costs`` CPU seconds each of ``run()``, on ``n_workers``.

    This is the one expected time: the README's, the one ``reproduce`` prints before it starts (and
    its progress bar's first ETA), and the report index's. Each trial also pays :data:`START_S` for its
    worker; its CPU seconds, stored from a full machine, shrink by up to :data:`CONTENTION` when cores
    are left idle (a run of 1 job on an otherwise idle 2-core machine). The machine has
    ``cores`` and a load average ``load`` besides the run (None: :data:`NOMINAL_LOAD`, the loaded 2-core
    machine); the run's ``r`` workers then get ``cores * r / (load + r)`` cores between them (all ``r``
    when they fit), and the run takes the larger of its total work over that and its longest trial at
    its own share of a core. ``cores=None``: a cluster with a free CPU per worker.
    """
    if not costs:
        return 0.0
    each = [c + START_S for c in costs]
    r = max(1, min(n_workers, len(each)))
    if cores is None:
        return max(sum(each) / r, max(each))
    runnable = max(load if load is not None else NOMINAL_LOAD, 0.0) + r
    grow = (1.0 + (CONTENTION - 1.0) * min(1.0, runnable / cores)) / CONTENTION
    ours = min(r, cores * r / runnable)  # cores the run's workers get between them
    return grow * max(sum(each) / ours, max(each) * max(1.0, runnable / cores))


def fmt_minutes(seconds: float) -> str:
    """A time as the README, ``reproduce`` and the report print it: "40 s", "3 min", "1.5 h"."""
    if seconds < 90:
        return f"{max(seconds, 1):.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


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
                self.created = not self.path.exists()
                if not self.created and not os.access(self.path, os.W_OK) or not os.access(self.path.parent, os.W_OK):
                    raise self._read_only()
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
        except sqlite3.OperationalError as e:
            if "readonly" in str(e) or "read-only" in str(e):
                raise self._read_only() from None
            raise StoreError(f"{self.path} is not a readable iclr26 store: {e}") from None
        except sqlite3.DatabaseError as e:
            raise StoreError(f"{self.path} is not a readable iclr26 store: {e}") from None
        except PermissionError as e:
            raise StoreError(f"cannot open the store {self.path}: {e}") from None

    _columns = None
    #: whether this opening created the store file
    created = False

    def _read_only(self) -> StoreError:
        return StoreError(f"the store {self.path} is read-only (it, or its folder {self.path.parent}, cannot be "
                          "written): `reproduce` needs a writable --store; `info` and `report` only read it")

    def _write(self, sql: str, args: tuple = ()):
        """Run one writing statement; a read-only store is a :class:`StoreError` naming the file."""
        try:
            return self.conn.execute(sql, args)
        except sqlite3.OperationalError as e:
            if "readonly" in str(e) or "read-only" in str(e):
                raise self._read_only() from None
            raise

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
        self._write(
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

    def durations(self, paper: str, scale: str, fingerprint: str | None = None) -> list[float]:
        """The CPU seconds of ``run()`` (:func:`core_seconds`) of each ok trial of (paper, scale): those at
        ``fingerprint`` (the current code) when there are any, else the latest ok trial of each seed."""
        rows = []
        if fingerprint is not None:
            rows = self.conn.execute(
                "SELECT duration_s, cpu_s FROM trials WHERE paper=? AND scale=? AND fingerprint=? AND status='ok' "
                "AND duration_s IS NOT NULL", (paper, scale, fingerprint)).fetchall()
        if not rows:
            rows = self.conn.execute(
                """SELECT duration_s, cpu_s FROM trials t WHERE paper=? AND scale=? AND status='ok'
                   AND duration_s IS NOT NULL AND finished_at = (SELECT MAX(finished_at) FROM trials u
                   WHERE u.paper=t.paper AND u.scale=t.scale AND u.seed=t.seed AND u.status='ok')""",
                (paper, scale)).fetchall()
        return core_seconds([r[0] for r in rows], [r[1] for r in rows])

    def claim(self, paper: str, scale: str, seed: int, fingerprint: str) -> bool:
        """Claim a trial for this process; False when another live run holds it."""
        host, pid = socket.gethostname(), os.getpid()
        self._write("BEGIN IMMEDIATE")
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

    def holder(self, paper: str, scale: str, seed: int, fingerprint: str) -> tuple[str, int] | None:
        """(host, pid) of the run that has claimed this trial, or None."""
        row = self.conn.execute("SELECT host, pid FROM running WHERE paper=? AND scale=? AND seed=? AND fingerprint=?",
                                (paper, scale, seed, fingerprint)).fetchone()
        return None if row is None else (row[0], int(row[1]))

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
        self._write(
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
