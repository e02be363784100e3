"""Tests of RLCR (arXiv:2507.16806): reward equation, parser, proper-scoring property, voting."""
from __future__ import annotations

import numpy as np
import pytest

from iclr26.posttraining.rlcr import (brier_score, confidence_weighted_vote, expected_calibration_error,
                                      expected_reward, log_score, majority_vote, max_confidence,
                                      parse_completion, parse_confidence, rlcr_reward, rlcr_score, rlvr_reward)


def _c(ans, conf):
    return f"<think>work</think><answer>{ans}</answer><analysis>unsure</analysis><confidence>{conf}</confidence>"


# ---------------------------------------------------------------- the RLCR objective (Sec. 3)
def test_reward_equation_hand_values():
    # R = 1[y = y*] - (q - 1[y = y*])^2
    assert rlcr_reward([_c("5", 0.8)], ["5"]) == pytest.approx([1 - 0.04])
    assert rlcr_reward([_c("4", 0.8)], ["5"]) == pytest.approx([-0.64])
    assert rlcr_reward([_c("5", 1.0), _c("4", 0.0)], ["5", "5"]) == pytest.approx([1.0, 0.0])
    assert rlcr_reward([_c("1,000", "30%")], ["1000"]) == pytest.approx([1 - 0.49])
    assert rlcr_score(0.3, True) == pytest.approx(0.51) and brier_score(0.3, False) == pytest.approx(0.09)


def test_reduction_to_rlvr_at_certain_correct_and_missing_confidence():
    comps = [_c("5", 1.0), _c("7", 0.0), "<answer>5</answer>"]
    # a correct answer at q = 1 and a wrong one at q = 0 pay exactly the binary reward
    assert rlcr_reward(comps[:2], ["5", "5"]) == rlvr_reward(comps[:2], ["5", "5"]) == [1.0, 0.0]
    # no confidence: worst Brier term by default, none when the penalty is 0 (then RLCR == RLVR)
    assert rlcr_reward(comps[2:], ["5"]) == [0.0]
    assert rlcr_reward(comps[2:], ["5"], missing_confidence_penalty=0.0) == rlvr_reward(comps[2:], ["5"])


def test_trl_calling_convention():
    conv = [[{"role": "assistant", "content": _c("5", 0.9)}]]
    out = rlcr_reward(completions=conv, answer=["5"], prompts=["p"], completion_ids=[[1, 2]])
    assert out == pytest.approx([1 - 0.01])
    assert rlcr_reward([_c("x", 0.5)], ["X"], is_correct=lambda a, b: a.lower() == b.lower()) == [0.75]


def test_parser():
    p = parse_completion(_c(" 42 ", "0.75") + "<answer>43</answer>")
    assert p.answer == "43" and p.confidence == 0.75 and p.format_ok
    assert parse_completion("<answer>3</answer>").format_ok is False
    assert parse_confidence(".5") == 0.5 and parse_confidence("85%") == 0.85
    assert parse_confidence("*0.8*") == 0.8 and parse_confidence("0.8X") is None and parse_confidence("X0.8") is None
    assert parse_confidence("1.5") is None and parse_confidence("high") is None and parse_confidence("120%") is None


def test_rejections():
    with pytest.raises(ValueError, match="2 completions but 1 gold answers"):
        rlcr_reward([_c("1", 0.5)] * 2, ["1"])
    with pytest.raises(ValueError, match=r"confidence must be a probability in \[0, 1\]"):
        brier_score(1.2, True)
    with pytest.raises(TypeError, match="string or a list of chat messages"):
        rlcr_reward([3], ["1"])
    with pytest.raises(ValueError, match="missing_confidence_penalty must be in"):
        rlcr_reward([_c("1", 0.5)], ["1"], missing_confidence_penalty=2.0)
    with pytest.raises(ValueError, match="score must be 'brier' or 'log'"):
        expected_reward(0.5, 0.5, score="spherical")
    with pytest.raises(ValueError, match="answers but 1 confidences"):
        confidence_weighted_vote(["1", "2"], [0.5])
    with pytest.raises(ValueError, match=r"confidences must lie in \[0, 1\]"):
        confidence_weighted_vote(["1"], [1.5])
    with pytest.raises(ValueError, match="at least one sampled answer"):
        majority_vote([])
    with pytest.raises(ValueError, match=r"confidences must lie in \[0, 1\]"):
        confidence_weighted_vote(["1"], [float("nan")])


@pytest.mark.parametrize("bad", [0.5, 2.0, -1.0, float("nan")])
def test_ece_rejects_correctness_outside_zero_one(bad):
    with pytest.raises(ValueError, match=r"correct must hold 0/1 .* at index 1 \(1 values outside"):
        expected_calibration_error([0.5, 0.7, 0.2], [1, bad, 0])


def test_ece_accepts_bools_and_matches_a_binned_reference():
    rng = np.random.default_rng(3)
    c = rng.uniform(0, 1, 200)
    y = rng.uniform(0, 1, 200) < c ** 2
    # independent reference: bins (k/10, (k+1)/10], weight |B|/n, gap |mean(y) - mean(c)|; a confidence
    # on an inner edge goes to the upper bin as int(c * n_bins) does
    edges = np.linspace(0, 1, 11)
    b = np.clip(np.searchsorted(edges, c, side="right") - 1, 0, 9)
    ref = sum((b == k).mean() * abs(y[b == k].mean() - c[b == k].mean()) for k in range(10) if (b == k).any())
    assert expected_calibration_error(c, y.tolist(), n_bins=10) == pytest.approx(ref, abs=1e-12)
    with pytest.raises(ValueError, match="n_bins"):
        expected_calibration_error(c, y, n_bins=True)


def test_nan_confidences_are_rejected():
    """NaN (an unparsed confidence) must not silently land in a bin or a mean."""
    nan = float("nan")
    with pytest.raises(ValueError, match=r"confidences must be finite probabilities in \[0, 1\]; "
                                         r"got nan at index 1 \(1 non-finite\)"):
        expected_calibration_error([0.5, nan, 0.2], [1, 0, 0])
    with pytest.raises(ValueError, match="confidences must lie in"):
        expected_calibration_error([0.5, -0.1], [1, 0])
    with pytest.raises(ValueError, match="p_correct and q must be finite.*NaN or inf"):
        expected_reward(0.5, nan)
    with pytest.raises(ValueError, match="p_correct and q must be finite"):
        expected_reward(nan, 0.5)
    with pytest.raises(ValueError, match=r"p_correct and q must lie in \[0, 1\]"):
        expected_reward(0.5, 1.5)
    with pytest.raises(ValueError, match="confidence must be a probability"):
        brier_score(nan, True)


# ---------------------------------------------------------------- the theorem, exactly
def test_expected_reward_is_maximised_at_the_true_probability():
    q = np.linspace(0, 1, 1001)
    for p in (0.0, 0.13, 0.5, 0.87, 1.0):
        er = expected_reward(p, q)
        assert q[er.argmax()] == pytest.approx(p, abs=1e-3)
        # closed form: p - (q - p)^2 - p(1 - p)
        assert np.allclose(er, p - (q - p) ** 2 - p * (1 - p))


def test_accuracy_incentive_bounded_vs_log():
    q = np.linspace(1e-9, 1 - 1e-9, 20001)
    best = lambda p, s: expected_reward(p, q, s).max()
    ps = np.linspace(0.01, 0.99, 25)
    # Brier: optimum p^2, increasing in p
    assert np.all(np.diff([best(p, "brier") for p in ps]) > 0)
    assert best(0.6, "brier") == pytest.approx(0.36, abs=1e-6)
    # log score: optimum p - H(p), decreasing below 1/(1+e): a sure-wrong answer beats a 20% one
    assert best(0.2, "log") < best(0.01, "log")
    assert log_score(0.0, False) == 0.0 and log_score(0.5, True) == pytest.approx(1 + np.log(0.5))


# ---------------------------------------------------------------- test-time scaling
def test_votes():
    ans = ["3", "4", "4", "3.0", None]
    conf = [0.9, 0.2, 0.3, 0.8, 1.0]
    assert majority_vote(ans) == "3"                       # "3" and "3.0" vote together; tie -> earliest
    assert majority_vote(["4", "3", "3"]) == "3"
    assert confidence_weighted_vote(["4", "4", "3"], [0.2, 0.2, 0.9]) == "3"
    assert confidence_weighted_vote(ans, conf) == "3"
    assert max_confidence(ans, conf) == "3"                 # the None sample is skipped
    assert majority_vote([None, None]) is None


def test_weighted_vote_reduces_to_majority_with_equal_confidences():
    rng = np.random.default_rng(0)
    for _ in range(50):
        ans = [str(a) for a in rng.integers(0, 4, size=7)]
        assert confidence_weighted_vote(ans, [0.6] * 7) == majority_vote(ans)


def test_ece():
    # the default is 10 equal-width bins: 0.05 and 0.095 share bin 0 (with 11 bins they would not)
    assert expected_calibration_error([0.05, 0.095], [1, 0]) == pytest.approx(abs(0.5 - 0.0725))
    assert expected_calibration_error([0.9, 0.9, 0.1, 0.1], [1, 1, 0, 0]) == pytest.approx(0.1)
    assert expected_calibration_error([1.0, 0.0], [1, 0]) == 0.0


def test_experiment_mc_parts_are_consistent():
    from iclr26.posttraining.rlcr import experiment as E

    rng = np.random.default_rng(0)
    cfg = dict(n_p=9, n_q=51, draws=5000, n_pairs=10)
    truthful, best_mis, p, argmax_q = E.proper_scoring(cfg, rng)
    assert np.all(truthful > best_mis) and np.max(np.abs(argmax_q - p)) <= 0.03
    hi, lo = E.accuracy_incentive(cfg, rng, "brier")
    assert np.all(hi > lo)
    hi, lo = E.accuracy_incentive(cfg, rng, "log", low_region=True)
    assert np.all(np.isfinite(hi)) and np.all(np.isfinite(lo))


def _improper_brier(q, correct):
    """An improper score: the absolute error |q - 1[correct]| (its expectation is minimised at q in {0, 1})."""
    return abs(float(q) - float(bool(correct)))


def test_theorem_claims_run_the_library_reward(monkeypatch):
    """Replacing the library's Brier score by an improper one changes (and breaks) claims 1-2."""
    from iclr26.posttraining.rlcr import experiment as E
    from iclr26.posttraining.rlcr import reward as R

    cfg = dict(n_p=9, n_q=51, draws=5000, n_pairs=10)
    truthful, best_mis, _, _ = E.proper_scoring(cfg, np.random.default_rng(0))
    hi, lo = E.accuracy_incentive(cfg, np.random.default_rng(1), "brier")
    monkeypatch.setattr(R, "brier_score", _improper_brier)
    t2, b2, _, _ = E.proper_scoring(cfg, np.random.default_rng(0))
    hi2, lo2 = E.accuracy_incentive(cfg, np.random.default_rng(1), "brier")
    assert not np.allclose(t2, truthful) and not np.allclose(hi2, hi)
    assert np.mean(t2 > b2) < 0.5            # the truthful report no longer wins: the claim would fail
    # claim 3 runs the library's log score
    l_hi, _ = E.accuracy_incentive(cfg, np.random.default_rng(2), "log", low_region=True)
    monkeypatch.setattr(R, "log_score", lambda q, c, eps=0.0: float(c) - abs(q - float(c)))
    l_hi2, _ = E.accuracy_incentive(cfg, np.random.default_rng(2), "log", low_region=True)
    assert not np.allclose(l_hi, l_hi2)


def test_rl_claims_run_the_library_reward(monkeypatch):
    """The GRPO arms get the library's reward functions (looked up at call time, so an improper
    Brier score changes the RLCR arm's reward), and the held-out Brier metric is the library's."""
    from iclr26.posttraining.rlcr import experiment as E
    from iclr26.posttraining.rlcr import reward as R

    comps = ["<answer>5</answer><confidence>0.7</confidence>", "<answer>4</answer><confidence>0.7</confidence>"]
    seen = {}

    class _Fake:
        pass

    def fake_train(cfg, seed, reward_fn, train):
        seen[reward_fn.__name__] = reward_fn(comps, answer=["5", "5"])
        return _Fake(), None

    ev = dict(answers=["5", "4", "5"], conf=[0.7, 0.7, None], correct=[True, False, True], texts=["t"] * 3)
    monkeypatch.setattr(E, "train_grpo", fake_train)
    monkeypatch.setattr(E, "evaluate", lambda *a, **k: ev)
    cfg = dict(E.SCALES["smoke"], n_test=3, n_vote=3, k=1)
    out = E.rl_arms(cfg, 0)
    assert seen["rlcr_reward"] == pytest.approx([1 - 0.09, -0.49]) and seen["rlvr_reward"] == [1.0, 0.0]
    assert out["rlcr"]["brier"] == pytest.approx((0.09 + 0.49 + 1.0) / 3)
    monkeypatch.setattr(R, "brier_score", _improper_brier)
    out2 = E.rl_arms(cfg, 0)
    assert seen["rlcr_reward"] == pytest.approx([1 - 0.3, -0.7]) and seen["rlvr_reward"] == [1.0, 0.0]
    assert out2["rlcr"]["brier"] != pytest.approx(out["rlcr"]["brier"])


def test_calibration_metrics_by_hand():
    from iclr26.posttraining.rlcr.experiment import calibration

    ev = dict(conf=[0.9, 0.2, None, 0.9], correct=[True, False, True, False])
    m = calibration(ev)
    assert m["brier"] == pytest.approx((0.01 + 0.04 + 1.0 + 0.81) / 4)
    assert m["accuracy"] == 0.5 and m["format_rate"] == 0.75
    # ECE over the three parsed confidences: bin 0.9 holds {1, 0} (|0.5 - 0.9|), bin 0.2 holds {0}
    assert m["ece"] == pytest.approx(2 / 3 * 0.4 + 1 / 3 * 0.2)
    assert calibration(dict(conf=[None], correct=[False]))["ece"] == 1.0


def test_split_is_disjoint_and_prompt_format():
    from iclr26.posttraining.rlcr.experiment import format_prompt, split_problems

    train, test = split_problems(2)
    tr = {p.metadata["expression"] for p in train}
    te = {p.metadata["expression"] for p in test}
    assert not tr & te and len(te) >= 300
    pr = format_prompt("3 + 4")
    assert pr.endswith("Q: 3 + 4 =") and pr.count("<confidence>") == 2


# ---------------------------------------------------------------- exact values at the edges
def _ece_reference(c, y, n_bins):
    total = 0.0
    for b in range(n_bins):
        lo, hi = b / n_bins, (b + 1) / n_bins
        m = [(ci >= lo and (ci < hi or (b == n_bins - 1 and ci <= hi))) for ci in c]
        if any(m):
            cs = [ci for ci, mi in zip(c, m) if mi]
            ys = [yi for yi, mi in zip(y, m) if mi]
            total += len(cs) / len(c) * abs(sum(ys) / len(ys) - sum(cs) / len(cs))
    return total


def test_ece_against_a_reference_with_bin_edges():
    rng = np.random.default_rng(3)
    for n_bins in (1, 2, 5, 10, 15):
        c = list(rng.uniform(size=40)) + [0.0, 1.0, 0.5, 0.2]
        y = [bool(v) for v in rng.integers(0, 2, size=len(c))]
        assert expected_calibration_error(c, y, n_bins=n_bins) == pytest.approx(_ece_reference(c, y, n_bins),
                                                                                abs=1e-12)
    assert expected_calibration_error([1, 1, 0], [True, False, False]) == pytest.approx(1 / 3)
    assert expected_calibration_error([0.7], [1]) == pytest.approx(0.3)        # a single item is allowed
    assert expected_calibration_error([1.0, 0.95], [0, 1], n_bins=10) == pytest.approx(abs(0.5 - 0.975))
    with pytest.raises(ValueError, match="^confidences and correct must be 1-d arrays of the same, non-zero length$"):
        expected_calibration_error([], [])
    with pytest.raises(ValueError, match="1-d arrays"):
        expected_calibration_error([0.5, 0.5], [1])
    with pytest.raises(ValueError, match="1-d arrays"):
        expected_calibration_error([[0.5]], [[1]])
    with pytest.raises(ValueError, match=r"^confidences must lie in \[0, 1\]$"):
        expected_calibration_error([0.5, 1.5], [1, 0])
    with pytest.raises(ValueError, match="^n_bins must be a positive integer, got 0$"):
        expected_calibration_error([0.5], [1], n_bins=0)
    with pytest.raises(ValueError, match="n_bins must be a positive integer"):
        expected_calibration_error([0.5], [1], n_bins=2.5)


def test_expected_reward_log_and_brier_closed_forms():
    p, q = np.array([0.0, 0.3, 1.0, 0.6]), np.array([0.2, 0.5, 0.9, 0.6])
    np.testing.assert_allclose(expected_reward(p, q, "log"), p * (1 + np.log(q)) + (1 - p) * np.log(1 - q))
    np.testing.assert_allclose(expected_reward(p, q), p - (q - p) ** 2 - p * (1 - p))
    assert expected_reward(1, 1) == 1.0 and expected_reward(0, 0) == 0.0    # integers are accepted
    assert expected_reward(1, 0, "log") == -np.inf
    # an outcome of probability 0 contributes nothing (no 0 * -inf)
    assert expected_reward(0, 0, "log") == 0.0 and expected_reward(1, 1, "log") == 1.0
    np.testing.assert_allclose(expected_reward([[0.0], [1.0]], [0.0, 1.0], "log"), [[0.0, -np.inf], [-np.inf, 1.0]])
    with pytest.raises(ValueError, match=r"^p_correct and q must lie in \[0, 1\]$"):
        expected_reward(1.5, 0.5)
    with pytest.raises(ValueError, match=r"^p_correct and q must lie in \[0, 1\]$"):
        expected_reward(-0.5, 0.5)
    with pytest.raises(ValueError, match=r"^p_correct and q must be finite probabilities in \[0, 1\]; got NaN or inf$"):
        expected_reward(np.inf, 0.5)


def test_log_score_values_and_clipping():
    assert log_score(0.3, False) == pytest.approx(np.log(0.7))
    assert log_score(0.3, True) == pytest.approx(1 + np.log(0.3))
    assert log_score(0.0, True) == -np.inf and log_score(1.0, False) == -np.inf
    assert log_score(0.0, False) == 0.0 and log_score(1.0, True) == 1.0
    assert log_score(0.95, False, eps=0.1) == pytest.approx(np.log(0.1))     # q clipped to 1 - eps
    assert log_score(0.95, True, eps=0.1) == pytest.approx(1 + np.log(0.9))
    assert log_score(0.01, True, eps=0.1) == pytest.approx(1 + np.log(0.1))  # q clipped to eps


def test_parsing_edge_cases_and_messages():
    assert parse_confidence("**0.7**") == pytest.approx(0.7)
    assert parse_completion("no tags at all").answer is None
    assert parse_completion("<answer> </answer><confidence>0.5</confidence>").format_ok is False
    with pytest.raises(TypeError, match="^completion must be a string, got int$"):
        parse_completion(3)
    with pytest.raises(TypeError, match=r"^each completion must be a string or a list of chat messages "
                                        r"\(\{'role', 'content'\}\), got int$"):
        rlcr_reward([3], ["1"])
    # a chat message without content is an empty completion: wrong, confidence missing
    assert rlcr_reward([[{"role": "assistant"}]], ["1"]) == [-1.0]
    assert rlvr_reward([[{"role": "assistant"}]], ["1"]) == [0.0]
    # one gold answer given as a string applies to every completion
    assert rlcr_reward([_c("5", 0.5), _c("4", 0.5)], "5") == pytest.approx([0.75, -0.25])
    assert rlvr_reward([_c("5", 0.5), _c("4", 0.5)], "5") == [1.0, 0.0]
    with pytest.raises(ValueError, match="^got 2 completions but 1 gold answers; they must match$"):
        rlvr_reward([_c("5", 0.5)] * 2, ["5"])


def test_voting_keys_weights_and_messages():
    # numbers vote together up to 9 decimals, strings case-insensitively; the first spelling is returned
    assert majority_vote(["0.1234567891", "0.1234567894", "2"]) == "0.1234567891"
    assert majority_vote(["0.1", "0.2", "0.2"]) == "0.2"                     # not rounded to integers
    assert majority_vote(["ABC", "x", "abc"]) == "ABC"
    assert confidence_weighted_vote(["ABC", "x", "abc"], [0.3, 0.5, 0.3]) == "ABC"
    assert majority_vote([None, "7", None]) == "7"
    assert confidence_weighted_vote([None, "7", "8"], [0.9, 0.1, 0.2]) == "8"
    assert confidence_weighted_vote(["a", "b"], [0.0, 0.0]) == "a"         # zero confidence is allowed
    assert max_confidence(["a", "b"], [0.0, 0.0]) == "a"
    assert max_confidence([None, None], [0.5, 0.5]) is None
    assert majority_vote([None]) is None
    # a custom key is used
    assert majority_vote(["a1", "b1", "c2"], key=lambda s: s[-1]) == "a1"
    assert majority_vote(["c2", "a1", "b1"], key=lambda s: s[-1]) == "a1"   # the key is passed on
    assert majority_vote(["2", "0.1234567891", "0.1234567894"]) == "0.1234567891"   # equal to 9 decimals
    assert confidence_weighted_vote(["a1", "b2", "c2"], [0.5, 0.3, 0.3], key=lambda s: s[-1]) == "b2"
    with pytest.raises(ValueError, match="^need at least one sampled answer$"):
        majority_vote([])
    with pytest.raises(ValueError, match=r"^confidences must lie in \[0, 1\]$"):
        max_confidence(["a"], [-0.1])


def test_discrimination_auroc_and_constant_brier():
    from iclr26.posttraining.rlcr.experiment import calibration, discrimination_auroc

    # hand example: right answers at 0.9 and 0.6, wrong at 0.6 and 0.2 -> pairs (r, w): 4, ties count half
    assert discrimination_auroc([0.9, 0.6, 0.6, 0.2], [1, 1, 0, 0]) == pytest.approx((1 + 1 + 0.5 + 1) / 4)
    assert discrimination_auroc([0.2, 0.9], [1, 0]) == 0.0                   # inverted ranking
    assert discrimination_auroc([0.5, 0.5, 0.5], [1, 0, 1]) == 0.5           # a constant does not rank
    assert discrimination_auroc([0.3, None, 0.8], [0, 1, 1]) == 1.0          # unparsed confidences dropped
    assert discrimination_auroc([0.3, 0.8], [1, 1]) == 0.5                   # one outcome: undefined -> 0.5
    ev = dict(conf=[0.9, 0.6, None, 0.2], correct=[True, True, False, False])
    out = calibration(ev)
    assert out["accuracy"] == 0.5 and out["brier_constant"] == pytest.approx(0.25)
    assert out["brier"] == pytest.approx(np.mean([0.01, 0.16, 1.0, 0.04]))
    assert out["auroc"] == 1.0
