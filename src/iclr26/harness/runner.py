"""Run trials (paper, scale, seed) in worker processes and commit each one as it finishes.

Each trial runs in a fresh spawned process (clean memory accounting, a hard per-trial timeout),
at most ``jobs`` at once. Trials already stored with status ``ok`` at the current fingerprint are
skipped unless ``force`` is set, so an interrupted run resumes where it stopped.
"""
from __future__ import annotations

import multiprocessing as mp
import os
import platform
import resource
import sys
import time
import traceback
from dataclasses import dataclass
from importlib import metadata

from ..registry import get
from .experiments import (check_measurements, folder_fingerprint, git_commit, load_experiment,
                          measured_dependencies, staleness)
from .store import Store, Trial

VERSIONED = ("numpy", "scipy", "torch", "transformers", "scikit-learn", "iclr26")


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


def _worker(paper_id: str, scale: str, seed: int, conn) -> None:
    """Child process body: run one trial and send (status, measurements, error, seconds, peak MB, deps).

    ``deps`` is taken after ``run()`` returns, so it covers every project module the experiment
    imported, lazily imported ones included, and the number-changing packages it used.
    """
    start = time.perf_counter()
    try:
        mod = load_experiment(get(paper_id))
        result = check_measurements(mod.run(scale, seed))
        status, err = "ok", None
    except BaseException:  # noqa: BLE001 - every failure becomes a stored error row
        result, status, err = None, "error", traceback.format_exc(limit=20)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB -> MiB on Linux
    deps = measured_dependencies()
    conn.send((status, result, err, time.perf_counter() - start, peak, deps))
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


def run_jobs(jobs: list[Job], store: Store, n_workers: int = 1, timeout: float | None = None,
             progress=None) -> list[Trial]:
    """Run ``jobs`` with at most ``n_workers`` processes; store and return each finished trial."""
    if n_workers < 1:
        raise ValueError(f"jobs must be >= 1, got {n_workers}")
    ctx = mp.get_context("spawn")
    pending = list(jobs)
    running: list[tuple[Job, mp.Process, object, float]] = []
    finished: list[Trial] = []
    commit, versions, mach = git_commit(), package_versions(), machine()

    def record(job: Job, status, measurements, error, duration, peak, deps=None):
        t = Trial(job.paper, job.scale, job.seed, job.fingerprint, status, measurements, error,
                  duration, peak, commit, versions, mach, time.time(), deps)
        store.put_trial(t)
        finished.append(t)
        if progress is not None:
            progress(t)

    try:
        while pending or running:
            while pending and len(running) < n_workers:
                job = pending.pop(0)
                parent, child = ctx.Pipe(duplex=False)
                proc = ctx.Process(target=_worker, args=(job.paper, job.scale, job.seed, child), daemon=True)
                proc.start()
                child.close()
                running.append((job, proc, parent, time.perf_counter()))
            still = []
            for job, proc, conn, started in running:
                elapsed = time.perf_counter() - started
                if conn.poll(0.05):
                    try:
                        status, result, err, dur, peak, deps = conn.recv()
                    except EOFError:
                        status, result, err, dur, peak, deps = ("error", None, "worker exited without a result",
                                                                elapsed, 0.0, None)
                    proc.join(5)
                    record(job, status, result, err, dur, peak, deps)
                elif not proc.is_alive():
                    proc.join()
                    record(job, "error", None, f"worker died with exit code {proc.exitcode}", elapsed, 0.0)
                elif timeout is not None and elapsed > timeout:
                    proc.kill()
                    proc.join()
                    record(job, "timeout", None, f"trial exceeded the {timeout:g} s timeout", elapsed, 0.0)
                else:
                    still.append((job, proc, conn, started))
            running = still
            if running:
                time.sleep(0.1)
    finally:
        for _, proc, _, _ in running:
            proc.kill()
    return finished


def run_inline(paper_id: str, scale: str, seed: int) -> dict:
    """Run one trial in this process (for tests and debugging); returns checked measurements."""
    return check_measurements(load_experiment(get(paper_id)).run(scale, seed))


if __name__ == "__main__":  # pragma: no cover - debugging aid
    print(run_inline(sys.argv[1], sys.argv[2], int(sys.argv[3])))
