"""Uniform fake post-training quantisation of a DiT's linear layers (weights and activations).

Source: "Q&C: When Quantization Meets Cache in Efficient Image Generation" (Ding, Li, Qin, Chen;
ICLR 2026, arXiv:2503.02508), Section 2 (preliminaries: uniform PTQ of weights and activations,
W8A8 / W4A8, calibrated on activations collected over the diffusion steps). Official code was
announced at https://github.com/xinding-sys/Quant-Cache and is not public.

The quantiser is the standard asymmetric uniform one (the paper's preliminaries, the form of
Q-Diffusion / PTQ4DiT):

    x_int = clamp(round(x / s) + z, 0, 2^b - 1),    x_hat = s (x_int - z),

with scale ``s = (x_max - x_min) / (2^b - 1)`` and zero point ``z = round(-x_min / s)`` for a range
``[x_min, x_max]`` that always holds 0. Weights: one range per output channel (min-max of the
row); activations: one range per tensor, set from calibration activations either by min-max or
by the clipping ratio with the lowest squared error (``"mse"``, the usual PTQ search). Everything
is "fake" quantisation (quantise-dequantise in float32): the numbers are those of an integer
kernel, the CPU time is not.
"""
from __future__ import annotations

import copy
import math
from contextlib import contextmanager

import torch
from torch import nn

ACT_METHODS = ("minmax", "mse")
MSE_GRID = tuple(1.0 - 0.05 * i for i in range(16))     # clipping ratios 1.0 .. 0.25 of the range


def _check_bits(bits, name):
    if bits is None:
        return None
    if isinstance(bits, bool) or not isinstance(bits, int) or not 2 <= bits <= 16:
        raise ValueError(f"{name} must be an integer in 2..16 or None (no quantisation), got {bits!r}")
    return bits


def quant_params(x_min, x_max, bits: int):
    """Scale and zero point of the asymmetric uniform quantiser for ``[x_min, x_max]``.

    The range is widened to hold 0 (so that zero padding and ReLU zeros are exact); a degenerate
    range (``x_max == x_min == 0``) gets scale 1. Tensors broadcast (per-channel ranges).
    """
    bits = _check_bits(bits, "bits")
    if bits is None:
        raise ValueError("bits must be an integer in 2..16 for quant_params")
    x_min = torch.as_tensor(x_min, dtype=torch.float32)
    x_max = torch.as_tensor(x_max, dtype=torch.float32)
    if not (torch.isfinite(x_min).all() and torch.isfinite(x_max).all()):
        raise ValueError("x_min and x_max must be finite (got NaN or inf)")
    if bool((x_min > x_max).any()):
        raise ValueError("inverted range: x_min must be <= x_max")
    x_min = torch.clamp(x_min, max=0.0)
    x_max = torch.clamp(x_max, min=0.0)
    levels = 2**bits - 1
    scale = (x_max - x_min) / levels
    scale = torch.where(scale > 0, scale, torch.ones_like(scale))
    zero = torch.round(-x_min / scale)
    return scale, zero


def fake_quantize(x: torch.Tensor, scale, zero_point, bits: int) -> torch.Tensor:
    """``s (clamp(round(x / s) + z, 0, 2^b - 1) - z)``: quantise then dequantise."""
    bits = _check_bits(bits, "bits")
    if bits is None:
        raise ValueError("bits must be an integer in 2..16 for fake_quantize")
    q = torch.clamp(torch.round(x / scale) + zero_point, 0, 2**bits - 1)
    return (q - zero_point) * scale


def mse_range(x: torch.Tensor, bits: int, grid=MSE_GRID):
    """The per-tensor range ``ratio * [min, max]`` whose fake quantisation of ``x`` has the lowest
    squared error, over the clipping ratios in ``grid`` (ties: the widest range)."""
    lo, hi = float(x.min()), float(x.max())
    best, best_err = (lo, hi), math.inf
    for r in grid:
        s, z = quant_params(r * lo, r * hi, bits)
        err = float(((fake_quantize(x, s, z, bits) - x) ** 2).sum())
        if err < best_err:
            best, best_err = (r * lo, r * hi), err
    return best


class _Observed(nn.Module):
    """Shared state of a quantised layer: activation observation and the activation quantiser."""

    def _init_act(self, a_bits, act_method):
        if act_method not in ACT_METHODS:
            raise ValueError(f"act_method must be one of {ACT_METHODS}, got {act_method!r}")
        self.a_bits = _check_bits(a_bits, "a_bits")
        self.act_method = act_method
        self.observing = False
        self._seen: list[torch.Tensor] = []
        self.register_buffer("a_scale", torch.ones(()))
        self.register_buffer("a_zero", torch.zeros(()))
        self.register_buffer("calibrated", torch.tensor(False))

    def _act(self, x):
        if self.a_bits is None:
            return x
        if self.observing:
            self._seen.append(x.detach().reshape(-1).clone())
            return x
        if not bool(self.calibrated):
            raise RuntimeError("activation quantiser is not calibrated: run calibrate(model, inputs) first")
        return fake_quantize(x, self.a_scale, self.a_zero, self.a_bits)

    def finish_calibration(self):
        """Set the activation range from everything observed (min-max or MSE search)."""
        if self.a_bits is None:
            self._seen = []
            return
        if not self._seen:
            raise RuntimeError("no activations were observed during calibration")
        x = torch.cat(self._seen)
        self._seen = []
        if self.act_method == "minmax":
            lo, hi = float(x.min()), float(x.max())
        else:
            lo, hi = mse_range(x, self.a_bits)
        s, z = quant_params(lo, hi, self.a_bits)
        self.a_scale.copy_(s)
        self.a_zero.copy_(z)
        self.calibrated.fill_(True)


class QuantLinear(_Observed):
    """A ``nn.Linear`` with per-output-channel weight and per-tensor input fake quantisation.

    ``w_bits=None`` / ``a_bits=None`` leave weights / activations in float32 (then the layer is
    exactly the wrapped ``nn.Linear``).
    """

    def __init__(self, linear: nn.Linear, w_bits: int | None = 8, a_bits: int | None = 8,
                 act_method: str = "mse"):
        super().__init__()
        if not isinstance(linear, nn.Linear):
            raise TypeError(f"QuantLinear wraps an nn.Linear, got {type(linear).__name__}")
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.w_bits = _check_bits(w_bits, "w_bits")
        self._init_act(a_bits, act_method)
        w = linear.weight.detach().clone()
        if self.w_bits is not None:
            s, z = quant_params(w.min(1, keepdim=True).values, w.max(1, keepdim=True).values, self.w_bits)
            w = fake_quantize(w, s, z, self.w_bits)
        self.weight = nn.Parameter(w, requires_grad=False)
        self.bias = None if linear.bias is None else nn.Parameter(linear.bias.detach().clone(), requires_grad=False)

    def forward(self, x):
        return nn.functional.linear(self._act(x), self.weight, self.bias)


class QuantAttention(nn.Module):
    """``nn.MultiheadAttention`` (self-attention, ``batch_first``) with its input and output
    projections as :class:`QuantLinear`; the softmax attention itself stays in float32.

    Called like the wrapped module, ``attn(u, u, u, need_weights=False)``, and returns
    ``(out, None)``. Without quantisation it equals the wrapped module.
    """

    def __init__(self, mha: nn.MultiheadAttention, w_bits=8, a_bits=8, act_method="mse"):
        super().__init__()
        if not isinstance(mha, nn.MultiheadAttention) or not mha.batch_first or mha.in_proj_weight is None:
            raise TypeError("QuantAttention wraps a batch_first nn.MultiheadAttention with a packed in_proj")
        self.num_heads, self.embed_dim = mha.num_heads, mha.embed_dim
        inp = nn.Linear(self.embed_dim, 3 * self.embed_dim, bias=mha.in_proj_bias is not None)
        inp.weight.data.copy_(mha.in_proj_weight.detach())
        if mha.in_proj_bias is not None:
            inp.bias.data.copy_(mha.in_proj_bias.detach())
        out = nn.Linear(self.embed_dim, self.embed_dim, bias=mha.out_proj.bias is not None)
        out.load_state_dict(mha.out_proj.state_dict())
        self.in_proj = QuantLinear(inp, w_bits, a_bits, act_method)
        self.out_proj = QuantLinear(out, w_bits, a_bits, act_method)

    def forward(self, query, key=None, value=None, need_weights=False, **kw):
        if key is not None and key is not query or value is not None and value is not query:
            raise ValueError("QuantAttention supports self-attention only (query is key is value)")
        B, n, w = query.shape
        h = self.num_heads
        q, k, v = self.in_proj(query).reshape(B, n, 3, h, w // h).permute(2, 0, 3, 1, 4)
        att = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(w // h), -1)
        o = (att @ v).transpose(1, 2).reshape(B, n, w)
        return self.out_proj(o), None


def quantize_model(model: nn.Module, w_bits: int | None = 8, a_bits: int | None = 8,
                   act_method: str = "mse", skip: tuple[str, ...] = ()) -> nn.Module:
    """A copy of ``model`` with every ``nn.Linear`` and ``nn.MultiheadAttention`` replaced by its
    fake-quantised version (W``w_bits`` A``a_bits``); names containing any string in ``skip``
    stay in float32. Activation ranges must then be set with :func:`calibrate`.
    """
    _check_bits(w_bits, "w_bits")
    _check_bits(a_bits, "a_bits")
    if act_method not in ACT_METHODS:
        raise ValueError(f"act_method must be one of {ACT_METHODS}, got {act_method!r}")
    q = copy.deepcopy(model)
    for name, mod in list(q.named_modules()):
        for cname, child in list(mod.named_children()):
            full = f"{name}.{cname}" if name else cname
            if any(s in full for s in skip):
                continue
            if isinstance(child, nn.MultiheadAttention):
                setattr(mod, cname, QuantAttention(child, w_bits, a_bits, act_method))
            elif isinstance(child, nn.Linear) and not isinstance(mod, (nn.MultiheadAttention, QuantAttention)):
                setattr(mod, cname, QuantLinear(child, w_bits, a_bits, act_method))
    q.eval()
    return q


def quant_layers(model: nn.Module) -> list[QuantLinear]:
    """The :class:`QuantLinear` layers of ``model``, in module order."""
    return [m for m in model.modules() if isinstance(m, QuantLinear)]


@contextmanager
def observing(model: nn.Module):
    """Inside the block, quantised layers record their inputs and pass them through unquantised."""
    layers = quant_layers(model)
    if not layers:
        raise ValueError("model has no QuantLinear layers: call quantize_model first")
    for m in layers:
        m.observing, m._seen = True, []
    try:
        yield layers
    finally:
        for m in layers:
            m.observing = False


@torch.no_grad()
def calibrate(model: nn.Module, x: torch.Tensor, t: torch.Tensor, y: torch.Tensor, batch_size: int = 256):
    """Set every activation range of a quantised DiT from the calibration inputs ``(x, t, y)``.

    The layers see the full-precision activations of their inputs (weights already quantised);
    each range is then chosen by the layer's ``act_method``. Returns ``model``.
    """
    if not (len(x) == len(t) == len(y)) or len(x) == 0:
        raise ValueError(f"x, t and y must be non-empty and of equal length, got {len(x)}, {len(t)}, {len(y)}")
    for name, v in (("x", x), ("t", t)):
        if not bool(torch.isfinite(torch.as_tensor(v, dtype=torch.float32)).all()):
            raise ValueError(f"{name} must be finite (got NaN or inf in the calibration inputs)")
    with observing(model) as layers:
        for i in range(0, len(x), batch_size):
            model(x[i:i + batch_size], t[i:i + batch_size], y[i:i + batch_size])
    for m in layers:
        m.finish_calibration()
    return model
