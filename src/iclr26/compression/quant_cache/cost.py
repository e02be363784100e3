"""Analytic compute and memory of a DiT sampling run under quantisation and caching.

Fake quantisation gives no CPU speed-up, so Q&C's acceleration (arXiv:2503.02508, Tables 1-2:
speed-up and bit-operations) is reported here as counts: multiply-accumulates (MACs) per sample,
bit-operations (BOPs = MACs x weight bits x activation bits, the usual PTQ measure; float32 counts
as 32 x 32) and weight bytes. A cached step skips every block's attention (QKV, scores,
attention x values, output projection) and MLP, and still computes the adaLN modulation, the
embeddings and the final layer (:mod:`.cache`). The attention matrix products are not quantised
(:class:`.quantizer.QuantAttention`).
"""
from __future__ import annotations


def dit_cost(config, calls: int, interval: int = 1, w_bits: int | None = None, a_bits: int | None = None) -> dict:
    """Per-sample cost of ``calls`` forward calls of a :class:`~iclr26.models.diffusion.TinyDiT`
    with ``config`` (a ``DiTConfig``), recomputing the blocks on every ``interval``-th call
    (calls ``0, interval, 2 interval, ...``) and with linear layers at ``w_bits`` / ``a_bits``
    (``None`` = float32). Returns MACs, BOPs and weight bytes, with the float32 no-cache values
    and the savings (ratios dense / this)."""
    if calls < 1 or interval < 1:
        raise ValueError(f"calls and interval must be >= 1, got {calls}, {interval}")
    n = (config.image_size // config.patch) ** 2
    w, L = config.width, config.depth
    pdim = config.channels * config.patch**2
    wb, ab = (w_bits or 32), (a_bits or 32)
    lin_always = n * pdim * w + 2 * w * w + L * 6 * w * w + 2 * w * w + n * w * pdim   # embed, cond, adaLN, final
    lin_block = L * (3 * n * w * w + n * w * w + 8 * n * w * w)                           # qkv, out, mlp
    attn_block = L * 2 * n * n * w                                                        # q k^T and att v
    refresh = -(-calls // interval)                                                       # ceil
    macs_dense = calls * (lin_always + lin_block + attn_block)
    macs = calls * lin_always + refresh * (lin_block + attn_block)
    bops_dense = macs_dense * 32 * 32
    bops = (calls * lin_always + refresh * lin_block) * wb * ab + refresh * attn_block * 32 * 32
    lin_params = (pdim * w + 2 * w * w + L * (6 * w * w + 4 * w * w + 8 * w * w) + 2 * w * w + w * pdim)
    lin_bias = w + 2 * w + L * (6 * w + 4 * w + 5 * w) + 2 * w + pdim
    other = n * w + (config.n_classes + 1) * w                                           # positions, labels
    weight_bytes_fp32 = 4 * (lin_params + lin_bias + other)
    weight_bytes = lin_params * wb / 8 + 4 * (lin_bias + other)
    return {
        "macs": int(macs), "macs_dense": int(macs_dense), "mac_saving": macs_dense / macs,
        "bops": int(bops), "bops_dense": int(bops_dense), "bop_saving": bops_dense / bops,
        "weight_bytes": float(weight_bytes), "weight_bytes_fp32": int(weight_bytes_fp32),
        "weight_saving": weight_bytes_fp32 / weight_bytes, "refresh_calls": int(refresh),
    }
