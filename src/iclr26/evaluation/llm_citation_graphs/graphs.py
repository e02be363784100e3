"""Per-focal-paper citation graphs, their structural and embedding features, and the field-matched
random baseline, after "Structurally Human, Semantically Biased: Detecting LLM-Generated References
with Embeddings and GNNs" (Mobini, Holst, Tori, Algaba, Ginis; ICLR 2026; arXiv 2601.20704).
No official code is public (searched: the authors' earlier repositories AndresAlgaba/LLM_citation_patterns
and AndresAlgaba/LLMs_scientific_literature hold the reference-generation pipelines of the preceding
papers, not this one's graph classifiers).

The paper builds, for every focal paper, a graph of the focal paper, the papers in its reference list
and the citation edges among them (arXiv 2601.20704, abstract); the same focal paper gets a
ground-truth graph, an LLM-generated one and a field-matched random one that keeps the reference
count (out-degree of the focal node) and the field of every reference. Structure-only node features
(degree, closeness and eigenvector centrality, clustering) and the edge count are aggregated to one
vector per graph for a random forest; title/abstract embeddings of the references are averaged for
the same forest; GNNs take either as node features.

Everything here is plain networkx / numpy / scikit-learn:

- :func:`citation_graph` builds one focal graph from a reference list and a corpus citation graph;
- :func:`structural_node_features` and :func:`structural_graph_features` compute the features;
- :func:`embedding_graph_features` averages node embeddings;
- :func:`field_matched_random_references` draws the random baseline's reference list;
- :class:`CitationGraphFeaturizer` is a scikit-learn transformer from a list of graphs to the feature
  matrix, so ``make_pipeline(CitationGraphFeaturizer(), RandomForestClassifier())`` is the paper's RF.
"""
from __future__ import annotations

from collections.abc import Hashable, Iterable, Mapping, Sequence

import networkx as nx
import numpy as np
from sklearn.base import BaseEstimator, TransformerMixin

#: the node-level structural features of the paper's abstract, in this order
NODE_FEATURES = ("degree", "closeness", "eigenvector", "clustering")
#: graph-level aggregations of each node feature (our reading; the abstract says "graph-level
#: aggregates" without listing them)
AGGREGATIONS = ("mean", "std", "max", "min")
_AGG = {"mean": np.mean, "std": np.std, "max": np.max, "min": np.min, "median": np.median}


def _check_graph(G, name="G"):
    if not isinstance(G, nx.Graph):
        raise TypeError(f"{name} must be a networkx graph, got {type(G).__name__}")
    if G.number_of_nodes() == 0:
        raise ValueError(f"{name} has no nodes")


def citation_graph(focal: Hashable, references: Iterable[Hashable], corpus: nx.Graph,
                   focal_edges: bool = True) -> nx.DiGraph:
    """The focal paper's citation graph: the focal node, its references, every corpus citation edge
    among the references and (``focal_edges``) the edges focal -> reference.

    ``corpus`` is the citation graph the references live in (``u -> v``: u cites v; an undirected
    graph is read as edges in both directions). References missing from the corpus are kept as
    isolated nodes (an LLM reference that matched no known paper has no edges). Duplicates are dropped
    in order; the focal paper among its own references is an error.
    """
    if not isinstance(corpus, nx.Graph):
        raise TypeError(f"corpus must be a networkx graph, got {type(corpus).__name__}")
    refs = list(dict.fromkeys(references))
    if focal in refs:
        raise ValueError(f"references contain the focal paper {focal!r}")
    G = nx.DiGraph()
    G.add_node(focal, focal=True)
    G.add_nodes_from(refs, focal=False)
    if focal_edges:
        G.add_edges_from((focal, r) for r in refs)
    present = [r for r in refs if r in corpus]
    sub = corpus.subgraph(present)
    if sub.is_directed():
        G.add_edges_from(sub.edges())
    else:
        G.add_edges_from(sub.edges())
        G.add_edges_from((v, u) for u, v in sub.edges())
    return G


def _eigenvector(U: nx.Graph) -> dict:
    """Eigenvector centrality of the undirected graph, per connected component scaled as networkx
    does for a connected graph (unit Euclidean norm over the whole graph, non-negative).
    Isolated nodes get 0. Computed with numpy's symmetric eigensolver (exact, no iteration cap)."""
    nodes = list(U)
    if U.number_of_edges() == 0:
        return dict.fromkeys(nodes, 0.0)
    A = nx.to_numpy_array(U, nodelist=nodes, weight=None)
    w, V = np.linalg.eigh(A)
    v = np.abs(V[:, -1])
    v = v / np.linalg.norm(v)
    return dict(zip(nodes, v.tolist()))


def structural_node_features(G: nx.Graph, features: Sequence[str] = NODE_FEATURES) -> np.ndarray:
    """Node-level structure features, one row per node in ``G``'s node order.

    Computed on the undirected view of the graph (citation edges among a reference list are nearly
    acyclic, where directed eigenvector centrality is zero everywhere): degree centrality
    ``deg(v) / (n - 1)``, closeness centrality (networkx's Wasserman-Faust form for disconnected
    graphs), eigenvector centrality (principal eigenvector of the adjacency, unit norm) and the local
    clustering coefficient.
    """
    _check_graph(G)
    unknown = [f for f in features if f not in NODE_FEATURES]
    if unknown or not features:
        raise ValueError(f"features must be a non-empty subset of {NODE_FEATURES}, got {list(features)}")
    U = G.to_undirected(as_view=False) if G.is_directed() else G
    nodes = list(G)
    cols = []
    for f in features:
        if f == "degree":
            d = nx.degree_centrality(U) if len(nodes) > 1 else {nodes[0]: 0.0}
        elif f == "closeness":
            d = nx.closeness_centrality(U)
        elif f == "eigenvector":
            d = _eigenvector(U)
        else:
            d = nx.clustering(U)
        cols.append([float(d[v]) for v in nodes])
    return np.asarray(cols, dtype=np.float64).T


def structural_graph_features(G: nx.Graph, aggregations: Sequence[str] = AGGREGATIONS,
                              features: Sequence[str] = NODE_FEATURES, include_focal: bool = False) -> np.ndarray:
    """One vector per graph: each node feature aggregated over the reference nodes (``aggregations``
    in order, feature-major), then the number of undirected edges among all nodes.

    ``include_focal=False`` leaves the focal node (node attribute ``focal=True``) out of the
    aggregation: it is adjacent to every reference by construction. Layout of the result:
    ``[f1_agg1, f1_agg2, ..., fK_aggA, n_edges]``.
    """
    bad = [a for a in aggregations if a not in _AGG]
    if bad or not aggregations:
        raise ValueError(f"aggregations must be a non-empty subset of {sorted(_AGG)}, got {list(aggregations)}")
    X = structural_node_features(G, features)
    keep = [i for i, v in enumerate(G) if include_focal or not G.nodes[v].get("focal", False)]
    sub = X[keep] if keep else np.zeros((1, X.shape[1]))
    agg = [_AGG[a](sub[:, j]) for j in range(X.shape[1]) for a in aggregations]
    U = G.to_undirected(as_view=True) if G.is_directed() else G
    return np.asarray(agg + [float(U.number_of_edges())], dtype=np.float64)


def structural_feature_names(aggregations: Sequence[str] = AGGREGATIONS,
                             features: Sequence[str] = NODE_FEATURES) -> list[str]:
    """Column names of :func:`structural_graph_features`."""
    return [f"{f}_{a}" for f in features for a in aggregations] + ["n_edges"]


def embedding_graph_features(G: nx.Graph, embeddings: Mapping | np.ndarray, include_focal: bool = False) -> np.ndarray:
    """Mean embedding of the graph's reference nodes (the paper's aggregated title/abstract embeddings).

    ``embeddings``: a mapping node -> vector, or an array indexed by integer node ids. Nodes without
    an embedding are an error (name them): an LLM reference with no text cannot be embedded silently.
    """
    _check_graph(G)
    nodes = [v for v in G if include_focal or not G.nodes[v].get("focal", False)]
    if not nodes:
        raise ValueError("G has no reference nodes to average (only the focal node)")
    if isinstance(embeddings, np.ndarray):
        if embeddings.ndim != 2:
            raise ValueError(f"embeddings array must be 2-D (nodes x dims), got shape {embeddings.shape}")
        try:
            idx = np.asarray(nodes, dtype=np.int64)
        except (TypeError, ValueError):
            raise TypeError("embeddings is an array, so the graph's nodes must be integer ids") from None
        if idx.min() < 0 or idx.max() >= len(embeddings):
            raise ValueError(f"embeddings has {len(embeddings)} rows; node ids run {idx.min()}..{idx.max()}")
        E = embeddings[idx].astype(np.float64)
    else:
        missing = [v for v in nodes if v not in embeddings]
        if missing:
            raise KeyError(f"no embedding for node(s) {missing[:5]}")
        E = np.asarray([np.asarray(embeddings[v], dtype=np.float64) for v in nodes])
        if E.ndim != 2:
            raise ValueError("every embedding must be a 1-D vector of one length")
    if not np.all(np.isfinite(E)):
        raise ValueError("embeddings contain NaN or infinite values")
    return E.mean(axis=0)


def field_matched_random_references(references: Sequence[Hashable], field_of: Mapping,
                                    rng: np.random.Generator, exclude: Iterable[Hashable] = (),
                                    pool: Mapping | None = None) -> list:
    """The paper's random baseline for one focal paper: every reference replaced by a paper drawn
    uniformly from the same field, without replacement within the list; the list length (the focal
    node's out-degree) and its field counts are kept.

    ``field_of``: node -> field for the corpus (the candidates are its keys). ``exclude``: papers that
    may not be drawn (the focal paper and, usually, its true references). ``pool``: optional
    precomputed field -> array of candidates (as :func:`field_pools` returns).
    """
    if not isinstance(rng, np.random.Generator):
        raise TypeError("rng must be a numpy Generator (np.random.default_rng(seed))")
    refs = list(references)
    missing = [r for r in refs if r not in field_of]
    if missing:
        raise KeyError(f"no field for reference(s) {missing[:5]}")
    pool = field_pools(field_of) if pool is None else pool
    banned = set(exclude)
    out = []
    need: dict = {}
    for r in refs:
        need[field_of[r]] = need.get(field_of[r], 0) + 1
    drawn: dict = {}
    for f, k in need.items():
        cand = [c for c in pool[f] if c not in banned]
        if len(cand) < k:
            raise ValueError(f"field {f!r} has {len(cand)} candidates outside `exclude`, {k} needed")
        pick = rng.choice(len(cand), size=k, replace=False)
        drawn[f] = [cand[i] for i in pick]
    for r in refs:
        c = drawn[field_of[r]].pop()
        out.append(c)
    return out


def field_pools(field_of: Mapping) -> dict:
    """field -> list of the corpus papers in it (sorted for determinism where the ids sort)."""
    pools: dict = {}
    for v, f in field_of.items():
        pools.setdefault(f, []).append(v)
    for f in pools:
        try:
            pools[f].sort()
        except TypeError:
            pass
    return pools


class CitationGraphFeaturizer(TransformerMixin, BaseEstimator):
    """scikit-learn transformer: a list of citation graphs -> one feature row per graph.

    ``kind="structure"``: :func:`structural_graph_features` (``aggregations``); ``kind="embedding"``:
    :func:`embedding_graph_features` with ``embeddings``; ``kind="both"``: the two concatenated.
    Stateless (``fit`` only records the output width), so it clones and pipelines like any transformer.
    """

    def __init__(self, kind: str = "structure", embeddings=None, aggregations: Sequence[str] = AGGREGATIONS,
                 include_focal: bool = False):
        self.kind = kind
        self.embeddings = embeddings
        self.aggregations = aggregations
        self.include_focal = include_focal

    def _validate(self, graphs):
        if self.kind not in ("structure", "embedding", "both"):
            raise ValueError(f"kind must be 'structure', 'embedding' or 'both', got {self.kind!r}")
        if self.kind != "structure" and self.embeddings is None:
            raise ValueError(f"kind={self.kind!r} needs embeddings")
        if isinstance(graphs, nx.Graph) or not hasattr(graphs, "__len__"):
            raise TypeError("graphs must be a list of networkx graphs (one per focal paper)")
        if len(graphs) == 0:
            raise ValueError("graphs is empty")
        for i, G in enumerate(graphs):
            _check_graph(G, f"graphs[{i}]")

    def _row(self, G):
        parts = []
        if self.kind in ("structure", "both"):
            parts.append(structural_graph_features(G, self.aggregations, include_focal=self.include_focal))
        if self.kind in ("embedding", "both"):
            parts.append(embedding_graph_features(G, self.embeddings, include_focal=self.include_focal))
        return np.concatenate(parts)

    def fit(self, graphs, y=None):
        self._validate(graphs)
        self.n_features_out_ = len(self._row(graphs[0]))
        return self

    def transform(self, graphs):
        self._validate(graphs)
        X = np.stack([self._row(G) for G in graphs])
        if hasattr(self, "n_features_out_") and X.shape[1] != self.n_features_out_:
            raise ValueError(f"graphs give {X.shape[1]} features, fitted on {self.n_features_out_}")
        return X
