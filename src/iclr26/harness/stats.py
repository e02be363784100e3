"""Paired statistical tests that turn measurements into a claim verdict.

Every test answers one-sided questions about the paired difference ``d = method - baseline``
(or ``method - baseline_value`` for one-sample claims) against a shifted null ``d = shift``:
- ``greater``: H1 ``d > -margin`` (``margin`` > 0 makes it a non-inferiority claim);
- ``less``:    H1 ``d < margin``;
- ``equivalent``: both ``d > -margin`` and ``d < margin`` (two one-sided tests, p = the larger).
The verdict is ``reproduced`` when the claimed direction is significant at ``alpha``,
``contradicted`` when the opposite direction is, and ``not reproduced`` otherwise.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np
from scipy import stats

TESTS = ("mcnemar", "binomial", "wilcoxon", "paired_t", "sign", "bootstrap", "tost")
DIRECTIONS = ("greater", "less", "equivalent")
BINARY_TESTS = ("mcnemar", "binomial")
VERDICTS = ("reproduced", "not reproduced", "contradicted", "error", "not run")
BOOTSTRAP_RESAMPLES = 10_000


@dataclass(frozen=True)
class ClaimStatistics:
    """The numbers behind one verdict."""

    test: str
    direction: str
    n: int
    method_mean: float
    baseline_mean: float
    effect: float  # mean of method - baseline (or - baseline_value)
    ci_low: float
    ci_high: float
    pvalue: float  # p-value of the claimed direction (TOST: the larger of the two)
    pvalue_opposite: float
    verdict: str
    note: str = ""

    def to_dict(self) -> dict:
        return asdict(self)


def _one_sided(test: str, d: np.ndarray, shift: float, alternative: str, rng, x=None, y=None) -> float:
    """p-value of H1: mean/median of d ``alternative`` (greater/less) than ``shift``."""
    n = d.size
    if test in ("paired_t", "tost"):
        if n < 2:
            return math.nan
        if np.all(d == d[0]):
            return 0.0 if (d[0] > shift if alternative == "greater" else d[0] < shift) else 1.0
        return float(stats.ttest_1samp(d - shift, 0.0, alternative=alternative).pvalue)
    if test == "wilcoxon":
        z = d - shift
        if np.all(z == 0):
            return 1.0
        return float(stats.wilcoxon(z, alternative=alternative, zero_method="wilcox").pvalue)
    if test == "sign":
        z = d - shift
        pos, neg = int(np.sum(z > 0)), int(np.sum(z < 0))
        if pos + neg == 0:
            return 1.0
        k = pos if alternative == "greater" else neg
        return float(stats.binomtest(k, pos + neg, 0.5, alternative="greater").pvalue)
    if test == "bootstrap":
        idx = rng.integers(0, n, size=(BOOTSTRAP_RESAMPLES, n))
        means = d[idx].mean(axis=1)
        hits = np.sum(means <= shift) if alternative == "greater" else np.sum(means >= shift)
        return float((1 + hits) / (BOOTSTRAP_RESAMPLES + 1))
    if test == "mcnemar":
        from iclr26.evaluation.mcnemar_degradation import mcnemar_degradation

        # "greater": the method is right where the baseline fails more often than the reverse,
        # i.e. the baseline is a degradation of the method.
        if alternative == "greater":
            return mcnemar_degradation(x, y, alternative="greater").pvalue
        return mcnemar_degradation(y, x, alternative="greater").pvalue
    if test == "binomial":
        p0 = min(max(shift, 0.0), 1.0)
        k = int(np.sum(x))
        if (alternative == "greater" and p0 >= 1.0) or (alternative == "less" and p0 <= 0.0):
            return 1.0
        return float(stats.binomtest(k, n, p0, alternative=alternative).pvalue)
    raise ValueError(f"unknown test {test!r}; allowed: {', '.join(TESTS)}")


def _interval(test: str, d: np.ndarray, alpha: float, rng, x=None) -> tuple[float, float]:
    n = d.size
    if n < 2 and test != "binomial":
        return (math.nan, math.nan)
    if test == "bootstrap":
        idx = rng.integers(0, n, size=(BOOTSTRAP_RESAMPLES, n))
        means = d[idx].mean(axis=1)
        lo, hi = np.quantile(means, [alpha / 2, 1 - alpha / 2])
        return float(lo), float(hi)
    if test == "binomial":
        ci = stats.binomtest(int(np.sum(x)), n, 0.5).proportion_ci(1 - alpha, method="exact")
        base = float(np.mean(x)) - float(np.mean(d))  # the constant
        return float(ci.low) - base, float(ci.high) - base
    sd = float(np.std(d, ddof=1))
    if sd == 0:
        return float(d.mean()), float(d.mean())
    half = stats.t.ppf(1 - alpha / 2, n - 1) * sd / math.sqrt(n)
    return float(d.mean() - half), float(d.mean() + half)


def evaluate_claim(
    test: str,
    direction: str,
    method: np.ndarray,
    baseline: np.ndarray | None = None,
    baseline_value: float | None = None,
    margin: float = 0.0,
    alpha: float = 0.05,
    seed: int = 0,
) -> ClaimStatistics:
    """Run ``test`` on paired ``method``/``baseline`` values (or ``method`` vs ``baseline_value``)."""
    if test not in TESTS:
        raise ValueError(f"unknown test {test!r}; allowed: {', '.join(TESTS)}")
    if direction not in DIRECTIONS:
        raise ValueError(f"unknown direction {direction!r}; allowed: {', '.join(DIRECTIONS)}")
    if test == "tost" and direction != "equivalent":
        raise ValueError("test 'tost' needs direction 'equivalent'")
    if direction == "equivalent" and not margin > 0:
        raise ValueError("direction 'equivalent' needs a positive margin")
    if margin < 0:
        raise ValueError(f"margin must be >= 0, got {margin}")
    if test == "mcnemar" and (margin != 0 or direction == "equivalent"):
        raise ValueError("test 'mcnemar' supports directions greater/less with margin 0 only")
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must lie in (0, 1), got {alpha}")
    x = np.asarray(method, dtype=float).ravel()
    if (baseline is None) == (baseline_value is None):
        raise ValueError("give exactly one of baseline (paired values) or baseline_value (a constant)")
    if baseline is not None:
        if test == "binomial":
            raise ValueError("test 'binomial' compares a rate with a constant: use baseline_value")
        y = np.asarray(baseline, dtype=float).ravel()
        if y.shape != x.shape:
            raise ValueError(f"method and baseline must be paired: {x.size} vs {y.size} values")
    else:
        if test == "mcnemar":
            raise ValueError("test 'mcnemar' needs paired baseline values, not a constant")
        y = np.full_like(x, float(baseline_value))
    if x.size == 0:
        raise ValueError("no measurements to test")
    if not (np.all(np.isfinite(x)) and np.all(np.isfinite(y))):
        raise ValueError("measurements contain NaN or infinite values")
    if test in BINARY_TESTS and not (np.all(np.isin(x, (0, 1))) and (baseline is None or np.all(np.isin(y, (0, 1))))):
        raise ValueError(f"test {test!r} needs 0/1 values per item")
    rng = np.random.default_rng(seed)
    d = x - y
    # the null's location: for binomial it is a rate, otherwise a difference
    base = float(baseline_value) if test == "binomial" else 0.0

    def p(alternative: str, shift: float) -> float:
        return _one_sided(test, d, base + shift, alternative, rng, x, y)

    if direction == "greater":
        p_claim, p_opp = p("greater", -margin), p("less", -margin)
    elif direction == "less":
        p_claim, p_opp = p("less", margin), p("greater", margin)
    else:
        p_claim = max(p("greater", -margin), p("less", margin))
        p_opp = min(p("greater", margin), p("less", -margin))
    note = ""
    if math.isnan(p_claim):
        verdict, note = "not reproduced", f"too few pairs ({x.size}) for {test}"
    elif p_claim < alpha:
        verdict = "reproduced"
    elif not math.isnan(p_opp) and p_opp < alpha:
        verdict = "contradicted"
    else:
        verdict = "not reproduced"
    if verdict == "reproduced" and direction == "equivalent" and baseline is not None \
            and np.ptp(x) == 0 and np.ptp(y) == 0:
        # e.g. both arms at 0 % accuracy: a floor (or ceiling) the experiment never left says nothing
        verdict = "not reproduced"
        note = f"both arms are constant ({x[0]:g} and {y[0]:g}): no variation, so equivalence is not evidence"
    lo, hi = _interval(test, d, alpha, rng, x)
    return ClaimStatistics(
        test=test, direction=direction, n=int(x.size), method_mean=float(x.mean()),
        baseline_mean=float(y.mean()), effect=float(d.mean()), ci_low=lo, ci_high=hi,
        pvalue=float(p_claim), pvalue_opposite=float(p_opp), verdict=verdict, note=note,
    )
