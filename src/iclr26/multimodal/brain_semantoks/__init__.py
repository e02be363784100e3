"""Brain-Semantoks (ICLR 2026): network tokens of fMRI, SimDINO/MCR self-distillation, linear probes."""
from .estimator import BrainSemantoksEmbedder
from .model import (NetworkTokenizer, ProjectionHead, SemantoksEncoder, SimDINO, coding_rate, crop_pair, mcr_loss,
                    network_weight, slice_mask)

__all__ = ["BrainSemantoksEmbedder", "NetworkTokenizer", "ProjectionHead", "SemantoksEncoder", "SimDINO",
           "coding_rate", "crop_pair", "mcr_loss", "network_weight", "slice_mask"]
