"""Tests of RaR, Rubrics as Rewards (arXiv:2507.17746): Eq. 1, the Likert normalisation, the TRL reward
function in both aggregations, the Yes/No language-model judge, and the synthetic environment."""
from __future__ import annotations

import numpy as np
import pytest

from iclr26.posttraining.rar import (CATEGORY_WEIGHTS, Rubric, RubricItem, RubricReward, SimulatedJudge,
                                     TransformersYesNoJudge, as_rubric, criterion_prompt, explicit_reward,
                                     grpo_bandit, make_environment, normalize_likert, rubric_list_string)
from iclr26.posttraining.rar.environment import RubricEnvironment
from iclr26.posttraining.rar.reward import as_item


def keyword_judge(prompts, completions, items):
    """A criterion is satisfied when its description's last word occurs in the completion."""
    return [float(it.description.split()[-1].strip(".") in c) for c, it in zip(completions, items)]


RUBRIC = [{"description": "Mentions apples.", "category": "Essential"},
          {"description": "Mentions pears.", "category": "important"},
          {"description": "Mentions plums.", "category": "optional"},
          {"description": "Warns about safety.", "category": "pitfall"}]


# ---------------------------------------------------------------- Eq. 1 and the weights (Sec. 2.2, 4.4)
def test_category_weights_are_the_papers():
    assert CATEGORY_WEIGHTS == {"essential": 1.0, "important": 0.7, "optional": 0.3, "pitfall": 0.9}
    assert [RubricItem("x", c).weight for c in ("Essential", "IMPORTANT", "optional", "pitfall")] == [1.0, .7, .3, .9]
    assert RubricItem("x", "optional", 2.5).weight == 2.5


def test_explicit_reward_equation_against_numpy():
    rng = np.random.default_rng(0)
    for _ in range(20):
        k = int(rng.integers(1, 12))
        w = rng.uniform(0.1, 2.0, k)
        c = rng.integers(0, 2, k).astype(float)
        assert explicit_reward(c, w) == pytest.approx(float(np.dot(w, c) / w.sum()))
    # hand value: E, I, O, P with I missed: (1 + 0.3 + 0.9) / 2.9
    assert explicit_reward([1, 0, 1, 1], [1.0, 0.7, 0.3, 0.9]) == pytest.approx(2.2 / 2.9)
    assert explicit_reward([0.5, 1.0], [1.0, 1.0]) == pytest.approx(0.75)    # continuous extension


def test_reduction_to_rlvr_single_essential_criterion():
    # Remark 1: k = 1, w = 1, c_1 = match(y, y_hat) gives the verifiable reward
    reward = RubricReward(keyword_judge, "explicit")
    out = reward(["q", "q"], ["it is 42", "it is 41"], rubric=[["The answer is 42"]] * 2)
    assert out == [1.0, 0.0]


def test_uniform_weights_give_the_mean_verdict():
    reward = RubricReward(keyword_judge, "explicit", weights={c: 1.0 for c in CATEGORY_WEIGHTS})
    assert reward(["q"], ["apples and plums"], rubric=[RUBRIC]) == [pytest.approx(0.5)]
    partial = RubricReward(keyword_judge, "explicit", weights={"optional": 3.0})
    # apples (1.0) + plums (now 3.0) over 1 + 0.7 + 3 + 0.9
    assert partial(["q"], ["apples and plums"], rubric=[RUBRIC]) == [pytest.approx(4.0 / 5.6)]


def test_explicit_reward_rejects_bad_input():
    with pytest.raises(ValueError, match="one verdict per weight"):
        explicit_reward([1, 0], [1.0])
    with pytest.raises(ValueError, match="at least one"):
        explicit_reward([], [])
    with pytest.raises(ValueError, match=r"verdicts must lie in \[0, 1\]"):
        explicit_reward([1.5], [1.0])
    with pytest.raises(ValueError, match="weights must be > 0"):
        explicit_reward([1], [0.0])


def test_normalize_likert():
    assert normalize_likert(1) == 0.0 and normalize_likert(10) == 1.0
    assert normalize_likert(5.5) == pytest.approx(0.5)
    assert normalize_likert(3, low=1, high=5) == pytest.approx(0.5)
    with pytest.raises(ValueError, match=r"must lie in \[1.0, 10.0\]"):
        normalize_likert(11)
    with pytest.raises(ValueError, match="must lie in"):
        normalize_likert(0.5)
    with pytest.raises(ValueError, match="high > low"):
        normalize_likert(1, low=5, high=5)


# ---------------------------------------------------------------- rubric items
def test_items_and_rubrics_from_plain_data():
    assert as_item("Says hi") == RubricItem("Says hi", "essential")
    assert as_item({"criterion": "Says hi", "category": "Optional", "weight": 2}).weight == 2.0
    r = as_rubric(RUBRIC)
    assert len(r) == 4 and r.weights == [1.0, 0.7, 0.3, 0.9]
    assert as_rubric(r) is r
    assert [i.category for i in r] == ["essential", "important", "optional", "pitfall"]


def test_item_and_rubric_rejections():
    with pytest.raises(ValueError, match="category must be one of"):
        RubricItem("x", "critical")
    with pytest.raises(ValueError, match="weight must be a finite number > 0"):
        RubricItem("x", "pitfall", -1)
    with pytest.raises(ValueError, match="weight must be"):
        RubricItem("x", "pitfall", float("inf"))
    with pytest.raises(ValueError, match="non-empty string"):
        RubricItem("  ")
    with pytest.raises(ValueError, match="at least one item"):
        Rubric(())
    with pytest.raises(TypeError, match="RubricItem, a string or a mapping"):
        as_item(3)
    with pytest.raises(TypeError, match="a Rubric or a list of items"):
        as_rubric("one string")


def test_prompt_builders():
    s = rubric_list_string(RUBRIC)
    assert s.splitlines() == ["- [Essential] (weight 1) Mentions apples.", "- [Important] (weight 0.7) Mentions pears.",
                              "- [Optional] (weight 0.3) Mentions plums.", "- [Pitfall] (weight 0.9) Warns about safety."]
    q = criterion_prompt("What fruit?", "Apples.", "Mentions apples.")
    assert "<prompt>\nWhat fruit?\n</prompt>" in q and "<response>\nApples.\n</response>" in q
    assert "<criterion>\nMentions apples.\n</criterion>" in q and q.endswith("Answer Yes or No.")


# ---------------------------------------------------------------- the TRL reward function
def test_explicit_rubric_reward_trl_convention():
    reward = RubricReward(keyword_judge, "explicit")
    conv = [[{"role": "assistant", "content": "apples, pears and poison"}]]
    out = reward(prompts=[[{"role": "user", "content": "q"}]], completions=conv, rubric=[RUBRIC],
                 completion_ids=[[1]], trainer_state=None)
    assert out == [pytest.approx((1.0 + 0.7) / 2.9)]
    assert reward.__name__ == "rar_explicit"
    assert reward(None, ["pears"], rubric=[RUBRIC]) == [pytest.approx(0.7 / 2.9)]


def test_binary_thresholds_probabilistic_verdicts():
    def soft(prompts, completions, items):
        return [0.6 if "a" in it.description else 0.4 for it in items]
    rub = [["a", "b"]]   # two essential items
    assert RubricReward(soft, "explicit")(["q"], ["x"], rubric=rub) == [0.5]
    assert RubricReward(soft, "explicit", binary=False)(["q"], ["x"], rubric=rub) == [pytest.approx(0.5)]
    rub2 = [["a", "a"]]
    assert RubricReward(soft, "explicit")(["q"], ["x"], rubric=rub2) == [1.0]
    assert RubricReward(soft, "explicit", binary=False)(["q"], ["x"], rubric=rub2) == [pytest.approx(0.6)]
    exact = lambda p, c, items: [0.5 for _ in items]   # noqa: E731
    assert RubricReward(exact, "explicit")(["q"], ["x"], rubric=[["a"]]) == [1.0]


def test_implicit_rubric_reward_sees_whole_rubric():
    seen = []

    def holistic(prompts, completions, rubrics):
        seen.extend(rubrics)
        return [1 + 9 * explicit_reward([float(it.description.split()[-1].strip(".") in c) for it in r], r.weights)
                for c, r in zip(completions, rubrics)]
    reward = RubricReward(holistic, "implicit", rubric_key="rubrics")
    out = reward(["q", "q"], ["apples pears plums poison", "nothing"], rubrics=[RUBRIC, RUBRIC])
    assert out == [pytest.approx(2.0 / 2.9), 0.0]
    assert isinstance(seen[0], Rubric) and len(seen[0]) == 4
    assert RubricReward(lambda p, c, r: [3] * len(c), "implicit", likert_min=1, likert_max=5)(
        ["q"], ["x"], rubric=[RUBRIC]) == [0.5]


def test_rubric_reward_rejections():
    with pytest.raises(TypeError, match="judge must be callable"):
        RubricReward("gpt", "explicit")
    with pytest.raises(ValueError, match="'explicit' or 'implicit'"):
        RubricReward(keyword_judge, "holistic")
    with pytest.raises(ValueError, match="weights keys must be categories"):
        RubricReward(keyword_judge, weights={"critical": 1.0})
    with pytest.raises(ValueError, match="category weights must be > 0"):
        RubricReward(keyword_judge, weights={"pitfall": -1.0})
    with pytest.raises(ValueError, match="likert_max must exceed likert_min"):
        RubricReward(keyword_judge, "implicit", likert_min=10, likert_max=1)
    reward = RubricReward(keyword_judge)
    with pytest.raises(ValueError, match="no rubrics: pass them as the 'rubric' keyword"):
        reward(["q"], ["x"])
    with pytest.raises(ValueError, match="completions are required"):
        reward(["q"], rubric=[RUBRIC])
    with pytest.raises(ValueError, match="must have the same length"):
        reward(["q", "r"], ["x"], rubric=[RUBRIC])
    with pytest.raises(ValueError, match="must have the same length"):
        reward(["q"], ["x"], rubric=[RUBRIC, RUBRIC])
    with pytest.raises(TypeError, match="string or a list of chat messages"):
        reward(["q"], [3], rubric=[RUBRIC])
    with pytest.raises(ValueError, match="judge returned 1 verdicts for 4 criteria"):
        RubricReward(lambda p, c, i: [1.0])(["q"], ["x"], rubric=[RUBRIC])
    with pytest.raises(ValueError, match="judge returned 2 ratings for 1 completions"):
        RubricReward(lambda p, c, r: [5, 5], "implicit")(["q"], ["x"], rubric=[RUBRIC])
    with pytest.raises(ValueError, match="Likert rating must lie in"):
        RubricReward(lambda p, c, r: [0], "implicit")(["q"], ["x"], rubric=[RUBRIC])


# ---------------------------------------------------------------- the language-model judge
@pytest.fixture(scope="module")
def smol():
    from iclr26.models import load
    return load("smollm2-135m")


@pytest.mark.llm
def test_yes_no_judge_is_a_padding_invariant_probability(smol):
    model, tok = smol
    side = tok.padding_side
    judge1 = TransformersYesNoJudge(model, tok, batch_size=1)
    judge3 = TransformersYesNoJudge(model, tok, batch_size=3)
    prompts = ["What is 2 + 2?", "Name a fruit.", "What is the capital of France?"]
    comps = ["4", "An apple, which is a common and widely eaten fruit.", "Paris"]
    items = [RubricItem("The answer is 4."), RubricItem("Names a vegetable."), RubricItem("Mentions Paris.")]
    p1, p3 = judge1(prompts, comps, items), judge3(prompts, comps, items)
    assert len(p1) == 3 and all(0.0 < p < 1.0 for p in p1)
    assert p3 == pytest.approx(p1, abs=2e-3)           # left padding does not change a verdict
    assert tok.padding_side == side                      # the tokenizer is left as it was
    import torch
    text = judge1._format(prompts[0], comps[0], items[0])
    enc = tok([text], return_tensors="pt")
    with torch.no_grad():
        lo = model(**enc).logits[0, -1].float()
    ref = torch.softmax(lo[[judge1.yes_id, judge1.no_id]], 0)[0].item()
    assert p1[0] == pytest.approx(ref, abs=1e-5)         # P(Yes) / (P(Yes) + P(No)) of the next token
    assert text == tok.apply_chat_template([{"role": "user", "content": criterion_prompt(prompts[0], comps[0], items[0])}],
                                           tokenize=False, add_generation_prompt=True)
    assert TransformersYesNoJudge(model, tok).batch_size == 8
    assert (judge1.yes_id, judge1.no_id) == (tok.encode("Yes", add_special_tokens=False)[0],
                                             tok.encode("No", add_special_tokens=False)[0])
    with pytest.raises(ValueError, match=r"^prompts, completions and items must have the same length$"):
        judge1(prompts, comps, items[:2])
    with pytest.raises(ValueError, match="must have the same length"):
        judge1(prompts[:2], comps, items)
    pad = tok.pad_token
    try:                                                 # a tokenizer without a pad token gets EOS
        tok.pad_token = None
        assert judge3(prompts, comps, items) == pytest.approx(p1, abs=2e-3)
        assert tok.pad_token == tok.eos_token
    finally:
        tok.pad_token = pad
    raw = TransformersYesNoJudge(model, tok, use_chat_template=False)
    assert raw._format("p", "c", "crit") == criterion_prompt("p", "c", "crit") + "\nAnswer:"
    # end to end as the explicit judge of the TRL reward
    out = RubricReward(judge1)(prompts[:1], comps[:1], rubric=[[items[0]]])
    assert out in ([0.0], [1.0])


@pytest.mark.llm
def test_yes_no_judge_rejections(smol):
    model, tok = smol
    with pytest.raises(ValueError, match="batch_size must be a positive integer"):
        TransformersYesNoJudge(model, tok, batch_size=0)
    with pytest.raises(ValueError, match="must start with different tokens"):
        TransformersYesNoJudge(model, tok, yes="Yes", no="Yes")
    with pytest.raises(ValueError, match="must start with different tokens"):
        TransformersYesNoJudge(model, tok, yes="", no="No")


# ---------------------------------------------------------------- the synthetic environment
def test_environment_truth_is_eq1():
    env = make_environment(5, 6, np.random.default_rng(1))
    q = env.true_quality()
    assert q.shape == (5, 6)
    for i in range(5):
        for m in range(6):
            assert q[i, m] == pytest.approx(explicit_reward(env.satisfied[i, m].astype(float), env.rubrics[i].weights))
    assert env.known.sum(1).tolist() == [4] * 5                      # recall 0.5 of 8 criteria
    assert make_environment(2, 3, np.random.default_rng(0), recall=0.3).known.sum(1).tolist() == [2, 2]
    assert make_environment(2, 3, np.random.default_rng(0), recall=0.01).known.sum(1).tolist() == [1, 1]
    assert env.parse("prompt 3", env.completion(5)) == (3, 5)
    assert env.n_prompts == 5 and env.n_responses == 6


def test_environment_truth_tracks_ability():
    rng = np.random.default_rng(3)
    env = make_environment(400, 2, rng, slope=3.0)
    # a symmetric design: a random response satisfies about half of the criteria
    assert env.satisfied.mean() == pytest.approx(0.5, abs=0.03)
    flat = make_environment(400, 2, np.random.default_rng(3), slope=0.0)
    # with slope 0 the two responses of a prompt are unrelated given the difficulties; with a steep
    # slope the per-response quality spreads out far more
    assert env.true_quality().std() > flat.true_quality().std() + 0.05


def test_simulated_judges():
    env = make_environment(6, 5, np.random.default_rng(2))
    rows = [(i, m) for i in range(6) for m in range(5)]
    prompts = [env.prompts[i] for i, m in rows]
    comps = [env.completion(m) for i, m in rows]
    exact = SimulatedJudge(env, 0.0, "criterion", np.random.default_rng(0))
    items = [env.rubrics[i].items[j] for i, m in rows for j in range(8)]
    v = exact([p for p in prompts for _ in range(8)], [c for c in comps for _ in range(8)], items)
    assert v == env.satisfied.reshape(-1).astype(float).tolist()
    assert RubricReward(exact)(prompts, comps, rubric=[env.rubrics[i] for i, m in rows]) == \
        pytest.approx(env.true_quality().reshape(-1).tolist())
    flip = SimulatedJudge(env, 0.5, "criterion", np.random.default_rng(0))
    agree = np.mean(np.array(flip([p for p in prompts for _ in range(8)] * 20, [c for c in comps for _ in range(8)] * 20,
                                  items * 20)) == np.tile(env.satisfied.reshape(-1), 20))
    assert agree == pytest.approx(0.5, abs=0.05)
    holistic = SimulatedJudge(env, 0.0, "rubric", np.random.default_rng(0), rating_sd=0.0, weight_sd=0.0)
    r = np.array(holistic(prompts, comps, [None] * len(prompts)))
    assert r.tolist() == np.clip(np.rint(1 + 9 * env.true_quality().reshape(-1)), 1, 10).tolist()
    direct = SimulatedJudge(env, 0.0, "direct", np.random.default_rng(0), rating_sd=0.0)
    known = env.known[[i for i, m in rows]]
    sat = env.satisfied.reshape(-1, 8)
    want = np.rint(1 + 9 * (sat * known).sum(1) / known.sum(1))
    assert np.array(direct(prompts, comps, [None] * len(prompts))).tolist() == want.tolist()
    noisy = SimulatedJudge(env, 0.0, "rubric", np.random.default_rng(0), rating_sd=3.0)
    out = np.array(noisy(prompts * 10, comps * 10, [None] * 300))
    assert out.min() >= 1 and out.max() <= 10 and np.all(out == np.rint(out))
    assert np.mean(out != np.tile(r, 10)) > 0.3
    wobble = SimulatedJudge(env, 0.0, "rubric", np.random.default_rng(0), rating_sd=0.0, weight_sd=1.0)
    assert np.mean(np.array(wobble(prompts * 10, comps * 10, [None] * 300)) != np.tile(r, 10)) > 0.1


def test_environment_rejections():
    rng = np.random.default_rng(0)
    env = make_environment(2, 3, rng)
    with pytest.raises(ValueError, match="mode must be 'criterion', 'rubric' or 'direct'"):
        SimulatedJudge(env, 0.1, "likert", rng)
    with pytest.raises(ValueError, match=r"eps \(flip probability\) must lie in \[0, 0.5\]"):
        SimulatedJudge(env, 0.6, "criterion", rng)
    with pytest.raises(ValueError, match="must be >= 0"):
        SimulatedJudge(env, 0.1, "rubric", rng, rating_sd=-1)
    with pytest.raises(ValueError, match="must be >= 0"):
        SimulatedJudge(env, 0.1, "rubric", rng, weight_sd=-1)
    with pytest.raises(ValueError, match="need n_prompts >= 1 and n_responses >= 2"):
        make_environment(0, 3, rng)
    with pytest.raises(ValueError, match="need n_prompts >= 1 and n_responses >= 2"):
        make_environment(2, 1, rng)
    with pytest.raises(ValueError, match=r"recall must lie in \(0, 1\]"):
        make_environment(2, 3, rng, recall=0.0)
    with pytest.raises(ValueError, match="shape"):
        RubricEnvironment(env.rubrics, env.satisfied[0], env.known)
    with pytest.raises(ValueError, match="n_items items"):
        RubricEnvironment(env.rubrics, env.satisfied[..., :3], env.known)
    with pytest.raises(ValueError, match="need steps >= 0, group >= 2 and lr > 0"):
        grpo_bandit(env, lambda **k: [0.0], rng, group=1)
    with pytest.raises(ValueError, match="need steps"):
        grpo_bandit(env, lambda **k: [0.0], rng, lr=0.0)
    with pytest.raises(ValueError, match="need steps"):
        grpo_bandit(env, lambda **k: [0.0], rng, steps=-1)


def test_grpo_bandit_learns_the_reward_and_only_it():
    env = make_environment(8, 6, np.random.default_rng(4))
    q = env.true_quality()
    oracle = RubricReward(SimulatedJudge(env, 0.0, "criterion", np.random.default_rng(0)))
    assert np.allclose(grpo_bandit(env, oracle, np.random.default_rng(0), steps=0), 1 / 6)
    pol = grpo_bandit(env, oracle, np.random.default_rng(0), steps=40)
    assert np.allclose(pol.sum(1), 1.0)
    learned = (pol * q).sum(1).mean()
    assert learned > q.mean() + 0.5 * (q.max(1).mean() - q.mean())
    assert (pol.argmax(1) == q.argmax(1)).mean() >= 0.75
    # an anti-reward drives the policy to the worst responses
    anti = lambda **kw: [1 - x for x in oracle(**kw)]   # noqa: E731
    worst = grpo_bandit(env, anti, np.random.default_rng(0), steps=40)
    assert (worst * q).sum(1).mean() < q.mean()
    # a larger step size moves further in the same number of steps
    small = grpo_bandit(env, oracle, np.random.default_rng(0), steps=5, lr=0.2)
    big = grpo_bandit(env, oracle, np.random.default_rng(0), steps=5, lr=2.0)
    assert (big * q).sum(1).mean() > (small * q).sum(1).mean()
    # samples cover every response of a prompt: a reward paid only for the last response is found
    last = lambda prompts, completions, rubric: [float(c.endswith(" 5")) for c in completions]  # noqa: E731
    assert grpo_bandit(env, last, np.random.default_rng(1), steps=30)[:, 5].min() > 0.9
    key = lambda prompts, completions, crit: [0.0] * len(completions)   # noqa: E731
    assert np.allclose(grpo_bandit(env, key, np.random.default_rng(0), steps=3, rubric_key="crit"), 1 / 6)


# ---------------------------------------------------------------- the experiment's real-judge pairs
def test_judge_pairs_have_checked_truth_and_distinct_quality():
    from iclr26.posttraining.rar.experiment import (ANSWER_TYPES, PAIR_WEIGHTS, judge_pairs, pair_accuracy,
                                                    pair_response, pair_truth)
    rng = np.random.default_rng(0)
    pairs = judge_pairs(60, rng)
    assert PAIR_WEIGHTS == (1.0, 0.7, 0.3, 0.9)
    firsts = [p["first_better"] for p in pairs]
    assert 15 < sum(firsts) < 45                                   # the order is random
    for p in pairs:
        assert p["quality"][0] != p["quality"][1]
        assert len(p["rubric"]) == 4
        for cfg, resp, q in zip(p["configs"], p["responses"], p["quality"]):
            a, b, c = (int(x) for x in __import__("re").findall(r"\d+", p["prompt"])[:3])
            truth = pair_truth(resp, a, b, c)
            answer, work, unit = cfg
            assert truth == (float(answer == "correct"), float(work), float(unit), float(answer != "sign_error"))
            assert q == pytest.approx(explicit_reward(truth, PAIR_WEIGHTS))
    # the checker reads the text, not the label: a hand-written response
    assert pair_truth("60 - 20 = 40, so 40 + 10 = 50. The final answer is 50 apples.", 60, 20, 10) == (1.0, 1.0, 1.0, 1.0)
    assert pair_truth("The final answer is 30.", 60, 20, 10) == (0.0, 0.0, 0.0, 0.0)   # the sign error
    assert pair_response(60, 20, 10, "sign_error", 1, 0, rng) == "First, 60 - 20 = 40. Then 40 - 10 = 30. The final answer is 30."
    assert set(ANSWER_TYPES) == {"correct", "slip", "sign_error"}
    with pytest.raises(ValueError, match="answer must be one of"):
        pair_response(60, 20, 10, "typo", 1, 0, rng)
    with pytest.raises(ValueError, match="states no final answer"):
        pair_truth("It is 50.", 60, 20, 10)
    two = [dict(first_better=True), dict(first_better=False)]
    assert pair_accuracy([(0.9, 0.1), (0.9, 0.1)], two) == [1.0, 0.0]
    assert pair_accuracy([(0.5, 0.5), (0.2, 0.7)], two) == [0.5, 1.0]


class _DigitTok:
    """A stand-in tokenizer: Yes/No and the digits are single distinct tokens."""
    padding_side, pad_token, eos_token, chat_template = "right", "<p>", "<e>", None

    def encode(self, s, add_special_tokens=False):
        return [{"Yes": 1, "No": 2}.get(s, 3 + int(s) if s.isdigit() else 15)]

    def __len__(self):
        return 16

    def __call__(self, texts, return_tensors=None, padding=None):
        import torch
        return {"input_ids": torch.tensor([[len(t) % 7, 1] for t in texts])}


class _ConstModel:
    """Next-token logits that do not depend on the input: every response gets the same score."""
    device = "cpu"

    def __call__(self, input_ids, logits_to_keep=None):
        import torch
        lo = torch.arange(16, dtype=torch.float32).repeat(input_ids.shape[0], 1, 1)
        return type("O", (), {"logits": lo})()


def test_judge_alignment_with_a_scripted_model_and_arms():
    pytest.importorskip("torch")
    from iclr26.posttraining.rar.experiment import judge_alignment, judge_pairs
    pairs = judge_pairs(3, np.random.default_rng(1))
    acc, raw = judge_alignment(_ConstModel(), _DigitTok(), pairs, 2)
    assert set(acc) == {"rar_explicit", "rar_implicit", "direct_likert"}
    for arm in acc:                                   # a judge blind to the input ties every pair
        assert acc[arm] == [0.5, 0.5, 0.5] and len(raw[arm]) == 6
    assert raw["rar_explicit"] == [0.0] * 6           # P(No) > P(Yes): every criterion fails
    acc, _ = judge_alignment(_ConstModel(), _DigitTok(), pairs, 4, ("direct_likert",))
    assert list(acc) == ["direct_likert"]
    with pytest.raises(ValueError, match="arms must be a non-empty subset"):
        judge_alignment(_ConstModel(), _DigitTok(), pairs, 2, ("oracle",))
    with pytest.raises(ValueError, match="arms must be a non-empty subset"):
        judge_alignment(_ConstModel(), _DigitTok(), pairs, 2, ())


@pytest.mark.slow
@pytest.mark.llm
def test_quick_scale_seed_runs():
    from iclr26.posttraining.rar.experiment import run
    m = run("quick", 0)["metrics"]
    assert m["true_quality"]["oracle"] >= m["true_quality"]["rar_explicit"] > m["true_quality"]["uniform_policy"]
    assert set(m["pair_accuracy"]) == {"rar_implicit", "direct_likert"}
    assert all(len(v) == 4 for v in m["pair_accuracy"].values())


# ---------------------------------------------------------------- exact messages, defaults and references
def test_exact_rejection_messages():
    with pytest.raises(ValueError, match=r"^rubric item description must be a non-empty string$"):
        RubricItem("")
    with pytest.raises(ValueError, match=r"^a rubric needs at least one item$"):
        Rubric(())
    with pytest.raises(ValueError, match=r"weight must be a finite number > 0"):
        RubricItem("x", "essential", 0.0)
    with pytest.raises(TypeError, match=r"got int$"):
        as_item(3)
    with pytest.raises(TypeError, match=r"got int$"):
        as_rubric(3)
    with pytest.raises(TypeError, match=r"^judge must be callable, got str$"):
        RubricReward("gpt")
    with pytest.raises(ValueError, match=r"^category weights must be > 0$"):
        RubricReward(keyword_judge, weights={"optional": 0.0})
    with pytest.raises(ValueError, match="likert_max must exceed likert_min"):
        RubricReward(keyword_judge, "implicit", likert_min=5, likert_max=5)
    reward = RubricReward(keyword_judge)
    with pytest.raises(ValueError, match=r"^completions are required$"):
        reward(["q"], rubric=[RUBRIC])
    with pytest.raises(ValueError, match=r"^prompts \(2\), completions \(1\) and rubrics \(1\) must have the same length$"):
        reward(["q", "r"], ["x"], rubric=[RUBRIC])
    with pytest.raises(TypeError, match=r"got int$"):
        reward(["q"], [3], rubric=[RUBRIC])
    env = make_environment(2, 3, np.random.default_rng(0))
    with pytest.raises(ValueError, match=r"^every rubric must have n_items items$"):
        RubricEnvironment(env.rubrics, env.satisfied[..., :3], env.known)
    with pytest.raises(ValueError, match="n_prompts = 2"):
        RubricEnvironment(env.rubrics, env.satisfied[:1], env.known)
    with pytest.raises(ValueError, match=r"^rating_sd and weight_sd must be >= 0$"):
        SimulatedJudge(env, 0.1, "rubric", np.random.default_rng(0), rating_sd=-1)


def test_defaults_are_the_documented_ones():
    import inspect
    d = {k: v.default for k, v in inspect.signature(grpo_bandit).parameters.items()}
    assert (d["steps"], d["group"], d["lr"]) == (50, 16, 1.0)            # 16 samples per prompt (Sec. 4.2)
    d = {k: v.default for k, v in inspect.signature(make_environment).parameters.items()}
    assert (d["slope"], d["recall"]) == (1.5, 0.5)
    d = {k: v.default for k, v in inspect.signature(SimulatedJudge).parameters.items()}
    assert (d["rating_sd"], d["weight_sd"]) == (1.0, 0.3)
    assert as_item({"description": "x"}).category == "essential"
    assert criterion_prompt("p", "c", "d").startswith(
        "You are an expert evaluator. Decide whether the response satisfies the criterion.\n<prompt>")


def test_reward_passes_prompts_to_the_judge():
    seen = []

    def rec(prompts, completions, things):
        seen.append(list(prompts))
        return [5.0] * len(completions)
    RubricReward(rec, "implicit")(["p1", "p2"], ["a", "b"], rubric=[RUBRIC, RUBRIC])
    RubricReward(rec, "implicit")(None, ["a"], rubric=[RUBRIC])
    assert seen == [["p1", "p2"], [""]]


def test_boundaries_accepted():
    rng = np.random.default_rng(0)
    env = make_environment(1, 2, rng, recall=1.0)
    assert env.known.all()
    pol = grpo_bandit(env, RubricReward(SimulatedJudge(env, 0.0, "criterion", rng)), rng, steps=1, group=2)
    assert pol.shape == (1, 2)


def test_grpo_step_against_a_hand_reference():
    env = make_environment(2, 3, np.random.default_rng(0))
    scale = {"prompt 0": 1.0, "prompt 1": 10.0}

    def reward(prompts, completions, rubric):
        return [scale[p] * (1 + int(c.rsplit(" ", 1)[1])) for p, c in zip(prompts, completions)]
    for lr in (0.5, 2.0):
        pol = grpo_bandit(env, reward, np.random.default_rng(7), steps=1, group=4, lr=lr)
        u = np.random.default_rng(7).random((2, 4))
        theta = np.zeros((2, 3))
        for i in range(2):
            p = np.full(3, 1 / 3)
            a = np.searchsorted(np.cumsum(p), u[i], side="right")
            r = scale[f"prompt {i}"] * (1 + a)
            adv = (r - r.mean()) / (r.std() + 1e-4)
            theta[i] = lr * np.mean([adv[g] * (np.eye(3)[a[g]] - p) for g in range(4)], axis=0)
        ref = np.exp(theta) / np.exp(theta).sum(1, keepdims=True)
        assert pol == pytest.approx(ref, abs=1e-9)


def test_rating_noise_is_per_rating_and_gaussian():
    env = make_environment(20, 8, np.random.default_rng(5))
    q = env.true_quality()
    i, m = np.unravel_index(np.abs(q - 0.5).argmin(), q.shape)
    judge = SimulatedJudge(env, 0.0, "rubric", np.random.default_rng(0), rating_sd=1.0, weight_sd=0.0)
    r = np.array(judge([f"prompt {i}"] * 400, [f"response {m}"] * 400, [None] * 400))
    assert len(set(r.tolist())) >= 4                    # independent noise per rating
    assert 0.8 < r.std() < 1.4                          # sd 1 before rounding (plus rounding)
    assert abs(r.mean() - (1 + 9 * q[i, m])) < 0.3


# ---------------------------------------------------------------- verdict validation (NaN must raise)
@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -0.1, 1.5])
def test_bad_verdicts_raise_before_thresholding(bad):
    judge = lambda p, c, items: [1.0] * (len(items) - 1) + [bad]   # noqa: E731
    for binary in (True, False):
        with pytest.raises(ValueError, match=r"judge verdict 3 must be a finite number in \[0, 1\]"):
            RubricReward(judge, binary=binary)(["q"], ["x"], rubric=[RUBRIC])
    with pytest.raises(TypeError, match="judge verdict 0 must be a number"):
        RubricReward(lambda p, c, items: ["yes"] * len(items))(["q"], ["x"], rubric=[RUBRIC])


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_bad_ratings_raise(bad):
    with pytest.raises(ValueError, match="judge rating 1 must be finite"):
        RubricReward(lambda p, c, r: [5.0, bad], "implicit")(["q", "q"], ["x", "y"], rubric=[RUBRIC, RUBRIC])
    with pytest.raises(TypeError, match="judge rating 0 must be a number"):
        RubricReward(lambda p, c, r: [None], "implicit")(["q"], ["x"], rubric=[RUBRIC])


def test_yes_no_judge_nan_probability_raises_in_the_reward():
    """A judge whose model returns NaN logits gives NaN probabilities; the reward must refuse them."""
    torch = pytest.importorskip("torch")

    class Tok:
        padding_side, pad_token, eos_token, chat_template = "right", "<p>", "<e>", None

        def encode(self, s, add_special_tokens=False):
            return [{"Yes": 1, "No": 2}.get(s, 3)]

        def __len__(self):
            return 4

        def __call__(self, texts, return_tensors=None, padding=None):
            return {"input_ids": torch.zeros(len(texts), 2, dtype=torch.long)}

    class NanModel:
        device = "cpu"

        def __call__(self, input_ids, logits_to_keep=None):
            return type("O", (), {"logits": torch.full((input_ids.shape[0], 1, 4), float("nan"))})()

    judge = TransformersYesNoJudge(NanModel(), Tok())
    with pytest.raises(ValueError, match="judge verdict 0 must be a finite number"):
        RubricReward(judge)(["q"], ["x"], rubric=[RUBRIC])


# ---------------------------------------------------------------- the Likert judge (RaR-Implicit, Direct-Likert)
def test_likert_prompt_with_and_without_rubric():
    from iclr26.posttraining.rar import likert_prompt
    with_r = likert_prompt("What?", "Answer.", RUBRIC)
    without = likert_prompt("What?", "Answer.")
    assert rubric_list_string(RUBRIC) in with_r and "rubric" not in without.lower()
    assert with_r.startswith(without.rsplit("Answer with", 1)[0])
    assert without.endswith("Answer with a single digit from 1 to 9.")


@pytest.mark.llm
def test_likert_judge_expected_rating(smol):
    import torch

    from iclr26.posttraining.rar import TransformersLikertJudge, likert_prompt
    model, tok = smol
    j1 = TransformersLikertJudge(model, tok, batch_size=1)
    j2 = TransformersLikertJudge(model, tok, batch_size=2)
    jd = TransformersLikertJudge(model, tok, use_rubric=False, batch_size=2)
    prompts, comps = ["What is 2 + 2?", "Name a fruit."], ["4", "An apple, a common fruit."]
    rubs = [as_rubric(["The answer is 4."]), as_rubric(["Names a fruit."])]
    r1, r2, rd = j1(prompts, comps, rubs), j2(prompts, comps, rubs), jd(prompts, comps, rubs)
    assert all(1.0 <= r <= 9.0 for r in r1 + rd)
    assert r2 == pytest.approx(r1, abs=2e-2)                      # left padding does not change a rating
    text = j1._format(prompts[0], comps[0], rubs[0])
    assert text == tok.apply_chat_template([{"role": "user", "content": likert_prompt(prompts[0], comps[0], rubs[0])}],
                                           tokenize=False, add_generation_prompt=True)
    assert "rubric" not in jd._format(prompts[0], comps[0], rubs[0]).split("<response>")[1].lower()
    with torch.no_grad():
        lo = model(**tok([text], return_tensors="pt")).logits[0, -1].float()
    p = torch.softmax(lo[j1.ids], 0)
    assert r1[0] == pytest.approx(float((p * torch.arange(1, 10)).sum()), abs=1e-4)
    out = RubricReward(j1, "implicit", likert_min=1, likert_max=9)(prompts, comps, rubric=rubs)
    assert out == pytest.approx([(r - 1) / 8 for r in r1])
    with pytest.raises(ValueError, match="must have the same length"):
        j1(prompts, comps[:1], rubs)
    with pytest.raises(ValueError, match="batch_size must be a positive integer"):
        TransformersLikertJudge(model, tok, batch_size=0)
    with pytest.raises(ValueError, match="low and high must be single digits"):
        TransformersLikertJudge(model, tok, low=1, high=10)
