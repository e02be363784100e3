"""DEQL: closed-form EDLAE recommenders for emphasis weight b >= 0 (arXiv:2603.07402)."""
from .recommender import (
    DEQLRecommender,
    EASERecommender,
    EDLAERecommender,
    LinearAEPath,
    deql_closed_form,
    deql_closed_form_pair,
    deql_column_scales,
    deql_expected_loss,
    deql_naive,
    dlae_closed_form,
    ease_closed_form,
    edlae_closed_form,
    effective_ridge,
)

__all__ = [
    "DEQLRecommender",
    "EDLAERecommender",
    "EASERecommender",
    "LinearAEPath",
    "deql_closed_form",
    "deql_closed_form_pair",
    "deql_column_scales",
    "deql_naive",
    "deql_expected_loss",
    "dlae_closed_form",
    "edlae_closed_form",
    "ease_closed_form",
    "effective_ridge",
]
