"""CDA against LDA, linear SVMs and logistic regression: accuracy and how fit time grows.

Accuracy: per seed, a stratified 70/30 split of each bundled dataset (iris, wine, breast cancer,
digits; at the paper scale also Fashion-MNIST when the Debian package is installed), standardised on the
training part; test accuracy per dataset is one paired item.
Fit time: binary ``make_classification`` problems growing in N (features fixed) and in M (samples
fixed), single-threaded; the slope of log(fit time) against log(size) is one value per seed.
"""
from __future__ import annotations

import time

import numpy as np

from iclr26.common.seeding import seed_everything

SCALES = {
    "smoke": dict(datasets=("iris", "wine"), max_iter=5, n_grid=(200, 400), m_fixed=20,
                  m_grid=(10, 20), n_fixed=200, fashion_n=0),
    # Fashion-MNIST is left to the paper scale: liblinear needs minutes per fit on it
    "quick": dict(datasets=("iris", "wine", "breast_cancer", "digits"), max_iter=50,
                  n_grid=(500, 1000, 2000, 4000), m_fixed=100, m_grid=(100, 200, 400, 800), n_fixed=2000,
                  fashion_n=0),
    # the paper: 27 datasets (images, medical images, chemistry), N up to 1e5 and M up to 1e4
    "paper": dict(datasets=("iris", "wine", "breast_cancer", "digits", "fashion"), max_iter=50,
                  n_grid=(1000, 4000, 16000, 64000), m_fixed=500, m_grid=(250, 1000, 4000), n_fixed=8000,
                  fashion_n=60000),
}
SEEDS = {"smoke": 1, "quick": 5, "paper": 10}
ARMS = ("cda", "lda", "linear_svm", "logreg")


def _dataset(name: str, seed: int, fashion_n: int):
    from sklearn import datasets

    if name == "fashion":
        from iclr26.data.vision import fashion_mnist_available, load_fashion_mnist

        if not fashion_mnist_available() or fashion_n == 0:
            return None
        X, y = load_fashion_mnist("train")
        idx = np.random.default_rng(seed).choice(len(y), fashion_n, replace=False)
        return X[idx].reshape(fashion_n, -1).astype(float) / 255.0, y[idx]
    return getattr(datasets, f"load_{name}")(return_X_y=True)


def _models(max_iter: int, seed: int):
    from sklearn.discriminant_analysis import LinearDiscriminantAnalysis
    from sklearn.linear_model import LogisticRegression
    from sklearn.svm import LinearSVC

    from .estimator import CentroidDiscriminantAnalysis

    return {
        "cda": CentroidDiscriminantAnalysis(max_iter=max_iter, random_state=seed),
        "lda": LinearDiscriminantAnalysis(),
        "linear_svm": LinearSVC(dual=False, random_state=seed),  # primal: the dual solver stalls on Fashion-MNIST
        "logreg": LogisticRegression(max_iter=2000),
    }


def _fit_seconds(model, X, y) -> float:
    start = time.perf_counter()
    model.fit(X, y)
    return time.perf_counter() - start


def _slope(sizes, seconds) -> float:
    return float(np.polyfit(np.log(sizes), np.log(np.maximum(seconds, 1e-6)), 1)[0])


def run(scale: str, seed: int) -> dict:
    import warnings

    from sklearn.datasets import make_classification
    from sklearn.discriminant_analysis import LinearDiscriminantAnalysis
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.model_selection import train_test_split
    from sklearn.preprocessing import StandardScaler
    from sklearn.svm import SVC
    from threadpoolctl import threadpool_limits

    from .estimator import CentroidDiscriminantAnalysis

    cfg = SCALES[scale]
    seed_everything(seed)
    warnings.filterwarnings("ignore", category=ConvergenceWarning)
    acc = {a: [] for a in ARMS}
    used = []
    with threadpool_limits(1):
        for name in cfg["datasets"]:
            data = _dataset(name, seed, cfg["fashion_n"])
            if data is None:
                continue
            X, y = data
            Xtr, Xte, ytr, yte = train_test_split(X, y, test_size=0.3, stratify=y, random_state=seed)
            sc = StandardScaler().fit(Xtr)
            Xtr, Xte = sc.transform(Xtr), sc.transform(Xte)
            for arm, model in _models(cfg["max_iter"], seed).items():
                acc[arm].append(float(model.fit(Xtr, ytr).score(Xte, yte)))
            used.append(name)

        # fit time as N grows (M fixed) and as M grows (N fixed), binary problems
        def problem(n, m):
            return make_classification(n_samples=n, n_features=m, n_informative=max(2, m // 5),
                                       random_state=seed)

        times_n = {"cda": [], "svm": [], "lda": []}
        for n in cfg["n_grid"]:
            X, y = problem(n, cfg["m_fixed"])
            times_n["cda"].append(_fit_seconds(CentroidDiscriminantAnalysis(max_iter=cfg["max_iter"], random_state=seed), X, y))
            times_n["svm"].append(_fit_seconds(SVC(kernel="linear"), X, y))
            times_n["lda"].append(_fit_seconds(LinearDiscriminantAnalysis(), X, y))
        times_m = {"cda": [], "lda": []}
        for m in cfg["m_grid"]:
            X, y = problem(cfg["n_fixed"], m)
            times_m["cda"].append(_fit_seconds(CentroidDiscriminantAnalysis(max_iter=cfg["max_iter"], random_state=seed), X, y))
            times_m["lda"].append(_fit_seconds(LinearDiscriminantAnalysis(), X, y))

    return {
        "metrics": {
            "test_accuracy": acc,
            "time_slope_n": {k: _slope(cfg["n_grid"], v) for k, v in times_n.items()},
            "time_slope_m": {k: _slope(cfg["m_grid"], v) for k, v in times_m.items()},
            "fit_seconds_largest_m": {k: v[-1] for k, v in times_m.items()},
        },
        "info": {"datasets": used, "n_grid": list(cfg["n_grid"]), "m_grid": list(cfg["m_grid"]),
                 "times_n": times_n, "times_m": times_m},
    }
