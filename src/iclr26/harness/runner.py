"""Run trials (paper, scale, seed) in worker processes and commit each one as it finishes.

Each trial runs in a fresh spawned process (clean memory accounting, a hard per-trial timeout),
at most ``jobs`` at once. Trials already stored with status ``ok`` at the current code are skipped
unless ``force`` is set, so an interrupted run resumes where it stopped. A trial in progress is
claimed in the store, so a second run on the same store skips it instead of running it twice.
Workers die with the process that started them, so a killed run leaves no orphan behind.

The executor is pluggable: the local process pool (default) or Ray (:mod:`.ray_executor`). Either
reports each finished trial to the driver, which alone writes the store.
"""
from __future__ import annotations

import math
import multiprocessing as mp
import os
import platform
import resource
import sys
import threading
import time
import traceback
from dataclasses import dataclass
from importlib import metadata

from ..registry import get
from .experiments import (check_measurements, folder_fingerprint, git_commit, load_experiment,
                          measured_dependencies, staleness)
from .store import CORES, Store, Trial, wall_seconds

VERSIONED = ("numpy", "scipy", "torch", "transformers", "scikit-learn", "iclr26")
#: seconds a worker may take to start and import its experiment before run() begins
LOAD_LIMIT = 900.0


def package_versions() -> dict:
    out = {"python": platform.python_version()}
    for name in VERSIONED:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            pass
    return out


def machine() -> dict:
    return {"system": platform.system(), "machine": platform.machine(),
            "processor": platform.processor(), "cpus": os.cpu_count()}


def _die_with_parent(parent_pid: int) -> None:
    """Make this worker exit when its parent dies (kill -9 included), so no trial outlives its run."""
    if sys.platform.startswith("linux"):
        try:
            import ctypes
            import signal

            ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
        except OSError:
            pass

    def watch():  # portable fallback: a reparented worker has lost its parent
        while True:
            if os.getppid() != parent_pid:
                os._exit(1)
            time.sleep(0.5)

    threading.Thread(target=watch, daemon=True).start()
    if os.getppid() != parent_pid:  # the parent died before the watch started
        os._exit(1)


def execute_trial(paper_id: str, scale: str, seed: int, started=None) -> tuple:
    """Run one trial here and return (status, measurements, error, seconds, peak MB, deps, CPU seconds).

    ``started`` is called just before ``run()``, when the trial's clock starts. The CPU seconds (user +
    system, of this process and its finished children) do not grow when other work shares the machine,
    unlike the wall seconds, so they measure a trial's cost on a busy machine. ``deps`` is taken
    after ``run()`` returns, so it covers every project module the experiment imported, lazily
    imported ones included, and the number-changing packages it used.
    """
    start, cpu0 = time.perf_counter(), _cpu_seconds()
    try:
        mod = load_experiment(get(paper_id))
        if started is not None:
            started()
        start, cpu0 = time.perf_counter(), _cpu_seconds()
        result = check_measurements(mod.run(scale, seed))
        status, err = "ok", None
    except BaseException:  # noqa: BLE001 - every failure becomes a stored error row
        result, status, err = None, "error", traceback.format_exc(limit=20)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB -> MiB on Linux
    seconds, cpu = time.perf_counter() - start, _cpu_seconds() - cpu0
    return status, result, err, seconds, peak, measured_dependencies(), cpu


def _cpu_seconds() -> float:
    """User + system CPU seconds of this process and of its waited-for children."""
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def _worker(paper_id: str, scale: str, seed: int, conn, parent_pid: int) -> None:
    """Child process body: announce the start of run(), then send the trial's outcome."""
    _die_with_parent(parent_pid)
    outcome = execute_trial(paper_id, scale, seed, started=lambda: conn.send(("started",)))
    try:
        conn.send(("done",) + outcome)
    except Exception as e:  # noqa: BLE001 - a result that cannot be sent is stored with its cause
        conn.send(("done", "error", None, f"the trial's result could not be sent to the runner: "
                   f"{type(e).__name__}: {e}", *outcome[3:]))
    conn.close()


@dataclass
class Job:
    paper: str
    scale: str
    seed: int
    fingerprint: str


def plan(paper_ids, scale: str, seeds: int | None, store: Store, force: bool) -> tuple[list[Job], int]:
    """The jobs still to run, and how many were skipped because they are already stored at the current
    code (the paper folder, every project module the trial imported, and its package versions)."""
    from .experiments import seeds_for

    jobs, skipped = [], 0
    for pid in paper_ids:
        paper = get(pid)
        n = seeds if seeds is not None else seeds_for(paper, scale)
        fp = folder_fingerprint(paper)
        for seed in range(n):
            if not force:
                t = store.get_trial(pid, scale, seed, fp)
                if t is not None and t.status == "ok" and staleness(t, fp) is None:
                    skipped += 1
                    continue
            jobs.append(Job(pid, scale, seed, fp))
    return jobs, skipped


def estimate_seconds(jobs: list[Job], reference: Store | None, n_workers: int, cores: int | None = CORES,
                     load: float | None = None) -> tuple[float | None, dict]:
    """Expected wall time of ``jobs`` on ``n_workers`` from the trials stored in ``reference``.

    Each job costs the median CPU seconds of its (paper, scale)'s stored trials at the job's code (else
    their latest trials; :meth:`Store.durations`), a job of a paper with none the median of the known
    ones; :func:`.store.wall_seconds` adds each worker's start and the machine's slowdown (the nominal
    loaded 2-core machine, or ``load`` and ``cores`` as measured). Returns (seconds, or None when no
    job has a stored duration; {(paper, scale): CPU seconds per trial}).
    """
    per: dict = {}
    if reference is not None:
        for paper, scale, fp in {(j.paper, j.scale, j.fingerprint) for j in jobs}:
            d = reference.durations(paper, scale, fp)
            if d:
                per[(paper, scale)] = float(sorted(d)[len(d) // 2])
    known = [per[(j.paper, j.scale)] for j in jobs if (j.paper, j.scale) in per]
    if not known:
        return None, per
    fill = float(sorted(known)[len(known) // 2])
    costs = [per.get((j.paper, j.scale), fill) for j in jobs]
    return wall_seconds(costs, n_workers, cores, load), per


def local_execute(jobs: list[Job], n_workers: int, timeout: float | None, on_done, should_stop=None) -> None:
    """Run ``jobs`` in spawned processes, at most ``n_workers`` at once; ``on_done(job, *outcome)`` per trial."""
    ctx = mp.get_context("spawn")
    pending = list(jobs)
    running: list[dict] = []
    me = os.getpid()
    try:
        while pending or running:
            while pending and len(running) < n_workers and not (should_stop and should_stop()):
                job = pending.pop(0)
                parent, child = ctx.Pipe(duplex=False)
                proc = ctx.Process(target=_worker, args=(job.paper, job.scale, job.seed, child, me), daemon=True)
                proc.start()
                child.close()
                running.append({"job": job, "proc": proc, "conn": parent, "spawned": time.perf_counter(),
                                "started": None})
            if should_stop and should_stop():
                pending.clear()
            still = []
            for r in running:
                job, proc, conn = r["job"], r["proc"], r["conn"]
                now = time.perf_counter()
                done = None
                try:
                    while done is None and conn.poll(0.02):
                        msg = conn.recv()
                        if msg[0] == "started":
                            r["started"] = time.perf_counter()
                        else:
                            done = msg[1:]
                except (EOFError, OSError):
                    done = ("error", None, "worker exited without a result", now - (r["started"] or r["spawned"]),
                            0.0, None)
                if done is not None:
                    proc.join(5)
                    on_done(job, *done)
                elif not proc.is_alive():
                    proc.join()
                    on_done(job, "error", None, f"worker died with exit code {proc.exitcode}",
                            now - (r["started"] or r["spawned"]), 0.0, None)
                elif r["started"] is None and now - r["spawned"] > LOAD_LIMIT:
                    proc.kill()
                    proc.join()
                    on_done(job, "timeout", None, f"the worker did not start run() within {LOAD_LIMIT:g} s",
                            now - r["spawned"], 0.0, None)
                elif timeout is not None and r["started"] is not None and now - r["started"] > timeout:
                    proc.kill()
                    proc.join()
                    on_done(job, "timeout", None, f"trial exceeded the {timeout:g} s timeout", now - r["started"],
                            0.0, None)
                else:
                    still.append(r)
            running = still
            if running:
                time.sleep(0.1)
    finally:
        for r in running:
            r["proc"].kill()


def run_jobs(jobs: list[Job], store: Store, n_workers: int = 1, timeout: float | None = None,
             progress=None, executor: str = "local", address: str | None = None, skipped=None) -> list[Trial]:
    """Run ``jobs`` with at most ``n_workers`` at once; store and return each finished trial.

    Each job is claimed in the store before it runs; a job another live run has claimed is left to
    it (reported through ``skipped(job)``), so two runs on one store never run a trial twice.
    """
    if n_workers < 1:
        raise ValueError(f"jobs must be >= 1, got {n_workers}")
    if timeout is not None and not (timeout > 0 and math.isfinite(timeout)):
        raise ValueError(f"timeout must be a positive number of seconds, got {timeout}")
    if executor not in ("local", "ray"):
        raise ValueError(f"unknown executor {executor!r}; allowed: local, ray")
    finished: list[Trial] = []
    commit, versions, mach = git_commit(), package_versions(), machine()
    mine = []
    for job in jobs:
        if store.claim(job.paper, job.scale, job.seed, job.fingerprint):
            mine.append(job)
        elif skipped is not None:
            skipped(job)

    def on_done(job: Job, status, measurements, error, duration, peak, deps=None, cpu=None):
        t = Trial(job.paper, job.scale, job.seed, job.fingerprint, status, measurements, error,
                  duration, peak, commit, versions, mach, time.time(), deps, cpu)
        try:
            store.put_trial(t)
        except Exception as e:  # noqa: BLE001 - a result the store refuses becomes an error row, the run goes on
            t = Trial(job.paper, job.scale, job.seed, job.fingerprint, "error", None,
                      f"the store refused the result: {type(e).__name__}: {e}", duration, peak, commit,
                      versions, mach, time.time(), deps, cpu)
            store.put_trial(t)
        store.release(job.paper, job.scale, job.seed, job.fingerprint)
        finished.append(t)
        if progress is not None:
            progress(t)

    try:
        if executor == "local":
            local_execute(mine, n_workers, timeout, on_done)
        else:
            from .ray_executor import ray_execute

            ray_execute(mine, n_workers, timeout, on_done, address=address)
    finally:
        done = {(t.paper, t.seed) for t in finished}
        for job in mine:
            if (job.paper, job.seed) not in done:
                store.release(job.paper, job.scale, job.seed, job.fingerprint)
    return finished


def run_inline(paper_id: str, scale: str, seed: int) -> dict:
    """Run one trial in this process (for tests and debugging); returns checked measurements."""
    return check_measurements(load_experiment(get(paper_id)).run(scale, seed))


if __name__ == "__main__":  # pragma: no cover - debugging aid
    print(run_inline(sys.argv[1], sys.argv[2], int(sys.argv[3])))
