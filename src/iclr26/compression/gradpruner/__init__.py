"""GradPruner (arXiv:2601.19503): gradient-guided layer pruning and sign-consistent merging during fine-tuning."""
from .pruning import (IGIA, KEEP, GradPrunerCallback, block_influence_scores, official_merge_layers, prune_layers,
                      same_sign_merge, select_prune_layers, select_prune_run, simulated_gradients, sparsify)

__all__ = ["IGIA", "KEEP", "GradPrunerCallback", "block_influence_scores", "official_merge_layers", "prune_layers",
           "same_sign_merge", "select_prune_layers", "select_prune_run", "simulated_gradients", "sparsify"]
