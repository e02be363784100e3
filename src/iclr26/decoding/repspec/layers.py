"""Structurally re-parameterised linear layers for draft-model training (RepSpec, ICLR 2026,
OpenReview bqEi97qzzz; official code: none public).

During training a linear layer y = W x + b is replaced by the multi-branch structure (paper, Sec. 3)

    Aug(x) = Post_m o ... o Post_1 o (Main + sum_l Bypass_l) o Pre_n o ... o Pre_1 (x)

Pre_i: d_in -> d_in, Post_j: d_out -> d_out, Main and Bypass_l: d_in -> d_out, all linear with
bias. It is initialised function-preserving (Pre/Post = identity with zero bias, Bypass = 0, Main =
the original layer), so the re-parameterised draft starts as the plain one. Being a composition of
affine maps it is affine, and :meth:`RepLinear.merge` folds it losslessly back into one
``nn.Linear`` for inference:

    W' = P_m ... P_1 (W + sum_l B_l) Q_n ... Q_1
    b' = P_m ... P_1 ((W + sum_l B_l) c_pre + b + sum_l b_l) + c_post

with c_pre the bias of the Pre chain (c <- Q_i c + q_i, from c = 0) and c_post likewise of the Post
chain (applied to a vector: v <- P_j v + p_j). The product is formed in float64 and cast back.
The paper's best pure-linear setting (one Pre and one Bypass on q/k/v/o and gate/up/down, not on
the embeddings) is the default of :func:`reparameterize`.
"""
from __future__ import annotations

import torch
from torch import nn

#: the layers the paper re-parameterises in its best linear setting (attention and MLP projections)
DEFAULT_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def _count(v, name):
    if isinstance(v, bool) or not isinstance(v, int) or v < 0:
        raise ValueError(f"{name} must be a non-negative integer, got {v!r}")
    return v


def _identity_linear(d: int, like: torch.Tensor, bias: bool) -> nn.Linear:
    lin = nn.Linear(d, d, bias=bias).to(dtype=like.dtype, device=like.device)
    with torch.no_grad():
        lin.weight.copy_(torch.eye(d, dtype=like.dtype, device=like.device))
        if bias:
            lin.bias.zero_()
    return lin


class RepLinear(nn.Module):
    """Training-time multi-branch form of ``nn.Linear`` (see the module docstring).

    Build from an existing layer with :meth:`from_linear` (function-preserving) or fresh with
    ``RepLinear(in_features, out_features, ...)``. ``n_pre``/``n_post``: number of Pre/Post
    maps, ``n_bypass``: number of parallel Bypass maps. Defaults n_pre=1, n_bypass=1, n_post=0:
    the paper's best pure-linear setting."""

    def __init__(self, in_features: int, out_features: int, n_pre: int = 1, n_bypass: int = 1,
                 n_post: int = 0, bias: bool = True, dtype=None, device=None):
        super().__init__()
        for k, v in (("in_features", in_features), ("out_features", out_features)):
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"{k} must be a positive integer, got {v!r}")
        _count(n_pre, "n_pre"), _count(n_bypass, "n_bypass"), _count(n_post, "n_post")
        self.in_features, self.out_features = in_features, out_features
        self.main = nn.Linear(in_features, out_features, bias=bias, dtype=dtype, device=device)
        w = self.main.weight
        self.pre = nn.ModuleList(_identity_linear(in_features, w, bias) for _ in range(n_pre))
        self.bypass = nn.ModuleList(nn.Linear(in_features, out_features, bias=bias, dtype=w.dtype, device=w.device)
                                    for _ in range(n_bypass))
        for b in self.bypass:
            nn.init.zeros_(b.weight)
            if bias:
                nn.init.zeros_(b.bias)
        self.post = nn.ModuleList(_identity_linear(out_features, w, bias) for _ in range(n_post))

    @classmethod
    def from_linear(cls, linear: nn.Linear, **kw) -> "RepLinear":
        """A RepLinear whose Main is a copy of ``linear``: the same function at initialisation."""
        if not isinstance(linear, nn.Linear):
            raise TypeError(f"from_linear needs an nn.Linear, got {type(linear).__name__}")
        rep = cls(linear.in_features, linear.out_features, bias=linear.bias is not None,
                  dtype=linear.weight.dtype, device=linear.weight.device, **kw)
        rep.main.load_state_dict(linear.state_dict())
        return rep

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for p in self.pre:
            x = p(x)
        y = self.main(x)
        for b in self.bypass:
            y = y + b(x)
        for p in self.post:
            y = p(y)
        return y

    @torch.no_grad()
    def merged_parameters(self) -> tuple[torch.Tensor, torch.Tensor]:
        """``(W', b')`` of the equivalent single layer, computed in float64."""
        f64 = dict(dtype=torch.float64)
        W = self.main.weight.to(**f64).clone()
        b = (self.main.bias.to(**f64).clone() if self.main.bias is not None
             else torch.zeros(self.out_features, **f64, device=W.device))
        for m in self.bypass:
            W += m.weight.to(**f64)
            if m.bias is not None:
                b += m.bias.to(**f64)
        Q = torch.eye(self.in_features, **f64, device=W.device)
        c = torch.zeros(self.in_features, **f64, device=W.device)
        for p in self.pre:                                   # x -> Q x + c, chained
            Q = p.weight.to(**f64) @ Q
            c = p.weight.to(**f64) @ c + (p.bias.to(**f64) if p.bias is not None else 0.0)
        W, b = W @ Q, W @ c + b
        for p in self.post:
            W = p.weight.to(**f64) @ W
            b = p.weight.to(**f64) @ b + (p.bias.to(**f64) if p.bias is not None else 0.0)
        return W, b

    def merge(self) -> nn.Linear:
        """One ``nn.Linear`` computing the same function, with a bias exactly when Main has one."""
        W, b = self.merged_parameters()
        w = self.main.weight
        has_bias = self.main.bias is not None
        lin = nn.Linear(self.in_features, self.out_features, bias=has_bias, dtype=w.dtype, device=w.device)
        with torch.no_grad():
            lin.weight.copy_(W.to(w.dtype))
            if has_bias:
                lin.bias.copy_(b.to(w.dtype))
        return lin

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, out_features={self.out_features}, n_pre={len(self.pre)}, "
                f"n_bypass={len(self.bypass)}, n_post={len(self.post)}")


def _matches(name: str, targets) -> bool:
    return name.rsplit(".", 1)[-1] in targets


def reparameterize(model: nn.Module, targets=DEFAULT_TARGETS, *, n_pre: int = 1, n_bypass: int = 1,
                   n_post: int = 0) -> list[str]:
    """Replace (in place) every ``nn.Linear`` of ``model`` whose attribute name is in ``targets``
    by a function-preserving :class:`RepLinear`; returns the replaced module names. Raises if none
    matches (a typo would otherwise silently train the plain draft)."""
    if isinstance(targets, str):
        targets = (targets,)
    targets = tuple(targets)
    names = [n for n, m in model.named_modules() if isinstance(m, nn.Linear) and _matches(n, targets)]
    if not names:
        raise ValueError(f"no nn.Linear named one of {targets} in {type(model).__name__}")
    for n in names:
        parent_name, _, attr = n.rpartition(".")
        parent = model.get_submodule(parent_name) if parent_name else model
        setattr(parent, attr, RepLinear.from_linear(getattr(parent, attr), n_pre=n_pre, n_bypass=n_bypass, n_post=n_post))
    return names


def merge_all(model: nn.Module) -> list[str]:
    """Fold (in place) every :class:`RepLinear` of ``model`` back into an ``nn.Linear``; returns the
    merged module names. The merged model computes the same function with the plain layer count."""
    names = [n for n, m in model.named_modules() if isinstance(m, RepLinear)]
    for n in names:
        parent_name, _, attr = n.rpartition(".")
        parent = model.get_submodule(parent_name) if parent_name else model
        setattr(parent, attr, getattr(parent, attr).merge())
    return names
