"""GGD-BAM vs ALiBi vs RoPE, each with and without SSMax: passkey retrieval far beyond the
training length, and perplexity.

Paper claims (abstract, Sec. 4): trained at a short context, GGD-BAM (with SSMax) retrieves a
passkey at many times the training length where ALiBi and RoPE fail, while its in-distribution
perplexity stays comparable. SSMax alone helps length extrapolation, so ALiBi+SSMax and RoPE+SSMax
(both in the official repository: ``models/alibi_ssmax.py``, ``models/rotary_ssmax.py``) are the
controls that isolate BAM's own mechanism, the learned generalised-Gaussian prior.

Proxy at CPU scale: tiny 2-layer softmax LMs (d=64, 4 heads) trained at length 64 on a passkey
task whose filler is a fixed order-2 Markov language (so the filler is also a language-modelling
task). Each trial (one seed) trains every arm on the same batches, then evaluates on the same
held-out items: exact-match passkey retrieval at 1x, 4x and 16x the training length (key at a
uniform random depth), and the mean next-token NLL of the filler at the training length.
"""
from __future__ import annotations

import time

import numpy as np
import torch
import torch.nn.functional as F

from iclr26.common.seeding import seed_everything
from iclr26.common.synthetic_tasks import IGNORE, PasskeyVocab, markov_language, passkey
from iclr26.common.tiny_attention import ALiBi, RoPE, TinyLM, TinyLMConfig, count_parameters
from iclr26.common.training import train

from .prior import GGDPositionalBias, GGDPriorConfig

ARMS = ("bam_ssmax", "alibi_ssmax", "rope_ssmax", "bam", "alibi", "rope")
ROPE_BASE = 500000.0  # official rotary.py / rotary_ssmax.py: rope_theta = 500000

SCALES = {
    "smoke": dict(d_model=32, n_layers=2, n_heads=4, mlp_hidden=64, batch=8, steps=3, lr=3e-3, train_len=32,
                  key_len=2, n_filler=16, eval_lens=(32, 128, 512), n_eval=8, n_ppl=8, eval_batch=8),
    # one seed = six trained models (~30 s each on one core); 64 passkey items per length and seed
    "quick": dict(d_model=64, n_layers=2, n_heads=4, mlp_hidden=128, batch=32, steps=500, lr=3e-3, train_len=64,
                  key_len=2, n_filler=16, eval_lens=(64, 256, 1024), n_eval=64, n_ppl=200, eval_batch=16),
    # The paper's setting: Llama-style 120M models (12 layers, d=768), trained on FineWeb-10B at
    # 512/1024 tokens, passkey retrieval (5-digit key) up to 500x the training length. Not run here.
    "paper": dict(d_model=768, n_layers=12, n_heads=12, mlp_hidden=2048, batch=64, steps=20000, lr=6e-4,
                  train_len=512, key_len=5, n_filler=16, eval_lens=(512, 8192, 65536, 262144), n_eval=100,
                  n_ppl=1000, eval_batch=1),
}
SEEDS = {"smoke": 1, "quick": 5, "paper": 3}


def _build(arm: str, cfg: dict, vocab: int) -> TinyLM:
    H, D = cfg["n_heads"], cfg["d_model"] // cfg["n_heads"]
    if arm not in ARMS:
        raise ValueError(f"unknown arm {arm!r}, expected one of {ARMS}")
    scheme, _, ss = arm.partition("_")
    conf = TinyLMConfig(vocab, cfg["d_model"], cfg["n_layers"], H, cfg["mlp_hidden"], mixer="softmax",
                        ssmax=ss == "ssmax")
    if scheme == "bam":
        pos = GGDPositionalBias(GGDPriorConfig(H))  # one prior shared by all layers (official default)
    elif scheme == "alibi":
        pos = ALiBi(H)
    else:
        pos = lambda i: RoPE(D, base=ROPE_BASE)  # noqa: E731
    return TinyLM(conf, pos)


def _optimizer(model, cfg):
    """AdamW with the official optimiser groups (train.py): weight decay 0.1 on matrices only;
    none on vectors (norm weights, the SSMax scales) or on the prior's scale and shape; betas
    (0.9, 0.95) as in the official RAdam."""
    decay = [p for p in model.parameters() if p.requires_grad and p.dim() >= 2]
    rest = [p for p in model.parameters() if p.requires_grad and p.dim() < 2]
    return torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": rest, "weight_decay": 0.0}],
                             lr=cfg["lr"], betas=(0.9, 0.95))


def _loss(model, batch):
    """Mean CE on the key digits plus mean CE on the filler (language-modelling) tokens."""
    x, y_key, y_lm = batch
    logits = model(x)
    V = logits.shape[-1]
    k = F.cross_entropy(logits.reshape(-1, V), y_key.reshape(-1), ignore_index=IGNORE)
    lm = F.cross_entropy(logits.reshape(-1, V), y_lm.reshape(-1), ignore_index=IGNORE)
    return k + lm


def _stream(cfg, P, rng):
    while True:
        yield passkey(cfg["batch"], cfg["train_len"], rng, key_len=cfg["key_len"], n_filler=cfg["n_filler"], P=P)


@torch.no_grad()
def _passkey_correct(model, x, y, bs):
    out = []
    for i in range(0, x.shape[0], bs):
        xb, yb = x[i : i + bs], y[i : i + bs]
        kl = int((yb[0] != IGNORE).sum())
        # the last kl positions hold the key targets; logits of the tail only
        pred = model(xb)[:, -kl:].argmax(-1)
        out.append((pred == yb[:, -kl:]).all(-1).float())
    return torch.cat(out).tolist()


@torch.no_grad()
def _nll_per_sequence(model, x, y, bs):
    out = []
    for i in range(0, x.shape[0], bs):
        xb, yb = x[i : i + bs], y[i : i + bs]
        logits = model(xb)
        nll = F.cross_entropy(logits.transpose(1, 2), yb, ignore_index=IGNORE, reduction="none")
        m = (yb != IGNORE).float()
        out.append((nll * m).sum(-1) / m.sum(-1).clamp_min(1))
    return torch.cat(out).tolist()


def run(scale: str, seed: int) -> dict:
    cfg = SCALES[scale]
    rng = seed_everything(seed)
    voc = PasskeyVocab(cfg["n_filler"])
    P = markov_language(cfg["n_filler"], 0.2, seed=1234)  # the fixed "language" (not the trial seed)
    # held-out items, shared by every arm
    eval_rng = np.random.default_rng([seed, 1])
    evals = {L: passkey(cfg["n_eval"], L, eval_rng, key_len=cfg["key_len"], n_filler=cfg["n_filler"], P=P)
             for L in cfg["eval_lens"]}
    ppl_x, _, ppl_y = passkey(cfg["n_ppl"], cfg["train_len"], eval_rng, key_len=cfg["key_len"],
                              n_filler=cfg["n_filler"], P=P)
    metrics: dict = {f"passkey_{L // cfg['train_len']}x": {} for L in cfg["eval_lens"]}
    metrics["lm_nll"] = {}
    info: dict = {"params": {}, "final_loss": {}, "seconds": {}, "learned_shape": {}, "learned_scale": {},
                  "passkey_rate": {}, "lm_ppl": {}, "train_len": cfg["train_len"]}
    for arm in ARMS:
        seed_everything(seed)
        model = _build(arm, cfg, voc.size)
        opt = _optimizer(model, cfg)
        data = _stream(cfg, P, np.random.default_rng([seed, 2]))  # same batches for every arm
        t0 = time.perf_counter()
        res = train(model, opt, data, cfg["steps"], _loss, clip_grad=1.0)
        model.eval()
        for L, (x, yk, _) in evals.items():
            c = _passkey_correct(model, x, yk, cfg["eval_batch"])
            metrics[f"passkey_{L // cfg['train_len']}x"][arm] = c
            info["passkey_rate"][f"{arm}@{L}"] = float(np.mean(c))
        nll = _nll_per_sequence(model, ppl_x, ppl_y, 50)
        metrics["lm_nll"][arm] = nll
        info["lm_ppl"][arm] = float(np.exp(np.mean(nll)))
        info["params"][arm] = count_parameters(model)
        info["final_loss"][arm] = res.final_loss
        info["seconds"][arm] = round(time.perf_counter() - t0, 2)
        if arm.startswith("bam"):
            prior = model.layers[0]["mixer"].positional
            info["learned_shape"][arm] = prior.shape.detach().tolist()
            info["learned_scale"][arm] = prior.log_scale.detach().exp().tolist()
    return {"metrics": metrics, "info": info}
