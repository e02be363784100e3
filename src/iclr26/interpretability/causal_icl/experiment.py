"""Claim checks for causal_icl: does a trained two-layer RPE transformer approach BMA, does it need
its second layer, and do its parent-selecting attention and bilinear weights show the BMA mechanism?

One trial = one seed = one independently trained pair of models: a transition matrix pi (rows ~
Dirichlet(0.5)), the two-layer model and the paper's one-layer ablation, each trained with Adam through
the shared loop on the same stream of fresh training contexts. Each model's learning rate is chosen
from the same grid with the same budget: every candidate trains ``tune_steps`` steps, the one with the
lowest NLL on a validation set of contexts (its own draw) continues to ``steps`` steps. The unigram's
pseudo-count is chosen on the same validation set. Then a test set of contexts (another draw, used
for nothing else) is scored per context (items, paired by position; the items of one seed are one
cluster, the harness tests per-seed means):
- ``nll``: mean negative log-likelihood of the query tokens h = 2..H, for the transformer, the BMA
  oracle, the one-layer ablation, an in-context unigram (column frequencies of the L examples at
  the same position, validated pseudo-count) and a previous-token bigram pi(. | x_{h-1}) with the
  true pi;
- ``parent_hit``: 1 if the argmax of the parent-selecting (layer-2) attention equals the sampled
  parent, per (context, position h = 2..H), for the transformer and for the BMA posterior.
Per seed (one value per arm), the Sec. 5 parameter analysis of the head-averaged layer-2 W, in the
paper's units (1/d) ||softmax(W) - softmax(log pi^T)||_1, for the trained W and for the untrained
one (the control: W = 0 at initialisation):
- ``w_err_identified``: the error along the identified axis (softmax over parents, Prop. 1);
- ``w_axis_gap``: the non-identified error minus the identified one.
"""
from __future__ import annotations

import math

import numpy as np
import torch

from iclr26.common.seeding import seed_everything
from iclr26.common.training import train

from .model import (
    OneLayerRPEConfig,
    OneLayerRPETransformer,
    RandomParentMarkovTask,
    TwoLayerRPEConfig,
    TwoLayerRPETransformer,
    bma_posterior,
    bma_predict,
    identifiable_softmax_error,
)

SCALES = {
    "smoke": dict(d=5, H=6, L=4, steps=24, tune_steps=8, lrs=(0.01, 0.03, 0.1, 0.3), batch=32, n_val=64,
                  n_test=64),
    # the paper's reported setting d = 5, H = 10, L = 10 (Sec. 5); budget ours
    "quick": dict(d=5, H=10, L=10, steps=1500, tune_steps=500, lrs=(0.01, 0.03, 0.1, 0.3), batch=64, n_val=500,
                  n_test=1000),
    # the same setting with a longer budget (the paper's step count and batch are not in our sources)
    "paper": dict(d=5, H=10, L=10, steps=10000, tune_steps=2000, lrs=(0.003, 0.01, 0.03, 0.1), batch=256,
                  n_val=5000, n_test=5000),
}
# 8 independently trained model pairs: the Wilcoxon signed-rank test on 8 per-seed values can reach
# p = 2^-8 = 0.0039 and still reaches alpha = 0.05 with one small reversed difference; the power
# estimate in the README puts every claim's detectable effect well below the paper's at n = 8.
SEEDS = {"smoke": 1, "quick": 8, "paper": 8}

DIRICHLET_ALPHA = 0.5  # concentration of pi's rows (ours; not in our sources)
UNIGRAM_PSEUDOCOUNTS = (0.1, 0.3, 1.0, 3.0, 10.0, 30.0)  # grid for the in-context unigram's smoothing


def _stream(task: RandomParentMarkovTask, batch: int, generator: torch.Generator):
    while True:
        yield task.sample(batch, generator)[0]


def _token_nll(logp: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """(batch, H-1) negative log-likelihood of the query tokens at h = 2..H."""
    return -logp.gather(2, x[:, -1].unsqueeze(-1)).squeeze(-1)[:, 1:]


def _loss(model, x):
    return _token_nll(model(x), x).mean()


def _train_tuned(make, task, cfg, seed: int, x_val: torch.Tensor) -> tuple[torch.nn.Module, dict]:
    """Train one model per learning rate for ``tune_steps`` on the same stream, keep the one with the
    lowest validation NLL and continue it to ``steps`` steps."""
    runs = []
    for lr in cfg["lrs"]:
        model = make()
        opt = torch.optim.Adam(model.parameters(), lr=lr)
        gen = torch.Generator().manual_seed(30_000 + seed)  # the same training contexts for every run
        data = _stream(task, cfg["batch"], gen)
        res = train(model, opt, data, cfg["tune_steps"], _loss)
        with torch.no_grad():
            val = float(_loss(model, x_val))
        runs.append((val, lr, model, opt, data, res))
    val, lr, model, opt, data, res = min(runs, key=lambda r: r[0])
    rest = train(model, opt, data, cfg["steps"] - cfg["tune_steps"], _loss)
    losses = res.losses + rest.losses
    return model, {"lr": lr, "val_nll": {str(r[1]): r[0] for r in runs},
                   "train_loss": [float(v) for v in losses[:: max(1, len(losses) // 50)]]}


def _unigram_logp(x: torch.Tensor, d: int, alpha: float) -> torch.Tensor:
    counts = torch.nn.functional.one_hot(x[:, :-1], d).double().sum(1)  # (B, H, d) column counts
    return torch.log((counts + alpha) / (x.shape[1] - 1 + d * alpha))


def run(scale: str, seed: int) -> dict:
    if scale not in SCALES:
        raise ValueError(f"scale must be one of {sorted(SCALES)}, got {scale!r}")
    seed_everything(seed)
    cfg = SCALES[scale]
    d, H, L = cfg["d"], cfg["H"], cfg["L"]
    task = RandomParentMarkovTask(d, H, L, dirichlet_alpha=DIRICHLET_ALPHA,
                                  generator=torch.Generator().manual_seed(20_000 + seed))
    pi = task.pi
    x_val, _ = task.sample(cfg["n_val"], torch.Generator().manual_seed(40_000 + seed))
    x, parents = task.sample(cfg["n_test"], torch.Generator().manual_seed(50_000 + seed))

    init_gen = torch.Generator().manual_seed(60_000 + seed)
    init2 = init_gen.get_state()
    model, info2 = _train_tuned(
        lambda: TwoLayerRPETransformer(TwoLayerRPEConfig(d, H, L), generator=torch.Generator().set_state(init2)),
        task, cfg, seed, x_val)
    untrained = TwoLayerRPETransformer(TwoLayerRPEConfig(d, H, L), generator=torch.Generator().set_state(init2))
    base, info1 = _train_tuned(
        lambda: OneLayerRPETransformer(OneLayerRPEConfig(d, H, L), generator=torch.Generator().set_state(init2)),
        task, cfg, seed, x_val)

    with torch.no_grad():
        lp_tf = model(x)
        att = model.last_attention
        lp_one = base(x)
    lp_bma = torch.log(bma_predict(x, pi))
    alpha_uni = min(UNIGRAM_PSEUDOCOUNTS, key=lambda a: float(_token_nll(_unigram_logp(x_val, d, a), x_val).mean()))
    lp_uni = _unigram_logp(x, d, alpha_uni)
    q = x[:, -1]
    lp_bi = torch.log(pi[q[:, :-1]])  # pi(. | x_{h-1}^q) for h = 2..H
    lp_bi = torch.cat([torch.full_like(lp_bi[:, :1], -math.log(d)), lp_bi], 1)
    nll = {name: _token_nll(lp, x).mean(1).double().tolist() for name, lp in
           (("transformer", lp_tf), ("bma", lp_bma), ("one_layer", lp_one), ("unigram", lp_uni),
            ("bigram", lp_bi))}

    post = bma_posterior(x, pi)
    hit_tf = (att.argmax(-1)[:, 1:] == parents[:, 1:]).reshape(-1).double()
    hit_bma = (post.argmax(-1)[:, 1:] == parents[:, 1:]).reshape(-1).double()
    chance = float(np.mean([1.0 / h for h in range(1, H)]))  # uniform pick among the h-1 candidates

    err = identifiable_softmax_error(model.W.detach().double().mean(0), pi)
    err0 = identifiable_softmax_error(untrained.W.detach().double().mean(0), pi)
    return {
        "metrics": {
            "nll": nll,
            "parent_hit": {"transformer": hit_tf.tolist(), "bma": hit_bma.tolist()},
            "w_err_identified": {"trained": err["identified"], "untrained": err0["identified"]},
            "w_axis_gap": {"trained": err["non_identified"] - err["identified"],
                           "untrained": err0["non_identified"] - err0["identified"]},
        },
        "info": {
            "chance_parent_rate": chance,
            "two_layer": info2,
            "one_layer": info1,
            "unigram_pseudocount": alpha_uni,
            "mean_nll": {k: float(np.mean(v)) for k, v in nll.items()},
            "kl_to_bma": float((lp_bma.exp() * (lp_bma - lp_tf))[:, 1:].sum(-1).mean()),
            "readout_vs_pi_max_abs": float((torch.softmax(model.V.detach().double(), -1) - pi).abs().max()),
            "W_softmax_error": {"trained": err, "untrained": err0},
            "layer1_rpe_argmax": torch.softmax(model.rpe.detach(), -1).argmax(-1).tolist(),
        },
    }


def reference_effects(n_pi: int = 100, n_ctx: int = 2000, d: int = 5, H: int = 10, L: int = 10) -> dict:
    """The oracle references behind ``claims.toml``'s paper effects, on this task's distribution.

    Over ``n_pi`` pi draws (seeds 70000.., disjoint from the trials'), with ``n_ctx`` contexts each:
    NLL(BMA) minus the NLL of the bigram, of the validated unigram, and of the best per-position
    mixture of the prior parent mixture sum_{h' < h} pi(. | x_h'^q) / (h - 1) and the unigram (weights
    fitted on half the contexts, scored on the other half: the one-layer reference); the BMA
    posterior's parent hit rate; and the untrained (zero) W's identified error and axis gap.
    """
    keys = ("bigram", "unigram", "one_layer_mixture", "bma_hit", "w0_identified", "w0_axis_gap")
    out: dict[str, list[float]] = {k: [] for k in keys}
    mask = torch.ones(H, H, dtype=torch.float64).tril(-1)
    prior = mask / mask.sum(1, keepdim=True).clamp_min(1)
    ws = torch.linspace(0, 1, 51, dtype=torch.float64).view(-1, 1)
    for s in range(n_pi):
        task = RandomParentMarkovTask(d, H, L, dirichlet_alpha=DIRICHLET_ALPHA,
                                      generator=torch.Generator().manual_seed(70_000 + s))
        pi = task.pi
        x_val, _ = task.sample(500)
        x, parents = task.sample(n_ctx)
        q = x[:, -1]
        bma = _token_nll(torch.log(bma_predict(x, pi)), x)
        a = min(UNIGRAM_PSEUDOCOUNTS, key=lambda a: float(_token_nll(_unigram_logp(x_val, d, a), x_val).mean()))
        uni = _unigram_logp(x, d, a).exp()
        lp_bi = torch.log(pi[q[:, :-1]])
        lp_bi = torch.cat([torch.full_like(lp_bi[:, :1], -math.log(d)), lp_bi], 1)
        out["bigram"].append(float(bma.mean() - _token_nll(lp_bi, x).mean()))
        out["unigram"].append(float(bma.mean() - _token_nll(torch.log(uni), x).mean()))
        p1 = torch.einsum("hg,bgd->bhd", prior, pi[q])
        mix = torch.full_like(p1, 1.0 / d)
        fit, score = slice(0, n_ctx // 2), slice(n_ctx // 2, n_ctx)
        for h in range(1, H):
            a1 = p1[:, h].gather(1, q[:, h:h + 1]).squeeze(1)
            a2 = uni[:, h].gather(1, q[:, h:h + 1]).squeeze(1)
            w = ws[int((-torch.log(ws * a1[fit] + (1 - ws) * a2[fit])).mean(1).argmin())]
            mix[:, h] = w * p1[:, h] + (1 - w) * uni[:, h]
        out["one_layer_mixture"].append(float(bma[score].mean() - _token_nll(torch.log(mix), x)[score].mean()))
        out["bma_hit"].append(float((bma_posterior(x, pi).argmax(-1)[:, 1:] == parents[:, 1:]).double().mean()))
        e0 = identifiable_softmax_error(torch.zeros(d, d), pi)
        out["w0_identified"].append(e0["identified"])
        out["w0_axis_gap"].append(e0["non_identified"] - e0["identified"])
    return {k: float(np.mean(v)) for k, v in out.items()}

