"""Graph-classification GNNs over citation graphs (torch_geometric), as in arXiv 2601.20704
("GNNs with node features": GCN / GAT / GIN / GraphSAGE layers, structure or embedding node features,
a graph-level readout, Adam, train/validation/test splits). No official code: the layer count, width,
readout and schedule below are our choices, each named where it is set.

:func:`to_pyg` turns one networkx citation graph into a ``torch_geometric.data.Data``;
:class:`GraphGNN` is the ``torch.nn.Module``; :class:`GNNGraphClassifier` is a scikit-learn style
classifier (``fit(graphs, y)``, ``predict``, ``predict_proba``, ``score``) that trains it with Adam and
keeps the epoch with the best validation accuracy.
"""
from __future__ import annotations

import networkx as nx
import numpy as np
import torch
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.model_selection import train_test_split

from .graphs import NODE_FEATURES, structural_node_features

LAYERS = ("gin", "gcn", "sage")


def node_feature_matrix(G: nx.Graph, node_features="structure") -> np.ndarray:
    """Node features for the GNN: ``"structure"`` (the four structural features plus a focal-node
    indicator), an array indexed by integer node id, or a mapping node -> vector."""
    nodes = list(G)
    focal = np.array([[1.0 if G.nodes[v].get("focal", False) else 0.0] for v in nodes])
    if isinstance(node_features, str):
        if node_features != "structure":
            raise ValueError(f"node_features must be 'structure', an array or a mapping, got {node_features!r}")
        X = structural_node_features(G, NODE_FEATURES)
    elif isinstance(node_features, np.ndarray):
        X = node_features[np.asarray(nodes, dtype=np.int64)].astype(np.float64)
    else:
        X = np.asarray([np.asarray(node_features[v], dtype=np.float64) for v in nodes])
    if not np.all(np.isfinite(X)):
        raise ValueError("node features contain NaN or infinite values")
    return np.hstack([X, focal])


def to_pyg(G: nx.Graph, node_features="structure", y: int | None = None):
    """One graph as ``torch_geometric.data.Data`` (edges in both directions: undirected message passing)."""
    from torch_geometric.data import Data

    if not isinstance(G, nx.Graph) or G.number_of_nodes() == 0:
        raise ValueError("each graph must be a non-empty networkx graph")
    index = {v: i for i, v in enumerate(G)}
    e = [(index[u], index[v]) for u, v in G.edges()]
    e = e + [(b, a) for a, b in e]
    ei = torch.tensor(sorted(set(e)), dtype=torch.long).t() if e else torch.zeros((2, 0), dtype=torch.long)
    x = torch.as_tensor(node_feature_matrix(G, node_features), dtype=torch.float32)
    d = Data(x=x, edge_index=ei)
    if y is not None:
        d.y = torch.tensor([int(y)])
    return d


class GraphGNN(torch.nn.Module):
    """``layers`` message-passing layers (GIN, GCN or GraphSAGE) of width ``hidden`` with ReLU, mean
    readout over nodes, a linear head to ``n_classes`` logits."""

    def __init__(self, in_dim: int, hidden: int = 32, n_classes: int = 2, layers: int = 2, kind: str = "gin",
                 dropout: float = 0.0):
        super().__init__()
        from torch_geometric.nn import GCNConv, GINConv, SAGEConv

        if kind not in LAYERS:
            raise ValueError(f"kind must be one of {LAYERS}, got {kind!r}")
        for name, v in (("in_dim", in_dim), ("hidden", hidden), ("n_classes", n_classes), ("layers", layers)):
            if not isinstance(v, (int, np.integer)) or v < 1:
                raise ValueError(f"{name} must be a positive integer, got {v!r}")
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"dropout must lie in [0, 1), got {dropout}")
        self.convs = torch.nn.ModuleList()
        d = in_dim
        for _ in range(layers):
            if kind == "gin":
                mlp = torch.nn.Sequential(torch.nn.Linear(d, hidden), torch.nn.ReLU(), torch.nn.Linear(hidden, hidden))
                self.convs.append(GINConv(mlp))
            elif kind == "gcn":
                self.convs.append(GCNConv(d, hidden))
            else:
                self.convs.append(SAGEConv(d, hidden))
            d = hidden
        self.dropout = dropout
        self.head = torch.nn.Linear(hidden, n_classes)

    def forward(self, x, edge_index, batch):
        from torch_geometric.nn import global_mean_pool

        for conv in self.convs:
            x = torch.relu(conv(x, edge_index))
            x = torch.nn.functional.dropout(x, self.dropout, self.training)
        return self.head(global_mean_pool(x, batch))


class GNNGraphClassifier(ClassifierMixin, BaseEstimator):
    """Train :class:`GraphGNN` on a list of networkx graphs.

    Adam (``lr``, ``weight_decay``), cross-entropy, mini-batches of ``batch_size`` graphs for
    ``epochs`` epochs; a stratified ``val_fraction`` of the training graphs is held out and the
    weights of the epoch with the best validation accuracy are kept (the paper trains on a 70 % split
    and selects on 15 %). Features are standardised with the training graphs' node statistics.
    A non-finite loss stops training with an error.
    """

    def __init__(self, node_features="structure", kind: str = "gin", hidden: int = 32, layers: int = 2,
                 lr: float = 1e-2, weight_decay: float = 0.0, epochs: int = 100, batch_size: int = 32,
                 dropout: float = 0.0, val_fraction: float = 0.15, random_state: int = 0):
        self.node_features = node_features
        self.kind = kind
        self.hidden = hidden
        self.layers = layers
        self.lr = lr
        self.weight_decay = weight_decay
        self.epochs = epochs
        self.batch_size = batch_size
        self.dropout = dropout
        self.val_fraction = val_fraction
        self.random_state = random_state

    def _check(self):
        if not (isinstance(self.lr, (int, float)) and np.isfinite(self.lr) and self.lr > 0):
            raise ValueError(f"lr must be a positive finite number, got {self.lr!r}")
        if not (isinstance(self.weight_decay, (int, float)) and self.weight_decay >= 0):
            raise ValueError(f"weight_decay must be >= 0, got {self.weight_decay!r}")
        for name in ("epochs", "batch_size"):
            v = getattr(self, name)
            if not isinstance(v, (int, np.integer)) or v < 1:
                raise ValueError(f"{name} must be a positive integer, got {v!r}")
        if not 0.0 < self.val_fraction < 1.0:
            raise ValueError(f"val_fraction must lie in (0, 1), got {self.val_fraction!r}")

    def _data(self, graphs, y=None):
        if isinstance(graphs, nx.Graph) or not hasattr(graphs, "__len__") or len(graphs) == 0:
            raise ValueError("graphs must be a non-empty list of networkx graphs")
        ds = [to_pyg(G, self.node_features, None if y is None else y[i]) for i, G in enumerate(graphs)]
        if hasattr(self, "mu_"):
            for d in ds:
                d.x = (d.x - self.mu_) / self.sd_
        return ds

    def fit(self, graphs, y):
        from torch_geometric.loader import DataLoader

        self._check()
        y = np.asarray(y)
        if len(y) != len(graphs):
            raise ValueError(f"y has {len(y)} labels for {len(graphs)} graphs")
        self.classes_, yi = np.unique(y, return_inverse=True)
        if len(self.classes_) < 2:
            raise ValueError("y needs at least two classes")
        for a in ("mu_", "sd_"):
            self.__dict__.pop(a, None)
        idx = np.arange(len(y))
        tr, va = train_test_split(idx, test_size=self.val_fraction, stratify=yi, random_state=self.random_state)
        raw = self._data(graphs, yi)
        X = torch.cat([raw[i].x for i in tr])
        self.mu_, self.sd_ = X.mean(0), X.std(0).clamp_min(1e-6)
        for d in raw:
            d.x = (d.x - self.mu_) / self.sd_
        g = torch.Generator().manual_seed(int(self.random_state))
        torch.manual_seed(int(self.random_state))
        self.model_ = GraphGNN(raw[0].x.shape[1], self.hidden, len(self.classes_), self.layers, self.kind, self.dropout)
        opt = torch.optim.Adam(self.model_.parameters(), lr=self.lr, weight_decay=self.weight_decay)
        train_loader = DataLoader([raw[i] for i in tr], batch_size=self.batch_size, shuffle=True, generator=g)
        val = [raw[i] for i in va]
        best, best_state, self.history_ = -1.0, None, []
        for epoch in range(self.epochs):
            self.model_.train()
            tot = 0.0
            for b in train_loader:
                opt.zero_grad()
                loss = torch.nn.functional.cross_entropy(self.model_(b.x, b.edge_index, b.batch), b.y)
                if not torch.isfinite(loss):
                    raise FloatingPointError(f"GNN loss is not finite at epoch {epoch} (lr {self.lr})")
                loss.backward()
                opt.step()
                tot += float(loss.detach()) * b.num_graphs
            acc = float(np.mean(self._predict_idx(val) == yi[va]))
            self.history_.append((tot / len(tr), acc))
            if acc > best:
                best, best_state = acc, {k: v.clone() for k, v in self.model_.state_dict().items()}
                self.best_epoch_ = epoch
        self.model_.load_state_dict(best_state)
        self.val_accuracy_ = best
        return self

    def _logits(self, ds):
        from torch_geometric.loader import DataLoader

        self.model_.eval()
        out = []
        with torch.no_grad():
            for b in DataLoader(ds, batch_size=256, shuffle=False):
                out.append(self.model_(b.x, b.edge_index, b.batch))
        return torch.cat(out)

    def _predict_idx(self, ds):
        return self._logits(ds).argmax(1).numpy()

    def predict_proba(self, graphs):
        self._fitted()
        return torch.softmax(self._logits(self._data(graphs)), 1).numpy()

    def _fitted(self):
        if not hasattr(self, "model_"):
            raise RuntimeError("GNNGraphClassifier is not fitted; call fit(graphs, y) first")

    def predict(self, graphs):
        self._fitted()
        return self.classes_[self.predict_proba(graphs).argmax(1)]
