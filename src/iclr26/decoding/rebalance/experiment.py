"""ReBalance claim check: fewer generated tokens at unchanged accuracy vs plain greedy decoding.

quick: Qwen2.5-Coder-1.5B-Instruct (bfloat16, 28 layers like R1-Distill-Qwen-1.5B) on multi-step
arithmetic problems (``iclr26.data.math.arithmetic_problems``), prompted to solve step by step; it
writes one step per line, so a step ends at "\n" here.
One draw of problems is split into a calibration (training) part, a validation part and a test
part. The steering vector and the confidence / variance quartiles are fitted on the model's own
greedy traces of the calibration part; the steering strength is chosen on the validation part
(among ``strengths``: the one with the fewest mean tokens whose accuracy is within
``val_margin`` of plain decoding); the test part is decoded once plainly and once steered.
Both arms decode the same test prompts greedily; items are paired by position.
Plain (baseline) generations go through the content-addressed cache.
smoke: a randomly initialised tiny Llama with a character tokenizer.
"""
from __future__ import annotations

import gc
import time

import numpy as np

from iclr26.common.seeding import seed_everything

SCALES = {
    "smoke": dict(model="tiny", n_cal=4, n_val=2, n_test=3, max_new_tokens=24, layer=1,
                  strengths=(1.0, 2.0), batch_size=4, sep="\n\n", difficulty=2),
    # layer 19: the official vector layer for DeepSeek-R1-Distill-Qwen-1.5B, the same 28-layer
    # Qwen2 1.5B architecture; strength 1.0 = the official coefficients, 2.0 = doubled
    # sep "\n": on these problems the model writes one step per line (a calibration probe on
    # difficulty 3 showed no blank lines at all)
    "quick": dict(model="qwen2.5-coder-1.5b", n_cal=40, n_val=0, n_test=60, max_new_tokens=128,
                  layer=19, strengths=(1.0,), batch_size=20, sep="\n", difficulty=4),
    "paper": dict(model="deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B", n_cal=500, n_val=0, n_test=500,
                  max_new_tokens=16000, layer=19, strengths=(1.0,), batch_size=1, sep="\n\n", difficulty=0),
}
SEEDS = {"smoke": 1, "quick": 1, "paper": 1}
MIN_STEPS = 30  # each prototype from at least this many steps (joint O/U sets, else confidence only)
VAL_MARGIN = 0.10

SYSTEM = "Solve the problem step by step. Put a blank line between steps. Give the final answer in \\boxed{}."


def problems(n: int, seed: int, difficulty: int = 4):
    """``n`` distinct multi-step arithmetic problems (difficulty 4: three or four terms of up to three
    digits with +, -, *), in a fixed order; calibration, validation and test are consecutive slices."""
    from iclr26.data import math as dm

    out, seen = [], set()
    for p in dm.arithmetic_problems(3 * n, seed=seed, difficulty=difficulty):
        if p.question not in seen:
            seen.add(p.question)
            out.append(p)
    if len(out) < n:
        raise RuntimeError(f"only {len(out)} distinct problems for {n}")
    return out[:n]


def run(scale: str, seed: int) -> dict:
    import torch

    from iclr26.data import math as dm
    from iclr26.decoding.rebalance import ReBalanceSteerer, fit_rebalance
    from iclr26.models import random_char_lm
    from iclr26.models.generation import generate
    from iclr26.models.generation_cache import generate_cached

    cfg = SCALES[scale]
    if scale == "paper":
        raise NotImplementedError("the paper's R1-distilled reasoning models need GPUs and hub access")
    torch.set_num_threads(1)
    seed_everything(seed)
    t0 = time.time()
    n_cal, n_val, n_test = cfg["n_cal"], cfg["n_val"], cfg["n_test"]
    bs, T = cfg["batch_size"], cfg["max_new_tokens"]
    if cfg["model"] == "tiny":
        model, tok = random_char_lm(seed=0)
        probs = problems(n_cal + n_val + n_test, seed, cfg["difficulty"])
        fmt = lambda q: f"Q: {q}\nA:"  # noqa: E731
        plain_gen = generate
    else:
        from iclr26.models import load

        model, tok = load(cfg["model"], dtype="bfloat16")
        probs = problems(n_cal + n_val + n_test, seed, cfg["difficulty"])
        fmt = lambda q: dm.chat_prompt(tok, q, system=SYSTEM)  # noqa: E731
        plain_gen = generate_cached
    cal, val, test = probs[:n_cal], probs[n_cal:n_cal + n_val], probs[n_cal + n_val:]

    def decode_plain(ps):
        return plain_gen(model, tok, [fmt(p.question) for p in ps], T, batch_size=bs, return_token_ids=True)

    def decode_steered(ps, rb):
        with ReBalanceSteerer(model, tok, rb, sep=cfg["sep"]) as st:
            out = generate(model, tok, [fmt(p.question) for p in ps], T, batch_size=bs, return_token_ids=True)
            return out[0], out[1], list(st.coefs)

    def n_tok(ids):
        return [float(len(x)) for x in ids]

    def correct(texts, ps):
        return [int(dm.is_correct(dm.extract_answer(x), p.answer)) for x, p in zip(texts, ps)]

    # 1) calibration on the training part (the model's own greedy traces, exact token ids)
    cal_txt, cal_ids = decode_plain(cal)
    if cfg["model"] == "tiny":  # random weights write no blank lines: give the calibration steps
        cal_ids = [tok("\n\n".join(o[i:i + 3] for i in range(0, len(o), 3)), add_special_tokens=False)["input_ids"]
                   for o in cal_txt]
    rb = fit_rebalance(model, tok, [fmt(p.question) for p in cal], cal_ids, layer=cfg["layer"], relax=True, sep=cfg["sep"],
                       min_steps=MIN_STEPS if cfg["model"] != "tiny" else 1)
    t_fit = time.time() - t0

    # 2) strength on the validation part
    t = time.time()
    val_choice, val_log = cfg["strengths"][0], {}
    if len(cfg["strengths"]) > 1 and n_val:
        vtxt, vids = decode_plain(val)
        acc_p, len_p = float(np.mean(correct(vtxt, val))), float(np.mean(n_tok(vids)))
        val_log["plain"] = {"accuracy": acc_p, "mean_tokens": len_p}
        best = None
        for s in cfg["strengths"]:
            rb.strength = s
            stxt, sids, _ = decode_steered(val, rb)
            acc_s, len_s = float(np.mean(correct(stxt, val))), float(np.mean(n_tok(sids)))
            val_log[str(s)] = {"accuracy": acc_s, "mean_tokens": len_s}
            if acc_s >= acc_p - VAL_MARGIN and (best is None or len_s < best[0]):
                best = (len_s, s)
        val_choice = best[1] if best is not None else cfg["strengths"][0]
    rb.strength = val_choice
    t_val = time.time() - t

    # 3) test part: plain vs steered
    t = time.time()
    plain, plain_ids = decode_plain(test)
    t_plain = time.time() - t
    t = time.time()
    steered, steered_ids, coefs = decode_steered(test, rb)
    t_steer = time.time() - t

    tok_p, tok_s = n_tok(plain_ids), n_tok(steered_ids)
    cor_p, cor_s = correct(plain, test), correct(steered, test)
    info = {
        "accuracy": {"rebalance": float(np.mean(cor_s)), "plain": float(np.mean(cor_p))},
        "mean_tokens": {"rebalance": float(np.mean(tok_s)), "plain": float(np.mean(tok_p))},
        "outputs_changed": int(sum(a != b for a, b in zip(plain, steered))),
        "n_test": len(test),
        "mean_token_reduction": float(np.mean(np.array(tok_p) - np.array(tok_s))),
        "hit_cap": {"rebalance": int(sum(x >= T for x in tok_s)), "plain": int(sum(x >= T for x in tok_p))},
        "separators_per_plain_output": float(np.mean([x.count(cfg["sep"]) for x in plain])),
        "calibration_mean_tokens": float(np.mean(n_tok(cal_ids))),
        "fit": dict(tau_c_low=rb.tau_c_low, tau_c_high=rb.tau_c_high, tau_v_low=rb.tau_v_low,
                    tau_v_high=rb.tau_v_high, **rb.info),
        "strength": rb.strength, "validation": val_log,
        "steering_events": len(coefs), "mean_coef": float(np.mean(coefs)) if coefs else 0.0,
        "share_negative_coef": float(np.mean(np.array(coefs) < 0)) if coefs else 0.0,
        "seconds": {"fit": t_fit, "validation": t_val, "plain": t_plain, "rebalance": t_steer},
        "problem_source": f"iclr26.data.math.arithmetic_problems (difficulty {cfg['difficulty']})",
        "examples": {"plain": plain[:2], "rebalance": steered[:2]},
    }
    del model
    gc.collect()
    return {"metrics": {"tokens": {"rebalance": tok_s, "plain": tok_p},
                        "correct": {"rebalance": cor_s, "plain": cor_p}},
            "info": info}
