"""AutoDeco: learned per-token temperature and top-p heads (arXiv:2510.26697)."""
from .heads import (AutoDecoConfig, AutoDecoHeads, autodeco_loss, autodeco_step, probability_features, soft_top_p_probs,
                    top_p_filter, warp_logits)
from .processor import AutoDecoLogitsProcessor
from .training import TracePositions, teacher_forced, train_heads

__all__ = [
    "AutoDecoConfig", "AutoDecoHeads", "AutoDecoLogitsProcessor", "autodeco_loss", "autodeco_step", "soft_top_p_probs",
    "top_p_filter", "warp_logits", "probability_features", "teacher_forced", "train_heads", "TracePositions",
]
