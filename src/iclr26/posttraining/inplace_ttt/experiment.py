"""In-Place TTT from scratch: associative recall beyond a sliding attention window.

Paper claim (arXiv 2604.06169, Sec. 4.2 and the ablation of Sec. 4.3): sliding-window-attention
(SWA) models pretrained from scratch with In-Place TTT recall far better at long context than the
same SWA models without it (RULER), and the next-token-aligned target (Conv1D + W_target) beats
the generic reconstruction target, the worst of the ablated variants.

CPU proxy: tiny SWA LMs (:class:`~.model.SWATTTLM`, 2 layers, d=64, window ``window``) trained
from scratch on multi-query associative recall whose key-value pairs all lie in the first chunk
and whose queries lie in later chunks, further back than the stacked attention windows reach, so
SWA alone is at chance. Three arms per seed, each an independently initialised model trained on
the same batches for the same number of steps: ``full`` (In-Place TTT, NTP target),
``reconstruction`` (In-Place TTT, ``V^ = X_0``: the paper's ablation without Conv1D and W_target)
and ``swa`` (no fast weights); plus a control, ``full_identity_init``: the full method with its
target modules initialised to the identity (``V^ = X_0`` at step 0, i.e. starting from the
reconstruction arm) instead of the official zero-conv / small-diagonal init, which separates the
target's form from its initialisation. The arms without the target modules get wider MLPs so that all
arms have the same number of parameters (within one MLP unit per layer). Metric: recall accuracy
(fraction of queries whose value is the argmax) on held-out sequences drawn from a separate stream.
"""
from __future__ import annotations

import time

import numpy as np
import torch

from iclr26.common.seeding import seed_everything
from iclr26.common.tiny_attention import count_parameters, lm_loss, masked_accuracy
from iclr26.common.training import train

from .model import SWATTTConfig, SWATTTLM

IGNORE = -100
ARMS = ("full", "reconstruction", "swa", "full_identity_init")
_TTT = {"full": "ntp", "reconstruction": "reconstruction", "swa": "none", "full_identity_init": "ntp"}

SCALES = {
    "smoke": dict(d_model=32, n_layers=2, n_heads=2, mlp_hidden=32, window=4, chunk_size=16, eta=0.3,
                  seq_len=48, n_pairs=3, n_keys=8, n_values=8, n_filler=4, batch=4, steps=3, lr=3e-3,
                  n_eval=8),
    "quick": dict(d_model=64, n_layers=2, n_heads=4, mlp_hidden=128, window=8, chunk_size=32, eta=0.3,
                  seq_len=128, n_pairs=6, n_keys=24, n_values=16, n_filler=8, batch=16, steps=400, lr=3e-3,
                  n_eval=256),
    # The paper: 500M-4B SWA models pretrained from scratch (tens of billions of tokens, 8k-32k
    # context), In-Place TTT on every 6th layer, chunk 512-1024, evaluated on RULER. Not run here.
    "paper": dict(d_model=2048, n_layers=24, n_heads=16, mlp_hidden=5632, window=2048, chunk_size=1024, eta=0.3,
                  seq_len=32768, n_pairs=64, n_keys=4096, n_values=4096, n_filler=16000, batch=64, steps=20000,
                  lr=3e-4, n_eval=1000),
}
SEEDS = {"smoke": 1, "quick": 5, "paper": 3}


def vocab_size(cfg) -> int:
    """Token 0 unused; then ``n_filler`` filler, ``n_keys`` key and ``n_values`` value tokens."""
    return 1 + cfg["n_filler"] + cfg["n_keys"] + cfg["n_values"]


def query_start(cfg) -> int:
    """First position a query may take: the chunk after the pairs' chunk, and beyond every
    attention path from the last pair (``n_layers * window`` positions)."""
    last_pair = 2 * cfg["n_pairs"] - 1
    return max(cfg["chunk_size"] * (last_pair // cfg["chunk_size"] + 1), last_pair + cfg["n_layers"] * cfg["window"] + 1)


def recall_batch(n: int, cfg, rng: np.random.Generator):
    """``n`` sequences: ``k1 v1 ... kP vP`` at the start, filler elsewhere, each key queried once
    at a random position ``>= query_start(cfg)``; the target at a query is its value."""
    T, P = cfg["seq_len"], cfg["n_pairs"]
    F_, K, V = cfg["n_filler"], cfg["n_keys"], cfg["n_values"]
    q0 = query_start(cfg)
    if T - q0 < P:
        raise ValueError(f"seq_len={T} leaves {T - q0} query positions after {q0}, need n_pairs={P}")
    x = rng.integers(1, 1 + F_, size=(n, T))
    y = np.full((n, T), IGNORE, dtype=np.int64)
    keys = np.argsort(rng.random((n, K)), axis=1)[:, :P] + 1 + F_
    vals = rng.integers(1 + F_ + K, 1 + F_ + K + V, size=(n, P))
    x[:, 0:2 * P:2], x[:, 1:2 * P:2] = keys, vals
    pos = np.argsort(rng.random((n, T - q0)), axis=1)[:, :P] + q0
    order = np.argsort(rng.random((n, P)), axis=1)
    rows = np.arange(n)[:, None]
    x[rows, pos] = keys[rows, order]
    y[rows, pos] = vals[rows, order]
    return torch.as_tensor(x, dtype=torch.long), torch.as_tensor(y)


def arm_config(arm: str, cfg) -> SWATTTConfig:
    """The arm's model config; arms without target modules get wider MLPs to match parameters."""
    base = dict(vocab_size=vocab_size(cfg), d_model=cfg["d_model"], n_layers=cfg["n_layers"], n_heads=cfg["n_heads"],
                window=cfg["window"], chunk_size=cfg["chunk_size"], eta=cfg["eta"],
                target_init="identity" if arm == "full_identity_init" else cfg.get("target_init", "official"))
    hidden = cfg["mlp_hidden"]
    if _TTT[arm] != "ntp":
        d, k = cfg["d_model"], 5
        extra_per_layer = d * d + k * d                    # W_target + depthwise Conv1D of the full arm
        hidden += int(round(extra_per_layer / (3 * d)))    # a gated-MLP unit costs 3 d parameters
    return SWATTTConfig(mlp_hidden=hidden, ttt=_TTT[arm], **base)


def _batches(cfg, rng):
    while True:
        yield recall_batch(cfg["batch"], cfg, rng)


def run(scale: str, seed: int) -> dict:
    cfg = SCALES[scale]
    torch.set_num_threads(1)
    eval_rng = np.random.default_rng([seed, 1])
    x_ev, y_ev = recall_batch(cfg["n_eval"], cfg, eval_rng)
    acc, info = {}, {"params": {}, "final_loss": {}, "seconds": {}, "query_start": query_start(cfg),
                     "vocab_size": vocab_size(cfg)}
    for i, arm in enumerate(ARMS):
        seed_everything(1000 * seed + i)
        model = SWATTTLM(arm_config(arm, cfg))
        opt = torch.optim.AdamW(model.parameters(), lr=cfg["lr"], weight_decay=0.0)
        data = _batches(cfg, np.random.default_rng([seed, 0]))   # same batches for every arm
        t0 = time.time()
        res = train(model, opt, data, cfg["steps"], lm_loss, clip_grad=1.0)
        info["seconds"][arm] = round(time.time() - t0, 2)
        info["params"][arm] = count_parameters(model)
        info["final_loss"][arm] = float(np.mean(res.losses[-20:]))
        acc[arm] = float(masked_accuracy(model, x_ev, y_ev, batch_size=64).mean())
    return {"metrics": {"recall_acc": acc}, "info": info}
