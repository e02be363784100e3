"""EntroDrop (arXiv:2504.03794): entropy-based pruning of Transformer blocks and attention sub-blocks."""
from .pruning import EntroDrop, block_influence, block_scores, bucket_entropy, heldout_nll, knn_entropy

__all__ = ["EntroDrop", "block_influence", "block_scores", "bucket_entropy", "heldout_nll", "knn_entropy"]
