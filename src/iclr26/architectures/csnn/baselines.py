"""The baselines CSNN is compared with, in the same ``(x, edge_index)`` interface.

- :class:`GCNConv`: Kipf & Welling (2017), Eq. 2: ``H' = D~^{-1/2} (A + I) D~^{-1/2} H W``.
- :class:`GATConv`: Velickovic et al. (2018), Eqs. 1-5: ``alpha_ij = softmax_j(LeakyReLU_0.2(
  a^T [W h_i || W h_j]))`` over ``j in N(i) + {i}``, heads concatenated.
- ``GNN("mlp", ...)``: a multi-layer perceptron on the node features alone (no edges), the
  reference every heterophilic benchmark reports.
- :class:`NSDConv`: neural sheaf diffusion (Bodnar et al. 2022, Eq. 11 with orthogonal maps):
  an *undirected* sheaf whose restriction map of node ``v`` into edge ``{v, u}`` is
  ``F_{v<e} = O(tanh(W [x_v || x_u]))``, Laplacian ``(L x)_v = sum_u F_{v<e}^T (F_{v<e} x_v -
  F_{u<e} x_u)``, normalised ``(D + I)^{-1/2} L (D + I)^{-1/2}``, update
  ``X <- (1 + tanh eps) X - act(Lhat (I (x) W_left) X W_right)``.

:class:`GNN` wraps any of them (and CSNN) into the same encoder / layers / decoder node classifier.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .layers import CSNN, check_edge_index, check_features, check_rate, orthogonal_from_params


def _with_self_loops(edge_index: torch.Tensor, num_nodes: int) -> torch.Tensor:
    loops = torch.arange(num_nodes, device=edge_index.device)
    keep = edge_index[0] != edge_index[1]
    return torch.cat([edge_index[:, keep], torch.stack([loops, loops])], dim=1)


class GCNConv(nn.Module):
    """Graph convolution ``D~^{-1/2} (A + I) D~^{-1/2} X W + b`` (Kipf & Welling 2017, Eq. 2)."""

    def __init__(self, in_channels: int, out_channels: int):
        super().__init__()
        self.lin = nn.Linear(in_channels, out_channels, bias=False)
        self.bias = nn.Parameter(torch.zeros(out_channels))

    def forward(self, x, edge_index):
        N = x.shape[0]
        ei = _with_self_loops(check_edge_index(edge_index, N), N)
        src, dst = ei
        deg = x.new_zeros(N).index_add_(0, dst, x.new_ones(dst.shape[0]))
        w = deg[src].rsqrt() * deg[dst].rsqrt()
        h = self.lin(x)
        out = h.new_zeros(N, h.shape[1]).index_add_(0, dst, w[:, None] * h[src])
        return out + self.bias


class GATConv(nn.Module):
    """Graph attention with ``heads`` heads of ``out_channels`` each, concatenated (Velickovic et
    al. 2018, Eq. 5); self-loops added; LeakyReLU slope 0.2 (the paper's value)."""

    def __init__(self, in_channels: int, out_channels: int, heads: int = 4, dropout: float = 0.0):
        super().__init__()
        self.heads, self.out_channels, self.dropout = heads, out_channels, dropout
        self.lin = nn.Linear(in_channels, heads * out_channels, bias=False)
        self.att_src = nn.Parameter(torch.empty(heads, out_channels))
        self.att_dst = nn.Parameter(torch.empty(heads, out_channels))
        nn.init.xavier_uniform_(self.att_src)
        nn.init.xavier_uniform_(self.att_dst)
        self.bias = nn.Parameter(torch.zeros(heads * out_channels))

    def forward(self, x, edge_index):
        N = x.shape[0]
        src, dst = _with_self_loops(check_edge_index(edge_index, N), N)
        h = self.lin(x).view(N, self.heads, self.out_channels)
        e = F.leaky_relu((h * self.att_src).sum(-1)[src] + (h * self.att_dst).sum(-1)[dst], 0.2)  # (E, H)
        e_max = e.new_full((N, self.heads), float("-inf")).scatter_reduce(
            0, dst[:, None].expand_as(e), e, reduce="amax", include_self=True)
        w = torch.exp(e - e_max[dst])
        denom = w.new_zeros(N, self.heads).index_add_(0, dst, w)
        alpha = F.dropout(w / denom[dst], p=self.dropout, training=self.training)
        out = h.new_zeros(N, self.heads, self.out_channels).index_add_(0, dst, alpha[..., None] * h[src])
        return out.reshape(N, -1) + self.bias


class NSDConv(nn.Module):
    """Undirected neural sheaf diffusion layer with edge-wise orthogonal maps (module docstring)."""

    def __init__(self, channels: int, d: int = 3, dropout: float = 0.0, act: bool = True, map_hidden: int = 0):
        super().__init__()
        if not isinstance(map_hidden, int) or map_hidden < 0:
            raise ValueError(f"map_hidden must be a non-negative integer (0: a linear map learner), got {map_hidden!r}")
        for name, v in dict(channels=channels, d=d).items():
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"{name} must be a positive integer, got {v!r}")
        dropout = check_rate("dropout", dropout)
        self.channels, self.d, self.dropout, self.act = channels, d, dropout, act
        k = d * (d - 1) // 2
        # one linear layer (NSD's paper) or the same MLP map learner CSNN's official code uses
        self.map_lin = (nn.Linear(2 * d * channels, k) if map_hidden == 0 else
                        nn.Sequential(nn.Linear(2 * d * channels, map_hidden), nn.ReLU(), nn.Linear(map_hidden, k)))
        self.left = nn.Parameter(torch.eye(d))
        self.right = nn.Linear(channels, channels, bias=False)
        nn.init.orthogonal_(self.right.weight)
        self.eps = nn.Parameter(torch.zeros(d, 1))

    def restriction_maps(self, x, edge_index):
        """``F_{v<e}`` for each directed pair ``(v, u)`` listed as ``edge_index[:, e] = (u, v)``:
        the map of the receiving node ``v`` and of the sending node ``u`` into their edge."""
        src, dst = edge_index
        F_dst = orthogonal_from_params(torch.tanh(self.map_lin(torch.cat([x[dst], x[src]], -1))), self.d)
        F_src = orthogonal_from_params(torch.tanh(self.map_lin(torch.cat([x[src], x[dst]], -1))), self.d)
        return F_dst, F_src

    def forward(self, x, edge_index):
        N = x.shape[0]
        edge_index = check_edge_index(edge_index, N)
        src, dst = edge_index
        F_dst, F_src = self.restriction_maps(x, edge_index)
        xs = x.view(N, self.d, self.channels)
        z = self.right(self.left @ xs)
        deg = x.new_zeros(N).index_add_(0, dst, x.new_ones(dst.shape[0]))  # orthogonal: F^T F = I
        scale = (deg + 1.0).rsqrt()[:, None, None]
        y = z * scale
        msg = F_dst.transpose(-1, -2) @ (F_src @ y[src])
        Lz = (deg[:, None, None] * y - y.new_zeros(y.shape).index_add_(0, dst, msg)) * scale
        if self.act:
            Lz = F.gelu(Lz)
        Lz = F.dropout(Lz, p=self.dropout, training=self.training)
        return ((1.0 + torch.tanh(self.eps)) * xs - Lz).reshape(N, -1)


class GNN(nn.Module):
    """Node classifier: linear encoder, ``layers`` message-passing layers, linear decoder.

    ``kind``: ``"gcn"`` (ReLU between layers), ``"gat"`` (ELU, ``heads`` heads of ``hidden // heads``),
    ``"nsd"`` (stalk dimension ``d``, ``hidden`` channels per stalk dimension), ``"csnn"`` or
    ``"mlp"`` (``layers`` linear + ReLU layers that ignore ``edge_index``). ``map_hidden``: the
    sheaf models' map learner (0: linear; > 0: an MLP with that many hidden units).
    """

    KINDS = ("gcn", "gat", "nsd", "csnn", "mlp")

    def __init__(self, kind: str, in_channels: int, out_channels: int, hidden: int = 16, layers: int = 2,
                 dropout: float = 0.5, d: int = 3, heads: int = 4, map_hidden: int = 0):
        super().__init__()
        if kind not in self.KINDS:
            raise ValueError(f"kind must be one of {self.KINDS}, got {kind!r}")
        for name, v in dict(in_channels=in_channels, out_channels=out_channels, hidden=hidden, layers=layers,
                            d=d, heads=heads).items():
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"{name} must be a positive integer, got {v!r}")
        dropout = check_rate("dropout", dropout)
        self.kind, self.dropout, self.in_channels = kind, dropout, in_channels
        if kind == "csnn":
            self.net = CSNN(in_channels, out_channels, d=d, hidden=hidden, layers=layers, dropout=dropout,
                            map_hidden=map_hidden)
            return
        width = d * hidden if kind == "nsd" else hidden
        self.encoder = nn.Linear(in_channels, width)
        if kind == "gcn":
            self.convs = nn.ModuleList(GCNConv(width, width) for _ in range(layers))
        elif kind == "mlp":
            self.convs = nn.ModuleList(nn.Linear(width, width) for _ in range(layers))
        elif kind == "gat":
            if hidden % heads:
                raise ValueError(f"hidden ({hidden}) must be divisible by heads ({heads})")
            self.convs = nn.ModuleList(GATConv(width, hidden // heads, heads) for _ in range(layers))
        else:
            self.convs = nn.ModuleList(NSDConv(hidden, d, dropout, map_hidden=map_hidden) for _ in range(layers))
        self.decoder = nn.Linear(width, out_channels)

    def forward(self, x, edge_index):
        if self.kind == "csnn":
            return self.net(x, edge_index)
        check_features(x, self.in_channels)
        h = self.encoder(x)
        for conv in self.convs:
            h = conv(h) if self.kind == "mlp" else conv(h, edge_index)
            if self.kind in ("gcn", "mlp"):
                h = F.relu(h)
            elif self.kind == "gat":
                h = F.elu(h)
            if self.kind != "nsd":
                h = F.dropout(h, p=self.dropout, training=self.training)
        h = F.dropout(h, p=self.dropout, training=self.training)
        return self.decoder(h)
