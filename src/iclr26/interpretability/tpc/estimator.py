"""Truncated Polynomial Classifier (TPC): a polynomial probe that is trained and evaluated term by term.

The order-n truncation of the classifier (the paper's Sec. 3; ``PolyProbe`` in the official code) is

    f_n(x) = b + w^T x + sum_{o=2}^{n} sum_{r=1}^{R} lambda^{(o)}_r (u^{(o)}_r . x)^o ,

a symmetric CP factorisation of the order-o weight tensor (rank R, factors U^{(o)} in R^{R x d},
weights lambda^{(o)} in R^R). Every truncation f_1, ..., f_N is a classifier: f_1 is a linear
(logistic-regression) probe, and each higher order adds one term to the previous logit.

Training is progressive (the official ``train.py``, mode ``progressive``): the linear term first, then
for o = 2..N the lower orders are frozen, the order-o term is added and trained with the learning rate
reset. Test time offers the *safety dial* (``decision_function(X, order=n)``) and the *cascade*
(:meth:`TruncatedPolynomialClassifier.cascade_predict`): evaluate f_1, let a sample exit when its
(temperature-scaled) probability is below tau_low or above tau_high, otherwise add the next term for
the samples still undecided. Per-order temperatures and the thresholds are set on validation data by
:meth:`TruncatedPolynomialClassifier.calibrate_cascade`.
"""
from __future__ import annotations

import numbers

import numpy as np
import torch
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.multiclass import check_classification_targets, type_of_target
from sklearn.utils import check_random_state
from sklearn.utils.validation import check_is_fitted, validate_data

__all__ = ["TruncatedPolynomialClassifier", "polynomial_logits", "order_flops"]


def polynomial_logits(X, bias, w, factors, lambdas, order=None):
    """The nested logits [f_1, ..., f_order] of the symmetric CP polynomial (torch in, torch out).

    ``X`` (B, d); ``bias`` scalar tensor; ``w`` (d,); ``factors[o-2]`` (R, d) and ``lambdas[o-2]`` (R,)
    for orders o = 2..N. Returns a list of (B,) tensors; entry n-1 is f_n.
    """
    n_max = len(factors) + 1 if order is None else order
    f = X @ w + bias
    out = [f]
    for o in range(2, n_max + 1):
        f = f + ((X @ factors[o - 2].T) ** o) @ lambdas[o - 2]
        out.append(f)
    return out


def order_flops(n_features, rank, order):
    """Multiply-adds (counted as 2 FLOPs) to go from f_{order-1} to f_order for one sample.

    Order 1: the dot product w.x and the bias (2d + 1). Order o >= 2: the R projections (2dR), the
    powers ((o - 1) R multiplications) and the weighted sum added to the logit (2R).
    """
    if order == 1:
        return 2 * n_features + 1
    return 2 * n_features * rank + (order - 1) * rank + 2 * rank


class TruncatedPolynomialClassifier(ClassifierMixin, BaseEstimator):
    """Binary truncated polynomial classifier over (activation) features; numpy in, numpy out.

    Parameters
    ----------
    max_order : int, default=3
        N, the highest order (our default; the paper and official code take it per experiment).
    rank : int, default=16
        R, the CP rank of every order >= 2 term (our default; one rank for all orders, where the
        official code allows one per order).
    train_mode : {"progressive", "all"}, default="progressive"
        ``progressive``: stage-wise, lower orders frozen, learning rate reset per stage (the paper's
        default). ``all``: every term trained jointly on the mean loss over all truncations (the
        official ``train_all``).
    max_iter : int, default=300
        Full-batch AdamW steps per stage (``all``: max_iter times the number of orders, the same budget).
        Our default: the official code trains mini-batches for a number of epochs per stage.
    learning_rate : float, default=1e-2
        Our default for full-batch steps (the official ``train`` default is 1e-4 with mini-batches;
        its sweep picks the value on validation).
    weight_decay : float, default=1e-3
        AdamW decoupled weight decay (our default; the official ``train`` default is 0.1 and its sweep
        picks the value on validation).
    term_dropout : float, default=0.0
        Probability of dropping the lower-order logit per sample while an order is trained (the
        official ``d_prob``; its default is 0).
    random_state : int or None
    """

    _parameter_constraints = {
        "max_order": [Interval(numbers.Integral, 1, 8, closed="both")],
        "rank": [Interval(numbers.Integral, 1, None, closed="left")],
        "train_mode": [StrOptions({"progressive", "all"})],
        "max_iter": [Interval(numbers.Integral, 1, None, closed="left")],
        "learning_rate": [Interval(numbers.Real, 0, None, closed="neither")],
        "weight_decay": [Interval(numbers.Real, 0, None, closed="left")],
        "term_dropout": [Interval(numbers.Real, 0, 1, closed="left")],
        "random_state": ["random_state"],
    }

    def __init__(self, max_order=3, rank=16, train_mode="progressive", max_iter=300, learning_rate=1e-2,
                 weight_decay=1e-3, term_dropout=0.0, random_state=None):
        self.max_order = max_order
        self.rank = rank
        self.train_mode = train_mode
        self.max_iter = max_iter
        self.learning_rate = learning_rate
        self.weight_decay = weight_decay
        self.term_dropout = term_dropout
        self.random_state = random_state

    # ------------------------------------------------------------------ fitting
    def fit(self, X, y):
        self._validate_params()
        X, y = validate_data(self, X, y, dtype=np.float64)
        check_classification_targets(y)
        if type_of_target(y) not in ("binary", "multiclass"):
            raise ValueError(f"y must hold class labels, got a {type_of_target(y)} target")
        self.classes_, yi = np.unique(y, return_inverse=True)
        if len(self.classes_) != 2:
            k = len(self.classes_)
            raise ValueError(f"Only binary classification is supported. TruncatedPolynomialClassifier needs y with "
                             f"exactly 2 classes, got {k} class{'es' if k != 1 else ''} ({self.classes_.tolist()})")
        seed = int(check_random_state(self.random_state).randint(2**31 - 1))
        gen = torch.Generator().manual_seed(seed)
        d = X.shape[1]
        Xt = torch.tensor(X, dtype=torch.float64)
        yt = torch.as_tensor(yi, dtype=torch.float64)
        N, R = self.max_order, self.rank
        # initialisation as nn.Linear (uniform +-1/sqrt(d)) for the factors, lambda ~ N(0, 0.02^2) (official code)
        bound = 1.0 / np.sqrt(d)
        bias = torch.zeros((), dtype=torch.float64, requires_grad=True)
        w = ((torch.rand(d, generator=gen, dtype=torch.float64) * 2 - 1) * bound).requires_grad_()
        factors, lambdas = [], []
        for _ in range(N - 1):       # order by order, so a lower-order model shares its draws
            factors.append(((torch.rand(R, d, generator=gen, dtype=torch.float64) * 2 - 1) * bound).requires_grad_())
            lambdas.append((torch.randn(R, generator=gen, dtype=torch.float64) * 0.02).requires_grad_())
        loss_fn = torch.nn.BCEWithLogitsLoss()
        self.loss_curve_ = []

        def run(params, steps, order, all_orders):
            opt = torch.optim.AdamW(params, lr=self.learning_rate, weight_decay=self.weight_decay)
            for _ in range(steps):
                opt.zero_grad()
                fs = polynomial_logits(Xt, bias, w, factors, lambdas, order)
                if all_orders:
                    loss = torch.stack([loss_fn(f, yt) for f in fs]).mean()
                else:
                    if self.term_dropout > 0 and order > 1:
                        keep = (torch.rand(len(Xt), generator=gen, dtype=torch.float64) >= self.term_dropout)
                        f = fs[-2] * keep + (fs[-1] - fs[-2])
                    else:
                        f = fs[-1]
                    loss = loss_fn(f, yt)
                loss.backward()
                torch.nn.utils.clip_grad_norm_(params, max_norm=1.0)
                opt.step()
                self.loss_curve_.append(float(loss.detach()))

        if self.train_mode == "progressive":
            run([bias, w], self.max_iter, 1, False)
            for o in range(2, N + 1):
                run([factors[o - 2], lambdas[o - 2]], self.max_iter, o, False)
        else:
            run([bias, w, *factors, *lambdas], self.max_iter * N, N, True)
        self.n_iter_ = len(self.loss_curve_)
        self.intercept_ = float(bias.detach())
        self.coef_ = w.detach().numpy().copy()
        self.factors_ = [u.detach().numpy().copy() for u in factors]
        self.lambdas_ = [l.detach().numpy().copy() for l in lambdas]
        self.temperatures_ = np.ones(N)
        self.cascade_thresholds_ = None
        return self

    # ------------------------------------------------------------------ evaluation
    def _check_order(self, order):
        if order is None:
            return self.max_order
        if isinstance(order, (bool, np.bool_)) or not isinstance(order, numbers.Integral) \
                or not 1 <= order <= self.max_order:
            raise ValueError(f"order must be an integer in 1..{self.max_order} (max_order), got {order!r}")
        return int(order)

    def _all_logits(self, X, order=None):
        check_is_fitted(self, "coef_")
        order = self._check_order(order)
        X = validate_data(self, X, reset=False, dtype=np.float64)
        with torch.no_grad():
            fs = polynomial_logits(torch.as_tensor(X), torch.tensor(self.intercept_, dtype=torch.float64),
                                   torch.as_tensor(self.coef_), [torch.as_tensor(u) for u in self.factors_],
                                   [torch.as_tensor(l) for l in self.lambdas_], order)
        return np.stack([f.numpy() for f in fs], axis=1)

    def decision_function(self, X, order=None):
        """f_order(X) (default: the full order N), positive for ``classes_[1]``."""
        return self._all_logits(X, order)[:, -1]

    def staged_decision_function(self, X):
        """All truncations at once: array (n_samples, max_order), column n-1 holds f_n."""
        return self._all_logits(X)

    def predict_proba(self, X, order=None):
        p = 1.0 / (1.0 + np.exp(-self.decision_function(X, order)))
        return np.stack([1 - p, p], axis=1)

    def predict(self, X, order=None):
        d = self.decision_function(X, order)
        return self.classes_[(d > 0).astype(int)]

    @property
    def n_params_(self):
        """Trainable parameters of the full classifier: 1 + d + (N - 1)(R d + R)."""
        check_is_fitted(self, "coef_")
        d = self.n_features_in_
        return 1 + d + (self.max_order - 1) * (self.rank * d + self.rank)

    # ------------------------------------------------------------------ cascade
    def calibrate_cascade(self, X_val, y_val, keep=0.99, taus=None):
        """Choose per-order temperatures and the exit threshold on validation data.

        Each order's temperature T_n minimises the validation log loss of sigmoid(f_n / T_n) (the
        official cascade takes per-order temperatures). Then, over the candidate confidences ``taus``
        (exit when sigmoid(f_n / T_n) < 1 - tau or > tau), the cheapest tau whose validation accuracy
        is at least ``keep`` times the full order's validation accuracy is kept; the per-order logit
        thresholds are +-T_n logit(tau). Never call this with test data.
        """
        check_is_fitted(self, "coef_")
        if not 0 < keep <= 1:
            raise ValueError(f"keep must be in (0, 1], got {keep!r}")
        X_val = validate_data(self, X_val, reset=False, dtype=np.float64)
        y_val = np.asarray(y_val)
        if len(y_val) != len(X_val):
            raise ValueError(f"X_val and y_val have different lengths ({len(X_val)} and {len(y_val)})")
        unknown = np.setdiff1d(y_val, self.classes_)
        if unknown.size:
            raise ValueError(f"y_val holds labels not seen in fit: {unknown.tolist()}; allowed: {self.classes_.tolist()}")
        yb = (y_val == self.classes_[1]).astype(float)
        F = self.staged_decision_function(X_val)
        grid = np.exp(np.linspace(np.log(0.05), np.log(20.0), 121))
        temps = []
        for n in range(self.max_order):
            z = F[:, n][None, :] / grid[:, None]
            nll = np.mean(np.logaddexp(0, z) - yb[None, :] * z, axis=1)
            temps.append(grid[np.argmin(nll)])
        self.temperatures_ = np.asarray(temps)
        taus = np.linspace(0.5, 0.999, 100) if taus is None else np.asarray(taus, float)
        if taus.ndim != 1 or taus.size == 0 or np.any((taus < 0.5) | (taus >= 1)):
            raise ValueError("taus must be a non-empty 1-D array of confidences in [0.5, 1)")
        full = np.mean((F[:, -1] > 0) == (yb == 1))
        best = None
        for tau in np.sort(taus):
            thr = self.temperatures_ * np.log(tau / (1 - tau))
            pred, exit_order = self._cascade_from_logits(F, thr)
            acc = np.mean((pred == 1) == (yb == 1))
            cost = self._cascade_flops(exit_order)
            if acc >= keep * full - 1e-12 and (best is None or cost < best[0] - 1e-12):
                best = (cost, tau)
        self.cascade_tau_ = float(best[1]) if best is not None else 1.0
        self.cascade_thresholds_ = self.temperatures_ * np.log(self.cascade_tau_ / (1 - self.cascade_tau_)) \
            if best is not None else np.full(self.max_order, np.inf)
        return self

    @staticmethod
    def _cascade_from_logits(F, thresholds):
        """Exit at the first order n with |f_n| > thresholds[n-1] (the last order always exits)."""
        n_orders = F.shape[1]
        decided = np.abs(F[:, :-1]) > np.asarray(thresholds)[None, : n_orders - 1]
        decided = np.concatenate([decided, np.ones((len(F), 1), bool)], axis=1)
        exit_idx = decided.argmax(axis=1)
        logit = F[np.arange(len(F)), exit_idx]
        return (logit > 0).astype(int), exit_idx + 1

    def _cascade_flops(self, exit_order):
        per = np.cumsum([order_flops(self.n_features_in_, self.rank, o) for o in range(1, self.max_order + 1)])
        return float(np.mean(per[np.asarray(exit_order) - 1]))

    def cascade_predict(self, X, thresholds=None):
        """Adaptive cascade: labels and the order at which each sample exited.

        A sample exits at order n when |f_n| exceeds ``thresholds[n-1]`` (a logit threshold, i.e.
        sigmoid(f_n / T_n) outside [1 - tau, tau]); undecided samples get the next term, computed only
        for them. ``thresholds`` default: those set by :meth:`calibrate_cascade`.
        """
        check_is_fitted(self, "coef_")
        thr = self.cascade_thresholds_ if thresholds is None else np.asarray(thresholds, float)
        if thr is None:
            raise ValueError("no cascade thresholds: call calibrate_cascade(X_val, y_val) or pass thresholds")
        if thr.shape not in ((self.max_order,), (self.max_order - 1,)) or np.any(np.isnan(thr)) or np.any(thr < 0):
            raise ValueError(f"thresholds must be {self.max_order - 1} or {self.max_order} non-negative logit "
                             f"thresholds (one per order), got shape {thr.shape}")
        X = validate_data(self, X, reset=False, dtype=np.float64)
        n = len(X)
        logit = X @ self.coef_ + self.intercept_
        exit_order = np.ones(n, dtype=int)
        active = np.arange(n)
        for o in range(2, self.max_order + 1):
            active = active[np.abs(logit[active]) <= thr[o - 2]]
            if active.size == 0:
                break
            logit[active] = logit[active] + ((X[active] @ self.factors_[o - 2].T) ** o) @ self.lambdas_[o - 2]
            exit_order[active] = o
        return self.classes_[(logit > 0).astype(int)], exit_order

    def cascade_cost(self, exit_order):
        """Mean FLOPs per sample of a cascade run, as a fraction of evaluating the full order N."""
        check_is_fitted(self, "coef_")
        exit_order = np.asarray(exit_order)
        if exit_order.size == 0 or np.any((exit_order < 1) | (exit_order > self.max_order)):
            raise ValueError(f"exit_order must be non-empty with values in 1..{self.max_order}")
        return self._cascade_flops(exit_order) / self._cascade_flops(np.full(1, self.max_order))

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.classifier_tags.multi_class = False
        return tags
