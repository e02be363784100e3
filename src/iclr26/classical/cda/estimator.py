"""Centroid Discriminant Analysis as a scikit-learn classifier.

Implements CDA from "A Generalized Geometric Theoretical Framework of Centroid Discriminant
Analysis for Linear Classification of Multi-dimensional Data" (ICLR 2026; preprint
preprints.org 202502.0789; official code: MATLAB, linked from the paper).

Binary CDA (Sec. 3):
1. CDB0: the unit vector joining the two class centroids; sample weights alpha_i = 1/sqrt(N).
2. Repeat up to ``max_iter`` times (Sec. 3.2, "consecutive rotations in 2D planes"):
   - project the data on the current discriminant v1: Q1 = X v1; find the optimal operating point
     (OOP), the cut among the N-1 midpoints of sorted Q1 that maximises the performance score
     ps = mean(F1 of class +, F1 of class -, accuracy)  (Sec. 3.1);
   - re-weight the samples towards the boundary: d = |Q1 - oop| / sum|Q1 - oop|,
     alpha <- normalise(alpha * |d - min d - max d|);
   - CDB2: the alpha-weighted centroid difference, orthogonalised against v1;
   - rotate on the plane (v1, CDB2): v(theta) = cos(theta) v1 + sin(theta) v2, theta in [-90, 90]
     degrees, choosing theta by Bayesian optimisation of ps with min(10, iteration + 3) evaluations
     (Sec. 3.3); v(theta*) becomes the next v1;
   - stop early when the coefficient of variation of the last 10 scores is below 1e-3.
3. Keep the discriminant with the best score seen and its OOP threshold.
Multiclass: error-correcting output codes with one-vs-one pairs and voting (Sec. 3.5).
Kernel CDA: run CDA on the RBF Gram matrix against the training samples (Sec. 3.6).
"""
from __future__ import annotations

from itertools import combinations
from numbers import Integral, Real

import numpy as np
from scipy.special import ndtr
from sklearn.base import BaseEstimator, ClassifierMixin, _fit_context
from sklearn.metrics.pairwise import euclidean_distances, rbf_kernel
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import check_is_fitted, check_random_state, validate_data


def performance_score(q: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """Best performance score over cuts of the 1-D projection ``q`` and the cut achieving it.

    ``y`` holds 1 for the positive class (expected on the high side of the cut) and 0 otherwise.
    The score at a cut is mean(F1_pos, F1_neg, accuracy) (Sec. 3.1); candidate cuts are the
    midpoints between consecutive distinct sorted projections. Vectorised: O(N log N).
    """
    order = np.argsort(q, kind="mergesort")
    qs, ys = q[order], y[order]
    n = qs.size
    pos_total = ys.sum()
    neg_total = n - pos_total
    # k = number of samples predicted negative (the k lowest), k = 1..n-1
    pos_below = np.cumsum(ys)[:-1]
    k = np.arange(1, n)
    neg_below = k - pos_below
    tp = pos_total - pos_below
    fn = pos_below
    tn = neg_below
    fp = neg_total - neg_below
    with np.errstate(divide="ignore", invalid="ignore"):
        f1p = np.where(2 * tp + fp + fn > 0, 2 * tp / (2 * tp + fp + fn), 0.0)
        f1n = np.where(2 * tn + fn + fp > 0, 2 * tn / (2 * tn + fn + fp), 0.0)
    ps = (f1p + f1n + (tp + tn) / n) / 3
    valid = qs[1:] > qs[:-1]  # a cut must separate distinct values
    if not valid.any():  # every sample projects to one value: the only rules predict a single class
        all_pos = (2 * pos_total / (pos_total + n) + pos_total / n) / 3
        all_neg = (2 * neg_total / (neg_total + n) + neg_total / n) / 3
        # predict() calls q - cut > 0 positive: a cut just below the value predicts all positive
        if all_pos >= all_neg:
            return float(all_pos), float(np.nextafter(qs[0], -np.inf))
        return float(all_neg), float(qs[0])
    ps = np.where(valid, ps, -np.inf)
    best = int(np.argmax(ps))
    return float(ps[best]), float((qs[best] + qs[best + 1]) / 2)


def _weighted_cdb(X: np.ndarray, y: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Unit vector from the weighted negative centroid to the weighted positive centroid."""
    pos, neg = y == 1, y == 0
    v = (w[pos] @ X[pos]) / w[pos].sum() - (w[neg] @ X[neg]) / w[neg].sum()
    norm = np.linalg.norm(v)
    scale = max(np.abs(X).max(), 1.0)
    return v / norm if norm > 1e-12 * scale else np.zeros_like(v)


class _AngleBO:
    """1-D Bayesian optimisation of the score over theta in [-pi/2, pi/2].

    A Gaussian process with a squared-exponential kernel (length scale ``ell`` radians, fixed) and
    expected improvement maximised on a grid of 181 angles (1-degree steps).
    """

    grid = np.deg2rad(np.linspace(-90, 90, 181))

    def __init__(self, ell: float = 0.35, noise: float = 1e-6):
        self.ell, self.noise = ell, noise

    def next_angle(self, thetas: np.ndarray, scores: np.ndarray) -> float:
        mu_y, sd_y = scores.mean(), scores.std() or 1.0
        z = (scores - mu_y) / sd_y
        k = lambda a, b: np.exp(-0.5 * ((a[:, None] - b[None, :]) / self.ell) ** 2)
        K = k(thetas, thetas) + self.noise * np.eye(thetas.size)
        Ks = k(self.grid, thetas)
        L = np.linalg.cholesky(K + 1e-9 * np.eye(thetas.size))
        alpha = np.linalg.solve(L.T, np.linalg.solve(L, z))
        mean = Ks @ alpha
        v = np.linalg.solve(L, Ks.T)
        sd = np.sqrt(np.maximum(1.0 - np.sum(v * v, axis=0), 1e-12))
        gap = mean - z.max()
        u = gap / sd
        ei = gap * ndtr(u) + sd * np.exp(-0.5 * u * u) / np.sqrt(2 * np.pi)
        ei[np.isin(self.grid, thetas)] = -np.inf
        return float(self.grid[int(np.argmax(ei))])


def _fit_binary(X, y, max_iter: int, search: str, tol: float, rng) -> tuple[np.ndarray, float, float, list]:
    """Binary CDA; returns (unit discriminant, threshold, best score, score history)."""
    n = X.shape[0]
    w = np.full(n, 1 / np.sqrt(n))
    v1 = _weighted_cdb(X, y, w)
    if not np.linalg.norm(v1) > 0:
        raise ValueError("the two class centroids coincide: the centroid discriminant basis CDB0 is undefined")
    q1 = X @ v1
    ps, oop = performance_score(q1, y)
    best = (v1, oop, ps)
    history = [ps]
    bo = _AngleBO()
    for it in range(max_iter):
        # re-weighting towards the boundary (Sec. 3.2)
        dist = np.abs(q1 - oop)
        total = dist.sum()
        if total <= 0:
            break
        d = dist / total
        w = w * np.abs(d - d.min() - d.max())
        w /= np.linalg.norm(w) or 1.0
        if w[y == 1].sum() <= 0 or w[y == 0].sum() <= 0:
            break
        v2 = _weighted_cdb(X, y, w)
        v2 = v2 - v1 * (v2 @ v1)
        nv2 = np.linalg.norm(v2)
        if nv2 < 1e-12:
            break
        v2 /= nv2
        q2 = X @ v2

        def score(theta):
            return performance_score(np.cos(theta) * q1 + np.sin(theta) * q2, y)

        if search == "bo":
            n_eval = min(10, it + 3)  # Sec. 3.3: min(10, iteration + 3) evaluations
            thetas = [0.0, float(rng.uniform(-np.pi / 2, np.pi / 2))][:n_eval]
            results = [score(t) for t in thetas]
            while len(thetas) < n_eval:
                t = bo.next_angle(np.array(thetas), np.array([r[0] for r in results]))
                thetas.append(t)
                results.append(score(t))
        else:  # exhaustive grid at 5-degree steps
            thetas = list(np.deg2rad(np.arange(-90, 91, 5)))
            results = [score(t) for t in thetas]
        j = int(np.argmax([r[0] for r in results]))
        theta = thetas[j]
        ps, oop = results[j]
        v1 = np.cos(theta) * v1 + np.sin(theta) * v2
        v1 /= np.linalg.norm(v1)
        q1 = X @ v1
        history.append(ps)
        if ps > best[2]:
            best = (v1.copy(), oop, ps)
        last = np.array(history[-10:])
        if len(history) >= 10 and last.std() / max(abs(last.mean()), 1e-12) < tol:
            break
    return best[0], best[1], best[2], history


class CentroidDiscriminantAnalysis(ClassifierMixin, BaseEstimator):
    """Centroid Discriminant Analysis (CDA): a linear classifier built by rotating the centroid
    discriminant basis on successive 2-D planes.

    Parameters
    ----------
    max_iter : int, default=50
        Rotations per binary problem (paper: 50; Sec. 4 reports 50 vs 150 iterations equivalent).
    search : {"bo", "grid"}, default="bo"
        How the rotation angle is chosen: Bayesian optimisation with min(10, it+3) evaluations
        (the paper's choice) or an exhaustive 5-degree grid.
    tol : float, default=1e-3
        Stop when the coefficient of variation of the last 10 scores is below ``tol`` (paper: 1e-3).
    kernel : {None, "rbf"}, default=None
        ``"rbf"`` runs CDA on the Gram matrix against the training samples (kernel CDA).
    kernel_scale : float, default=1.0
        RBF width as a multiple of the median pairwise training distance.
    random_state : int, RandomState or None
        Seeds the Bayesian optimisation's second starting angle.

    Attributes
    ----------
    classes_, coef_ (n_pairs, n_features_or_train), intercept_ (n_pairs,), pairs_, scores_
    (best training score per pair), n_iter_ (most rotations run by any pair),
    n_features_in_, and X_fit_/gamma_ for the kernel variant.
    """

    _parameter_constraints = {
        "max_iter": [Interval(Integral, 0, None, closed="left")],
        "search": [StrOptions({"bo", "grid"})],
        "tol": [Interval(Real, 0, None, closed="left")],
        "kernel": [None, StrOptions({"rbf"})],
        "kernel_scale": [Interval(Real, 0, None, closed="neither")],
        "random_state": ["random_state"],
    }

    def __init__(self, max_iter=50, search="bo", tol=1e-3, kernel=None, kernel_scale=1.0, random_state=None):
        self.max_iter = max_iter
        self.search = search
        self.tol = tol
        self.kernel = kernel
        self.kernel_scale = kernel_scale
        self.random_state = random_state

    def _features(self, X):
        if self.kernel is None:
            return X
        return rbf_kernel(X, self.X_fit_, gamma=self.gamma_)

    @_fit_context(prefer_skip_nested_validation=True)
    def fit(self, X, y):
        X, y = validate_data(self, X, y, dtype=np.float64)
        check_classification_targets(y)
        self.classes_, y_idx, counts = np.unique(y, return_inverse=True, return_counts=True)
        if self.classes_.size < 2:
            raise ValueError(f"CDA needs at least 2 classes in y; got {self.classes_.size} class")
        if counts.min() < 2:
            lone = self.classes_[counts < 2].tolist()
            raise ValueError(f"CDA needs at least 2 samples per class (a class centroid and a cut between "
                             f"samples); class(es) {lone} have 1 sample")
        if np.ptp(X, axis=0).max() == 0:
            raise ValueError("X is constant (every feature takes a single value): the class centroids coincide "
                             "and no discriminant exists; CDA needs at least one feature that varies")
        rng = check_random_state(self.random_state)
        if self.kernel == "rbf":
            self.X_fit_ = X
            dist = euclidean_distances(X[: min(len(X), 2000)])
            med = np.median(dist[np.triu_indices_from(dist, k=1)]) if len(dist) > 1 else 1.0
            sigma = self.kernel_scale * (med if med > 0 else 1.0)
            self.gamma_ = 1.0 / (2 * sigma**2)
        F = self._features(X)
        pairs = list(combinations(range(self.classes_.size), 2))
        coefs, intercepts, scores, iters = [], [], [], []
        for a, b in pairs:  # ECOC one-vs-one: class b is the positive side
            mask = (y_idx == a) | (y_idx == b)
            yb = (y_idx[mask] == b).astype(np.int64)
            try:
                v, thr, ps, hist = _fit_binary(F[mask], yb, self.max_iter, self.search, self.tol, rng)
            except ValueError as e:
                names = [c.item() if isinstance(c, np.generic) else c for c in self.classes_[[a, b]]]
                raise ValueError(f"classes {names[0]!r} and {names[1]!r}: {e}") from None
            iters.append(len(hist) - 1)
            coefs.append(v)
            intercepts.append(-thr)
            scores.append(ps)
        self.pairs_ = np.array(pairs)
        self.coef_ = np.array(coefs)
        self.intercept_ = np.array(intercepts)
        self.scores_ = np.array(scores)
        self.n_iter_ = max(max(iters), 1) if self.max_iter else 0
        return self

    def decision_function(self, X):
        """Signed distance to each pair's cut; binary problems return one column (positive = classes_[1])."""
        check_is_fitted(self)
        X = validate_data(self, X, reset=False, dtype=np.float64)
        scores = self._features(X) @ self.coef_.T + self.intercept_
        if self.classes_.size == 2:
            return scores[:, 0]
        return self._votes(scores)

    def _votes(self, pair_scores):
        """One-vs-one voting, ties broken by the summed confidence (as sklearn's OvO does)."""
        n, k = pair_scores.shape[0], self.classes_.size
        votes = np.zeros((n, k))
        conf = np.zeros((n, k))
        for j, (a, b) in enumerate(self.pairs_):
            s = pair_scores[:, j]
            votes[:, b] += s > 0
            votes[:, a] += s <= 0
            conf[:, b] += s
            conf[:, a] -= s
        conf = conf / (3 * (np.abs(conf) + 1))  # keeps |conf| < 1/3 so votes dominate
        return votes + conf

    def predict(self, X):
        d = self.decision_function(X)
        if self.classes_.size == 2:
            return self.classes_[(d > 0).astype(int)]
        return self.classes_[np.argmax(d, axis=1)]

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = False
        return tags
