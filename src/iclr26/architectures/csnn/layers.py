"""Cooperative Sheaf Neural Network (CSNN) layers.

Paper: "Cooperative Sheaf Neural Networks", Ribeiro, Tenorio, Belieni, Souza, Mesquita
(ICLR 2026, arXiv 2507.00647). No official code is linked from the paper; the public
implementation ``gegen07/bottleneck`` (``cooperative_sheaves/models/coopshv_model.py``, authorship
unverified) gives the map learner (an MLP) and the clamp of the scale.

Every node ``i`` carries a stalk ``x_i`` in ``R^{d x h}`` (``d`` the stalk dimension, ``h`` the
channels). A *cellular sheaf on a directed graph* gives each node two conformal maps, learned from
its features (paper, Sec. 4):

- a **source map** ``S_i = c^S_i O(s_i)`` used when ``i`` sends along an out-edge, and
- a **target map** ``T_i = c^T_i O(t_i)`` used when ``i`` receives along an in-edge,

with ``O(.)`` an orthogonal ``d x d`` matrix and ``c > 0`` a scalar. A directed edge ``u -> v``
carries ``A_{vu} = T_v^T S_u``; the in- and out-degree sheaf Laplacians (paper, Sec. 4) share this
off-diagonal part and differ in their degree blocks,

    L_in  = D_in  - A,   D_in[v]  = sum_{u -> v} T_v^T T_v = indeg(v)  (c^T_v)^2 I
    L_out = D_out - A,   D_out[v] = sum_{v -> w} S_v^T S_v = outdeg(v) (c^S_v)^2 I

each normalised as ``(D + I)^{-1/2} L (D + I)^{-1/2}``. A CSNN layer is (paper, CSNN layer equation)

    X <- (1 + tanh eps) * X - sigma( Lhat_in Lhat_out (I_N (x) W_left) X W_right )

``c^T_v = 0`` empties row ``v`` of both Laplacians' off-diagonal part and of ``D_in``: ``v`` ignores
every neighbour (it does not listen); ``c^S_u = 0`` empties column ``u`` of ``A`` and ``D_out[u]``:
no node hears ``u`` (it does not broadcast). With ``S = T`` (one map per node, no direction) and a
symmetric edge set both Laplacians are the undirected sheaf Laplacian of neural sheaf diffusion.

The layers take ``(x, edge_index)`` exactly as a ``torch_geometric`` ``MessagePassing`` layer does
(``edge_index[0]`` the sources, ``edge_index[1]`` the targets, flow source-to-target) and
aggregate with ``index_add_`` (a scatter-sum), so torch_geometric is not needed.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn


# --------------------------------------------------------------------------------------------
# input checks
# --------------------------------------------------------------------------------------------
def check_edge_index(edge_index: torch.Tensor, num_nodes: int) -> torch.Tensor:
    """Validate a PyG-style ``edge_index`` of shape ``(2, E)`` with integer node ids in range."""
    if not isinstance(edge_index, torch.Tensor):
        raise TypeError(f"edge_index must be a torch.Tensor of shape (2, E), got {type(edge_index).__name__}")
    if edge_index.dim() != 2 or edge_index.shape[0] != 2:
        raise ValueError(f"edge_index must have shape (2, E), got {tuple(edge_index.shape)}")
    if edge_index.dtype not in (torch.int64, torch.int32):
        raise TypeError(f"edge_index must hold integer node ids (int64 or int32), got {edge_index.dtype}")
    if edge_index.numel() and (int(edge_index.min()) < 0 or int(edge_index.max()) >= num_nodes):
        raise ValueError(f"edge_index refers to nodes outside 0..{num_nodes - 1} "
                         f"(min {int(edge_index.min())}, max {int(edge_index.max())})")
    return edge_index.long()


def check_rate(name: str, p) -> float:
    """Validate a dropout probability: a finite number in ``[0, 1)``."""
    if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0.0 <= float(p) < 1.0:
        raise ValueError(f"{name} must be a number in [0, 1), got {p!r}")
    return float(p)


def check_features(x: torch.Tensor, in_channels: int) -> None:
    """Validate node features ``x`` ``(N, in_channels)``: the width the model was built with, finite."""
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"x must be a torch.Tensor of shape (N, in_channels), got {type(x).__name__}")
    if x.dim() != 2 or x.shape[1] != in_channels:
        raise ValueError(f"x must have shape (N, in_channels) = (N, {in_channels}), got {tuple(x.shape)}: "
                         f"the model was built with in_channels={in_channels}")
    if not torch.isfinite(x).all():
        raise ValueError(f"x holds non-finite values (NaN or inf) in {int((~torch.isfinite(x)).sum())} entries")


# --------------------------------------------------------------------------------------------
# restriction maps
# --------------------------------------------------------------------------------------------
def orthogonal_from_params(params: torch.Tensor, d: int) -> torch.Tensor:
    """Orthogonal ``d x d`` matrices ``exp(A - A^T)`` from ``d (d - 1) / 2`` parameters each.

    ``params``: ``(..., d(d-1)/2)``, filling the strict upper triangle of ``A`` row by row. The
    matrix exponential of a skew-symmetric matrix is a rotation (the paper's ``O(.)``; the
    ``matrix_exp`` choice of the orthogonal parametrisations it lists). For ``d = 2`` and ``d = 3``
    the exponential is written in closed form (a planar rotation; Rodrigues' formula
    ``I + sin(t)/t K + (1 - cos t)/t^2 K^2`` with ``t^2 = ||K||_F^2 / 2``), which equals
    ``torch.linalg.matrix_exp`` and is an order of magnitude faster on the CPU for many small maps.
    """
    k = d * (d - 1) // 2
    if params.shape[-1] != k:
        raise ValueError(f"need d(d-1)/2 = {k} parameters per map for d={d}, got {params.shape[-1]}")
    rows, cols = torch.triu_indices(d, d, offset=1, device=params.device)
    A = params.new_zeros(*params.shape[:-1], d, d)
    A[..., rows, cols] = params
    K = A - A.transpose(-1, -2)
    eye = torch.eye(d, dtype=params.dtype, device=params.device)
    if d == 1:
        return eye.expand(*params.shape[:-1], 1, 1).clone()
    if d in (2, 3):
        t2 = (params * params).sum(-1)[..., None, None]
        small = t2 < 1e-8
        t2s = torch.where(small, torch.ones_like(t2), t2)
        t = t2s.sqrt()
        a = torch.where(small, 1.0 - t2 / 6.0, torch.sin(t) / t)
        b = torch.where(small, 0.5 - t2 / 24.0, (1.0 - torch.cos(t)) / t2s)
        return eye + a * K + b * (K @ K)
    return torch.linalg.matrix_exp(K)


class ConformalMapLearner(nn.Module):
    """Node-wise conformal maps ``c_i O(tanh(phi(x_i)))`` (paper, Sec. 5: the maps are functions
    of the node's own features, so that a node chooses its action independently of the edge).

    ``phi`` is one linear layer (``hidden=0``) or the official code's MLP map learner
    ``Linear(in, hidden) -> ReLU -> Linear(hidden, angles + 1)`` (``hidden > 0``; the official
    default is ``hidden=16``). The scale is ``c_i = exp(min(a_i, log c_max))``, the clamp applied
    *before* the exponential as in the official code (``exp(a.clamp_max(log 10))``): clamping after
    ``exp`` overflows in float32 once ``a`` passes ~88 and gives NaN gradients.
    Returns ``(maps (N, d, d), c (N,))``.
    """

    def __init__(self, in_features: int, d: int, c_max: float = 10.0, hidden: int = 0):
        super().__init__()
        if d < 1:
            raise ValueError(f"stalk dimension d must be >= 1, got {d}")
        if isinstance(c_max, bool) or not isinstance(c_max, (int, float)) or not (math.isfinite(c_max) and c_max > 0):
            raise ValueError(f"c_max must be a positive finite number, got {c_max!r}")
        if not isinstance(hidden, int) or hidden < 0:
            raise ValueError(f"hidden must be a non-negative integer (0: a linear map learner), got {hidden!r}")
        self.d, self.c_max, self.hidden = d, c_max, hidden
        self.log_c_max = math.log(c_max)
        self.n_angles = d * (d - 1) // 2
        if hidden == 0:
            self.lin = nn.Linear(in_features, self.n_angles + 1)
        else:
            self.lin = nn.Sequential(nn.Linear(in_features, hidden), nn.ReLU(), nn.Linear(hidden, self.n_angles + 1))

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        out = self.lin(x)
        c = torch.exp(out[:, -1].clamp(max=self.log_c_max))
        O = orthogonal_from_params(torch.tanh(out[:, : self.n_angles]), self.d)
        return c[:, None, None] * O, c


# --------------------------------------------------------------------------------------------
# the two degree Laplacians, applied (never materialised)
# --------------------------------------------------------------------------------------------
def sheaf_laplacian(x, edge_index, S, T, kind: str, normalize: bool = True, adjacency=None):
    """Apply the in- or out-degree sheaf Laplacian of a directed graph to stalks ``x`` ``(N, d, h)``.

    ``S``, ``T``: ``(N, d, d)`` source / target maps (conformal: ``M^T M = c^2 I``, as
    :class:`ConformalMapLearner` makes them). With ``A_{vu} = T_v^T S_u`` for every edge ``u -> v``:

    - ``kind="in"``: ``L_in = D_in - A``, ``D_in[v] = sum_{u -> v} T_v^T T_v``;
    - ``kind="out"``: ``L_out = D_out - A``, ``D_out[v] = sum_{v -> w} S_v^T S_v``.

    With ``normalize`` the result is ``(D + I)^{-1/2} L (D + I)^{-1/2} x``, the scalar degree
    ``D_v = tr(D[v]) / d`` (exact for conformal maps).

    ``adjacency``: an optional callable ``(y, edge_index, S, T) -> A y`` that computes the
    off-diagonal product (e.g. a PyG ``MessagePassing`` module); by default it is a scatter-add.
    """
    if kind not in ("in", "out"):
        raise ValueError(f"kind must be 'in' or 'out', got {kind!r}")
    N = x.shape[0]
    src, dst = check_edge_index(edge_index, N)
    if kind == "in":
        G, at = T.transpose(-1, -2) @ T, dst
    else:
        G, at = S.transpose(-1, -2) @ S, src
    D = x.new_zeros(N, *G.shape[1:]).index_add_(0, at, G[at])
    scale = (D.diagonal(dim1=-2, dim2=-1).mean(-1) + 1.0).rsqrt()[:, None, None] if normalize else None
    y = x * scale if normalize else x
    if adjacency is None:
        msg = T[dst].transpose(-1, -2) @ (S[src] @ y[src])
        ay = y.new_zeros(y.shape).index_add_(0, dst, msg)
    else:
        ay = adjacency(y, edge_index, S, T)
    out = D @ y - ay
    return out * scale if normalize else out


def in_degree_laplacian(x, edge_index, S, T, normalize: bool = True):
    """``Lhat_in x`` (:func:`sheaf_laplacian` with ``kind="in"``): node ``v`` listens through ``T_v``."""
    return sheaf_laplacian(x, edge_index, S, T, "in", normalize)


def out_degree_laplacian(x, edge_index, S, T, normalize: bool = True):
    """``Lhat_out x`` (:func:`sheaf_laplacian` with ``kind="out"``): degrees from the source maps."""
    return sheaf_laplacian(x, edge_index, S, T, "out", normalize)


# --------------------------------------------------------------------------------------------
# layers and model
# --------------------------------------------------------------------------------------------
class CSNNConv(nn.Module):
    """One cooperative sheaf diffusion layer, ``x: (N, d * channels) -> (N, d * channels)``.

    ``X <- (1 + tanh eps) X - act(Lhat_in Lhat_out (I (x) W_left) X W_right)`` with dropout on the
    diffusion term. Defaults: ``W_left`` initialised to the identity and ``W_right`` orthogonal,
    ``eps = 0`` (as in neural sheaf diffusion, whose update CSNN keeps), GELU activation.
    ``tied=True`` uses one map per node for both roles (``S = T``): the undirected sheaf (the
    ablation without cooperation). ``map_hidden > 0`` learns the maps with the official code's MLP
    (:class:`ConformalMapLearner`).
    """

    def __init__(self, channels: int, d: int = 3, dropout: float = 0.0, act: bool = True,
                 tied: bool = False, c_max: float = 10.0, map_hidden: int = 0):
        super().__init__()
        if channels < 1:
            raise ValueError(f"channels must be >= 1, got {channels}")
        dropout = check_rate("dropout", dropout)
        self.channels, self.d, self.dropout, self.act, self.tied = channels, d, dropout, act, tied
        self.target_maps = ConformalMapLearner(d * channels, d, c_max, map_hidden)
        self.source_maps = None if tied else ConformalMapLearner(d * channels, d, c_max, map_hidden)
        self.left = nn.Parameter(torch.eye(d))
        self.right = nn.Linear(channels, channels, bias=False)
        nn.init.orthogonal_(self.right.weight)
        self.eps = nn.Parameter(torch.zeros(d, 1))

    def maps(self, x: torch.Tensor):
        """``(S, T, c_S, c_T)`` for node features ``x`` ``(N, d * channels)``."""
        T, cT = self.target_maps(x)
        if self.tied:
            return T, T, cT, cT
        S, cS = self.source_maps(x)
        return S, T, cS, cT

    def laplacian(self, z, edge_index, S, T, kind: str):
        """The normalised in- or out-degree sheaf Laplacian applied to ``z`` (:func:`sheaf_laplacian`)."""
        return sheaf_laplacian(z, edge_index, S, T, kind)

    def forward(self, x: torch.Tensor, edge_index: torch.Tensor) -> torch.Tensor:
        N = x.shape[0]
        if x.dim() != 2 or x.shape[1] != self.d * self.channels:
            raise ValueError(f"x must have shape (N, d * channels) = (N, {self.d * self.channels}), "
                             f"got {tuple(x.shape)}")
        edge_index = check_edge_index(edge_index, N)
        S, T, _, _ = self.maps(x)
        xs = x.view(N, self.d, self.channels)
        z = self.right(self.left @ xs)
        z = self.laplacian(self.laplacian(z, edge_index, S, T, "out"), edge_index, S, T, "in")
        if self.act:
            z = F.gelu(z)
        z = F.dropout(z, p=self.dropout, training=self.training)
        out = (1.0 + torch.tanh(self.eps)) * xs - z
        return out.reshape(N, self.d * self.channels)


class CSNN(nn.Module):
    """Node classifier: linear encoder to ``d * hidden``, ``layers`` x :class:`CSNNConv`, linear
    decoder (the paper's architecture for node classification, Sec. 6).

    Defaults ``d=3, hidden=16, layers=4`` are small-graph settings in the range of the paper's
    hyper-parameter search; ``tied=True`` gives the undirected sheaf ablation; ``map_hidden=16``
    the official code's MLP map learner (0, the default here: one linear layer).
    """

    def __init__(self, in_channels: int, out_channels: int, d: int = 3, hidden: int = 16, layers: int = 4,
                 dropout: float = 0.5, input_dropout: float = 0.0, tied: bool = False, map_hidden: int = 0):
        super().__init__()
        for name, v in dict(in_channels=in_channels, out_channels=out_channels, d=d, hidden=hidden,
                            layers=layers).items():
            if not isinstance(v, int) or v < 1:
                raise ValueError(f"{name} must be a positive integer, got {v!r}")
        input_dropout, dropout = check_rate("input_dropout", input_dropout), check_rate("dropout", dropout)
        self.in_channels = in_channels
        self.d, self.hidden, self.input_dropout, self.dropout = d, hidden, input_dropout, dropout
        self.encoder = nn.Linear(in_channels, d * hidden)
        self.convs = nn.ModuleList(CSNNConv(hidden, d, dropout, tied=tied, map_hidden=map_hidden)
                                   for _ in range(layers))
        self.decoder = nn.Linear(d * hidden, out_channels)

    def forward(self, x: torch.Tensor, edge_index: torch.Tensor) -> torch.Tensor:
        check_features(x, self.in_channels)
        h = F.dropout(x, p=self.input_dropout, training=self.training)
        h = self.encoder(h)
        for conv in self.convs:
            h = conv(h, edge_index)
        h = F.dropout(h, p=self.dropout, training=self.training)
        return self.decoder(h)
