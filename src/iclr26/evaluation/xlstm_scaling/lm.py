"""The two model families of the scaling study, at any width, as transformers models, with their
parameter and training-FLOP counts.

* ``"transformer"``: a Llama decoder (pre-RMSNorm, rotary attention, SwiGLU feed-forward), the
  paper's Transformer baseline (Sec. 3);
* ``"xlstm"``: transformers' ``xLSTMForCausalLM``, the xLSTM-7B architecture the paper scales
  (mLSTM layers with exponential input gates, ``qk_dim_factor = 0.5``, feed-forward factor 2.667,
  gate soft cap 15, output-logit soft cap 30), trained with its chunkwise-parallel native kernel.

``count_params`` counts every parameter, embeddings and output layer included (the paper's count).
``training_flops_per_token`` counts the floating-point operations of one forward and backward pass
per token by tracing the actual computation with ``torch.utils.flop_counter.FlopCounterMode``
(matrix products; elementwise operations are not counted), with the masked half of the causal
products removed as in the paper's accounting: the same counter for both families, in place of the
paper's closed-form per-operator counts (listed in the README).
"""
from __future__ import annotations

import math

import torch

__all__ = ["ARCHS", "build_lm", "count_params", "training_flops_per_token"]

ARCHS = ("transformer", "xlstm")


def _round_up(x: float, multiple: int) -> int:
    return int(multiple * math.ceil(x / multiple))


def build_lm(arch: str, width: int, vocab_size: int, *, num_layers: int = 2, num_heads: int = 2,
             context_length: int = 128, ffn_factor: float = 2.667, ffn_multiple: int = 8,
             chunk_size: int = 16, seed: int | None = None):
    """A causal LM of family ``arch`` with hidden size ``width``; returns a transformers model.

    Both families use the same depth, head count and feed-forward width
    (``ffn_factor * width`` rounded up to ``ffn_multiple``; 2.667 is xLSTM-7B's factor, which the
    paper's Llama models share)."""
    if arch not in ARCHS:
        raise ValueError(f"arch must be one of {ARCHS}, got {arch!r}")
    for name, v in (("width", width), ("vocab_size", vocab_size), ("num_layers", num_layers),
                    ("num_heads", num_heads), ("context_length", context_length), ("chunk_size", chunk_size)):
        if not isinstance(v, int) or isinstance(v, bool) or v < 1:
            raise ValueError(f"{name} must be a positive integer, got {v!r}")
    if width % (2 * num_heads):
        raise ValueError(f"width {width} must be divisible by 2 * num_heads = {2 * num_heads}")
    if arch == "xlstm" and context_length % chunk_size:
        raise ValueError(f"context_length {context_length} must be a multiple of chunk_size {chunk_size}")
    if seed is not None:
        torch.manual_seed(int(seed))
    ffn = _round_up(ffn_factor * width, ffn_multiple)
    if arch == "transformer":
        from transformers import LlamaConfig, LlamaForCausalLM

        cfg = LlamaConfig(vocab_size=vocab_size, hidden_size=width, intermediate_size=ffn,
                          num_hidden_layers=num_layers, num_attention_heads=num_heads,
                          num_key_value_heads=num_heads, max_position_embeddings=context_length,
                          tie_word_embeddings=False, bos_token_id=None, eos_token_id=None, pad_token_id=None)
        cfg._attn_implementation = "eager"   # explicit matmuls: the FLOP counter sees the attention
        return LlamaForCausalLM(cfg)
    from transformers import xLSTMConfig, xLSTMForCausalLM

    cfg = xLSTMConfig(vocab_size=vocab_size, hidden_size=width, embedding_dim=width, num_hidden_layers=num_layers,
                      num_blocks=num_layers, num_heads=num_heads, mode="train", chunk_size=chunk_size,
                      use_cache=False, autocast_kernel_dtype="float32", ffn_proj_factor=ffn_factor,
                      ffn_round_up_to_multiple_of=ffn_multiple, tie_word_embeddings=False,
                      bos_token_id=None, eos_token_id=None, pad_token_id=None)
    return xLSTMForCausalLM(cfg)


def count_params(model) -> int:
    """Every parameter of ``model`` (embeddings and output layer included)."""
    return int(sum(p.numel() for p in model.parameters()))


def training_flops_per_token(model, context_length: int, vocab_size: int, causal: bool = True) -> float:
    """FLOPs of one training step (forward + backward) per token, traced on one sequence of
    ``context_length`` tokens.

    The trace counts every product as computed, including the masked upper triangle of the causal
    score and value products. With ``causal`` (the paper's accounting, its ``distill_scaling``
    attention mode, which halves the logit and output products of attention) that masked half is
    removed: of the ``4 T d`` per token and layer of attention's ``QK^T`` and ``AV``, ``2 T d``; of the
    ``2 chunk (d_qk + d_v)`` of the chunkwise mLSTM's intra-chunk products, ``chunk (d_qk + d_v)``
    (``d_qk``, ``d_v`` summed over heads); times 3 for the backward pass."""
    from torch.utils.flop_counter import FlopCounterMode

    ids = torch.randint(0, vocab_size, (1, context_length), generator=torch.Generator().manual_seed(0))
    was_training = model.training
    model.train()
    counter = FlopCounterMode(display=False)
    with counter:
        out = model(input_ids=ids, labels=ids)
        out.loss.backward()
    model.zero_grad(set_to_none=True)
    model.train(was_training)
    total = counter.get_total_flops() / context_length
    if causal:
        cfg = model.config
        if cfg.model_type == "xlstm":
            chunk = min(cfg.chunk_size, context_length)
            qk = int(cfg.hidden_size * cfg.qk_dim_factor)
            v = int(cfg.hidden_size * cfg.v_dim_factor)
            masked = cfg.num_hidden_layers * chunk * (qk + v)
        else:
            masked = cfg.num_hidden_layers * 2 * context_length * cfg.hidden_size
        total -= 3 * masked
    return total
