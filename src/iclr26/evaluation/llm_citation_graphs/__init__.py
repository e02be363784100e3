"""Structurally Human, Semantically Biased (ICLR 2026, arXiv 2601.20704): per-focal-paper citation
graphs, their structure and embedding features, the field-matched random baseline, and graph-set
classifiers (a scikit-learn random-forest pipeline and a torch_geometric GNN)."""
from .gnn import GNNGraphClassifier, GraphGNN, to_pyg
from .graphs import (AGGREGATIONS, NODE_FEATURES, CitationGraphFeaturizer, citation_graph, embedding_graph_features,
                     field_matched_random_references, field_pools, structural_feature_names,
                     structural_graph_features, structural_node_features)

__all__ = ["AGGREGATIONS", "NODE_FEATURES", "CitationGraphFeaturizer", "GNNGraphClassifier", "GraphGNN",
           "citation_graph", "embedding_graph_features", "field_matched_random_references", "field_pools",
           "structural_feature_names", "structural_graph_features", "structural_node_features", "to_pyg"]
