"""A real link graph to stand in for the citation corpus: the Wikipedia "chameleon" page-page graph
shipped with the package (``iclr26/data/files/heterophilous-graphs/``; Rozemberczki et al.'s
Wikipedia networks as released by yandex-research/heterophilous-graphs, MIT; 2,277 pages, 31,371
links, a 2,325-word presence vector per page). A page's links play its reference list; the word
vectors play the title/abstract embeddings; the "field" of a page is its topic cluster (cosine k-means
on a truncated SVD of the word vectors, fixed seed), since the dataset's own labels are traffic classes.

No citation corpus, LLM-generated bibliography or paper embedding ships offline: this graph lets the
pipeline run on real link structure, nothing more.
"""
from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import networkx as nx
import numpy as np

from iclr26.data.packaged import packaged_dir

#: topic clusters standing in for fields (SciSciNet has 19 top-level fields; 5 is our choice for a
#: 2,277-page corpus: cosine k-means gives clusters of 127 to 1,110 pages, none too small to draw from)
N_FIELDS = 5
SVD_DIMS = 64


def _path(name: str, root=None) -> Path:
    p = Path(root if root is not None else packaged_dir("heterophilous-graphs")) / f"{name}.npz"
    if not p.is_file():
        raise FileNotFoundError(f"{p} not found: the Wikipedia link graphs come from yandex-research/"
                                f"heterophilous-graphs (MIT); pass root= a folder holding {name}.npz")
    return p


@lru_cache(maxsize=2)
def load_link_corpus(name: str = "chameleon", root=None, n_fields: int = N_FIELDS):
    """``(graph, embeddings, fields)``: an undirected ``nx.Graph`` on node ids ``0..N-1``, the
    float32 word-presence matrix ``(N, D)`` and an int array of topic fields ``(N,)``."""
    from sklearn.cluster import KMeans
    from sklearn.decomposition import TruncatedSVD
    from sklearn.preprocessing import normalize

    z = np.load(_path(name, root))
    X = z["node_features"].astype(np.float32)
    G = nx.Graph()
    G.add_nodes_from(range(X.shape[0]))
    e = z["edges"]
    G.add_edges_from((int(u), int(v)) for u, v in e if u != v)
    Z = normalize(TruncatedSVD(SVD_DIMS, random_state=0).fit_transform(X))   # cosine k-means
    fields = KMeans(n_fields, n_init=4, random_state=0).fit_predict(Z)
    return G, X, fields.astype(np.int64)
