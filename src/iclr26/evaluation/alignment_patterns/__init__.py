"""Alignment patterns and the alignment-pattern similarity for model-brain alignment (ICLR 2026)."""
from .patterns import (
    AlignmentPatternResult,
    BrainAlignmentPatterns,
    EquivalenceResult,
    alignment_matrix,
    alignment_pattern_analysis,
    brain_alignment_patterns,
    brain_brain_aps,
    equivalence_test,
    linear_predictivity,
    model_alignment_patterns,
    model_aps,
    rdm,
    rsa,
    select_layers,
    subject_bootstrap_means,
)

__all__ = ["AlignmentPatternResult", "BrainAlignmentPatterns", "EquivalenceResult", "alignment_matrix",
           "alignment_pattern_analysis", "brain_alignment_patterns", "brain_brain_aps", "equivalence_test",
           "linear_predictivity", "model_alignment_patterns", "model_aps", "rdm", "rsa", "select_layers",
           "subject_bootstrap_means"]
