"""Stochastic Soft Thinking claim check: few-shot chained arithmetic on a real small LM.

Each problem is ``a + b + c`` with a few-shot chain of thought ("a + b = s, s + c = t. The answer
is t."). The chain is the thinking phase, done with soft tokens; thinking ends when the top token
of ``p~`` is the first token of " The" (the start of the answer sentence), then " The answer is" is
fed as discrete tokens and the answer is decoded greedily.

Arms: vanilla soft thinking and Gumbel-Softmax soft thinking (tau = 0.5), on the same problems.
Probe (paper Sec. 4): along the vanilla soft thoughts, replace the soft token at a few steps by its
top-1 or top-2 token and measure the JS divergence of the next-token distribution.
"""
from __future__ import annotations

import re
import time

import numpy as np
import torch

from iclr26.common.seeding import seed_everything

from .probes import replacement_probe
from .soft_thinking import soft_thinking_generate

SCALES = {
    "smoke": dict(model="smollm2-135m", n=3, max_operand=9, max_think=6, probe_steps=(2, 4), batch_size=3),
    "quick": dict(model="qwen2.5-coder-0.5b", n=40, max_operand=19, max_think=28, probe_steps=(2, 5, 9),
                  batch_size=20),
    # the paper: 32B reasoning models (DeepSeek-R1-Distill-Qwen-32B, QwQ-32B, Skywork-OR1-32B) on
    # eight math/code benchmarks with thousands of thinking tokens
    "paper": dict(model="qwen2.5-coder-1.5b", n=500, max_operand=99, max_think=256, probe_steps=(2, 5, 9, 17),
                  batch_size=16),
}
SEEDS = {"smoke": 1, "quick": 2, "paper": 5}

# Soft Thinking's truncation settings used for both arms (top-k 15, top-p 0.95) and the paper's
# Gumbel-Softmax temperature tau = 0.5.
TOP_K, TOP_P, TAU = 15, 0.95, 0.5


def _problems(rng, n, max_operand):
    return [tuple(int(v) for v in rng.integers(2, max_operand + 1, size=3)) for _ in range(n)]


def _solution(a, b, c):
    return f"{a} + {b} = {a + b}, {a + b} + {c} = {a + b + c}. The answer is {a + b + c}."


def _prompt(p, shots):
    head = "".join(f"Q: {a} + {b} + {c}\nA: {_solution(a, b, c)}\n\n" for a, b, c in shots)
    return f"{head}Q: {p[0]} + {p[1]} + {p[2]}\nA:"


def _parse(text):
    m = re.search(r"-?\d+", text)
    return int(m.group()) if m else None


def run(scale: str, seed: int) -> dict:
    cfg = SCALES[scale]
    rng = seed_everything(seed)
    t0 = time.time()
    from iclr26.models import load

    model, tok = load(cfg["model"])
    model.eval()
    shots = _problems(rng, 3, 9)
    probs = _problems(rng, cfg["n"], cfg["max_operand"])
    prompts = [_prompt(p, shots) for p in probs]
    gold = [sum(p) for p in probs]
    end_id = tok(" The", add_special_tokens=False)["input_ids"][0]
    common = dict(max_think_tokens=cfg["max_think"], think_end_ids=(end_id,), answer_prefix=" The answer is",
                  max_answer_tokens=4, top_k=TOP_K, top_p=TOP_P, batch_size=cfg["batch_size"])
    t = time.time()
    van = soft_thinking_generate(model, tok, prompts, mode="vanilla", probe_steps=cfg["probe_steps"], **common)
    t_van = time.time() - t
    t = time.time()
    gum = soft_thinking_generate(model, tok, prompts, mode="gumbel", tau=TAU, seed=seed, **common)
    t_gum = time.time() - t
    correct_v = [int(_parse(a) == g) for a, g in zip(van.answers, gold)]
    correct_g = [int(_parse(a) == g) for a, g in zip(gum.answers, gold)]

    js1, js2, agree1, agree2, w1 = [], [], [], [], []
    t = time.time()
    for i, p in enumerate(prompts):
        rows = replacement_probe(model, tok, p, van.think_weights[i], van.probe_logits[i])
        if rows:
            js1.append(float(np.mean([r["js_top1"] for r in rows])))
            js2.append(float(np.mean([r["js_top2"] for r in rows])))
            agree1 += [r["argmax_agree_top1"] for r in rows]
            agree2 += [r["argmax_agree_top2"] for r in rows]
            w1 += [r["w_top1"] for r in rows]
    t_probe = time.time() - t
    return {
        "metrics": {
            "correct": {"gumbel": correct_g, "vanilla": correct_v},
            "js": {"top1": js1, "top2": js2},
        },
        "info": {
            "model": cfg["model"],
            "n_problems": len(probs),
            "accuracy": {"vanilla": float(np.mean(correct_v)), "gumbel": float(np.mean(correct_g))},
            "probe_items": len(js1),
            "probe_steps": list(cfg["probe_steps"]),
            "mean_js_top1": float(np.mean(js1)) if js1 else None,
            "mean_js_top2": float(np.mean(js2)) if js2 else None,
            "argmax_agreement_top1": float(np.mean(agree1)) if agree1 else None,
            "argmax_agreement_top2": float(np.mean(agree2)) if agree2 else None,
            "mean_top1_weight_probed": float(np.mean(w1)) if w1 else None,
            "mean_think_tokens": {"vanilla": float(np.mean([len(x) for x in van.think_ids])),
                                  "gumbel": float(np.mean([len(x) for x in gum.think_ids]))},
            "example_thought_vanilla": tok.decode(van.think_ids[0]),
            "example_thought_gumbel": tok.decode(gum.think_ids[0]),
            "seconds": {"vanilla": t_van, "gumbel": t_gum, "probe": t_probe, "total": time.time() - t0},
        },
    }
