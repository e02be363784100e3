"""Claim check for Game-RL / Code2Logic (arXiv:2505.13886): GRPO on synthesised game questions
against SFT-only with matched samples, on a held-out game and on harder levels of the training games.

Per seed (one seed = one independently trained pair of models, the unit):
  stage 1 (shared): LoRA SFT (TRL ``SFTTrainer`` via :func:`iclr26.models.posttrain.sft_lora`) of
          SmolLM2-135M-Instruct on ``n_sft`` in-domain questions (Sokoban, Maze, Langton's ant, Life,
          level 1) with their gold option letters;
  stage 2, arm ``game_rl``: GRPO (TRL ``GRPOTrainer`` via :func:`iclr26.models.posttrain.grpo_lora`,
          reward = this package's :func:`verifiable_reward`) on ``steps * prompts_per_step`` further
          in-domain level-1 questions;
  stage 2, arm ``sft_only``: SFT on exactly the same further questions with their gold letters, in the
          same order, same batch of questions per optimizer step, same number of steps, same lr.
Evaluation (greedy, option letter): the held-out game (Snake, level 1, never trained on) and the
training games at level 3 (larger boards, longer move sequences); also an in-domain level-1
validation split, the only split used to choose lr and steps.
"""
from __future__ import annotations

import copy
import gc

import numpy as np

from iclr26.common.seeding import seed_everything

from .generator import extract_choice, generator_for, verifiable_reward

IN_DOMAIN = ("sokoban", "maze", "langton_ant", "life")
HELD_OUT = "snake"
TRAIN_LEVEL, HARD_LEVEL = 1, 3

SCALES = {
    "smoke": dict(model="smollm2-135m", n_sft=2, sft_batch=2, sft_lr=2e-4, steps=1, prompts_per_step=1,
                  num_generations=2, grpo_lr=5e-4, max_completion_length=2, lora_r=8,
                  n_heldout=2, n_hard=2, n_val=2, batch_size=16),
    "quick": dict(model="smollm2-135m", n_sft=32, sft_batch=8, sft_lr=2e-4, steps=6, prompts_per_step=2,
                  num_generations=4, grpo_lr=5e-4, max_completion_length=2, lora_r=8,
                  n_heldout=40, n_hard=40, n_val=16, batch_size=20),
    # the paper: Qwen2.5-VL-7B (full fine-tuning), GRPO with G = 12, lr 2e-7, beta 0.04, 1 epoch on
    # GameQA-5K (20 in-domain games); evaluation on the 10 out-of-domain games
    "paper": dict(model="qwen2.5-coder-1.5b", n_sft=5000, sft_batch=16, sft_lr=1e-5, steps=625,
                  prompts_per_step=8, num_generations=12, grpo_lr=2e-7, max_completion_length=16,
                  lora_r=16, n_heldout=1000, n_hard=1000, n_val=500, batch_size=32),
}
SEEDS = {"smoke": 1, "quick": 3, "paper": 5}


def mixed(games, n, level, seed):
    """``n`` questions spread evenly over ``games`` (round robin), each game's from its own generator
    stream ``seed``; shuffled by ``seed``."""
    per = -(-n // len(games))
    recs = [r for g in games for r in generator_for(g).generate(per, level, seed)]
    order = np.random.default_rng([seed, 99]).permutation(len(recs))
    return [recs[i] for i in order[:n]]


def data(cfg, seed):
    """Disjoint question streams per seed: distinct generator seeds per split."""
    base = 10_000 * (seed + 1)
    n_rl = cfg["steps"] * cfg["prompts_per_step"]
    return dict(
        sft=mixed(IN_DOMAIN, cfg["n_sft"], TRAIN_LEVEL, base + 1),
        extra=mixed(IN_DOMAIN, n_rl, TRAIN_LEVEL, base + 2),
        val=mixed(IN_DOMAIN, cfg["n_val"], TRAIN_LEVEL, base + 3),
        heldout=generator_for(HELD_OUT).generate(cfg["n_heldout"], TRAIN_LEVEL, base + 4),
        hard=mixed(IN_DOMAIN, cfg["n_hard"], HARD_LEVEL, base + 5),
    )


def sft_rows(recs):
    return [{"prompt": r["prompt"], "completion": " " + r["answer"]} for r in recs]


def evaluate(model, tok, recs, cfg):
    """Greedy option letter per question; 1.0 when it is the right one (the library verifier)."""
    from iclr26.models.generation import generate

    texts = generate(model, tok, [r["prompt"] for r in recs], cfg["max_completion_length"], do_sample=False,
                     batch_size=cfg["batch_size"])
    return verifiable_reward(completions=texts, answer=[r["answer"] for r in recs]), texts


def run(scale: str, seed: int) -> dict:
    import torch

    from iclr26.models.posttrain import grpo_lora, sft_lora

    cfg = SCALES[scale]
    seed_everything(seed)
    torch.set_num_threads(1)
    d = data(cfg, seed)
    base = sft_lora(cfg["model"], sft_rows(d["sft"]), batch_size=cfg["sft_batch"], lr=cfg["sft_lr"], epochs=1,
                    r=cfg["lora_r"], seed=seed)
    sft_copy = copy.deepcopy(base.model)
    out, info = {}, {}
    for split in ("val", "heldout", "hard"):
        out[("sft_base", split)], _ = evaluate(base.model, base.tokenizer, d[split], cfg)
    # arm B: SFT-only on the same extra questions, same order and per-step batch
    b = sft_lora(sft_copy, sft_rows(d["extra"]), tokenizer=base.tokenizer, batch_size=cfg["prompts_per_step"],
                 lr=cfg["grpo_lr"], steps=cfg["steps"], seed=seed, train_sampling_strategy="sequential")
    for split in ("val", "heldout", "hard"):
        out[("sft_only", split)], _ = evaluate(b.model, b.tokenizer, d[split], cfg)
    del b, sft_copy
    gc.collect()
    # arm A: GRPO with the library's verifiable reward on the same extra questions
    a = grpo_lora(base.model, verifiable_reward,
                  {"prompt": [r["prompt"] for r in d["extra"]], "answer": [r["answer"] for r in d["extra"]]},
                  tokenizer=base.tokenizer, steps=cfg["steps"], prompts_per_step=cfg["prompts_per_step"],
                  num_generations=cfg["num_generations"], max_completion_length=cfg["max_completion_length"],
                  lr=cfg["grpo_lr"], seed=seed, shuffle_dataset=False)
    examples = {}
    for split in ("val", "heldout", "hard"):
        out[("game_rl", split)], examples[split] = evaluate(a.model, a.tokenizer, d[split], cfg)
    rewards = [h["reward"] for h in a.log_history if "reward" in h]
    del a, base
    gc.collect()
    acc = {f"{arm}_{split}": float(np.mean(v)) for (arm, split), v in out.items()}
    info.update(accuracy=acc, grpo_mean_reward=rewards, examples={k: v[:4] for k, v in examples.items()},
                no_letter_rate_game_rl_heldout=float(np.mean([extract_choice(t) is None for t in examples["heldout"]])),
                n_extra_questions=len(d["extra"]))
    return {
        "metrics": {
            "heldout_correct": {"game_rl": out[("game_rl", "heldout")], "sft_only": out[("sft_only", "heldout")]},
            "hard_correct": {"game_rl": out[("game_rl", "hard")], "sft_only": out[("sft_only", "hard")]},
            "val_correct": {"game_rl": out[("game_rl", "val")], "sft_only": out[("sft_only", "val")],
                            "sft_base": out[("sft_base", "val")]},
        },
        "info": info,
    }
