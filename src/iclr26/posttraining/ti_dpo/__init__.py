"""TI-DPO: Token-Importance guided Direct Preference Optimization (arXiv:2505.19653)."""
from .importance import last_positions, token_importance
from .loss import (DEFAULT_BETA, DEFAULT_GAMMA, DEFAULT_LAMBDA, DEFAULT_TRIPLET_MARGIN, gaussian_prior,
                   hybrid_weights, ti_dpo_loss, triplet_loss, weighted_logratio)


def __getattr__(name):
    if name in ("TIDPOTrainer", "WEIGHTINGS", "preference_margins", "preference_margins"):
        from . import trainer
        return getattr(trainer, name)
    raise AttributeError(name)


__all__ = ["gaussian_prior", "hybrid_weights", "weighted_logratio", "triplet_loss", "ti_dpo_loss",
           "token_importance", "last_positions", "TIDPOTrainer", "WEIGHTINGS", "preference_margins", "DEFAULT_BETA", "DEFAULT_GAMMA",
           "DEFAULT_LAMBDA", "DEFAULT_TRIPLET_MARGIN"]
