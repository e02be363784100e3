"""Product-of-experts sampling by annealed MCMC with SMC resampling ("Product of Experts for Visual
Generation", ICLR 2026)."""
from .sampler import (FlowExpert, GaussianConstraintExpert, ProductOfExpertsSampler, RewardExpert,
                      flow_score_from_velocity, tweedie_x0)

__all__ = ["FlowExpert", "RewardExpert", "GaussianConstraintExpert", "ProductOfExpertsSampler",
           "flow_score_from_velocity", "tweedie_x0"]
