"""How Do Medical MLLMs Fail? A Study on Visual Grounding in Medical Images (arXiv 2603.14323):
grounding diagnostics (attention ratio, KL, JS against a box mask) and VGRefine (grounding heads by
KL, a relevance mask from their map, question-to-masked-out-visual attention knockout at one layer)
for any transformers VLM with eager attention."""
from .grounding import DEFAULT_K, box_token_mask, grounding_metrics, head_kl, random_heads, select_grounding_heads
from .knockout import (DEFAULT_PERCENTILE, VGRefine, VisualTokenKnockout, image_positions, keep_count, paper_layer,
                       random_keep_mask, relevance_mask, visual_attention)

__all__ = ["DEFAULT_K", "DEFAULT_PERCENTILE", "VGRefine", "VisualTokenKnockout", "box_token_mask", "grounding_metrics",
           "head_kl", "image_positions", "keep_count", "paper_layer", "random_heads", "random_keep_mask",
           "relevance_mask", "select_grounding_heads", "visual_attention"]
