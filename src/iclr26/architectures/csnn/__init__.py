"""Cooperative Sheaf Neural Networks (arXiv 2507.00647): directed sheaves with in- and out-degree
sheaf Laplacians, as a message-passing layer with the ``(x, edge_index)`` interface."""
from .baselines import GATConv, GCNConv, GNN, NSDConv
from .datasets import load_heterophilous, ring_transfer
from .layers import CSNN, CSNNConv, ConformalMapLearner, in_degree_laplacian, out_degree_laplacian, sheaf_laplacian

__all__ = ["CSNN", "CSNNConv", "ConformalMapLearner", "GATConv", "GCNConv", "GNN", "NSDConv",
           "in_degree_laplacian", "load_heterophilous", "out_degree_laplacian", "ring_transfer",
           "sheaf_laplacian"]

_PYG_NAMES = ("CSNNConvPyG", "CSNNMessagePassing")  # the torch_geometric layers: ``from .pyg import ...``


def __getattr__(name):
    # loaded on first use: torch_geometric takes seconds to import and belongs to the ``graph`` extra
    if name in _PYG_NAMES:
        from . import pyg
        return getattr(pyg, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
