"""GradPruner claim check (arXiv:2601.19503, Sec. 4: pruning during LoRA fine-tuning).

Task: templated review sentiment with negation ("Review: The soup was not tasty.\\nSentiment:"),
answered by comparing the model's next-token scores of " positive" and " negative" (chance 0.5).
Train, validation and test sentences are disjoint draws; one unit (seed) = one independent draw of
the data, the LoRA initialisation and the random arm, and one independently fine-tuned model per arm.

All arms get the same fine-tuning budget: ``steps`` LoRA steps (batch ``batch``) on the same batches.
* ``dense``: no pruning. Its first ``t`` steps are the GradPruner warm-up: the IGIA-Matrix is
  accumulated over them (the computation is identical, so the two runs share it).
* ``gradpruner`` (the method): after the ``t`` warm-up steps the adapter is folded in, the
  ``n_prune`` blocks with the lowest IGIA layer score are pruned, sparsified by IGIA and merged
  same-sign into the preceding kept block; LoRA fine-tuning continues for ``steps - t`` steps. The
  kept fraction (sparsity) is chosen on the validation split from ``keep_grid`` (lowest validation loss
  right after merging).
* ``nomerge``: the same blocks dropped without merging (the paper's ablation).
* ``cosine``: ShortGPT Block Influence on task prompts (calibration), lowest blocks dropped before
  fine-tuning, then ``steps`` LoRA steps (the baseline a user would pick for layer dropping).
* ``random``: uniformly random blocks dropped, then ``steps`` LoRA steps (floor arm).
Block 0 is protected in every arm (the merge target rule needs a preceding block).
Metric ``correct``: per test item 0/1, clustered by unit.

quick: SmolLM2-135M-Instruct (30 blocks, float32). smoke: a tiny Llama over words.
"""
from __future__ import annotations

import copy
import time

import numpy as np

from iclr26.common.seeding import seed_everything

SCALES = {
    "smoke": dict(model="tiny", steps=4, warmup=2, batch=4, n_val=8, n_test=12, n_prune=2, rank=4, lr=5e-3,
                  keep_grid=(0.1, 0.5), n_calib=8),
    # n_prune = 12 of 30 blocks: the paper's 40 % reduction (Sec. 4); keep_grid spans its sparsity
    # range 50-90 % (Sec. 4.3); warmup = 3 of 16 steps instead of the paper's 1 % (see README).
    "quick": dict(model="smollm2-135m", steps=16, warmup=3, batch=8, n_val=32, n_test=160, n_prune=12, rank=8,
                  lr=2e-3, keep_grid=(0.1, 0.3, 0.5), n_calib=16),
    # the paper: Llama-3.1-8B / Qwen2.5-7B, 8 downstream datasets, LoRA r = 8, 1 % warm-up, ~40 % pruned
    "paper": dict(model="meta-llama/Llama-3.1-8B", steps=3000, warmup=30, batch=16, n_val=500, n_test=2000,
                  n_prune=13, rank=8, lr=1e-4, keep_grid=(0.1, 0.3, 0.5), n_calib=128),
}
SEEDS = {"smoke": 1, "quick": 5, "paper": 5}

LABELS = (" positive", " negative")
_NOUNS = ("food", "movie", "service", "room", "book", "song", "hotel", "game", "show", "coffee", "meal", "staff",
          "plot", "view", "music", "phone", "car", "price", "seat", "class", "soup", "trip", "team", "app")
_POS = ("good", "great", "excellent", "wonderful", "lovely", "amazing", "pleasant", "superb", "fantastic",
        "delightful", "nice", "perfect", "tasty", "brilliant")
_NEG = ("bad", "terrible", "awful", "horrible", "poor", "boring", "dreadful", "disappointing", "unpleasant",
        "mediocre", "lousy", "dull", "bland", "annoying")
# (template, negated?)
_FORMS = (("The {n} was {a}.", False), ("The {n} was not {a}.", True), ("I found the {n} really {a}.", False),
          ("Honestly, the {n} was never {a}.", True), ("We all agreed the {n} was {a}.", False),
          ("Nobody thought the {n} was {a}.", True), ("The {n} is quite {a}.", False),
          ("The {n} isn't {a} at all.", True))


def make_items(n: int, rng: np.random.Generator, exclude: set | None = None) -> list[tuple[str, int]]:
    """``n`` distinct (prompt, label) pairs; label 0 = positive, 1 = negative (adjective polarity,
    flipped by negation). Sentences in ``exclude`` are skipped (disjoint splits)."""
    exclude = set() if exclude is None else exclude
    out, seen = [], set()
    while len(out) < n:
        form, neg = _FORMS[rng.integers(len(_FORMS))]
        positive = bool(rng.integers(2))
        adj = (_POS if positive else _NEG)[rng.integers(len(_POS))]
        s = form.format(n=_NOUNS[rng.integers(len(_NOUNS))], a=adj)
        if s in exclude or s in seen:
            continue
        seen.add(s)
        out.append((f"Review: {s}\nSentiment:", int(positive == neg)))
    return out


def _model(cfg):
    if cfg["model"] == "tiny":
        import torch

        from iclr26.models import SimpleTokenizer, TinyLMConfig, build_tiny_lm

        texts = [f"Review: {f.format(n=n, a=a)}\nSentiment:{lab}" for f, _ in _FORMS for n in _NOUNS
                 for a in _POS + _NEG for lab in LABELS]
        tok = SimpleTokenizer.from_texts(texts, level="word")
        torch.manual_seed(0)
        model = build_tiny_lm(TinyLMConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=5,
                                           num_attention_heads=4, num_key_value_heads=2, initializer_range=0.2),
                              len(tok)).eval()
        return model, tok
    from iclr26.models import load

    return load(cfg["model"], dtype="float32")


class _Task:
    """Tokenised prompts and the two label tokens (a shared label prefix, e.g. a space token of a
    word-level tokenizer, is appended to every prompt)."""

    def __init__(self, tok):
        import torch

        ids = [tok(lab, add_special_tokens=False)["input_ids"] for lab in LABELS]
        if ids[0][:-1] != ids[1][:-1] or ids[0][-1] == ids[1][-1]:
            raise ValueError(f"labels {LABELS} must differ in their last token only, got {ids}")
        self.prefix, self.label_ids = ids[0][:-1], torch.tensor([ids[0][-1], ids[1][-1]])
        self.tok = tok
        self.pad = tok.pad_token_id if tok.pad_token_id is not None else 0

    def encode(self, items):
        import torch

        seqs = [self.tok(p, add_special_tokens=False)["input_ids"] + self.prefix for p, _ in items]
        L = max(len(s) for s in seqs)
        ids = torch.full((len(seqs), L), self.pad, dtype=torch.long)
        mask = torch.zeros((len(seqs), L), dtype=torch.long)
        for i, s in enumerate(seqs):           # left padding: the answer position is the last one
            ids[i, L - len(s):] = torch.tensor(s)
            mask[i, L - len(s):] = 1
        return ids, mask, torch.tensor([y for _, y in items])

    def logits(self, model, ids, mask):
        """Two-way logits (positive, negative) at the last position."""
        from iclr26.compression.gradpruner.pruning import _base

        base = _base(model)
        h = base.get_decoder()(input_ids=ids, attention_mask=mask).last_hidden_state[:, -1]
        w = base.get_output_embeddings().weight[self.label_ids]
        return h @ w.T


def _loss(task, model, items):
    import torch

    ids, mask, y = task.encode(items)
    return torch.nn.functional.cross_entropy(task.logits(model, ids, mask), y)


def _evaluate(task, model, items, bs=32):
    import torch

    model.eval()
    correct, losses = [], []
    with torch.no_grad():
        for k in range(0, len(items), bs):
            ids, mask, y = task.encode(items[k:k + bs])
            lg = task.logits(model, ids, mask)
            correct += (lg.argmax(-1) == y).long().tolist()
            losses.append(float(torch.nn.functional.cross_entropy(lg, y, reduction="sum")))
    return correct, sum(losses) / len(items)


def _finetune(task, model, batches, cfg, seed, igia=None, warmup=0, on_warmup_end=None):
    """LoRA (r = ``rank``, alpha = 2r, all linear projections) + AdamW over ``batches``; returns the
    peft model. The first ``warmup`` steps feed ``igia``; ``on_warmup_end(peft_model)`` runs after them."""
    import torch

    from iclr26.models.lora import with_lora

    pm = with_lora(model, r=cfg["rank"], seed=seed)
    pm.train()
    opt = torch.optim.AdamW([p for p in pm.parameters() if p.requires_grad], lr=cfg["lr"], weight_decay=0.0)
    losses = []
    for step, b in enumerate(batches):
        loss = _loss(task, pm, b)
        loss.backward()
        if igia is not None and step < warmup:
            igia.update(pm)
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(loss.item())
        if on_warmup_end is not None and step == warmup - 1:
            on_warmup_end(pm)
    pm.eval()
    return pm, losses


def run(scale: str, seed: int) -> dict:
    import torch

    from iclr26.compression.gradpruner import IGIA, block_influence_scores, prune_layers, select_prune_layers

    cfg = SCALES[scale]
    if scale == "paper":
        raise NotImplementedError("the paper's 7-8B models and downstream datasets need GPUs and hub access")
    rng = seed_everything(seed)
    t0 = time.time()
    model0, tok = _model(cfg)
    model0.eval()
    for p in model0.parameters():
        p.requires_grad_(False)
    task = _Task(tok)
    n_layers = len(model0.model.layers)
    steps, warm, bs = cfg["steps"], cfg["warmup"], cfg["batch"]
    train = make_items(steps * bs, rng)
    used = {p for p, _ in train}
    val = make_items(cfg["n_val"], rng, exclude={p[len("Review: "):-len("\nSentiment:")] for p in used})
    used |= {p for p, _ in val}
    test = make_items(cfg["n_test"], rng, exclude={p[len("Review: "):-len("\nSentiment:")] for p in used})
    batches = [train[i * bs:(i + 1) * bs] for i in range(steps)]
    lora_seed = int(rng.integers(2**31))
    zero_shot, _ = _evaluate(task, model0, val)

    # dense run; its first `warm` steps are GradPruner's IGIA warm-up
    igia = IGIA()
    snap = {}

    def keep_warm(pm):
        snap["model"] = copy.deepcopy(pm).merge_and_unload()

    pm, loss_dense = _finetune(task, copy.deepcopy(model0), batches, cfg, lora_seed, igia=igia, warmup=warm,
                               on_warmup_end=keep_warm)
    correct = {"dense": _evaluate(task, pm, test)[0]}
    del pm
    F = igia.matrices()
    igia_scores = igia.layer_scores()
    chosen = {"igia": select_prune_layers(igia_scores, cfg["n_prune"])}

    # sparsity (kept fraction) chosen on the validation split, right after merging
    val_loss = {}
    for keep in cfg["keep_grid"]:
        m = prune_layers(copy.deepcopy(snap["model"]), chosen["igia"], importance=F, keep=keep)
        val_loss[keep] = _evaluate(task, m, val)[1]
        del m
    best_keep = min(cfg["keep_grid"], key=lambda k: (val_loss[k], k))

    rest = batches[warm:]
    curves = {"dense": loss_dense}
    m = prune_layers(copy.deepcopy(snap["model"]), chosen["igia"], importance=F, keep=best_keep)
    pm, curves["gradpruner"] = _finetune(task, m, rest, cfg, lora_seed)
    correct["gradpruner"] = _evaluate(task, pm, test)[0]
    del pm, m
    m = prune_layers(snap.pop("model"), chosen["igia"], merge=False)
    pm, curves["nomerge"] = _finetune(task, m, rest, cfg, lora_seed)
    correct["nomerge"] = _evaluate(task, pm, test)[0]
    del pm, m, F

    calib = [x for b in batches for x in b][:cfg["n_calib"]]
    ids, mask, _ = task.encode(calib)
    bi = block_influence_scores(model0, ids, mask)
    chosen["cosine"] = select_prune_layers(bi, cfg["n_prune"])
    chosen["random"] = sorted(int(i) for i in rng.choice(np.arange(1, n_layers), cfg["n_prune"], replace=False))
    for arm in ("cosine", "random"):
        m = prune_layers(copy.deepcopy(model0), chosen[arm], merge=False)
        pm, curves[arm] = _finetune(task, m, batches, cfg, lora_seed)
        correct[arm] = _evaluate(task, pm, test)[0]
        del pm, m
    return {
        "metrics": {"correct": correct},
        "info": {
            "accuracy": {a: float(np.mean(v)) for a, v in correct.items()},
            "zero_shot_val_accuracy": float(np.mean(zero_shot)),
            "pruned": chosen,
            "igia_layer_scores": [float(s) for s in igia_scores],
            "block_influence": [float(s) for s in bi],
            "keep_val_loss": {str(k): v for k, v in val_loss.items()},
            "keep": best_keep,
            "train_loss": curves,
            "n": {"train": len(train), "val": len(val), "test": len(test), "layers": n_layers},
            "seconds": time.time() - t0,
        },
    }
