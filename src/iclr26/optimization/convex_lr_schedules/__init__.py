"""Convex Dominance in Deep Learning I: a scaling law of loss and learning rate (arXiv:2602.07145)."""
from .bound import (bound_terms, constant_schedule, cosine_schedule, last_iterate_bound,
                    linear_schedule, wsd_schedule)
from .law import SCHEDULES, ConvexScalingLaw, r2_score, sqrt_horizon_transfer

__all__ = ["bound_terms", "last_iterate_bound", "linear_schedule", "cosine_schedule",
           "wsd_schedule", "constant_schedule", "ConvexScalingLaw", "sqrt_horizon_transfer",
           "r2_score", "SCHEDULES"]
