"""RECON (arXiv 2505.13289): canonical orientation normalisation g_nat = g_hat m^-1, with m a robust
Frechet mean of the poses of the neighbours in invariant space, over a small SO(2) invariant-
equivariant autoencoder."""
from .backbone import CanonicalCodeEncoder, IEAutoencoder, InvariantPoseEncoder, NonFiniteTrainingError, circular_mask, encode, train_ieae
from .canonicalizer import (RECON, TestTimeCanonicalizer, class_frechet_means, class_restricted_recon, robust_frechet_mean, rotate,
                            wrap_angle)
from .datasets import POSE_FAMILIES, load_mnist_images, rotated, sample_poses
from .metrics import circular_w1

__all__ = ["CanonicalCodeEncoder", "IEAutoencoder", "POSE_FAMILIES", "load_mnist_images", "rotated", "sample_poses", "InvariantPoseEncoder", "NonFiniteTrainingError", "RECON", "TestTimeCanonicalizer",
           "circular_mask", "circular_w1", "class_frechet_means", "class_restricted_recon", "encode", "robust_frechet_mean", "rotate",
           "train_ieae", "wrap_angle"]
