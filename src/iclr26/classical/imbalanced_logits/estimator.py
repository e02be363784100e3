"""Margin-rebalanced max-margin linear classifier (scikit-learn estimator).

Paper: "A statistical theory of overfitting for imbalanced classification",
Lyu, Zhou, Zhong (ICLR 2026), arXiv:2502.11323,
code https://github.com/jlyu55/Imbalanced_Classification_iclr.

The margin-rebalanced SVM (paper Sec. 3, margin rebalancing) solves

    maximise kappa  s.t.  y_i (<x_i, beta> + beta0) >= tau_i kappa,  ||beta||_2 <= 1,

with ``tau_i = tau`` for the minority class and ``1`` for the majority class (``tau = 1`` is the
ordinary hard-margin SVM). Because the intercept is free, this problem is the ordinary SVM up to
an intercept shift: writing ``beta0 = beta0' + kappa (tau - 1)/(tau + 1)`` (minority labelled +)
turns both constraints into ``y_i (<x_i, beta> + beta0') >= kappa (tau + 1)/2``. We therefore fit
one ordinary linear SVM (libsvm through :class:`sklearn.svm.SVC`) and shift its intercept. The
same substitution holds for the soft-margin (hinge) version with finite ``C``, where the ordinary
SVM is fitted with ``C / c``, ``c = (tau + 1)/2``.

The decision function is reported in the paper's normalisation ``||coef_||_2 = 1`` so that the
training logits ``y_i f(x_i)`` can be compared with the limiting law ``max{kappa, N(., 1)}``.
"""
from __future__ import annotations

import warnings
from numbers import Integral, Real

import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.exceptions import ConvergenceWarning
from sklearn.svm import SVC
from sklearn.utils.multiclass import check_classification_targets, type_of_target
from sklearn.utils.validation import check_is_fitted, validate_data

__all__ = ["MarginRebalancedSVC", "NotSeparableWarning"]


class NotSeparableWarning(UserWarning):
    """The fitted hyperplane does not separate the training data: no max-margin classifier exists
    (or ``C`` is too small for the hard margin), so ``margin_`` is NaN."""


class MarginRebalancedSVC(ClassifierMixin, BaseEstimator):
    """Binary max-margin linear classifier with a larger margin for the minority class.

    Parameters
    ----------
    tau : float, default=1.0
        Minority margin ratio (paper's ``tau``); ``1`` gives the ordinary max-margin SVM.
        The limiting balanced-error-optimal value is :func:`optimal_tau` (``> 1``).
    C : float, default=1e6
        Hinge-loss weight. A large value (the default) gives the hard-margin classifier on
        separable data, the setting of the paper's theory.
    minority : label or "auto", default="auto"
        Which class gets the margin ``tau``; ``"auto"`` picks the rarer class in ``fit``
        (ties go to ``classes_[1]``).
    tol : float, default=1e-6
        Stopping tolerance of the libsvm solver.
    max_iter : int, default=1_000_000
        libsvm iteration cap (``-1``: none). On separable data the hard-margin fit converges in far
        fewer (about 8,000 at n = 2000, d = 1000); on data that are not separable, a huge ``C`` makes
        libsvm run for minutes, and the cap stops it.

    Attributes
    ----------
    classes_ : ndarray of shape (2,)
    minority_ : label of the minority class
    coef_ : ndarray of shape (1, n_features), unit Euclidean norm (sign: positive logit = classes_[1])
    intercept_ : ndarray of shape (1,)
    margin_ : float, the majority margin ``kappa`` in the unit-norm scaling; the minority margin is
        ``tau * margin_``. NaN (with a :class:`NotSeparableWarning`) when the fitted hyperplane does
        not separate the training data, i.e. the data are not linearly separable and the max-margin
        classifier does not exist (or ``C`` is too small for the hard margin).
    separable_ : bool, whether the fitted hyperplane separates the training data:
        ``min_i y_i f(x_i) / tau_i > 0``.
    n_features_in_ : int
    n_iter_ : int, libsvm iterations
    """

    def __init__(self, tau=1.0, C=1e6, minority="auto", tol=1e-6, max_iter=1_000_000):
        self.tau = tau
        self.C = C
        self.minority = minority
        self.tol = tol
        self.max_iter = max_iter

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.classifier_tags.multi_class = False
        return tags

    def _validate_params_(self):
        if isinstance(self.tau, bool) or not isinstance(self.tau, Real) or not np.isfinite(self.tau) or self.tau <= 0:
            raise ValueError(f"tau must be a finite real number > 0 (1 = ordinary SVM), got {self.tau!r}")
        if isinstance(self.C, bool) or not isinstance(self.C, Real) or not np.isfinite(self.C) or self.C <= 0:
            raise ValueError(f"C must be a finite real number > 0, got {self.C!r}")
        if isinstance(self.tol, bool) or not isinstance(self.tol, Real) or not self.tol > 0:
            raise ValueError(f"tol must be a real number > 0, got {self.tol!r}")
        if isinstance(self.max_iter, bool) or not isinstance(self.max_iter, Integral) or (
                self.max_iter < 1 and self.max_iter != -1):
            raise ValueError(f"max_iter must be a positive integer or -1 (no limit), got {self.max_iter!r}")

    def fit(self, X, y):
        """Fit on ``X`` (n_samples, n_features) and binary labels ``y``."""
        self._validate_params_()
        X, y = validate_data(self, X, y, dtype=np.float64)
        check_classification_targets(y)
        self.classes_, counts = np.unique(y, return_counts=True)
        if len(self.classes_) != 2:
            got = "1 class" if len(self.classes_) == 1 else f"{len(self.classes_)} classes ({type_of_target(y)})"
            raise ValueError(
                f"Only binary classification is supported by MarginRebalancedSVC: y must have exactly "
                f"2 classes, got {got}")
        if isinstance(self.minority, str) and self.minority == "auto":
            minority = self.classes_[0] if counts[0] < counts[1] else self.classes_[1]
        else:
            if self.minority not in set(self.classes_.tolist()):
                raise ValueError(f"minority={self.minority!r} is not one of the classes {self.classes_.tolist()}"
                                 " (or use 'auto')")
            minority = self.minority
        self.minority_ = minority
        c = 0.5 * (self.tau + 1.0)
        svc = SVC(kernel="linear", C=self.C / c, tol=self.tol, max_iter=self.max_iter, shrinking=True)
        with warnings.catch_warnings():
            # a capped solver is reported below, together with what it means for the margin
            warnings.filterwarnings("ignore", message="Solver terminated early", category=ConvergenceWarning)
            svc.fit(X, y)
        self.n_iter_ = int(np.sum(svc.n_iter_))
        w = svc.coef_.ravel()            # positive side = classes_[1]
        b = float(svc.intercept_[0])
        norm = float(np.linalg.norm(w))
        if norm == 0.0:
            raise ValueError("the fitted hyperplane is degenerate (coef_ = 0): X carries no signal")
        kappa = 1.0 / norm               # ordinary SVM margin in the unit-norm scaling
        sign = 1.0 if minority == self.classes_[1] else -1.0
        self.coef_ = (w / norm)[None, :]
        # shift of the intercept towards the majority side: kappa_tau * (tau - 1)/2, kappa_tau = kappa / c
        kappa_tau = kappa / c
        self.intercept_ = np.array([b / norm + sign * kappa_tau * (self.tau - 1.0) / 2.0])
        # every constraint y_i f(x_i) >= tau_i kappa needs y_i f(x_i) / tau_i > 0 for some kappa > 0
        s = np.where(y == self.classes_[1], 1.0, -1.0) * (X @ self.coef_[0] + self.intercept_[0])
        taus = np.where(y == minority, self.tau, 1.0)
        worst = float(np.min(s / taus))
        self.separable_ = worst > 0
        self.margin_ = kappa_tau if self.separable_ else float("nan")
        capped = self.max_iter != -1 and self.n_iter_ >= self.max_iter
        if self.separable_ and capped:
            warnings.warn(f"libsvm stopped at max_iter={self.max_iter} before converging: the hyperplane separates "
                          "the training data but its margin may be below the maximum; raise max_iter",
                          ConvergenceWarning, stacklevel=2)
        if not self.separable_:
            warnings.warn(
                f"the fitted hyperplane does not separate the training data (min_i y_i f(x_i)/tau_i = {worst:.3g} "
                f"<= 0): the data are not linearly separable, so the max-margin classifier does not exist "
                f"(or C={self.C:g} is too small for a hard margin); margin_ is NaN and the fit is the "
                f"soft-margin SVM with this C" + (f", stopped at max_iter={self.max_iter}" if capped else ""),
                NotSeparableWarning, stacklevel=2)
        return self

    def decision_function(self, X):
        """Logit ``<x, coef_> + intercept_`` (unit-norm ``coef_``); positive means ``classes_[1]``."""
        check_is_fitted(self)
        X = validate_data(self, X, dtype=np.float64, reset=False)
        return X @ self.coef_[0] + self.intercept_[0]

    def predict(self, X):
        scores = self.decision_function(X)
        return self.classes_[(scores > 0).astype(int)]

    def training_logits(self, X, y):
        """Signed logits ``y_i f(x_i)`` with ``y_i = +1`` for ``classes_[1]`` (paper's ELD)."""
        check_is_fitted(self)
        y = np.asarray(y)
        s = np.where(y == self.classes_[1], 1.0, -1.0)
        return s * self.decision_function(X)
