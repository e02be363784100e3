"""Two-layer KAN with first-layer training and the KAN tangent kernel (kan_tk)."""
from .layers import (
    KANTKConfig,
    TwoLayerKAN,
    TwoLayerReLU,
    bspline_basis,
    bspline_basis_derivative,
    empirical_tangent_kernel,
    kan_tangent_kernel,
    predicted_residual,
    rbf_basis,
    rbf_basis_derivative,
    relu_tangent_kernel,
)

__all__ = [
    "KANTKConfig",
    "TwoLayerKAN",
    "TwoLayerReLU",
    "bspline_basis",
    "bspline_basis_derivative",
    "empirical_tangent_kernel",
    "kan_tangent_kernel",
    "predicted_residual",
    "rbf_basis",
    "rbf_basis_derivative",
    "relu_tangent_kernel",
]
