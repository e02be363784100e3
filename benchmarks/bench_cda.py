"""Fit time of CDA against scikit-learn's LDA, LinearSVC (both liblinear solvers), SVC(kernel="linear")
and logistic regression: single-threaded CPU time (``time.process_time``, so other processes on the
machine do not inflate it), best of ``--repeats``, reported as ratios (peer time / CDA time).

    python benchmarks/bench_cda.py [--repeats 3] [--sizes 8000x20,16000x20,8000x400] [--early-stop]

CDA runs all 50 rotations unless ``--early-stop`` (its default ``tol=1e-3``) is given. A CDA fit
carries about 0.06 s of fixed cost (Bayesian optimisation, Python), so at N * M below ~10^6 the
ratios mostly compare fixed costs; the default sizes are where the fit dominates.
"""
from __future__ import annotations

import argparse
import time
import warnings

from sklearn.datasets import make_classification
from sklearn.discriminant_analysis import LinearDiscriminantAnalysis
from sklearn.exceptions import ConvergenceWarning
from sklearn.linear_model import LogisticRegression
from sklearn.svm import SVC, LinearSVC
from threadpoolctl import threadpool_limits

from iclr26.classical.cda import CentroidDiscriminantAnalysis

PEERS = {
    "lda": lambda: LinearDiscriminantAnalysis(),
    "liblinear_dual": lambda: LinearSVC(dual=True),    # the paper's "fast SVM"
    "liblinear": lambda: LinearSVC(),                  # scikit-learn's default (primal when N > M)
    "svm": lambda: SVC(kernel="linear"),
    "logreg": lambda: LogisticRegression(max_iter=2000),
}


def best_of(make, X, y, repeats):
    times = []
    for _ in range(repeats):
        model = make()
        t = time.process_time()
        model.fit(X, y)
        times.append(time.process_time() - t)
    return min(times)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--sizes", default="8000x20,16000x20,8000x400")
    ap.add_argument("--early-stop", action="store_true", help="CDA with its default early stopping (tol=1e-3)")
    ap.add_argument("--no-svm", action="store_true", help="skip the kernel-form SVM (minutes at N >= 16000)")
    args = ap.parse_args()
    warnings.filterwarnings("ignore", category=ConvergenceWarning)
    peers = {k: v for k, v in PEERS.items() if not (args.no_svm and k == "svm")}
    tol = 1e-3 if args.early_stop else 0.0
    print(f"{'N x M':>12} {'cda cpu s':>10} " + " ".join(f"{p + ' ratio':>20}" for p in peers))
    with threadpool_limits(1):
        for size in args.sizes.split(","):
            n, m = map(int, size.split("x"))
            X, y = make_classification(n_samples=n, n_features=m, n_informative=max(2, m // 5), random_state=0)
            cda = best_of(lambda: CentroidDiscriminantAnalysis(tol=tol, random_state=0), X, y, args.repeats)
            ratios = {p: best_of(make, X, y, args.repeats) / cda for p, make in peers.items()}
            print(f"{size:>12} {cda:10.3f} " + " ".join(f"{ratios[p]:20.2f}" for p in peers))
    print("ratio > 1: the peer is slower than CDA")


if __name__ == "__main__":
    main()
