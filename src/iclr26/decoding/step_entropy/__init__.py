"""Step entropy (arXiv:2508.03346): score chain-of-thought steps and prune the low-entropy ones."""
from .entropy import (
    DEFAULT_KAPPA,
    SKIP_TOKEN,
    compress_cot,
    random_steps_matching_tokens,
    select_steps,
    skip_steps,
    split_steps,
    step_entropy,
    token_entropies,
)

__all__ = ["DEFAULT_KAPPA", "SKIP_TOKEN", "compress_cot", "random_steps_matching_tokens", "select_steps",
           "skip_steps", "split_steps", "step_entropy", "token_entropies"]
