"""Downstream DTI probe on frozen embeddings: logistic regression on pair features.

Pair features ``[z_d * z_p, z_d, z_p]`` (the element-wise product carries the drug-protein
interaction a linear model cannot form from a concatenation); standardised on the training pairs;
the inverse regularisation ``C`` chosen on the validation pairs by AUROC (ours: the paper fine-tunes
a prediction head, the probe isolates what pre-training put in the embeddings).
"""
from __future__ import annotations

import numpy as np
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import average_precision_score, roc_auc_score
from sklearn.preprocessing import StandardScaler

C_GRID = (0.1, 1.0)


def pair_features(z_drug: np.ndarray, z_protein: np.ndarray, pairs: np.ndarray) -> np.ndarray:
    """Features of (drug, protein) index pairs from per-drug and per-protein embeddings."""
    pairs = np.asarray(pairs)
    if pairs.ndim != 2 or pairs.shape[1] != 2:
        raise ValueError(f"pairs must have shape (n, 2), got {pairs.shape}")
    if pairs.size and (not np.issubdtype(pairs.dtype, np.integer) or pairs.min() < 0
                       or pairs[:, 0].max() >= len(z_drug) or pairs[:, 1].max() >= len(z_protein)):
        raise ValueError(f"pairs must hold integer (drug, protein) indices within ({len(z_drug)}, {len(z_protein)})")
    a, b = z_drug[pairs[:, 0]], z_protein[pairs[:, 1]]
    return np.concatenate([a * b, a, b], axis=1)


def probe_scores(train: tuple, val: tuple, tests: dict, c_grid=C_GRID, seed: int = 0) -> dict:
    """Fit the probe on ``train = (X, y)``, choose C on ``val``; AUROC / AUPR on each test set."""
    Xtr, ytr = train
    Xva, yva = val
    if len(np.unique(ytr)) < 2 or len(np.unique(yva)) < 2:
        raise ValueError("train and val labels must hold both classes")
    if not (np.isfinite(Xtr).all() and np.isfinite(Xva).all()):
        raise ValueError("probe features contain NaN or infinite values")
    sc = StandardScaler().fit(Xtr)
    best = None
    for C in c_grid:
        clf = LogisticRegression(C=C, max_iter=1000, tol=1e-3, random_state=seed).fit(sc.transform(Xtr), ytr)
        auc = roc_auc_score(yva, clf.decision_function(sc.transform(Xva)))
        if best is None or auc > best[0]:
            best = (auc, C, clf)
    out = {"val_auroc": float(best[0]), "C": float(best[1])}
    for name, (X, y) in tests.items():
        s = best[2].decision_function(sc.transform(X))
        out[f"{name}_auroc"] = float(roc_auc_score(y, s))
        out[f"{name}_aupr"] = float(average_precision_score(y, s))
    return out
