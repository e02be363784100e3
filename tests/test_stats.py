"""Equation and verdict tests for the harness's paired tests, against scipy/statsmodels references,
and the evidence rules: power-aware verdicts, floors, degenerate data, clustered items."""
import itertools
import math

import numpy as np
import pytest
from scipy import stats
from statsmodels.stats.contingency_tables import mcnemar as sm_mcnemar
from statsmodels.stats.proportion import proportion_confint
from statsmodels.stats.weightstats import ttost_paired

from iclr26.harness.stats import detectable_effect, evaluate_claim, min_pvalue

RNG = np.random.default_rng(0)
X = RNG.normal(0.3, 1.0, 30)
Y = RNG.normal(0.0, 1.0, 30)


def test_paired_t_matches_scipy():
    st = evaluate_claim("paired_t", "greater", X, Y)
    ref = stats.ttest_rel(X, Y, alternative="greater")
    assert st.pvalue == pytest.approx(ref.pvalue, rel=1e-10)
    # the interval is the pair of one-sided 95 % bounds (the two-sided 90 % interval)
    assert st.ci_low == pytest.approx(ref.confidence_interval(0.95).low, rel=1e-10)
    up = stats.ttest_rel(X, Y, alternative="less").confidence_interval(0.95).high
    assert st.ci_high == pytest.approx(up, rel=1e-10)


def test_wilcoxon_matches_scipy_and_its_bounds_invert_the_test():
    st = evaluate_claim("wilcoxon", "less", X, Y)
    d = X - Y
    assert st.pvalue == pytest.approx(stats.wilcoxon(d, alternative="less").pvalue, rel=1e-10)
    walsh = [(a + b) / 2 for a, b in itertools.combinations_with_replacement(d, 2)]
    assert st.effect == pytest.approx(np.median(walsh))  # Hodges-Lehmann estimate
    assert st.estimator == "pseudo-median"
    eps = 1e-6
    # just inside the lower bound the shifted test rejects, just outside it does not
    assert stats.wilcoxon(d - (st.ci_low - eps), alternative="greater").pvalue < 0.05
    assert stats.wilcoxon(d - (st.ci_low + eps), alternative="greater").pvalue >= 0.05
    assert stats.wilcoxon(d - (st.ci_high + eps), alternative="less").pvalue < 0.05
    assert stats.wilcoxon(d - (st.ci_high - eps), alternative="less").pvalue >= 0.05
    # the exact bound of the signed-rank test is a Walsh average
    assert min(abs(np.asarray(walsh) - st.ci_low)) < 1e-6


def test_margin_shifts_the_null():
    st = evaluate_claim("paired_t", "greater", X, Y, margin=0.5)
    assert st.pvalue == pytest.approx(stats.ttest_1samp(X - Y + 0.5, 0, alternative="greater").pvalue)


def test_sign_test_is_exact_binomial():
    d = np.array([1, 2, 3, -1, 4, 5, 0, 6])
    st = evaluate_claim("sign", "greater", d, np.zeros_like(d))
    # 6 positives out of 7 non-zero differences: P(Bin(7, 1/2) >= 6) = 8/128
    assert st.pvalue == pytest.approx(8 / 128)
    assert st.effect == pytest.approx(2.5) and st.estimator == "median"


def test_tost_matches_statsmodels():
    st = evaluate_claim("tost", "equivalent", X, Y, margin=0.8)
    p_ref = ttost_paired(X, Y, -0.8, 0.8)[0]
    assert st.pvalue == pytest.approx(p_ref, rel=1e-8)


def test_mcnemar_one_sided_exact_with_clopper_pearson_bounds():
    # b = 8 (method right only), c = 2: P(Bin(10, 1/2) >= 8) = 56/1024
    x = np.array([1] * 8 + [0] * 2 + [1] * 5)
    y = np.array([0] * 8 + [1] * 2 + [1] * 5)
    st = evaluate_claim("mcnemar", "greater", x, y)
    assert st.pvalue == pytest.approx(56 / 1024)
    two_sided = sm_mcnemar([[5, 8], [2, 0]], exact=True).pvalue
    assert two_sided == pytest.approx(2 * 56 / 1024)
    lo, hi = proportion_confint(8, 10, alpha=0.10, method="beta")  # one-sided 95 % bounds of b / (b + c)
    assert st.ci_low == pytest.approx(10 / 15 * (2 * lo - 1))
    assert st.ci_high == pytest.approx(10 / 15 * (2 * hi - 1))
    assert st.effect == pytest.approx(6 / 15)


def test_binomial_against_constant():
    x = np.array([1] * 3 + [0] * 97)
    st = evaluate_claim("binomial", "less", x, baseline_value=0.05, margin=0.01)
    assert st.pvalue == pytest.approx(stats.binomtest(3, 100, 0.06, alternative="less").pvalue)
    lo, hi = proportion_confint(3, 100, alpha=0.10, method="beta")
    assert (st.ci_low, st.ci_high) == pytest.approx((lo - 0.05, hi - 0.05))


def test_bootstrap_bounds_bracket_mean_and_agree_with_p():
    st = evaluate_claim("bootstrap", "greater", X, Y)
    assert st.ci_low < st.effect < st.ci_high
    assert 0 < st.pvalue < 1
    assert (st.pvalue < 0.05) == (st.ci_low > 0)


@pytest.mark.parametrize("test", ["paired_t", "wilcoxon", "sign", "bootstrap"])
@pytest.mark.parametrize("shift", [0.0, 0.15, 0.3, 0.6])
def test_verdict_and_interval_never_disagree(test, shift):
    """Significant exactly when the claimed-side bound clears the null (the deql complaint)."""
    st = evaluate_claim(test, "greater", X + shift - 0.3, Y, margin=0.05)
    assert (st.pvalue < 0.05) == (st.ci_low > -0.05)


def test_integer_data_with_ties_at_the_null_verdict_and_interval_agree():
    """Integer-valued differences (e.g. Hausdorff distances): ties with the null are dropped at the null
    only, so a rank test can reject there and nowhere beside it; the verdict follows the bound."""
    rng = np.random.default_rng(3)
    for _ in range(120):
        d = rng.integers(-4, 3, size=20).astype(float)
        for test in ("wilcoxon", "sign"):
            st = evaluate_claim(test, "less", d, np.zeros_like(d), paper_effect=-1.0)
            assert (st.verdict == "reproduced") == (st.ci_high <= 0), (test, sorted(d), st)
            assert (st.verdict == "contradicted") == (st.ci_low >= 0), (test, sorted(d), st)
    # a step of the inverted test at exactly 0 is reported as 0, not a rounding error beside it
    d = np.array([-4, -4, -4, -3, -3, -3, -3, -3, -1, 0, 0, 0, 1, 1, 1, 1, 1, 2, 2, 2], float)
    st = evaluate_claim("wilcoxon", "less", d, np.zeros_like(d), paper_effect=-1.0)
    assert st.verdict != "reproduced" and "ties with the null" in st.note and st.ci_high > 0
    d = np.array([-4, -3, -3, -2, -2, -2, -2, -1, -1, -1, -1, 0, 0, 0, 1, 1, 2, -1, -2, -3], float)
    st = evaluate_claim("wilcoxon", "less", d, np.zeros_like(d), paper_effect=-1.0)
    assert st.verdict == "reproduced" and st.ci_high <= 0 and abs(st.ci_high - round(st.ci_high * 2) / 2) == 0


@pytest.mark.parametrize("direction,shift,verdict", [
    ("greater", 1.0, "reproduced"), ("greater", -1.0, "contradicted"),
    ("less", -1.0, "reproduced"), ("less", 1.0, "contradicted"),
])
def test_verdicts(direction, shift, verdict):
    base = np.random.default_rng(1).normal(0, 1, 40)
    noise = np.resize([0.1, -0.1, 0.05, -0.05], 40)
    st = evaluate_claim("paired_t", direction, base + shift + noise, base, paper_effect=0.5 if direction == "greater" else -0.5)
    assert st.verdict == verdict and st.note


def test_power_decides_between_not_reproduced_and_inconclusive():
    base = np.random.default_rng(1).normal(0, 1, 200)
    noise = np.resize([0.1, -0.1, 0.05, -0.05], 200)  # zero mean: the true effect is exactly 0
    # precise check: the interval excludes the paper's +0.3, so the check would have seen it
    st = evaluate_claim("paired_t", "greater", base + noise, base, paper_effect=0.3)
    assert st.verdict == "not reproduced" and "rules out" in st.note and st.ci_high < 0.3
    # noisy check with 5 units: the paper's effect is still inside the interval
    rng = np.random.default_rng(2)
    st = evaluate_claim("paired_t", "greater", rng.normal(0, 1, 5), rng.normal(0, 1, 5), paper_effect=0.3)
    assert st.verdict == "inconclusive" and "too little power" in st.note and st.mde > 0.3
    # without a paper effect a non-significant result can only be inconclusive
    assert evaluate_claim("paired_t", "greater", base + noise, base).verdict == "inconclusive"


def test_detectable_effect_has_80_percent_power():
    rng = np.random.default_rng(3)
    d = rng.normal(0, 1, 20)
    mde = detectable_effect("paired_t", d, 0.05, "greater", 0.0)
    sd = d.std(ddof=1)
    hits = [stats.ttest_1samp(rng.normal(mde, sd, 20), 0, alternative="greater").pvalue < 0.05 for _ in range(2000)]
    assert np.mean(hits) == pytest.approx(0.8, abs=0.03)


# --- degenerate data: nothing any test could tell -------------------------------------------------


def test_two_constant_differences_cannot_decide_for_any_spread_test():
    # n = 2, d = +0.02 twice: the t-test used to say p = 0; the exact sign test can give 1/4 at best
    for test in ("paired_t", "wilcoxon", "sign", "bootstrap"):
        st = evaluate_claim(test, "greater", [0.52, 0.62], [0.50, 0.60], paper_effect=0.02)
        assert st.verdict == "inconclusive" and "smallest p-value" in st.note, test


@pytest.mark.parametrize("test", ["paired_t", "wilcoxon", "sign", "bootstrap"])
def test_constant_nonzero_differences_are_evidence_decided_by_the_exact_sign_test(test):
    """Every unit detects perfectly: 10 equal non-zero differences are p = 2^-10, not degenerate data."""
    st = evaluate_claim(test, "greater", np.full(10, 0.52), np.full(10, 0.50), paper_effect=0.02)
    assert st.verdict == "reproduced" and st.test == "sign" and "exact sign test" in st.note
    assert st.pvalue == pytest.approx(0.5 ** 10) and st.pvalue_opposite == pytest.approx(1.0)
    assert st.ci_low == pytest.approx(0.02) and st.effect == pytest.approx(0.02)
    # the same differences against the claim: contradicted, not degenerate
    st = evaluate_claim(test, "less", np.full(10, 0.52), np.full(10, 0.50), paper_effect=-0.02)
    assert st.verdict == "contradicted" and st.pvalue_opposite == pytest.approx(0.5 ** 10)
    # five units give 1/32 < 0.05; four give 1/16, which no design can beat
    assert evaluate_claim(test, "greater", np.ones(5), np.zeros(5), paper_effect=1.0).verdict == "reproduced"
    assert evaluate_claim(test, "greater", np.ones(4), np.zeros(4), paper_effect=1.0).verdict == "inconclusive"


def test_all_zero_differences_stay_degenerate():
    st = evaluate_claim("paired_t", "greater", np.full(10, 0.5), np.full(10, 0.5), margin=0.05, paper_effect=0.0)
    assert st.verdict == "inconclusive" and "all 10 paired differences equal" in st.note


def test_lossless_change_that_changed_nothing_is_not_evidence():
    """mcnemar_degradation's old lossless check: 0 of 200 outputs changed, TOST gave p = 0."""
    correct = np.resize([1.0, 0.0, 1.0], 200)
    st = evaluate_claim("tost", "equivalent", correct, correct.copy(), margin=0.02, paper_effect=0.0)
    assert st.verdict == "inconclusive" and "no variation" in st.note
    st = evaluate_claim("mcnemar", "less", correct, correct.copy(), paper_effect=-0.01)
    assert st.verdict == "inconclusive" and "0 discordant" in st.note


def test_one_sample_constant_method_is_not_equivalence():
    st = evaluate_claim("tost", "equivalent", np.full(8, 0.5), baseline_value=0.5, margin=0.05, paper_effect=0.0)
    assert st.verdict == "inconclusive"


def test_constant_arms_are_not_evidence_of_equivalence():
    zeros = np.zeros(40)
    st = evaluate_claim("tost", "equivalent", zeros, zeros, margin=0.1)
    assert st.verdict == "inconclusive" and "constant" in st.note
    varied = np.resize([0.0, 1.0], 40)
    noise = np.resize([0.01, -0.01, 0.0, 0.02, -0.02], 40)
    assert evaluate_claim("tost", "equivalent", varied + noise, varied, margin=0.1).verdict == "reproduced"


@pytest.mark.parametrize("test,n", [("wilcoxon", 4), ("sign", 4), ("bootstrap", 4), ("paired_t", 1)])
def test_designs_that_can_never_reach_alpha(test, n):
    rng = np.random.default_rng(5)
    x = rng.normal(5, 1, n)  # a huge effect, yet the design cannot show it
    st = evaluate_claim(test, "greater", x, np.zeros(n), paper_effect=1.0)
    assert st.verdict == "inconclusive" and "smallest p-value" in st.note


def test_design_limits_are_exact():
    assert min_pvalue("wilcoxon", 4) == 1 / 16 and min_pvalue("wilcoxon", 5) == 1 / 32
    x, y = np.array([1, 1, 1, 1, 0, 0]), np.array([0, 0, 0, 0, 0, 0])
    assert min_pvalue("mcnemar", 6, x, y) == 1 / 16
    assert min_pvalue("binomial", 3, np.ones(3), p0=0.5, direction="greater") == 1 / 8


def test_mcnemar_with_too_few_discordant_pairs():
    x = np.array([1, 1, 1, 1] + [1] * 50)
    y = np.array([0, 0, 0, 0] + [1] * 50)
    st = evaluate_claim("mcnemar", "greater", x, y, paper_effect=0.05)
    assert st.verdict == "inconclusive" and "4 discordant" in st.note
    st = evaluate_claim("mcnemar", "greater", np.r_[x, 1], np.r_[y, 0], paper_effect=0.05)
    assert st.verdict == "reproduced"


# --- floors ----------------------------------------------------------------------------------------


def test_chance_level_is_not_a_win():
    """selective_rope's parity: both arms near chance 0.5 with seed noise; a 'win' learned nothing."""
    method = np.array([0.50, 0.62, 0.47, 0.61, 0.58])
    base = np.array([0.48, 0.59, 0.45, 0.58, 0.56])
    assert evaluate_claim("paired_t", "greater", method, base).verdict == "reproduced"
    st = evaluate_claim("paired_t", "greater", method, base, floor=0.5, floor_side="above", paper_effect=0.3)
    assert st.verdict == "inconclusive" and "nothing learned" in st.note and st.floor_pvalue >= 0.05
    learned = method + 0.4
    st = evaluate_claim("paired_t", "greater", learned, base, floor=0.5, paper_effect=0.3)
    assert st.verdict == "reproduced" and st.floor_pvalue < 0.05


def test_floor_below_for_error_metrics_and_binary_items():
    err = np.array([0.10, 0.12, 0.09, 0.11, 0.10])
    st = evaluate_claim("paired_t", "less", err, err + np.array([0.05, 0.06, 0.04, 0.05, 0.07]), floor=0.5,
                        paper_effect=-0.05)
    assert st.verdict == "reproduced"
    st = evaluate_claim("paired_t", "less", err + 0.4, err + 0.45 + np.array([0, .01, -.01, .02, 0]), floor=0.5,
                        paper_effect=-0.05)
    assert st.verdict == "inconclusive" and "below the floor" in st.note
    x = np.resize([1, 0], 100)  # 50 % correct on a two-way task: chance
    y = np.zeros(100)
    st = evaluate_claim("mcnemar", "greater", x, y, floor=0.5, paper_effect=0.1)
    assert st.verdict == "inconclusive"


# --- clustered items --------------------------------------------------------------------------------


def _simulated(rng, seeds=5, items=100, seed_sd=0.5):
    """Paired items from `seeds` trained models: each model shifts all its items' difference alike."""
    shift = rng.normal(0, seed_sd, seeds)
    d = (shift[:, None] + rng.normal(0, 1, (seeds, items))).ravel()
    return d, np.repeat(np.arange(seeds), items)


def test_pooling_clustered_items_inflates_type1_error_and_clustering_holds_alpha():
    rng = np.random.default_rng(7)
    pooled = clustered = 0
    reps = 400
    for _ in range(reps):
        d, cl = _simulated(rng)
        z = np.zeros_like(d)
        pooled += evaluate_claim("paired_t", "greater", d, z).pvalue < 0.05
        clustered += evaluate_claim("paired_t", "greater", d, z, clusters=cl).pvalue < 0.05
    assert pooled / reps > 0.25  # far above alpha: between-model variance ignored
    assert clustered / reps < 0.05 + 3 * math.sqrt(0.05 * 0.95 / reps)


def test_clustered_binary_items_test_per_seed_rates():
    rng = np.random.default_rng(8)
    x = (rng.random(600) < np.repeat([0.7, 0.5, 0.9], 200)).astype(float)
    y = (rng.random(600) < np.repeat([0.6, 0.55, 0.8], 200)).astype(float)
    cl = np.repeat([0, 1, 2], 200)
    st = evaluate_claim("mcnemar", "greater", x, y, clusters=cl, paper_effect=0.05)
    rates_x = [x[cl == k].mean() for k in range(3)]
    rates_y = [y[cl == k].mean() for k in range(3)]
    ref = stats.ttest_rel(rates_x, rates_y, alternative="greater").pvalue
    assert st.test == "paired_t" and st.n == 3 and st.n_items == 600 and st.clustered
    assert st.pvalue == pytest.approx(ref)


def test_clustered_wilcoxon_with_three_seeds_cannot_decide():
    d, cl = _simulated(np.random.default_rng(9), seeds=3)
    st = evaluate_claim("wilcoxon", "greater", d + 3, np.zeros_like(d), clusters=cl, paper_effect=1.0)
    assert st.verdict == "inconclusive" and "3 clusters" in st.note


# --- configuration errors ----------------------------------------------------------------------------


@pytest.mark.parametrize("kwargs,match", [
    (dict(test="nope", direction="greater"), "unknown test"),
    (dict(test="paired_t", direction="up"), "unknown direction"),
    (dict(test="tost", direction="greater"), "needs direction 'equivalent'"),
    (dict(test="paired_t", direction="equivalent"), "positive margin"),
    (dict(test="mcnemar", direction="greater", margin=0.1), "margin 0"),
    (dict(test="paired_t", direction="greater", floor=0.5, floor_side="up"), "floor_side"),
    (dict(test="paired_t", direction="greater", clusters=[0]), "clusters must label every item"),
])
def test_rejects_bad_configuration(kwargs, match):
    with pytest.raises(ValueError, match=match):
        evaluate_claim(method=[1.0, 0.0], baseline=[0.0, 1.0], **kwargs)


def test_rejects_bad_values():
    with pytest.raises(ValueError, match="paired"):
        evaluate_claim("paired_t", "greater", [1.0, 2.0], [1.0])
    with pytest.raises(ValueError, match="NaN"):
        evaluate_claim("paired_t", "greater", [1.0, np.nan], [1.0, 2.0])
    with pytest.raises(ValueError, match="0/1"):
        evaluate_claim("mcnemar", "greater", [0.5, 1.0], [1.0, 0.0])
    with pytest.raises(ValueError, match="exactly one"):
        evaluate_claim("paired_t", "greater", [1.0, 2.0])


# --- exact small samples ---------------------------------------------------------------------------


def _enumerated_signed_rank_p(d, alternative):
    """The sign-flip permutation p-value of the mid-rank statistic by brute enumeration (zeros dropped)."""
    z = np.asarray([v for v in d if v != 0], dtype=float)
    r = stats.rankdata(np.abs(z))
    t_obs = r[z > 0].sum()
    t = np.array([sum(ri for ri, s in zip(r, signs) if s) for signs in itertools.product((0, 1), repeat=z.size)])
    return float(np.mean(t >= t_obs - 1e-9) if alternative == "greater" else np.mean(t <= t_obs + 1e-9))


def test_tied_ternary_wilcoxon_uses_the_exact_permutation_distribution():
    """12 items scored -1/0/+1 (6 up, 1 down, 5 tied): the normal approximation gave p = 0.029 and a
    reproduction; the exact permutation law gives 0.0625."""
    d = np.array([1, 1, 1, 1, 1, 1, -1, 0, 0, 0, 0, 0], dtype=float)
    approx = stats.wilcoxon(d, alternative="greater", zero_method="wilcox", method="approx").pvalue
    assert approx == pytest.approx(0.0294, abs=1e-4)
    exact = _enumerated_signed_rank_p(d, "greater")
    assert exact == pytest.approx(0.0625)
    st = evaluate_claim("wilcoxon", "greater", d, np.zeros_like(d), paper_effect=0.5)
    assert st.pvalue == pytest.approx(exact, rel=1e-12) and st.verdict == "inconclusive"
    # scipy's own permutation method agrees
    perm = stats.wilcoxon(d, alternative="greater", method=stats.PermutationMethod(n_resamples=10_000)).pvalue
    assert st.pvalue == pytest.approx(perm, rel=1e-12)


@pytest.mark.parametrize("seed", range(4))
def test_tied_wilcoxon_p_and_bounds_come_from_the_same_exact_distribution(seed):
    rng = np.random.default_rng(seed)
    d = rng.integers(-2, 4, 11).astype(float) / 4  # heavy ties and zeros
    for alternative in ("greater", "less"):
        st = evaluate_claim("wilcoxon", alternative, d, np.zeros_like(d))
        assert st.pvalue == pytest.approx(_enumerated_signed_rank_p(d, alternative), rel=1e-12)
    st = evaluate_claim("wilcoxon", "greater", d, np.zeros_like(d))
    # the lower bound inverts the exact test: rejects just below it, not just above it
    if math.isfinite(st.ci_low):
        assert _enumerated_signed_rank_p(d - (st.ci_low - 1e-6), "greater") < 0.05
        assert _enumerated_signed_rank_p(d - (st.ci_low + 1e-6), "greater") >= 0.05


# --- the paper's size, comparator floors, what it would take ---------------------------------------


def test_significant_but_smaller_than_the_paper_is_reproduced_smaller():
    rng = np.random.default_rng(3)
    d = rng.normal(-0.006, 0.004, 40)  # significant, far smaller than the paper's -0.105
    st = evaluate_claim("paired_t", "less", d, np.zeros(40), paper_effect=-0.105)
    assert st.verdict == "reproduced, smaller"
    assert "smaller than the paper's" in st.note and f"{st.ci_low:+.4g}" in st.note
    # at the paper's size it is a plain reproduction, and the interval holding the effect keeps it so
    st = evaluate_claim("paired_t", "less", d * 17.5, np.zeros(40), paper_effect=-0.105)
    assert st.verdict == "reproduced"
    st = evaluate_claim("paired_t", "greater", -d, np.zeros(40), paper_effect=0.105)
    assert st.verdict == "reproduced, smaller" and st.ci_high < 0.105


def test_comparator_at_its_floor_makes_a_win_inconclusive():
    rng = np.random.default_rng(4)
    method = rng.normal(0.76, 0.05, 10)
    walk = np.abs(rng.normal(0.005, 0.003, 10))  # a random walk's success rate
    st = evaluate_claim("paired_t", "greater", method, walk, paper_effect=0.5, baseline_floor=0.05)
    assert st.verdict == "inconclusive" and st.note.startswith("comparator at floor")
    assert st.baseline_floor_pvalue > 0.05 and "alone: reproduced" in st.note
    # a competent comparator clears the floor and the win stands
    competent = rng.normal(0.5, 0.05, 10)
    st = evaluate_claim("paired_t", "greater", method, competent, paper_effect=0.2, baseline_floor=0.05)
    assert st.verdict == "reproduced" and st.baseline_floor_pvalue < 0.05
    # where the comparator's failure is the paper's claim, the verdict stands and says so
    st = evaluate_claim("paired_t", "greater", method, walk, paper_effect=0.5, baseline_floor=0.05,
                        baseline_floor_expected=True)
    assert st.verdict == "reproduced" and "itself what the paper claims" in st.note
    # an error metric: the comparator must be below its floor
    st = evaluate_claim("paired_t", "less", 1 - method, 1 - walk, paper_effect=-0.5, baseline_floor=0.95)
    assert st.verdict == "inconclusive" and "below its floor" in st.note
    # a contradiction is not softened: losing to a chance-level comparator is informative
    st = evaluate_claim("paired_t", "greater", walk, method, paper_effect=0.5, baseline_floor=0.05)
    assert st.verdict == "contradicted"
    with pytest.raises(ValueError, match="baseline_floor needs paired baseline"):
        evaluate_claim("paired_t", "greater", method, baseline_value=0.0, baseline_floor=0.05)


def test_inconclusive_says_how_many_units_would_detect_the_paper_effect():
    rng = np.random.default_rng(6)
    d = rng.normal(0.1, 1.0, 12)
    st = evaluate_claim("paired_t", "greater", d, np.zeros(12), paper_effect=0.5)
    assert st.verdict == "inconclusive"
    expected = math.ceil(12 * (st.mde / 0.5) ** 2)
    assert st.units_needed == expected and f"about {expected} units" in st.note
    # at that size, the detectable effect is about the paper's (normal approximation of the t quantiles)
    assert detectable_effect("paired_t", np.resize(d, expected) * 0 + rng.normal(0, d.std(ddof=1), expected),
                             0.05, "greater", 0.0) == pytest.approx(0.5, rel=0.35)
    # a margin counts from the null: non-inferiority at margin 0.2 with the paper's effect 0
    st = evaluate_claim("paired_t", "greater", d - 0.1, np.zeros(12), margin=0.2, paper_effect=0.0)
    assert st.units_needed == math.ceil(12 * ((st.mde + 0.2) / 0.2) ** 2)
    # decided verdicts carry none
    assert evaluate_claim("paired_t", "greater", d + 2, np.zeros(12), paper_effect=0.5).units_needed is None
