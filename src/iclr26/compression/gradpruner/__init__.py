"""GradPruner (arXiv:2601.19503): gradient-guided layer pruning and sign-consistent merging during fine-tuning."""
from .pruning import IGIA, block_influence_scores, prune_layers, same_sign_merge, select_prune_layers, simulated_gradients, sparsify

__all__ = ["IGIA", "block_influence_scores", "prune_layers", "same_sign_merge", "select_prune_layers",
           "simulated_gradients", "sparsify"]
