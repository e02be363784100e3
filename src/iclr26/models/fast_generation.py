"""The decoding loop behind ``iclr26.models.generation.generate(..., engine="fast")``.

transformers' ``generate`` spends a large part of a small model's decoding step outside the model's
arithmetic: building the per-step inputs and the 4D mask, the stopping criteria, the processor
list, the cache's ``torch.cat`` growth, and ~30 ``nn.Module`` calls per decoder layer. This module
runs the same decoding with less of that:

- :func:`decode` is the loop: one prefill of the left-padded batch (the prompt's logits only for the
  last position), then one forward per new token, greedy (``argmax``) or ancestral sampling
  (``softmax`` + ``torch.multinomial``, the very calls transformers makes, so a seeded run draws the
  same random numbers), with transformers' own ``MinNewTokensLengthLogitsProcessor``,
  ``TemperatureLogitsWarper`` and ``TopPLogitsWarper`` in transformers' order (built-ins, the
  caller's processors, then the warpers). Rows that stopped are fed the pad token, as transformers
  does, so stateful processors and hooks see the same inputs.
- the forward is :class:`CompactDecoder` for Llama- and Qwen2-family models with SDPA attention and
  no hooks: the model's own weights and rotary module, a preallocated (static) KV cache written in
  place, masks built once per batch, and transformers' operations in transformers' order, so the
  logits equal transformers' (tested bit for bit on SmolLM2-135M). Any other model, or a model with
  forward hooks (steering, activation reading), runs its own ``forward`` with a ``DynamicCache``,
  with the same inputs ``generate`` gives it, so hooks fire exactly as under ``generate``.

:func:`fast_supported` says whether a request can take this path (``generate`` falls back to
transformers' ``generate`` otherwise: extra ``generate`` keywords beyond ``min_new_tokens``, or a
model generation config that turns on processors this loop does not build).
"""
from __future__ import annotations

import weakref

import torch
import torch.nn.functional as F

__all__ = ["CompactDecoder", "compact_decoder", "compact_supported", "decode", "fast_supported", "has_forward_hooks"]

# GenerationConfig fields that make transformers add a processor (or change the loop) when active,
# with their inactive values. A request whose merged config activates any of them falls back.
_INACTIVE = {
    "repetition_penalty": (None, 1.0), "encoder_repetition_penalty": (None, 1.0),
    "no_repeat_ngram_size": (None, 0), "encoder_no_repeat_ngram_size": (None, 0),
    "bad_words_ids": (None,), "min_length": (None, 0), "sequence_bias": (None,),
    "suppress_tokens": (None,), "begin_suppress_tokens": (None,), "forced_bos_token_id": (None,),
    "forced_eos_token_id": (None,), "remove_invalid_values": (None, False), "renormalize_logits": (None, False),
    "exponential_decay_length_penalty": (None,), "guidance_scale": (None, 1.0), "watermarking_config": (None,),
    "typical_p": (None, 1.0), "epsilon_cutoff": (None, 0.0), "eta_cutoff": (None, 0.0), "min_p": (None,),
    "top_h": (None,), "num_beams": (None, 1), "num_return_sequences": (None, 1), "prefill_chunk_size": (None,),
    "max_length_time": (None,), "max_time": (None,), "stop_strings": (None,), "assistant_model": (None,),
    "penalty_alpha": (None,), "low_memory": (None, False), "cache_implementation": (None,),
}
_CONFIG_KEYS = {"min_new_tokens"}  # GenerationConfig keywords a caller may add (beyond generate's own)


def has_forward_hooks(model) -> bool:
    """Whether any forward (pre-)hook is registered on ``model``, its submodules or globally."""
    from torch.nn.modules import module as M

    if M._global_forward_hooks or M._global_forward_pre_hooks:
        return True
    return any(m._forward_hooks or m._forward_pre_hooks for m in model.modules())


def fast_supported(model, generation_config, config_keys=(), generate_kwargs=None) -> bool:
    """Whether :func:`decode` reproduces ``model.generate(generation_config=..., **generate_kwargs)``:
    ``config_keys`` are the GenerationConfig fields the caller set beyond ``generate``'s own (only
    ``min_new_tokens`` is taken), ``generate_kwargs`` the other ``model.generate`` keywords (none is)."""
    if set(config_keys) - _CONFIG_KEYS or generate_kwargs:
        return False
    if generation_config.do_sample and generation_config.top_k not in (None, 0):
        return False
    cfg = getattr(model, "config", None)
    if cfg is None or getattr(cfg, "is_encoder_decoder", False) or not hasattr(model, "get_input_embeddings"):
        return False
    from transformers import GenerationConfig

    defaults = GenerationConfig()
    model_cfg = getattr(model, "generation_config", None)
    if generation_config.do_sample and model_cfg is not None and any(
            getattr(model_cfg, f, None) != getattr(defaults, f) for f in ("temperature", "top_p", "top_k")):
        return False  # generate would merge the model's own sampling defaults into the request
    for source in (generation_config, model_cfg):
        if source is None:
            continue
        for name, inactive in _INACTIVE.items():
            if getattr(source, name, None) not in inactive:
                return False
    return True


def compact_supported(model) -> bool:
    """Whether :class:`CompactDecoder` can run ``model``: a Llama/Qwen2 causal LM with SDPA attention,
    plain ``nn.Linear`` projections (no adapters), SiLU MLP, full attention in every layer, no hooks."""
    cfg = getattr(model, "config", None)
    if cfg is None or type(model).__name__ not in ("LlamaForCausalLM", "Qwen2ForCausalLM"):
        return False
    if getattr(cfg, "_attn_implementation", None) != "sdpa" or getattr(cfg, "hidden_act", None) != "silu":
        return False
    if getattr(cfg, "pretraining_tp", 1) != 1:
        return False
    if any(t != "full_attention" for t in (getattr(cfg, "layer_types", None) or [])):
        return False
    inner = getattr(model, "model", None)
    if inner is None or not hasattr(inner, "layers") or not hasattr(inner, "rotary_emb"):
        return False
    if type(getattr(model, "lm_head", None)) is not torch.nn.Linear:
        return False
    for layer in inner.layers:
        a, m = getattr(layer, "self_attn", None), getattr(layer, "mlp", None)
        if a is None or m is None:
            return False
        if any(type(getattr(a, n, None)) is not torch.nn.Linear for n in ("q_proj", "k_proj", "v_proj", "o_proj")):
            return False
        if any(type(getattr(m, n, None)) is not torch.nn.Linear for n in ("gate_proj", "up_proj", "down_proj")):
            return False
    return not has_forward_hooks(model)


def _rms(x, w, eps):
    dtype = x.dtype
    h = x.to(torch.float32)
    var = h.pow(2).mean(-1, keepdim=True)
    h = h * torch.rsqrt(var + eps)
    return w * h.to(dtype)


def _rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class CompactDecoder:
    """A Llama/Qwen2 forward over the model's own parameters with a preallocated KV cache.

    Same operations, in the same order and dtypes, as transformers' modeling code with SDPA (including
    its grouped-query dispatch: ``enable_gqa`` without a mask, query packing for one token with a
    mask, ``repeat_kv`` otherwise), so its logits are transformers'. ``reset(batch, max_len)``
    allocates the cache; ``forward(ids, position_ids, mask, start)`` writes positions
    ``start .. start+T-1`` and returns the float32 logits of the last position, ``(B, vocab)``.
    """

    def __init__(self, model):
        inner = model.model
        cfg = model.config
        self.embed = inner.embed_tokens
        self.rotary = inner.rotary_emb
        self.norm = (inner.norm.weight, inner.norm.variance_epsilon)
        self.lm = (model.lm_head.weight, model.lm_head.bias)
        self.n_heads = cfg.num_attention_heads
        self.n_kv = getattr(cfg, "num_key_value_heads", None) or self.n_heads
        self.layers = []
        for layer in inner.layers:
            a, m = layer.self_attn, layer.mlp
            self.layers.append((
                layer.input_layernorm.weight, layer.input_layernorm.variance_epsilon,
                a.q_proj.weight, a.q_proj.bias, a.k_proj.weight, a.k_proj.bias, a.v_proj.weight, a.v_proj.bias,
                a.o_proj.weight, a.o_proj.bias, a.head_dim, a.scaling,
                layer.post_attention_layernorm.weight, layer.post_attention_layernorm.variance_epsilon,
                m.gate_proj.weight, m.gate_proj.bias, m.up_proj.weight, m.up_proj.bias, m.down_proj.weight,
                m.down_proj.bias,
            ))
        self.k = self.v = None
        self.fused = self.fused_weights = None
        self.fuse_ok: dict[int, bool] = {}

    def _fuse(self, batch: int) -> bool:
        """Concatenate each layer's q/k/v and gate/up weights into one matrix each (one GEMM instead of
        three and two) if, on this BLAS and at this batch, the fused product's columns equal the
        separate products bit for bit (checked on the first layer with random inputs)."""
        ln1, _, wq, bq, wk, bk, wv, bv, *_ = self.layers[0]
        wg, bg, wu, bu = self.layers[0][14:18]
        if any(b is not None for b in (bq, bk, bv, bg, bu)):
            return False
        gen = torch.Generator(device="cpu").manual_seed(0)
        for rows in sorted({1, batch}):   # the decoding steps' GEMM sizes (the prompt pass stays unfused)
            x = torch.randn((rows, 1, wq.shape[1]), generator=gen).to(wq.dtype)
            sep = torch.cat([F.linear(x, wq), F.linear(x, wk), F.linear(x, wv)], -1)
            if not torch.equal(sep, F.linear(x, torch.cat([wq, wk, wv]))):
                return False
            sep = torch.cat([F.linear(x, wg), F.linear(x, wu)], -1)
            if not torch.equal(sep, F.linear(x, torch.cat([wg, wu]))):
                return False
        if self.fused_weights is None:
            self.fused_weights = [(torch.cat([L[2], L[4], L[6]]), (L[2].shape[0], L[4].shape[0], L[6].shape[0]),
                                   torch.cat([L[14], L[16]]), L[14].shape[0]) for L in self.layers]
        return True

    def reset(self, batch: int, max_len: int, fuse: bool = True):
        if fuse and batch not in self.fuse_ok:
            self.fuse_ok[batch] = self._fuse(batch)
        self.fused = self.fused_weights if fuse and self.fuse_ok[batch] else None
        w = self.layers[0][2]
        hd = self.layers[0][10]
        shape = (batch, self.n_kv, max_len, hd)
        self.k = [torch.empty(shape, dtype=w.dtype, device=w.device) for _ in self.layers]
        self.v = [torch.empty(shape, dtype=w.dtype, device=w.device) for _ in self.layers]

    def forward(self, ids, position_ids, mask, start: int):
        B, T = ids.shape
        end = start + T
        h = self.embed(ids)
        cos, sin = self.rotary(h, position_ids=position_ids)
        cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
        n_rep = self.n_heads // self.n_kv
        fused = self.fused
        for i, (ln1, e1, wq, bq, wk, bk, wv, bv, wo, bo, hd, scale, ln2, e2, wg, bg, wu, bu, wd, bd) in \
                enumerate(self.layers):
            residual = h
            x = _rms(h, ln1, e1)
            if fused is not None and T == 1:
                wqkv, split, wgu, n_gate = fused[i]
                q, k, v = F.linear(x, wqkv).split(split, dim=-1)
            else:
                q, k, v = F.linear(x, wq, bq), F.linear(x, wk, bk), F.linear(x, wv, bv)
            q = q.reshape(B, T, -1, hd).transpose(1, 2)
            k = k.reshape(B, T, -1, hd).transpose(1, 2)
            v = v.reshape(B, T, -1, hd).transpose(1, 2)
            q = (q * cos) + (_rotate_half(q) * sin)
            k = (k * cos) + (_rotate_half(k) * sin)
            self.k[i][:, :, start:end] = k
            self.v[i][:, :, start:end] = v
            kk, vv = self.k[i][:, :, :end], self.v[i][:, :, :end]
            extra = {}
            qq, mm = q, mask
            if n_rep > 1:
                if mask is None and hd <= 256:
                    extra["enable_gqa"] = True
                elif T == 1:
                    qq = q.reshape(B, self.n_kv, n_rep, hd)
                    if mm is not None and mm.shape[1] != 1:
                        mm = mm.reshape(mm.shape[0], self.n_kv, n_rep, mm.shape[-1])
                else:
                    kk = kk[:, :, None].expand(B, self.n_kv, n_rep, end, hd).reshape(B, self.n_heads, end, hd)
                    vv = vv[:, :, None].expand(B, self.n_kv, n_rep, end, hd).reshape(B, self.n_heads, end, hd)
            causal = T > 1 and mm is None
            o = F.scaled_dot_product_attention(qq, kk, vv, attn_mask=mm, dropout_p=0.0, scale=scale,
                                               is_causal=causal, **extra)
            o = o.reshape(o.shape[0], -1, T, hd).transpose(1, 2).contiguous()
            o = o.reshape(B, T, -1).contiguous()
            h = residual + F.linear(o, wo, bo)
            residual = h
            x = _rms(h, ln2, e2)
            if fused is not None and T == 1:
                g, u = F.linear(x, wgu).split((n_gate, wgu.shape[0] - n_gate), dim=-1)
            else:
                g, u = F.linear(x, wg, bg), F.linear(x, wu, bu)
            h = residual + F.linear(F.silu(g) * u, wd, bd)
        h = _rms(h[:, -1:, :], *self.norm)
        return F.linear(h, *self.lm)[:, -1].to(copy=True, dtype=torch.float32)


_DECODERS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def _weights_state(model):
    return tuple((p.data_ptr(), p._version) for p in model.parameters())


def compact_decoder(model) -> CompactDecoder:
    """The :class:`CompactDecoder` of ``model``, kept between calls while its parameters are the same
    tensors, unmodified (an optimizer step or a weight load builds a new one)."""
    state = _weights_state(model)
    entry = _DECODERS.get(model)
    if entry is None or entry[0] != state:
        entry = (state, CompactDecoder(model))
        _DECODERS[model] = entry
    return entry[1]


def _prefill_mask(model, embeds, attention_mask, position_ids):
    """transformers' own mask for the prompt forward (``None`` without padding)."""
    from transformers.masking_utils import create_causal_mask

    return create_causal_mask(config=model.config, inputs_embeds=embeds, attention_mask=attention_mask,
                              cache=None, position_ids=position_ids)


def decode(model, input_ids, attention_mask, max_new_tokens: int, *, do_sample: bool, temperature: float = 1.0,
           top_p: float = 1.0, logits_processor=None, stop_ids=(), pad_id: int = 0, min_new_tokens: int = 0,
           return_scores: bool = False, compact: bool | None = None, fuse: bool = True):
    """Decode one left-padded batch; returns ``(new_ids (B, n), scores)`` like transformers' ``generate``
    (``sequences[:, L:]`` and its processed per-step ``scores``, a tuple of ``(B, vocab)`` float32, or
    ``None``). ``compact=None`` uses :class:`CompactDecoder` where :func:`compact_supported`;
    ``fuse=False`` keeps its q/k/v and gate/up products separate (for measuring what fusing buys)."""
    from transformers import (LogitsProcessorList, MinNewTokensLengthLogitsProcessor, TemperatureLogitsWarper,
                              TopPLogitsWarper)

    device = input_ids.device
    B, L = input_ids.shape
    stops = torch.tensor(list(stop_ids), dtype=torch.long, device=device)
    procs = LogitsProcessorList()
    if min_new_tokens and min_new_tokens > 0 and stops.numel():
        procs.append(MinNewTokensLengthLogitsProcessor(L, min_new_tokens, stops, device=device))
    procs.extend(list(logits_processor or []))
    if do_sample:
        if temperature != 1.0:
            procs.append(TemperatureLogitsWarper(temperature))
        if top_p < 1.0:
            procs.append(TopPLogitsWarper(top_p))
    if compact is None:
        compact = compact_supported(model)
    mask2d = attention_mask.long()
    position_ids = (mask2d.cumsum(-1) - 1).masked_fill(mask2d == 0, 0)
    padded = not bool(mask2d.all())
    seqs = torch.empty((B, L + max_new_tokens), dtype=input_ids.dtype, device=device)
    seqs[:, :L] = input_ids
    unfinished = torch.ones(B, dtype=torch.long, device=device)
    pad = torch.tensor(pad_id, dtype=torch.long, device=device)
    scores = [] if return_scores else None
    with (torch.inference_mode() if compact else torch.no_grad()):
        if compact:
            dec = compact_decoder(model)
            dec.reset(B, L + max_new_tokens, fuse=fuse)
            full_mask = torch.ones((B, L + max_new_tokens), dtype=torch.bool, device=device)
            full_mask[:, :L] = mask2d.bool()
            mask = _prefill_mask(model, dec.embed(input_ids[:, :1]).expand(B, L, -1), mask2d, position_ids) \
                if padded else None
            logits = dec.forward(input_ids, position_ids, mask, 0)
        else:
            from transformers import DynamicCache

            from .generation import forward_with_cache

            out, cache = forward_with_cache(model, DynamicCache(config=model.config), input_ids=input_ids,
                                            attention_mask=mask2d, position_ids=position_ids, logits_to_keep=1)
            logits = out.logits[:, -1].to(copy=True, dtype=torch.float32)
            del out
        last_pos = position_ids[:, -1:]
        n = 0
        for step in range(max_new_tokens):
            cur = seqs[:, : L + step]
            sc = procs(cur.clone() if logits_processor else cur, logits) if len(procs) else logits
            if return_scores:
                scores.append(sc)
            if do_sample:
                nxt = torch.multinomial(F.softmax(sc, dim=-1), num_samples=1).squeeze(1)
            else:
                nxt = torch.argmax(sc, dim=-1)
            if stops.numel():
                nxt = nxt * unfinished + pad * (1 - unfinished)
            seqs[:, L + step] = nxt
            n = step + 1
            if stops.numel():
                unfinished = unfinished & ~torch.isin(nxt, stops)
                if not bool(unfinished.any()):
                    break
            if n == max_new_tokens:
                break
            last_pos = last_pos + 1
            ids = nxt[:, None]
            if compact:
                mask = full_mask[:, None, None, : L + n] if padded else None
                logits = dec.forward(ids, last_pos, mask, L + step)
            else:
                mask2d = torch.cat([mask2d, mask2d.new_ones((B, 1))], dim=-1)
                out, cache = forward_with_cache(model, cache, input_ids=ids, attention_mask=mask2d,
                                                position_ids=last_pos, logits_to_keep=1)
                logits = out.logits[:, -1].to(copy=True, dtype=torch.float32)
                del out
    if compact:
        dec.k = dec.v = None   # the cache is per call; the decoder (and any fused weights) stays
    return seqs[:, L : L + n], (tuple(scores) if return_scores else None)
