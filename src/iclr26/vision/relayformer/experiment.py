"""RelayFormer's relay tokens against a local-only tiled ViT, a relay-without-exchange control, and
the same relay model on resized inputs, on noise-mismatch splices of the bundled photos.

Paper claims (arXiv 2508.09459): relay (GLR) tokens exchanging context across tiles raise pixel-F1
over the same tiled ViT without them (ablation on the number of tokens m = 0 / 1 / 2 / 3:
0.454 / 0.532 / 0.554 / 0.524 average F1, as read from the planning notes), and processing at native
resolution beats resizing the input (IMD2020: 0.453 native vs 0.350 resized).

One trial ``seed`` is one independent draw of everything: the training stream of splices, the test
set and the initialisation of every arm. Arms (each trained with the same steps, batch, optimiser
and learning rate on the same stream of images):

- ``relay``: :class:`.relay.RelayFormer`, m = 2 relay tokens per tile with relay-global attention;
- ``local``: the same network with m = 0 (tiles never exchange anything before the decoder);
- ``relay_no_global``: m = 2 relay tokens that never leave their tile (control: the extra tokens
  and parameters without the relay);
- ``resize``: the ``relay`` network trained and evaluated on inputs resized (bilinear, antialiased)
  to ``resize x resize`` with ``resize`` chosen so the tile count is near the native mean (about equal
  compute); masks are predicted there and upsampled to the native size for scoring;
- ``all_tampered``: every pixel predicted tampered (the floor: the F1 of the trivial mask).

Metric ``f1``: per test image pixel-F1 at probability 0.5, a list per arm (items of one seed are a
cluster: one trained model per arm).
"""
from __future__ import annotations

import time

import numpy as np
import torch
import torch.nn.functional as F

from iclr26.common.seeding import seed_everything

from .relay import RelayFormer, edge_weight_map, pixel_f1, relay_loss
from .splices import make_batch

SCALES = {
    "smoke": dict(steps=3, batch=2, sizes=(48, 80), n_test=4, resize=64, dim=32, heads=2, depth=2, lr=1e-3),
    "quick": dict(steps=400, batch=8, sizes=(64, 96, 128, 160), n_test=96, resize=112, dim=64, heads=4, depth=3, lr=1e-3),
    # the paper's setting (CASIAv2 training, ViT-B/16 at 1024 px, 528-px tiles, 16-px overlap) needs the
    # datasets and pretrained weights; written down here, not runnable offline
    "paper": dict(steps=None, batch=None, sizes=(1024,), n_test=None, resize=1024, dim=768, heads=12, depth=12, lr=None),
}
SEEDS = {"smoke": 1, "quick": 5, "paper": 5}

ARMS = {
    "relay": dict(n_relay=2, global_attention=True),
    "local": dict(n_relay=0, global_attention=False),
    "relay_no_global": dict(n_relay=2, global_attention=False),
    "resize": dict(n_relay=2, global_attention=True),
}


def _resize(x, s, mode="bilinear"):
    return F.interpolate(x, size=(s, s), mode=mode, align_corners=False, antialias=True)


def _size(rng, sizes):
    return int(rng.choice(sizes)), int(rng.choice(sizes))


def _train_arm(arm, cfg, seed, log):
    torch.manual_seed(seed * 1000 + 1)  # one initialisation draw per seed, the same for every arm shape
    model = RelayFormer(dim=cfg["dim"], heads=cfg["heads"], depth=cfg["depth"], **ARMS[arm])
    opt = torch.optim.AdamW(model.parameters(), lr=cfg["lr"], weight_decay=0.05)
    rng = np.random.default_rng([seed, 1])  # the same training stream for every arm
    model.train()
    losses = []
    for _ in range(cfg["steps"]):
        x, m = make_batch(rng, cfg["batch"], *_size(rng, cfg["sizes"]))
        if arm == "resize":
            x, m = _resize(x, cfg["resize"]), (_resize(m, cfg["resize"]) > 0.5).float()
        logits = model(x)
        loss = relay_loss(logits, m, edge_weight_map(m), edge_lambda=cfg.get("edge_lambda", 20.0))
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        losses.append(loss.item())
    log[arm] = dict(first_loss=float(np.mean(losses[:10])), last_loss=float(np.mean(losses[-10:])))
    return model.eval()


@torch.no_grad()
def _predict(model, arm, x, cfg):
    if arm == "resize":
        logits = model(_resize(x, cfg["resize"]))
        return F.interpolate(logits, size=x.shape[-2:], mode="bilinear", align_corners=False) > 0
    return model(x) > 0


def _test_set(seed, cfg):
    rng = np.random.default_rng([seed, 2])
    groups, per = [], 4
    for _ in range(max(1, cfg["n_test"] // per)):
        groups.append(make_batch(rng, per, *_size(rng, cfg["sizes"])))
    return groups


def run(scale: str, seed: int) -> dict:
    cfg = SCALES[scale]
    if cfg["steps"] is None:
        raise NotImplementedError("the paper scale needs CASIAv2 / IMD2020 and ViT-B/16 weights")
    seed_everything(seed)
    torch.set_num_threads(1)
    test = _test_set(seed, cfg)
    f1 = {"all_tampered": torch.cat([pixel_f1(torch.ones_like(m), m) for _, m in test]).tolist()}
    log, times = {}, {}
    for arm in ARMS:
        t0 = time.perf_counter()
        model = _train_arm(arm, cfg, seed, log)
        f1[arm] = torch.cat([pixel_f1(_predict(model, arm, x, cfg), m) for x, m in test]).tolist()
        times[arm] = time.perf_counter() - t0
    return {"metrics": {"f1": f1},
            "info": {"losses": log, "seconds": times, "mean_f1": {a: float(np.mean(v)) for a, v in f1.items()}}}
