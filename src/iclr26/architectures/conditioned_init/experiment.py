"""Default vs mimetic vs scale-matched Gaussian vs conditioned initialisation of a tiny ViT on 8x8
digits (CPU proxy of the paper's ImageNet ViT/DeiT experiments, Sec. 4), each arm at its own
learning rate chosen on a validation split.

Every arm starts from the same default (timm-style) initialisation, then mimetic, scale-matched
Gaussian (the control: the conditioned init's per-block scale without its conditioning) or
conditioned initialisation (paper Sec. 3.2) re-initialises the attention projections of every
block; all arms and learning rates see the same minibatches. Measured: the attention-Jacobian
condition number at initialisation (mean over blocks and validation images of log10 kappa, the
quantity Thm. 3.1 bounds; it does not depend on the learning rate), and, at the arm's chosen rate,
the number of steps to reach a fixed accuracy on the test images and the final test accuracy.

Learning rate (:func:`search_lr`): every arm gets the same log grid (ratio 2 around AdamW's 1e-3)
and the same rule: trained at each rate, the rate with the best final validation accuracy (ties:
the lower validation loss) is chosen; while the best is at an edge of what was tried, one more rate
outward is tried (at most ``max_widen`` times). The test images are never used for a choice; the
chosen rate and whether it is still at an edge are stored per seed.
"""
from __future__ import annotations

import copy
import math

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from iclr26.common.seeding import seed_everything
from iclr26.common.training import batches, train

from .init import attention_jacobian_condition, conditioned_init_, mimetic_init_, scale_matched_init_

SCALES = {
    "smoke": dict(dim=16, depth=1, heads=2, steps=30, eval_every=10, batch=64,
                  lr_grid=(5e-4, 1e-3, 2e-3), max_widen=2, target=0.5, n_jac=1),
    "quick": dict(dim=48, depth=3, heads=4, steps=600, eval_every=5, batch=64,
                  lr_grid=(5e-4, 1e-3, 2e-3), max_widen=2, target=0.9, n_jac=2),
    # paper: ViT-B/16, DeiT-B on ImageNet-1k, 300 epochs, AdamW (timm/DeiT recipe, lr 1e-3 at batch 1024)
    "paper": dict(dim=768, depth=12, heads=12, steps=375_000, eval_every=1250, batch=1024,
                  lr_grid=(5e-4, 1e-3, 2e-3), max_widen=2, target=0.8, n_jac=8),
}
# 5 seeds: 4 arms x (3 + widening) learning rates x 600 steps fit ~15 CPU-minutes (12 seeds before,
# at one fixed learning rate)
SEEDS = {"smoke": 1, "quick": 5, "paper": 3}
ARMS = ("default", "mimetic", "scale_matched", "conditioned")
INITS = {"default": None, "mimetic": mimetic_init_, "scale_matched": scale_matched_init_,
         "conditioned": conditioned_init_}


class Block(nn.Module):
    def __init__(self, dim: int, heads: int):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.attn = nn.MultiheadAttention(dim, heads, batch_first=True)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 2 * dim), nn.GELU(), nn.Linear(2 * dim, dim))

    def forward(self, x):
        h = self.norm1(x)
        x = x + self.attn(h, h, h, need_weights=False)[0]
        return x + self.mlp(self.norm2(x))


class TinyViT(nn.Module):
    """ViT for 8x8 images: 2x2 patches (16 tokens) + class token, pre-LN blocks."""

    def __init__(self, dim: int, depth: int, heads: int, n_classes: int = 10, patch: int = 2):
        super().__init__()
        self.patch = patch
        n_tok = (8 // patch) ** 2
        self.embed = nn.Linear(patch * patch, dim)
        self.cls = nn.Parameter(torch.zeros(1, 1, dim))
        self.pos = nn.Parameter(torch.zeros(1, n_tok + 1, dim))
        self.blocks = nn.ModuleList(Block(dim, heads) for _ in range(depth))
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, n_classes)
        # timm's ViT default: trunc-normal(0.02) for linear weights and embeddings, zero biases
        for m in self.modules():
            if isinstance(m, nn.Linear):
                nn.init.trunc_normal_(m.weight, std=0.02)
                nn.init.zeros_(m.bias)
            elif isinstance(m, nn.MultiheadAttention):
                nn.init.trunc_normal_(m.in_proj_weight, std=0.02)
                nn.init.zeros_(m.in_proj_bias)
        nn.init.trunc_normal_(self.pos, std=0.02)
        nn.init.trunc_normal_(self.cls, std=0.02)

    def tokens(self, img):                       # img (B, 8, 8) -> (B, 16, p*p)
        b, p = img.shape[0], self.patch
        return img.view(b, 8 // p, p, 8 // p, p).permute(0, 1, 3, 2, 4).reshape(b, -1, p * p)

    def forward(self, img, return_attn_inputs: bool = False):
        x = self.embed(self.tokens(img))
        x = torch.cat([self.cls.expand(x.shape[0], -1, -1), x], 1) + self.pos
        inputs = []
        for blk in self.blocks:
            inputs.append(blk.norm1(x))
            x = blk(x)
        logits = self.head(self.norm(x[:, 0]))
        return (logits, inputs) if return_attn_inputs else logits


def _data(seed: int):
    from sklearn.datasets import load_digits

    d = load_digits()
    x = torch.tensor(d.images / 16.0, dtype=torch.float32)
    x = (x - x.mean()) / x.std()
    y = torch.tensor(d.target, dtype=torch.long)
    perm = torch.from_numpy(np.random.default_rng(seed).permutation(len(y)))
    tr, va, te = perm[:1000], perm[1000:1300], perm[1300:]
    return x[tr], y[tr], x[va], y[va], x[te], y[te]


def mean_log10_condition(model: TinyViT, imgs: torch.Tensor) -> float:
    """Mean over blocks and images of log10 kappa(dA/dX) at the attention's actual inputs."""
    with torch.no_grad():
        _, inputs = model(imgs, return_attn_inputs=True)
    vals = [torch.log10(attention_jacobian_condition(blk.attn, h)).mean()
            for blk, h in zip(model.blocks, inputs)]
    return float(torch.stack(vals).mean())


def search_lr(evaluate, grid: tuple, max_widen: int = 2):
    """Learning-rate search with the same budget rule for every arm.

    ``grid``: three increasing rates with a constant ratio ``r``; ``evaluate(lr)`` returns a key to
    maximise (e.g. ``(val_accuracy, -val_loss)``). While the best rate tried is the smallest or the
    largest, one more rate (``min / r`` or ``max * r``) is tried, at most ``max_widen`` times.
    Returns ``(best, tried, at_edge)``; ``at_edge``: the best is still at an edge of what was tried.
    """
    if len(grid) != 3 or not all(isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0
                                 for v in grid):
        raise ValueError(f"grid must hold three positive learning rates, got {grid!r}")
    r1, r2 = grid[1] / grid[0], grid[2] / grid[1]
    if not (r1 > 1 and math.isclose(r1, r2, rel_tol=1e-9)):
        raise ValueError(f"grid must be increasing and geometric (constant ratio), got {grid!r}")
    if not (isinstance(max_widen, int) and not isinstance(max_widen, bool) and max_widen >= 0):
        raise ValueError(f"max_widen must be an integer >= 0, got {max_widen!r}")
    tried = {float(v): evaluate(float(v)) for v in grid}
    for _ in range(max_widen):
        vals = sorted(tried)
        best = max(vals, key=lambda v: tried[v])
        if best == vals[0]:
            nxt = vals[0] / r1
        elif best == vals[-1]:
            nxt = vals[-1] * r1
        else:
            break
        tried[float(nxt)] = evaluate(float(nxt))
    vals = sorted(tried)
    best = max(vals, key=lambda v: tried[v])
    return best, tried, best in (vals[0], vals[-1])


def _fit(model: TinyViT, lr: float, cfg, seed: int, xtr, ytr, xva, yva, xte, yte, where: str) -> dict:
    """Train with AdamW at ``lr``; steps to ``cfg['target']`` accuracy on the test images (evaluated
    every ``eval_every`` steps until reached), final validation accuracy / loss and test accuracy."""
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.05)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=cfg["steps"])
    hit = [None]
    curve = []

    def step_fn(m, o, batch):
        o.zero_grad(set_to_none=True)
        loss = F.cross_entropy(m(batch[0]), batch[1])
        if not torch.isfinite(loss):
            raise FloatingPointError(f"{where}: non-finite loss {float(loss)}")
        loss.backward()
        for p in m.parameters():
            if p.grad is not None and not torch.isfinite(p.grad).all():
                raise FloatingPointError(f"{where}: non-finite gradient")
        o.step()
        return loss

    def callback(step, m, loss):
        if hit[0] is None and step % cfg["eval_every"] == 0:
            m.eval()
            with torch.no_grad():
                acc = float((m(xte).argmax(-1) == yte).float().mean())
            m.train()
            curve.append((step, acc))
            if acc >= cfg["target"]:
                hit[0] = step

    train(model, opt, batches(xtr, ytr, cfg["batch"], torch.Generator().manual_seed(seed)),
          cfg["steps"], lambda m, b: F.cross_entropy(m(b[0]), b[1]), step_fn=step_fn,
          scheduler=sched, callback=callback)
    model.eval()
    with torch.no_grad():
        lv = model(xva)
        val_acc = float((lv.argmax(-1) == yva).float().mean())
        val_loss = float(F.cross_entropy(lv, yva))
        test_acc = float((model(xte).argmax(-1) == yte).float().mean())
    # never reached: censored at one evaluation interval past the budget
    steps = float(hit[0] if hit[0] is not None else cfg["steps"] + cfg["eval_every"])
    return {"val_acc": val_acc, "val_loss": val_loss, "test_acc": test_acc, "steps": steps,
            "curve": curve}


def run(scale: str, seed: int) -> dict:
    if scale not in SCALES:
        raise ValueError(f"scale must be one of {sorted(SCALES)}, got {scale!r}")
    if not (isinstance(seed, int) and not isinstance(seed, bool) and seed >= 0):
        raise ValueError(f"seed must be an integer >= 0, got {seed!r}")
    cfg = SCALES[scale]
    seed_everything(seed)
    xtr, ytr, xva, yva, xte, yte = _data(seed)
    base = TinyViT(cfg["dim"], cfg["depth"], cfg["heads"])
    metrics = {k: {} for k in ("log10_cond_init", "steps_to_target", "final_test_accuracy",
                               "val_accuracy", "tuned_lr", "tuned_lr_at_edge")}
    curves, searched = {}, {}
    for arm in ARMS:
        init = copy.deepcopy(base)
        g = torch.Generator().manual_seed(seed + 1)
        if INITS[arm] is not None:
            for blk in init.blocks:
                INITS[arm](blk.attn, generator=g)
        metrics["log10_cond_init"][arm] = mean_log10_condition(init, xva[: cfg["n_jac"]])
        runs = {}

        def evaluate(lr, arm=arm, init=init, runs=runs):
            try:
                runs[lr] = _fit(copy.deepcopy(init), lr, cfg, seed, xtr, ytr, xva, yva, xte, yte,
                                f"{arm} (lr {lr:g})")
            except FloatingPointError:
                runs[lr] = None
                return (-math.inf, -math.inf)
            return (runs[lr]["val_acc"], -runs[lr]["val_loss"])

        best, tried, at_edge = search_lr(evaluate, cfg["lr_grid"], cfg["max_widen"])
        if runs[best] is None:
            raise FloatingPointError(f"{arm}: training diverged at every learning rate {sorted(tried)}")
        chosen = runs[best]
        metrics["steps_to_target"][arm] = chosen["steps"]
        metrics["final_test_accuracy"][arm] = chosen["test_acc"]
        metrics["val_accuracy"][arm] = chosen["val_acc"]
        metrics["tuned_lr"][arm] = best
        metrics["tuned_lr_at_edge"][arm] = float(at_edge)
        curves[arm] = chosen["curve"]
        searched[arm] = {f"{lr:g}": (None if runs[lr] is None else
                                     {k: runs[lr][k] for k in ("val_acc", "val_loss")})
                         for lr in sorted(tried)}
    return {"metrics": metrics, "info": {"test_curves": curves, "search": searched,
                                         "target": cfg["target"], **cfg}}
