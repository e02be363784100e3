"""Data for the CSNN experiments: the heterophilous benchmark graphs and a long-range transfer task.

The graphs are the files of yandex-research/heterophilous-graphs (Platonov et al. ICLR 2023, MIT
licence). The six the experiment reads (texas, cornell, wisconsin, chameleon, squirrel, actor) ship
with the package (``iclr26/data/files/heterophilous-graphs/``, with the licence and a ``SOURCE.md``);
any of :data:`DATASETS` is also read from a directory the caller names (``root=``) holding the
upstream ``<name>.npz`` files.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from iclr26.data.packaged import packaged_dir

DATASETS = ("texas", "cornell", "wisconsin", "chameleon", "chameleon_directed", "chameleon_filtered",
            "chameleon_filtered_directed", "squirrel", "squirrel_directed", "squirrel_filtered",
            "squirrel_filtered_directed", "actor", "minesweeper", "tolokers", "texas_4_classes")
#: the graphs shipped with the package (the ones the experiment reads)
DEFAULT_ROOT = packaged_dir("heterophilous-graphs")
SHIPPED = ("texas", "cornell", "wisconsin", "chameleon", "squirrel", "actor")


def load_heterophilous(name: str, root: str | Path | None = None, undirected: bool = True) -> dict:
    """Load one graph: ``x`` (float32), ``y``, ``edge_index`` ``(2, E)`` and the standard 10
    ``train_masks`` / ``val_masks`` / ``test_masks`` ``(10, N)`` (bool).

    ``undirected=True`` adds every reverse edge and drops duplicates and self-loops (the graphs are
    used undirected unless a ``_directed`` file is read with ``undirected=False``).

    ``root``: a directory holding ``<name>.npz`` (the upstream files); by default the graphs shipped
    with the package (:data:`SHIPPED`).
    """
    if name not in DATASETS:
        raise ValueError(f"unknown dataset {name!r}; available: {', '.join(DATASETS)}")
    path = Path(root if root is not None else DEFAULT_ROOT) / f"{name}.npz"
    if not path.is_file():
        where = (f"the directory passed as root= ({path.parent})" if root is not None else
                 f"the package's own data ({path.parent}), which ships {', '.join(SHIPPED)}")
        raise FileNotFoundError(
            f"{path} not found: the heterophilous graphs (yandex-research/heterophilous-graphs on GitHub, "
            f"MIT) were looked for in {where}; pass root= a directory holding the upstream {name}.npz")
    z = np.load(path)
    e = torch.as_tensor(z["edges"], dtype=torch.long).t()
    N = int(z["node_labels"].shape[0])
    if undirected:
        e = torch.cat([e, e.flip(0)], dim=1)
    e = e[:, e[0] != e[1]]
    e = torch.unique(e[0] * N + e[1])
    edge_index = torch.stack([e // N, e % N])
    return dict(x=torch.as_tensor(z["node_features"], dtype=torch.float32),
                y=torch.as_tensor(z["node_labels"], dtype=torch.long), edge_index=edge_index,
                train_masks=torch.as_tensor(z["train_masks"]).bool(), val_masks=torch.as_tensor(z["val_masks"]).bool(),
                test_masks=torch.as_tensor(z["test_masks"]).bool(), num_classes=int(z["node_labels"].max()) + 1)


def ring_transfer(n_graphs: int, distance: int, n_classes: int, rng: np.random.Generator) -> dict:
    """Long-range transfer on rings (the ring-transfer oversquashing task, used in the paper's
    synthetic experiments): each graph is a cycle of ``2 * distance`` nodes, the source node 0
    holds a one-hot class, the target node sits at ``distance`` hops on both sides; every other
    node holds zeros. Features: ``[one-hot class (source only), is_source, is_target]``.
    Labels: the source's class, read at the target. Graphs are stacked into one disconnected graph.
    """
    if distance < 1 or n_graphs < 1 or n_classes < 2:
        raise ValueError(f"need distance >= 1, n_graphs >= 1, n_classes >= 2; got {distance}, {n_graphs}, {n_classes}")
    n = 2 * distance
    labels = rng.integers(0, n_classes, size=n_graphs)
    x = torch.zeros(n_graphs, n, n_classes + 2)
    x[torch.arange(n_graphs), 0, torch.as_tensor(labels)] = 1.0
    x[:, 0, n_classes] = 1.0
    x[:, distance, n_classes + 1] = 1.0
    ring = torch.arange(n)
    one = torch.stack([torch.cat([ring, (ring + 1) % n]), torch.cat([(ring + 1) % n, ring])])
    offsets = (torch.arange(n_graphs) * n).repeat_interleave(one.shape[1])
    edge_index = one.repeat(1, n_graphs) + offsets
    targets = torch.arange(n_graphs) * n + distance
    return dict(x=x.reshape(-1, n_classes + 2), edge_index=edge_index, targets=targets,
                y=torch.as_tensor(labels, dtype=torch.long), num_classes=n_classes)
