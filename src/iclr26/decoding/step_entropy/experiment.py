"""Step-entropy pruning claim check (arXiv:2508.03346, Sec. 4.1 / Fig. 1 / Table 1).

The model writes its own greedy chain of thought for each problem. The chain is cut before its
answer statement (the paragraph that writes the final ``\\boxed{}`` answer, the analogue of the
text after ``</think>`` in the paper), so no arm sees the stated answer and the answer statement is
never in the prunable region. The remaining reasoning is split into steps; items whose reasoning
has fewer than ``min_steps`` steps are left out before any arm runs (a filter on the chain, never on
the gold answer). Step entropies come from one teacher-forced pass of the same model
(:func:`iclr26.decoding.step_entropy.step_entropy`). The model then re-derives the answer after the
cue ``"The answer is \\(\\boxed{"`` following the reasoning with:

- ``full``: no pruning;
- ``low``: the floor(0.8 N) lowest-entropy steps replaced by [SKIP] (the method, Sec. 3: summed
  token entropy);
- ``low_mean``: the same, ranked by the mean token entropy of the step (the official code's score);
- ``random``: floor(0.8 N) uniformly random steps (the paper's control, Fig. 1);
- ``high``: the floor(0.8 N) highest-entropy steps (the paper's second control, Fig. 1);
- ``random_tokens``: random steps holding as many tokens as ``low`` pruned (a length-matched
  control that is not in the paper: summed entropy favours pruning short steps);
- ``none``: every step replaced by [SKIP] (mask ratio 1, the no-reasoning reference of Fig. 1(a)):
  if the chain carried nothing the answer needs, pruning could not hurt and "keeps accuracy" would
  hold by construction.

Items (problems) are paired across arms by position. Every generation is plain greedy decoding,
stored by :func:`iclr26.models.generation_cache.generate_cached`, so reruns and seeds share it.

quick: Qwen2.5-Coder-1.5B-Instruct (bf16) on GSM8K-style problems (reasoning-gym gsm_symbolic),
512-token chains, steps = lines. smoke: a randomly initialised tiny Llama with a character tokenizer.
"""
from __future__ import annotations

import re
import time

import numpy as np

from iclr26.common.seeding import seed_everything

SCALES = {
    "smoke": dict(model="tiny", n_problems=3, cot_tokens=24, answer_tokens=4, kappa=0.8, min_steps=1,
                  sep="\n", batch_size=8),
    # kappa = 0.8: the paper's main setting (Sec. 4.1). min_steps = 10: chains long enough that
    # floor(0.8 N) leaves a choice of which steps to prune. Qwen2.5-Coder-1.5B writes GSM chains of
    # 13-40 lines (the 0.5B solved 12.5 % of its own chains, too few to test anything). 28 problems
    # per seed, 5 seeds: about 140 drawn, of which about 7 in 8 pass the step filter, so over 100
    # items; each seed is one batch of chains (one trial of about half an hour on one core).
    "quick": dict(model="qwen2.5-coder-1.5b", n_problems=28, cot_tokens=512, answer_tokens=8,
                  kappa=0.8, min_steps=10, sep="\n", batch_size=28, task="gsm"),
    # the paper: DeepSeek-R1-Distill-Qwen-7B/14B and Qwen3-8B on MATH-500 / AIME 2024, full CoTs
    "paper": dict(model="deepseek-ai/DeepSeek-R1-Distill-Qwen-7B", n_problems=500, cot_tokens=32768,
                  answer_tokens=256, kappa=0.8, min_steps=1, sep="\n\n", batch_size=8),
}
SEEDS = {"smoke": 1, "quick": 5, "paper": 1}
ARMS = ("full", "low", "low_mean", "random", "high", "random_tokens", "none")

SYSTEM = ("Solve the problem step by step. Put a blank line between steps. "
          "Give the final answer in \\boxed{}.")
# the cue ends inside \boxed{ so the next tokens are the answer itself; an earlier cue, "The answer
# is" after a system prompt saying "Finish with 'The answer is N.'", made the model write a literal "N"
ANSWER_CUE = "\n\nThe answer is \\(\\boxed{"
# the answer statement: the first line that boxes or announces the final answer
_ANSWER_MARK = re.compile(r"\\boxed|answer is|final answer", re.IGNORECASE)


def reasoning_part(cot: str) -> tuple[str, bool]:
    """The chain of thought before its answer statement, and whether a statement was found.

    The statement starts at the paragraph (blank-line block) holding the first answer marker
    (``\\boxed``, "answer is", "final answer"); when that paragraph also computes something
    (a "=" before the marker line), only the marker line and what follows are cut.
    """
    m = _ANSWER_MARK.search(cot)
    if m is None:
        return cot.rstrip(), False
    para = cot.rfind("\n\n", 0, m.start())
    para = 0 if para < 0 else para + 2
    line = cot.rfind("\n", 0, m.start())
    line = 0 if line < 0 else line + 1
    cut = line if "=" in cot[para:line] else para
    return cot[:cut].rstrip(), True


def _boxed_value(completion: str):
    """The number the model writes inside the cue's open ``\\boxed{`` (up to its closing brace),
    with thousands separators and currency signs dropped."""
    inside = completion.split("}")[0].replace(",", "").replace("$", "").replace("\\", " ")
    from iclr26.data.math import first_number

    return first_number(inside)


def _generate_sorted(gen_fn, model, tok, prompts, max_new_tokens, **kw):
    """``gen_fn`` on the prompts in order of length (less left padding per batch), results in the
    original order."""
    if not prompts:
        return []
    order = sorted(range(len(prompts)), key=lambda i: len(prompts[i]))
    outs = gen_fn(model, tok, [prompts[i] for i in order], max_new_tokens, **kw)
    back = [None] * len(prompts)
    for o, i in zip(outs, order):
        back[i] = o
    return back


def run(scale: str, seed: int) -> dict:
    from iclr26.data import math as dm
    from iclr26.decoding.step_entropy import (
        compress_cot, random_steps_matching_tokens, select_steps, skip_steps, split_steps, step_entropy,
    )
    from iclr26.models import random_char_lm
    from iclr26.models.generation_cache import generate_cached

    cfg = SCALES[scale]
    if scale == "paper":
        raise NotImplementedError("the paper's 7B-14B reasoning models need GPUs and hub access")
    rng = seed_everything(seed)
    t0 = time.time()
    if cfg["model"] == "tiny":
        model, tok = random_char_lm(seed=0)
        problems = dm.arithmetic_problems(cfg["n_problems"], seed=seed, difficulty=1)
        prompts = [f"Q: {p.question}\nA:" for p in problems]
    else:
        from iclr26.models import load

        model, tok = load(cfg["model"], dtype="bfloat16")
        problems = dm.gsm_problems(cfg["n_problems"], seed=seed)
        prompts = [dm.chat_prompt(tok, p.question, system=SYSTEM) for p in problems]
    gen = dict(batch_size=cfg["batch_size"])
    cots = generate_cached(model, tok, prompts, cfg["cot_tokens"], **gen)
    t_cot = time.time() - t0

    sep, kappa = cfg["sep"], cfg["kappa"]
    keep, answer_prompts = [], {a: [] for a in ARMS}
    kept_frac = {a: [] for a in ARMS}
    value_kept = {a: [] for a in ARMS}
    n_steps, n_stated = [], 0
    for i, (prompt, cot) in enumerate(zip(prompts, cots)):
        reasoning, stated = reasoning_part(cot)
        n_stated += stated
        steps = split_steps(reasoning, sep)
        if not steps and cfg["min_steps"] <= 1:  # smoke: a random model may write only whitespace
            steps = ["."]
        if len(steps) < cfg["min_steps"] or (cfg["min_steps"] > 1 and not stated):
            continue
        keep.append(i)
        n_steps.append(len(steps))
        h = step_entropy(model, tok, prompt, steps, sep=sep, reduction="none")
        ent_sum = [float(x.sum()) for x in h]
        ent_mean = [float(x.mean()) if len(x) else 0.0 for x in h]
        n_tok = np.array([len(x) for x in h], dtype=float)
        low_drop = select_steps(ent_sum, kappa, "low")
        drops = {
            "full": [],
            "low": low_drop,
            "low_mean": select_steps(ent_mean, kappa, "low"),
            "random": select_steps(ent_sum, kappa, "random", rng=rng),
            "high": select_steps(ent_sum, kappa, "high"),
            "random_tokens": random_steps_matching_tokens(n_tok, n_tok[low_drop].sum(), rng),
            "none": select_steps(ent_sum, 1.0, "low"),  # every step pruned (Fig. 1: mask ratio 1)
        }
        assert compress_cot(steps, ent_sum, kappa, "low", sep=sep) == skip_steps(steps, low_drop, sep=sep)
        # the value the chain itself boxed, to see which arms keep a line that states it
        boxed = dm.extract_answer(cot[len(reasoning):]) if stated else None
        for arm in ARMS:
            text = skip_steps(steps, drops[arm], sep=sep)
            answer_prompts[arm].append(prompt + text + ANSWER_CUE)
            kept_frac[arm].append(1.0 - n_tok[drops[arm]].sum() / max(1.0, n_tok.sum()))
            kept_steps = [s for j, s in enumerate(steps) if j not in set(drops[arm])]
            value_kept[arm].append(bool(boxed) and any(re.search(rf"(?<![\d.]){re.escape(boxed)}(?![\d])", s)
                                                         for s in kept_steps))
    t_ent = time.time() - t0 - t_cot
    kept_problems = [problems[i] for i in keep]
    correct, answers = {}, {}
    for arm in ARMS:
        outs = answers[arm] = _generate_sorted(generate_cached, model, tok, answer_prompts[arm],
                                               cfg["answer_tokens"], **gen)
        correct[arm] = [int(dm.is_correct(_boxed_value(o), p.answer)) for o, p in zip(outs, kept_problems)]
    chain_correct = [int(dm.is_correct(dm.extract_answer(cots[i]), problems[i].answer)) for i in keep]
    # gsm_symbolic's draws for neighbouring seeds share items (seed s, item i + 1 is sometimes
    # seed s + 1, item i): an item whose question a lower seed already drew would be the same item
    # twice, so it is dropped here, after every generation (which keeps the cached requests as they were)
    earlier = ({q.question for s in range(seed) for q in dm.gsm_problems(cfg["n_problems"], seed=s)}
               if cfg["model"] != "tiny" else set())
    fresh = [j for j, i in enumerate(keep) if problems[i].question not in earlier]
    n_repeated = len(keep) - len(fresh)
    keep = [keep[j] for j in fresh]
    kept_problems = [kept_problems[j] for j in fresh]
    chain_correct = [chain_correct[j] for j in fresh]
    for arm in ARMS:
        correct[arm] = [correct[arm][j] for j in fresh]
        answers[arm] = [answers[arm][j] for j in fresh]
        answer_prompts[arm] = [answer_prompts[arm][j] for j in fresh]
        kept_frac[arm] = [kept_frac[arm][j] for j in fresh]
        value_kept[arm] = [value_kept[arm][j] for j in fresh]
    n_steps = [n_steps[j] for j in fresh]
    return {
        "metrics": {"correct": {a: correct[a] for a in ARMS}},
        "info": {
            "n_drawn": len(problems),
            "n_kept": len(keep),
            "n_dropped_as_drawn_by_a_lower_seed": n_repeated,
            "n_with_answer_statement": int(n_stated),
            "accuracy": {a: float(np.mean(correct[a])) if keep else float("nan") for a in ARMS},
            "accuracy_of_chain_own_answer": float(np.mean(chain_correct)) if keep else float("nan"),
            "token_fraction_kept": {a: float(np.mean(kept_frac[a])) if keep else float("nan") for a in ARMS},
            "share_keeping_a_line_with_the_boxed_value": {
                a: float(np.mean(value_kept[a])) if keep else float("nan") for a in ARMS},
            "mean_steps": float(np.mean(n_steps)) if keep else 0.0,
            "seconds": {"cot": t_cot, "entropy": t_ent, "total": time.time() - t0},
            "example_reasoning": (answer_prompts["full"][0][len(prompts[keep[0]]):][:800]) if keep else "",
            "example_low": (answer_prompts["low"][0][len(prompts[keep[0]]):][:500]) if keep else "",
            "example_answers": {a: [(p.answer, o) for p, o in zip(kept_problems[:4], answers[a][:4])]
                                for a in ARMS},
        },
    }
