"""Equation and verdict tests for the harness's paired tests, against scipy/statsmodels references."""
import numpy as np
import pytest
from scipy import stats
from statsmodels.stats.contingency_tables import mcnemar as sm_mcnemar
from statsmodels.stats.weightstats import ttost_paired

from iclr26.harness.stats import evaluate_claim

RNG = np.random.default_rng(0)
X = RNG.normal(0.3, 1.0, 30)
Y = RNG.normal(0.0, 1.0, 30)


def test_paired_t_matches_scipy():
    st = evaluate_claim("paired_t", "greater", X, Y)
    ref = stats.ttest_rel(X, Y, alternative="greater").pvalue
    assert st.pvalue == pytest.approx(ref, rel=1e-10)
    lo, hi = stats.ttest_rel(X, Y).confidence_interval(0.95)
    assert (st.ci_low, st.ci_high) == pytest.approx((lo, hi), rel=1e-10)


def test_wilcoxon_matches_scipy():
    st = evaluate_claim("wilcoxon", "less", X, Y)
    assert st.pvalue == pytest.approx(stats.wilcoxon(X - Y, alternative="less").pvalue, rel=1e-10)


def test_margin_shifts_the_null():
    st = evaluate_claim("paired_t", "greater", X, Y, margin=0.5)
    assert st.pvalue == pytest.approx(stats.ttest_1samp(X - Y + 0.5, 0, alternative="greater").pvalue)


def test_sign_test_is_exact_binomial():
    d = np.array([1, 2, 3, -1, 4, 5, 0, 6])
    st = evaluate_claim("sign", "greater", d, np.zeros_like(d))
    # 6 positives out of 7 non-zero differences: P(Bin(7, 1/2) >= 6) = 8/128
    assert st.pvalue == pytest.approx(8 / 128)


def test_tost_matches_statsmodels():
    st = evaluate_claim("tost", "equivalent", X, Y, margin=0.8)
    p_ref = ttost_paired(X, Y, -0.8, 0.8)[0]
    assert st.pvalue == pytest.approx(p_ref, rel=1e-8)


def test_mcnemar_one_sided_exact():
    # b = 8 (method right only), c = 2: P(Bin(10, 1/2) >= 8) = 56/1024
    x = np.array([1] * 8 + [0] * 2 + [1] * 5)
    y = np.array([0] * 8 + [1] * 2 + [1] * 5)
    st = evaluate_claim("mcnemar", "greater", x, y)
    assert st.pvalue == pytest.approx(56 / 1024)
    two_sided = sm_mcnemar([[5, 8], [2, 0]], exact=True).pvalue
    assert two_sided == pytest.approx(2 * 56 / 1024)


def test_binomial_against_constant():
    x = np.array([1] * 3 + [0] * 97)
    st = evaluate_claim("binomial", "less", x, baseline_value=0.05, margin=0.01)
    assert st.pvalue == pytest.approx(stats.binomtest(3, 100, 0.06, alternative="less").pvalue)


def test_bootstrap_interval_brackets_mean():
    st = evaluate_claim("bootstrap", "greater", X, Y)
    assert st.ci_low < st.effect < st.ci_high
    assert 0 < st.pvalue < 1


@pytest.mark.parametrize("direction,shift,verdict", [
    ("greater", 1.0, "reproduced"), ("greater", -1.0, "contradicted"), ("greater", 0.0, "not reproduced"),
    ("less", -1.0, "reproduced"), ("less", 1.0, "contradicted"),
])
def test_verdicts(direction, shift, verdict):
    base = np.random.default_rng(1).normal(0, 1, 40)
    noise = np.resize([0.1, -0.1, 0.05, -0.05], 40)  # zero-mean, so shift 0 is exactly no effect
    assert evaluate_claim("paired_t", direction, base + shift + noise, base).verdict == verdict


def test_equivalence_verdicts():
    base = RNG.normal(0, 1, 60)
    same = base + RNG.normal(0, 0.05, 60)
    assert evaluate_claim("tost", "equivalent", same, base, margin=0.1).verdict == "reproduced"
    assert evaluate_claim("tost", "equivalent", same + 1.0, base, margin=0.1).verdict == "contradicted"


def test_too_few_pairs_is_not_evidence():
    st = evaluate_claim("paired_t", "greater", [1.0], [0.0])
    assert st.verdict == "not reproduced" and "too few" in st.note


@pytest.mark.parametrize("kwargs,match", [
    (dict(test="nope", direction="greater"), "unknown test"),
    (dict(test="paired_t", direction="up"), "unknown direction"),
    (dict(test="tost", direction="greater"), "needs direction 'equivalent'"),
    (dict(test="paired_t", direction="equivalent"), "positive margin"),
    (dict(test="mcnemar", direction="greater", margin=0.1), "margin 0"),
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


def test_constant_arms_are_not_evidence_of_equivalence():
    zeros = np.zeros(40)
    st = evaluate_claim("tost", "equivalent", zeros, zeros, margin=0.1)
    assert st.verdict == "not reproduced" and "constant" in st.note
    varied = np.resize([0.0, 1.0], 40)  # identical but varying arms: real equivalence
    assert evaluate_claim("tost", "equivalent", varied, varied.copy(), margin=0.1).verdict == "reproduced"
