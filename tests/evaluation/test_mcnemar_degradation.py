"""McNemar degradation test: exact p-values (Sec. 3), aggregations (Sec. 4), pruning (Sec. 5)."""
import numpy as np
import pytest
from scipy import stats
from statsmodels.stats.contingency_tables import mcnemar as sm_mcnemar
from statsmodels.stats.proportion import proportions_ztest

from iclr26.evaluation.mcnemar_degradation import (
    aggregate_counts, aggregate_degradation, contingency, flip_mask, mcnemar_degradation, unpaired_degradation,
)
from iclr26.evaluation.mcnemar_degradation.experiment import simulate_tables


def pairs(b, c, both_right=10, both_wrong=5):
    base = np.array([1] * b + [0] * c + [1] * both_right + [0] * both_wrong)
    new = np.array([0] * b + [1] * c + [1] * both_right + [0] * both_wrong)
    return base, new


def test_contingency_cells():
    base, new = pairs(4, 3)
    assert contingency(base, new) == (5, 4, 3, 10)


def test_exact_one_sided_pvalue_by_hand():
    # b = 8, c = 2: P(Bin(10, 1/2) >= 8) = (45 + 10 + 1) / 1024
    r = mcnemar_degradation(*pairs(8, 2))
    assert r.pvalue == pytest.approx(56 / 1024)
    assert (r.b, r.c, r.q_hat) == (8, 2, 0.8)
    assert r.delta == pytest.approx(6 / 25)


def test_two_sided_matches_statsmodels():
    r = mcnemar_degradation(*pairs(9, 3), alternative="two-sided")
    assert r.pvalue == pytest.approx(sm_mcnemar([[5, 3], [9, 10]], exact=True).pvalue)


def test_identical_models_are_never_flagged():
    base = np.random.default_rng(0).integers(0, 2, 500)
    r = mcnemar_degradation(base, base)
    assert r.pvalue == 1.0 and r.flip_rate == 0


def test_improvement_is_not_degradation():
    assert mcnemar_degradation(*pairs(2, 30)).pvalue > 0.99
    assert mcnemar_degradation(*pairs(2, 30), alternative="less").pvalue < 1e-5


def test_pooled_and_fisher_by_hand():
    tasks = {"a": pairs(8, 2), "b": pairs(5, 5)}
    agg = aggregate_degradation(tasks, n_mc=2000)
    assert agg.pvalues["pooled"] == pytest.approx(stats.binomtest(13, 20, 0.5, alternative="greater").pvalue)
    p = [56 / 1024, stats.binomtest(5, 10, 0.5, alternative="greater").pvalue]
    chi2 = -2 * np.sum(np.log(p))
    assert agg.pvalues["fisher"] == pytest.approx(stats.chi2.sf(chi2, 4))


def test_maxdrop_single_task_equals_exact_test():
    # with one task, max z is a monotone function of b: the MC p-value estimates the exact one
    p = aggregate_counts([30], [15], methods=("maxdrop",), n_mc=40_000, rng=np.random.default_rng(1))["maxdrop"]
    assert p == pytest.approx(stats.binomtest(30, 45, 0.5, alternative="greater").pvalue, abs=0.005)


def test_unpaired_matches_statsmodels():
    base, new = pairs(20, 5, both_right=50, both_wrong=30)
    r = unpaired_degradation(base, new)
    z, p = proportions_ztest([base.sum(), new.sum()], [base.size, new.size], alternative="larger")
    assert r.statistic == pytest.approx(z) and r.pvalue == pytest.approx(p)


def test_flip_mask_keeps_only_flipping_samples():
    runs = np.array([[1, 0, 1, 0], [1, 0, 0, 1], [1, 0, 1, 0]])
    assert flip_mask(runs).tolist() == [False, False, True, True]


def test_simulation_hits_requested_rates():
    t = simulate_tables(np.random.default_rng(0), (100_000,), acc=0.6, p_flip=0.09, delta=0.008, reps=5)
    n = t.sum(axis=-1)
    assert np.allclose((t[..., 1] + t[..., 2]) / n, 0.09, atol=0.004)
    assert np.allclose((t[..., 1] - t[..., 2]) / n, 0.008, atol=0.003)


@pytest.mark.parametrize("call,match", [
    (lambda: mcnemar_degradation([0, 1, 2], [0, 1, 1]), "only 0/1"),
    (lambda: mcnemar_degradation([0, 1], [0, 1, 1]), "same samples"),
    (lambda: mcnemar_degradation([0, 1], [0, 1], alternative="up"), "alternative must be"),
    (lambda: mcnemar_degradation([[0, 1]], [[0, 1]]), "1-D"),
    (lambda: aggregate_degradation({}), "at least one task"),
    (lambda: aggregate_degradation([pairs(1, 1)], methods=("median",)), "subset of"),
    (lambda: flip_mask(np.array([[0, 1, 1]])), "R >= 2"),
    (lambda: simulate_tables(np.random.default_rng(0), (10,), 0.5, 0.01, 0.05, 1), "impossible"),
])
def test_bad_input_is_rejected(call, match):
    with pytest.raises(ValueError, match=match):
        call()
