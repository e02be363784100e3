"""Claim checks for RaR, Rubrics as Rewards (arXiv:2507.17746). Every claim runs this package's code.

(1)-(3) Synthetic rubric environment (:mod:`.environment`): per seed, one independently drawn
    environment (32 prompts, 8 candidate responses each, an 8-item rubric per prompt with latent
    per-criterion truth). A tabular GRPO policy (16 samples per prompt, as in Sec. 4.2) is trained
    on the rewards of :class:`~.reward.RubricReward` fed by a simulated judge of error rate ``eps``:
    RaR-Explicit (per-criterion verdicts, Eq. 1, Sec. 4.4 weights), RaR-Implicit (one holistic
    Likert rating given the rubric, Eq. 2), Direct-Likert (one holistic Likert rating without the
    rubric: the judge considers only the half of the criteria it would think of unprompted) and the
    control RaR-Predefined (explicit aggregation with uniform weights over those same recalled,
    non-instance-specific criteria: the aggregation channel of RaR-Explicit without the rubric's
    information). Measured: the true rubric score (Eq. 1 over the latent truth) of the trained
    policy. One seed = one environment, one set of judges and one training run per arm (the unit).
(4) Robustness to judge noise: the loss in true quality between the strongest (eps = 0.05) and the
    weakest (eps = 0.3) simulated judge, per arm.
(5) Real-model part: the bundled Qwen2.5-Coder-1.5B-Instruct (bfloat16) as a per-criterion judge
    (:class:`~.reward.TransformersYesNoJudge`, Yes/No next-token likelihood) on programmatic rubric
    items about arithmetic word-problem answers, whose truth a checker computes from the text;
    agreement with that truth against the chance level of the balanced design.
"""
from __future__ import annotations

import numpy as np

from iclr26.common.seeding import seed_everything

from .environment import SimulatedJudge, grpo_bandit, make_environment
from .reward import CATEGORY_WEIGHTS, Rubric, RubricItem, RubricReward, TransformersYesNoJudge

SCALES = {
    "smoke": dict(n_prompts=4, n_responses=4, steps=3, group=4, lr=1.0, recall=0.5, eps=(0.05, 0.15, 0.3),
                  headline=0.15, llm="smollm2-135m", llm_dtype=None, llm_items=2, llm_batch=2),
    "quick": dict(n_prompts=32, n_responses=8, steps=50, group=16, lr=1.0, recall=0.5, eps=(0.05, 0.15, 0.3),
                  headline=0.15, llm="qwen2.5-coder-1.5b", llm_dtype="bfloat16", llm_items=6, llm_batch=6),
    # the paper: Qwen2.5-7B policy, GRPO (16 samples per prompt, batch 96, lr 5e-6, 300 steps) on
    # RaR-Medicine / RaR-Science (20k prompts, 7-20 rubric items each), judge gpt-4o-mini;
    # HealthBench / GPQA-Diamond evaluation. Not runnable here; the synthetic stand-in at its largest:
    "paper": dict(n_prompts=1000, n_responses=16, steps=300, group=16, lr=1.0, recall=0.5, eps=(0.05, 0.15, 0.3),
                  headline=0.15, llm="qwen2.5-coder-1.5b", llm_dtype="bfloat16", llm_items=60, llm_batch=8),
}
SEEDS = {"smoke": 1, "quick": 10, "paper": 10}

UNIFORM = {c: 1.0 for c in CATEGORY_WEIGHTS}   # RaR-Predefined: all criteria weighted uniformly (Sec. 4.4)


def _train(env, seed, arm, eps, cfg):
    """True quality of the policy GRPO trains on ``arm``'s reward with a judge of error rate ``eps``.
    Every arm of a seed starts from the same environment and draws its own judge noise and samples
    from streams fixed by (seed, arm, eps)."""
    tag = int(round(eps * 1000))
    code = {"rar_explicit": 1, "rar_implicit": 2, "direct_likert": 3, "rar_predefined": 4}[arm]
    judge_rng = np.random.default_rng([seed, code, tag, 1])
    mode = {"rar_explicit": "criterion", "rar_implicit": "rubric", "direct_likert": "direct",
            "rar_predefined": "criterion"}[arm]
    judge = SimulatedJudge(env, eps, mode, judge_rng)
    if arm == "rar_explicit":
        reward = RubricReward(judge, "explicit")
    elif arm == "rar_predefined":
        reward = RubricReward(judge, "explicit", weights=UNIFORM)
    else:
        reward = RubricReward(judge, "implicit")
    if arm == "rar_predefined":   # the generic rubric: the criteria a judge recalls unprompted
        generic = {p: Rubric(tuple(it for it, k in zip(r, env.known[i]) if k))
                   for i, (p, r) in enumerate(zip(env.prompts, env.rubrics))}
        inner = reward
        reward = lambda prompts, completions, rubric: inner(prompts, completions,   # noqa: E731
                                                            rubric=[generic[p] for p in prompts])
    pol = grpo_bandit(env, reward, np.random.default_rng([seed, code, tag, 2]), steps=cfg["steps"],
                      group=cfg["group"], lr=cfg["lr"])
    return float((pol * env.true_quality()).sum(1).mean())


# ---------------------------------------------------------------- real-model judge items
def judge_items(n, rng):
    """``n`` programmatic rubric items (prompt, response, criterion, truth, type), truth balanced.

    The truth is computed from the response text by :func:`check`, never copied from the label the
    generator aimed at (the two are asserted equal)."""
    items = []
    labels = np.array([i % 2 for i in range(n)], dtype=bool)
    rng.shuffle(labels)
    for i in range(n):
        a, b = (int(x) for x in rng.integers(12, 90, size=2))
        ans = a + b
        kind = ("answer", "steps", "sentence", "units")[int(rng.integers(4))]
        prompt = f"Tom has {a} apples and buys {b} more. How many apples does he have now?"
        lab = bool(labels[i])
        if kind == "answer":
            x = ans if lab else ans + int(rng.choice([-10, -2, -1, 1, 2, 10]))
            resp = f"He adds {a} and {b}. The final answer is {x} apples."
            crit = f"The response states that the final answer is {ans}."
        elif kind == "steps":
            resp = (f"{a} + {b} = {ans}. The final answer is {ans} apples." if lab
                    else f"The final answer is {ans} apples.")
            crit = f"The response writes out the addition {a} + {b} before giving the final answer."
        elif kind == "sentence":
            resp = (f"Tom now has {ans} apples." if lab
                    else f"Tom had {a} apples. He bought {b} more. So he now has {ans} apples.")
            crit = "The response consists of exactly one sentence."
        else:
            resp = f"The final answer is {ans} apples." if lab else f"The final answer is {ans}."
            crit = "The response states the unit 'apples' together with the final answer."
        truth = check(kind, resp, a, b)
        assert truth == lab, (kind, resp)
        items.append(dict(prompt=prompt, response=resp, criterion=crit, truth=truth, kind=kind))
    return items


def check(kind, response, a, b):
    """Programmatic truth of one item type."""
    import re

    if kind == "answer":
        m = re.search(r"final answer is (-?\d+)", response)
        return bool(m) and int(m.group(1)) == a + b
    if kind == "steps":
        return f"{a} + {b}" in response.split("final answer")[0]
    if kind == "sentence":
        return len([s for s in re.split(r"[.!?]", response) if s.strip()]) == 1
    if kind == "units":
        return bool(re.search(r"final answer is \d+ apples", response))
    raise ValueError(f"unknown item kind {kind!r}")


def cohen_kappa(pred, truth):
    pred, truth = np.asarray(pred, bool), np.asarray(truth, bool)
    po = float(np.mean(pred == truth))
    pe = float(pred.mean() * truth.mean() + (1 - pred.mean()) * (1 - truth.mean()))
    return 0.0 if pe == 1 else (po - pe) / (1 - pe)


def llm_agreement(cfg, seed):
    import gc

    import torch

    from iclr26.models import load

    items = judge_items(cfg["llm_items"], np.random.default_rng([seed, 99]))
    model, tok = load(cfg["llm"], dtype=cfg["llm_dtype"])
    try:
        judge = TransformersYesNoJudge(model, tok, batch_size=cfg["llm_batch"])
        p_yes = judge([it["prompt"] for it in items], [it["response"] for it in items],
                      [RubricItem(it["criterion"]) for it in items])
    finally:
        del model
        gc.collect()
        torch.set_num_threads(1)
    pred = [p >= 0.5 for p in p_yes]
    truth = [it["truth"] for it in items]
    return pred, truth, p_yes, items


def run(scale: str, seed: int) -> dict:
    import torch

    torch.set_num_threads(1)
    cfg = SCALES[scale]
    seed_everything(seed)
    env = make_environment(cfg["n_prompts"], cfg["n_responses"], np.random.default_rng([seed, 0]),
                           recall=cfg["recall"])
    q = env.true_quality()
    arms = ("rar_explicit", "rar_implicit", "direct_likert", "rar_predefined")
    by_eps = {eps: {arm: _train(env, seed, arm, eps, cfg) for arm in arms} for eps in cfg["eps"]}
    head = by_eps[cfg["headline"]]
    lo, hi = by_eps[min(cfg["eps"])], by_eps[max(cfg["eps"])]
    pred, truth, p_yes, items = llm_agreement(cfg, seed)
    correct = [float(p == t) for p, t in zip(pred, truth)]
    return {
        "metrics": {
            "true_quality": {**head, "uniform_policy": float(q.mean()), "oracle": float(q.max(1).mean())},
            "quality_drop": {arm: lo[arm] - hi[arm] for arm in arms},
            "judge_correct": {"llm_judge": correct},
        },
        "info": {
            "quality_by_eps": {str(e): v for e, v in by_eps.items()},
            "llm": cfg["llm"], "p_yes": p_yes, "truth": [float(t) for t in truth],
            "kinds": [it["kind"] for it in items], "kappa": cohen_kappa(pred, truth),
        },
    }
