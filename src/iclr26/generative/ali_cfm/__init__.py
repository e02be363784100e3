"""Multi-marginal flow matching with adversarially learnt interpolants ("Multi-Marginal Flow Matching
with Adversarially Learnt Interpolants", ICLR 2026)."""
from .flow import (ALICFM, AdversarialInterpolant, Discriminator, MultiMarginalFlowMatcher, VectorField,
                   SparsePlan, ot_chain_indices, piecewise_regulariser, piecewise_target, pretrain_interpolant,
                   exact_ot_plan, integrate, sample_conditional, sample_plan, train_interpolant,
                   train_vector_field)

__all__ = ["ALICFM", "AdversarialInterpolant", "Discriminator", "MultiMarginalFlowMatcher", "VectorField",
           "exact_ot_plan", "sample_plan", "sample_conditional", "train_interpolant", "train_vector_field",
           "integrate", "ot_chain_indices", "piecewise_regulariser", "piecewise_target",
           "pretrain_interpolant", "SparsePlan"]
