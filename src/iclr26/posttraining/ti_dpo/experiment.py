"""Claim checks for arXiv:2505.19653 (TI-DPO) with SmolLM2-135M-Instruct + LoRA, trained with TRL.

One trial (seed) trains, for every label-noise level, three policies from the same LoRA init, on the
same pairs in the same order, with the same optimiser and number of steps:

* ``dpo``: TRL's ``DPOTrainer`` (beta = 0.1);
* ``ti_dpo``: :class:`.TIDPOTrainer` (hybrid weights, lambda = 0.7, triplet gamma = 0.1, Table B12);
* ``ti_dpo_no_triplet``: :class:`.TIDPOTrainer` with ``gamma = 0`` (the paper's no-triplet ablation).

Data (``cfg["datasets"]``):

* ``verifiable``: preference pairs built from the model's own samples. For integer-arithmetic
  problems (:func:`iclr26.data.math.arithmetic_problems`) with a one-shot prompt, the base model
  draws ``k`` answers at temperature 1; a problem with at least one correct and one wrong answer
  gives the pair (a correct answer, a wrong answer), checked against the exact gold value. The pool
  of problems and samples is drawn once (generation seed 0, cached on disk); each trial draws its
  own train / held-out split of the pool.
* ``hh``: human preference pairs, Anthropic HH-RLHF harmless-base test split (shipped with the
  package in ``iclr26/data/files/hh-rlhf/``, MIT, see its ``SOURCE.md``), the prompt cut to its last ``hh_prompt_tokens`` tokens and the two
  responses to their first ``hh_completion_tokens`` tokens.

Label noise: a fraction ``p`` of the training pairs (exactly ``round(p n)``, drawn per trial) has
chosen and rejected swapped. Held-out pairs keep their true labels.

Metrics per held-out pair (items of one trained model: a cluster): preference accuracy (1 when the
implicit-reward margin ``beta (log pi/pi_ref (y_w) - log pi/pi_ref (y_l))`` is positive, 1/2 on a tie,
0 otherwise) and the margin itself, both with uniform token weights for every arm (the DPO reward).
No hyper-parameter is tuned: all arms share the learning rate, LoRA rank, batch and steps.
"""
from __future__ import annotations

import gzip
import json
import os
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from iclr26.common.seeding import seed_everything
from iclr26.data.packaged import packaged_dir

ARMS = ("dpo", "ti_dpo", "ti_dpo_no_triplet")
MODEL = "smollm2-135m"
HH_FILE = "harmless-base-test.jsonl.gz"
#: the copy shipped with the package (anthropics/hh-rlhf, MIT; licence and SOURCE.md beside it)
DEFAULT_HH_ROOT = packaged_dir("hh-rlhf")
#: one worked example before the question (the base model's own format, no chat template)
ONE_SHOT = "2 + 3 = 5\n"

_COMMON = dict(beta=0.1, lam=0.7, gamma=0.1, triplet_margin=0.01, anchor_temperature=0.8, anchor_top_k=50,
               anchor_top_p=0.95, lora_r=8, difficulty=1, k=6, hh_prompt_tokens=24, hh_completion_tokens=12)
SCALES = {
    # seconds: the claims' code path (verifiable pairs, two noise levels, every arm at noise 0, the two
    # compared arms at noise 40 % as at quick scale), one optimiser step each; the HH loader and pair
    # builder are unit-tested on the shipped file
    "smoke": dict(_COMMON, datasets=("verifiable",), noise=(0.0, 0.4), noisy_arms=("dpo", "ti_dpo"),
                  pool_problems=24, k=4, n_train=4, n_eval=4, steps=1, batch=2, lr=1e-3, anchor_tokens=2),
    # the CPU claim check (power-limited, see the README): verifiable pairs, noise 0 % and 40 %,
    # one epoch of 32 pairs (4 steps of 8)
    "quick": dict(_COMMON, datasets=("verifiable",), noise=(0.0, 0.4), noisy_arms=("dpo", "ti_dpo"),
                  pool_problems=320, n_train=32, n_eval=48, steps=4, batch=8, lr=2e-3, anchor_tokens=3),
    # the full design at a size a GPU runs in hours: both data sets, 0 / 20 / 40 % noise
    "paper": dict(_COMMON, datasets=("verifiable", "hh"), noise=(0.0, 0.2, 0.4), pool_problems=6000, n_train=2000,
                  n_eval=500, steps=500, batch=32, lr=5e-5, anchor_tokens=64, lora_r=16, hh_prompt_tokens=256,
                  hh_completion_tokens=128),
}
SEEDS = {"smoke": 1, "quick": 3, "paper": 8}


# ----------------------------------------------------------------------------- data
def load_hh(root: str | os.PathLike | None = None) -> list[dict]:
    """The HH-RLHF harmless-base test pairs (``chosen`` / ``rejected`` dialogues) from ``root``
    (default: the copy shipped with the package, :data:`DEFAULT_HH_ROOT`)."""
    path = Path(root if root is not None else DEFAULT_HH_ROOT) / HH_FILE
    if not path.is_file():
        where = (f"the directory passed as root= ({path.parent})" if root is not None
                 else f"the package's own data ({path.parent})")
        raise FileNotFoundError(
            f"{path} not found: the HH-RLHF harmless-base test split (anthropics/hh-rlhf on GitHub, MIT, "
            f"harmless-base/test.jsonl.gz saved as {HH_FILE}) was looked for in {where}")
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def split_dialogue(chosen: str, rejected: str):
    """``(prompt, chosen_reply, rejected_reply)``: the shared dialogue up to and including the last
    ``"\\n\\nAssistant:"``, and the two final replies; None when the two do not share that prompt."""
    key = "\n\nAssistant:"
    i = chosen.rfind(key)
    if i < 0:
        return None
    prompt = chosen[: i + len(key)]
    if not rejected.startswith(prompt):
        return None
    return prompt, chosen[len(prompt):], rejected[len(prompt):]


def hh_pairs(rows, tokenizer, prompt_tokens: int, completion_tokens: int) -> list[dict]:
    """HH rows as ``{"prompt", "chosen", "rejected"}``, the prompt cut to its last ``prompt_tokens``
    tokens, the replies to their first ``completion_tokens``; pairs whose cut replies agree are dropped."""
    out = []
    for r in rows:
        s = split_dialogue(r["chosen"], r["rejected"])
        if s is None:
            continue
        p, c, j = s
        p_ids = tokenizer(p, add_special_tokens=False).input_ids[-prompt_tokens:]
        c_ids = tokenizer(c, add_special_tokens=False).input_ids[:completion_tokens]
        j_ids = tokenizer(j, add_special_tokens=False).input_ids[:completion_tokens]
        if not c_ids or not j_ids or c_ids == j_ids:
            continue
        out.append(dict(prompt=tokenizer.decode(p_ids), chosen=tokenizer.decode(c_ids),
                        rejected=tokenizer.decode(j_ids)))
    return out


def verifiable_pool(model, tokenizer, n_problems: int, k: int, difficulty: int) -> list[dict]:
    """Pairs (correct answer, wrong answer) from ``k`` samples (temperature 1, generation seed 0) of
    the base model per arithmetic problem, scored against the exact gold value."""
    from iclr26.data.math import arithmetic_problems, first_number, is_correct
    from iclr26.models.generation_cache import generate_cached

    probs = arithmetic_problems(n_problems, seed=0, difficulty=difficulty)
    prompts = [f"{ONE_SHOT}{p.metadata['expression']} =" for p in probs]
    outs = generate_cached(model, tokenizer, [p for p in prompts for _ in range(k)], 4, do_sample=True,
                           temperature=1.0, top_p=1.0, seed=0, batch_size=64)
    pairs = []
    for i, p in enumerate(probs):
        nums = [first_number(o) for o in outs[k * i: k * (i + 1)]]
        good = [x for x in nums if x is not None and is_correct(x, p.answer)]
        bad = [x for x in nums if x is not None and not is_correct(x, p.answer)]
        if good and bad:
            pairs.append(dict(prompt=prompts[i], chosen=f" {good[0]}", rejected=f" {bad[0]}"))
    return pairs


def flip_labels(pairs: list[dict], p: float, rng: np.random.Generator) -> list[dict]:
    """Swap chosen and rejected in exactly ``round(p * len(pairs))`` pairs drawn by ``rng``."""
    n_flip = int(round(p * len(pairs)))
    idx = set(rng.choice(len(pairs), size=n_flip, replace=False).tolist()) if n_flip else set()
    return [dict(prompt=x["prompt"], chosen=x["rejected"], rejected=x["chosen"]) if i in idx else dict(x)
            for i, x in enumerate(pairs)]


def _split(pool, cfg, rng, name):
    need = cfg["n_train"] + cfg["n_eval"]
    if len(pool) < need:
        raise RuntimeError(f"{name}: only {len(pool)} usable pairs, the scale needs {need}")
    idx = rng.permutation(len(pool))
    return [pool[i] for i in idx[: cfg["n_train"]]], [pool[i] for i in idx[cfg["n_train"]: need]]


# ----------------------------------------------------------------------------- training
def train_arm(arm: str, train, heldout, cfg, seed: int) -> np.ndarray:
    """Train one arm from a fresh LoRA (seeded by ``seed``) and return the held-out margins."""
    from datasets import Dataset
    from trl import DPOConfig, DPOTrainer

    from iclr26.models import load
    from iclr26.models.lora import trl_args, with_lora

    from .trainer import TIDPOTrainer, preference_margins

    base, tok = load(MODEL)
    model = with_lora(base, r=cfg["lora_r"], seed=seed)         # the same LoRA init for every arm of a trial
    with tempfile.TemporaryDirectory() as out:
        args = trl_args(DPOConfig, out, max_steps=cfg["steps"], learning_rate=cfg["lr"],
                        per_device_train_batch_size=cfg["batch"], per_device_eval_batch_size=16,
                        beta=cfg["beta"], precompute_ref_log_probs=False, seed=seed, logging_steps=10 ** 6)
        kw = dict(model=model, args=args, processing_class=tok, train_dataset=Dataset.from_list(train),
                  eval_dataset=Dataset.from_list(heldout))
        if arm == "dpo":
            trainer = DPOTrainer(**kw)
        else:
            trainer = TIDPOTrainer(**kw, lam=cfg["lam"], gamma=cfg["gamma"] if arm == "ti_dpo" else 0.0,
                                   triplet_margin=cfg["triplet_margin"], anchor_max_new_tokens=cfg["anchor_tokens"],
                                   anchor_temperature=cfg["anchor_temperature"], anchor_top_k=cfg["anchor_top_k"],
                                   anchor_top_p=cfg["anchor_top_p"])
        torch.manual_seed(seed)
        trainer.train()
        m = preference_margins(trainer).numpy().astype(float)
    del trainer, model, base
    return m


def _accuracy(m):
    return np.where(m > 0, 1.0, np.where(m < 0, 0.0, 0.5))


def run(scale: str, seed: int) -> dict:
    cfg = SCALES[scale]
    seed_everything(seed)
    torch.set_num_threads(1)
    import transformers

    from iclr26.models import load
    transformers.logging.set_verbosity_error()
    t0 = time.perf_counter()
    rng = np.random.default_rng([seed, 2505])
    metrics, info = {}, {"pairs": {}, "seconds": {}}
    base, tok = load(MODEL)
    for ds in cfg["datasets"]:
        if ds == "verifiable":
            pool = verifiable_pool(base, tok, cfg["pool_problems"], cfg["k"], cfg["difficulty"])
        else:
            pool = hh_pairs(load_hh(), tok, cfg["hh_prompt_tokens"], cfg["hh_completion_tokens"])
        train, heldout = _split(pool, cfg, rng, ds)
        info["pairs"][ds] = len(pool)
        acc_mean = {}
        levels = cfg.get("hh_noise", cfg["noise"]) if ds == "hh" else cfg["noise"]
        for p in levels:
            tag = f"{ds}_n{int(round(100 * p))}"
            noisy = flip_labels(train, p, rng)
            acc, mar = {}, {}
            # the no-triplet ablation is run at every noise level unless cfg["noisy_arms"] limits the noisy ones
            arms = cfg.get("noisy_arms", ARMS) if p > 0 else ARMS
            for arm in arms:
                t = time.perf_counter()
                m = train_arm(arm, noisy, heldout, cfg, seed)
                info["seconds"][f"{tag}_{arm}"] = time.perf_counter() - t
                acc[arm], mar[arm] = _accuracy(m).tolist(), m.tolist()
            metrics[f"acc_{tag}"] = acc
            metrics[f"margin_{tag}"] = mar
            acc_mean[p] = {a: float(np.mean(v)) for a, v in acc.items()}
        lo, hi = min(levels), max(levels)
        # TI-DPO's accuracy gain over DPO at the highest and at the lowest noise level (one value per seed)
        metrics[f"gain_over_dpo_{ds}"] = {
            f"noise{int(round(100 * hi))}": acc_mean[hi]["ti_dpo"] - acc_mean[hi]["dpo"],
            f"noise{int(round(100 * lo))}": acc_mean[lo]["ti_dpo"] - acc_mean[lo]["dpo"]}
    del base
    info["seconds"]["total"] = time.perf_counter() - t0
    return {"metrics": metrics, "info": info}
