"""SWAX: a hybrid of sliding-window softmax attention and xLSTM (mLSTM) layers, trained with
stochastic window sizes.

Paper: "Short window attention enables long-term memorization" (SWAX; arXiv 2509.24552, ICLR 2026).
No official code is public.

- :class:`SlidingWindowRoPE`: a positional scheme for :class:`iclr26.common.tiny_attention.
  SoftmaxAttention` that rotates ``q``, ``k`` with RoPE and masks every key more than
  ``window - 1`` positions behind the query (sliding-window attention, paper Sec. 2).
- :func:`mlstm_parallel` / :class:`MLSTMLayer`: the mLSTM of xLSTM (Beck et al. 2024, Eqs. 19-27):
  ``C_t = f_t C_{t-1} + i_t v_t k_t^T``, ``n_t = f_t n_{t-1} + i_t k_t``,
  ``h~_t = C_t q_t / max(|n_t^T q_t|, 1)``, ``h_t = o_t * h~_t``, with an exponential input gate
  ``i_t = exp(i~_t)`` and a sigmoid forget gate, computed in the stabilised parallel form of the
  xLSTM paper's appendix. The ``xlstm`` package is not installed in this environment, so the cell
  is written here in plain torch (runs on any device).
- :class:`SWAXForCausalLM`: a 1:1 alternation of SWA and mLSTM blocks (paper Sec. 3), each block
  pre-norm with a SwiGLU MLP; the window is a runtime argument.
- :class:`StochasticWindowSchedule` and :func:`stochastic_window_step`: stochastic window training
  (paper Sec. 4): each training batch uses the short window with probability ``p_short`` and the
  long one otherwise; the last ``anneal_frac`` of training uses the long window only; evaluation
  uses the long window.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from iclr26.common.tiny_attention import RMSNorm, RoPE, SoftmaxAttention, SwiGLU


class SlidingWindowRoPE(nn.Module):
    """RoPE plus a sliding-window bias: query ``t`` sees keys ``s`` with ``t - window < s <= t``
    (the causal part is applied by :class:`SoftmaxAttention`). ``window=None``: full causal."""

    def __init__(self, head_dim: int, window: int | None = None, base: float = 10000.0):
        super().__init__()
        self.rope = RoPE(head_dim, base)
        self.window = window

    def forward(self, q, k, x=None):
        q, k, _ = self.rope(q, k)
        if self.window is None:
            return q, k, None
        Tq, Tk = q.shape[-2], k.shape[-2]
        i = torch.arange(Tk - Tq, Tk, device=q.device)[:, None]
        j = torch.arange(Tk, device=q.device)[None, :]
        bias = torch.zeros(Tq, Tk, dtype=torch.float32, device=q.device)
        return q, k, bias.masked_fill(i - j >= self.window, float("-inf"))


def mlstm_parallel(q, k, v, i_pre, f_pre):
    """Stabilised parallel mLSTM (xLSTM, Appendix "parallel formulation").

    ``q, k``: ``(B, H, T, Dk)``, ``v``: ``(B, H, T, Dv)``, ``i_pre``, ``f_pre``: ``(B, H, T)`` gate
    pre-activations. ``log D_ts = sum_{r=s+1..t} log sigmoid(f~_r) + i~_s`` for ``s <= t``;
    ``m_t = max_s log D_ts``; ``C~ = (q k^T / sqrt(Dk)) * exp(log D - m)``;
    ``h = C~ v / max(|sum_s C~_ts|, exp(-m_t))``. Equal to the recurrence with
    ``k_t / sqrt(Dk)`` and the normaliser ``max(|n_t^T q_t|, 1)``. Computed in at least float32.
    """
    out_dtype = v.dtype
    dt = torch.promote_types(q.dtype, torch.float32)
    q, k, v, i_pre, f_pre = (t.to(dt) for t in (q, k, v, i_pre, f_pre))
    T = q.shape[-2]
    logf = F.logsigmoid(f_pre)
    cum = torch.cumsum(logf, dim=-1)
    logD = cum[..., :, None] - cum[..., None, :] + i_pre[..., None, :]
    causal = torch.ones(T, T, dtype=torch.bool, device=q.device).tril()
    logD = logD.masked_fill(~causal, float("-inf"))
    m = logD.amax(dim=-1, keepdim=True)
    C = (q @ k.transpose(-1, -2)) / math.sqrt(q.shape[-1]) * torch.exp(logD - m)
    n = torch.maximum(C.sum(-1, keepdim=True).abs(), torch.exp(-m))
    return ((C / n) @ v).to(out_dtype)


class MLSTMLayer(nn.Module):
    """mLSTM token mixer: projections to ``q, k, v``, scalar input / forget gates per head, the
    parallel cell, a per-head RMSNorm, the output gate ``sigmoid(W_o x)`` and an output projection.

    Gate initialisation from xLSTM's code: forget-gate biases spaced linearly in ``[3, 6]`` over the
    heads (long memory at the start of training); input-gate bias ``0`` (xLSTM draws it from
    N(0, 0.1)).
    """

    def __init__(self, d_model: int, n_heads: int):
        super().__init__()
        if d_model % n_heads:
            raise ValueError(f"d_model ({d_model}) must be divisible by n_heads ({n_heads})")
        self.n_heads, self.head_dim = n_heads, d_model // n_heads
        self.qkv = nn.Linear(d_model, 3 * d_model, bias=False)
        self.igate = nn.Linear(d_model, n_heads)
        self.fgate = nn.Linear(d_model, n_heads)
        self.ogate = nn.Linear(d_model, d_model, bias=False)
        self.norm = RMSNorm(self.head_dim)
        self.out = nn.Linear(d_model, d_model, bias=False)
        self.reset_gate_biases()

    def reset_gate_biases(self) -> None:
        with torch.no_grad():
            self.fgate.bias.copy_(torch.linspace(3.0, 6.0, self.n_heads))
            self.igate.bias.zero_()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, d = x.shape
        q, k, v = self.qkv(x).view(B, T, 3, self.n_heads, self.head_dim).permute(2, 0, 3, 1, 4)
        i_pre = self.igate(x).transpose(1, 2)
        f_pre = self.fgate(x).transpose(1, 2)
        h = self.norm(mlstm_parallel(q, k, v, i_pre, f_pre)).transpose(1, 2).reshape(B, T, d)
        return self.out(torch.sigmoid(self.ogate(x)) * h)


@dataclass
class SWAXConfig:
    """Configuration of :class:`SWAXForCausalLM`.

    ``n_layers`` counts mixer blocks; SWA and mLSTM alternate 1:1 starting with SWA (paper Sec. 3).
    ``window`` is the default attention window (the paper's long window, 2048 at 1.4B/7B scale).
    """

    vocab_size: int
    d_model: int = 64
    n_layers: int = 4
    n_heads: int = 4
    mlp_hidden: int = 128
    window: int = 2048

    def __post_init__(self):
        for name in ("vocab_size", "d_model", "n_layers", "n_heads", "mlp_hidden", "window"):
            v = getattr(self, name)
            if not isinstance(v, int) or v < 1:
                raise ValueError(f"{name} must be a positive integer, got {v!r}")
        if self.d_model % self.n_heads:
            raise ValueError(f"d_model ({self.d_model}) must be divisible by n_heads ({self.n_heads})")
        if (self.d_model // self.n_heads) % 2:
            raise ValueError(f"head_dim = d_model / n_heads must be even for RoPE, got {self.d_model // self.n_heads}")


class SWAXForCausalLM(nn.Module):
    """Embedding, ``n_layers`` pre-norm blocks (SWA / mLSTM alternating, each followed by a SwiGLU
    MLP), final RMSNorm and a linear head. ``forward(tokens, window=None)``: ``window`` overrides
    the current sliding window for this call only."""

    def __init__(self, config: SWAXConfig):
        super().__init__()
        self.config = c = config
        self.embed = nn.Embedding(c.vocab_size, c.d_model)
        self.layers = nn.ModuleList()
        for i in range(c.n_layers):
            if i % 2 == 0:
                mixer = SoftmaxAttention(c.d_model, c.n_heads, SlidingWindowRoPE(c.d_model // c.n_heads))
            else:
                mixer = MLSTMLayer(c.d_model, c.n_heads)
            self.layers.append(nn.ModuleDict(dict(norm1=RMSNorm(c.d_model), mixer=mixer,
                                                  norm2=RMSNorm(c.d_model), mlp=SwiGLU(c.d_model, c.mlp_hidden))))
        self.norm = RMSNorm(c.d_model)
        self.head = nn.Linear(c.d_model, c.vocab_size, bias=False)
        for m in self.modules():
            if isinstance(m, (nn.Linear, nn.Embedding)):
                nn.init.normal_(m.weight, std=0.02)
            if isinstance(m, MLSTMLayer):
                m.reset_gate_biases()
        self.window = c.window  # sets the window of every attention block

    @property
    def window(self) -> int:
        return self._window

    @window.setter
    def window(self, w: int) -> None:
        if not isinstance(w, (int, np.integer)) or w < 1:
            raise ValueError(f"window must be a positive integer, got {w!r}")
        self._window = int(w)
        for layer in self.layers:
            if isinstance(layer["mixer"], SoftmaxAttention):
                layer["mixer"].positional.window = int(w)

    def forward(self, tokens: torch.Tensor, window: int | None = None) -> torch.Tensor:
        if window is not None:
            keep = self.window
            self.window = window
            try:
                return self.forward(tokens)
            finally:
                self.window = keep
        h = self.embed(tokens)
        for layer in self.layers:
            h = h + layer["mixer"](layer["norm1"](h))
            h = h + layer["mlp"](layer["norm2"](h))
        return self.head(self.norm(h))


class StochasticWindowSchedule:
    """Window of each training step (paper Sec. 4): ``short`` with probability ``p_short``, else
    ``long``; from step ``ceil((1 - anneal_frac) * total_steps) + 1`` on, always ``long``.

    Paper defaults: windows (128, 2048), ``p_short = 0.5`` at 1.4B (0.75 at 7B), the last 10 % of
    training annealed to 2048. ``rng`` draws the coin flips (a seeded ``numpy`` Generator).
    """

    def __init__(self, short: int, long: int, total_steps: int, p_short: float = 0.5, anneal_frac: float = 0.1,
                 rng: np.random.Generator | None = None):
        if not (isinstance(short, int) and isinstance(long, int)) or not 1 <= short < long:
            raise ValueError(f"need integer windows 1 <= short < long, got short={short!r}, long={long!r}")
        if not 0.0 <= p_short <= 1.0:
            raise ValueError(f"p_short must be in [0, 1], got {p_short}")
        if not 0.0 <= anneal_frac <= 1.0:
            raise ValueError(f"anneal_frac must be in [0, 1], got {anneal_frac}")
        if total_steps < 1:
            raise ValueError(f"total_steps must be >= 1, got {total_steps}")
        self.short, self.long, self.p_short, self.anneal_frac = short, long, p_short, anneal_frac
        self.total_steps = total_steps
        self.anneal_start = math.ceil((1.0 - anneal_frac) * total_steps)
        self.rng = rng if rng is not None else np.random.default_rng(0)

    def __call__(self, step: int) -> int:
        """Window for training step ``step`` (1-based, as in :func:`iclr26.common.training.train`)."""
        if step > self.anneal_start:
            return self.long
        return self.short if self.rng.random() < self.p_short else self.long


def stochastic_window_step(schedule, loss_fn, clip_grad: float | None = 1.0):
    """A ``step_fn`` for :func:`iclr26.common.training.train`: sets the model's window from
    ``schedule(step)`` for the step, then zero_grad / backward / clip / ``optimizer.step``.
    ``schedule`` may be a :class:`StochasticWindowSchedule` or any ``step -> window`` callable
    (a constant window is plain fixed-window training). The model's window is restored after."""
    state = {"step": 0}

    def step_fn(model, optimizer, batch):
        state["step"] += 1
        keep = model.window
        model.window = schedule(state["step"])
        try:
            optimizer.zero_grad(set_to_none=True)
            loss = loss_fn(model, batch)
            loss.backward()
            if clip_grad is not None:
                nn.utils.clip_grad_norm_(model.parameters(), clip_grad)
            optimizer.step()
        finally:
            model.window = keep
        return loss

    return step_fn
