"""Dynamic Optimizer Interleaving Training, DOIT ("Towards Dynamic Interleaving Optimizers", ICLR 2026)."""
from .baselines import SWATS, RandomInterleaving
from .interleave import DOIT, Interleaver, stage_reward, stage_reward_rate, state_features

__all__ = ["DOIT", "Interleaver", "RandomInterleaving", "SWATS", "stage_reward", "stage_reward_rate", "state_features"]
