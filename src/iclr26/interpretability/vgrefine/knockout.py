"""VGRefine's attention knockout for transformers VLMs (Idefics3 / SmolVLM class, eager attention).

Paper: "How Do Medical MLLMs Fail? A Study on Visual Grounding in Medical Images" (arXiv
2603.14323, ICLR 2026), Sec. 5. Step 1 ranks heads by KL (:func:`.grounding.select_grounding_heads`);
step 2, at inference, averages those heads' last-token attention over the visual tokens, keeps the
tokens above the 50th percentile as the relevance mask, and at one decoder layer (16 of 32 for the
7B models) sets the attention logits from the question tokens to the masked-out visual tokens to
-inf, so those weights become 0 and each query's remaining weights renormalise under the softmax.
"""
from __future__ import annotations

import contextlib

import numpy as np
import torch

from iclr26.models.hooks import attention_module, decoder_layers

from .grounding import _check_map

#: the relevance mask keeps the visual tokens above this percentile of the aggregated map (Sec. 5)
DEFAULT_PERCENTILE = 50.0
#: knockout layer of the paper's 7B models (Sec. 5: layer 16 of 32) as a share of the depth
PAPER_LAYER_FRACTION = 16 / 32


def _text_model(model):
    from iclr26.models.vlm import text_model

    return text_model(model)


def _image_token_id(model) -> int:
    cfg = model.config
    tid = getattr(cfg, "image_token_id", None)
    if tid is None:
        tid = getattr(cfg, "image_token_index", None)
    if tid is None:
        raise TypeError("model.config has no image_token_id: not a VLM of the Idefics3/SmolVLM/LLaVA kind")
    return int(tid)


def paper_layer(n_layers: int) -> int:
    """The knockout layer at the paper's relative depth (16 of 32 for the 7B models): ``round(n / 2)``."""
    if isinstance(n_layers, bool) or not isinstance(n_layers, (int, np.integer)) or n_layers < 1:
        raise ValueError(f"n_layers must be a positive integer, got {n_layers!r}")
    return min(n_layers - 1, int(round(n_layers * PAPER_LAYER_FRACTION)))


def image_positions(input_ids: torch.Tensor, image_token_id: int) -> torch.Tensor:
    """``(B, N)`` positions of the image tokens of each row (every row must hold the same number)."""
    if not isinstance(input_ids, torch.Tensor) or input_ids.ndim != 2:
        raise ValueError("input_ids must be a (batch, length) tensor")
    is_img = input_ids == image_token_id
    counts = is_img.sum(1)
    if counts.min() == 0:
        raise ValueError("a row of input_ids holds no image token")
    if (counts != counts[0]).any():
        raise ValueError(f"rows hold different numbers of image tokens: {counts.tolist()}")
    return is_img.nonzero()[:, 1].reshape(input_ids.shape[0], -1)


def visual_attention(model, batch: dict, *, query: int = -1, return_output: bool = False):
    """``(B, L, H, N)``: every decoder head's attention from position ``query`` (the last token by
    default) to the ``N`` image tokens, from one forward pass with ``output_attentions=True``
    (``(maps, output)`` with ``return_output=True``, to reuse the pass's logits)."""
    if "input_ids" not in batch:
        raise ValueError("batch must hold input_ids")
    pos = image_positions(batch["input_ids"], _image_token_id(model))
    with torch.no_grad():
        out = model(**batch, output_attentions=True)
    atts = out.attentions
    if not atts or any(a is None for a in atts):
        raise RuntimeError("the model returned no attention maps: load it with attn_implementation='eager'")
    a = torch.stack([x[:, :, query, :] for x in atts], dim=1)        # (B, L, H, T)
    idx = pos[:, None, None, :].expand(-1, a.shape[1], a.shape[2], -1)
    maps = torch.gather(a, 3, idx).float()
    return (maps, out) if return_output else maps


def relevance_mask(attention, heads, percentile: float = DEFAULT_PERCENTILE) -> torch.Tensor:
    """VGRefine's mask: ``(B, N)`` bool, True for the visual tokens kept.

    ``attention`` ``(B, L, H, N)`` (:func:`visual_attention`), ``heads`` ``(K, 2)`` rows
    ``(layer, head)``. The selected heads' maps are averaged; the ``ceil((1 - percentile / 100) * N)``
    tokens of highest aggregated attention are kept (the tokens above the percentile; a fixed count,
    ties broken by position). ``K = 0`` or ``percentile = 0`` keeps every token (no knockout).
    """
    a = _check_map("attention", attention)
    if a.ndim != 4:
        raise ValueError(f"attention must be (items, layers, heads, tokens), got shape {tuple(a.shape)}")
    if isinstance(percentile, bool) or not isinstance(percentile, (int, float, np.floating)) \
            or not 0 <= float(percentile) < 100:
        raise ValueError(f"percentile must lie in [0, 100), got {percentile!r}")
    heads = _check_heads(heads, a.shape[1], a.shape[2])
    b, n = a.shape[0], a.shape[-1]
    if heads.shape[0] == 0 or percentile == 0:
        return torch.ones(b, n, dtype=torch.bool)
    agg = a[:, heads[:, 0], heads[:, 1], :].mean(1)                     # (B, N)
    n_keep = keep_count(n, percentile)
    order = torch.sort(-agg, dim=1, stable=True).indices[:, :n_keep]
    keep = torch.zeros(b, n, dtype=torch.bool)
    keep.scatter_(1, order, True)
    return keep


def keep_count(n_tokens: int, percentile: float = DEFAULT_PERCENTILE) -> int:
    """How many of ``n_tokens`` the relevance mask keeps: ``ceil((1 - percentile / 100) * n)``."""
    return int(np.ceil((1 - float(percentile) / 100) * n_tokens - 1e-9))


def random_keep_mask(batch_size: int, n_tokens: int, n_keep: int, generator: torch.Generator | None = None) -> torch.Tensor:
    """The random-mask control: ``(B, N)`` bool with ``n_keep`` random tokens kept per row (the same
    sparsity as the relevance mask)."""
    if not 0 <= n_keep <= n_tokens:
        raise ValueError(f"n_keep must lie in [0, {n_tokens}], got {n_keep}")
    scores = torch.rand(batch_size, n_tokens, generator=generator)
    keep = torch.zeros(batch_size, n_tokens, dtype=torch.bool)
    keep.scatter_(1, scores.argsort(1)[:, :n_keep], True)
    return keep


def _check_heads(heads, n_layers: int, n_heads: int) -> torch.Tensor:
    h = torch.as_tensor(heads, dtype=torch.long)
    if h.numel() == 0:
        return h.reshape(0, 2)
    if h.ndim != 2 or h.shape[1] != 2:
        raise ValueError(f"heads must be (K, 2) rows of (layer, head), got shape {tuple(h.shape)}")
    if (h[:, 0] < 0).any() or (h[:, 0] >= n_layers).any() or (h[:, 1] < 0).any() or (h[:, 1] >= n_heads).any():
        raise ValueError(f"heads out of range for {n_layers} layers x {n_heads} heads")
    return h


class VisualTokenKnockout(contextlib.AbstractContextManager):
    """Inside the ``with`` block, at decoder layer ``layer`` of the VLM's text model, the attention
    logits from the question tokens (every position after the last image token, generated tokens
    included) to the visual tokens with ``keep == False`` are set to the dtype's minimum (-inf in
    effect): those weights become exactly 0 and each query's other weights renormalise in the
    softmax. Other layers, and attention among text tokens, are untouched.

    ``keep``: ``(B, N)`` bool, one row per item of the batches run inside the block (``None`` or all
    True: the plain model). Works through a forward pre-hook on the model (reads ``input_ids`` to
    find the image tokens) and one on the layer's attention module (edits its additive mask), so it
    applies to ``model(...)`` and ``model.generate(..., use_cache=True)`` alike.
    """

    def __init__(self, model, layer: int, keep=None):
        if not isinstance(model, torch.nn.Module):
            raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
        self.model = model
        self._image_id = _image_token_id(model)
        self._layers = decoder_layers(_text_model(model))
        if isinstance(layer, bool) or not isinstance(layer, (int, np.integer)) or not 0 <= layer < len(self._layers):
            raise ValueError(f"layer must be an integer in [0, {len(self._layers)}), got {layer!r}")
        self.layer = int(layer)
        if keep is not None:
            keep = torch.as_tensor(keep)
            if keep.dtype != torch.bool or keep.ndim != 2:
                raise ValueError("keep must be a (batch, image tokens) bool tensor")
        self.keep = keep
        self._handles = []
        self._pos = None

    def _on_model(self, module, args, kwargs):
        ids = kwargs.get("input_ids", args[0] if args else None)
        if ids is not None and (ids == self._image_id).any():
            pos = image_positions(ids, self._image_id)
            if self.keep is not None and tuple(self.keep.shape) != tuple(pos.shape):
                raise ValueError(f"keep has shape {tuple(self.keep.shape)} but the batch has "
                                 f"{tuple(pos.shape)} (items, image tokens)")
            self._pos = pos
        return None

    def _on_attention(self, module, args, kwargs):
        if self.keep is None or bool(self.keep.all()) or self._pos is None:
            return None
        hidden = kwargs.get("hidden_states", args[0] if args else None)
        mask = kwargs.get("attention_mask")
        b, q = hidden.shape[0], hidden.shape[1]
        dtype = hidden.dtype
        big = torch.finfo(dtype).min
        if mask is None:
            cache_len = _past_length(kwargs)
            kv = cache_len + q
            qpos = torch.arange(cache_len, kv)[:, None]
            mask = torch.where(torch.arange(kv)[None, :] <= qpos, 0.0, big).to(dtype)[None, None].expand(b, 1, q, kv)
        elif mask.dtype == torch.bool:
            mask = torch.where(mask, 0.0, big).to(dtype)
        kv = mask.shape[-1]
        mask = mask.expand(b, 1, q, kv).clone()
        qpos = torch.arange(kv - q, kv)                                   # absolute query positions
        last_img = self._pos[:, -1]                                       # (B,)
        is_question = qpos[None, :] > last_img[:, None]                   # (B, q)
        block = torch.zeros(b, kv, dtype=torch.bool)
        drop = self._pos.masked_fill(self.keep, -1)
        rows, cols = (drop >= 0).nonzero(as_tuple=True)
        block[rows, drop[rows, cols]] = True
        full = is_question[:, :, None] & block[:, None, :]                # (B, q, kv)
        mask[:, 0] = mask[:, 0].masked_fill(full, big)
        kwargs["attention_mask"] = mask
        return args, kwargs

    def __enter__(self):
        self._handles.append(self.model.register_forward_pre_hook(self._on_model, with_kwargs=True))
        attn = attention_module(self._layers[self.layer])
        self._handles.append(attn.register_forward_pre_hook(self._on_attention, with_kwargs=True))
        return self

    def __exit__(self, *exc):
        for h in self._handles:
            h.remove()
        self._handles.clear()
        self._pos = None
        return False


def _past_length(kwargs) -> int:
    cache = kwargs.get("past_key_values", kwargs.get("past_key_value"))
    if cache is None:
        return 0
    try:
        return int(cache.get_seq_length())
    except Exception:                                               # pragma: no cover - other cache kinds
        return 0


class VGRefine:
    """VGRefine at inference: ``heads`` (from :func:`.grounding.select_grounding_heads`), ``layer``
    (default: the paper's relative depth, :func:`paper_layer`), ``percentile`` (default 50).

    ``with VGRefine(model, heads).apply(batch): out = model(**batch)`` runs one plain pass with
    attention maps to build each item's relevance mask, then knocks out question-to-masked-out
    visual attention at ``layer`` for the passes inside the block. ``K = 0`` heads is the plain model.
    """

    def __init__(self, model, heads, *, layer: int | None = None, percentile: float = DEFAULT_PERCENTILE):
        self.model = model
        n_layers = len(decoder_layers(_text_model(model)))
        cfg = getattr(model.config, "text_config", model.config)
        self.heads = _check_heads(heads, n_layers, int(cfg.num_attention_heads))
        self.layer = paper_layer(n_layers) if layer is None else layer
        if not 0 <= float(percentile) < 100:
            raise ValueError(f"percentile must lie in [0, 100), got {percentile!r}")
        self.percentile = float(percentile)

    def mask(self, batch: dict) -> torch.Tensor:
        """The relevance mask ``(B, N)`` of the items of ``batch``."""
        return relevance_mask(visual_attention(self.model, batch), self.heads, self.percentile)

    def apply(self, batch: dict, keep=None) -> VisualTokenKnockout:
        """The knockout context for ``batch`` (its mask computed now unless ``keep`` is given)."""
        return VisualTokenKnockout(self.model, self.layer, self.mask(batch) if keep is None else keep)
