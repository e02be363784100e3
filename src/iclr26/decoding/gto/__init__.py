"""GTO (arXiv:2509.22134): Group Tree Optimization, a draft-tree reward for training speculative drafts."""
from .objective import (
    GTOLoss,
    branch_values,
    clipped_surrogate,
    draft_tree_reward,
    finetune_draft,
    group_advantages,
    path_logprob,
    score_tree,
    tree_rewards,
)

__all__ = ["GTOLoss", "branch_values", "clipped_surrogate", "draft_tree_reward", "finetune_draft", "group_advantages",
           "path_logprob", "score_tree", "tree_rewards"]
