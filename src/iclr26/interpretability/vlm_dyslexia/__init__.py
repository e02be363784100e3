"""Inducing Dyslexia in Vision Language Models (arXiv 2509.24597): a category-selectivity localiser
(Welch t of words vs control images per unit, top share of units) and unit ablation through forward
hooks, for any transformers VLM."""
from .ablation import UnitAblation
from .localiser import (OFFICIAL_FRACTION, SelectivityResult, UnitLocalisation, gate_proj_modules, localise_from_activations,
                        localise_units, random_unit_masks, selectivity_tstat, unit_activations)
from .scoring import greedy_exact

__all__ = ["OFFICIAL_FRACTION", "SelectivityResult", "UnitAblation", "UnitLocalisation", "gate_proj_modules", "greedy_exact",
           "localise_from_activations", "localise_units", "random_unit_masks", "selectivity_tstat", "unit_activations"]
