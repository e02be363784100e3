"""Confidence-weighted test-time scaling (the paper's test-time scaling experiments, arXiv:2507.16806).

Given N sampled answers y_1..y_N with verbalised confidences q_1..q_N for one question:

- majority vote (self-consistency):        argmax_a  sum_i 1[y_i = a]
- confidence-weighted majority vote:       argmax_a  sum_i q_i * 1[y_i = a]
- max-confidence selection:                y_argmax_i q_i

Answers are compared after normalisation by ``key`` (default: the numeric/string normalisation of
:mod:`iclr26.data.math`), so "1,000" and "1000" vote together. ``None`` answers (unparsable)
never win unless every sample is None. Ties are broken by the earliest sample (deterministic).
"""
from __future__ import annotations

from typing import Callable, Sequence

__all__ = ["majority_vote", "confidence_weighted_vote", "max_confidence"]


def _default_key(a: str) -> str:
    from iclr26.data.math import _normalise, _to_number

    v = _to_number(a)
    if v is not None:
        return repr(round(v, 9))
    return _normalise(a).lower()


def _check(answers, confidences):
    answers = list(answers)
    if not answers:
        raise ValueError("need at least one sampled answer")
    if confidences is None:
        return answers, None
    confidences = [float(c) for c in confidences]
    if len(confidences) != len(answers):
        raise ValueError(f"got {len(answers)} answers but {len(confidences)} confidences; they must match")
    if any(not (0.0 <= c <= 1.0) for c in confidences):
        raise ValueError("confidences must lie in [0, 1]")
    return answers, confidences


def _weighted(answers, weights, key):
    key = key or _default_key
    score: dict[str, float] = {}
    first: dict[str, int] = {}
    rep: dict[str, str] = {}
    for i, (a, w) in enumerate(zip(answers, weights)):
        if a is None:
            continue
        k = key(a)
        score[k] = score.get(k, 0.0) + w
        first.setdefault(k, i)
        rep.setdefault(k, a)
    if not score:
        return None
    best = max(score, key=lambda k: (score[k], -first[k]))
    return rep[best]


def majority_vote(answers: Sequence[str | None], key: Callable[[str], str] | None = None) -> str | None:
    """The most frequent answer (earliest on ties)."""
    answers, _ = _check(answers, None)
    return _weighted(answers, [1.0] * len(answers), key)


def confidence_weighted_vote(answers: Sequence[str | None], confidences: Sequence[float],
                             key: Callable[[str], str] | None = None) -> str | None:
    """The answer with the largest summed confidence, ``argmax_a sum_i q_i 1[y_i = a]``."""
    answers, confidences = _check(answers, confidences)
    return _weighted(answers, confidences, key)


def max_confidence(answers: Sequence[str | None], confidences: Sequence[float]) -> str | None:
    """The answer of the single most confident sample (earliest on ties; None answers skipped)."""
    answers, confidences = _check(answers, confidences)
    best, best_q = None, -1.0
    for a, q in zip(answers, confidences):
        if a is not None and q > best_q:
            best, best_q = a, q
    return best
