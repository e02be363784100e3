"""RLCR: reinforcement learning with calibration rewards.

Paper: Damani, Puri, Slocum, Shenfeld, Choshen, Kim, Andreas, "Beyond Binary Rewards: Training LMs
to Reason About Their Uncertainty", arXiv:2507.16806 (ICLR 2026). Project page with code links:
https://rl-calibration.github.io (MIT).

The policy writes its reasoning, an answer in ``<answer>...</answer>`` and a verbalised confidence
``q`` in ``<confidence>...</confidence>``. The RLCR reward (the RLCR objective of the paper's method section) is

    R_RLCR(y, q, y*) = 1[y == y*] - (q - 1[y == y*])**2                     (correctness + Brier)

and the paper's theorem says that, because the Brier score is a *bounded proper* scoring rule,
the expected reward is maximised by (i) reporting q = P(correct) (calibration) and (ii) giving the
answer most likely to be correct (accuracy); an unbounded rule such as the log score keeps (i) but
loses (ii). :func:`rlcr_reward` has the calling convention of a TRL ``GRPOTrainer`` reward
function: ``reward(completions, answer, **kwargs) -> list[float]``.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Callable, Sequence

__all__ = ["ParsedCompletion", "parse_completion", "parse_confidence", "brier_score", "rlcr_score",
           "log_score", "rlcr_reward", "rlvr_reward", "expected_reward", "expected_calibration_error"]

_ANSWER = re.compile(r"<answer>(.*?)</answer>", re.S | re.I)
_CONF = re.compile(r"<confidence>(.*?)</confidence>", re.S | re.I)
_NUMBER = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*(%?)\s*$")


@dataclass
class ParsedCompletion:
    answer: str | None          # text inside the last <answer> tag (stripped), or None
    confidence: float | None    # the verbalised confidence in [0, 1], or None if absent/invalid
    format_ok: bool             # both tags present and the confidence valid


def parse_confidence(text: str | None) -> float | None:
    """A confidence ``"0.8"``, ``".8"`` or ``"80%"`` as a float in [0, 1]; None when invalid.

    Values outside [0, 1] (or outside 0-100 % with a percent sign) are invalid: they are not
    probabilities, so the proper-scoring argument does not apply to them.
    """
    if text is None:
        return None
    m = _NUMBER.match(text.strip().strip("*"))
    if not m:
        return None
    v = float(m.group(1)) / (100.0 if m.group(2) else 1.0)
    return v if 0.0 <= v <= 1.0 else None


def parse_completion(text: str) -> ParsedCompletion:
    """Read the last ``<answer>`` and ``<confidence>`` tags of a completion."""
    if not isinstance(text, str):
        raise TypeError(f"completion must be a string, got {type(text).__name__}")
    answers = _ANSWER.findall(text)
    confs = _CONF.findall(text)
    answer = answers[-1].strip() if answers else None
    conf = parse_confidence(confs[-1]) if confs else None
    return ParsedCompletion(answer=answer or None, confidence=conf,
                            format_ok=bool(answer) and conf is not None)


def _check_q(q: float) -> float:
    q = float(q)
    if not 0.0 <= q <= 1.0 or q != q:
        raise ValueError(f"confidence must be a probability in [0, 1], got {q!r}")
    return q


def brier_score(confidence: float, correct: bool) -> float:
    """Brier score (q - 1[correct])**2, in [0, 1]; lower is better."""
    q = _check_q(confidence)
    return (q - float(bool(correct))) ** 2


def rlcr_score(confidence: float, correct: bool) -> float:
    """The RLCR objective for one output: 1[correct] - (q - 1[correct])**2, in [-1, 1]."""
    return float(bool(correct)) - brier_score(confidence, correct)


def log_score(confidence: float, correct: bool, eps: float = 0.0) -> float:
    """The unbounded analogue used in the paper's counter-example: 1[correct] + log-likelihood of the
    outcome under q, i.e. 1 + log q if correct, log(1 - q) if wrong (``eps`` clips q away from 0/1)."""
    q = min(max(_check_q(confidence), eps), 1.0 - eps)
    c = bool(correct)
    p = q if c else 1.0 - q
    return float(c) + (math.log(p) if p > 0 else -math.inf)


def _text(completion) -> str:
    # TRL passes plain strings, or for conversational data a list of {"role", "content"} messages
    if isinstance(completion, str):
        return completion
    if isinstance(completion, (list, tuple)) and completion and isinstance(completion[-1], dict):
        return str(completion[-1].get("content", ""))
    raise TypeError(
        "each completion must be a string or a list of chat messages ({'role', 'content'}), "
        f"got {type(completion).__name__}"
    )


def _default_checker() -> Callable[[str | None, str], bool]:
    from iclr26.data.math import is_correct

    return is_correct


def rlcr_reward(completions: Sequence, answer: Sequence[str], *, is_correct: Callable | None = None,
                missing_confidence_penalty: float = 1.0, **kwargs) -> list[float]:
    """RLCR reward per completion: ``1[y == y*] - (q - 1[y == y*])**2`` (TRL reward-function signature).

    ``answer``: the gold answers (one per completion; TRL passes dataset columns by name).
    ``is_correct(pred, gold)``: the verifier (default: exact numeric/string match,
    :func:`iclr26.data.math.is_correct`). A missing answer tag counts as wrong. A missing or invalid
    confidence replaces the Brier term by ``missing_confidence_penalty`` (default 1, the worst Brier
    score), so omitting the confidence never pays. Extra keyword arguments (``prompts``,
    ``completion_ids``, other dataset columns) are accepted and ignored.
    """
    completions = list(completions)
    answer = [answer] * len(completions) if isinstance(answer, str) else list(answer)
    if len(answer) != len(completions):
        raise ValueError(f"got {len(completions)} completions but {len(answer)} gold answers; they must match")
    if not 0.0 <= missing_confidence_penalty <= 1.0:
        raise ValueError(f"missing_confidence_penalty must be in [0, 1], got {missing_confidence_penalty!r}")
    check = is_correct or _default_checker()
    out = []
    for comp, gold in zip(completions, answer):
        p = parse_completion(_text(comp))
        c = bool(p.answer is not None and check(p.answer, str(gold)))
        brier = brier_score(p.confidence, c) if p.confidence is not None else missing_confidence_penalty
        out.append(float(c) - brier)
    return out


def rlvr_reward(completions: Sequence, answer: Sequence[str], *, is_correct: Callable | None = None,
                **kwargs) -> list[float]:
    """The binary correctness reward of ordinary RL with verifiable rewards (the paper's baseline)."""
    completions = list(completions)
    answer = [answer] * len(completions) if isinstance(answer, str) else list(answer)
    if len(answer) != len(completions):
        raise ValueError(f"got {len(completions)} completions but {len(answer)} gold answers; they must match")
    check = is_correct or _default_checker()
    out = []
    for comp, gold in zip(completions, answer):
        p = parse_completion(_text(comp))
        out.append(float(p.answer is not None and check(p.answer, str(gold))))
    return out


def expected_reward(p_correct, q, score: str = "brier"):
    """Expected reward of answering an answer that is correct with probability ``p_correct`` while
    reporting confidence ``q`` (numpy-broadcast): ``p * s(q, right) + (1 - p) * s(q, wrong)``.

    ``s`` is this module's per-output score, so the expectation is always that of the reward the
    trainer pays: ``score="brier"`` uses :func:`rlcr_score` (the RLCR objective; closed form
    ``p - (q - p)**2 - p*(1 - p)``), ``score="log"`` :func:`log_score` (the unbounded analogue of the
    paper's remark). An outcome of probability 0 contributes nothing (no ``0 * -inf``).
    """
    import numpy as np

    p = np.asarray(p_correct, dtype=float)
    q = np.asarray(q, dtype=float)
    if not (np.all(np.isfinite(p)) and np.all(np.isfinite(q))):
        raise ValueError("p_correct and q must be finite probabilities in [0, 1]; got NaN or inf")
    if np.any((p < 0) | (p > 1)) or np.any((q < 0) | (q > 1)):
        raise ValueError("p_correct and q must lie in [0, 1]")
    scores = {"brier": rlcr_score, "log": log_score}
    if score not in scores:
        raise ValueError(f"score must be 'brier' or 'log', got {score!r}")
    fn = scores[score]
    values, inverse = np.unique(q, return_inverse=True)      # one score call per distinct report
    right = np.array([fn(float(v), True) for v in values])[inverse].reshape(q.shape)
    wrong = np.array([fn(float(v), False) for v in values])[inverse].reshape(q.shape)
    with np.errstate(invalid="ignore"):
        return np.where(p > 0, p * right, 0.0) + np.where(p < 1, (1.0 - p) * wrong, 0.0)


def expected_calibration_error(confidences, correct, n_bins: int = 10) -> float:
    """ECE with ``n_bins`` equal-width bins: sum_b |B_b|/n * |acc(B_b) - conf(B_b)|."""
    import numpy as np

    c = np.asarray(confidences, dtype=float)
    y = np.asarray(correct, dtype=float)
    if c.shape != y.shape or c.ndim != 1 or c.size == 0:
        raise ValueError("confidences and correct must be 1-d arrays of the same, non-zero length")
    bad = np.flatnonzero(~np.isfinite(c))
    if bad.size:
        raise ValueError(f"confidences must be finite probabilities in [0, 1]; got {float(c[bad[0]])!r} at "
                         f"index {int(bad[0])} ({bad.size} non-finite); drop or impute unparsed confidences first")
    if np.any((c < 0) | (c > 1)):
        raise ValueError("confidences must lie in [0, 1]")
    wrong = np.flatnonzero((y != 0) & (y != 1))
    if wrong.size:
        raise ValueError(f"correct must hold 0/1 (or bool) outcomes; got {float(y[wrong[0]])!r} at index "
                         f"{int(wrong[0])} ({wrong.size} values outside {{0, 1}})")
    if isinstance(n_bins, bool) or not isinstance(n_bins, int) or n_bins < 1:
        raise ValueError(f"n_bins must be a positive integer, got {n_bins!r}")
    idx = np.minimum((c * n_bins).astype(int), n_bins - 1)
    ece = 0.0
    for b in range(n_bins):
        m = idx == b
        if m.any():
            ece += m.mean() * abs(y[m].mean() - c[m].mean())
    return float(ece)
