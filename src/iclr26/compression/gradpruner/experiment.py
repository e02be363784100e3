"""GradPruner claim check (arXiv:2601.19503, Sec. 4; pipeline of the official ``PaperCode/GradPrune``).

Task: two-aspect review sentiment with negation ("Review: The soup was tasty, and the staff was not
friendly.\nAspect: staff\nSentiment:"), answered by comparing the model's next-token scores of
" positive" and " negative" (chance 0.5). The asked aspect is either clause; the other clause's
polarity is drawn independently, so the model must bind the aspect to its clause (chosen to keep the
dense fine-tune below ceiling; the pretrained model scores about 0.74 zero-shot in the quick units).
Train and test sentences are disjoint draws; one unit (seed) = one independent draw of the data and
the LoRA initialisation, and one independently fine-tuned model per arm.

Every arm gets the same fine-tuning budget: ``steps`` LoRA steps (batch ``batch``) on the same batches,
from the pretrained weights (pruned or not), with the same fresh LoRA initialisation.
* ``dense``: no pruning. Its first ``warmup`` steps are the gradient-collection run of the official
  pipeline (Step 1 of its README: LoRA training whose first 40 steps' gradients are saved); the
  computation is identical, so the two share it.
* ``gradpruner`` (the method, ``process_important.py``): the contiguous run of ``n_prune`` blocks
  with the lowest official layer score (sum of Frobenius norms of the simulated gradients) is
  removed from the pretrained model; its first two and last blocks are merged into the block before
  the run through the top-``keep`` IGIA mask AND the sign agreement; then ``steps`` LoRA steps.
* ``nomerge``: the same run dropped without merging (the paper's ablation), then ``steps`` steps.
* ``cosine``: ShortGPT Block Influence on task prompts, the ``n_prune`` lowest blocks dropped, then
  ``steps`` steps (the layer-pruning baseline a user would pick).
Metric ``correct``: per test item 0/1, clustered by unit.

quick: SmolLM2-135M-Instruct (30 blocks, float32). smoke: a tiny Llama over words.
"""
from __future__ import annotations

import copy
import math
import time

import numpy as np

from iclr26.common.seeding import seed_everything

SCALES = {
    "smoke": dict(model="tiny", steps=4, warmup=2, batch=4, n_test=12, n_prune=2, rank=4, lr=5e-3, keep=0.2,
                  n_calib=8),
    # n_prune = 12 of 30 blocks: the paper's ~40 % (13 of 32 in the official process_important.py);
    # keep = 0.2: the official spars(); warmup = 4 of 12 steps instead of the official 40 (see README);
    # steps, n_test and the 6 seeds are what a shared 2-core machine finishes in the CPU budget
    "quick": dict(model="smollm2-135m", steps=12, warmup=4, batch=8, n_test=64, n_prune=12, rank=8, lr=2e-3,
                  keep=0.2, n_calib=16),
    # the paper / official scripts: Llama-3.1-8B, LoRA r = 8, alpha 32, 40 gradient-collection steps,
    # blocks 18-30 pruned, 3 epochs of LoRA fine-tuning of the pruned model at lr 1e-5
    "paper": dict(model="meta-llama/Llama-3.1-8B", steps=3000, warmup=40, batch=16, n_test=2000, n_prune=13,
                  rank=8, lr=1e-5, keep=0.2, n_calib=128),
}
SEEDS = {"smoke": 1, "quick": 6, "paper": 5}

LABELS = (" positive", " negative")
_NOUNS = ("food", "movie", "service", "room", "book", "song", "hotel", "game", "show", "coffee", "meal", "staff",
          "plot", "view", "music", "phone", "car", "price", "seat", "class", "soup", "trip", "team", "app")
_POS = ("good", "great", "excellent", "wonderful", "lovely", "amazing", "pleasant", "superb", "fantastic",
        "delightful", "nice", "perfect", "tasty", "brilliant")
_NEG = ("bad", "terrible", "awful", "horrible", "poor", "boring", "dreadful", "disappointing", "unpleasant",
        "mediocre", "lousy", "dull", "bland", "annoying")
# (clause form, negated?)
_CLAUSES = (("was {a}", False), ("was not {a}", True), ("was really {a}", False), ("was never {a}", True))


def _clause(rng):
    form, neg = _CLAUSES[rng.integers(len(_CLAUSES))]
    positive = bool(rng.integers(2))
    adj = (_POS if positive else _NEG)[rng.integers(len(_POS))]
    return form.format(a=adj), int(positive == neg)            # label 1 = negative


def make_items(n: int, rng: np.random.Generator, exclude: set | None = None) -> list[tuple[str, int]]:
    """``n`` distinct (prompt, label) pairs; label 0 = positive, 1 = negative: the polarity of the asked
    aspect's adjective, flipped by negation. Prompts in ``exclude`` are skipped (disjoint splits)."""
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 0:
        raise ValueError(f"n must be a non-negative integer, got {n!r}")
    exclude = set() if exclude is None else exclude
    out, seen = [], set()
    while len(out) < n:
        i, j = rng.choice(len(_NOUNS), 2, replace=False)
        (c1, y1), (c2, y2) = _clause(rng), _clause(rng)
        ask = int(rng.integers(2))
        noun = _NOUNS[(i, j)[ask]]
        p = f"Review: The {_NOUNS[i]} {c1}, and the {_NOUNS[j]} {c2}.\nAspect: {noun}\nSentiment:"
        if p in exclude or p in seen:
            continue
        seen.add(p)
        out.append((p, (y1, y2)[ask]))
    return out


def _model(cfg):
    if cfg["model"] == "tiny":
        import torch

        from iclr26.models import SimpleTokenizer, TinyLMConfig, build_tiny_lm

        texts = [f"Review: The {n} {f.format(a=a)}, and the {n} {f.format(a=a)}.\nAspect: {n}\nSentiment:{lab}"
                 for f, _ in _CLAUSES for n in _NOUNS for a in _POS + _NEG for lab in LABELS]
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


def _finetune(task, model, batches, cfg, seed, igia=None, warmup=0):
    """LoRA (r = ``rank``, alpha = 2r, all linear projections) + AdamW over ``batches``; returns the
    peft model and the loss curve. The first ``warmup`` steps feed ``igia``. Stops with an error on a
    non-finite loss or gradient."""
    import torch

    from iclr26.models.lora import with_lora

    pm = with_lora(model, r=cfg["rank"], seed=seed)
    pm.train()
    params = [p for p in pm.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=cfg["lr"], weight_decay=0.0)
    losses = []
    for step, b in enumerate(batches):
        loss = _loss(task, pm, b)
        if not math.isfinite(loss.item()):
            raise FloatingPointError(f"non-finite loss at step {step}")
        loss.backward()
        if not all(torch.isfinite(p.grad).all() for p in params if p.grad is not None):
            raise FloatingPointError(f"non-finite gradient at step {step}")
        if igia is not None and step < warmup:
            igia.update(pm)
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(loss.item())
    pm.eval()
    return pm, losses


def run(scale: str, seed: int) -> dict:
    import torch

    from iclr26.compression.gradpruner import (IGIA, block_influence_scores, official_merge_layers, prune_layers,
                                               select_prune_layers, select_prune_run)

    cfg = SCALES[scale]
    if scale == "paper":
        raise NotImplementedError("the paper's 7-8B models and downstream datasets need GPUs and hub access")
    torch.set_num_threads(1)
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
    test = make_items(cfg["n_test"], rng, exclude={p for p, _ in train})
    batches = [train[i * bs:(i + 1) * bs] for i in range(steps)]
    lora_seed = int(rng.integers(2**31))
    zero_shot = _evaluate(task, model0, test)[0]

    # dense fine-tune; its first `warm` steps are the official gradient-collection run
    igia = IGIA()
    pm, loss_dense = _finetune(task, copy.deepcopy(model0), batches, cfg, lora_seed, igia=igia, warmup=warm)
    correct = {"dense": _evaluate(task, pm, test)[0]}
    curves = {"dense": loss_dense}
    del pm
    scores = igia.layer_scores()                       # official: sum of Frobenius norms
    run_ = select_prune_run(scores, cfg["n_prune"])
    merged = official_merge_layers(run_)
    F = igia.matrices()
    m = prune_layers(copy.deepcopy(model0), run_, importance=F, keep=cfg["keep"], merge_layers=merged)
    merged_zero_shot = _evaluate(task, m, test)[0]
    pm, curves["gradpruner"] = _finetune(task, m, batches, cfg, lora_seed)
    correct["gradpruner"] = _evaluate(task, pm, test)[0]
    del pm, m, F
    m = prune_layers(copy.deepcopy(model0), run_, merge=False)
    pm, curves["nomerge"] = _finetune(task, m, batches, cfg, lora_seed)
    correct["nomerge"] = _evaluate(task, pm, test)[0]
    del pm, m

    calib = [x for b in batches for x in b][:cfg["n_calib"]]
    ids, mask, _ = task.encode(calib)
    bi = block_influence_scores(model0, ids, mask)
    cos_layers = select_prune_layers(bi, cfg["n_prune"], protect=())
    m = prune_layers(copy.deepcopy(model0), cos_layers, merge=False)
    pm, curves["cosine"] = _finetune(task, m, batches, cfg, lora_seed)
    correct["cosine"] = _evaluate(task, pm, test)[0]
    del pm, m
    return {
        "metrics": {"correct": correct},
        "info": {
            "accuracy": {a: float(np.mean(v)) for a, v in correct.items()},
            "zero_shot_test_accuracy": float(np.mean(zero_shot)),
            "merged_before_finetune_accuracy": float(np.mean(merged_zero_shot)),
            "pruned": {"igia_run": run_, "merged": merged, "cosine": cos_layers},
            "igia_layer_scores": [float(s) for s in scores],
            "block_influence": [float(s) for s in bi],
            "train_loss": curves,
            "n": {"train": len(train), "test": len(test), "layers": n_layers},
            "seconds": time.time() - t0,
        },
    }
