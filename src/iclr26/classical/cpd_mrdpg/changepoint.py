"""Change-point localisation and inference in dynamic multilayer random dot product graphs.

Paper: "Change Point Localization and Inference in Dynamic Multilayer Networks",
Fan Wang, Kyle Ritscher, Yik Lun Kei, Xin Ma, Oscar Hernan Madrid Padilla (ICLR 2026),
arXiv:2506.21878. Official code (R): https://github.com/allenkei/CPDmrdpg

Model (paper Sec. 2): at time t a multilayer network ``A(t) in {0,1}^{n x n x L}`` with
``E A_ijl(t) = P_ijl(t) = X_i^T W^(l)(t) Y_j``; the latent positions are fixed and the layer
matrices ``W^(l)(t)`` are piecewise constant in t. The change points are the jump times.

Stage 1 (seeded binary segmentation with a sample-split CUSUM): the sequence is split into two
independent halves ``A`` and ``B`` (odd / even times). On every seeded interval ``(s, e]``
(Kovacs et al. seeded intervals: decay ``alpha = sqrt(1/2)``, minimum length 4, both ends trimmed
by ``ceil((e - s)/64)``) the statistic

    D_{s,e}(t) = | < A~_{s,e}(t), B~_{s,e}(t) > |,
    A~_{s,e}(t) = sqrt((e-t)/((e-s)(t-s))) sum_{u=s+1}^{t} A(u) - sqrt((t-s)/((e-s)(e-t))) sum_{u=t+1}^{e} A(u)

is maximised over t; candidates whose maximum exceeds the threshold ``tau`` are selected
greedily (largest first, skipping intervals that already contain a selected point).
Stage 2 (local refinement with low-rank tensor estimates), on the window ``s_k = floor((nu_{k-1} +
nu_k)/2)``, ``e_k = ceil((nu_k + nu_{k+1})/2)`` around each detected ``nu_k``. The official code's
``refinement1`` (``refinement="cusum"``, the default; the one its simulation wrapper runs) projects
the CUSUM on the TH-PCA estimate of the jump at ``nu_k``:

    P^ = TH-PCA(A~_{s_k,e_k}(nu_k)), clipped to +-2 sqrt((e_k - nu_k)(nu_k - s_k)/(e_k - s_k)),
    eta_k = argmax_{s_k < t < e_k} |< P^ / ||P^||, A~_{s_k,e_k}(t) >|,

with ``A~`` from the same half ``A`` as the official code has it (its ``CUSUM_refinement`` builds
both from ``obj``). ``refinement="least_squares"`` (the official ``refinement2``'s cost on the
midpoint window): the segment means of ``B`` on both sides are denoised by tensor heteroskedastic
PCA (TH-PCA, ranks ``(d, d, L)``) to ``P_left, P_right`` and

    eta_k = argmin_{s_k < eta < e_k}  sum_{t=s_k+1}^{eta} ||A(t) - P_left||_F^2 + sum_{t=eta+1}^{e_k} ||A(t) - P_right||_F^2,

with ``s_k = floor((nu_{k-1} + nu_k)/2)``, ``e_k = ceil((nu_k + nu_{k+1})/2)``.
Inference (paper Sec. 4): ``kappa_k^2 (eta_k - eta_k*) -> argmin_r P_k(r)`` with
``P_k(r) = -r + 2 sigma_k W_1(-r)`` for ``r < 0`` and ``r + 2 sigma_{k+1} W_2(r)`` for ``r > 0``
(``W_1, W_2`` independent standard Brownian motions). ``kappa_k = ||P_right - P_left||_F``,
``sigma^2`` = variance of ``<Psi_k, A(t) - P_segment>`` with ``Psi_k`` the normalised jump; the
interval is ``[eta_k - q_{1-a/2}/kappa^2, eta_k - q_{a/2}/kappa^2]`` from simulated quantiles.
"""
from __future__ import annotations

from dataclasses import dataclass
from numbers import Integral, Real

import numpy as np

__all__ = ["seeded_intervals", "cusum_split", "hetero_pca", "th_pca", "MRDPGChangePoint"]


def seeded_intervals(T: int, alpha: float = np.sqrt(0.5), min_len: int = 4) -> np.ndarray:
    """Seeded intervals ``(s, e]`` on ``{0, ..., T}`` (Kovacs, Li, Buehlmann, Munk 2023).

    Layer k (k = 1, ..., ceil(log_{1/alpha} T)) has ``n_k = 2 ceil(alpha^{-(k-1)}) - 1`` intervals of
    length ``l_k = T alpha^{k-1}`` shifted evenly by ``(T - l_k)/(n_k - 1)``, from
    ``floor(i shift)`` to ``min(ceil(i shift + l_k), T)``; layers stop once ``ceil(l_k) < min_len``
    and intervals shorter than ``min_len`` are dropped. The floating-point arithmetic is the official
    ``construct_intervals``' (no rounding guards: ``T alpha^2`` is ``T/2 + 1 ulp``, so its ceiling is
    ``T/2 + 1``). Duplicates are removed (rows sorted).
    """
    if not (isinstance(T, Integral) and not isinstance(T, bool) and T >= 2):
        raise ValueError(f"T must be an integer >= 2, got {T!r}")
    if not (isinstance(alpha, Real) and 0 < alpha < 1):
        raise ValueError(f"alpha (interval decay) must lie in (0, 1), got {alpha!r}")
    if not (isinstance(min_len, Integral) and not isinstance(min_len, bool) and min_len >= 2):
        raise ValueError(f"min_len must be an integer >= 2, got {min_len!r}")
    T, alpha = int(T), float(alpha)
    out = []
    n_layers = int(np.ceil(np.log(T) / np.log(1 / alpha)))
    for k in range(1, n_layers + 1):
        nk = 2 * int(np.ceil((1 / alpha) ** (k - 1))) - 1
        lk = T * alpha ** (k - 1)
        sk = 0.0 if nk == 1 else (T - lk) / (nk - 1)
        if np.ceil(lk) < min_len:
            break
        for i in range(nk):
            s = int(np.floor(i * sk))
            e = int(min(np.ceil(i * sk + lk), T))
            if e - s >= min_len:
                out.append((s, e))
    return np.unique(np.array(out, dtype=int).reshape(-1, 2), axis=0)


def cusum_split(CA: np.ndarray, CB: np.ndarray, s: int, e: int) -> tuple[np.ndarray, np.ndarray]:
    """``D_{s,e}(t)`` for all ``t`` in ``s+1..e-1`` from prefix sums ``CA[t] = sum_{u<t} A(u)`` (flattened)."""
    t = np.arange(s + 1, e)
    a = np.sqrt((e - t) / ((e - s) * (t - s)))[:, None]
    b = np.sqrt((t - s) / ((e - s) * (e - t)))[:, None]
    At = a * (CA[t] - CA[s]) - b * (CA[e] - CA[t])
    Bt = a * (CB[t] - CB[s]) - b * (CB[e] - CB[t])
    return t, np.abs(np.einsum("ij,ij->i", At, Bt))


def hetero_pca(G: np.ndarray, r: int, tmax: int = 20, tol: float = 1e-6) -> np.ndarray:
    """HeteroPCA (Zhang, Cai, Wu 2022) of a symmetric Gram matrix: leading ``r`` singular vectors.

    The diagonal (biased by heteroskedastic noise) is deleted, then iteratively replaced by the
    diagonal of the current rank-``r`` approximation.
    """
    N = np.array(G, dtype=float, copy=True)
    if N.ndim != 2 or N.shape[0] != N.shape[1] or N.shape[0] == 0:
        raise ValueError(f"G must be a non-empty square (Gram) matrix, got shape {N.shape}")
    if not np.all(np.isfinite(N)):
        raise ValueError("G contains NaN or infinite entries")
    if not (isinstance(r, Integral) and not isinstance(r, bool) and 1 <= r <= N.shape[0]):
        raise ValueError(f"r (the rank) must be an integer in 1..{N.shape[0]} (the size of G), got {r!r}")
    if not (isinstance(tmax, Integral) and not isinstance(tmax, bool) and tmax >= 1):
        raise ValueError(f"tmax must be a positive integer, got {tmax!r}")
    np.fill_diagonal(N, 0.0)
    prev = -1.0
    U = None
    for _ in range(tmax):
        U, sv, Vt = np.linalg.svd(N)
        U = U[:, :r]
        approx_diag = np.einsum("ij,j,ji->i", U, sv[:r], Vt[:r])
        np.fill_diagonal(N, approx_diag)
        cur = float(approx_diag @ approx_diag)
        if abs(cur - prev) <= tol:
            break
        prev = cur
    return U


def th_pca(Y: np.ndarray, ranks, tmax: int = 20, clip=(0.0, 1.0)) -> np.ndarray:
    """Tensor heteroskedastic PCA estimate of a low-Tucker-rank mean tensor (paper Sec. 3).

    For each mode k the Gram matrix of the mode-k unfolding goes through :func:`hetero_pca`;
    the estimate is ``Y x_1 U1U1^T x_2 U2U2^T x_3 U3U3^T``, clipped to ``clip``.
    """
    Y = np.asarray(Y, dtype=float)
    ranks = tuple(ranks)
    if Y.ndim != len(ranks):
        raise ValueError(f"ranks must give one rank per mode of Y: Y has {Y.ndim} modes (shape {Y.shape}), "
                         f"got {len(ranks)} ranks {ranks!r}")
    for mode, r in enumerate(ranks):
        if not (isinstance(r, Integral) and not isinstance(r, bool) and 1 <= r <= Y.shape[mode]):
            raise ValueError(f"ranks[{mode}] must be an integer in 1..{Y.shape[mode]} (the size of mode {mode}), "
                             f"got {r!r}")
    if not np.all(np.isfinite(Y)):
        raise ValueError("Y contains NaN or infinite entries")
    Us = []
    for mode, r in enumerate(ranks):
        M = np.moveaxis(Y, mode, 0).reshape(Y.shape[mode], -1)
        Us.append(hetero_pca(M @ M.T, int(r), tmax))
    P = Y
    for mode, U in enumerate(Us):
        P = np.moveaxis(np.tensordot(U @ U.T, np.moveaxis(P, mode, 0), axes=(1, 0)), 0, mode)
    if clip is not None:
        P = np.clip(P, clip[0], clip[1])
    return P


@dataclass(frozen=True)
class ConfidenceInterval:
    estimate: int
    lower: float
    upper: float
    kappa: float
    sigma_left: float
    sigma_right: float


class MRDPGChangePoint:
    """Offline change points of a dynamic multilayer RDPG (ruptures-style ``fit``/``predict``).

    Parameters
    ----------
    ranks : tuple of 3 ints, or None
        Tucker ranks ``(d, d, L)`` for TH-PCA. ``None`` uses raw segment means in the refinement
        (the ablation that ignores the low-rank structure), with the noise bias of their squared norms
        removed (see ``_squared_norm``).
    threshold : float or "auto"
        Selection threshold ``tau``. ``"auto"``: ``c * n * sqrt(L) * log(T/2)^{3/2}``, the rate
        of the paper's threshold, with constant ``c`` (``threshold_c``).
    threshold_c : float, default 0.1 (the simulation wrapper uses values in [0.05, 0.25]).
    alpha : float, default sqrt(1/2) (seeded-interval decay). min_len : int, default 4.
    refine : bool, default True (stage 2; False returns the stage-1 estimates).
    refinement : "cusum" (default) or "least_squares"
        Stage 2: the official ``refinement1`` (argmax of the CUSUM projected on the TH-PCA jump
        estimate) or the least-squares cost between the two TH-PCA segment means.
    jump_half : "same" (default) or "other"
        Which half the jump estimate ``P^`` of ``refinement1`` comes from. ``"same"``: the half ``A``
        whose CUSUM it projects, as the official code has it. ``"other"`` (a deviation from the
        official code): the independent half ``B``, so that the noise of ``P^`` does not correlate
        with the CUSUM it is projected on.
    n_sim : int, default 500 (Monte-Carlo draws for the limiting distribution).
    random_state : int, Generator or None (used only for the Monte-Carlo quantiles).

    ``fit(A)`` takes a binary ``A`` of shape ``(T, n, n, L)`` (entries 0/1; T even: the two halves
    interleave) and sets ``change_points_`` (in original time units: the first time index of each new
    segment). Non-binary or negative entries and odd T raise ``ValueError``. Also set:
    ``stage1_half_`` (stage-1 estimates, half-sequence units), ``half_change_points_``,
    ``threshold_`` and ``candidates_`` (one row per trimmed seeded interval: the maximising t, the
    maximum of D, s and e, half-sequence units).
    """

    def __init__(self, ranks=(5, 5, 4), threshold="auto", threshold_c=0.1, alpha=float(np.sqrt(0.5)),
                 min_len=4, refine=True, refinement="cusum", jump_half="same", n_sim=500, random_state=None):
        self.ranks = ranks
        self.threshold = threshold
        self.threshold_c = threshold_c
        self.alpha = alpha
        self.min_len = min_len
        self.refine = refine
        self.refinement = refinement
        self.jump_half = jump_half
        self.n_sim = n_sim
        self.random_state = random_state

    # ------------------------------------------------------------------ validation
    def _validate(self, A):
        # the parameters first: the length check below uses min_len
        if self.ranks is not None:
            r = tuple(self.ranks)
            if len(r) != 3 or not all(isinstance(x, Integral) and not isinstance(x, bool) and x >= 1 for x in r):
                raise ValueError(f"ranks must be 3 positive integers (d, d, L) or None, got {self.ranks!r}")
        if not (isinstance(self.threshold, str) and self.threshold == "auto"
                or _positive_finite(self.threshold)):
            raise ValueError(f"threshold must be 'auto' or a positive finite number, got {self.threshold!r}")
        if not _positive_finite(self.threshold_c):
            raise ValueError(f"threshold_c must be a positive finite number, got {self.threshold_c!r}")
        if not (isinstance(self.alpha, Real) and 0 < self.alpha < 1):
            raise ValueError(f"alpha must lie in (0, 1), got {self.alpha!r}")
        if not (isinstance(self.min_len, Integral) and not isinstance(self.min_len, bool) and self.min_len >= 2):
            raise ValueError(f"min_len must be an integer >= 2, got {self.min_len!r}")
        if self.refinement not in ("cusum", "least_squares"):
            raise ValueError(f"refinement must be 'cusum' or 'least_squares', got {self.refinement!r}")
        if not isinstance(self.refine, (bool, np.bool_)):
            raise ValueError(f"refine must be True or False, got {self.refine!r}")
        if self.jump_half not in ("same", "other"):
            raise ValueError(f"jump_half must be 'same' or 'other', got {self.jump_half!r}")
        if not (isinstance(self.n_sim, Integral) and not isinstance(self.n_sim, bool) and self.n_sim >= 50):
            raise ValueError(f"n_sim must be an integer >= 50, got {self.n_sim!r}")
        A = np.asarray(A, dtype=float)
        if A.ndim != 4 or A.shape[1] != A.shape[2]:
            raise ValueError(f"A must have shape (T, n, n, L) (a sequence of n x n x L adjacency tensors), got {A.shape}")
        if A.shape[1] == 0 or A.shape[3] == 0:
            raise ValueError(f"A must have at least one node and one layer: shape (T, n, n, L) = {A.shape}")
        if A.shape[0] < 2 * (self.min_len + 2):
            raise ValueError(f"the sequence is too short: T = {A.shape[0]} < {2 * (self.min_len + 2)}")
        if not np.all(np.isfinite(A)):
            raise ValueError("A contains NaN or infinite entries")
        if not np.all((A == 0) | (A == 1)):
            bad = A[(A != 0) & (A != 1)]
            raise ValueError(f"A must hold binary adjacency tensors (entries 0 or 1, the model's Bernoulli edges); "
                             f"found {bad.size} other entries, e.g. {float(bad.flat[0]):g} (min {float(A.min()):g}): "
                             "binarise weighted networks first")
        if A.shape[0] % 2:
            raise ValueError(f"T must be even: the sample split pairs odd and even times into two halves of equal "
                             f"length; got T = {A.shape[0]} (drop the first or the last time point)")
        if self.ranks is not None:
            dims = (A.shape[1], A.shape[2], A.shape[3])
            if any(r > m for r, m in zip(self.ranks, dims)):
                raise ValueError(f"ranks {tuple(self.ranks)!r} exceed the tensor dimensions (n, n, L) = {dims}: "
                                 "each rank must be at most its mode's size")
        return A

    # ------------------------------------------------------------------ stages
    def _estimate(self, Y):
        if self.ranks is None:
            return Y
        return th_pca(Y, self.ranks)

    def fit(self, A):
        A = self._validate(A)
        half_A, half_B = A[1::2], A[0::2]          # odd and even times: two independent halves
        Th = half_A.shape[0]
        n, L = A.shape[1], A.shape[3]
        self.n_layers_, self.n_nodes_, self.T_ = L, n, A.shape[0]
        tau = (self.threshold_c * n * np.sqrt(L) * np.log(Th) ** 1.5 if self.threshold == "auto"
               else float(self.threshold))
        self.threshold_ = float(tau)
        flatA, flatB = half_A.reshape(Th, -1), half_B.reshape(Th, -1)
        CA = np.vstack([np.zeros(flatA.shape[1]), np.cumsum(flatA, axis=0)])
        CB = np.vstack([np.zeros(flatB.shape[1]), np.cumsum(flatB, axis=0)])
        rows = []
        for s0, e0 in seeded_intervals(Th, self.alpha, self.min_len):
            eps = int(np.ceil((e0 - s0) / 64))
            s, e = s0 + eps, e0 - eps
            if e - s <= 1:
                continue
            t, D = cusum_split(CA, CB, s, e)
            j = int(np.argmax(D))
            rows.append((int(t[j]), float(D[j]), s, e))
        self.candidates_ = np.array(rows, dtype=float).reshape(-1, 4)
        rows.sort(key=lambda r: -r[1])
        selected = []
        for cand, gain, s, e in rows:
            if gain < tau:
                break
            if all(c <= s or c >= e for c, *_ in selected):
                selected.append((cand, gain, s, e))
        nu = sorted(c for c, *_ in selected)
        self.stage1_half_ = np.array(nu, dtype=int)
        self._A, self._B = half_A, half_B
        self._CA, self._CB = CA, CB
        if self.refine and nu:
            eta = self._refine(nu) if self.refinement == "least_squares" else self._refine_cusum(nu)
        else:
            eta = list(nu)
        self.half_change_points_ = np.array(eta, dtype=int)
        self.change_points_ = 2 * self.half_change_points_
        return self

    def _segment_estimates(self, bounds, k):
        left = self._estimate(self._B[bounds[k - 1]:bounds[k]].mean(axis=0))
        right = self._estimate(self._B[bounds[k]:bounds[k + 1]].mean(axis=0))
        return left, right

    def _squared_norm(self, P, m):
        """``||P||_F^2`` of a segment estimate from ``m`` B-half graphs, as the refinement cost uses it.

        TH-PCA estimates (the paper) enter as they are. Raw segment means (``ranks=None``) carry the
        Bernoulli noise: ``E[Bbar^2] = P^2 + P (1 - P) / m``, so ``||Bbar||^2`` overstates ``||P||^2`` by
        ``sum P (1 - P) / m``, more for the shorter segment, which drags the least-squares argmin
        towards it. For them the unbiased ``sum (m Bbar^2 - Bbar) / (m - 1)`` is used (``m >= 2``).
        """
        if self.ranks is not None or m < 2:
            return float(np.sum(P * P))
        return float(np.sum(m * P * P - P) / (m - 1))

    @staticmethod
    def _window(bounds, k):
        """The refinement window ``(s_k, e_k) = (floor((nu_{k-1} + nu_k)/2), ceil((nu_k + nu_{k+1})/2))``."""
        return (bounds[k - 1] + bounds[k]) // 2, -(-(bounds[k] + bounds[k + 1]) // 2)

    def _refine(self, nu):
        Th = self._A.shape[0]
        bounds = [0, *nu, Th]
        out = []
        for k in range(1, len(bounds) - 1):
            s, e = self._window(bounds, k)
            if e - s <= 1:
                out.append(bounds[k])
                continue
            Pl, Pr = self._segment_estimates(bounds, k)
            seg = self._A[s:e].reshape(e - s, -1)
            # ||A(t) - P||^2 = ||A(t)||^2 - 2 <A(t), P> + ||P||^2; the ||A(t)||^2 terms add the same
            # constant to every candidate eta, so they are left out
            nl = self._squared_norm(Pl, bounds[k] - bounds[k - 1])
            nr = self._squared_norm(Pr, bounds[k + 1] - bounds[k])
            cl = nl - 2.0 * (seg @ Pl.ravel())
            cr = nr - 2.0 * (seg @ Pr.ravel())
            # cost(eta) for eta in s+1..e-1: first (eta - s) points on the left estimate
            m = np.arange(1, e - s)
            cost = np.cumsum(cl)[m - 1] + (np.sum(cr) - np.cumsum(cr)[m - 1])
            out.append(int(s + m[np.argmin(cost)]))
        return out

    def _jump_estimate(self, s, e, v):
        """``P^``: TH-PCA of the CUSUM tensor at ``v`` on ``(s, e]`` (of half ``A``, or ``B`` with
        ``jump_half="other"``), clipped to ``+-2 sqrt((e - v)(v - s)/(e - s))`` as the official code does."""
        C = self._CA if self.jump_half == "same" else self._CB
        jump = (np.sqrt((e - v) / ((e - s) * (v - s))) * (C[v] - C[s])
                - np.sqrt((v - s) / ((e - s) * (e - v))) * (C[e] - C[v])).reshape(self._A.shape[1:])
        bound = 2.0 * np.sqrt((e - v) * (v - s) / (e - s))
        return np.clip(jump if self.ranks is None else th_pca(jump, self.ranks, clip=None), -bound, bound)

    def _refine_cusum(self, nu):
        """The official ``refinement1``: argmax of the CUSUM projected on the jump estimate at ``nu_k``."""
        Th = self._A.shape[0]
        CA = self._CA
        bounds = [0, *nu, Th]
        out = []
        for k in range(1, len(bounds) - 1):
            s, e = self._window(bounds, k)
            v = bounds[k]
            if e - s <= 1:
                out.append(v)
                continue
            P = self._jump_estimate(s, e, v)
            norm = float(np.linalg.norm(P))
            if norm == 0.0:
                out.append(v)
                continue
            t = np.arange(s + 1, e)
            a = np.sqrt((e - t) / ((e - s) * (t - s)))[:, None]
            b = np.sqrt((t - s) / ((e - s) * (e - t)))[:, None]
            At = a * (CA[t] - CA[s]) - b * (CA[e] - CA[t])
            gain = np.abs(At @ P.ravel()) / norm
            # the official loop keeps the first t whose gain beats the running maximum (started at 0)
            out.append(int(t[np.argmax(gain)]) if gain.max() > 0 else v)
        return out

    def predict(self):
        """ruptures convention: sorted breakpoints including the end ``T``."""
        self._check_fitted()
        return [*self.change_points_.tolist(), self.T_]

    def _check_fitted(self):
        if not hasattr(self, "change_points_"):
            raise RuntimeError("this MRDPGChangePoint is not fitted yet: call fit(A) first")

    def confidence_intervals(self, level: float = 0.95) -> list[ConfidenceInterval]:
        """Intervals for each change point from the limiting distribution (original time units).

        As in the official ``construct_CI``: after the projected-CUSUM refinement (``refinement1``) each
        interval is centred at the least-squares re-estimate (``refinement2``, the midpoint window
        around the fitted change points), while the jump size and the variances come from the
        segments between the fitted change points. After ``refinement="least_squares"`` the fitted
        points are the centres.
        """
        self._check_fitted()
        if not (isinstance(level, Real) and 0 < level < 1):
            raise ValueError(f"level must lie in (0, 1), got {level!r}")
        rng = np.random.default_rng(self.random_state)
        eta = self.half_change_points_.tolist()
        centre = self._refine(eta) if (self.refine and self.refinement == "cusum" and eta) else list(eta)
        Th = self._A.shape[0]
        bounds = [0, *eta, Th]
        out = []
        for k in range(1, len(bounds) - 1):
            Pl, Pr = self._segment_estimates(bounds, k)
            diff = Pr - Pl
            kappa = float(np.linalg.norm(diff))
            if kappa == 0:
                out.append(ConfidenceInterval(2 * centre[k - 1], -np.inf, np.inf, 0.0, np.nan, np.nan))
                continue
            psi = (diff / kappa).ravel()
            sig = []
            for a, b, P in ((bounds[k - 1], bounds[k], Pl), (bounds[k], bounds[k + 1], Pr)):
                proj = (self._A[a:b].reshape(b - a, -1) - P.ravel()) @ psi
                sig.append(float(np.sqrt(np.sum(proj ** 2) / max(b - a - 1, 1))))
            q = limiting_quantiles(sig[0], sig[1], ((1 - level) / 2, (1 + level) / 2), self.n_sim, rng)
            lo = centre[k - 1] - q[1] / kappa ** 2
            hi = centre[k - 1] - q[0] / kappa ** 2
            out.append(ConfidenceInterval(2 * centre[k - 1], 2 * lo, 2 * hi, kappa, sig[0], sig[1]))
        return out


def limiting_quantiles(sigma_left, sigma_right, probs, n_sim=500, rng=None, grid_step=None, horizon=None):
    """Quantiles of ``argmin_r P(r)``, ``P(r) = |r| + 2 sigma_{left/right} W(|r|)`` (two-sided BM with drift).

    Simulated on a grid of step ``grid_step`` over ``[-horizon, horizon]``; the defaults
    (``max(sigma)^2 / 50`` and ``60 max(sigma)^2``) scale with the argmin's natural scale ``4 sigma^2``.
    (The official ``construct_CI`` evaluates the paths on ``seq(-T_h, T_h, length.out = 201)``, step 1
    in units of r, with ``T_h`` the half-sequence length.) ``sigma_left`` drives ``r < 0``,
    ``sigma_right`` ``r > 0``.
    """
    for name, v in (("sigma_left", sigma_left), ("sigma_right", sigma_right)):
        if not (isinstance(v, Real) and not isinstance(v, bool) and np.isfinite(v) and v >= 0):
            raise ValueError(f"{name} must be a finite number >= 0 (a standard deviation), got {v!r}")
    if not (isinstance(n_sim, Integral) and not isinstance(n_sim, bool) and n_sim >= 1):
        raise ValueError(f"n_sim must be a positive integer, got {n_sim!r}")
    p = np.asarray(probs, dtype=float)
    if p.size == 0 or not np.all((p >= 0) & (p <= 1)):
        raise ValueError(f"probs must be probabilities in [0, 1], got {probs!r}")
    for name, v in (("grid_step", grid_step), ("horizon", horizon)):
        if v is not None and not _positive_finite(v):
            raise ValueError(f"{name} must be a positive finite number or None, got {v!r}")
    rng = np.random.default_rng(rng)
    s2 = max(sigma_left, sigma_right, 1e-12) ** 2
    h = grid_step if grid_step is not None else s2 / 50.0
    H = horizon if horizon is not None else 60.0 * s2
    m = int(np.ceil(H / h))
    r = h * np.arange(1, m + 1)
    inc_l = rng.standard_normal((n_sim, m)) * np.sqrt(h)
    inc_r = rng.standard_normal((n_sim, m)) * np.sqrt(h)
    Pl = r + 2 * sigma_left * np.cumsum(inc_l, axis=1)      # at r' = -r
    Pr = r + 2 * sigma_right * np.cumsum(inc_r, axis=1)
    all_P = np.concatenate([Pl[:, ::-1], np.zeros((n_sim, 1)), Pr], axis=1)
    grid = np.concatenate([-r[::-1], [0.0], r])
    u = grid[np.argmin(all_P, axis=1)]
    return np.quantile(u, p)


def _positive_finite(x) -> bool:
    return isinstance(x, Real) and not isinstance(x, (bool, np.bool_)) and bool(np.isfinite(x)) and x > 0
