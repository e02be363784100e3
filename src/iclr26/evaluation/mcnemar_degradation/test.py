"""Exact McNemar tests for detecting degradation of an optimised model.

Implements Kübler et al., "When LLMs get significantly worse: A statistical approach to detect
model degradations" (ICLR 2026, arXiv 2602.10144; official code: amazon-science/LLM-Accuracy-Stats).

Per sample i, the base model scores ``s_i`` and the optimised model ``t_i`` (0/1). Only the
discordant samples carry information about a change of accuracy (Sec. 3):
``b = #{s=1, t=0}`` (only the base is right), ``c = #{s=0, t=1}`` (only the optimised is right).
Under H0 "no degradation" the degradation probability q = P(s=1, t=0 | s != t) is at most 1/2,
so the exact one-sided p-value is ``P(Bin(b + c, 1/2) >= b)`` (McNemar's exact test).

Several benchmarks are combined into one decision in three ways (Sec. 4): pooled (sum the
discordant counts), max-drop (the largest standardised drop, with a Monte-Carlo null conditional
on the discordant counts) and Fisher's method (``-2 sum log p_i ~ chi2_{2T}``).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping, Sequence

import numpy as np
from scipy import stats

_ALTERNATIVES = ("greater", "less", "two-sided")
AGGREGATIONS = ("pooled", "maxdrop", "fisher")


def _as_binary(x, name: str) -> np.ndarray:
    arr = np.asarray(x)
    if arr.ndim != 1:
        raise ValueError(f"{name} must be a 1-D array of per-sample 0/1 scores, got shape {arr.shape}")
    if arr.size and not np.all(np.isin(arr, (0, 1, True, False))):
        bad = arr[~np.isin(arr, (0, 1))][:3]
        raise ValueError(f"{name} must hold only 0/1 (or bool) scores; found e.g. {bad.tolist()}")
    return arr.astype(np.int8)


def contingency(base_correct, new_correct) -> tuple[int, int, int, int]:
    """The 2x2 paired table ``(a, b, c, d)``: both wrong, only base right, only new right, both right."""
    s = _as_binary(base_correct, "base_correct")
    t = _as_binary(new_correct, "new_correct")
    if s.shape != t.shape:
        raise ValueError(
            f"base_correct and new_correct must score the same samples; got lengths {s.size} and {t.size}"
        )
    a = int(np.sum((s == 0) & (t == 0)))
    b = int(np.sum((s == 1) & (t == 0)))
    c = int(np.sum((s == 0) & (t == 1)))
    d = int(np.sum((s == 1) & (t == 1)))
    return a, b, c, d


@dataclass(frozen=True)
class DegradationResult:
    """Result of :func:`mcnemar_degradation`.

    ``statistic`` is b (samples only the base model gets right); ``pvalue`` the exact p-value;
    ``q_hat = b / (b + c)`` the estimated degradation probability with its Clopper-Pearson
    ``ci``; ``delta = (b - c) / n`` the accuracy drop.
    """

    statistic: int
    pvalue: float
    b: int
    c: int
    n: int
    q_hat: float
    delta: float
    ci: tuple[float, float]
    alternative: str

    @property
    def flip_rate(self) -> float:
        """Fraction of samples whose score changed, ``(b + c) / n``."""
        return (self.b + self.c) / self.n if self.n else float("nan")


def _binom_p(b: int, m: int, alternative: str) -> float:
    if m == 0:
        return 1.0
    return float(stats.binomtest(b, m, 0.5, alternative=alternative).pvalue)


def mcnemar_degradation(base_correct, new_correct, alternative: str = "greater",
                        confidence_level: float = 0.95) -> DegradationResult:
    """Exact McNemar test that the new model is worse than the base (Sec. 3, Eq. for q).

    ``alternative="greater"`` (the paper's degradation test) tests H1: q > 1/2, i.e. the new model
    loses more samples than it gains; ``"less"`` tests improvement; ``"two-sided"`` any change.
    """
    if alternative not in _ALTERNATIVES:
        raise ValueError(f"alternative must be one of {_ALTERNATIVES}, got {alternative!r}")
    if not 0 < confidence_level < 1:
        raise ValueError(f"confidence_level must lie in (0, 1), got {confidence_level}")
    a, b, c, d = contingency(base_correct, new_correct)
    n = a + b + c + d
    if n == 0:
        raise ValueError("need at least one paired sample")
    m = b + c
    if m:
        ci = stats.binomtest(b, m, 0.5).proportion_ci(confidence_level=confidence_level, method="exact")
        ci_t = (float(ci.low), float(ci.high))
    else:
        ci_t = (0.0, 1.0)
    return DegradationResult(
        statistic=b, pvalue=_binom_p(b, m, alternative), b=b, c=c, n=n,
        q_hat=b / m if m else float("nan"), delta=(b - c) / n, ci=ci_t, alternative=alternative,
    )


@dataclass(frozen=True)
class UnpairedResult:
    statistic: float
    pvalue: float
    delta: float


def unpaired_degradation(base_correct, new_correct) -> UnpairedResult:
    """The naive baseline the paper argues against: a one-sided two-proportion z-test that ignores
    the pairing (pooled standard error), H1: accuracy(base) > accuracy(new)."""
    s = _as_binary(base_correct, "base_correct").astype(float)
    t = _as_binary(new_correct, "new_correct").astype(float)
    if s.size == 0 or t.size == 0:
        raise ValueError("need at least one sample per model")
    p1, p2 = s.mean(), t.mean()
    pooled = (s.sum() + t.sum()) / (s.size + t.size)
    se = np.sqrt(pooled * (1 - pooled) * (1 / s.size + 1 / t.size))
    z = (p1 - p2) / se if se > 0 else 0.0
    return UnpairedResult(statistic=float(z), pvalue=float(stats.norm.sf(z)), delta=float(p1 - p2))


@dataclass(frozen=True)
class AggregateResult:
    """Per-aggregation p-values over several benchmarks (Sec. 4) and the combined decision."""

    pvalues: dict[str, float]
    per_task: list[DegradationResult] = field(repr=False)
    alpha: float = 0.05

    @property
    def combined_reject(self) -> bool:
        """Reject if any aggregation does; the family-wise type-I error is then at most
        ``len(pvalues) * alpha`` (Bonferroni), as the paper notes."""
        return any(p < self.alpha for p in self.pvalues.values())


def _maxdrop_pvalue(b: np.ndarray, c: np.ndarray, n_mc: int, rng: np.random.Generator) -> float:
    """Max-drop: T = max_i z_i, z_i = (q_hat_i - 1/2) / SE_i with SE_i = 1/(2 sqrt(m_i)) under H0.

    The null distribution is simulated conditional on the discordant counts m_i = b_i + c_i
    (b_i ~ Bin(m_i, 1/2) independently), which keeps the test exact up to Monte-Carlo error.
    """
    m = b + c
    keep = m > 0
    if not keep.any():
        return 1.0
    m, b = m[keep], b[keep]
    z_obs = np.max((b / m - 0.5) * 2 * np.sqrt(m))
    sims = rng.binomial(m[None, :], 0.5, size=(n_mc, m.size))
    z_null = np.max((sims / m - 0.5) * 2 * np.sqrt(m), axis=1)
    return float((1 + np.sum(z_null >= z_obs - 1e-12)) / (n_mc + 1))


def aggregate_counts(b, c, methods: Sequence[str] = AGGREGATIONS, n_mc: int = 10_000,
                     rng: np.random.Generator | None = None) -> dict[str, float]:
    """Aggregated p-values from per-task discordant counts ``b`` (only base right) and ``c``.

    The same computation as :func:`aggregate_degradation`, for callers that already hold the
    2x2 tables (e.g. simulations).
    """
    b = np.asarray(b, dtype=np.int64)
    c = np.asarray(c, dtype=np.int64)
    if b.shape != c.shape or b.ndim != 1 or b.size == 0:
        raise ValueError("b and c must be 1-D arrays of equal, non-zero length (one entry per task)")
    if np.any(b < 0) or np.any(c < 0):
        raise ValueError("discordant counts must be non-negative")
    unknown = [m for m in methods if m not in AGGREGATIONS]
    if unknown or not methods:
        raise ValueError(f"methods must be a non-empty subset of {AGGREGATIONS}, got {list(methods)}")
    if n_mc < 1:
        raise ValueError(f"n_mc must be a positive integer, got {n_mc}")
    rng = np.random.default_rng(0) if rng is None else rng
    out: dict[str, float] = {}
    if "pooled" in methods:
        out["pooled"] = _binom_p(int(b.sum()), int((b + c).sum()), "greater")
    if "maxdrop" in methods:
        out["maxdrop"] = _maxdrop_pvalue(b, c, n_mc, rng)
    if "fisher" in methods:
        per_task = [_binom_p(int(bi), int(bi + ci), "greater") for bi, ci in zip(b, c)]
        out["fisher"] = float(stats.combine_pvalues(per_task, method="fisher").pvalue)
    return out


def aggregate_degradation(
    tasks: Mapping[str, tuple] | Sequence[tuple],
    methods: Sequence[str] = AGGREGATIONS,
    alpha: float = 0.05,
    n_mc: int = 10_000,
    random_state: int | None = 0,
) -> AggregateResult:
    """Combine per-benchmark paired scores into one degradation decision (Sec. 4).

    ``tasks`` maps a task name to ``(base_correct, new_correct)`` (or is a sequence of such pairs).
    ``methods`` chooses among ``"pooled"`` (McNemar on the summed discordant counts),
    ``"maxdrop"`` (largest standardised drop, Monte-Carlo null with ``n_mc`` draws) and
    ``"fisher"`` (Fisher's combination of the per-task exact p-values).
    """
    pairs = list(tasks.values()) if isinstance(tasks, Mapping) else list(tasks)
    if not pairs:
        raise ValueError("need at least one task")
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must lie in (0, 1), got {alpha}")
    results = [mcnemar_degradation(s, t) for s, t in pairs]
    pvals = aggregate_counts([r.b for r in results], [r.c for r in results], methods, n_mc,
                             np.random.default_rng(random_state))
    return AggregateResult(pvalues=pvals, per_task=results, alpha=alpha)


def flip_mask(score_runs) -> np.ndarray:
    """Samples worth keeping: those whose score flips across repeated noisy runs (Sec. 5).

    ``score_runs`` is an ``(R, N)`` 0/1 array of R evaluations of one model (e.g. sampling at a
    small temperature). Samples scored identically in every run are "never-flipping": dropping them
    removes no discordant pairs in expectation and so keeps the test's signal-to-noise ratio while
    shrinking the evaluation set. Returns a boolean mask of the samples to keep.
    """
    arr = np.asarray(score_runs)
    if arr.ndim != 2 or arr.shape[0] < 2:
        raise ValueError(f"score_runs must be an (R, N) array with R >= 2 runs, got shape {arr.shape}")
    if not np.all(np.isin(arr, (0, 1))):
        raise ValueError("score_runs must hold only 0/1 scores")
    return arr.min(axis=0) != arr.max(axis=0)
