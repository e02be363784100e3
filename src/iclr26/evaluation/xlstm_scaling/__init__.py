"""xLSTM vs Transformer scaling laws: parametric L(N, D) and IsoFLOP fitting, and the two model
families at matched training FLOPs (ICLR 2026)."""
from .fitting import (PAPER_INIT_GRID, ParametricFit, PowerLawFit, fit_parametric_law, fit_power_law, huber,
                      huber_objective, isoflop_optimum, log_parametric_loss)
from .lm import ARCHS, build_lm, count_params, training_flops_per_token

__all__ = [
    "PAPER_INIT_GRID", "ParametricFit", "PowerLawFit", "fit_parametric_law", "fit_power_law", "huber",
    "huber_objective", "isoflop_optimum", "log_parametric_loss", "ARCHS", "build_lm", "count_params",
    "training_flops_per_token",
]
