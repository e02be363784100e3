"""ReBalance claim check: fewer generated tokens at unchanged accuracy vs plain decoding.

quick: SmolLM2-135M-Instruct (fp32) on procedural arithmetic word problems (iclr26.data.math);
the steering vector and thresholds are fitted on a separate calibration set (other seed) from the
model's own greedy traces; evaluation problems are never used for fitting. Both arms decode the
same evaluation prompts greedily; items are paired by position.
smoke: a randomly initialised tiny Llama with a character tokenizer.
"""
from __future__ import annotations

import time

import numpy as np

from iclr26.common.seeding import seed_everything

SCALES = {
    "smoke": dict(model="tiny", n_cal=4, n_eval=3, max_new_tokens=24, layer=1, strength=1.0),
    # layer 20 of 30 ~ the paper's relative depth (layer 19 of 28 for R1-Distill-Qwen-1.5B);
    # strength 1.0: fixed before any evaluation run, not tuned
    "quick": dict(model="smollm2-135m", n_cal=24, n_eval=60, max_new_tokens=160, layer=20,
                  strength=1.0),
    "paper": dict(model="deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B", n_cal=500, n_eval=500,
                  max_new_tokens=16384, layer=19, strength=1.0),
}
SEEDS = {"smoke": 1, "quick": 2, "paper": 1}

# no placeholder letter in the instruction ("Finish with 'The answer is N.'" made the Qwen models
# write a literal "N" in the other decoding experiments)
SYSTEM = "Solve the problem step by step. Put a blank line between steps. Give the final answer in \\boxed{}."


def run(scale: str, seed: int) -> dict:
    from iclr26.data import math as dm
    from iclr26.decoding.rebalance import ReBalanceSteerer, fit_rebalance
    from iclr26.models import random_char_lm
    from iclr26.models.generation import generate

    cfg = SCALES[scale]
    if scale == "paper":
        raise NotImplementedError("the paper's R1-distilled reasoning models need GPUs and hub access")
    seed_everything(seed)
    t0 = time.time()
    cal = dm.arithmetic_problems(cfg["n_cal"], seed=100_000 + seed, difficulty=2)
    ev = dm.arithmetic_problems(cfg["n_eval"], seed=seed, difficulty=2)
    if cfg["model"] == "tiny":
        model, tok = random_char_lm(seed=0)
        fmt = lambda q: f"Q: {q}\nA:"  # noqa: E731
    else:
        from iclr26.models import load

        model, tok = load(cfg["model"])
        fmt = lambda q: dm.chat_prompt(tok, q, system=SYSTEM)  # noqa: E731
    cal_prompts = [fmt(p.question) for p in cal]
    cal_out = generate(model, tok, cal_prompts, cfg["max_new_tokens"])
    if cfg["model"] == "tiny":  # random weights write no blank lines: give the calibration steps
        cal_out = ["\n\n".join(o[i:i + 3] for i in range(0, len(o), 3)) for o in cal_out]
    rb = fit_rebalance(model, tok, cal_prompts, cal_out, layer=cfg["layer"], strength=cfg["strength"],
                       relax=True)
    t_fit = time.time() - t0

    prompts = [fmt(p.question) for p in ev]
    t = time.time()
    plain = generate(model, tok, prompts, cfg["max_new_tokens"])
    t_plain = time.time() - t
    t = time.time()
    with ReBalanceSteerer(model, tok, rb) as st:
        steered = generate(model, tok, prompts, cfg["max_new_tokens"], logits_processor=[st.processor])
        n_applied = len(st.alphas_applied)
        mean_alpha = float(np.mean(st.alphas_applied)) if st.alphas_applied else 0.0
    t_steer = time.time() - t

    def n_tokens(texts):
        return [float(len(tok(x, add_special_tokens=False)["input_ids"])) for x in texts]

    def correct(texts):
        return [int(dm.is_correct(dm.extract_answer(x), p.answer)) for x, p in zip(texts, ev)]

    return {
        "metrics": {
            "tokens": {"rebalance": n_tokens(steered), "plain": n_tokens(plain)},
            "correct": {"rebalance": correct(steered), "plain": correct(plain)},
        },
        "info": {
            "accuracy": {"rebalance": float(np.mean(correct(steered))), "plain": float(np.mean(correct(plain)))},
            "mean_tokens": {"rebalance": float(np.mean(n_tokens(steered))), "plain": float(np.mean(n_tokens(plain)))},
            "thresholds": dict(tau_c_low=rb.tau_c_low, tau_c_high=rb.tau_c_high, tau_v_low=rb.tau_v_low,
                               tau_v_high=rb.tau_v_high, scale=rb.scale, **rb.info),
            "steering_events": n_applied, "mean_alpha": mean_alpha,
            "seconds": {"fit": t_fit, "plain": t_plain, "rebalance": t_steer},
            "problem_source": "iclr26.data.math",
            "examples": {"plain": plain[:2], "rebalance": steered[:2]},
        },
    }
