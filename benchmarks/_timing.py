"""Timing shared by the benchmark scripts (run as ``python benchmarks/bench_<id>.py``)."""
import time


def best_of(fn, repeats):
    """The smallest CPU time (``time.process_time``) of ``repeats`` calls of ``fn()``."""
    times = []
    for _ in range(repeats):
        t = time.process_time()
        fn()
        times.append(time.process_time() - t)
    return min(times)
