"""Step-entropy pruning claim check (arXiv:2508.03346, Sec. 4.1 / Fig. 1).

The model writes its own chain of thought for each problem (greedy). Step entropies are computed
under the same model; then four arms re-ask for the final answer after the same chain of thought
with: no pruning ("full"), the floor(0.8 N) lowest-entropy steps replaced by [SKIP] ("low", the
method), the same number of random steps ("random") or of highest-entropy steps ("high").
Items (problems) are paired across arms by position.

quick: Qwen2.5-Coder-0.5B-Instruct (bf16) on multi-step arithmetic (iclr26.data.math, difficulty 3);
gsm_symbolic problems at the paper scale.
smoke: a randomly initialised tiny Llama with a character tokenizer.
"""
from __future__ import annotations

import time

import numpy as np

from iclr26.common.seeding import seed_everything

SCALES = {
    "smoke": dict(model="tiny", n_problems=3, cot_tokens=12, answer_tokens=4, kappa=0.8),
    # kappa = 0.8: the paper's main setting (Sec. 4.1)
    # multi-step arithmetic (difficulty 3): with 160 chain-of-thought tokens the 0.5B model solved
    # none of the gsm_symbolic problems, which leaves every arm at 0 % and the check empty
    "quick": dict(model="qwen2.5-coder-0.5b", n_problems=24, cot_tokens=160, answer_tokens=12,
                  kappa=0.8, task="arithmetic", difficulty=3),
    # the paper: DeepSeek-R1-Distill-Qwen-7B/14B and Qwen3-8B on MATH-500 / AIME 2024, full CoTs
    "paper": dict(model="deepseek-ai/DeepSeek-R1-Distill-Qwen-7B", n_problems=500, cot_tokens=32768,
                  answer_tokens=256, kappa=0.8),
}
SEEDS = {"smoke": 1, "quick": 2, "paper": 1}

SYSTEM = ("Solve the problem step by step. Put a blank line between steps. "
          "Give the final answer in \\boxed{}.")
# the cue ends inside \boxed{ so the next tokens are the answer itself; an earlier cue, "The answer
# is" after a system prompt saying "Finish with 'The answer is N.'", made the model write a literal "N"
ANSWER_CUE = "\n\nThe answer is \\(\\boxed{"


def _steps_of(cot: str):
    from iclr26.decoding.step_entropy import split_steps

    steps = split_steps(cot, "\n\n")
    if len(steps) < 2:  # the model wrote single-spaced lines: fall back to line breaks
        return split_steps(cot, "\n"), "\n"
    return steps, "\n\n"


def run(scale: str, seed: int) -> dict:
    from iclr26.data import math as dm
    from iclr26.decoding.step_entropy import compress_cot, step_entropy
    from iclr26.models import random_char_lm
    from iclr26.models.generation import generate

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

        model, tok = load(cfg["model"])
        if cfg.get("task") == "arithmetic":
            problems = dm.arithmetic_problems(cfg["n_problems"], seed=seed, difficulty=cfg["difficulty"])
        else:
            problems = dm.gsm_problems(cfg["n_problems"], seed=seed)
        prompts = [dm.chat_prompt(tok, p.question, system=SYSTEM) for p in problems]
    cots = generate(model, tok, prompts, cfg["cot_tokens"])
    t_cot = time.time() - t0

    arms = ("full", "low", "random", "high")
    answer_prompts = {a: [] for a in arms}
    kept = {a: [] for a in arms}
    n_steps = []
    for prompt, cot in zip(prompts, cots):
        steps, sep = _steps_of(cot)
        if not steps:
            steps, sep = [cot if cot.strip() else "."], "\n\n"
        ent = step_entropy(model, tok, prompt, steps, sep=sep)
        n_steps.append(len(steps))
        n_tok = [len(tok(s, add_special_tokens=False)["input_ids"]) for s in steps]
        for arm in arms:
            kappa = 0.0 if arm == "full" else cfg["kappa"]
            mode = "low" if arm == "full" else arm
            comp = compress_cot(steps, ent, kappa=kappa, mode=mode, sep=sep, rng=rng)
            answer_prompts[arm].append(prompt + comp + ANSWER_CUE)
            kept_steps = [s for s in comp.split(sep)]
            kept[arm].append(sum(n for n, s, c in zip(n_tok, steps, kept_steps) if c == s) / max(1, sum(n_tok)))
    correct, answers = {}, {}
    for arm in arms:
        outs = answers[arm] = generate(model, tok, answer_prompts[arm], cfg["answer_tokens"])
        correct[arm] = [int(dm.is_correct(dm.first_number(o), p.answer))
                        for o, p in zip(outs, problems)]
    return {
        "metrics": {"correct": {a: correct[a] for a in arms}},
        "info": {
            "accuracy": {a: float(np.mean(correct[a])) for a in arms},
            "cot_token_fraction_kept": {a: float(np.mean(kept[a])) for a in arms},
            "mean_steps": float(np.mean(n_steps)),
            "seconds": {"cot": t_cot, "total": time.time() - t0},
            "problem_source": "iclr26.data.math",
            "example_cot": cots[0][:600],
            "example_answers": {a: [(p.answer, o) for p, o in zip(problems[:4], answers[a][:4])] for a in arms},
        },
    }
