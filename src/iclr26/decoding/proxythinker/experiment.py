"""ProxyThinker claim check: does base + alpha (expert - amateur) beat the large base alone?

quick: large base = Qwen2.5-Coder-1.5B-Instruct, small expert = Qwen2.5-Coder-0.5B-Instruct,
small amateur = the expert truncated to its first 20 of 24 decoder layers (weights shared; no
pre-RFT checkpoint of the 0.5B ships offline, see README). Task: multi-step arithmetic
(``iclr26.data.math``, difficulty 3; GSM-style ``gsm_symbolic`` problems at the paper scale), greedy
decoding, exact-answer scoring. Both arms decode the same
problems with the same prompts; items are paired by position.
smoke: randomly initialised tiny Llamas with a character tokenizer (exercises every code path).
"""
from __future__ import annotations

import time

from iclr26.common.seeding import seed_everything

SCALES = {
    "smoke": dict(models="tiny", n_problems=3, max_new_tokens=6, alpha=0.5, amateur_keep=1,
                  batch_size=3),
    # alpha = 0.5: the paper's setting (Sec. 4); 20/24 layers: fixed a priori, not tuned
    # multi-step arithmetic (iclr26.data.math, difficulty 3): with gsm_symbolic and 160 new tokens
    # the 1.5B base was cut off before its answer on most problems (8 % in both arms)
    "quick": dict(models="qwen", n_problems=16, max_new_tokens=160, alpha=0.5, amateur_keep=20,
                  batch_size=8, task="arithmetic", difficulty=3),
    # the paper: Qwen2.5-VL-32B base, VL-Rethinker-7B expert, Qwen2.5-VL-7B amateur, alpha 0.5,
    # MathVista/MathVerse/MathVision/MMMU-Pro; written down, not runnable offline
    "paper": dict(models="paper", n_problems=1000, max_new_tokens=4096, alpha=0.5, amateur_keep=None,
                  batch_size=8),
}
SEEDS = {"smoke": 1, "quick": 2, "paper": 1}

# no placeholder letter in the instruction: "finish with 'The answer is N.'" made both arms write a
# literal "N" on many problems
SYSTEM = ("You are a careful math assistant. Reason step by step, briefly, then give the final "
          "answer as a number in \\boxed{}.")


def _tiny_trio():
    from iclr26.models import random_char_lm

    (base, tok), (expert, _), (amateur, _) = (random_char_lm(seed=1000 + i, num_hidden_layers=n)
                                              for i, n in enumerate((3, 2, 2)))
    return base, expert, amateur, tok


def run(scale: str, seed: int) -> dict:
    from iclr26.data import math as dm
    from iclr26.decoding.proxythinker import layer_pruned_copy, proxythinker_generate

    cfg = SCALES[scale]
    if cfg["models"] == "paper":
        raise NotImplementedError("the paper's 32B vision-language setting needs GPUs and hub access")
    seed_everything(seed)
    t0 = time.time()
    if cfg["models"] == "tiny":
        problems = dm.arithmetic_problems(cfg["n_problems"], seed=seed, difficulty=1)
        base, expert, amateur, tok = _tiny_trio()
        prompts = [p.question + "\n" for p in problems]
    else:
        from iclr26.models import load

        if cfg.get("task") == "arithmetic":
            problems = dm.arithmetic_problems(cfg["n_problems"], seed=seed, difficulty=cfg["difficulty"])
        else:
            problems = dm.gsm_problems(cfg["n_problems"], seed=seed)
        base, tok = load("qwen2.5-coder-1.5b")
        expert, tok_e = load("qwen2.5-coder-0.5b")
        from .decoding import check_same_tokenizer

        check_same_tokenizer(tok, tok_e, ("base", "expert"))
        amateur = layer_pruned_copy(expert, cfg["amateur_keep"])
        prompts = [dm.chat_prompt(tok, p.question, system=SYSTEM) for p in problems]
    t_load = time.time() - t0

    arms = {}
    texts = {}
    timing = {}
    for arm, alpha in (("base", 0.0), ("proxythinker", cfg["alpha"])):
        t = time.time()
        if alpha == 0.0:
            # the large base alone: plain greedy decoding (no small models run)
            from iclr26.models.generation import generate

            outs = generate(base, tok, prompts, cfg["max_new_tokens"], batch_size=cfg["batch_size"])
        else:
            outs = proxythinker_generate(base, expert, amateur, tok, prompts, cfg["max_new_tokens"],
                                         alpha=alpha, batch_size=cfg["batch_size"])
        timing[arm] = time.time() - t
        texts[arm] = outs
        arms[arm] = [int(dm.is_correct(dm.extract_answer(o), p.answer)) for o, p in zip(outs, problems)]

    return {
        "metrics": {"correct": {"proxythinker": arms["proxythinker"], "base": arms["base"]}},
        "info": {
            "accuracy": {k: sum(v) / len(v) for k, v in arms.items()},
            "seconds": {"load": t_load, **timing},
            "alpha": cfg["alpha"],
            "amateur_layers_kept": cfg["amateur_keep"],
            "problem_source": "iclr26.data.math",
            "examples": {k: v[:2] for k, v in texts.items()},
        },
    }
