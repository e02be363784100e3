"""PrismAudio's Fast-GRPO for flow-matching models."""
from .fast_grpo import (FastGRPOTrainer, clipped_loss, group_advantages, hybrid_ode_sde_sample,
                        sde_mean_std)

__all__ = ["FastGRPOTrainer", "clipped_loss", "group_advantages", "hybrid_ode_sde_sample", "sde_mean_std"]
