"""Calibration metrics used by the paper (Sec. 5): ECE with equal-width confidence bins, adaptive
(equal-mass) ECE, negative log-likelihood and the Brier score.

ECE (Guo et al., 2017; the paper's metric, 15 bins):

    ECE = sum_b (|B_b| / n) * | acc(B_b) - conf(B_b) |,

bins B_b = {i : conf_i in ((b-1)/M, b/M]} over the top-1 confidence conf_i = max_k p_ik.
"""
from __future__ import annotations

import numpy as np

__all__ = ["expected_calibration_error", "adaptive_ece", "nll", "brier_score"]


def _check(probs, labels):
    probs = np.asarray(probs, dtype=float)
    labels = np.asarray(labels)
    if probs.ndim != 2:
        raise ValueError(f"probs must have shape (n, n_classes), got {probs.shape}")
    if labels.shape != (probs.shape[0],):
        raise ValueError(f"labels must have shape ({probs.shape[0]},), got {labels.shape}")
    if probs.shape[0] == 0:
        raise ValueError("probs is empty")
    if np.any(probs < -1e-8) or not np.allclose(probs.sum(1), 1.0, atol=1e-4):
        raise ValueError("probs must be probabilities: non-negative rows that sum to 1 "
                         "(apply softmax to logits first)")
    if not np.issubdtype(labels.dtype, np.integer) or labels.min() < 0 or labels.max() >= probs.shape[1]:
        raise ValueError(f"labels must be integers in [0, {probs.shape[1] - 1}]")
    return probs, labels


def expected_calibration_error(probs, labels, n_bins: int = 15) -> float:
    """Top-1 ECE with ``n_bins`` equal-width bins on (0, 1] (15 bins: Guo et al., 2017, the
    standard the paper follows). Returns a fraction (multiply by 100 for the paper's %)."""
    if not isinstance(n_bins, (int, np.integer)) or n_bins < 1:
        raise ValueError(f"n_bins must be a positive integer, got {n_bins!r}")
    probs, labels = _check(probs, labels)
    conf = probs.max(1)
    correct = (probs.argmax(1) == labels).astype(float)
    # bin b holds conf in ((b-1)/M, b/M]; conf == 0 cannot occur for a top-1 probability
    idx = np.clip(np.ceil(conf * n_bins).astype(int) - 1, 0, n_bins - 1)
    n = len(conf)
    count = np.bincount(idx, minlength=n_bins)
    gap = np.abs(np.bincount(idx, weights=correct, minlength=n_bins)
                 - np.bincount(idx, weights=conf, minlength=n_bins))
    return float(gap.sum() / n) if count.sum() else 0.0


def adaptive_ece(probs, labels, n_bins: int = 15) -> float:
    """ECE with equal-mass bins (AdaECE, Nguyen & O'Connor 2015; Mukhoti et al. 2020)."""
    if not isinstance(n_bins, (int, np.integer)) or n_bins < 1:
        raise ValueError(f"n_bins must be a positive integer, got {n_bins!r}")
    probs, labels = _check(probs, labels)
    conf = probs.max(1)
    correct = (probs.argmax(1) == labels).astype(float)
    order = np.argsort(conf, kind="stable")
    total = 0.0
    for chunk in np.array_split(order, min(n_bins, len(order))):
        total += len(chunk) * abs(correct[chunk].mean() - conf[chunk].mean())
    return float(total / len(conf))


def nll(probs, labels, eps: float = 1e-12) -> float:
    """Mean negative log-likelihood of the true class."""
    probs, labels = _check(probs, labels)
    return float(-np.mean(np.log(np.clip(probs[np.arange(len(labels)), labels], eps, None))))


def brier_score(probs, labels) -> float:
    """Mean over samples of sum_k (p_ik - 1[y_i = k])^2 (multi-class Brier score)."""
    probs, labels = _check(probs, labels)
    onehot = np.zeros_like(probs)
    onehot[np.arange(len(labels)), labels] = 1.0
    return float(np.mean(np.sum((probs - onehot) ** 2, axis=1)))
