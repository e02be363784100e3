"""Fit time of CDA against scikit-learn's LDA, LinearSVC, SVC(kernel="linear") and logistic
regression, measured in one run, single-threaded, reported as ratios (peer time / CDA time).

    python benchmarks/bench_cda.py [--repeats 3] [--sizes 2000x100,8000x100,2000x800]
"""
from __future__ import annotations

import argparse
import time
import warnings

import numpy as np
from sklearn.datasets import make_classification
from sklearn.discriminant_analysis import LinearDiscriminantAnalysis
from sklearn.exceptions import ConvergenceWarning
from sklearn.linear_model import LogisticRegression
from sklearn.svm import SVC, LinearSVC
from threadpoolctl import threadpool_limits

from iclr26.classical.cda import CentroidDiscriminantAnalysis

PEERS = {
    "lda": lambda: LinearDiscriminantAnalysis(),
    "linear_svm": lambda: LinearSVC(),
    "svm": lambda: SVC(kernel="linear"),
    "logreg": lambda: LogisticRegression(max_iter=2000),
}


def best_of(make, X, y, repeats):
    times = []
    for _ in range(repeats):
        model = make()
        t = time.perf_counter()
        model.fit(X, y)
        times.append(time.perf_counter() - t)
    return min(times)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--sizes", default="2000x100,8000x100,2000x800")
    args = ap.parse_args()
    warnings.filterwarnings("ignore", category=ConvergenceWarning)
    print(f"{'N x M':>12} {'cda s':>8} " + " ".join(f"{p + ' ratio':>17}" for p in PEERS))
    with threadpool_limits(1):
        for size in args.sizes.split(","):
            n, m = map(int, size.split("x"))
            X, y = make_classification(n_samples=n, n_features=m, n_informative=max(2, m // 5), random_state=0)
            cda = best_of(lambda: CentroidDiscriminantAnalysis(random_state=0), X, y, args.repeats)
            ratios = {p: best_of(make, X, y, args.repeats) / cda for p, make in PEERS.items()}
            print(f"{size:>12} {cda:8.3f} " + " ".join(f"{ratios[p]:17.2f}" for p in PEERS))
    print("ratio > 1: the peer is slower than CDA")


if __name__ == "__main__":
    main()
