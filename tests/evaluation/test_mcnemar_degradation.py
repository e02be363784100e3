"""McNemar degradation test: exact p-values (Sec. 3), aggregations (Sec. 4), pruning (Sec. 5)."""
import dataclasses

import numpy as np
import pytest
from scipy import stats
from statsmodels.stats.contingency_tables import mcnemar as sm_mcnemar
from statsmodels.stats.proportion import proportion_confint, proportions_ztest

from iclr26.evaluation.mcnemar_degradation import (
    AggregateResult, aggregate_counts, aggregate_degradation, contingency, flip_mask, mcnemar_degradation,
    unpaired_degradation,
)
from iclr26.evaluation.mcnemar_degradation.experiment import (
    PRUNE_SIZE, SCALES, simulate_pruning, simulate_tables, table_scores,
)


def pairs(b, c, both_right=10, both_wrong=5):
    base = np.array([1] * b + [0] * c + [1] * both_right + [0] * both_wrong)
    new = np.array([0] * b + [1] * c + [1] * both_right + [0] * both_wrong)
    return base, new


def exact_maxdrop_pvalue(b, c, scale=np.sqrt):
    """Independent reference for max-drop: z_i = (2 b_i - m_i) / scale(m_i), b_i ~ Bin(m_i, 1/2)
    independently under H0, so P(max_i z_i >= z_obs) = 1 - prod_i P(z_i < z_obs), by enumeration."""
    b, c = np.asarray(b), np.asarray(c)
    m = b + c
    z_obs = max((2 * bi - mi) / scale(mi) for bi, mi in zip(b, m) if mi > 0)
    below = 1.0
    for mi in m[m > 0]:
        k = np.arange(mi + 1)
        below *= stats.binom.pmf(k, mi, 0.5)[(2 * k - mi) / scale(mi) < z_obs - 1e-9].sum()
    return 1.0 - below


# --------------------------------------------------------------------------- the exact test (Sec. 3)
def test_contingency_cells():
    base, new = pairs(4, 3)
    assert contingency(base, new) == (5, 4, 3, 10)
    assert contingency(base.astype(bool), new.astype(bool)) == (5, 4, 3, 10)


def test_exact_one_sided_pvalue_by_hand():
    # b = 8, c = 2: P(Bin(10, 1/2) >= 8) = (45 + 10 + 1) / 1024
    r = mcnemar_degradation(*pairs(8, 2))
    assert r.pvalue == pytest.approx(56 / 1024)
    assert (r.statistic, r.b, r.c, r.n, r.q_hat) == (8, 8, 2, 25, 0.8)
    assert r.delta == pytest.approx(6 / 25)
    assert r.flip_rate == pytest.approx(10 / 25)
    assert r.alternative == "greater"


def test_improvement_alternative_by_hand():
    # b = 2, c = 8: P(Bin(10, 1/2) <= 2) = 56 / 1024 for "less"; degradation p = P(>= 2) = 1013 / 1024
    r = mcnemar_degradation(*pairs(2, 8), alternative="less")
    assert r.pvalue == pytest.approx(56 / 1024)
    assert mcnemar_degradation(*pairs(2, 8)).pvalue == pytest.approx(1013 / 1024)
    assert r.delta == pytest.approx(-6 / 25)


def test_two_sided_matches_statsmodels():
    r = mcnemar_degradation(*pairs(9, 3), alternative="two-sided")
    assert r.pvalue == pytest.approx(sm_mcnemar([[5, 3], [9, 10]], exact=True).pvalue)


def test_confidence_interval_is_clopper_pearson_of_q():
    r = mcnemar_degradation(*pairs(14, 6))
    lo, hi = proportion_confint(14, 20, alpha=0.05, method="beta")
    assert r.ci == pytest.approx((lo, hi))
    r90 = mcnemar_degradation(*pairs(14, 6), confidence_level=0.9)
    lo90, hi90 = proportion_confint(14, 20, alpha=0.1, method="beta")
    assert r90.ci == pytest.approx((lo90, hi90))


def test_identical_models_are_never_flagged():
    base = np.random.default_rng(0).integers(0, 2, 500)
    r = mcnemar_degradation(base, base)
    assert r.pvalue == 1.0 and r.flip_rate == 0 and r.ci == (0.0, 1.0) and np.isnan(r.q_hat)
    assert (r.b, r.c, r.delta) == (0, 0, 0.0)


def test_improvement_is_not_degradation():
    assert mcnemar_degradation(*pairs(2, 30)).pvalue > 0.99
    assert mcnemar_degradation(*pairs(2, 30), alternative="less").pvalue < 1e-5


def test_result_is_scipy_style_and_frozen():
    r = mcnemar_degradation(*pairs(5, 1))
    assert hasattr(r, "statistic") and hasattr(r, "pvalue")
    with pytest.raises(dataclasses.FrozenInstanceError):
        r.pvalue = 0.0


def test_exact_test_size_is_at_most_alpha():
    # the one-sided exact test at m discordant pairs rejects iff b >= k*, the smallest k with
    # P(Bin(m, 1/2) >= k) < alpha: its size P(b >= k*) is at most alpha (and near it for large m)
    for m in (7, 30, 61, 200):
        k_star = next(k for k in range(m + 2) if stats.binom.sf(k - 1, m, 0.5) < 0.05)
        rejects = [b for b in range(m + 1) if mcnemar_degradation(*pairs(b, m - b)).pvalue < 0.05]
        assert rejects == list(range(k_star, m + 1))
        assert stats.binom.sf(k_star - 1, m, 0.5) <= 0.05


def test_unpaired_matches_statsmodels():
    base, new = pairs(20, 5, both_right=50, both_wrong=30)
    r = unpaired_degradation(base, new)
    z, p = proportions_ztest([base.sum(), new.sum()], [base.size, new.size], alternative="larger")
    assert r.statistic == pytest.approx(z) and r.pvalue == pytest.approx(p)
    assert r.delta == pytest.approx((base.mean() - new.mean()))


def test_unpaired_with_no_spread_gives_z_zero():
    ones = np.ones(10, dtype=int)
    r = unpaired_degradation(ones, ones)
    assert r.statistic == 0.0 and r.pvalue == pytest.approx(0.5)
    r1 = unpaired_degradation([1], [0])  # one sample per model is allowed
    assert r1.delta == 1.0 and r1.statistic == pytest.approx(np.sqrt(2))


def test_paired_test_is_stronger_than_unpaired_on_the_same_samples():
    # 60 discordant pairs, 40 / 20: a paired signal the unpaired test drowns in the concordant variance
    base, new = pairs(40, 20, both_right=500, both_wrong=440)
    assert mcnemar_degradation(base, new).pvalue < 0.01 < unpaired_degradation(base, new).pvalue


# --------------------------------------------------------------------------- aggregation (Sec. 4)
def test_pooled_and_fisher_by_hand():
    tasks = {"a": pairs(8, 2), "b": pairs(5, 5)}
    agg = aggregate_degradation(tasks, n_mc=2000)
    assert agg.pvalues["pooled"] == pytest.approx(stats.binomtest(13, 20, 0.5, alternative="greater").pvalue)
    p = [56 / 1024, stats.binomtest(5, 10, 0.5, alternative="greater").pvalue]
    chi2 = -2 * np.sum(np.log(p))
    assert agg.pvalues["fisher"] == pytest.approx(stats.chi2.sf(chi2, 4))
    assert [r.b for r in agg.per_task] == [8, 5]


@pytest.mark.parametrize("b,c", [([14, 60, 3], [6, 40, 1]), ([9, 30], [3, 22]), ([12, 25, 5], [8, 15, 0]),
                                 ])
def test_maxdrop_several_tasks_matches_exact_enumeration(b, c):
    # Equation test (Sec. 4): drops standardised by their null s.e. 1 / (2 sqrt(m_i)), null conditional on m_i
    p = aggregate_counts(b, c, methods=("maxdrop",), n_mc=40_000, rng=np.random.default_rng(3))["maxdrop"]
    ref = exact_maxdrop_pvalue(b, c)
    assert p == pytest.approx(ref, abs=0.006)
    # the check can fail: other standardisations give clearly different p-values here
    for wrong in (lambda m: m, lambda m: np.ones_like(m, dtype=float)):
        assert abs(exact_maxdrop_pvalue(b, c, wrong) - ref) > 0.02


def test_maxdrop_keeps_tasks_with_a_single_discordant_pair():
    b, c = [0, 14, 3], [1, 10, 3]  # the first task has m = 1 and lowers the chance that max z stays below z_obs
    p = aggregate_counts(b, c, methods=("maxdrop",), n_mc=40_000, rng=np.random.default_rng(4))["maxdrop"]
    assert p == pytest.approx(exact_maxdrop_pvalue(b, c), abs=0.01)
    assert abs(exact_maxdrop_pvalue(b[1:], c[1:]) - exact_maxdrop_pvalue(b, c)) > 0.2


def test_maxdrop_single_task_equals_exact_test():
    # with one task, max z is a monotone function of b: the MC p-value estimates the exact one
    p = aggregate_counts([30], [15], methods=("maxdrop",), n_mc=40_000, rng=np.random.default_rng(1))["maxdrop"]
    assert p == pytest.approx(stats.binomtest(30, 45, 0.5, alternative="greater").pvalue, abs=0.005)


def test_maxdrop_counts_ties_and_is_a_valid_pvalue():
    # b = c in every task: z_obs = 0 and P(max z >= 0) is large; the MC p-value is (1 + #) / (n_mc + 1)
    p = aggregate_counts([5, 10], [5, 10], methods=("maxdrop",), n_mc=20_000, rng=np.random.default_rng(0))
    assert p["maxdrop"] == pytest.approx(exact_maxdrop_pvalue([5, 10], [5, 10]), abs=0.01)
    one = aggregate_counts([50], [0], methods=("maxdrop",), n_mc=99, rng=np.random.default_rng(0))
    assert one["maxdrop"] == pytest.approx(1 / 100)  # never exceeded: the smallest MC p-value, never 0


def test_maxdrop_ignores_tasks_without_discordant_pairs():
    rng = np.random.default_rng(2)
    p = aggregate_counts([9, 0], [3, 0], methods=("maxdrop",), n_mc=20_000, rng=rng)["maxdrop"]
    assert p == pytest.approx(stats.binomtest(9, 12, 0.5, alternative="greater").pvalue, abs=0.01)
    assert aggregate_counts([0, 0], [0, 0], methods=("maxdrop",))["maxdrop"] == 1.0


def test_aggregate_counts_methods_and_defaults():
    p = aggregate_counts([8, 3], [2, 3])
    assert set(p) == {"pooled", "maxdrop", "fisher"}
    assert set(aggregate_counts([8], [2], methods=("fisher",))) == {"fisher"}
    # documented defaults: 10,000 Monte-Carlo draws from a generator seeded with 0
    explicit = aggregate_counts([8, 3], [2, 3], n_mc=10_000, rng=np.random.default_rng(0))
    assert p == explicit
    assert aggregate_counts([8, 3], [2, 3], n_mc=1)["maxdrop"] in (0.5, 1.0)  # one draw is allowed
    tasks = [pairs(8, 2), pairs(3, 3)]
    assert aggregate_degradation(tasks).pvalues == aggregate_degradation(tasks, n_mc=10_000, random_state=0).pvalues


def test_combined_reject_and_alpha():
    res = AggregateResult(pvalues={"pooled": 0.2, "fisher": 0.04}, per_task=[], alpha=0.05)
    assert res.combined_reject
    assert not AggregateResult(pvalues={"pooled": 0.2, "fisher": 0.05}, per_task=[]).combined_reject
    agg = aggregate_degradation([pairs(30, 2), pairs(20, 4)], alpha=0.01, n_mc=500)
    assert agg.alpha == 0.01 and agg.combined_reject
    assert not aggregate_degradation([pairs(3, 3)], n_mc=500).combined_reject


def test_aggregation_random_state_controls_the_monte_carlo():
    tasks = [pairs(9, 3), pairs(7, 5)]
    a = aggregate_degradation(tasks, n_mc=300, random_state=1).pvalues["maxdrop"]
    assert aggregate_degradation(tasks, n_mc=300, random_state=1).pvalues["maxdrop"] == a
    others = {aggregate_degradation(tasks, n_mc=300, random_state=s).pvalues["maxdrop"] for s in range(2, 8)}
    assert len(others | {a}) > 1


# --------------------------------------------------------------------------- pruning (Sec. 5)
def test_flip_mask_keeps_only_flipping_samples():
    runs = np.array([[1, 0, 1, 0], [1, 0, 0, 1], [1, 0, 1, 0]])
    assert flip_mask(runs).tolist() == [False, False, True, True]
    assert flip_mask(runs.astype(bool)).tolist() == [False, False, True, True]


def test_flip_mask_pruning_keeps_the_exact_test_when_only_flippers_disagree():
    # samples that never flip carry no discordant pair: dropping them leaves b, c and the p-value unchanged
    rng = np.random.default_rng(0)
    base, new, runs = simulate_pruning(rng, 4000, dict(SCALES["quick"], noise_runs=60))
    keep = flip_mask(runs)
    assert 0.3 < keep.mean() < 0.8
    full, pruned = mcnemar_degradation(base, new), mcnemar_degradation(base[keep], new[keep])
    assert pruned.b + pruned.c >= 0.98 * (full.b + full.c)
    assert pruned.pvalue == pytest.approx(full.pvalue, rel=0.5)


def test_simulated_pruning_matches_the_paper_scale():
    base, new, runs = simulate_pruning(np.random.default_rng(1), PRUNE_SIZE, SCALES["quick"])
    keep = flip_mask(runs)
    disc = base != new
    assert keep.mean() == pytest.approx(6428 / 12032, abs=0.03)  # the paper keeps 6,428 of MMLU-Pro's 12,032
    assert disc.mean() == pytest.approx(0.09, abs=0.01)
    assert 0.85 < disc[keep].sum() / disc.sum() < 0.99  # undetected flip-prone samples are lost


def test_simulation_hits_requested_rates():
    t = simulate_tables(np.random.default_rng(0), (100_000,), acc=0.6, p_flip=0.09, delta=0.008, reps=5)
    n = t.sum(axis=-1)
    assert np.allclose((t[..., 1] + t[..., 2]) / n, 0.09, atol=0.004)
    assert np.allclose((t[..., 1] - t[..., 2]) / n, 0.008, atol=0.003)
    base, new = table_scores(t[0, 0])
    assert contingency(base, new) == tuple(int(v) for v in t[0, 0])


@pytest.mark.parametrize("call,match", [
    (lambda: mcnemar_degradation([0, 1, 2], [0, 1, 1]), r"^base_correct must hold only 0/1 .*found e\.g\. \[2\]$"),
    (lambda: mcnemar_degradation([2, 3, 4, 5, 6], [0] * 5), r"found e\.g\. \[2, 3, 4\]$"),
    (lambda: mcnemar_degradation([0, 1, 1], [0, 1, 3]), r"^new_correct must hold only 0/1"),
    (lambda: mcnemar_degradation([0, 1], [0, 1, 1]), "^base_correct and new_correct must score the same samples; "
                                                     "got lengths 2 and 3$"),
    (lambda: mcnemar_degradation([0, 1], [0, 1], alternative="up"), r"^alternative must be one of .*'up'$"),
    (lambda: mcnemar_degradation([0, 1], [0, 1], confidence_level=1.0), r"^confidence_level must lie in \(0, 1\)"),
    (lambda: mcnemar_degradation([0, 1], [0, 1], confidence_level=0.0), r"^confidence_level must lie in \(0, 1\)"),
    (lambda: mcnemar_degradation([], []), "^need at least one paired sample$"),
    (lambda: mcnemar_degradation([[0, 1]], [[0, 1]]), r"^base_correct must be a 1-D array .*\(1, 2\)$"),
    (lambda: unpaired_degradation([0, 5], [1, 1]), r"^base_correct must hold only 0/1"),
    (lambda: unpaired_degradation([0, 1], [1, 5]), r"^new_correct must hold only 0/1"),
    (lambda: unpaired_degradation([], [1]), "^need at least one sample per model$"),
    (lambda: unpaired_degradation([1], []), "^need at least one sample per model$"),
    (lambda: aggregate_degradation({}), "^need at least one task$"),
    (lambda: aggregate_degradation([pairs(1, 1)], alpha=1.0), r"^alpha must lie in \(0, 1\), got 1.0$"),
    (lambda: aggregate_degradation([pairs(1, 1)], alpha=0.0), r"^alpha must lie in \(0, 1\)"),
    (lambda: aggregate_degradation([pairs(1, 1)], methods=("median",)), r"^methods must be a non-empty subset of .*'median'"),
    (lambda: aggregate_counts([1], [1], methods=()), "^methods must be a non-empty subset of"),
    (lambda: aggregate_counts([1, 2], [1], methods=("pooled",)), r"^b and c must be 1-D arrays of equal, non-zero "
                                                                  r"length \(one entry per task\)$"),
    (lambda: aggregate_counts([], [], methods=("pooled",)), "^b and c must be 1-D arrays of equal, non-zero length"),
    (lambda: aggregate_counts([[1]], [[1]], methods=("pooled",)), "^b and c must be 1-D arrays"),
    (lambda: aggregate_counts([1, -1], [1, 1]), "^discordant counts must be non-negative$"),
    (lambda: aggregate_counts([1, 1], [1, -1]), "^discordant counts must be non-negative$"),
    (lambda: aggregate_counts([1], [1], n_mc=0), "^n_mc must be a positive integer, got 0$"),
    (lambda: flip_mask(np.array([[0, 1, 1]])), r"^score_runs must be an \(R, N\) array with R >= 2 runs, got shape \(1, 3\)$"),
    (lambda: flip_mask(np.array([0, 1, 1])), "R >= 2"),
    (lambda: flip_mask(np.array([[0, 1], [2, 1]])), "^score_runs must hold only 0/1 scores$"),
    (lambda: simulate_tables(np.random.default_rng(0), (10,), 0.5, 0.01, 0.05, 1), "impossible"),
])
def test_bad_input_is_rejected(call, match):
    with pytest.raises(ValueError, match=match):
        call()


# --------------------------------------------------------------------------- the real-model decoding loop
@pytest.fixture(scope="module")
def tiny_lm():
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from iclr26.models.vlm import byte_tokenizer

    tok = byte_tokenizer()
    torch.manual_seed(0)
    lm = LlamaForCausalLM(LlamaConfig(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=2,
                                      pad_token_id=tok.pad_token_id)).eval()
    with torch.no_grad():  # a peaked, non-uniform next-token distribution
        lm.lm_head.weight.mul_(40.0)
    prefix = tok("Q: 1+1=2. Q: 2+3=5. Q: ", add_special_tokens=False)["input_ids"]
    ids = [prefix + tok(q, add_special_tokens=False)["input_ids"] for q in ("4+4=", "7+1=", "12+9=", "3+3=")]
    return lm, tok, ids


def _reference_greedy(lm, ids, n):
    import torch

    out = []
    for x in ids:
        seq = list(x)
        for _ in range(n):
            with torch.no_grad():
                seq.append(int(lm(input_ids=torch.tensor([seq])).logits[0, -1].argmax()))
        out.append(seq[len(x):])
    return out


def test_greedy_answers_equal_a_plain_greedy_loop(tiny_lm):
    """The prefix-cache, equal-length batching loop gives the tokens of a plain full-recompute greedy loop."""
    from iclr26.evaluation.mcnemar_degradation.experiment import greedy_answers

    lm, tok, ids = tiny_lm
    got = greedy_answers(lm, tok, ids, max_new_tokens=5, batch_size=2)
    ref_cut = []  # a stop token ends a completion: the reference is cut at the first one
    for r in _reference_greedy(lm, ids, 5):
        cut = []
        for t in r:
            if t == tok.eos_token_id:
                break
            cut.append(t)
        ref_cut.append(tok.decode(cut))
    assert got == ref_cut


def test_sampled_answers_follow_the_temperature(tiny_lm):
    """Sampling: seeded runs repeat, a tiny temperature is greedy, a high one departs from greedy."""
    import torch

    from iclr26.evaluation.mcnemar_degradation.experiment import greedy_answers

    lm, tok, ids = tiny_lm
    greedy = greedy_answers(lm, tok, ids, 4, 4)
    a = greedy_answers(lm, tok, ids, 4, 4, temperature=0.3, generator=torch.Generator().manual_seed(1))
    b = greedy_answers(lm, tok, ids, 4, 4, temperature=0.3, generator=torch.Generator().manual_seed(1))
    assert a == b
    assert greedy_answers(lm, tok, ids, 4, 4, temperature=1e-4, generator=torch.Generator().manual_seed(2)) == greedy
    g = torch.Generator().manual_seed(3)
    hot = [greedy_answers(lm, tok, ids, 4, 4, temperature=5.0, generator=g) for _ in range(5)]
    assert any(h != greedy for h in hot)


@pytest.mark.parametrize("temperature", [-0.1, float("nan"), float("inf"), "0.3"])
def test_bad_temperature_is_rejected(tiny_lm, temperature):
    from iclr26.evaluation.mcnemar_degradation.experiment import greedy_answers

    lm, tok, ids = tiny_lm
    with pytest.raises(ValueError, match="^temperature must be a finite number >= 0"):
        greedy_answers(lm, tok, ids, 2, 2, temperature=temperature)


def test_sampled_first_tokens_follow_the_tempered_softmax(tiny_lm):
    """Ancestral sampling draws from softmax(logits / T): the first-token frequencies of 600 draws
    match the tempered distribution of a direct forward pass (a wrong scaling of T does not)."""
    import torch

    from iclr26.evaluation.mcnemar_degradation.experiment import greedy_answers

    lm, tok, ids = tiny_lm
    x = ids[0]
    with torch.no_grad():
        logits = lm(input_ids=torch.tensor([x])).logits[0, -1].float()
    temperature = float(logits.std()) * 0.5  # a spread-out but not flat distribution
    probs = torch.softmax(logits / temperature, -1)
    top = torch.topk(probs, 3)
    assert 0.05 < float(top.values[0]) < 0.9
    n = 600
    texts = greedy_answers(lm, tok, [x] * n, max_new_tokens=1, batch_size=n, temperature=temperature,
                           generator=torch.Generator().manual_seed(5))
    # only tokens that decode to one printable ASCII character are told apart by their text (a
    # lone byte >= 128 decodes to the replacement character, shared by many tokens)
    checked = 0
    for t in range(len(probs)):
        p, text = float(probs[t]), tok.decode([t])
        if p < 0.03 or not (len(text) == 1 and text.isascii() and text.isprintable()):
            continue
        checked += 1
        freq = sum(s == text for s in texts) / n
        assert abs(freq - p) < 4 * (p * (1 - p) / n) ** 0.5 + 1e-3, (t, freq, p)
    assert checked >= 2


def test_real_model_case_wiring_with_a_stub_model(monkeypatch):
    """real_model_case on a stub model: which run feeds which arm (base on sdpa, lossless on eager,
    degraded under the FP8 K/V hooks, the noisy re-runs without them), the flip mask over the
    re-runs, the discordant pairs it keeps, the z signal and the re-run pair tests."""
    import torch

    import iclr26.models as models
    import iclr26.evaluation.mcnemar_degradation.experiment as E

    n = 12
    golds = [str(i) for i in range(n)]

    class Layer(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.self_attn = torch.nn.Module()
            self.self_attn.k_proj, self.self_attn.v_proj = torch.nn.Linear(2, 2), torch.nn.Linear(2, 2)

    class Stub(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.model = torch.nn.Module()
            self.model.layers = torch.nn.ModuleList([Layer(), Layer()])
            self.attn = "sdpa"

        def set_attn_implementation(self, name):
            self.attn = name

        def hooked(self):
            return any(len(l.self_attn.k_proj._forward_hooks) and len(l.self_attn.v_proj._forward_hooks)
                       for l in self.model.layers)

    base = [1] * n
    base[10] = 0
    lossless = list(base)
    lossless[11] = 0
    degraded = list(base)
    for i in (0, 1, 2, 3, 4):
        degraded[i] = 0
    degraded[10] = 1
    flaky = {0, 1, 5}                 # the items whose score flips across the noisy re-runs
    calls = []

    def answers(m, tok, ids, max_new_tokens, batch_size, temperature=0.0, generator=None):
        assert ids == list(range(n)) and tok == "tok"
        if temperature:
            assert temperature == 0.3 and generator is not None and not m.hooked() and m.attn == "sdpa"
            k = sum(c == "noisy" for c in calls)
            calls.append("noisy")
            right = [i not in flaky or (k + i) % 2 == 0 for i in range(n)]
        else:
            state = "fp8" if m.hooked() else m.attn
            calls.append(state)
            right = {"sdpa": base, "eager": lossless, "fp8": degraded}[state]
        return [g if r else "x" for g, r in zip(golds, right)]

    stub = Stub()
    monkeypatch.setattr(models, "load", lambda name, dtype=None: (stub, "tok"))
    monkeypatch.setattr(E, "_prompt_ids", lambda tok, cfg, seed: (list(range(n)), golds))
    monkeypatch.setattr(E, "greedy_answers", answers)
    cfg = dict(model="stub", max_new_tokens=4, batch_size=4, noise_temperature=0.3, noise_runs=4)
    out = E.real_model_case(cfg, seed=0)
    assert calls == ["sdpa", "eager", "fp8"] + ["noisy"] * 4 and not stub.hooked()
    m, info = out["metrics"], out["info"]
    assert m["lossless_correct"] == {"base": base, "lossless": lossless}
    assert m["degraded_correct"] == {"base": base, "degraded": degraded}
    disc = [i for i in range(n) if base[i] != degraded[i]]          # 0-4 and 10
    assert m["real_discordant_kept"]["flip_mask"] == [float(i in flaky) for i in disc]
    assert m["real_discordant_kept"]["random"] == [pytest.approx(len(flaky) / n)] * len(disc)
    res = mcnemar_degradation(np.array(base), np.array(degraded))
    keep = np.array([i in flaky for i in range(n)])
    res_p = mcnemar_degradation(np.array(base)[keep], np.array(degraded)[keep])
    assert (res.b, res.c, res_p.b, res_p.c) == (5, 1, 2, 0)
    assert m["real_signal_z"]["all"] == [pytest.approx((5 - 1) / np.sqrt(6))]
    assert m["real_signal_z"]["flip_mask"] == [pytest.approx(2 / np.sqrt(2))]
    assert info["lossless"]["b"] == 1 and info["lossless"]["c"] == 0 and info["degraded"]["b"] == 5
    assert info["pruning"]["discordant_kept"] == 2 and info["pruning"]["n_discordant"] == 6
    assert len(m["lossless_reject"]["lossless"]) == 1 + 2                 # the base-vs-lossless test + 2 pairs
    assert info["accuracy"] == {"base": pytest.approx(11 / 12), "lossless": pytest.approx(10 / 12),
                                "degraded": pytest.approx(7 / 12)}
