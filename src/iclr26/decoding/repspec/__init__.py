"""RepSpec (ICLR 2026, OpenReview bqEi97qzzz): structurally re-parameterised draft-model training."""
from .layers import DEFAULT_TARGETS, RepLinear, merge_all, reparameterize

__all__ = ["DEFAULT_TARGETS", "RepLinear", "merge_all", "reparameterize"]
