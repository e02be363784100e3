"""How transformers learn causal structure in context: task, BMA oracle, two-layer RPE transformer (causal_icl)."""
from .model import (
    OneLayerRPEConfig,
    OneLayerRPETransformer,
    RandomParentMarkovTask,
    TwoLayerRPEConfig,
    TwoLayerRPETransformer,
    bma_posterior,
    bma_predict,
    identifiable_softmax_error,
    softmax_abs_errors,
)

__all__ = [
    "OneLayerRPEConfig",
    "OneLayerRPETransformer",
    "RandomParentMarkovTask",
    "TwoLayerRPEConfig",
    "TwoLayerRPETransformer",
    "bma_posterior",
    "bma_predict",
    "identifiable_softmax_error",
    "softmax_abs_errors",
]
