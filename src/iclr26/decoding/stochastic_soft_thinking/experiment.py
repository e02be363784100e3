"""Stochastic Soft Thinking claim check: chained two-digit sums on Qwen2.5-Coder-0.5B (bf16).

Each problem is ``a + b + c + d`` (operands 10-99) with a two-shot chain of thought
("a + b = s, s + c = t, t + d = u. The answer is u."). The chain is the thinking phase; in the soft
arms it is done with soft tokens, ends when the top token of ``p~`` is " The" (the start of the
answer sentence), then " The answer is" is fed as discrete tokens and the answer decoded greedily.
The difficulty (four operands of two digits) was chosen on a validation split (problems drawn from
a separate random stream, never used here) so that greedy decoding is near 50 % (README).

Arms, all on the same problems (the problem is the unit, paired across arms):
- ``greedy``: discrete greedy chain of thought (``generate_cached``);
- ``vanilla``: vanilla soft thinking (deterministic: its pass@k equals its pass@1);
- ``gumbel``: Gumbel-Softmax soft thinking, tau = 0.5, ``K`` independent draws per problem;
- ``sampling``: ordinary discrete sampling from the same truncated distribution ``p~`` (temperature
  1, top-k 15, top-p 0.95), ``K`` draws per problem (``generate_cached``). By the Gumbel-max trick
  this is the tau -> 0 limit of the method: the same randomness without the soft mixing (control).
pass@1 of a stochastic arm is the mean correctness over its ``K`` draws; pass@K is "any draw correct".
Probe (paper Sec. 4): along the vanilla soft thoughts, at soft steps whose top-1 weight is at most
0.7 (genuinely mixed soft tokens), replace the soft token by its top-1 or top-2 token and measure
the JS divergence of the next-token distribution.
"""
from __future__ import annotations

import re
import time
from math import comb

import numpy as np
import torch

from iclr26.common.seeding import seed_everything

from .probes import replacement_probe
from .soft_thinking import soft_thinking_generate

SCALES = {
    "smoke": dict(model="smollm2-135m", dtype=None, n=2, n_terms=3, lo=2, hi=9, k=2, max_think=8, max_probes=1,
                  batch_size=4),
    # 2 seeds x 10 problems = 20 problems, 18 generations each (about 40 CPU-minutes; README: power)
    "quick": dict(model="qwen2.5-coder-0.5b", dtype="bfloat16", n=10, n_terms=4, lo=10, hi=99, k=8, max_think=44,
                  max_probes=2, batch_size=48),
    # the paper: 32B reasoning models (DeepSeek-R1-Distill-Qwen-32B, QwQ-32B, Skywork-OR1-32B) on
    # eight math/code benchmarks with thousands of thinking tokens; here the largest offline proxy
    "paper": dict(model="qwen2.5-coder-1.5b", dtype="bfloat16", n=500, n_terms=5, lo=10, hi=99, k=16,
                  max_think=80, max_probes=4, batch_size=32),
}
SEEDS = {"smoke": 1, "quick": 2, "paper": 5}

# Soft Thinking's truncation settings (top-k 15, top-p 0.95, T = 1) for all soft arms and the
# sampling arm, and the paper's Gumbel-Softmax temperature tau = 0.5 (Sec. 5).
TOP_K, TOP_P, TAU = 15, 0.95, 0.5
# probe only soft tokens whose largest weight is at most this (a single-support step makes
# "the top token dominates" automatic)
PROBE_MAX_TOP1 = 0.7
# the two exemplars of the few-shot prompt: fixed constants (not drawn), shared by every problem like
# the model itself, so the problems are independent draws given a fixed prompt template
SHOTS = {3: ((23, 48, 15), (57, 19, 64)), 4: ((23, 48, 15, 36), (57, 19, 64, 28)),
         5: ((23, 48, 15, 36, 71), (57, 19, 64, 28, 45))}
# evaluation problems come from this stream; the validation split used stream 777 (README)
TEST_STREAM = 2508


def _problems(rng, n, n_terms, lo, hi):
    return [tuple(int(v) for v in rng.integers(lo, hi + 1, size=n_terms)) for _ in range(n)]


def _solution(terms):
    s, parts = terms[0], []
    for x in terms[1:]:
        parts.append(f"{s} + {x} = {s + x}")
        s += x
    return ", ".join(parts) + f". The answer is {s}."


def _prompt(terms, shots):
    head = "".join(f"Q: {' + '.join(map(str, s))}\nA: {_solution(s)}\n\n" for s in shots)
    return f"{head}Q: {' + '.join(map(str, terms))}\nA:"


def _first_int(text):
    m = re.search(r"-?\d+", text)
    return int(m.group()) if m else None


def _stated_answer(text):
    m = re.search(r"answer is\s*(-?\d+)", text)
    return int(m.group(1)) if m else None


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from ``n`` draws with ``c`` correct (Chen et al., 2021): ``1 - C(n-c, k) / C(n, k)``."""
    return 1.0 - comb(n - c, k) / comb(n, k) if n - c >= k else 1.0


def run(scale: str, seed: int) -> dict:
    cfg = SCALES[scale]
    torch.set_num_threads(1)
    rng = seed_everything(seed)
    t0 = time.time()
    from iclr26.models import load
    from iclr26.models.generation_cache import generate_cached

    model, tok = load(cfg["model"], dtype=cfg["dtype"]) if cfg["dtype"] else load(cfg["model"])
    model.eval()
    rng = np.random.default_rng([TEST_STREAM, seed])
    probs = _problems(rng, cfg["n"], cfg["n_terms"], cfg["lo"], cfg["hi"])
    shots = SHOTS[cfg["n_terms"]]
    prompts = [_prompt(p, shots) for p in probs]
    gold = [sum(p) for p in probs]
    k, n = cfg["k"], len(probs)
    end_id = tok(" The", add_special_tokens=False)["input_ids"][0]
    stop_id = tok(".\n\n", add_special_tokens=False)["input_ids"][-1]
    common = dict(max_think_tokens=cfg["max_think"], think_end_ids=(end_id,), answer_prefix=" The answer is",
                  max_answer_tokens=5, answer_stop_ids=(stop_id,), top_k=TOP_K, top_p=TOP_P,
                  batch_size=cfg["batch_size"])
    secs = {}

    t = time.time()
    greedy_txt = generate_cached(model, tok, prompts, cfg["max_think"] + 8, batch_size=cfg["batch_size"],
                                 eos_token_id=stop_id)
    secs["greedy"] = time.time() - t
    t = time.time()
    rep = [p for p in prompts for _ in range(k)]
    samp_txt = generate_cached(model, tok, rep, cfg["max_think"] + 8, do_sample=True, temperature=1.0, top_p=TOP_P,
                               top_k=TOP_K, seed=seed, batch_size=cfg["batch_size"], eos_token_id=stop_id)
    secs["sampling"] = time.time() - t
    t = time.time()
    van = soft_thinking_generate(model, tok, prompts, mode="vanilla", probe_max_top1=PROBE_MAX_TOP1,
                                 max_probes=cfg["max_probes"], **common)
    secs["vanilla"] = time.time() - t
    t = time.time()
    gum = soft_thinking_generate(model, tok, rep, mode="gumbel", tau=TAU, seed=seed, **common)
    secs["gumbel"] = time.time() - t

    c_greedy = [int(_stated_answer(x) == g) for x, g in zip(greedy_txt, gold)]
    c_van = [int(_first_int(a) == g) for a, g in zip(van.answers, gold)]
    c_gum = np.array([int(_first_int(a) == g) for a, g in zip(gum.answers, np.repeat(gold, k))]).reshape(n, k)
    c_samp = np.array([int(_stated_answer(x) == g) for x, g in zip(samp_txt, np.repeat(gold, k))]).reshape(n, k)

    js1, js2, agree1, w1 = [], [], [], []
    t = time.time()
    for i, p in enumerate(prompts):
        rows = replacement_probe(model, tok, p, van.think_weights[i], van.probe_logits[i])
        if rows:
            js1.append(float(np.mean([r["js_top1"] for r in rows])))
            js2.append(float(np.mean([r["js_top2"] for r in rows])))
            agree1 += [r["argmax_agree_top1"] for r in rows]
            w1 += [r["w_top1"] for r in rows]
    secs["probe"] = time.time() - t
    steps = [w for row in van.think_weights for _, w in row]
    single = [int(w.numel() == 1) for w in steps]
    mixed = [int(float(w.max()) <= PROBE_MAX_TOP1) for w in steps]
    passk = {name: [float(np.mean([pass_at_k(k, int(c.sum()), j) for c in arr])) for j in range(1, k + 1)]
             for name, arr in (("gumbel", c_gum), ("sampling", c_samp))}
    del model
    secs["total"] = time.time() - t0
    return {
        "metrics": {
            "pass1": {"gumbel": c_gum.mean(1).tolist(), "vanilla": [float(c) for c in c_van],
                      "sampling": c_samp.mean(1).tolist(), "greedy": [float(c) for c in c_greedy]},
            "passk": {"gumbel": c_gum.max(1).astype(float).tolist(), "vanilla": [float(c) for c in c_van],
                      "sampling": c_samp.max(1).astype(float).tolist()},
            "js": {"top1": js1, "top2": js2},
        },
        "info": {
            "model": cfg["model"],
            "n_problems": n,
            "draws_per_problem": k,
            "accuracy": {"greedy": float(np.mean(c_greedy)), "vanilla": float(np.mean(c_van)),
                         "gumbel_pass1": float(c_gum.mean()), "sampling_pass1": float(c_samp.mean()),
                         "gumbel_passk": float(c_gum.max(1).mean()), "sampling_passk": float(c_samp.max(1).mean())},
            "pass_at_j": passk,
            "soft_steps": len(steps),
            "share_single_support_steps": float(np.mean(single)) if steps else None,
            "share_steps_top1_le_0.7": float(np.mean(mixed)) if steps else None,
            "probe_items": len(js1),
            "mean_js_top1": float(np.mean(js1)) if js1 else None,
            "mean_js_top2": float(np.mean(js2)) if js2 else None,
            "argmax_agreement_top1": float(np.mean(agree1)) if agree1 else None,
            "mean_top1_weight_probed": float(np.mean(w1)) if w1 else None,
            "mean_think_tokens": {"vanilla": float(np.mean([len(x) for x in van.think_ids])),
                                  "gumbel": float(np.mean([len(x) for x in gum.think_ids]))},
            "example_thought_vanilla": tok.decode(van.think_ids[0]),
            "example_thought_gumbel": tok.decode(gum.think_ids[0]),
            "example_greedy": greedy_txt[0],
            "seconds": secs,
        },
    }
