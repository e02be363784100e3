"""Paired statistical tests that turn measurements into a claim verdict.

Every test answers one-sided questions about the paired difference ``d = method - baseline``
(or ``method - baseline_value`` for one-sample claims) against a shifted null:
- ``greater``: H1 ``d > -margin`` (``margin`` > 0 makes it a non-inferiority claim);
- ``less``:    H1 ``d < margin``;
- ``equivalent``: both ``d > -margin`` and ``d < margin`` (two one-sided tests, p = the larger).

Verdicts (``evaluate_claim``), each with its reason in words:
- ``reproduced``: the claimed direction is significant at ``alpha``;
- ``reproduced, smaller``: significant in the claimed direction, yet the bound on the far side excludes
  the paper's effect: the effect is real and smaller than the paper's;
- ``contradicted``: the opposite direction is significant;
- ``not reproduced``: neither, and the interval rules out the paper's effect (the check would have seen it);
- ``inconclusive``: neither and the paper's effect is still inside the interval (too little power), or
  the method arm does not clear the metric's floor (nothing learned), or a would-be reproduction is
  against a comparator that does not clear its own floor (``baseline_floor``), or the data are
  degenerate (all paired differences zero; a design whose smallest possible p-value is not below
  ``alpha``). Differences that are all equal and non-zero are evidence: they are decided by the exact
  sign test. For an inconclusive verdict ``units_needed`` says how many units would make the paper's
  effect detectable with 80 % power, from the measured spread.

Wilcoxon signed-rank p-values are exact: without ties from scipy's exact null distribution, with tied
or zero differences from the exact permutation (sign-flip) distribution of the mid-rank statistic,
computed by convolution (the normal approximation only beyond ``WILCOXON_EXACT_MAX`` pairs).

The interval is always the pair of one-sided (1 - alpha) bounds ``[L, U]`` that the test itself
inverts, so the claimed direction is significant exactly when its bound clears the null. Clustered
items (several items per seed) are reduced to one value per cluster before testing.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np
from scipy import stats

TESTS = ("mcnemar", "binomial", "wilcoxon", "paired_t", "sign", "bootstrap", "tost")
DIRECTIONS = ("greater", "less", "equivalent")
BINARY_TESTS = ("mcnemar", "binomial")
#: tests whose null distribution rests on the spread of the paired differences themselves
SPREAD_TESTS = ("wilcoxon", "paired_t", "sign", "bootstrap", "tost")
VERDICTS = ("reproduced", "reproduced, smaller", "contradicted", "not reproduced", "inconclusive", "error", "not run")
#: the verdicts in which the claimed direction held (a premise or a ``requires`` partner stands)
REPRODUCED = ("reproduced", "reproduced, smaller")
#: up to this many non-zero differences a tied Wilcoxon sample gets its exact permutation p-value
WILCOXON_EXACT_MAX = 400
BOOTSTRAP_RESAMPLES = 10_000
POWER = 0.8
#: asymptotic relative efficiency against the t-test under normal data (for the detectable effect)
_ARE = {"wilcoxon": 3 / math.pi, "sign": 2 / math.pi}
_ESTIMATOR = {"wilcoxon": "pseudo-median", "sign": "median"}


@dataclass(frozen=True)
class ClaimStatistics:
    """The numbers behind one verdict."""

    test: str  # the test that ran (a clustered 0/1 claim runs paired_t on per-seed rates)
    direction: str
    n: int  # independent units tested (items, seeds, or clusters)
    method_mean: float
    baseline_mean: float
    effect: float  # the test's estimate of method - comparator (mean, median or pseudo-median)
    ci_low: float  # one-sided (1 - alpha) lower bound of the effect (-inf when none)
    ci_high: float  # one-sided (1 - alpha) upper bound
    pvalue: float  # p-value of the claimed direction (TOST: the larger of the two)
    pvalue_opposite: float
    verdict: str
    note: str = ""  # the reason for the verdict, in words
    estimator: str = "mean"
    mean_difference: float = math.nan
    alpha: float = 0.05
    margin: float = 0.0
    paper_effect: float | None = None
    mde: float = math.nan  # smallest true effect detected with 80 % power (signed, as the effect)
    floor: float | None = None
    floor_pvalue: float | None = None
    n_items: int = 0  # raw items before clustering
    clustered: bool = False
    #: units (seeds or clusters, as ``n``) at which the paper's effect would be detected with 80 % power,
    #: n * (detectable / paper effect)^2 with both measured from the null; None when it cannot be said
    units_needed: int | None = None
    baseline_floor: float | None = None
    baseline_floor_pvalue: float | None = None

    def to_dict(self) -> dict:
        return asdict(self)


def _one_sided(test: str, d: np.ndarray, shift: float, alternative: str, boot=None, x=None, y=None) -> float:
    """p-value of H1: location of d ``alternative`` (greater/less) than ``shift``."""
    n = d.size
    if test in ("paired_t", "tost"):
        if n < 2 or np.all(d == d[0]):
            return math.nan
        return float(stats.ttest_1samp(d - shift, 0.0, alternative=alternative).pvalue)
    if test == "wilcoxon":
        z = d - shift
        if np.all(z == 0):
            return 1.0
        nz = np.abs(z[z != 0])
        if np.unique(nz).size < nz.size or nz.size < z.size:  # ties or zeros: the exact permutation law
            if nz.size <= WILCOXON_EXACT_MAX:
                return _wilcoxon_permutation_p(z[z != 0], alternative)
            method = "approx"
        else:
            method = "approx" if nz.size > 50 else "exact"
        return float(stats.wilcoxon(z, alternative=alternative, zero_method="wilcox", method=method).pvalue)
    if test == "sign":
        z = d - shift
        pos, neg = int(np.sum(z > 0)), int(np.sum(z < 0))
        if pos + neg == 0:
            return 1.0
        k = pos if alternative == "greater" else neg
        return float(stats.binomtest(k, pos + neg, 0.5, alternative="greater").pvalue)
    if test == "bootstrap":
        hits = np.sum(boot <= shift) if alternative == "greater" else np.sum(boot >= shift)
        return float((1 + hits) / (boot.size + 1))
    if test == "mcnemar":
        b, c = int(np.sum((x == 1) & (y == 0))), int(np.sum((x == 0) & (y == 1)))
        if b + c == 0:
            return 1.0
        k = b if alternative == "greater" else c
        return float(stats.binomtest(k, b + c, 0.5, alternative="greater").pvalue)
    if test == "binomial":
        p0 = min(max(shift, 0.0), 1.0)
        k = int(np.sum(x))
        if (alternative == "greater" and p0 >= 1.0) or (alternative == "less" and p0 <= 0.0):
            return 1.0
        return float(stats.binomtest(k, n, p0, alternative=alternative).pvalue)
    raise ValueError(f"unknown test {test!r}; allowed: {', '.join(TESTS)}")


def _wilcoxon_permutation_p(z: np.ndarray, alternative: str) -> float:
    """Exact one-sided p-value of the signed-rank statistic with tied (mid-rank) or dropped zero differences.

    Under H0 each non-zero difference is positive or negative with probability 1/2 independently, so
    T+ (the sum of the mid-ranks of |z| over positive z) is a sum of independent 0/r_i terms; its
    distribution is the convolution of the two-point laws, computed on the half-integer grid that
    mid-ranks live on. This is the permutation distribution scipy's ``PermutationMethod`` enumerates.
    """
    if z.size == 0:
        return 1.0
    r2 = np.rint(2 * stats.rankdata(np.abs(z))).astype(np.int64)  # mid-ranks are multiples of 1/2
    law = np.zeros(int(r2.sum()) + 1)
    law[0] = 1.0
    for w in r2:  # T+ gains r_i or nothing, each with probability 1/2
        shifted = np.zeros_like(law)
        shifted[w:] = law[:law.size - w]
        law = 0.5 * (law + shifted)
    t_obs = int(r2[z > 0].sum())
    p = law[t_obs:].sum() if alternative == "greater" else law[:t_obs + 1].sum()
    return float(min(1.0, p))


def _invert(pfun, alternative: str, alpha: float, d: np.ndarray) -> float:
    """The one-sided bound of a test by inversion: sup{s: p_greater(s) < alpha} or inf{s: p_less(s) < alpha}.

    ``p_greater(s)`` grows with ``s`` (and ``p_less`` falls), so bisection finds the step where the
    test stops rejecting; the verdict and the bound therefore never disagree.
    """
    span = float(np.ptp(d)) or 1.0
    lo, hi = float(d.min()) - span, float(d.max()) + span

    def snap(x: float) -> float:
        # bisection stops a rounding error short of the step (e.g. 1.5e-20 for a step at 0); the step of
        # a rank or bootstrap test sits on a data-derived value, so take the rounded point when it still rejects
        r = round(x, 10 - math.floor(math.log10(span)))
        return r if pfun(r) < alpha else x

    if alternative == "greater":
        if not pfun(lo) < alpha:
            return -math.inf
        for _ in range(70):
            mid = (lo + hi) / 2
            lo, hi = (mid, hi) if pfun(mid) < alpha else (lo, mid)
        return snap(lo)
    if not pfun(hi) < alpha:
        return math.inf
    for _ in range(70):
        mid = (lo + hi) / 2
        lo, hi = (lo, mid) if pfun(mid) < alpha else (mid, hi)
    return snap(hi)


def _bounds(test: str, d: np.ndarray, alpha: float, boot=None, x=None, y=None, base: float = 0.0) -> tuple[float, float]:
    """One-sided (1 - alpha) lower and upper bounds of the effect, from the test's own inversion."""
    n = d.size
    if test in ("paired_t", "tost"):
        sd = float(np.std(d, ddof=1)) if n > 1 else 0.0
        if n < 2 or sd == 0:
            return -math.inf, math.inf
        half = stats.t.ppf(1 - alpha, n - 1) * sd / math.sqrt(n)
        return float(d.mean() - half), float(d.mean() + half)
    if test == "mcnemar":
        b, c = int(np.sum((x == 1) & (y == 0))), int(np.sum((x == 0) & (y == 1)))
        nd = b + c
        if nd == 0:
            return -math.inf, math.inf
        lo = stats.beta.ppf(alpha, b, c + 1) if b > 0 else 0.0
        hi = stats.beta.ppf(1 - alpha, b + 1, c) if c > 0 else 1.0
        return nd / n * (2 * lo - 1), nd / n * (2 * hi - 1)
    if test == "binomial":
        k = int(np.sum(x))
        lo = stats.beta.ppf(alpha, k, n - k + 1) if k > 0 else 0.0
        hi = stats.beta.ppf(1 - alpha, k + 1, n - k) if k < n else 1.0
        return float(lo) - base, float(hi) - base
    return (_invert(lambda s: _one_sided(test, d, s, "greater", boot), "greater", alpha, d),
            _invert(lambda s: _one_sided(test, d, s, "less", boot), "less", alpha, d))


def _estimate(test: str, d: np.ndarray) -> float:
    if test == "sign":
        return float(np.median(d))
    if test == "wilcoxon":
        if d.size > 2000:  # the Walsh averages of a large sample: estimate from a fixed subsample of pairs
            rng = np.random.default_rng(0)
            i, j = rng.integers(0, d.size, (2, 2_000_000))
            return float(np.median((d[i] + d[j]) / 2))
        i, j = np.triu_indices(d.size)
        return float(np.median((d[i] + d[j]) / 2))
    return float(d.mean())


def min_pvalue(test: str, n: int, x=None, y=None, p0: float | None = None, direction: str = "greater",
               nonzero: int | None = None) -> float:
    """The smallest p-value the design can produce at all (1.0 when it can produce none).

    ``nonzero``: for the rank and sign tests, how many differences are not tied with the null (ties
    are dropped); defaults to ``n``.
    """
    if test in ("paired_t", "tost"):
        return 0.0 if n >= 2 else 1.0
    if test in ("wilcoxon", "sign"):
        return 0.5 ** (n if nonzero is None else nonzero)  # every difference on the claimed side
    if test == "bootstrap":
        return 0.0 if n >= 5 else 1.0
    if test == "mcnemar":
        nd = int(np.sum(x != y))
        return 0.5 ** nd
    if test == "binomial":
        p = min(max(p0, 0.0), 1.0)
        sides = {"greater": [p], "less": [1 - p], "equivalent": [p, 1 - p]}[direction]
        return max(s ** n for s in sides)
    raise ValueError(test)


def detectable_effect(test: str, d: np.ndarray, alpha: float, direction: str, margin: float, base: float = 0.0,
                      x=None, y=None, power: float = POWER) -> float:
    """The smallest true effect (method - comparator) this design detects with probability ``power``.

    Normal approximation: the null boundary plus ``(q_{1-alpha} + q_power) * sd / sqrt(n)`` (t quantiles
    with n - 1 degrees of freedom for the t-tests; the rank tests pay their asymptotic relative
    efficiency; for McNemar the spread of a per-item difference is sqrt(share of discordant pairs), for
    the binomial sqrt(p0 (1 - p0))). For ``equivalent`` it is the margin that would be shown with this
    power when the true difference is 0. NaN when the data give no spread to base it on.
    """
    n = d.size
    if n < 2:
        return math.nan
    if test == "mcnemar":
        sd = math.sqrt(np.mean(x != y))
    elif test == "binomial":
        sd = math.sqrt(base * (1 - base)) if 0 < base < 1 else math.sqrt(max(np.mean(x) * (1 - np.mean(x)), 0.0))
    else:
        sd = float(np.std(d, ddof=1))
    if not sd > 0:
        return math.nan
    if test in ("paired_t", "tost"):
        qa, qb = stats.t.ppf(1 - alpha, n - 1), stats.t.ppf(power if direction != "equivalent" else (1 + power) / 2, n - 1)
    else:
        qa, qb = stats.norm.ppf(1 - alpha), stats.norm.ppf(power if direction != "equivalent" else (1 + power) / 2)
    delta = (qa + qb) * sd / math.sqrt(n) / math.sqrt(_ARE.get(test, 1.0))
    if direction == "greater":
        return -margin + delta
    if direction == "less":
        return margin - delta
    return delta


def _cluster_means(v: np.ndarray, clusters: np.ndarray) -> np.ndarray:
    _, inv = np.unique(clusters, return_inverse=True)
    return np.bincount(inv, weights=v) / np.bincount(inv)


def evaluate_claim(
    test: str,
    direction: str,
    method: np.ndarray,
    baseline: np.ndarray | None = None,
    baseline_value: float | None = None,
    margin: float = 0.0,
    alpha: float = 0.05,
    seed: int = 0,
    paper_effect: float | None = None,
    floor: float | None = None,
    floor_side: str | None = None,
    clusters=None,
    baseline_floor: float | None = None,
    baseline_floor_side: str | None = None,
    baseline_floor_expected: bool = False,
) -> ClaimStatistics:
    """Run ``test`` on paired ``method``/``baseline`` values (or ``method`` vs ``baseline_value``).

    ``paper_effect`` is the paper's effect (method - comparator, in the metric's units): without it a
    non-significant result can only be inconclusive. ``floor`` is the metric's trivial level that
    the method arm must clear on ``floor_side`` ("above"/"below"). ``clusters`` labels each item
    with its cluster (e.g. the seed of the trained model that produced it): the test then runs on
    one value per cluster. ``baseline_floor`` is the comparator arm's trivial level: a reproduction
    against a comparator that does not clear it on ``baseline_floor_side`` is inconclusive, unless
    ``baseline_floor_expected`` (the comparator's failure is itself what the paper claims).
    """
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
    if floor is not None:
        if floor_side is None:
            floor_side = {"greater": "above", "less": "below"}.get(direction)
        if floor_side not in ("above", "below"):
            raise ValueError(f"floor_side must be 'above' or 'below', got {floor_side!r}")
    if baseline_floor is not None:
        if baseline is None:
            raise ValueError("baseline_floor needs paired baseline values, not a constant")
        if baseline_floor_side is None:
            baseline_floor_side = floor_side or {"greater": "above", "less": "below"}.get(direction)
        if baseline_floor_side not in ("above", "below"):
            raise ValueError(f"baseline_floor_side must be 'above' or 'below', got {baseline_floor_side!r}")
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
    n_items = int(x.size)
    clustered = clusters is not None
    if clustered:
        clusters = np.asarray(clusters).ravel()
        if clusters.shape != x.shape:
            raise ValueError(f"clusters must label every item: {clusters.size} labels for {x.size} items")
        x, y = _cluster_means(x, clusters), _cluster_means(y, clusters)
        if test in BINARY_TESTS:  # the exact tests assume independent items: test the per-cluster rates
            test = "paired_t"
    base = float(baseline_value) if test == "binomial" else 0.0  # binomial's null is a rate
    d = x - y
    n = int(d.size)
    constant_note = ""
    if test in SPREAD_TESTS and np.ptp(d) == 0 and d[0] != 0:
        # every unit shows the same non-zero difference: evidence with no spread, which only a
        # distribution-free test can weigh (each unit on one side with probability 1/2 under H0)
        constant_note = (f" (all {n} differences equal {d[0]:+.4g}: decided by the exact sign test, since "
                         f"{test} needs a spread)")
        test = "sign"
    boot = None
    if test == "bootstrap":
        rng = np.random.default_rng(seed)
        boot = d[rng.integers(0, n, size=(BOOTSTRAP_RESAMPLES, n))].mean(axis=1)

    def p(alternative: str, shift: float) -> float:
        return _one_sided(test, d, base + shift, alternative, boot, x, y)

    if direction == "greater":
        p_claim, p_opp = p("greater", -margin), p("less", -margin)
    elif direction == "less":
        p_claim, p_opp = p("less", margin), p("greater", margin)
    else:
        p_claim = max(p("greater", -margin), p("less", margin))
        p_opp = min(p("greater", margin), p("less", -margin))
    lo, hi = _bounds(test, d, alpha, boot, x, y, base)
    effect = _estimate(test, d)
    mde = detectable_effect(test, d, alpha, direction, margin, base, x, y)
    unit_word = "clusters (seeds)" if clustered else "units"

    def floor_pvalue(v: np.ndarray, level: float, side: str) -> float:
        """p-value that the arm ``v`` lies beyond ``level`` on ``side``."""
        above = side == "above"
        z = v - level
        if test in BINARY_TESTS:
            k = int(np.sum(v))
            return 1.0 if not 0 < level < 1 else float(stats.binomtest(k, n, level, alternative="greater" if above else "less").pvalue)
        if np.ptp(z) == 0:
            return 0.5 ** n if (z[0] > 0 if above else z[0] < 0) else 1.0
        ftest = test if test in ("wilcoxon", "sign") else "paired_t"
        return _one_sided(ftest, z, 0.0, "greater" if above else "less")

    floor_p = None if floor is None else floor_pvalue(x, floor, floor_side)
    bfloor_p = None if baseline_floor is None else floor_pvalue(y, baseline_floor, baseline_floor_side)
    null = base - margin if direction == "greater" else base + margin
    units_needed = None
    if paper_effect is not None and math.isfinite(mde):
        reach = abs(mde - (-margin if direction == "greater" else margin)) if direction != "equivalent" else mde
        target = abs(paper_effect - (-margin if direction == "greater" else margin)) if direction != "equivalent" \
            else margin - abs(paper_effect)
        claimed_side = (paper_effect > -margin if direction == "greater" else paper_effect < margin
                        if direction == "less" else target > 0)
        if claimed_side and target > 0 and reach > 0:
            units_needed = max(int(math.ceil(n * (reach / target) ** 2 - 1e-9)), 2)

    def finish(verdict: str, note: str) -> ClaimStatistics:
        return ClaimStatistics(
            test=test, direction=direction, n=n, method_mean=float(x.mean()), baseline_mean=float(y.mean()),
            effect=effect, ci_low=lo, ci_high=hi, pvalue=float(p_claim), pvalue_opposite=float(p_opp),
            verdict=verdict, note=note, estimator=_ESTIMATOR.get(test, "mean"), mean_difference=float(d.mean()),
            alpha=alpha, margin=margin, paper_effect=paper_effect, mde=mde, floor=floor, floor_pvalue=floor_p,
            n_items=n_items, clustered=clustered, units_needed=units_needed if verdict == "inconclusive" else None,
            baseline_floor=baseline_floor, baseline_floor_pvalue=bfloor_p,
        )

    def need() -> str:
        return "" if units_needed is None else (f"; about {units_needed} {unit_word} (now {n}) would detect the "
                                                f"paper's effect {paper_effect:+.4g} with 80 % power")

    # degenerate data: nothing any test could tell
    pmin = min_pvalue(test, n, x, y, null, direction, nonzero=int(np.sum(d != null)))
    if not pmin < alpha:
        mde = math.nan  # no true effect, however large, could be detected
        if test == "mcnemar":
            why = f"only {int(np.sum(x != y))} discordant pair(s) of {n} items"
        elif test == "binomial":
            why = f"{n} items against the rate {base:g}"
        elif test in ("wilcoxon", "sign") and int(np.sum(d != null)) < n:
            why = f"only {int(np.sum(d != null))} of {n} {unit_word} differ from the null (ties are dropped) for {test}"
        else:
            why = f"only {n} {unit_word} for {test}"
        return finish("inconclusive", f"{why}: the smallest p-value this design can give is {pmin:.3g}, "
                      f"not below alpha = {alpha:g}")
    if test in SPREAD_TESTS and np.ptp(d) == 0 and not constant_note:
        what = "both arms are constant" if np.ptp(x) == 0 and np.ptp(y) == 0 else "the arms move in lockstep"
        return finish("inconclusive", f"all {n} paired differences equal {d[0]:+.4g} ({what}): "
                      "no variation: no difference between the arms in any unit, so no test can tell")
    if floor is not None and not (floor_p is not None and floor_p < alpha):
        side = "above" if floor_side == "above" else "below"
        return finish("inconclusive", f"nothing learned: the method arm ({x.mean():.4g}) is not significantly "
                      f"{side} the floor {floor:g} (p = {floor_p:.3g})")
    tie_note = ""
    if test in ("wilcoxon", "sign") and direction != "equivalent":
        # ties with the null are dropped there and nowhere beside it, so a rank or sign test can reject
        # at the null itself yet not at any shift next to it; the bound then stays on the null's far
        # side. Count as significant only what the bound confirms, so the verdict and interval agree.
        nul = base - margin if direction == "greater" else base + margin
        agree_claim = lo >= nul if direction == "greater" else hi <= nul
        agree_opp = hi <= nul if direction == "greater" else lo >= nul
        if p_claim < alpha and not agree_claim or p_opp < alpha and not agree_opp:
            tie_note = (f" (p = {min(p_claim, p_opp):.3g} at the null itself, but ties with the null are dropped "
                        "there only: the test does not reject at any shift beside it, so not counted)")
            p_claim = p_claim if agree_claim else max(p_claim, alpha)
            p_opp = p_opp if agree_opp else max(p_opp, alpha)
    if p_claim < alpha:
        verdict, note = "reproduced", f"significant in the claimed direction (p = {p_claim:.3g} < {alpha:g}){constant_note}"
        if paper_effect is not None and (direction == "greater" and hi < paper_effect
                                         or direction == "less" and lo > paper_effect):
            bound = hi if direction == "greater" else lo
            verdict = "reproduced, smaller"
            note = (f"reproduced (smaller than the paper's: bound {bound:+.4g} vs effect {paper_effect:+.4g}); "
                    + note)
        if baseline_floor is not None and not (bfloor_p is not None and bfloor_p < alpha):
            side = "above" if baseline_floor_side == "above" else "below"
            at_floor = (f"the comparator ({y.mean():.4g}) is not significantly {side} its floor {baseline_floor:g} "
                        f"(p = {bfloor_p:.3g})")
            if baseline_floor_expected:
                return finish(verdict, f"{note}; {at_floor}, which is itself what the paper claims")
            return finish("inconclusive", f"comparator at floor: {at_floor}, so a win over it says nothing "
                          f"(alone: {verdict}, p = {p_claim:.3g})")
        return finish(verdict, note)
    if p_opp < alpha:
        return finish("contradicted", f"significant in the opposite direction (p = {p_opp:.3g} < {alpha:g}){constant_note}")
    bound = f"[{lo:.4g}, {hi:.4g}]"
    power = "" if math.isnan(mde) else f"; the smallest effect this check detects with 80 % power is {mde:+.4g}"
    if paper_effect is None:
        return finish("inconclusive", f"not significant (p = {p_claim:.3g}){tie_note} and no paper effect to compare the "
                      f"interval {bound} with{power}")
    if direction == "greater" and hi < paper_effect or direction == "less" and lo > paper_effect \
            or direction == "equivalent" and not lo <= paper_effect <= hi:
        return finish("not reproduced", f"not significant (p = {p_claim:.3g}){tie_note}, and the interval {bound} "
                      f"rules out the paper's effect {paper_effect:+.4g}: this check would have seen it")
    return finish("inconclusive", f"too little power: not significant (p = {p_claim:.3g}){tie_note}, yet the "
                  f"interval {bound} still holds the paper's effect {paper_effect:+.4g}{power}{need()}")
