"""Linear-autoencoder recommenders: DEQL (EDLAE for any emphasis b >= 0), EDLAE (b = 0) and EASE.

Paper: "Generalizing Linear Autoencoder Recommenders with Decoupled Expected Quadratic Loss",
R. Guo, X. Li, H. Zhou, Y. Zhou, R. Jin, ICLR 2026, arXiv:2603.07402.
Official code: https://github.com/coderaBruce/DEQL (not copied; the algebra below is derived here).
Baselines: EDLAE, H. Steck, "Autoencoders that don't overfit towards the Identity", NeurIPS 2020;
EASE, H. Steck, "Embarrassingly Shallow Autoencoders for Sparse Data", WWW 2019.

Notation (users x items matrix X, G = X^T X, item count n, keep probability q = 1 - p).

EDLAE objective (Steck 2020): each input entry is dropped with probability p and the kept
ones are scaled by 1/q ("inverted" dropout); the squared error of an output coordinate gets weight
a^2 if that coordinate was dropped in the input and b^2 if it was kept::

    L(B) = E_mask || W_mask * (X - (mask * X / q) B) ||_F^2 + l2 ||B||_F^2

DEQL (the paper's decoupling of the expected loss): the expectation decouples over output columns j. With
K = G + (p/q) Diag(G) and w = p a^2 + q b^2, the column objective is the quadratic

    L_j(beta) = beta^T (H0 + Delta_j) beta - 2 beta^T v_j + const,
    H0 = w K + l2 I,  Delta_j = row and column j of E = p (b^2 - a^2) K (the (j,j) entry once),
    v_j = column j of V = w G + p (b^2 - a^2) Diag(G),

so the minimiser solves (H0 + Delta_j) beta_j = v_j. Solving n such systems directly costs
O(n^4); the paper's algorithm (based on Miller's matrix inverse theorem) reuses one inverse
H0^{-1} and a rank-2 update per column, O(n^3) in total. Here the rank-2 update is written as a
Woodbury identity with a 2x2 core and evaluated for all columns at once (:func:`deql_closed_form`).

Reductions (tested): b = 0 gives Steck's EDLAE closed form with Lambda = (p/q) Diag(G) + l2/(p a^2) I
(Steck 2020, full-rank closed form); b = a gives plain dropout denoising (Steck's DLAE),
B = (K + l2/a^2 I)^{-1} G.

One inverse for the whole family. Dividing the column systems by w shows that every member depends
on l2 only through the effective ridge r = l2 / w and shares P = M / w with M = (K + r I)^{-1}. All
the 2x2 cores then reduce to diag(M), so every solution is B = Diag(alpha) + M Diag(beta) with
O(n) vectors alpha, beta (:func:`deql_column_scales`, :class:`LinearAEPath`). With diag(B) = 0
the weight of column j no longer depends on whether item j was dropped, so the column objective is
w times a b-free loss: the zero-diagonal DEQL solution is EDLAE with ridge l2 / w, for every b.
"""
from __future__ import annotations

import numbers

import numpy as np
import scipy.sparse as sp
from sklearn.base import BaseEstimator

__all__ = [
    "DEQLRecommender",
    "EDLAERecommender",
    "EASERecommender",
    "deql_closed_form",
    "deql_closed_form_pair",
    "deql_naive",
    "deql_expected_loss",
    "edlae_closed_form",
    "ease_closed_form",
    "dlae_closed_form",
    "deql_column_scales",
    "effective_ridge",
    "LinearAEPath",
    "gram",
]


# --------------------------------------------------------------------------- validation helpers
def _check_real(name, value, low=None, high=None, low_open=False, high_open=False):
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not np.isfinite(value):
        raise ValueError(f"{name} must be a finite real number, got {value!r}")
    v = float(value)
    if low is not None and (v < low or (low_open and v == low)):
        op = ">" if low_open else ">="
        raise ValueError(f"{name} must be {op} {low}, got {value!r}")
    if high is not None and (v > high or (high_open and v == high)):
        op = "<" if high_open else "<="
        raise ValueError(f"{name} must be {op} {high}, got {value!r}")
    return v


def _check_interactions(X, name="X"):
    """Return X as a float64 CSR matrix after checking shape and values."""
    if sp.issparse(X):
        Xc = sp.csr_matrix(X, dtype=np.float64)
        data = Xc.data
    else:
        arr = np.asarray(X)
        if arr.dtype == object:
            raise ValueError(f"{name} must be a numeric user x item matrix, got dtype object")
        try:
            arr = arr.astype(np.float64)
        except (TypeError, ValueError) as e:
            raise ValueError(f"{name} must be a numeric user x item matrix: {e}") from None
        if arr.ndim != 2:
            raise ValueError(f"{name} must be 2-D (users x items), got shape {arr.shape}")
        Xc = sp.csr_matrix(arr)
        data = arr
    if Xc.shape[0] < 1 or Xc.shape[1] < 1:
        raise ValueError(f"{name} must have at least one user and one item, got shape {Xc.shape}")
    if not np.all(np.isfinite(data)):
        raise ValueError(f"{name} contains NaN or infinite values")
    return Xc


def gram(X) -> np.ndarray:
    """Dense item-item Gram matrix G = X^T X of a (sparse) users x items matrix."""
    Xc = _check_interactions(X)
    return np.asarray((Xc.T @ Xc).todense(), dtype=np.float64)


def _check_gram(G):
    """A Gram matrix X^T X: square, non-empty, finite, symmetric, with a non-negative diagonal.

    Positive semi-definiteness itself is checked where the system is factorised (Cholesky of the
    regularised system, or the eigenvalues in :class:`LinearAEPath`).
    """
    try:
        G = np.asarray(G, dtype=np.float64)
    except (TypeError, ValueError) as e:
        raise ValueError(f"G must be a numeric item x item matrix: {e}") from None
    if G.ndim != 2 or G.shape[0] != G.shape[1]:
        raise ValueError(f"G must be a square item x item matrix, got shape {G.shape}")
    if G.shape[0] == 0:
        raise ValueError("G must have at least one item, got shape (0, 0)")
    if not np.all(np.isfinite(G)):
        raise ValueError("G contains NaN or infinite values")
    scale = max(float(np.max(np.abs(G))), 1.0)
    if not np.allclose(G, G.T, rtol=0.0, atol=1e-10 * scale):
        raise ValueError("G must be symmetric (a Gram matrix X^T X)")
    if np.any(np.diag(G) < 0):
        raise ValueError("G must be positive semi-definite (a Gram matrix X^T X): it has a negative diagonal entry")
    return G


def _spd_inverse(A, what="G"):
    """Inverse of a symmetric positive definite matrix via Cholesky; a failure means G is not PSD."""
    from scipy.linalg import LinAlgError, cho_factor, cho_solve

    try:
        c = cho_factor(A, lower=True, check_finite=False)
    except LinAlgError:
        raise ValueError(f"{what} must be positive semi-definite (a Gram matrix X^T X): "
                         "the regularised system is not positive definite") from None
    Ainv = cho_solve(c, np.eye(A.shape[0]), check_finite=False)
    return 0.5 * (Ainv + Ainv.T)


# --------------------------------------------------------------------------- closed forms
def ease_closed_form(G, l2: float) -> np.ndarray:
    """EASE closed form (Steck 2019): B = I - P Diag(1/diag(P)), P = (G + l2 I)^{-1}; diag(B) = 0."""
    G = _check_gram(G)
    l2 = _check_real("l2", l2, low=0.0, low_open=True)
    P = _spd_inverse(G + l2 * np.eye(G.shape[0]))
    B = -P / np.diag(P)[None, :]
    np.fill_diagonal(B, 0.0)
    return B


def edlae_closed_form(G, p: float, l2: float) -> np.ndarray:
    """Full-rank EDLAE with b = 0 (Steck 2020): the EASE form with Lambda = p/(1-p) Diag(G) + l2 I.

    B = I - P Diag(1/diag(P)), P = (G + Lambda)^{-1}; the diagonal of B is zero.
    """
    G = _check_gram(G)
    p = _check_real("p", p, low=0.0, high=1.0, high_open=True)
    l2 = _check_real("l2", l2, low=0.0, low_open=True)
    lam = (p / (1.0 - p)) * np.diag(G) + l2
    P = _spd_inverse(G + np.diag(lam))
    B = -P / np.diag(P)[None, :]
    np.fill_diagonal(B, 0.0)
    return B


def dlae_closed_form(G, p: float, l2: float) -> np.ndarray:
    """Full-rank DLAE (Steck 2020; dropout denoising, b = a): B = (G + p/(1-p) Diag(G) + l2 I)^{-1} G."""
    G = _check_gram(G)
    p = _check_real("p", p, low=0.0, high=1.0, high_open=True)
    l2 = _check_real("l2", l2, low=0.0, low_open=True)
    lam = (p / (1.0 - p)) * np.diag(G) + l2
    return _spd_inverse(G + np.diag(lam)) @ G


def effective_ridge(p: float, a: float, b: float, l2: float) -> float:
    """The ridge r = l2 / (p a^2 + (1 - p) b^2) through which a DEQL solution depends on l2.

    b = 0: r = l2 / (p a^2), the EDLAE ridge; b = a: r = l2 / a^2, the DLAE ridge.
    """
    p, a, b, l2 = _check_deql_params(p, a, b, l2)
    return l2 / (p * a * a + (1.0 - p) * b * b)


def deql_column_scales(m, d, p: float, a: float, b: float, ridge: float):
    """The O(n) vectors (alpha, beta) with B = Diag(alpha) + M Diag(beta), M = (K + ridge I)^{-1}.

    ``m`` = diag(M), ``d`` = diag(G); ``ridge`` is the effective ridge l2 / (p a^2 + q b^2). b = 0 is
    Steck's EDLAE closed form (alpha = 1, beta = -1/m, zero diagonal; at p = 0 this is EASE), b > 0
    the DEQL rank-2 solution, which at b = a is DLAE (alpha = 1, beta = -ridge - (p/q) d).
    """
    m = np.asarray(m, dtype=np.float64)
    d = np.asarray(d, dtype=np.float64)
    p = _check_real("p", p, low=0.0, high=1.0, high_open=True)
    a = _check_real("a", a, low=0.0)
    b = _check_real("b", b, low=0.0)
    r = _check_real("ridge", ridge, low=0.0, low_open=True)
    if b == 0.0:
        if p > 0.0 and a == 0.0:
            raise ValueError("a and b cannot both be 0: the loss would be identically zero")
        return np.ones_like(m), -1.0 / m
    q = 1.0 - p
    w = p * a * a + q * b * b
    e = p * (b * b - a * a)
    g = e - w * p / q
    t = 1.0 - r * m - d * m / q          # sum_{k != j} G_kj M_kj
    c11 = 1.0 + (e / w) * (1.0 - r * m)
    c12 = m / w
    c21 = -(e * e * r / w) * t
    c22 = 1.0 + (e / w) * t
    r1 = 1.0 - r * m + (g / w) * m * d
    r2 = e * t * (g * d / w - r)
    det = c11 * c22 - c12 * c21
    y1 = (c22 * r1 - c12 * r2) / det
    y2 = (-c21 * r1 + c11 * r2) / det
    alpha = 1.0 - e * y1 / w
    beta = -r * alpha + g * d / w - y2 / w
    return alpha, beta


class LinearAEPath:
    """EDLAE (b = 0), DLAE (b = a) and DEQL (any b > 0) at one dropout rate p, for every ridge, from one eigh.

    ``K = G + p/(1-p) Diag(G) = Q diag(lam) Q^T`` is decomposed once; for an effective ridge ``r``
    the shared inverse is ``M = Q diag(1/(lam + r)) Q^T`` and the solution for emphasis ``b`` is
    ``Diag(alpha) + M Diag(beta)`` (:func:`deql_column_scales`). ``coef(r, b)`` equals
    ``deql_closed_form(G, p, a, b, r * (p a^2 + q b^2))`` for b > 0 and ``edlae_closed_form(G, p, r)``
    for b = 0 (``ease_closed_form(G, r)`` at p = 0). ``scores(X, r, bs)`` returns ``X @ B`` for each
    b in O(users x items^2) without forming B.
    """

    def __init__(self, G, p: float, a: float = 1.0):
        G = _check_gram(G)
        self.p = _check_real("p", p, low=0.0, high=1.0, high_open=True)
        self.a = _check_real("a", a, low=0.0)
        self.d = np.diag(G).copy()
        K = G.copy()
        K[np.diag_indices_from(K)] *= 1.0 / (1.0 - self.p)
        lam, Q = np.linalg.eigh(K)
        if lam[0] < -1e-9 * max(abs(lam[-1]), 1.0):
            raise ValueError("G must be positive semi-definite (a Gram matrix X^T X): "
                             f"G + p/(1-p) Diag(G) has eigenvalue {lam[0]:.3g}")
        self.lam = np.clip(lam, 0.0, None)
        self.Q = Q
        self._Q2 = Q * Q
        self.n_items = G.shape[0]

    def _ridge(self, ridge):
        return _check_real("ridge", ridge, low=0.0, low_open=True)

    def inverse_diagonal(self, ridge) -> np.ndarray:
        """diag((K + ridge I)^{-1})."""
        return self._Q2 @ (1.0 / (self.lam + self._ridge(ridge)))

    def inverse(self, ridge) -> np.ndarray:
        """(K + ridge I)^{-1}."""
        return (self.Q / (self.lam + self._ridge(ridge))[None, :]) @ self.Q.T

    def column_scales(self, ridge, b):
        """(alpha, beta) of the member (ridge, b): B = Diag(alpha) + M Diag(beta)."""
        return deql_column_scales(self.inverse_diagonal(ridge), self.d, self.p, self.a, b, ridge)

    def coef(self, ridge, b) -> np.ndarray:
        """The full item x item matrix B of the member (ridge, b)."""
        alpha, beta = self.column_scales(ridge, b)
        B = self.inverse(ridge) * beta[None, :]
        B[np.diag_indices_from(B)] += alpha
        if b == 0:
            np.fill_diagonal(B, 0.0)
        return B

    def scores(self, X, ridge, b_values) -> list:
        """``[X @ B(ridge, b) for b in b_values]`` (dense users x items) from one product with M."""
        Xc = _check_interactions(X)
        if Xc.shape[1] != self.n_items:
            raise ValueError(f"X has {Xc.shape[1]} item columns, the path has {self.n_items}")
        m = self.inverse_diagonal(ridge)
        XM = np.asarray(Xc @ self.Q) / (self.lam + ridge)[None, :] @ self.Q.T
        Xd = np.asarray(Xc.todense())
        out = []
        for b in b_values:
            alpha, beta = deql_column_scales(m, self.d, self.p, self.a, b, ridge)
            S = XM * beta[None, :]
            if b == 0:  # zero diagonal: remove M's diagonal term, the item's own entry does not score it
                S -= Xd * (m * beta)[None, :]
            else:
                S += Xd * alpha[None, :]
            out.append(S)
        return out


def _deql_terms(G, p, a, b, l2):
    """H0, E (with its diagonal), V of the decoupled column objectives (module docstring)."""
    q = 1.0 - p
    K = G.copy()
    K[np.diag_indices_from(K)] *= 1.0 / q  # G + (p/q) Diag(G)
    w = p * a * a + q * b * b
    e = p * (b * b - a * a)
    H0 = w * K
    H0[np.diag_indices_from(H0)] += l2
    E = e * K
    V = w * G
    V[np.diag_indices_from(V)] += e * np.diag(G)
    return H0, E, V


def _check_deql_params(p, a, b, l2):
    p = _check_real("p", p, low=0.0, high=1.0, high_open=True)
    a = _check_real("a", a, low=0.0)
    b = _check_real("b", b, low=0.0)
    l2 = _check_real("l2", l2, low=0.0, low_open=True)
    if p == 0.0 and b == 0.0:
        raise ValueError("with p = 0 nothing is dropped, so b must be > 0 (a is unused)")
    if p > 0.0 and a == 0.0 and b == 0.0:
        raise ValueError("a and b cannot both be 0: the loss would be identically zero")
    return p, a, b, l2


def deql_closed_form(G, p: float, a: float, b: float, l2: float, zero_diagonal: bool = False) -> np.ndarray:
    """DEQL minimiser for any b >= 0 in O(n^3) (the paper's Miller-inverse algorithm: rank-2 update per column).

    Column j solves (H0 + U_j V_j^T) beta_j = v_j with U_j = [E e_j, e_j], V_j = [e_j, E~ e_j]
    (E~ = E with zero diagonal). Woodbury with P = H0^{-1}:
    beta_j = P v_j - P U_j (I_2 + V_j^T P U_j)^{-1} V_j^T P v_j, where every 2x2 core and
    right-hand side is read off S1 = P V, S2 = P E and P, so one inverse and two n x n products
    serve all columns. ``zero_diagonal`` adds the constraint B_jj = 0 (exact, via the solution of
    the same system with right-hand side e_j).
    """
    if not isinstance(zero_diagonal, (bool, np.bool_)):
        raise ValueError(f"zero_diagonal must be True or False, got {zero_diagonal!r}")
    free, diag0 = _deql_solutions(G, p, a, b, l2, zero_diagonal=bool(zero_diagonal))
    return diag0 if zero_diagonal else free


def deql_closed_form_pair(G, p: float, a: float, b: float, l2: float) -> tuple[np.ndarray, np.ndarray]:
    """Both DEQL minimisers from one factorisation: ``(free diagonal, diag(B) = 0)``.

    The same as ``(deql_closed_form(G, ...), deql_closed_form(G, ..., zero_diagonal=True))`` at the
    cost of one inverse (a hyperparameter search over both variants needs one per grid point).
    """
    return _deql_solutions(G, p, a, b, l2, zero_diagonal=True)


def _deql_solutions(G, p, a, b, l2, zero_diagonal):
    G = _check_gram(G)
    p, a, b, l2 = _check_deql_params(p, a, b, l2)
    H0, E, V = _deql_terms(G, p, a, b, l2)
    P = _spd_inverse(H0)
    S1 = P @ V
    S2 = P @ E
    E0 = E.copy()
    np.fill_diagonal(E0, 0.0)
    d = np.arange(G.shape[0])
    # 2x2 core entries for every column j (E0 symmetric: row j of E0 dotted with column j of M)
    c11 = 1.0 + S2[d, d]
    c12 = P[d, d]
    c21 = np.einsum("kj,kj->j", E0, S2)
    c22 = 1.0 + np.einsum("kj,kj->j", E0, P)
    det = c11 * c22 - c12 * c21

    def solve(R, r1):
        r2 = np.einsum("kj,kj->j", E0, R)
        y1 = (c22 * r1 - c12 * r2) / det
        y2 = (-c21 * r1 + c11 * r2) / det
        return R - S2 * y1[None, :] - P * y2[None, :]

    B = solve(S1, S1[d, d])
    if not zero_diagonal:
        return B, None
    U = solve(P, P[d, d])  # column j: (H0 + Delta_j)^{-1} e_j
    B0 = B - U * (B[d, d] / U[d, d])[None, :]
    B0[d, d] = 0.0
    return B, B0


def deql_naive(G, p: float, a: float, b: float, l2: float, zero_diagonal: bool = False) -> np.ndarray:
    """Reference O(n^4) solver: build and solve each column's normal equations separately."""
    G = _check_gram(G)
    p, a, b, l2 = _check_deql_params(p, a, b, l2)
    H0, E, V = _deql_terms(G, p, a, b, l2)
    n = G.shape[0]
    B = np.zeros((n, n))
    for j in range(n):
        H = H0.copy()
        H[j, :] += E[j, :]
        H[:, j] += E[:, j]
        H[j, j] -= E[j, j]
        if zero_diagonal:
            keep = np.arange(n) != j
            B[keep, j] = np.linalg.solve(H[np.ix_(keep, keep)], V[keep, j])
        else:
            B[:, j] = np.linalg.solve(H, V[:, j])
    return B


def deql_expected_loss(X, B, p: float, a: float, b: float, l2: float) -> float:
    """The EDLAE/DEQL expected loss by explicit enumeration of all 2^n dropout masks.

    E_mask sum_u sum_j w_j(mask) (x_uj - sum_k mask_k x_uk B_kj / q)^2 + l2 ||B||_F^2 with
    w_j = a^2 if mask_j = 0 (dropped) else b^2. Exponential in n: a test reference for n <= 12.
    """
    X = np.asarray(_check_interactions(X).todense())
    B = np.asarray(B, dtype=np.float64)
    p = _check_real("p", p, low=0.0, high=1.0, high_open=True)
    a = _check_real("a", a)
    b = _check_real("b", b)
    l2 = _check_real("l2", l2, low=0.0)
    if not np.all(np.isfinite(B)):
        raise ValueError("B contains NaN or infinite values")
    n = X.shape[1]
    if n > 12:
        raise ValueError(f"deql_expected_loss enumerates 2^n masks; n must be <= 12, got {n}")
    if B.shape != (n, n):
        raise ValueError(f"B must have shape {(n, n)}, got {B.shape}")
    q = 1.0 - p
    total = 0.0
    for code in range(2**n):
        m = np.array([(code >> k) & 1 for k in range(n)], dtype=np.float64)  # 1 = kept
        prob = np.prod(np.where(m == 1, q, p))
        if prob == 0.0:
            continue
        R = X - (X * m[None, :] / q) @ B
        wts = np.where(m == 1, b * b, a * a)
        total += prob * float(np.sum(wts[None, :] * R * R))
    return total + l2 * float(np.sum(B * B))


# --------------------------------------------------------------------------- estimators
class _LinearAERecommender(BaseEstimator):
    """Shared scoring and top-k logic: scores = X_users @ coef_."""

    def _fit_coef(self, G):  # pragma: no cover - abstract
        raise NotImplementedError

    def fit(self, X, y=None):
        """Fit on a users x items interaction matrix (scipy sparse or dense); ``y`` is ignored.

        The loss is least squares, so any finite real entries are accepted (negative ones included);
        the method is meant for implicit feedback (0/1) or non-negative weights.
        """
        Xc = _check_interactions(X)
        self.coef_ = self._fit_coef(gram(Xc))
        self.n_items_ = Xc.shape[1]
        self.n_features_in_ = Xc.shape[1]
        self.X_fit_ = Xc
        return self

    def _history(self, users):
        if not hasattr(self, "coef_"):
            raise ValueError(f"This {type(self).__name__} instance is not fitted yet: call fit(X) first")
        if sp.issparse(users) or (np.ndim(users) == 2):
            Xu = _check_interactions(users, "users")
            if Xu.shape[1] != self.n_items_:
                raise ValueError(f"users has {Xu.shape[1]} item columns, the model was fitted on {self.n_items_}")
            return Xu
        idx = np.asarray(users)
        if idx.ndim != 1 or not np.issubdtype(idx.dtype, np.integer):
            raise ValueError("users must be a 1-D array of row indices into the fitted matrix, "
                             "or a 2-D users x items history matrix")
        if idx.size and (idx.min() < 0 or idx.max() >= self.X_fit_.shape[0]):
            raise ValueError(f"user indices must lie in [0, {self.X_fit_.shape[0] - 1}]")
        return self.X_fit_[idx]

    def predict_scores(self, users) -> np.ndarray:
        """Dense scores (n_users x n_items): ``users`` is a history matrix or row indices of the fit data."""
        Xu = self._history(users)
        return np.asarray(Xu @ self.coef_)

    def recommend(self, users, k: int = 20, exclude_seen: bool = True) -> np.ndarray:
        """Top-``k`` item indices per user, best first; items already in the history are excluded."""
        if isinstance(k, bool) or not isinstance(k, numbers.Integral) or k < 1:
            raise ValueError(f"k must be a positive integer, got {k!r}")
        Xu = self._history(users)
        if k > self.n_items_:
            raise ValueError(f"k must be <= the number of items ({self.n_items_}), got {k}")
        S = np.asarray(Xu @ self.coef_, dtype=np.float64)
        if exclude_seen:
            rows, cols = Xu.nonzero()
            S[rows, cols] = -np.inf
            n_unseen = self.n_items_ - np.bincount(rows, minlength=Xu.shape[0])
            short = np.flatnonzero(n_unseen < k)
            if short.size:
                raise ValueError(f"{short.size} user(s) have fewer than k = {k} unseen items (first: row {short[0]}, "
                                 f"{int(n_unseen[short[0]])} unseen): ask for a smaller k or pass exclude_seen=False")
        part = np.argpartition(-S, k - 1, axis=1)[:, :k]
        order = np.argsort(-np.take_along_axis(S, part, axis=1), axis=1, kind="stable")
        return np.take_along_axis(part, order, axis=1)

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.requires_fit = True
        tags.target_tags.required = False
        return tags


class DEQLRecommender(_LinearAERecommender):
    """EDLAE trained with the Decoupled Expected Quadratic Loss, closed form for any b >= 0.

    Parameters
    ----------
    p : dropout probability of an input entry, in [0, 1). Default 0.33: the EDLAE default
        (Steck 2020 used p = 0.33 on ML-20M); the DEQL grid in the official config spans 0.1-0.9.
    a : emphasis weight of dropped coordinates. Default 1.0 (official config, a: [1.0]).
    b : emphasis weight of kept coordinates. b = 0 is Steck's EDLAE; the paper's contribution is b > 0.
        Default 0.5 (inside the official grid 0.1-2.0; not a tuned value).
    l2 : L2 penalty on B, > 0. Default 100.0 (inside the official grid 10-500; not tuned).
    zero_diagonal : also constrain diag(B) = 0 (the official code's "diag0" variant). Default False.

    Fitted attributes: ``coef_`` (items x items), ``n_items_``, ``X_fit_`` (the training matrix).
    """

    def __init__(self, p=0.33, a=1.0, b=0.5, l2=100.0, zero_diagonal=False):
        self.p = p
        self.a = a
        self.b = b
        self.l2 = l2
        self.zero_diagonal = zero_diagonal

    def _fit_coef(self, G):
        if not isinstance(self.zero_diagonal, (bool, np.bool_)):
            raise ValueError(f"zero_diagonal must be True or False, got {self.zero_diagonal!r}")
        return deql_closed_form(G, self.p, self.a, self.b, self.l2, bool(self.zero_diagonal))


class EDLAERecommender(_LinearAERecommender):
    """Full-rank EDLAE with b = 0 (Steck 2020): EASE with a dropout-induced diagonal penalty.

    ``p`` dropout probability in [0, 1) (default 0.33, Steck 2020); ``l2`` > 0 the extra ridge.
    """

    def __init__(self, p=0.33, l2=100.0):
        self.p = p
        self.l2 = l2

    def _fit_coef(self, G):
        return edlae_closed_form(G, self.p, self.l2)


class EASERecommender(_LinearAERecommender):
    """EASE (Steck 2019): zero-diagonal ridge autoencoder; ``l2`` > 0 (default 500, Steck's ML-20M value)."""

    def __init__(self, l2=500.0):
        self.l2 = l2

    def _fit_coef(self, G):
        return ease_closed_form(G, self.l2)
