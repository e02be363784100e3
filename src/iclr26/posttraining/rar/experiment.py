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
    (1)-(4) are exploratory: the generator sets their direction (the rubric-free judge is assumed
    to see half of the criteria).
(5) Real judge, real responses (the headline, Sec. 5 judge alignment): two-step word problems with an
    instance-specific 4-item rubric (one item per Sec. 4.4 category); two response texts per problem
    of different true quality (Eq. 1 over a checker's reading of the text). The bundled
    Qwen2.5-Coder-0.5B-Instruct rates each response with the rubric (RaR-Implicit, Eq. 2,
    :class:`~.reward.TransformersLikertJudge`) and without it (Direct-Likert), optionally per
    criterion (RaR-Explicit, :class:`~.reward.TransformersYesNoJudge`, Eq. 1); the metric is
    pairwise agreement with the true ranking, one value per pair (the unit).
"""
from __future__ import annotations

import numpy as np

from iclr26.common.seeding import seed_everything

from .environment import SimulatedJudge, grpo_bandit, make_environment
from .reward import (CATEGORY_WEIGHTS, Rubric, RubricItem, RubricReward, TransformersLikertJudge,
                     TransformersYesNoJudge, explicit_reward)

SCALES = {
    "smoke": dict(n_prompts=4, n_responses=4, steps=3, group=4, lr=1.0, recall=0.5, eps=(0.05, 0.15, 0.3),
                  headline=0.15, judge="smollm2-135m", judge_dtype=None, judge_pairs=1, judge_batch=2,
                  judge_arms=("rar_explicit", "rar_implicit", "direct_likert")),
    # the real-judge part is the CPU cost (tens of seconds per judge call of the 0.5B model on a shared
    # core): 2 pairs per seed x 2 responses x the two holistic arms; RaR-Explicit (4 calls per response)
    # runs at smoke and paper scale
    "quick": dict(n_prompts=32, n_responses=8, steps=50, group=16, lr=1.0, recall=0.5, eps=(0.05, 0.15, 0.3),
                  headline=0.15, judge="qwen2.5-coder-0.5b", judge_dtype="bfloat16", judge_pairs=2, judge_batch=4,
                  judge_arms=("rar_implicit", "direct_likert")),
    # the paper: Qwen2.5-7B policy, GRPO (16 samples per prompt, batch 96, lr 5e-6, 300 steps) on
    # RaR-Medicine / RaR-Science (20k prompts, 7-20 rubric items each), judge gpt-4o-mini;
    # HealthBench / GPQA-Diamond evaluation. Not runnable here; the synthetic stand-in at its largest:
    "paper": dict(n_prompts=1000, n_responses=16, steps=300, group=16, lr=1.0, recall=0.5, eps=(0.05, 0.15, 0.3),
                  headline=0.15, judge="qwen2.5-coder-0.5b", judge_dtype="bfloat16", judge_pairs=30, judge_batch=8,
                  judge_arms=("rar_explicit", "rar_implicit", "direct_likert")),
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


# ---------------------------------------------------------------- real judge, real responses
#: the answer types of a pair response: the correct total, an arithmetic slip, or the classic
#: sign error (the delivery subtracted instead of added; the rubric's pitfall)
ANSWER_TYPES = ("correct", "slip", "sign_error")
PAIR_WEIGHTS = (CATEGORY_WEIGHTS["essential"], CATEGORY_WEIGHTS["important"], CATEGORY_WEIGHTS["optional"],
                CATEGORY_WEIGHTS["pitfall"])


def pair_problem(rng):
    """One two-step word problem ``(prompt, a, b, c)``: start with a, sell b, receive c; a - b > c."""
    while True:
        a = int(rng.integers(50, 99))
        b = int(rng.integers(11, a - 20))
        c = int(rng.integers(11, 60))
        if a - b > c + 1:
            break
    prompt = (f"A shop has {a} apples. It sells {b} of them and then receives a delivery of {c} more apples. "
              "How many apples does the shop have now?")
    return prompt, a, b, c


def pair_rubric(a, b, c) -> Rubric:
    """The instance-specific rubric of one problem (one item per category of Sec. 4.4; the pitfall
    is phrased positively, as in the paper)."""
    return Rubric((RubricItem(f"The final answer given is {a - b + c}.", "essential"),
                   RubricItem(f"The response shows the intermediate step {a} - {b} = {a - b}.", "important"),
                   RubricItem("The final answer is stated together with its unit (apples).", "optional"),
                   RubricItem("The response avoids subtracting the delivered apples instead of adding them.",
                              "pitfall")))


def pair_response(a, b, c, answer, work, unit, rng):
    """A response text with the given features; the final number follows ``answer``."""
    mid = a - b
    if answer == "correct":
        x, op = mid + c, "+"
    elif answer == "slip":
        x, op = mid + c + int(rng.choice([-3, -2, -1, 1, 2, 3])), "+"
    elif answer == "sign_error":
        x, op = mid - c, "-"
    else:
        raise ValueError(f"answer must be one of {ANSWER_TYPES}, got {answer!r}")
    text = f"First, {a} - {b} = {mid}. Then {mid} {op} {c} = {x}. " if work else ""
    return text + (f"The final answer is {x} apples." if unit else f"The final answer is {x}.")


def pair_truth(response, a, b, c):
    """Programmatic truth of the four rubric items of :func:`pair_rubric`, read from the text."""
    import re

    m = re.search(r"final answer is (-?\d+)", response)
    if m is None:
        raise ValueError(f"response states no final answer: {response!r}")
    x = int(m.group(1))
    return (float(x == a - b + c), float(f"{a} - {b} = {a - b}" in response),
            float(re.search(r"final answer is -?\d+ apples", response) is not None), float(x != a - b - c))


def judge_pairs(n, rng):
    """``n`` prompts, each with two responses of different true rubric score (Eq. 1 over
    :func:`pair_truth`, the Sec. 4.4 weights). Returns dicts with the prompt, rubric, both responses,
    their true scores and ``first_better``. The order of the two responses is random."""
    configs = [(t, w, u) for t in ANSWER_TYPES for w in (0, 1) for u in (0, 1)]
    out = []
    for _ in range(n):
        prompt, a, b, c = pair_problem(rng)
        while True:
            i, j = rng.choice(len(configs), size=2, replace=False)
            r = [pair_response(a, b, c, *configs[k], rng) for k in (i, j)]
            q = [explicit_reward(pair_truth(t, a, b, c), PAIR_WEIGHTS) for t in r]
            if abs(q[0] - q[1]) > 1e-9:
                break
        out.append(dict(prompt=prompt, rubric=pair_rubric(a, b, c), responses=r, quality=q,
                        first_better=bool(q[0] > q[1]), configs=(configs[i], configs[j])))
    return out


def pair_accuracy(scores, pairs):
    """Per pair: 1 when the judge scores the better response higher, 0.5 on a tie, 0 otherwise."""
    acc = []
    for (s0, s1), p in zip(scores, pairs):
        d = (s0 - s1) if p["first_better"] else (s1 - s0)
        acc.append(1.0 if d > 1e-9 else 0.5 if abs(d) <= 1e-9 else 0.0)
    return acc


def judge_alignment(model, tok, pairs, batch, arms=("rar_explicit", "rar_implicit", "direct_likert")):
    """Pairwise agreement with the true ranking of three reward functions built from one LM:
    RaR-Explicit (per-criterion Yes/No verdicts, binary, Eq. 1), RaR-Implicit (one Likert rating with
    the rubric, Eq. 2) and Direct-Likert (one Likert rating, no rubric)."""
    prompts = [p["prompt"] for p in pairs for _ in (0, 1)]
    comps = [r for p in pairs for r in p["responses"]]
    rubrics = [p["rubric"] for p in pairs for _ in (0, 1)]
    rewards = {
        "rar_explicit": RubricReward(TransformersYesNoJudge(model, tok, batch_size=batch), "explicit"),
        "rar_implicit": RubricReward(TransformersLikertJudge(model, tok, use_rubric=True, batch_size=batch),
                                     "implicit", likert_min=1, likert_max=9),
        "direct_likert": RubricReward(TransformersLikertJudge(model, tok, use_rubric=False, batch_size=batch),
                                      "implicit", likert_min=1, likert_max=9),
    }
    bad = sorted(set(arms) - set(rewards))
    if bad or not arms:
        raise ValueError(f"arms must be a non-empty subset of {sorted(rewards)}, got {list(arms)}")
    acc, raw = {}, {}
    for arm in arms:
        fn = rewards[arm]
        r = fn(prompts=prompts, completions=comps, rubric=rubrics)
        raw[arm] = r
        acc[arm] = pair_accuracy(list(zip(r[0::2], r[1::2])), pairs)
    return acc, raw


def real_judge(cfg, seed):
    """Load the judge LM, score this seed's pairs with every arm; the model is freed afterwards."""
    import gc

    import torch

    from iclr26.models import load

    pairs = judge_pairs(cfg["judge_pairs"], np.random.default_rng([seed, 99]))
    model, tok = load(cfg["judge"], dtype=cfg["judge_dtype"])
    try:
        acc, raw = judge_alignment(model, tok, pairs, cfg["judge_batch"], cfg["judge_arms"])
    finally:
        del model
        gc.collect()
        torch.set_num_threads(1)
    return acc, raw, pairs


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
    acc, raw, pairs = real_judge(cfg, seed)
    return {
        "metrics": {
            "true_quality": {**head, "uniform_policy": float(q.mean()), "oracle": float(q.max(1).mean())},
            "quality_drop": {arm: lo[arm] - hi[arm] for arm in arms},
            "pair_accuracy": acc,
        },
        "info": {
            "quality_by_eps": {str(e): v for e, v in by_eps.items()},
            "judge": cfg["judge"], "judge_scores": raw,
            "pair_quality": [p["quality"] for p in pairs], "pair_configs": [p["configs"] for p in pairs],
        },
    }
