"""ProxyThinker claim check: does base + alpha (expert - amateur) beat the large base alone?

The trio the paper assumes (Sec. 3-4): a small *amateur*, a small *expert* that is a reinforcement-
/ rejection-sampling-fine-tuned copy of that same amateur, and a large base of the same family.

quick:
1. amateur = Qwen2.5-Coder-0.5B-Instruct, untouched; base = Qwen2.5-Coder-1.5B-Instruct (bf16).
2. expert = the amateur + LoRA trained by rejection-sampling fine-tuning (RFT; Yuan et al. 2023's
   recipe, the self-improvement loop behind RFT experts): sample ``k`` completions per *training*
   problem from the amateur, keep the correct ones (distinct per problem), SFT on them with TRL's
   ``SFTTrainer`` (:func:`iclr26.models.posttrain.sft_lora`). Trained once (seed 0); the adapter is
   stored on disk by content so a rerun does not train again.
3. alpha is chosen on a *validation* split from ``alphas`` (ties: the paper's 0.5); the expert's
   gain over the amateur is measured there too (the premise).
4. test split: greedy decoding of base, ProxyThinker (the library's
   :class:`ProxyThinkerLogitsProcessor` through ``generate``), expert alone and amateur alone.
   The token flip rate (share of generated positions where the guided argmax differs from the
   base's own argmax) is recorded as a diagnostic.
Task: integer arithmetic (``iclr26.data.math``, difficulty levels 3 and 4 in equal parts), a
one-shot completion prompt whose reply is started with the expression and " =", so the
completion is the value (scored with ``first_number``). Splits are disjoint by expression.
smoke: SmolLM2-135M as all three models (exercises every code path in seconds).
"""
from __future__ import annotations

import hashlib
import json
import time

from iclr26.common.seeding import seed_everything

SCALES = {
    "smoke": dict(base="smollm2-135m", small="smollm2-135m", dtype=None, levels=(1, 2), n_train=4, n_val=2,
                  n_test=4, k=2, temperature=1.0, max_new_tokens=4, sft_epochs=1, sft_lr=5e-4, sft_batch=4,
                  lora_r=4, alphas=(0.5, 1.0), batch_size=8, gold_fallback=True),
    # levels 3 + 4: the 1.5B base answers ~70 % / ~20 % of them greedily (probe of 24 each), ~45 %
    # overall; k = 4 samples at temperature 1 on 256 training problems (a 64-problem first version
    # kept 27 rows and gave an expert no better than its amateur); SFT 3 epochs; alpha grid = the
    # paper's 0.5 and the official code's default 1.0, chosen on 64 validation problems; 100 test
    # problems (the 1.5B runs ~55 tokens/s on one core, the 0.5B ~120). batch_size 24 for greedy
    # decoding (the key of the cached base / amateur test generations), sample_batch for sampling
    "quick": dict(base="qwen2.5-coder-1.5b", small="qwen2.5-coder-0.5b", dtype="bfloat16", levels=(3, 4),
                  n_train=256, n_val=64, n_test=100, k=4, temperature=1.0, max_new_tokens=10, sft_epochs=3,
                  sft_lr=5e-4, sft_batch=8, lora_r=8, alphas=(0.5, 1.0), batch_size=24, sample_batch=64,
                  gold_fallback=False),
    # the paper: Qwen2.5-VL-32B base, VL-Rethinker-7B expert (RL-tuned Qwen2.5-VL-7B), Qwen2.5-VL-7B
    # amateur, alpha 0.5, MathVista/MathVerse/MathVision/MMMU-Pro; written down, not runnable offline
    "paper": dict(base="Qwen2.5-VL-32B", small="Qwen2.5-VL-7B", dtype="bfloat16", levels=None, n_train=None,
                  n_val=None, n_test=1000, k=None, temperature=None, max_new_tokens=4096, sft_epochs=None,
                  sft_lr=None, sft_batch=None, lora_r=None, alphas=(0.5,), batch_size=8, gold_fallback=False),
}
# one expert is trained (seed 0); the problems are the units (see claims.toml)
SEEDS = {"smoke": 1, "quick": 1, "paper": 1}

#: the one worked example of the prompt (not drawn from any generated split)
SHOT = ("Calculate 12 - 5 * 2.", "12 - 5 * 2 = 2")


def prompt_for(problem) -> str:
    """One-shot completion prompt; the reply is started with the expression and " =" so the
    completion is the value."""
    q, a = SHOT
    expr = problem.metadata["expression"]
    return f"Q: {q}\nA: {a}\nQ: {problem.question}\nA: {expr} ="


def _answer(text: str) -> str:
    """The completion up to its first line break (what the one-shot format asks for)."""
    return text.split("\n", 1)[0]


def splits(cfg, seed: int):
    """Disjoint train / validation / test problems (no expression in two splits), levels mixed
    equally and interleaved."""
    from iclr26.data import math as dm

    seen: set[str] = set()
    out = {}
    for name, n, off in (("test", cfg["n_test"], 0), ("val", cfg["n_val"], 1), ("train", cfg["n_train"], 2)):
        per = [n // len(cfg["levels"]) + (i < n % len(cfg["levels"])) for i in range(len(cfg["levels"]))]
        chosen = []
        for lev, m in zip(cfg["levels"], per):
            pool = dm.arithmetic_problems(4 * m + 20, seed=10_000 * seed + 100 * off + lev, difficulty=lev)
            take = []
            for p in pool:
                e = p.metadata["expression"]
                if e not in seen:
                    seen.add(e)
                    take.append(p)
                if len(take) == m:
                    break
            if len(take) < m:
                raise RuntimeError(f"could not draw {m} distinct level-{lev} problems for the {name} split")
            chosen.append(take)
        out[name] = [p for grp in zip(*chosen) for p in grp] + [p for grp in chosen for p in grp[min(map(len, chosen)):]]
    return out


def _score(outs, problems):
    from iclr26.data import math as dm

    return [int(dm.is_correct(dm.first_number(_answer(o)), p.answer)) for o, p in zip(outs, problems)]


def rft_rows(small, tok, problems, cfg):
    """Rejection sampling: ``k`` samples per problem from the amateur, keep the distinct correct ones."""
    from iclr26.data import math as dm
    from iclr26.models.generation_cache import generate_cached

    prompts = [prompt_for(p) for p in problems for _ in range(cfg["k"])]
    outs = generate_cached(small, tok, prompts, cfg["max_new_tokens"], do_sample=True,
                           temperature=cfg["temperature"], seed=0,
                           batch_size=cfg.get("sample_batch", cfg["batch_size"]))
    rows, solved = [], 0
    for i, p in enumerate(problems):
        kept = []
        for o in outs[i * cfg["k"]:(i + 1) * cfg["k"]]:
            a = _answer(o)
            if dm.is_correct(dm.first_number(a), p.answer) and a not in kept:
                kept.append(a)
        solved += bool(kept)
        rows += [dict(prompt=prompt_for(p), completion=a + "\n") for a in kept]
    n_samples = len(outs)
    n_correct = sum(dm.is_correct(dm.first_number(_answer(o)), problems[i // cfg["k"]].answer)
                    for i, o in enumerate(outs))
    return rows, dict(samples=n_samples, correct_samples=int(n_correct), problems_solved=solved, rows=len(rows))


def _unwrap(model):
    """The Trainer's accelerator may leave a wrapped ``forward`` in the instance dict; drop it so
    the merged model calls its own class's forward."""
    model.__dict__.pop("forward", None)
    for m in model.modules():
        m.__dict__.pop("forward", None)
    return model


def train_expert(cfg, tok, rows):
    """RFT expert: a fresh copy of the small model + LoRA, SFT on ``rows``, merged. The adapter is
    stored under the generation cache by content (model, rows, training settings)."""
    import torch

    from iclr26.models import load
    from iclr26.models.generation_cache import generation_cache_dir, model_fingerprint
    from iclr26.models.lora import load_adapter, save_adapter
    from iclr26.models.posttrain import sft_lora

    small, _ = load(cfg["small"], dtype=cfg["dtype"])
    train_cfg = dict(epochs=cfg["sft_epochs"], lr=cfg["sft_lr"], batch=cfg["sft_batch"], r=cfg["lora_r"],
                     torch=torch.__version__)
    key = hashlib.sha256(json.dumps([model_fingerprint(small), rows, train_cfg], sort_keys=True).encode()).hexdigest()
    path = generation_cache_dir() / "proxythinker_rft" / key[:32]
    log = None
    if not (path / "adapter_config.json").exists():
        run = sft_lora(small, rows, tokenizer=tok, epochs=cfg["sft_epochs"], batch_size=cfg["sft_batch"],
                       lr=cfg["sft_lr"], r=cfg["lora_r"], seed=0, max_length=256)
        log = [h.get("loss") for h in run.log_history if "loss" in h]
        path.parent.mkdir(parents=True, exist_ok=True)
        save_adapter(run.model, path)
        del run
    del small
    expert, _ = load_adapter(cfg["small"], path, dtype=cfg["dtype"], merge=True)
    return _unwrap(expert).eval(), log


class _FlipCounter:
    """Wraps a logits processor; counts generated positions (of unfinished rows) where its output's
    argmax differs from the base model's own argmax. Diagnostic only."""

    def __init__(self, proc, stop_ids):
        self.proc, self.stop_ids = proc, set(stop_ids)
        self.flips = self.steps = 0
        self.prompt_len = None
        self.done = None

    def __call__(self, input_ids, scores):
        import torch

        out = self.proc(input_ids, scores)
        if self.prompt_len is None or input_ids.shape[1] <= self.prompt_len or self.done.shape[0] != input_ids.shape[0]:
            self.prompt_len = input_ids.shape[1]
            self.done = torch.zeros(input_ids.shape[0], dtype=torch.bool)
        elif self.stop_ids:
            self.done |= torch.tensor([int(t) in self.stop_ids for t in input_ids[:, -1]])
        live = ~self.done
        self.flips += int((scores.argmax(-1) != out.argmax(-1))[live].sum())
        self.steps += int(live.sum())
        return out


def _guided(base, expert, amateur, tok, prompts, cfg, alpha):
    from iclr26.models.generation import generate

    from .decoding import ProxyThinkerLogitsProcessor

    stop = {i for i in (tok.eos_token_id, tok.pad_token_id) if i is not None}
    fc = _FlipCounter(ProxyThinkerLogitsProcessor(expert, amateur, alpha, pad_token_id=tok.pad_token_id), stop)
    outs = generate(base, tok, prompts, cfg["max_new_tokens"], batch_size=cfg["batch_size"], logits_processor=[fc])
    return outs, fc.flips / max(fc.steps, 1)


def run(scale: str, seed: int) -> dict:
    import torch

    from iclr26.models import load
    from iclr26.models.generation_cache import generate_cached

    from .decoding import check_same_tokenizer

    cfg = SCALES[scale]
    if scale == "paper":
        raise NotImplementedError("the paper's 32B vision-language setting needs GPUs and hub access")
    torch.set_num_threads(1)
    seed_everything(seed)
    t0 = time.time()
    timing = {}
    data = splits(cfg, seed)
    amateur, tok = load(cfg["small"], dtype=cfg["dtype"])
    base, tok_b = load(cfg["base"], dtype=cfg["dtype"])
    check_same_tokenizer(tok_b, tok, ("base", "amateur"))

    def greedy(model, problems):
        return generate_cached(model, tok, [prompt_for(p) for p in problems], cfg["max_new_tokens"],
                               batch_size=cfg["batch_size"])

    # 1-2. rejection-sampling fine-tuning of the expert on the training split
    t = time.time()
    rows, rft = rft_rows(amateur, tok, data["train"], cfg)
    if not rows:
        if not cfg["gold_fallback"]:
            raise RuntimeError("rejection sampling kept no correct sample: nothing to fine-tune the expert on")
        rows = [dict(prompt=prompt_for(p), completion=f" {p.answer}\n") for p in data["train"]]
        rft["gold_fallback"] = True
    timing["rft_sampling"] = time.time() - t
    t = time.time()
    expert, sft_log = train_expert(cfg, tok, rows)
    timing["sft"] = time.time() - t

    # 3. validation: the premise (expert vs amateur) and the choice of alpha
    t = time.time()
    val = data["val"]
    val_prompts = [prompt_for(p) for p in val]
    val_acc = {"amateur": _score(greedy(amateur, val), val), "expert": _score(greedy(expert, val), val)}
    for a in cfg["alphas"]:
        outs, _ = _guided(base, expert, amateur, tok, val_prompts, cfg, a)
        val_acc[f"proxythinker@{a}"] = _score(outs, val)
    best = max(cfg["alphas"], key=lambda a: (sum(val_acc[f"proxythinker@{a}"]), a == 0.5))
    timing["validation"] = time.time() - t

    # 4. test split
    test = data["test"]
    arms, flips = {}, {}
    for arm, model in (("base", base), ("expert", expert), ("amateur", amateur)):
        t = time.time()
        arms[arm] = _score(greedy(model, test), test)
        timing[arm] = time.time() - t
    t = time.time()
    outs, flips["proxythinker"] = _guided(base, expert, amateur, tok, [prompt_for(p) for p in test], cfg, best)
    arms["proxythinker"] = _score(outs, test)
    timing["proxythinker"] = time.time() - t
    timing["total"] = time.time() - t0

    mean = lambda v: sum(v) / len(v)  # noqa: E731
    return {
        "metrics": {"correct": arms},
        "info": {
            "test_accuracy": {k: mean(v) for k, v in arms.items()},
            "val_accuracy": {k: mean(v) for k, v in val_acc.items()},
            "premise_expert_vs_amateur": {
                split: {"expert": mean(acc["expert"]), "amateur": mean(acc["amateur"]),
                        "expert_only_correct": sum(e > a for e, a in zip(acc["expert"], acc["amateur"])),
                        "amateur_only_correct": sum(a > e for e, a in zip(acc["expert"], acc["amateur"]))}
                for split, acc in (("val", val_acc), ("test", arms))},
            "alpha_chosen_on_val": best,
            "token_flip_rate_test": flips["proxythinker"],
            "rft": rft,
            "sft_loss": sft_log,
            "n": {k: len(v) for k, v in data.items()},
            "seconds": timing,
            "examples": {"prompt": prompt_for(test[0]), "proxythinker": outs[:3]},
        },
    }
