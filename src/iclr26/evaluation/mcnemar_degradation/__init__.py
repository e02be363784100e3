"""When LLMs get significantly worse: exact paired tests for model degradation (arXiv 2602.10144)."""
from .test import (
    AggregateResult,
    DegradationResult,
    aggregate_counts,
    aggregate_degradation,
    contingency,
    flip_mask,
    mcnemar_degradation,
    unpaired_degradation,
)

__all__ = [
    "AggregateResult",
    "DegradationResult",
    "aggregate_counts",
    "aggregate_degradation",
    "contingency",
    "flip_mask",
    "mcnemar_degradation",
    "unpaired_degradation",
]
