"""Tests of the citation-graph pipeline of arXiv 2601.20704 (llm_citation_graphs)."""
from __future__ import annotations

import networkx as nx
import numpy as np
import pytest
from sklearn.base import clone
from sklearn.ensemble import RandomForestClassifier
from sklearn.model_selection import cross_val_score
from sklearn.pipeline import make_pipeline

from iclr26.evaluation.llm_citation_graphs import (
    CitationGraphFeaturizer, GNNGraphClassifier, citation_graph, embedding_graph_features,
    field_matched_random_references, field_pools, structural_feature_names, structural_graph_features,
    structural_node_features, to_pyg)


# --------------------------------------------------------------------------- graph construction
def test_citation_graph_holds_focal_refs_and_edges_among_refs():
    corpus = nx.DiGraph([(1, 2), (2, 3), (3, 9), (9, 4), (0, 1)])   # 9 is not a reference
    G = citation_graph(0, [1, 2, 3, 4, 2], corpus)
    assert list(G) == [0, 1, 2, 3, 4]                             # duplicates dropped, order kept
    assert G.nodes[0]["focal"] and not G.nodes[1]["focal"]
    assert set(G.edges()) == {(0, 1), (0, 2), (0, 3), (0, 4), (1, 2), (2, 3)}
    assert set(citation_graph(0, [1, 2, 3], corpus, focal_edges=False).edges()) == {(1, 2), (2, 3)}


def test_citation_graph_reads_undirected_corpus_both_ways_and_keeps_unknown_refs():
    G = citation_graph("f", ["a", "b", "ghost"], nx.Graph([("a", "b")]))
    assert G.has_edge("a", "b") and G.has_edge("b", "a")
    assert "ghost" in G and G.out_degree("ghost") == 0 and G.in_degree("ghost") == 1


def test_citation_graph_rejects_bad_input():
    with pytest.raises(ValueError, match="focal"):
        citation_graph(1, [1, 2], nx.Graph())
    with pytest.raises(TypeError, match="corpus"):
        citation_graph(1, [2], [(1, 2)])


# --------------------------------------------------------------------------- features vs independent references
def _undirected_star_plus(G):
    return G.to_undirected()


def test_structural_node_features_match_independent_references_on_karate():
    G = nx.karate_club_graph()
    X = structural_node_features(G)
    n = G.number_of_nodes()
    A = nx.to_numpy_array(G, weight=None)
    deg = A.sum(1)
    np.testing.assert_allclose(X[:, 0], deg / (n - 1))                       # degree centrality
    D = np.asarray(nx.floyd_warshall_numpy(G, weight=None))                 # all-pairs hops
    np.testing.assert_allclose(X[:, 1], (n - 1) / D.sum(1))                  # closeness, connected graph
    # eigenvector centrality: power iteration on A + I (same eigenvector), unit norm
    v = np.ones(n)
    for _ in range(2000):
        v = (A + np.eye(n)) @ v
        v /= np.linalg.norm(v)
    np.testing.assert_allclose(X[:, 2], v, atol=1e-8)
    # clustering: triangles through v over deg(v) choose 2
    tri = np.diag(A @ A @ A) / 2
    with np.errstate(invalid="ignore", divide="ignore"):
        c = np.where(deg > 1, tri / (deg * (deg - 1) / 2), 0.0)
    np.testing.assert_allclose(X[:, 3], c)
    # and networkx's own eigenvector centrality agrees
    ev = nx.eigenvector_centrality_numpy(G)
    np.testing.assert_allclose(X[:, 2], [ev[i] for i in G], atol=1e-8)


def test_closeness_on_disconnected_graph_is_wasserman_faust():
    G = nx.Graph([(0, 1), (1, 2), (3, 4)])
    X = structural_node_features(G, ["closeness"])
    # node 0 reaches 2 others at distance 1 and 2 in a graph of 5: (r/(n-1)) * r/sum = (2/4) * 2/3
    assert X[0, 0] == pytest.approx((2 / 4) * (2 / 3))
    assert X[3, 0] == pytest.approx((1 / 4) * (1 / 1))


def test_structural_features_use_undirected_view_of_citation_dag():
    D = nx.DiGraph([(0, 1), (0, 2), (0, 3), (1, 2), (2, 3)])
    np.testing.assert_allclose(structural_node_features(D), structural_node_features(D.to_undirected()))
    # directed eigenvector centrality of an acyclic graph would be degenerate; ours is positive on a clique-ish graph
    assert np.all(structural_node_features(D)[:, 2] > 0)


def test_graph_features_layout_and_focal_exclusion():
    corpus = nx.Graph([(1, 2), (2, 3), (1, 3)])     # a triangle among the references
    G = citation_graph(0, [1, 2, 3, 4], corpus)
    names = structural_feature_names()
    f = structural_graph_features(G)
    assert len(f) == len(names) == 4 * 4 + 1
    assert names[-1] == "n_edges" and f[-1] == 4 + 3            # focal edges + triangle
    X = structural_node_features(G)
    refs = X[1:]                                               # focal node is first
    np.testing.assert_allclose(f[0], refs[:, 0].mean())        # degree_mean over references only
    np.testing.assert_allclose(f[1], refs[:, 0].std())
    np.testing.assert_allclose(f[2], refs[:, 0].max())
    np.testing.assert_allclose(f[3], refs[:, 0].min())
    np.testing.assert_allclose(f[12], refs[:, 3].mean())       # clustering_mean
    fi = structural_graph_features(G, include_focal=True)
    np.testing.assert_allclose(fi[0], X[:, 0].mean())
    # clustering of reference 4 (only linked to the focal) is 0; of 1..3 (triangle + focal) is 1
    np.testing.assert_allclose(refs[:, 3], [1, 1, 1, 0])


def test_graph_features_reject_bad_arguments():
    G = nx.path_graph(3)
    with pytest.raises(ValueError, match="aggregations"):
        structural_graph_features(G, aggregations=["mode"])
    with pytest.raises(ValueError, match="features"):
        structural_node_features(G, ["pagerank"])
    with pytest.raises(ValueError, match="no nodes"):
        structural_node_features(nx.Graph())
    with pytest.raises(TypeError, match="networkx"):
        structural_node_features(np.eye(3))


def test_single_node_graph_has_zero_features():
    G = citation_graph(0, [], nx.Graph())
    f = structural_graph_features(G, include_focal=True)
    assert np.all(f == 0)


# --------------------------------------------------------------------------- embeddings
def test_embedding_features_average_references_only():
    E = np.arange(12, dtype=float).reshape(4, 3)
    G = citation_graph(0, [1, 3], nx.Graph())
    np.testing.assert_allclose(embedding_graph_features(G, E), (E[1] + E[3]) / 2)
    np.testing.assert_allclose(embedding_graph_features(G, E, include_focal=True), (E[0] + E[1] + E[3]) / 3)
    np.testing.assert_allclose(embedding_graph_features(G, {0: [9, 9], 1: [1, 2], 3: [3, 4]}), [2, 3])


def test_embedding_features_reject_bad_input():
    G = citation_graph(0, [1, 5], nx.Graph())
    with pytest.raises(ValueError, match="rows"):
        embedding_graph_features(G, np.zeros((3, 2)))
    with pytest.raises(KeyError, match="no embedding"):
        embedding_graph_features(G, {1: [0.0]})
    E = np.zeros((6, 2))
    E[5, 0] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        embedding_graph_features(G, E)
    with pytest.raises(ValueError, match="2-D"):
        embedding_graph_features(G, np.zeros(6))
    with pytest.raises(ValueError, match="reference nodes"):
        embedding_graph_features(citation_graph(0, [], nx.Graph()), np.zeros((1, 2)))


# --------------------------------------------------------------------------- field-matched random baseline
def test_random_baseline_keeps_length_and_field_counts_and_excludes():
    field_of = {i: i % 3 for i in range(300)}
    refs = [0, 3, 6, 1, 4, 2]
    rng = np.random.default_rng(0)
    out = field_matched_random_references(refs, field_of, rng, exclude=set(refs) | {299})
    assert len(out) == len(refs) and len(set(out)) == len(out)
    assert [field_of[r] for r in out] == [field_of[r] for r in refs]        # field per position kept
    assert not set(out) & (set(refs) | {299})
    again = field_matched_random_references(refs, field_of, np.random.default_rng(0), exclude=set(refs) | {299})
    assert out == again                                                       # deterministic given the rng


def test_random_baseline_is_uniform_within_field():
    field_of = {i: int(i >= 10) for i in range(20)}      # field 0: 0..9, field 1: 10..19
    rng = np.random.default_rng(1)
    pool = field_pools(field_of)
    counts = np.zeros(20)
    for _ in range(4000):
        for c in field_matched_random_references([0], field_of, rng, exclude={0}, pool=pool):
            counts[c] += 1
    assert counts[0] == 0 and counts[10:].sum() == 0
    p = counts[1:10] / counts.sum()
    np.testing.assert_allclose(p, 1 / 9, atol=0.02)


def test_random_baseline_rejects_bad_input():
    field_of = {0: "a", 1: "a", 2: "b"}
    with pytest.raises(KeyError, match="no field"):
        field_matched_random_references([7], field_of, np.random.default_rng(0))
    with pytest.raises(ValueError, match="candidates"):
        field_matched_random_references([2], field_of, np.random.default_rng(0), exclude={2})
    with pytest.raises(TypeError, match="Generator"):
        field_matched_random_references([0], field_of, 0)


def test_one_field_reduces_to_degree_preserving_uniform_draw():
    field_of = dict.fromkeys(range(50), 0)
    out = field_matched_random_references(list(range(10)), field_of, np.random.default_rng(3), exclude=range(10))
    assert len(out) == 10 and min(out) >= 10


# --------------------------------------------------------------------------- scikit-learn contract
def _toy_sets(n=40, seed=0):
    """Dense 'real' lists (a clique among references) vs sparse lists (no edges): structure separable."""
    rng = np.random.default_rng(seed)
    graphs, y = [], []
    for i in range(n):
        k = int(rng.integers(5, 10))
        refs = list(range(1, k + 1))
        corpus = nx.complete_graph(refs) if i % 2 else nx.empty_graph(refs)
        graphs.append(citation_graph(0, refs, corpus))
        y.append(i % 2)
    return graphs, np.array(y)


def test_featurizer_is_a_sklearn_transformer_in_a_pipeline():
    graphs, y = _toy_sets()
    f = CitationGraphFeaturizer()
    assert clone(f).get_params() == f.get_params()
    X = f.fit_transform(graphs)
    assert X.shape == (40, 17) and f.n_features_out_ == 17
    pipe = make_pipeline(CitationGraphFeaturizer(), RandomForestClassifier(50, random_state=0))
    assert cross_val_score(pipe, graphs, y, cv=4).mean() == 1.0
    E = np.random.default_rng(0).normal(size=(11, 4))
    both = CitationGraphFeaturizer(kind="both", embeddings=E).fit_transform(graphs)
    assert both.shape == (40, 21)


def test_pipeline_at_chance_on_exchangeable_labels():
    graphs, _ = _toy_sets(80, seed=1)
    dense = [g for i, g in enumerate(graphs) if i % 2]                 # one kind only
    y = np.random.default_rng(2).integers(0, 2, len(dense))
    pipe = make_pipeline(CitationGraphFeaturizer(), RandomForestClassifier(50, random_state=0))
    assert abs(cross_val_score(pipe, dense, y, cv=4).mean() - 0.5) < 0.25


def test_featurizer_rejects_bad_input():
    graphs, _ = _toy_sets(4)
    with pytest.raises(ValueError, match="kind"):
        CitationGraphFeaturizer(kind="text").fit(graphs)
    with pytest.raises(ValueError, match="embeddings"):
        CitationGraphFeaturizer(kind="embedding").fit(graphs)
    with pytest.raises(TypeError, match="list"):
        CitationGraphFeaturizer().fit(graphs[0])
    with pytest.raises(ValueError, match="empty"):
        CitationGraphFeaturizer().fit([])
    f = CitationGraphFeaturizer(aggregations=("mean",)).fit(graphs)
    f.set_params(aggregations=("mean", "std"))
    with pytest.raises(ValueError, match="fitted on"):
        f.transform(graphs)


# --------------------------------------------------------------------------- GNN
def test_to_pyg_edges_both_ways_and_focal_flag():
    G = citation_graph(0, [1, 2], nx.Graph([(1, 2)]))
    d = to_pyg(G, y=1)
    assert d.x.shape == (3, 5) and d.y.item() == 1
    assert d.edge_index.shape[1] == 2 * 3
    assert d.x[0, -1] == 1 and d.x[1:, -1].sum() == 0


def test_gnn_learns_dense_vs_sparse_and_fails_loudly():
    graphs, y = _toy_sets(60, seed=3)
    clf = GNNGraphClassifier(epochs=30, lr=1e-2, random_state=0).fit(graphs[:40], y[:40])
    assert clf.history_[-1][0] < clf.history_[0][0]                    # the loss falls
    assert clf.score(graphs[40:], y[40:]) >= 0.9
    assert clf.predict_proba(graphs[:3]).shape == (3, 2)
    np.testing.assert_allclose(clf.predict_proba(graphs[:3]).sum(1), 1, atol=1e-6)
    with pytest.raises(ValueError, match="lr"):
        GNNGraphClassifier(lr=-1).fit(graphs, y)
    with pytest.raises(ValueError, match="epochs"):
        GNNGraphClassifier(epochs=0).fit(graphs, y)
    with pytest.raises(ValueError, match="labels"):
        GNNGraphClassifier().fit(graphs, y[:3])
    with pytest.raises(ValueError, match="two classes"):
        GNNGraphClassifier().fit(graphs, np.zeros(len(graphs)))
    with pytest.raises(RuntimeError, match="not fitted"):
        GNNGraphClassifier().predict(graphs)
    with pytest.raises(FloatingPointError, match="not finite"):
        GNNGraphClassifier(lr=1e30, epochs=3).fit(graphs, y)


# --------------------------------------------------------------------------- experiment
def test_smoke_experiment_runs_and_is_deterministic():
    from iclr26.evaluation.llm_citation_graphs import experiment

    a = experiment.run("smoke", 0)
    b = experiment.run("smoke", 0)
    assert a["metrics"] == b["metrics"]
    m = a["metrics"]
    assert set(m["accuracy_gt_vs_random"]) == {"rf_structure", "rf_embedding", "gnn_structure",
                                               "rf_structure_unmatched"}
    # the random baseline keeps the reference count and removes links among references
    assert m["reference_edges"]["random"] < m["reference_edges"]["ground_truth"]
