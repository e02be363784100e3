"""EntroDrop claim check (arXiv:2504.03794, Sec. 4, attention-block dropping).

One unit (seed) = one independent draw of calibration text and of held-out text from a fixed offline
corpus (the Python documentation shipped with CPython, ``pydoc_data.topics``: English technical prose
with code, split into a calibration half and a held-out half by position, never mixed). In each unit:
* the entropy criterion (the method: kNN entropy increase, k = 25) and the cosine criterion
  (Block Influence, ShortGPT / LLMDrop) are fitted on the same calibration windows, with the same
  protected blocks (0, 1 and the last, as in the official code);
* a random order over the same droppable blocks is drawn (the control: is any scoring better than
  chance?);
* for every K in ``ks`` the K first attention sub-blocks of each order are dropped and the held-out
  negative log-likelihood (log perplexity, nats per token) is measured on the same held-out windows.
Items = the K values of one unit, clustered by seed.

quick: SmolLM2-135M-Instruct (30 blocks) in float32. smoke: a tiny Llama over characters.
"""
from __future__ import annotations

import time

import numpy as np

from iclr26.common.seeding import seed_everything

SCALES = {
    "smoke": dict(model="tiny", seq_len=32, n_calib=2, n_eval=2, ks=(1, 2), k_nn=5, max_chars=20000),
    # seq_len = 256: the official code's calibration window (main.py, seqlen=256); k_nn = 25: its kNN k.
    # n_calib = 8 sequences instead of the official 128 C4 samples (CPU budget); see README.
    "quick": dict(model="smollm2-135m", seq_len=256, n_calib=8, n_eval=4, ks=(4, 8, 12), k_nn=25),
    # the paper: Llama-3.1-8B / Mistral-7B, 128 x 256-token C4 calibration windows, 4..16 attention blocks,
    # evaluated on 13 lm-eval tasks (we measure held-out perplexity instead)
    "paper": dict(model="meta-llama/Llama-3.1-8B", seq_len=256, n_calib=128, n_eval=64, ks=(4, 8, 12, 16),
                  k_nn=25),
}
SEEDS = {"smoke": 1, "quick": 5, "paper": 5}


def corpus_text(max_chars: int | None = None) -> str:
    """The offline corpus: every topic of CPython's bundled documentation, in sorted-key order
    (the first ``max_chars`` characters when given)."""
    import pydoc_data.topics as topics

    text = "\n\n".join(topics.topics[k] for k in sorted(topics.topics))
    return text if max_chars is None else text[:max_chars]


def _windows(ids: np.ndarray, n: int, seq_len: int, rng: np.random.Generator):
    """``n`` non-overlapping windows of ``seq_len`` tokens at random positions of ``ids``."""
    import torch

    n_slots = len(ids) // seq_len
    if n_slots < n:
        raise ValueError(f"corpus half has {n_slots} windows of {seq_len} tokens, {n} requested")
    slots = rng.choice(n_slots, size=n, replace=False)
    return torch.as_tensor(np.stack([ids[s * seq_len:(s + 1) * seq_len] for s in slots]), dtype=torch.long)


def _model(cfg):
    import torch

    if cfg["model"] == "tiny":
        from iclr26.models import SimpleTokenizer, TinyLMConfig, build_tiny_lm

        text = corpus_text(cfg.get("max_chars"))
        tok = SimpleTokenizer.from_texts([text], level="char")
        torch.manual_seed(0)
        model = build_tiny_lm(TinyLMConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=6,
                                           num_attention_heads=4, num_key_value_heads=2,
                                           initializer_range=0.3), len(tok)).eval()
        return model, tok
    from iclr26.models import load

    return load(cfg["model"], dtype="float32")


def run(scale: str, seed: int) -> dict:
    import torch

    from iclr26.compression.entrodrop import EntroDrop, heldout_nll

    cfg = SCALES[scale]
    if scale == "paper":
        raise NotImplementedError("the paper's 8B models and lm-eval tasks need GPUs and hub access")
    rng = seed_everything(seed)
    t0 = time.time()
    model, tok = _model(cfg)
    ids = np.asarray(tok(corpus_text(cfg.get("max_chars")), add_special_tokens=False)["input_ids"], dtype=np.int64)
    half = len(ids) // 2
    calib = _windows(ids[:half], cfg["n_calib"], cfg["seq_len"], rng)
    held = _windows(ids[half:], cfg["n_eval"], cfg["seq_len"], rng)
    calib_batches = list(torch.split(calib, 4))
    eval_batches = list(torch.split(held, 4))

    entropy = EntroDrop(estimator="knn", k=cfg["k_nn"], granularity="attention").fit(model, calib_batches)
    cosine = EntroDrop(criterion="cosine", granularity="attention").fit(model, calib_batches)
    droppable = list(entropy.order_)
    random_order = [int(i) for i in rng.permutation(sorted(droppable))]
    t_fit = time.time() - t0

    dense = heldout_nll(model, eval_batches)
    nll = {"entropy": [], "cosine": [], "random": []}
    chosen = {a: {} for a in nll}
    from iclr26.models.hooks import drop_blocks

    for K in cfg["ks"]:
        sel = {"entropy": entropy.selection(K), "cosine": cosine.selection(K), "random": sorted(random_order[:K])}
        for arm, layers in sel.items():
            with drop_blocks(model, layers, part="attention"):
                nll[arm].append(heldout_nll(model, eval_batches))
            chosen[arm][str(K)] = layers
    return {
        "metrics": {"heldout_nll": nll},
        "info": {
            "dense_nll": dense,
            "dense_ppl": float(np.exp(dense)),
            "ppl": {a: [float(np.exp(v)) for v in vals] for a, vals in nll.items()},
            "ks": list(cfg["ks"]),
            "dropped": chosen,
            "entropy_increase": [float(s) for s in entropy.scores_],
            "block_influence": [float(s) for s in cosine.scores_],
            "protected": entropy.protected_,
            "seconds": {"fit": t_fit, "total": time.time() - t0},
            "tokens": {"calibration": int(calib.numel()), "heldout": int(held.numel())},
        },
    }
