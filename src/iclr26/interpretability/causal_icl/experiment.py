"""Claim checks for causal_icl: does a trained two-layer RPE transformer approach BMA and does its
parent-selecting attention recover the context's causal parents?

One trial = one seed: a transition matrix pi (rows ~ Dirichlet(0.5)), a stream of fresh training
contexts, the two-layer model and the position-only one-layer baseline trained with Adam through the
shared loop, then a held-out set of contexts (drawn after training, never used to fit anything) on
which every predictor is scored per context (items, paired by position in the list):
- ``nll``: mean negative log-likelihood of the query tokens h = 2..H, for the transformer, the BMA
  oracle, the one-layer baseline, an in-context unigram (column frequencies of the L examples at the
  same position, Laplace smoothing) and a "previous-token bigram" pi(. | x_{h-1}) using the true pi;
- ``parent_hit``: 1 if the argmax of the parent-selecting attention equals the sampled parent, per
  (context, position), for the transformer and for the BMA posterior;
- ``w_softmax_abs_err``: per entry of the learned layer-2 W (mean over heads), |softmax(W) -
  softmax(log pi^T)| along the identified axis (Prop. 1) and along the other axis.
"""
from __future__ import annotations

import math

import numpy as np
import torch

from iclr26.common.seeding import seed_everything
from iclr26.common.training import train

from .model import (
    PositionOnlyAttention,
    RandomParentMarkovTask,
    TwoLayerRPEConfig,
    TwoLayerRPETransformer,
    bma_posterior,
    bma_predict,
    identifiable_softmax_error,
    softmax_abs_errors,
)

SCALES = {
    "smoke": dict(d=5, H=6, L=4, steps=30, batch=32, lr=0.05, n_test=64, n_parent_items=64),
    # the notes' CPU setting (d = 5, H = 10, L = 10, batch 64) with 1500 Adam steps
    "quick": dict(d=5, H=10, L=10, steps=1500, batch=64, lr=0.05, n_test=500, n_parent_items=500),
    # the paper's reported run (d = 5, H = 10, L = 10), longer training
    "paper": dict(d=5, H=10, L=10, steps=10000, batch=256, lr=0.01, n_test=5000, n_parent_items=5000),
}
SEEDS = {"smoke": 1, "quick": 3, "paper": 5}

DIRICHLET_ALPHA = 0.5  # concentration of pi's rows (our choice; the notes do not give one)


def _stream(task: RandomParentMarkovTask, batch: int):
    while True:
        x, _ = task.sample(batch)
        yield x


def _nll_per_context(logp: torch.Tensor, x: torch.Tensor) -> np.ndarray:
    q = x[:, -1]
    tok = -logp.gather(2, q.unsqueeze(-1)).squeeze(-1)[:, 1:]
    return tok.mean(1).double().numpy()


def _loss(model, x):
    q = x[:, -1]
    return -model(x).gather(2, q.unsqueeze(-1)).squeeze(-1)[:, 1:].mean()


def run(scale: str, seed: int) -> dict:
    if scale not in SCALES:
        raise ValueError(f"scale must be one of {sorted(SCALES)}, got {scale!r}")
    seed_everything(seed)
    cfg = SCALES[scale]
    d, H, L = cfg["d"], cfg["H"], cfg["L"]
    gen = torch.Generator().manual_seed(20_000 + seed)
    task = RandomParentMarkovTask(d, H, L, dirichlet_alpha=DIRICHLET_ALPHA, generator=gen)

    model = TwoLayerRPETransformer(TwoLayerRPEConfig(d, H, L), generator=gen)
    res2 = train(model, torch.optim.Adam(model.parameters(), lr=cfg["lr"]), _stream(task, cfg["batch"]),
                 cfg["steps"], _loss)
    base = PositionOnlyAttention(d, H)
    res1 = train(base, torch.optim.Adam(base.parameters(), lr=cfg["lr"]), _stream(task, cfg["batch"]),
                 cfg["steps"], _loss)

    # held-out contexts, drawn after all training
    x, parents = task.sample(max(cfg["n_test"], cfg["n_parent_items"]))
    pi = task.pi
    with torch.no_grad():
        lp_tf = model(x.clone())
        att = model.last_attention
        lp_base = base(x)
    lp_bma = torch.log(bma_predict(x, pi))
    q = x[:, -1]
    ctx = torch.nn.functional.one_hot(x[:, :-1], d).double().sum(1)  # (B, H, d) column counts
    lp_uni = torch.log((ctx + 1) / (L + d))
    lp_bi = torch.log(pi[q[:, :-1]])  # pi(. | x_{h-1}^q) for h = 2..H
    lp_bi = torch.cat([torch.full_like(lp_bi[:, :1], -math.log(d)), lp_bi], 1)

    n = cfg["n_test"]
    nll = {name: _nll_per_context(lp[:n], x[:n]).tolist() for name, lp in
           (("transformer", lp_tf), ("bma", lp_bma), ("one_layer", lp_base), ("unigram", lp_uni),
            ("bigram", lp_bi))}

    m = cfg["n_parent_items"]
    post = bma_posterior(x, pi)
    hit_tf = (att.argmax(-1)[:m, 1:] == parents[:m, 1:]).reshape(-1).double()
    hit_bma = (post.argmax(-1)[:m, 1:] == parents[:m, 1:]).reshape(-1).double()
    # chance of picking the parent uniformly among h-1 candidates, averaged over positions h = 2..H
    chance = float(np.mean([1.0 / h for h in range(1, H)]))

    W_mean = model.W.detach().double().mean(0)  # layer-2 bilinear weights, averaged over heads
    err_id, err_other = softmax_abs_errors(W_mean, pi)
    return {
        "metrics": {
            "nll": nll,
            "parent_hit": {"transformer": hit_tf.tolist(), "bma": hit_bma.tolist()},
            "w_softmax_abs_err": {"identified": err_id.reshape(-1).tolist(),
                                  "non_identified": err_other.reshape(-1).tolist()},
        },
        "info": {
            "chance_parent_rate": chance,
            "train_loss_two_layer": [float(v) for v in res2.losses[:: max(1, len(res2.losses) // 50)]],
            "train_loss_one_layer": [float(v) for v in res1.losses[:: max(1, len(res1.losses) // 50)]],
            "mean_nll": {k: float(np.mean(v)) for k, v in nll.items()},
            "kl_to_bma": float((lp_bma.exp() * (lp_bma - lp_tf))[:, 1:].sum(-1).mean()),
            "readout_vs_pi_max_abs": float((torch.softmax(model.V.detach().double(), -1) - pi).abs().max()),
            "W_softmax_error": identifiable_softmax_error(W_mean, pi),
            "layer1_rpe_argmax": torch.softmax(model.rpe.detach(), -1).argmax(-1).tolist(),
        },
    }
