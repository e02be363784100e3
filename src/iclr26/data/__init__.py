"""Offline datasets and synthetic task generators, each with an answer checker.

``iclr26.data.math``: GSM-style word problems (reasoning-gym ``gsm_symbolic``) and easier procedural
arithmetic, the chat prompt, answer extraction and the correctness check.
"""
from . import math

__all__ = ["math"]
