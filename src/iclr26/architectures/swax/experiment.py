"""Stochastic window training vs fixed-window training of SWAX: long-context retrieval and
short-context language modelling.

Paper claims (arXiv 2509.24552, Secs. 4-5): a SWAX hybrid trained with a short sliding window
retrieves better at long context than one trained with a long window (the short window forces the
xLSTM memory to learn retrieval); stochastic window training keeps that long-context gain while
matching the long window on short-context tasks and perplexity.

CPU proxy: 4-block SWAX models (SWA, mLSTM, SWA, mLSTM; d=32) trained from scratch at length
``train_len`` on a synthetic language in which most words are a function of the word ``lag``
positions back (a window shorter than ``lag`` cannot see it, so the long window helps
short-context modelling), with one ``KEY value`` needle per sequence and its query at the end. Three arms per seed, trained on the same batches from the same initialisation:
``short`` (window ``w_short``), ``long`` (window ``w_long``) and ``stochastic`` (per batch
``w_short`` with probability ``p_short``, else ``w_long``; the last ``anneal_frac`` of the steps
``w_long``). The windows keep the paper's proportions: the training length is 8 long windows
(16k / 2048 in the paper), so most training needles lie beyond the long window. Fixed-window
models are evaluated with their training window, the stochastic one with the long window (the
paper's protocol): retrieval of the needle's value at 4x the training length with the needle at
least one training length back, and the mean next-token NLL of the text at the training length
(held-out sequences).
"""
from __future__ import annotations

import time

import numpy as np
import torch
import torch.nn.functional as F

from iclr26.common.seeding import seed_everything
from iclr26.common.tiny_attention import count_parameters
from iclr26.common.training import train

from .model import StochasticWindowSchedule, SWAXConfig, SWAXForCausalLM, stochastic_window_step

IGNORE = -100
ARMS = ("stochastic", "long", "short")

SCALES = {
    "smoke": dict(d_model=32, n_layers=4, n_heads=2, mlp_hidden=64, batch=4, steps=4, lr=3e-3, train_len=48,
                  w_short=2, w_long=8, p_short=0.5, anneal_frac=0.25, n_words=16, n_values=8, lag=5,
                  p_copy=0.8, retr_len=96, n_retr=8, n_lm=8, eval_batch=8),
    "quick": dict(d_model=32, n_layers=4, n_heads=2, mlp_hidden=64, batch=16, steps=600, lr=3e-3,
                  train_len=64, w_short=2, w_long=8, p_short=0.5, anneal_frac=0.1, n_words=16, n_values=8,
                  lag=5, p_copy=0.8, retr_len=256, n_retr=100, n_lm=100, eval_batch=50),
    # The paper: 1.4B / 7B SWAX models, 150B tokens at 16k, windows 128 / 2048, p_short 0.5 (1.4B)
    # or 0.75 (7B), last 10 % at 2048, RULER NIAH up to 131k and short-context benchmarks. Not run here.
    "paper": dict(d_model=2048, n_layers=24, n_heads=16, mlp_hidden=5632, batch=64, steps=150000, lr=3e-4,
                  train_len=16384, w_short=128, w_long=2048, p_short=0.5, anneal_frac=0.1, n_words=32000,
                  n_values=10, lag=8, p_copy=0.8, retr_len=131072, n_retr=100, n_lm=1000, eval_batch=1),
}
SEEDS = {"smoke": 1, "quick": 4, "paper": 3}


class Vocab:
    """Token ids: ``n_words`` text words, ``n_values`` needle values, then KEY and QUERY."""

    def __init__(self, n_words: int, n_values: int):
        self.n_words, self.n_values = n_words, n_values
        self.VALUE0 = n_words
        self.KEY = n_words + n_values
        self.QUERY = self.KEY + 1
        self.size = self.QUERY + 1


def make_batch(n: int, length: int, cfg: dict, rng: np.random.Generator, needle_min_distance: int = 0):
    """``n`` sequences of ``length`` tokens: lagged text with one needle.

    Text: the first ``lag`` words uniform; then each word is ``(w_{t - lag} + 1) mod n_words`` with
    probability ``p_copy``, else uniform. Predicting it needs the word ``lag`` positions back: a
    window of at least ``lag`` tokens sees it, a shorter one does not. Needle ``KEY v`` written over
    the text at a random position at least ``needle_min_distance`` tokens before the end; the last
    input token is ``QUERY`` and its target is ``v``. Returns ``x`` ``(n, length)``, ``y_key``
    (target on the last position only) and ``y_lm`` (targets on text words whose lag source is a
    text word).
    """
    voc = Vocab(cfg["n_words"], cfg["n_values"])
    lag, V = cfg["lag"], voc.n_words
    L = length + 1
    seq = rng.integers(0, V, size=(n, L))
    copy = rng.random((n, L)) < cfg["p_copy"]
    for t in range(lag, L):
        seq[:, t] = np.where(copy[:, t], (seq[:, t - lag] + 1) % V, seq[:, t])
    is_text = np.ones((n, L), dtype=bool)
    latest = max(0, L - 3 - needle_min_distance)
    pos = rng.integers(0, latest + 1, size=n)
    values = voc.VALUE0 + rng.integers(0, voc.n_values, size=n)
    rows = np.arange(n)
    seq[rows, pos], seq[rows, pos + 1] = voc.KEY, values
    seq[:, L - 2], seq[:, L - 1] = voc.QUERY, values
    is_text[rows, pos] = is_text[rows, pos + 1] = False
    is_text[:, L - 2:] = False
    x, tgt = seq[:, :-1], seq[:, 1:]
    y_key = np.full_like(x, IGNORE)
    y_key[:, -1] = tgt[:, -1]
    src_ok = np.zeros((n, L), dtype=bool)
    src_ok[:, lag:] = is_text[:, :-lag]
    ok = (is_text & src_ok)[:, 1:]
    y_lm = np.full_like(x, IGNORE)
    y_lm[ok] = tgt[ok]
    return torch.as_tensor(x), torch.as_tensor(y_key), torch.as_tensor(y_lm)


def _loss(model, batch):
    x, y_key, y_lm = batch
    logits = model(x)
    V = logits.shape[-1]
    key = F.cross_entropy(logits.reshape(-1, V), y_key.reshape(-1), ignore_index=IGNORE)
    lm = F.cross_entropy(logits.reshape(-1, V), y_lm.reshape(-1), ignore_index=IGNORE)
    return key + lm


def _stream(cfg, rng):
    while True:
        yield make_batch(cfg["batch"], cfg["train_len"], cfg, rng)


@torch.no_grad()
def _retrieval(model, x, y, bs):
    out = []
    for i in range(0, x.shape[0], bs):
        pred = model(x[i : i + bs])[:, -1].argmax(-1)
        out.append((pred == y[i : i + bs, -1]).float())
    return torch.cat(out).tolist()


@torch.no_grad()
def _nll(model, x, y, bs):
    out = []
    for i in range(0, x.shape[0], bs):
        yb = y[i : i + bs]
        nll = F.cross_entropy(model(x[i : i + bs]).transpose(1, 2), yb, ignore_index=IGNORE, reduction="none")
        m = (yb != IGNORE).float()
        out.append((nll * m).sum(-1) / m.sum(-1).clamp_min(1))
    return torch.cat(out).tolist()


def run(scale: str, seed: int) -> dict:
    cfg = SCALES[scale]
    seed_everything(seed)
    voc = Vocab(cfg["n_words"], cfg["n_values"])
    eval_rng = np.random.default_rng([seed, 1])
    rx, ry, _ = make_batch(cfg["n_retr"], cfg["retr_len"], cfg, eval_rng, needle_min_distance=cfg["train_len"])
    lx, _, ly = make_batch(cfg["n_lm"], cfg["train_len"], cfg, eval_rng)
    metrics = {"retrieval_4x": {}, "lm_nll": {}}
    info: dict = {"params": 0, "final_loss": {}, "seconds": {}, "retrieval_rate": {}, "lm_ppl": {}}
    for arm in ARMS:
        seed_everything(seed)
        model = SWAXForCausalLM(SWAXConfig(voc.size, cfg["d_model"], cfg["n_layers"], cfg["n_heads"],
                                           cfg["mlp_hidden"], window=cfg["w_long"]))
        if arm == "stochastic":
            schedule = StochasticWindowSchedule(cfg["w_short"], cfg["w_long"], cfg["steps"], cfg["p_short"],
                                                cfg["anneal_frac"], rng=np.random.default_rng([seed, 3]))
        else:
            w = cfg["w_long"] if arm == "long" else cfg["w_short"]
            schedule = lambda step, w=w: w  # noqa: E731
        opt = torch.optim.AdamW(model.parameters(), lr=cfg["lr"], weight_decay=0.1)
        t0 = time.perf_counter()
        res = train(model, opt, _stream(cfg, np.random.default_rng([seed, 2])), cfg["steps"], _loss,
                    step_fn=stochastic_window_step(schedule, _loss, clip_grad=1.0))
        model.eval()
        # evaluation window: the training window for fixed-window models; the long window after
        # stochastic training (the paper's protocol)
        model.window = cfg["w_short"] if arm == "short" else cfg["w_long"]
        metrics["retrieval_4x"][arm] = _retrieval(model, rx, ry, cfg["eval_batch"])
        nll = _nll(model, lx, ly, cfg["eval_batch"])
        metrics["lm_nll"][arm] = float(np.mean(nll))
        info["retrieval_rate"][arm] = float(np.mean(metrics["retrieval_4x"][arm]))
        info["lm_ppl"][arm] = float(np.exp(np.mean(nll)))
        info["final_loss"][arm] = res.final_loss
        info["seconds"][arm] = round(time.perf_counter() - t0, 2)
        info["params"] = count_parameters(model)
    return {"metrics": metrics, "info": info}
