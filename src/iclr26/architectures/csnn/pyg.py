"""CSNN as a ``torch_geometric.nn.MessagePassing`` layer (needs the ``graph`` extra).

Paper: "Cooperative Sheaf Neural Networks" (ICLR 2026, arXiv 2507.00647), Sec. 4. The in- and
out-degree sheaf Laplacians share their off-diagonal part: a directed edge ``j -> i`` carries the
block ``A_{ij} = T_i^T S_j``, so ``(A y)_i = sum_{j -> i} T_i^T S_j y_j``. That sum is what
:class:`CSNNMessagePassing` computes (``message`` returns ``T_i^T S_j y_j``, ``aggr="add"``, flow
source-to-target as in :mod:`.layers`). :class:`CSNNConvPyG` is :class:`~.layers.CSNNConv` with
that product done by the message-passing layer; its parameters, ``state_dict`` keys and outputs
are those of ``CSNNConv``, so weights move freely between the two.

``import iclr26.architectures.csnn`` does not import this module (torch_geometric takes seconds to
import): the package loads it on first use of one of its names. Without torch_geometric the names
exist, and constructing either class raises an ``ImportError`` naming the ``graph`` extra.
"""
from __future__ import annotations

from torch import Tensor, nn

from .layers import CSNNConv, sheaf_laplacian

try:
    from torch_geometric.nn import MessagePassing
    _PYG_IMPORT_ERROR: ImportError | None = None
except ImportError as err:  # pragma: no cover - exercised only without the graph extra
    MessagePassing = None
    _PYG_IMPORT_ERROR = err

__all__ = ["CSNNConvPyG", "CSNNMessagePassing", "sheaf_laplacian_pyg"]


def _require_pyg(what: str) -> None:
    if _PYG_IMPORT_ERROR is not None:
        raise ImportError(f"{what} needs torch_geometric, which is not installed; install the "
                          f"'graph' extra: pip install 'iclr26[graph]' ({_PYG_IMPORT_ERROR})")


if MessagePassing is not None:
    class CSNNMessagePassing(MessagePassing):
        """Off-diagonal part of the directed sheaf Laplacians: ``out_i = sum_{j -> i} T_i^T S_j y_j``.

        ``forward(y, edge_index, S, T)`` with stalks ``y`` ``(N, d, h)`` and source / target maps
        ``S``, ``T`` ``(N, d, d)``; ``edge_index[0]`` the sources ``j``, ``edge_index[1]`` the
        targets ``i``. No parameters.
        """

        def __init__(self):
            super().__init__(aggr="add", node_dim=0)

        def forward(self, y: Tensor, edge_index: Tensor, S: Tensor, T: Tensor) -> Tensor:
            return self.propagate(edge_index, y=y, S=S, T=T)

        def message(self, y_j: Tensor, S_j: Tensor, T_i: Tensor) -> Tensor:
            return T_i.transpose(-1, -2) @ (S_j @ y_j)
else:  # pragma: no cover - exercised only without the graph extra
    class CSNNMessagePassing(nn.Module):
        """Placeholder: torch_geometric is not installed (the ``graph`` extra)."""

        def __init__(self, *args, **kwargs):
            _require_pyg("CSNNMessagePassing")


def sheaf_laplacian_pyg(x: Tensor, edge_index: Tensor, S: Tensor, T: Tensor, kind: str,
                        propagator: nn.Module, normalize: bool = True) -> Tensor:
    """:func:`~.layers.sheaf_laplacian` with the off-diagonal product ``A y`` done by
    ``propagator`` (a :class:`CSNNMessagePassing`); the degree blocks and the normalisation are
    the same (Sec. 4)."""
    return sheaf_laplacian(x, edge_index, S, T, kind, normalize, adjacency=propagator)


class CSNNConvPyG(CSNNConv):
    """:class:`~.layers.CSNNConv` whose Laplacians aggregate through :class:`CSNNMessagePassing`.

    Same arguments, parameters, ``state_dict`` keys and update
    ``X <- (1 + tanh eps) X - act(Lhat_in Lhat_out (I (x) W_left) X W_right)``; the message-passing
    module has no parameters and adds no ``state_dict`` entries.
    """

    def __init__(self, channels: int, d: int = 3, dropout: float = 0.0, act: bool = True,
                 tied: bool = False, c_max: float = 10.0, map_hidden: int = 0):
        _require_pyg("CSNNConvPyG")
        super().__init__(channels, d, dropout, act, tied, c_max, map_hidden)
        self.message_passing = CSNNMessagePassing()

    def laplacian(self, z, edge_index, S, T, kind: str):
        """The same Laplacian as :meth:`CSNNConv.laplacian`, its off-diagonal part through message passing."""
        return sheaf_laplacian_pyg(z, edge_index, S, T, kind, self.message_passing)
