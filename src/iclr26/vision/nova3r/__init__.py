"""NOVA3R (arXiv 2603.04179): the stage-1 point-set autoencoder with a flow-matching point decoder,
the same network trained with a Chamfer loss as the ablation's baseline, and the point-cloud metrics."""
from .model import (FlowPointDecoder, NonFiniteTrainingError, PointAEConfig, PointSetAutoencoder, PointSetEncoder,
                    fourier_features, path_coefficients, timestep_embedding, train_autoencoder)
from .points import chamfer_distance, chamfer_loss, farthest_point_sample, fscore, gather_points, hole_ratio, nearest_distances
from .shapes import PRIMITIVES, Shape, random_shape, sample_surface, visible_part

__all__ = ["FlowPointDecoder", "NonFiniteTrainingError", "PRIMITIVES", "PointAEConfig", "PointSetAutoencoder", "PointSetEncoder",
           "Shape", "chamfer_distance", "chamfer_loss", "farthest_point_sample", "fourier_features", "fscore", "gather_points",
           "hole_ratio", "nearest_distances", "path_coefficients", "random_shape", "sample_surface", "timestep_embedding",
           "train_autoencoder", "visible_part"]
