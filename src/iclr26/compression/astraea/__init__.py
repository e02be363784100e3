"""Astraea: token-wise acceleration of video diffusion transformers (arXiv:2506.05096)."""
from .acceleration import (AstraeaCache, BudgetSearchResult, StepSkip, apply_astraea, psnr, search_token_budget,
                           sparse_block_forward, token_scores, uniform_budget)
from iclr26.models.video import TinyVideoDiT, moving_digits

__all__ = ["AstraeaCache", "BudgetSearchResult", "StepSkip", "TinyVideoDiT", "apply_astraea", "moving_digits", "psnr",
           "search_token_budget", "sparse_block_forward", "token_scores", "uniform_budget"]
