"""Representational similarity of label representations (the paper's RSA, Sec. 4).

From "Comparing the Learning Dynamics of In-Context Learning and Fine-Tuning in Language Models"
(ICLR 2026; OpenReview cJAtzOcAnd; code github.com/basile6/ICLvsSFT). The paper reads the last-token
activations after each block's MLP for every grid input and compares cosine-similarity matrices across
inputs: after fine-tuning, mid-layer similarity is organised by the label ("collapse along the label
axis"), while ICL keeps the inputs' own structure. :func:`label_collapse_index` measures that
organisation as mean within-class minus mean between-class similarity; :func:`linear_cka`
(Kornblith et al. 2019, Eq. 2 with a linear kernel) and :func:`rsa_correlation` compare two
representations of the same inputs.

>>> X = np.random.default_rng(0).normal(size=(20, 5)); y = np.arange(20) % 2
>>> round(linear_cka(X, 3.0 * X), 6)
1.0
"""
from __future__ import annotations

import numpy as np

__all__ = ["cosine_similarity_matrix", "label_collapse_index", "linear_cka", "rsa_correlation"]


def _matrix(X, name: str = "X") -> np.ndarray:
    X = np.asarray(X, dtype=float)
    if X.ndim != 2 or X.shape[0] < 2 or X.shape[1] < 1:
        raise ValueError(f"{name} must be a 2-D array (n_inputs >= 2, n_features >= 1), got shape {X.shape}")
    if not np.all(np.isfinite(X)):
        raise ValueError(f"{name} must hold finite values")
    return X


def cosine_similarity_matrix(X, center: bool = False) -> np.ndarray:
    """``S[i, j] = <x_i, x_j> / (|x_i| |x_j|)`` over the rows of ``X`` (``center=True``: rows minus
    their mean first). Rows of zero norm get similarity 0 with everything."""
    X = _matrix(X)
    if center:
        X = X - X.mean(0, keepdims=True)
    norms = np.linalg.norm(X, axis=1)
    U = X / np.where(norms > 0, norms, 1.0)[:, None]
    return U @ U.T


def label_collapse_index(X, y, center: bool = True) -> float:
    """Mean cosine similarity between distinct inputs of the same label minus that between inputs of
    different labels (diagonal excluded). 0 when the representation ignores the label; near 2 when
    each label's inputs collapse to one point and the two points are opposite (``center=True``, the
    default: the shared mean, e.g. from a common prompt, is removed first)."""
    X = _matrix(X)
    y = np.asarray(y)
    if y.shape != (X.shape[0],):
        raise ValueError(f"y must hold one label per row of X ({X.shape[0]}), got shape {y.shape}")
    classes = np.unique(y)
    if len(classes) < 2:
        raise ValueError("y must hold at least two labels")
    S = cosine_similarity_matrix(X, center=center)
    same = y[:, None] == y[None, :]
    off = ~np.eye(len(y), dtype=bool)
    if not (same & off).any():
        raise ValueError("every label occurs once: no within-label pairs")
    return float(S[same & off].mean() - S[~same].mean())


def linear_cka(X, Y) -> float:
    """Linear centred kernel alignment ``||Yc^T Xc||_F^2 / (||Xc^T Xc||_F ||Yc^T Yc||_F)`` (Kornblith
    et al. 2019) between two representations of the same ``n`` inputs (rows)."""
    X, Y = _matrix(X), _matrix(Y, "Y")
    if X.shape[0] != Y.shape[0]:
        raise ValueError(f"X and Y must describe the same inputs (rows), got {X.shape[0]} and {Y.shape[0]}")
    Xc, Yc = X - X.mean(0), Y - Y.mean(0)
    den = np.linalg.norm(Xc.T @ Xc) * np.linalg.norm(Yc.T @ Yc)
    if den == 0:
        raise ValueError("a representation is constant over the inputs: CKA is undefined")
    return float(np.linalg.norm(Yc.T @ Xc) ** 2 / den)


def rsa_correlation(X, Y, center: bool = False, method: str = "spearman") -> float:
    """Correlation between the upper triangles (diagonal excluded) of the cosine-similarity matrices
    of ``X`` and ``Y`` (classic RSA; ``method``: ``"spearman"`` or ``"pearson"``)."""
    from scipy import stats

    if method not in ("spearman", "pearson"):
        raise ValueError(f"method must be 'spearman' or 'pearson', got {method!r}")
    X, Y = _matrix(X), _matrix(Y, "Y")
    if X.shape[0] != Y.shape[0]:
        raise ValueError(f"X and Y must describe the same inputs (rows), got {X.shape[0]} and {Y.shape[0]}")
    iu = np.triu_indices(X.shape[0], 1)
    a, b = cosine_similarity_matrix(X, center)[iu], cosine_similarity_matrix(Y, center)[iu]
    r = stats.spearmanr(a, b)[0] if method == "spearman" else stats.pearsonr(a, b)[0]
    return float(r)
