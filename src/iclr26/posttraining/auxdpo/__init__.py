"""AuxDPO: DPO as a misspecified estimator, fixed with null-space auxiliary variables (arXiv:2510.20413)."""
from .bandit import (LinearSoftmaxBandit, PreferenceCounts, fit_auxdpo, fit_bt_reward, fit_dpo, fit_ipo, fit_ipo_matched_kl,
                     null_space_basis, random_bandit, rlhf_local_solution, rlhf_solution, sample_preferences,
                     three_arm_example)
from .loss import auxdpo_loss, dpo_loss, ipo_loss


def __getattr__(name):
    if name in ("AuxDPOTrainer", "INDEX_COLUMN", "heldout_margins", "sequence_logps"):
        from . import trainer
        return getattr(trainer, name)
    raise AttributeError(name)


__all__ = ["auxdpo_loss", "dpo_loss", "ipo_loss", "LinearSoftmaxBandit", "PreferenceCounts", "null_space_basis",
           "fit_dpo", "fit_ipo", "fit_ipo_matched_kl", "fit_auxdpo", "fit_bt_reward", "rlhf_solution", "rlhf_local_solution",
           "sample_preferences", "random_bandit", "three_arm_example", "AuxDPOTrainer", "INDEX_COLUMN", "heldout_margins", "sequence_logps"]
