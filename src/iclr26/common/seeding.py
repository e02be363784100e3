"""Deterministic seeding for numpy, random and (when installed) torch."""
from __future__ import annotations

import random

import numpy as np


def seed_everything(seed: int, torch_threads: int | None = 1) -> np.random.Generator:
    """Seed ``random``, numpy's legacy global state and torch; return a fresh numpy Generator.

    ``torch_threads`` (default 1) is passed to ``torch.set_num_threads`` because the runner
    parallelises over trials, not inside them. Pass ``None`` to leave it unchanged.
    """
    if not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ValueError(f"seed must be a non-negative integer, got {seed!r}")
    random.seed(int(seed))
    np.random.seed(int(seed) % 2**32)
    try:
        import torch
    except ImportError:
        pass
    else:
        torch.manual_seed(int(seed))
        if torch_threads is not None:
            torch.set_num_threads(torch_threads)
    return np.random.default_rng(int(seed))
