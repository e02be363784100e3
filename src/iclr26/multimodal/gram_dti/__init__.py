"""GRAM-DTI (arXiv 2509.21971): Gramian-volume contrastive pre-training over four modalities."""
from .data import DTIData, make_dti_data, probe_pairs
from .losses import (AdaptiveModalityDropout, DropDecision, GramianVolumeLoss, RandomModalityDropout, clip_loss,
                     gram_volumes, pairwise_infonce)
from .pretrainer import GRAMDTIPretrainer, NonFiniteTrainingError, projector
from .probe import pair_features, probe_scores

__all__ = ["AdaptiveModalityDropout", "DTIData", "DropDecision", "GRAMDTIPretrainer", "GramianVolumeLoss",
           "NonFiniteTrainingError", "RandomModalityDropout", "clip_loss", "gram_volumes", "make_dti_data",
           "pair_features", "pairwise_infonce", "probe_pairs", "probe_scores", "projector"]
