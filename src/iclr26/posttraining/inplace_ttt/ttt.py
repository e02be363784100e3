"""In-Place Test-Time Training: the gated MLP's down-projection as chunk-wise fast weights.

Paper: G. Feng, S. Luo, K. Hua, G. Zhang, D. He, W. Huang, T. Cai, "In-Place Test-Time Training",
ICLR 2026 (arXiv 2604.06169). Official code: https://github.com/ByteDance-Seed/In-Place-TTT
(``hf_models/hf_qwen3/modeling_qwen3.py``, class ``Qwen3MLP``).

A gated MLP computes ``O = Z W_down^T`` with ``Z = act(H W_gate^T) * (H W_up^T)`` (Sec. 3.1).
In-Place TTT keeps ``W_gate``/``W_up`` as slow weights and treats ``W_down`` as fast weights
that are updated once per chunk of ``C`` tokens, *apply then update* (Sec. 3.2):

    O_[i]     = Z_[i] (W^(i))^T                                  (apply, chunk i)
    W^(i+1)   = W^(i) + eta * V^_[i]^T Z_[i]                      (update)

the update being one gradient-ascent step on the chunk objective ``<Z_[i] W^T, V^_[i]>_F``. The
target is next-token aligned (Sec. 3.3): ``V^ = Conv1D(X_0) W_target``, a learnable depthwise
1-D convolution over the token embeddings ``X_0`` that mixes neighbouring (and so next) tokens into
each position, followed by a learnable square projection. Removing the convolution and the
projection gives the generic reconstruction target ``V^ = X_0`` (the paper's ablation).

Because ``W^(i) = W^(0) + eta * sum_{j<i} V^_[j]^T Z_[j]``, the whole sequence is processed in
parallel with an exclusive prefix sum over the per-chunk updates (the parallel form, Sec. 3.2);
the chunk's own update only reaches later chunks, so the layer stays causal at chunk granularity.
Fast weights restart from ``W^(0)`` for every sequence (the paper resets them at document
boundaries; here one sequence = one document).
"""
from __future__ import annotations

import math
from typing import Iterable, Sequence

import torch
import torch.nn.functional as F
from torch import nn

__all__ = [
    "chunk_updates", "inplace_ttt_forward", "make_target_modules", "ntp_target", "InPlaceTTTMLP", "apply_inplace_ttt",
    "TARGETS", "TARGET_SOURCES",
]

#: target kinds: the paper's next-token-aligned target, and the reconstruction ablation (V^ = X_0)
TARGETS = ("ntp", "reconstruction")
#: where X_0 comes from in a Hugging Face model: the MLP input (the official code's default,
#: ``ttt_target="hidden_states"``) or the token embeddings (the paper's X_0, ``"input_embed"``)
TARGET_SOURCES = ("mlp_input", "input_embed")


def _check_chunk(chunk_size) -> int:
    if isinstance(chunk_size, bool) or not isinstance(chunk_size, int) or chunk_size < 1:
        raise ValueError(f"chunk_size must be a positive integer, got {chunk_size!r}")
    return chunk_size


def _check_eta(eta):
    if isinstance(eta, torch.Tensor):
        if eta.numel() != 1:
            raise ValueError(f"eta must be a scalar, got a tensor of shape {tuple(eta.shape)}")
        if not torch.isfinite(eta).all():
            raise ValueError("eta must be finite")
        return eta
    if isinstance(eta, bool) or not isinstance(eta, (int, float)) or not math.isfinite(eta):
        raise ValueError(f"eta must be a finite real number (0 disables the fast-weight update), got {eta!r}")
    return float(eta)


def _pad_to_chunks(x: torch.Tensor, chunk_size: int) -> torch.Tensor:
    """``(B, T, D)`` -> ``(B, n_chunks, C, D)``, zero-padding the tail (zeros add nothing to an update)."""
    B, T, D = x.shape
    n = -(-T // chunk_size)
    if n * chunk_size != T:
        x = torch.cat([x, x.new_zeros(B, n * chunk_size - T, D)], dim=1)
    return x.view(B, n, chunk_size, D)


def chunk_updates(z: torch.Tensor, v_hat: torch.Tensor, eta, chunk_size: int) -> torch.Tensor:
    """Per-chunk fast-weight updates ``Delta W_i = eta * V^_[i]^T Z_[i]`` (Sec. 3.2, update rule).

    ``z``: ``(B, T, d_ff)`` MLP hidden activations; ``v_hat``: ``(B, T, d_model)`` targets.
    Returns ``(B, n_chunks, d_model, d_ff)`` (the last chunk zero-padded when ``T % C != 0``).
    """
    chunk_size = _check_chunk(chunk_size)
    eta = _check_eta(eta)
    if z.dim() != 3 or v_hat.dim() != 3:
        raise ValueError(f"z and v_hat must be (batch, seq, features), got {tuple(z.shape)} and {tuple(v_hat.shape)}")
    if z.shape[:2] != v_hat.shape[:2]:
        raise ValueError(f"z and v_hat must share (batch, seq), got {tuple(z.shape[:2])} and {tuple(v_hat.shape[:2])}")
    zc = _pad_to_chunks(z, chunk_size)
    vc = _pad_to_chunks(v_hat.to(z.dtype), chunk_size)
    return torch.einsum("bncd,bnch->bndh", vc, zc) * eta


def inplace_ttt_forward(z: torch.Tensor, v_hat: torch.Tensor, w0: torch.Tensor, eta, chunk_size: int) -> torch.Tensor:
    """Chunk-wise apply-then-update of the down-projection, all chunks in parallel (Sec. 3.2).

    ``O_[i] = Z_[i] W0^T + Z_[i] (sum_{j<i} Delta W_j)^T`` with ``Delta W_j`` from
    :func:`chunk_updates`. ``w0``: ``(d_model, d_ff)`` (the ``nn.Linear`` weight layout).
    The base term is ``F.linear(z, w0)``, so with ``eta = 0`` the output equals the plain
    down-projection bit for bit. Returns ``(B, T, d_model)``.
    """
    if w0.dim() != 2 or w0.shape[1] != z.shape[-1] or w0.shape[0] != v_hat.shape[-1]:
        raise ValueError(f"w0 must be (d_model={v_hat.shape[-1]}, d_ff={z.shape[-1]}), got {tuple(w0.shape)}")
    B, T, _ = z.shape
    dW = chunk_updates(z, v_hat, eta, chunk_size)               # (B, n, d, h)
    # exclusive prefix sum: chunk i sees the updates of chunks 0..i-1 only
    prefix = torch.cat([torch.zeros_like(dW[:, :1]), dW[:, :-1]], dim=1).cumsum(dim=1)
    zc = _pad_to_chunks(z, chunk_size)
    delta = torch.einsum("bndh,bnch->bncd", prefix, zc).reshape(B, -1, w0.shape[0])[:, :T]
    return F.linear(z, w0) + delta


def make_target_modules(d_model: int, kernel_size: int = 5, target_proj: bool = True, init_std: float = 0.02,
                        init: str = "official"):
    """The modules of the next-token-aligned target ``V^ = Conv1D(X_0) W_target`` (Sec. 3.3).

    A depthwise ``Conv1d`` of width ``kernel_size`` (official code: 5, centred, ``padding=2``, no
    bias) and an optional square projection. ``init="official"`` follows the official code's
    continued-pretraining init: convolution zero, projection diagonal ``N(0, init_std^2)`` (so a
    freshly wrapped model starts with ``V^ = 0`` and computes exactly the original MLP).
    ``init="identity"``: centre tap 1 and identity projection (``V^ = X_0`` at the start).
    Returns ``(conv, proj_or_None)``.
    """
    if isinstance(d_model, bool) or not isinstance(d_model, int) or d_model < 1:
        raise ValueError(f"d_model must be a positive integer, got {d_model!r}")
    if isinstance(kernel_size, bool) or not isinstance(kernel_size, int) or kernel_size < 1 or kernel_size % 2 == 0:
        raise ValueError(f"kernel_size must be a positive odd integer (a centred window), got {kernel_size!r}")
    if init not in ("official", "identity"):
        raise ValueError(f"init must be 'official' or 'identity', got {init!r}")
    conv = nn.Conv1d(d_model, d_model, kernel_size, padding=kernel_size // 2, groups=d_model, bias=False)
    proj = nn.Linear(d_model, d_model, bias=False) if target_proj else None
    with torch.no_grad():
        conv.weight.zero_()
        if init == "identity":
            conv.weight[:, 0, kernel_size // 2] = 1.0
        if proj is not None:
            diag = torch.randn(d_model) * init_std if init == "official" else torch.ones(d_model)
            proj.weight.copy_(torch.diag(diag))
    return conv, proj


def ntp_target(x0: torch.Tensor, conv: nn.Conv1d, proj: nn.Linear | None, chunk_size: int) -> torch.Tensor:
    """``V^ = Conv1D(X_0) W_target`` with the convolution applied inside each chunk (zero padding at
    the chunk edges, as the official code reshapes the sequence into chunks before convolving), so
    no token of chunk ``i+1`` leaks into the update of chunk ``i``. ``x0``: ``(B, T, d_model)``."""
    B, T, D = x0.shape
    xc = _pad_to_chunks(x0, _check_chunk(chunk_size))
    n, C = xc.shape[1], xc.shape[2]
    y = conv(xc.reshape(B * n, C, D).transpose(1, 2)).transpose(1, 2).reshape(B, n * C, D)[:, :T]
    return proj(y) if proj is not None else y


class InPlaceTTTMLP(nn.Module):
    """Drop-in replacement of a gated MLP (``LlamaMLP``, ``Qwen2MLP``, ``Qwen3MLP``...) whose
    ``down_proj`` becomes chunk-wise fast weights (Secs. 3.1-3.3).

    The wrapped MLP's ``gate_proj``, ``up_proj``, ``down_proj`` and ``act_fn`` are reused (same
    parameter objects, same state_dict keys), and the target modules are added as ``ttt_conv`` /
    ``ttt_proj`` (the official code's names). ``forward(x, target=None)``: ``target`` is ``X_0``
    (``(B, T, d_model)``); without it, the target is the registered token embeddings when
    :func:`apply_inplace_ttt` was called with ``target_source="input_embed"``, else the MLP input
    (the official default). Each call is one document: fast weights start from ``W_down``.

    Defaults: ``chunk_size=512`` (the paper's ablation finds 512-1024 best; the official Qwen3
    recipe uses 4096 at 64k context); ``eta=0.3`` (official ``ttt_lr`` default;
    the Qwen3 recipe uses 3); ``kernel_size=5`` (official ``ttt_conv``).
    """

    def __init__(self, mlp: nn.Module, chunk_size: int = 512, eta: float = 0.3, kernel_size: int = 5,
                 target: str = "ntp", target_proj: bool = True, init_std: float = 0.02, init: str = "official"):
        super().__init__()
        missing = [a for a in ("gate_proj", "up_proj", "down_proj", "act_fn") if not hasattr(mlp, a)]
        if missing:
            raise TypeError(f"InPlaceTTTMLP wraps a gated MLP with gate_proj, up_proj, down_proj and act_fn "
                            f"(LlamaMLP / Qwen2MLP style); {type(mlp).__name__} lacks {missing}")
        if not isinstance(mlp.down_proj, nn.Linear) or mlp.down_proj.bias is not None:
            raise TypeError("down_proj must be a bias-free nn.Linear (the fast weights are its weight matrix)")
        if target not in TARGETS:
            raise ValueError(f"target must be one of {TARGETS}, got {target!r}")
        self.chunk_size = _check_chunk(chunk_size)
        self.eta = _check_eta(eta)
        self.target = target
        self.gate_proj, self.up_proj, self.down_proj, self.act_fn = mlp.gate_proj, mlp.up_proj, mlp.down_proj, mlp.act_fn
        d_model = mlp.down_proj.out_features
        if target == "ntp":
            conv, proj = make_target_modules(d_model, kernel_size, target_proj, init_std, init)
            dev, dt = mlp.down_proj.weight.device, mlp.down_proj.weight.dtype
            self.ttt_conv = conv.to(device=dev, dtype=dt)
            self.ttt_proj = proj.to(device=dev, dtype=dt) if proj is not None else None
        else:
            self.ttt_conv = self.ttt_proj = None
        self._embed_store: dict | None = None

    def hidden(self, x: torch.Tensor) -> torch.Tensor:
        """``Z = act(x W_gate^T) * (x W_up^T)``."""
        return self.act_fn(self.gate_proj(x)) * self.up_proj(x)

    def target_states(self, x0: torch.Tensor) -> torch.Tensor:
        """``V^`` from ``X_0``: ``Conv1D(X_0) W_target`` (``"ntp"``) or ``X_0`` (``"reconstruction"``)."""
        if self.target == "reconstruction":
            return x0
        return ntp_target(x0, self.ttt_conv, self.ttt_proj, self.chunk_size)

    def forward(self, x: torch.Tensor, target: torch.Tensor | None = None) -> torch.Tensor:
        if x.dim() != 3:
            raise ValueError(f"x must be (batch, seq, d_model), got shape {tuple(x.shape)}")
        if target is None:
            store = self._embed_store
            target = store.get("x0") if store is not None else None
            if target is None or target.shape[:2] != x.shape[:2]:
                target = x
        if target.shape != x.shape:
            raise ValueError(f"target must have the input's shape {tuple(x.shape)}, got {tuple(target.shape)}")
        z = self.hidden(x)
        v_hat = self.target_states(target.to(x.dtype))
        return inplace_ttt_forward(z, v_hat, self.down_proj.weight, self.eta, self.chunk_size)

    def extra_repr(self) -> str:
        return f"chunk_size={self.chunk_size}, eta={self.eta}, target={self.target!r}"


def _decoder_layers(model: nn.Module):
    for path in ("model.layers", "layers", "transformer.h"):
        obj = model
        for part in path.split("."):
            obj = getattr(obj, part, None)
            if obj is None:
                break
        if isinstance(obj, nn.ModuleList):
            return obj
    raise TypeError(f"cannot find the decoder layers of {type(model).__name__} (looked for model.layers / layers)")


def apply_inplace_ttt(model: nn.Module, layers: str | Iterable[int] = "all", target_source: str = "mlp_input",
                      **kwargs) -> list[int]:
    """Replace the MLP of the chosen decoder layers of a Llama/Qwen-style model, in place.

    ``layers``: ``"all"``, or layer indices (the official recipes use every 6th layer from 0,
    e.g. ``range(0, n_layers, 6)``). ``target_source``: ``"mlp_input"`` (official default) or
    ``"input_embed"`` (the paper's ``X_0``: a forward hook on the input embeddings stores them for
    the wrapped MLPs). ``kwargs`` go to :class:`InPlaceTTTMLP`. Returns the wrapped indices.

    Decoding with a KV cache feeds one new token per call, so the fast weights (which are a function
    of the whole prefix) would restart from ``W^(0)`` at every step and silently drop the updates of
    the earlier chunks. The model's ``use_cache`` defaults are therefore switched off, and a forward
    call that receives a non-empty cache raises a ``ValueError``; ``generate`` recomputes the prefix
    at every step (exact, quadratic in the length).
    """
    if target_source not in TARGET_SOURCES:
        raise ValueError(f"target_source must be one of {TARGET_SOURCES}, got {target_source!r}")
    blocks = _decoder_layers(model)
    n = len(blocks)
    if isinstance(layers, str):
        if layers != "all":
            raise ValueError(f"layers must be 'all' or an iterable of layer indices, got {layers!r}")
        idx = list(range(n))
    else:
        idx = sorted(set(int(i) for i in layers))
        bad = [i for i in idx if not 0 <= i < n]
        if bad or not idx:
            raise ValueError(f"layer indices must be in [0, {n}) and non-empty, got {list(layers)!r}")
    store = None
    if target_source == "input_embed":
        store = {}
        emb = model.get_input_embeddings()

        def _keep(_module, _inputs, output):
            store["x0"] = output

        emb.register_forward_hook(_keep)
    for i in idx:
        mlp = blocks[i].mlp
        if isinstance(mlp, InPlaceTTTMLP):
            raise ValueError(f"layer {i} is already an InPlaceTTTMLP")
        wrapped = InPlaceTTTMLP(mlp, **kwargs)
        wrapped._embed_store = store
        blocks[i].mlp = wrapped
    _forbid_cache_reuse(model)
    return idx


def _cache_length(past) -> int:
    if past is None:
        return 0
    if hasattr(past, "get_seq_length"):
        return int(past.get_seq_length())
    try:                                                   # legacy tuple of (key, value) per layer
        return int(past[0][0].shape[-2]) if len(past) else 0
    except (TypeError, IndexError, AttributeError):
        return 1                                           # an unknown non-empty cache object


def _forbid_cache_reuse(model: nn.Module) -> None:
    """Turn the model's KV-cache defaults off and refuse a forward call with a filled cache."""
    for cfg in (getattr(model, "config", None), getattr(model, "generation_config", None)):
        if cfg is not None and hasattr(cfg, "use_cache"):
            cfg.use_cache = False
    if getattr(model, "_inplace_ttt_cache_guard", False):
        return

    def _guard(_module, args, kwargs):
        # the cache argument is ``cache`` in transformers >= 5, ``past_key_values`` before
        if max(_cache_length(kwargs.get("cache")), _cache_length(kwargs.get("past_key_values"))) > 0:
            raise ValueError("In-Place TTT fast weights depend on the whole prefix, so a KV cache cannot be "
                             "reused: call generate(..., use_cache=False) (the default after apply_inplace_ttt)")

    model.register_forward_pre_hook(_guard, with_kwargs=True)
    model._inplace_ttt_cache_guard = True
