"""GTO (arXiv:2509.22134): Group Tree Optimization, a draft-tree reward for training speculative drafts."""
from .objective import (
    GTOLoss,
    branch_values,
    clipped_surrogate,
    draft_tree_reward,
    group_advantages,
    path_logprob,
)

__all__ = ["GTOLoss", "branch_values", "clipped_surrogate", "draft_tree_reward", "group_advantages", "path_logprob"]
