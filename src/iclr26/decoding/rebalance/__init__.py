"""ReBalance: confidence-guided steering against over- and under-thinking."""
from .steering import (
    ReBalanceConfig,
    ReBalanceSteerer,
    baseline_control,
    control,
    decoder_layers,
    fit_rebalance,
    step_confidence,
    window_variance,
)

__all__ = ["ReBalanceConfig", "ReBalanceSteerer", "baseline_control", "control", "decoder_layers",
           "fit_rebalance", "step_confidence", "window_variance"]
