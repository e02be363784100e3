"""DeAltHDR (ICLR 2026): flow-guided masked attention for HDR video from degraded alternating-
exposure sequences, with a tunable sensitivity s trading attention cost for quality."""
from .data import make_triplets, mu_law
from .fgma import (TRAINING_SENSITIVITIES, FlowGuidedMaskedAttention, block_matching_flow, consistency_error,
                   occlusion_mask, sample_training_sensitivities, warp)
from .model import NonFiniteTrainingError, TinyDeAltHDR, model_macs, prepare, psnr, random_masks_like, train_model

__all__ = ["FlowGuidedMaskedAttention", "NonFiniteTrainingError", "TRAINING_SENSITIVITIES", "TinyDeAltHDR",
           "block_matching_flow", "consistency_error", "make_triplets", "model_macs", "mu_law", "occlusion_mask",
           "prepare", "psnr", "random_masks_like", "sample_training_sensitivities", "train_model", "warp"]
