"""Conformal Robustness Control (CRC) and the split-conformal CRO baseline, box prediction sets.

Paper: "Conformal Robustness Control: A New Strategy for Robust Decision", Y. Hu, J. Tan, C. Zou,
Y. Bao, H. Ren, ICLR 2026 (OpenReview bt4Ahpemmi). Official code: none public at the time of writing.

Setting (the paper's problem formulation). A decision z(X) is taken before Y is seen; phi(Y, z) is its loss. A set
U(X) gives the robust decision and its certificate

    z_U(x) = argmin_{z in Z} max_{y in U(x)} phi(y, z),   r_U(x) = max_{y in U(x)} phi(y, z_U(x)).

Conditional robust optimisation (CRO) asks for coverage P{Y in U(X)} >= 1 - alpha, which implies
robustness P{phi(Y, z_U(X)) <= r_U(X)} >= 1 - alpha but is not necessary for it. CRC asks for
robustness directly (the paper's CRC problem):

    min_theta (1/n) sum_i r_theta(X_i)  s.t.  (1/n) sum_i 1{phi(Y_i, z_theta(X_i)) <= r_theta(X_i)} >= 1 - alpha,

with the indicator smoothed as 1{a <= b} ~ (1 + erf((b - a) / (sqrt(2) sigma))) / 2 and the
Lagrangian f(theta) + lambda (1 - alpha - g_sigma(theta)) solved by alternating gradient descent on
theta and projected gradient ascent on lambda >= 0 (paper Alg. 1).

Calibrated CRC (paper Alg. 2): on a held-out calibration split the set is enlarged by a
radius t >= 0 (box +- t; the paper's t lies in R+) and t is the smallest such value whose empirical
robustness on the calibration set, counting the unseen test point as a failure, reaches 1 - alpha. This gives
P{phi(Y, z_t(X)) <= r_t(X)} >= 1 - alpha in finite samples for exchangeable data (paper Thm 4.1).
For the portfolio problem below the decision does not move when a box is enlarged (all lower
bounds shift by t), so the search reduces to max(0, the ceil((1 - alpha)(n + 1))-th smallest calibration
score S_i = phi(Y_i, z(X_i)) - r(X_i)): the split-conformal quantile, floored at t = 0 (a set that is
already robust enough on the calibration rows is kept, never shrunk).

Decision problem implemented: the long-only portfolio phi(y, z) = -y^T z on the simplex (the
paper's portfolio experiments). With a box [lo, hi] the inner problem has the closed form z = e_{argmax_k lo_k},
r = -max_k lo_k (the worst return of each asset is its lower bound; the best vertex wins).
"""
from __future__ import annotations

import math
import numbers
import warnings

import numpy as np
import torch
from sklearn.base import BaseEstimator
from sklearn.exceptions import ConvergenceWarning
from torch import nn

from iclr26.common.training import batches, train

__all__ = ["SimplexPortfolio", "ConformalRobustnessControl", "ConformalCRO", "smoothed_indicator",
           "conformal_radius", "min_calibration_size", "robustness_entry_scores"]


# --------------------------------------------------------------------------- decision problem
class SimplexPortfolio:
    """Long-only portfolio: z in the probability simplex, loss phi(y, z) = -y^T z (paper's portfolio task)."""

    def loss(self, y, z):
        """phi(y, z) = -sum_k y_k z_k, row-wise (numpy or torch)."""
        return -(y * z).sum(-1)

    def solve_box(self, lo, hi=None):
        """Robust decision and certificate for the box [lo, hi]: (e_{argmax lo}, -max lo), row-wise.

        max_{y in box} -y^T z = -lo^T z for z >= 0, minimised over the simplex at the vertex of the
        largest lower bound. Works on numpy arrays and on torch tensors (r keeps its gradient).
        """
        if isinstance(lo, torch.Tensor):
            best, k = lo.max(dim=-1)
            z = torch.nn.functional.one_hot(k, lo.shape[-1]).to(lo.dtype)
            return z, -best
        lo = np.asarray(lo, dtype=np.float64)
        k = np.argmax(lo, axis=-1)
        z = np.eye(lo.shape[-1])[k]
        return z, -lo.max(axis=-1)

    enlargement_moves_decision = False  # shifting every lower bound by t keeps the argmax


def smoothed_indicator(margin, sigma: float):
    """Smooth 1{margin >= 0}: (1 + erf(margin / (sqrt(2) sigma))) / 2 = Phi(margin / sigma) (the paper's smoothed constraint).

    ``sigma`` must be a finite number > 0 (in the units of the margin).
    """
    _check_pos("sigma", sigma)
    if isinstance(margin, torch.Tensor):
        return 0.5 * (1.0 + torch.erf(margin / (math.sqrt(2.0) * sigma)))
    from scipy.special import erf

    return 0.5 * (1.0 + erf(np.asarray(margin) / (math.sqrt(2.0) * sigma)))


def conformal_radius(scores, alpha: float) -> float:
    """Smallest t with #{S_i <= t} >= ceil((1 - alpha)(n + 1)): the finite-sample conformal quantile.

    Returns +inf when n is too small for level 1 - alpha (then no finite radius is valid; see
    :func:`min_calibration_size`). This is the plain quantile, which may be negative; calibrated CRC
    floors it at 0 (the paper's radius lies in R+). Raises on NaN scores and on alpha outside (0, 1).
    """
    alpha = _check_alpha(alpha)
    s = np.asarray(scores, dtype=np.float64).ravel()
    if np.isnan(s).any():
        raise ValueError("scores contain NaN values")
    s = np.sort(s)
    n = s.size
    k = math.ceil((1.0 - alpha) * (n + 1))
    return float("inf") if k > n else float(s[k - 1])


def min_calibration_size(alpha: float) -> int:
    """Smallest calibration size n with ceil((1 - alpha)(n + 1)) <= n, i.e. a finite conformal radius
    (n >= 1/alpha - 1; 9 for alpha = 0.1)."""
    alpha = _check_alpha(alpha)
    n = 1
    while math.ceil((1.0 - alpha) * (n + 1)) > n:
        n += 1
    return n


def robustness_entry_scores(mu, s, y):
    """Per row, the smallest q >= 0 from which the portfolio decision on the box mu -+ q s is robust
    for every larger q (phi = -y^T z on the simplex).

    On the box mu -+ q s the decision is the asset k(q) = argmax_k (mu_k - q s_k) and it is robust at q
    iff y_k >= mu_k - q s_k, i.e. q >= e_k = (mu_k - y_k) / s_k. k(q) is piecewise constant between the
    crossings of the lines mu_k - q s_k, so the robust set is a finite union of intervals and the
    score is the start of its last, unbounded interval (0 when the decision is robust from q = 0 on).
    Robustness at q is implied by score <= q, so the conformal quantile of these scores gives a valid
    robustness calibration of the CRO box shape (used by ``ConformalCRO(calibrate_to="robustness")``).
    """
    mu, s, y = (np.asarray(a, dtype=np.float64) for a in (mu, s, y))
    if not (mu.shape == s.shape == y.shape and mu.ndim == 2):
        raise ValueError(f"mu, s and y must be 2-D arrays of one shape, got {mu.shape}, {s.shape}, {y.shape}")
    if not (np.all(np.isfinite(mu)) and np.all(np.isfinite(y)) and np.all(np.isfinite(s)) and np.all(s > 0)):
        raise ValueError("mu and y must be finite and s finite and > 0")
    n, k = mu.shape
    iu = np.triu_indices(k, 1)
    with np.errstate(divide="ignore", invalid="ignore"):
        cross = (mu[:, iu[0]] - mu[:, iu[1]]) / (s[:, iu[0]] - s[:, iu[1]])
    cross = np.where(np.isfinite(cross) & (cross > 0), cross, 0.0)
    a = np.sort(np.concatenate([np.zeros((n, 1)), cross], axis=1), axis=1)   # interval starts
    b = np.concatenate([a[:, 1:], np.full((n, 1), np.inf)], axis=1)          # interval ends
    mid = np.where(np.isfinite(b), 0.5 * (a + b), a + 1.0)
    best = np.argmax(mu[:, None, :] - mid[:, :, None] * s[:, None, :], axis=-1)
    e = np.take_along_axis((mu - y) / s, best, axis=1)                        # entry point on each interval
    fails = (e > a) & (b > a)                                                 # not robust on all of it
    last = a.shape[1] - 1 - np.argmax(fails[:, ::-1], axis=1)
    rows = np.arange(n)
    return np.where(fails.any(axis=1), np.minimum(e[rows, last], b[rows, last]), 0.0)


# --------------------------------------------------------------------------- helpers
def _check_alpha(alpha):
    if isinstance(alpha, bool) or not isinstance(alpha, numbers.Real) or not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must lie in (0, 1), got {alpha!r}")
    return float(alpha)


def _check_pos(name, v, integer=False, allow_zero=False):
    ok = isinstance(v, numbers.Integral) if integer else isinstance(v, numbers.Real)
    if isinstance(v, bool) or not ok or not np.isfinite(v) or (v < 0 if allow_zero else v <= 0):
        kind = "an integer" if integer else "a finite number"
        bound = ">= 0" if allow_zero else "> 0"
        raise ValueError(f"{name} must be {kind} {bound}, got {v!r}")
    return v


def _check_xy(X, y=None):
    X = np.asarray(X, dtype=np.float64)
    if X.ndim != 2:
        raise ValueError(f"X must be 2-D (samples x features), got shape {X.shape}")
    if not np.all(np.isfinite(X)):
        raise ValueError("X contains NaN or infinite values")
    if y is None:
        return X
    y = np.asarray(y, dtype=np.float64)
    if y.ndim != 2:
        raise ValueError(f"y must be 2-D (samples x outcomes, e.g. asset returns), got shape {y.shape}")
    if y.shape[0] != X.shape[0]:
        raise ValueError(f"X and y have different numbers of samples: {X.shape[0]} vs {y.shape[0]}")
    if not np.all(np.isfinite(y)):
        raise ValueError("y contains NaN or infinite values")
    return X, y


def _mlp(d_in, d_out, hidden):
    if hidden == 0:
        return nn.Linear(d_in, d_out)
    return nn.Sequential(nn.Linear(d_in, hidden), nn.Tanh(), nn.Linear(hidden, d_out))


def _check_training(result, net, what):
    """Raise if a training run met a non-finite loss or left non-finite weights (the shared loop only
    stops on NaN and records it)."""
    losses = np.asarray(result.losses, dtype=np.float64)
    bad = np.flatnonzero(~np.isfinite(losses))
    if bad.size:
        raise FloatingPointError(
            f"{what} diverged: non-finite loss {losses[bad[0]]!r} at step {bad[0] + 1}; lower lr or rescale y "
            "(its values must be small enough for squared errors to stay finite)")
    if not all(bool(torch.isfinite(p).all()) for p in net.parameters()):
        raise FloatingPointError(f"{what} diverged: non-finite weights after training; lower lr or rescale y")


def _fit_regression(X, y, hidden, steps, lr, gen, batch_size):
    """Point predictor mu(x) by mean squared error, trained with the shared loop."""
    net = _mlp(X.shape[1], y.shape[1], hidden).double()
    opt = torch.optim.Adam(net.parameters(), lr=lr)
    data = batches(X, y, min(batch_size, X.shape[0]), gen)
    result = train(net, opt, data, steps, lambda m, b: ((m(b[0]) - b[1]) ** 2).mean())
    _check_training(result, net, "the point predictor's least-squares fit")
    return net.eval()


class _Base(BaseEstimator):
    def _prepare(self, X, y):
        X, y = _check_xy(X, y)
        _check_alpha(self.alpha)
        _check_pos("hidden", self.hidden, integer=True, allow_zero=True)
        _check_pos("steps", self.steps, integer=True)
        _check_pos("lr", self.lr)
        _check_pos("batch_size", self.batch_size, integer=True)
        if self.decision_problem != "portfolio" and not hasattr(self.decision_problem, "solve_box"):
            raise ValueError("decision_problem must be 'portfolio' or an object with solve_box(lo, hi) and "
                             f"loss(y, z), got {self.decision_problem!r}")
        self.problem_ = SimplexPortfolio() if self.decision_problem == "portfolio" else self.decision_problem
        rs = self.random_state
        if rs is not None and (isinstance(rs, bool) or not isinstance(rs, numbers.Integral) or rs < 0):
            raise ValueError(f"random_state must be None or an integer >= 0, got {rs!r}")
        seed = 0 if rs is None else int(rs)
        torch.manual_seed(seed)
        gen = torch.Generator().manual_seed(seed)
        self.n_features_in_ = X.shape[1]
        self.n_outputs_ = y.shape[1]
        return torch.from_numpy(X), torch.from_numpy(y), gen

    def _check_fitted(self, X):
        if not hasattr(self, "mean_net_"):
            raise ValueError(f"This {type(self).__name__} instance is not fitted yet: call fit(X, y) first")
        X = _check_xy(X)
        if X.shape[1] != self.n_features_in_:
            raise ValueError(f"X has {X.shape[1]} features, the model was fitted on {self.n_features_in_}")
        return torch.from_numpy(X)

    def _check_outcomes(self, y, name="y"):
        if hasattr(self, "n_outputs_") and y.shape[1] != self.n_outputs_:
            raise ValueError(f"{name} has {y.shape[1]} outcomes, the model was fitted on {self.n_outputs_}")

    def decide(self, X):
        """Robust decisions and certificates (z, r) for each row of X (after calibrate: the enlarged set)."""
        lo, hi = self.predict_set(X)
        return self.problem_.solve_box(lo, hi)

    def plug_in_decide(self, X):
        """The non-robust plug-in decision: argmin_z phi(mu(x), z) at the point prediction (a zero-width
        box), with its nominal loss phi(mu(x), z). No robustness guarantee; a reference for decision losses."""
        Xt = self._check_fitted(X)
        with torch.no_grad():
            mu = self.mean_net_(Xt).numpy()
        return self.problem_.solve_box(mu, mu)

    def robust(self, X, y):
        """Per-sample robustness indicator 1{phi(y, z(x)) <= r(x)} (0/1 array)."""
        X, y = _check_xy(X, y)
        self._check_outcomes(y)
        z, r = self.decide(X)
        return (self.problem_.loss(y, z) <= r + 1e-12).astype(np.float64)

    def score(self, X, y):
        """Empirical robustness on (X, y)."""
        return float(self.robust(X, y).mean())

    def calibrate(self, X_cal, y_cal):
        """Paper Alg. 2 for CRC / split conformal for CRO: sets ``radius_`` from a held-out split."""
        X_cal, y_cal = _check_xy(X_cal, y_cal)
        _check_alpha(self.alpha)
        if not hasattr(self, "mean_net_"):
            raise ValueError(f"This {type(self).__name__} instance is not fitted yet: call fit(X, y) first")
        self._check_outcomes(y_cal, "y_cal")
        radius = self._calibration_radius(X_cal, y_cal)
        if not math.isfinite(radius):
            alpha = float(self.alpha)
            raise ValueError(
                f"calibration set too small: {X_cal.shape[0]} rows cannot certify level 1 - alpha = {1 - alpha:g} "
                f"(ceil((1 - alpha)(n + 1)) > n); alpha = {alpha:g} needs at least {min_calibration_size(alpha)} rows"
            )
        self.radius_ = radius
        self.n_calibration_ = X_cal.shape[0]
        return self


class ConformalRobustnessControl(_Base):
    """CRC with box sets centred at a point predictor and learned half-widths (paper Alg. 1 + Alg. 2).

    The set is U_theta(x) = [mu(x) - w_theta(x), mu(x) + w_theta(x)] with mu an MSE regression and
    w_theta = softplus(MLP(x)); theta minimises the mean certificate under the smoothed robustness
    constraint by alternating Adam steps on theta and projected ascent steps on lambda
    (``primal_steps`` theta steps per lambda step).

    Parameters
    ----------
    decision_problem : "portfolio" (phi = -y^T z on the simplex) or an object with ``solve_box``/``loss``.
    alpha : target miss rate; robustness target 1 - alpha. Default 0.1 (paper's experiments).
    sigma : smoothing scale of the erf surrogate, in units of the loss (absolute, not relative to the
        loss spread: rescaling y by c calls for sigma * c). Default 0.1 (not from the paper; the paper's
        theory takes sigma -> 0 with n). A sigma far from the spread of phi(Y, z) - r stalls Alg. 1;
        ``fit`` then warns that the training robustness missed 1 - alpha.
    hidden : hidden width of the point-predictor MLP (0 = linear, the default). The widths are fitted on
        the same sample as the point predictor, so a flexible predictor's in-sample optimism turns into
        a robustness gap on new data (calibration then repairs it at the price of a larger radius).
    width_hidden : hidden width of the half-width model (0 = linear, the default: a small set class
        keeps the gap between training and test robustness small, paper Thm 3.2).
    steps : optimisation steps for each network. Default 1500.
    lr : Adam learning rate for theta. Default 1e-2.
    dual_lr : step of the projected ascent on lambda. Default 2.0.
    primal_steps : Adam steps on theta per projected ascent step on lambda (the paper's Alg. 1 takes
        "several" theta steps per lambda step without a number in what we read). Default 1; ``steps``
        counts theta steps, so there are ``steps // primal_steps`` dual steps.
    dual_schedule : "constant" (default) or "sqrt". "constant" keeps ``dual_lr``; "sqrt" decays the
        dual step as ``dual_lr / sqrt(t)`` at step t, the textbook stochastic primal-dual schedule (on the
        portfolio proxy it stops the multiplier before the constraint is met: training robustness
        about 0.85 for a 0.9 target).
    averaging : bool, default True. With a constant dual step the last primal and dual iterates keep
        oscillating around the constraint (the robust decision is an argmax that jumps between
        assets); True returns the average of the primal iterates over the second half of the steps
        (Polyak-Ruppert averaging) and ``dual_`` the average multiplier over the same steps; False
        keeps the last iterate (the earlier behaviour).
    batch_size : minibatch size. Default 512.
    random_state : seed of initialisation and minibatch order, None or an integer >= 0 (deterministic
        given it; None = seed 0).

    After ``fit``: ``train_robustness_`` (robustness of the returned set on the training rows), ``dual_``,
    ``dual_trace_`` (the multiplier after every theta step), ``train_losses_``. ``fit`` raises
    FloatingPointError on a non-finite loss and warns (ConvergenceWarning) when the training robustness
    misses 1 - alpha by more than 3 binomial standard errors plus 1/n.
    """

    def __init__(self, decision_problem="portfolio", alpha=0.1, sigma=0.1, hidden=0, width_hidden=0,
                 steps=1500, lr=1e-2, dual_lr=2.0, primal_steps=1, dual_schedule="constant", averaging=True,
                 batch_size=512, random_state=None):
        self.decision_problem = decision_problem
        self.alpha = alpha
        self.sigma = sigma
        self.dual_schedule = dual_schedule
        self.averaging = averaging
        self.hidden = hidden
        self.width_hidden = width_hidden
        self.steps = steps
        self.lr = lr
        self.dual_lr = dual_lr
        self.primal_steps = primal_steps
        self.batch_size = batch_size
        self.random_state = random_state

    def fit(self, X, y):
        """Alg. 1 on (X, y); afterwards ``decide`` uses the uncalibrated set until ``calibrate`` runs."""
        Xt, yt, gen = self._prepare(X, y)
        _check_pos("sigma", self.sigma)
        _check_pos("dual_lr", self.dual_lr)
        _check_pos("primal_steps", self.primal_steps, integer=True)
        if self.dual_schedule not in ("constant", "sqrt"):
            raise ValueError(f"dual_schedule must be 'constant' or 'sqrt', got {self.dual_schedule!r}")
        if not isinstance(self.averaging, (bool, np.bool_)):
            raise ValueError(f"averaging must be True or False, got {self.averaging!r}")
        alpha, sigma, eta = float(self.alpha), float(self.sigma), float(self.dual_lr)
        primal_steps = int(self.primal_steps)
        self.mean_net_ = _fit_regression(Xt, yt, self.hidden, self.steps, self.lr, gen, self.batch_size)
        with torch.no_grad():
            mu = self.mean_net_(Xt)
        _check_pos("width_hidden", self.width_hidden, integer=True, allow_zero=True)
        width_net = _mlp(Xt.shape[1], yt.shape[1], self.width_hidden).double()
        opt = torch.optim.Adam(width_net.parameters(), lr=self.lr)
        problem = self.problem_
        state = {"lam": 0.0, "t": 0, "avg": None, "n_avg": 0, "lam_sum": 0.0, "lam_trace": []}
        d_out = yt.shape[1]
        start_avg = self.steps // 2 + 1     # average the iterates of steps start_avg..steps
        decay = self.dual_schedule == "sqrt"
        averaging = bool(self.averaging)

        def lagrangian_step(model, optimizer, batch):
            xb, yb, mb = batch[0], batch[1][:, :d_out], batch[1][:, d_out:]
            lo = mb - nn.functional.softplus(model(xb))
            z, r = problem.solve_box(lo)
            phi = problem.loss(yb, z)
            f = r.mean()
            g = smoothed_indicator(r - phi, sigma).mean()
            loss = f + state["lam"] * ((1.0 - alpha) - g)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            state["t"] += 1
            t = state["t"]
            if t % primal_steps == 0:
                # projected dual ascent on the (smoothed) constraint violation, after every
                # primal_steps theta steps (dual step number t // primal_steps)
                step = eta / math.sqrt(t // primal_steps) if decay else eta
                state["lam"] = max(0.0, state["lam"] + step * float((1.0 - alpha) - g.detach()))
            state["lam_trace"].append(state["lam"])
            if averaging and t >= start_avg:
                state["n_avg"] += 1
                state["lam_sum"] += state["lam"]
                w = [p.detach().clone() for p in model.parameters()]
                if state["avg"] is None:
                    state["avg"] = w
                else:
                    k = state["n_avg"]
                    for a, p in zip(state["avg"], w):
                        a.add_((p - a) / k)
            return loss

        data = batches(Xt, torch.cat([yt, mu], dim=1), min(self.batch_size, Xt.shape[0]), gen)
        result = train(width_net, opt, data, self.steps, None, step_fn=lagrangian_step)
        _check_training(result, width_net, "Alg. 1 (the Lagrangian of the half-width model)")
        if averaging and state["avg"] is not None:
            with torch.no_grad():
                for p, a in zip(width_net.parameters(), state["avg"]):
                    p.copy_(a)
            self.dual_ = state["lam_sum"] / state["n_avg"]
        else:
            self.dual_ = state["lam"]
        self.width_net_ = width_net.eval()
        self.dual_trace_ = np.array(state["lam_trace"])
        self.train_losses_ = result.losses
        self.radius_ = 0.0
        self.train_robustness_ = float(self.robust(X, y).mean())
        n = Xt.shape[0]
        tol = 3.0 * math.sqrt(alpha * (1.0 - alpha) / n) + 1.0 / n
        if abs(self.train_robustness_ - (1.0 - alpha)) > tol:
            growth = ""
            half = self.dual_trace_[len(self.dual_trace_) // 2:]
            if half.size > 1 and half[-1] > 1.5 * max(half[0], 1e-12) and half[-1] > half.mean():
                growth = f"; the multiplier is still growing ({half[0]:.3g} -> {half[-1]:.3g})"
            warnings.warn(
                f"Alg. 1 did not reach the robustness target: training robustness {self.train_robustness_:.3f} "
                f"vs 1 - alpha = {1.0 - alpha:g} (tolerance {tol:.3f} for n = {n}){growth}. Try more steps, "
                "another dual_lr, or a sigma on the scale of the losses (sigma is absolute, in loss units); "
                "calibrate() restores the guarantee either way", ConvergenceWarning, stacklevel=2)
        return self

    def predict_set(self, X):
        """Box (lo, hi) per row, enlarged by ``radius_`` (0 before calibration)."""
        Xt = self._check_fitted(X)
        with torch.no_grad():
            mu = self.mean_net_(Xt)
            # calibrate() gives a radius >= 0; the clamp only guards a radius set by hand below zero
            w = torch.clamp(nn.functional.softplus(self.width_net_(Xt)) + self.radius_, min=0.0)
        return (mu - w).numpy(), (mu + w).numpy()

    def _calibration_radius(self, X_cal, y_cal):
        old = self.radius_
        self.radius_ = 0.0
        try:
            z, r = self.decide(X_cal)
        finally:
            self.radius_ = old
        if getattr(self.problem_, "enlargement_moves_decision", True):
            raise NotImplementedError("calibration is implemented for decision problems whose robust decision "
                                      "does not move when the box grows (enlargement_moves_decision = False)")
        scores = self.problem_.loss(y_cal, z) - r  # robust at radius t  <=>  score <= t
        # the paper's radius t lies in R+: the smallest t >= 0 with enough robust calibration rows
        return max(0.0, conformal_radius(scores, float(self.alpha)))


class ConformalCRO(_Base):
    """CRO baseline: split-conformal box with coverage 1 - alpha, then the robust decision on it.

    Box [mu(x) - q s(x), mu(x) + q s(x)] with mu an MSE regression, s a heteroscedastic scale (Gaussian
    likelihood fit of the residuals) and q the conformal quantile of max_k |y_k - mu_k(x)| / s_k(x)
    (normalised max-norm score), so P{Y in U(X)} >= 1 - alpha. Same networks and steps as CRC.

    ``calibrate_to="robustness"`` keeps this box shape but picks q on the same calibration rows by
    the robustness of the decision instead of coverage: q is the conformal quantile of
    :func:`robustness_entry_scores` (portfolio problem only), so P{robust} >= 1 - alpha and the box
    no longer covers. It is the control arm that separates "calibrate to robustness" from "learn the
    set under the robustness constraint" (CRC's Alg. 1).
    """

    def __init__(self, decision_problem="portfolio", alpha=0.1, hidden=0, steps=1500, lr=1e-2,
                 batch_size=512, calibrate_to="coverage", random_state=None):
        self.decision_problem = decision_problem
        self.alpha = alpha
        self.calibrate_to = calibrate_to
        self.hidden = hidden
        self.steps = steps
        self.lr = lr
        self.batch_size = batch_size
        self.random_state = random_state

    def fit(self, X, y):
        Xt, yt, gen = self._prepare(X, y)
        if self.calibrate_to not in ("coverage", "robustness"):
            raise ValueError(f"calibrate_to must be 'coverage' or 'robustness', got {self.calibrate_to!r}")
        self.mean_net_ = _fit_regression(Xt, yt, self.hidden, self.steps, self.lr, gen, self.batch_size)
        with torch.no_grad():
            res = yt - self.mean_net_(Xt)
        scale_net = _mlp(Xt.shape[1], yt.shape[1], self.hidden).double()
        opt = torch.optim.Adam(scale_net.parameters(), lr=self.lr)
        data = batches(Xt, res, min(self.batch_size, Xt.shape[0]), gen)

        def nll(m, b):
            log_s = m(b[0])
            return (log_s + 0.5 * b[1] ** 2 * torch.exp(-2 * log_s)).mean()

        result = train(scale_net, opt, data, self.steps, nll)
        _check_training(result, scale_net, "CRO's log-scale (Gaussian likelihood) fit")
        self.scale_net_ = scale_net.eval()
        self.radius_ = None  # no box (and no coverage guarantee) before calibration
        return self

    def _scale(self, Xt):
        with torch.no_grad():
            mu, s = self.mean_net_(Xt).numpy(), torch.exp(self.scale_net_(Xt)).numpy()
        if not (np.all(np.isfinite(mu)) and np.all(np.isfinite(s)) and np.all(s > 0)):
            raise FloatingPointError("CRO's point prediction or scale is not finite and > 0 on these rows "
                                     "(the fit diverged or X is far outside the training range)")
        return mu, s

    def predict_set(self, X):
        """Box mu(x) -+ q s(x) with q the calibrated conformal quantile; raises before ``calibrate``."""
        Xt = self._check_fitted(X)
        if self.radius_ is None:
            raise ValueError("This ConformalCRO instance is not calibrated yet: call calibrate(X_cal, y_cal) "
                             "first (the split-conformal quantile defines the box)")
        mu, s = self._scale(Xt)
        return mu - self.radius_ * s, mu + self.radius_ * s

    def _calibration_radius(self, X_cal, y_cal):
        if self.calibrate_to not in ("coverage", "robustness"):
            raise ValueError(f"calibrate_to must be 'coverage' or 'robustness', got {self.calibrate_to!r}")
        mu, s = self._scale(torch.from_numpy(X_cal))
        if self.calibrate_to == "robustness":
            if not isinstance(self.problem_, SimplexPortfolio):
                raise NotImplementedError("calibrate_to='robustness' is implemented for the portfolio problem "
                                          "(decision_problem='portfolio') only")
            return conformal_radius(robustness_entry_scores(mu, s, y_cal), float(self.alpha))
        scores = np.max(np.abs(y_cal - mu) / s, axis=1)
        return conformal_radius(scores, float(self.alpha))

    def coverage(self, X, y):
        """Empirical coverage of the box: fraction of rows with lo <= y <= hi in every coordinate."""
        X, y = _check_xy(X, y)
        self._check_outcomes(y)
        lo, hi = self.predict_set(X)
        return float(np.mean(np.all((y >= lo) & (y <= hi), axis=1)))
