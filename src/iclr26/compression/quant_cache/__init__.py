"""Q&C: quantisation + feature caching for DiTs, with TAP calibration and variance compensation
(arXiv:2503.02508)."""
from .cache import CachedBranch, CachedDiT, apply_feature_cache
from .compensation import PredictionVarianceRecorder, VarianceCompensation, compensation_factors
from .cost import dit_cost
from .quantizer import QuantAttention, QuantLinear, calibrate, fake_quantize, mse_range, quant_params, quantize_model
from .tap import (InputRecorder, activation_features, kmeans_select, random_select, tap_cluster, tap_select,
                  uniform_timestep_select)

__all__ = ["CachedBranch", "CachedDiT", "apply_feature_cache", "PredictionVarianceRecorder", "VarianceCompensation",
           "compensation_factors",
           "dit_cost", "QuantAttention", "QuantLinear", "calibrate", "fake_quantize", "mse_range", "quant_params",
           "quantize_model", "InputRecorder", "activation_features", "kmeans_select", "random_select", "tap_cluster",
           "tap_select",
           "uniform_timestep_select"]
