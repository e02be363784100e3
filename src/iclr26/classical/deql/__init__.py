"""DEQL: closed-form EDLAE recommenders for emphasis weight b >= 0 (arXiv:2603.07402)."""
from .recommender import (
    DEQLRecommender,
    EASERecommender,
    EDLAERecommender,
    deql_closed_form,
    deql_closed_form_pair,
    deql_expected_loss,
    deql_naive,
    ease_closed_form,
    edlae_closed_form,
)

__all__ = [
    "DEQLRecommender",
    "EDLAERecommender",
    "EASERecommender",
    "deql_closed_form",
    "deql_closed_form_pair",
    "deql_naive",
    "deql_expected_loss",
    "edlae_closed_form",
    "ease_closed_form",
]
