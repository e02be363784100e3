"""Truncated Polynomial Classifiers (TPC): polynomial activation probes evaluated term by term (ICLR 2026)."""
from .estimator import TruncatedPolynomialClassifier, order_flops, polynomial_logits

__all__ = ["TruncatedPolynomialClassifier", "order_flops", "polynomial_logits"]
