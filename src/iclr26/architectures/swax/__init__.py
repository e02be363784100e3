"""SWAX (arXiv 2509.24552): sliding-window attention + xLSTM (mLSTM) hybrid with stochastic window training."""
from .model import (MLSTMLayer, SlidingWindowRoPE, StochasticWindowSchedule, SWAXConfig, SWAXForCausalLM,
                    mlstm_parallel, stochastic_window_step)

__all__ = ["MLSTMLayer", "SWAXConfig", "SWAXForCausalLM", "SlidingWindowRoPE", "StochasticWindowSchedule",
           "mlstm_parallel", "stochastic_window_step"]
