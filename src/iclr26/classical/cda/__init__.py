"""Centroid Discriminant Analysis (CDA), a geometric linear classifier (ICLR 2026)."""
from .estimator import CentroidDiscriminantAnalysis, performance_score

__all__ = ["CentroidDiscriminantAnalysis", "performance_score"]
