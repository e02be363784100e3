"""In-Place Test-Time Training (arXiv 2604.06169): the MLP down-projection as fast weights."""
from .model import SWATTTConfig, SWATTTLM
from .ttt import InPlaceTTTMLP, apply_inplace_ttt, chunk_updates, inplace_ttt_forward, make_target_modules, ntp_target

__all__ = ["InPlaceTTTMLP", "apply_inplace_ttt", "inplace_ttt_forward", "chunk_updates", "make_target_modules",
           "ntp_target", "SWATTTConfig", "SWATTTLM"]
