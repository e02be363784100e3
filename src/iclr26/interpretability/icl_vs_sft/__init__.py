"""ICL vs fine-tuning learning dynamics (ICLR 2026, OpenReview cJAtzOcAnd): decision fields on the 2-D
angle task, matched-accuracy fine-tuning, and representational-similarity tools."""
from .fields import (GRID, LABELS, DecisionField, QueryScores, angle_labels, decision_field, field_metrics,
                     finetune_to_accuracy, format_query, icl_context, inferred_angle, label_token_ids,
                     make_angle_task, score_queries, smoothness)
from .similarity import cosine_similarity_matrix, label_collapse_index, linear_cka, rsa_correlation

__all__ = ["GRID", "LABELS", "DecisionField", "QueryScores", "angle_labels", "decision_field", "field_metrics",
           "finetune_to_accuracy", "format_query", "icl_context", "inferred_angle", "label_token_ids",
           "make_angle_task", "score_queries", "smoothness", "cosine_similarity_matrix", "label_collapse_index",
           "linear_cka", "rsa_correlation"]
