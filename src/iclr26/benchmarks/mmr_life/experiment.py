"""MMR-Life's reasoning-method comparison on the text-rendered mini benchmark, at two model sizes.

Per trial (seed) a fresh mini benchmark is drawn (:func:`.minibench.make_items`, every type) and each
bundled chat model answers every item
- ``direct``: the direct-answer system prompt, greedy (``prompt/main_exp_prompt.py`` "direct");
- ``cot``: the chain-of-thought system prompt, ``n_samples`` sampled runs at the official
  temperature 0.5 / top-p 0.5 (``run_exp.py`` defaults); measured per item as the share of runs
  that are correct, the expected accuracy of one run (``parse_result.py`` scores one random run);
- ``sc``: self-consistency, the majority vote over the same runs (``get_final_pred``).
Answers are read by the official extraction rule (:func:`.evaluation.extract_answer`). A completion
in which the rule finds no letter (a reasoning chain cut by the token budget) is continued with
"# Answer:" and two greedy tokens, the same for every arm (our addition: the budget here is far
below the official 5000 tokens). Measurements are per item, paired by position across arms.
"""
from __future__ import annotations

import os

import numpy as np
import torch

from iclr26.common.seeding import seed_everything

from .evaluation import chat_prompt, extract_answer, majority_vote, per_type_accuracy
from .minibench import make_items

SIZES = {"small": "smollm2-135m", "large": "qwen2.5-coder-0.5b"}

SCALES = {
    "smoke": dict(models={"small": "smollm2-135m", "large": "smollm2-135m"}, n_per_type=1, n_samples=2,
                  cot_tokens=8, direct_tokens=4, batch_size=8),
    # sized by the pilot's timing (about 16 new tokens/s for the 0.5B on one shared core)
    "quick": dict(models=SIZES, n_per_type=2, n_samples=5, cot_tokens=40, direct_tokens=8, batch_size=16),
    # the paper: the 2,646 release questions (images), 5 runs each, 5000 new tokens, 7-72B VLMs on GPUs
    "paper": dict(models={"small": "Qwen/Qwen2.5-VL-7B-Instruct", "large": "Qwen/Qwen2.5-VL-72B-Instruct"},
                  n_per_type=378, n_samples=5, cot_tokens=5000, direct_tokens=64, batch_size=16),
}
SEEDS = {"smoke": 1, "quick": 2, "paper": 1}

TEMPERATURE, TOP_P = 0.5, 0.5   # run_exp.py defaults


def _answers(model, tok, prompts, max_new_tokens, batch_size, *, sample: bool, seed: int):
    from iclr26.models.generation import generate

    kw = dict(do_sample=True, temperature=TEMPERATURE, top_p=TOP_P, seed=seed) if sample else {}
    outs = generate(model, tok, prompts, max_new_tokens, batch_size=batch_size, engine="fast", **kw)
    letters = [extract_answer(o) for o in outs]
    todo = [i for i, a in enumerate(letters) if a == ""]
    if todo:  # answer forcing, identical for every arm
        cont = [prompts[i] + outs[i] + "\n# Answer:" for i in todo]
        forced = generate(model, tok, cont, 2, batch_size=batch_size, engine="fast")
        for i, f in zip(todo, forced):
            letters[i] = extract_answer("Answer:" + f)
    return letters, len(todo), outs


def run(scale: str, seed: int) -> dict:
    cfg = SCALES[scale]
    torch.set_num_threads(1)
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    seed_everything(seed)
    from iclr26.models import load

    # draws offset so that no trial repeats an item of the pilot (draws 0-2, offset 0)
    items = make_items(cfg["n_per_type"], cfg.get("draw_offset", 1000) + seed)
    gold = [it["golden_answer"] for it in items]
    types = [it["type"] for it in items]
    metrics, info = {}, {"n_items": len(items), "models": dict(cfg["models"])}
    loaded = {}
    for size, name in cfg["models"].items():
        if name not in loaded:
            loaded.clear()
            loaded[name] = load(name)
        model, tok = loaded[name]
        direct_p = [chat_prompt(tok, it, "direct") for it in items]
        cot_p = [chat_prompt(tok, it, "cot") for it in items]
        d, d_forced, _ = _answers(model, tok, direct_p, cfg["direct_tokens"], cfg["batch_size"], sample=False, seed=seed)
        runs = [cot_p[i] for i in range(len(items)) for _ in range(cfg["n_samples"])]
        r, r_forced, outs = _answers(model, tok, runs, cfg["cot_tokens"], cfg["batch_size"], sample=True,
                                     seed=10_000 * seed + 7)
        k = cfg["n_samples"]
        preds = [r[i * k:(i + 1) * k] for i in range(len(items))]
        direct_c = [float(a == g) for a, g in zip(d, gold)]
        cot_rate = [float(np.mean([p == g for p in ps])) for ps, g in zip(preds, gold)]
        first_c = [float(ps[0] == g) for ps, g in zip(preds, gold)]
        sc_c = [float(majority_vote(ps) == g) for ps, g in zip(preds, gold)]
        metrics[f"accuracy_{size}"] = {"direct": direct_c, "cot": cot_rate, "first": first_c, "sc": sc_c}
        metrics[f"cot_first_{size}"] = {"cot": first_c}
        # the mechanism of self-consistency: the runs of an item disagree (else the vote is one run)
        metrics[f"runs_disagree_{size}"] = {"cot": [float(len(set(ps)) > 1) for ps in preds]}
        table = per_type_accuracy(cot_rate, types, n_boot=500, seed=seed)
        info[size] = {
            "model": name,
            "direct_accuracy": float(np.mean(direct_c)), "cot_accuracy": float(np.mean(cot_rate)),
            "sc_accuracy": float(np.mean(sc_c)),
            "forced_share_direct": d_forced / len(items), "forced_share_cot": r_forced / len(runs),
            "letter_counts_cot": {L: int(sum(p == L for p in r)) for L in "ABCDE"},
            "letter_counts_direct": {L: int(sum(p == L for p in d)) for L in "ABCDE"},
            "per_type_cot": {t: round(row.accuracy, 4) for t, row in table.items()},
            "example_cot": outs[0][:400],
        }
        del model
    loaded.clear()
    metrics["sc_by_size"] = {"large": metrics["accuracy_large"]["sc"], "small": metrics["accuracy_small"]["sc"]}
    return {"metrics": metrics, "info": info}
