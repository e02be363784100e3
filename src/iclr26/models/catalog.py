"""The catalogue of models ``iclr26 models list|prepare`` knows: the bundled language models
(:mod:`iclr26.models.bundled`) and the vision-language model trained here
(:mod:`iclr26.models.vlm_train`). Kept apart from :mod:`iclr26.models`, which the experiments import,
so that adding a model to the catalogue changes nothing an experiment measured.
"""
from __future__ import annotations

from .bundled import BUNDLED
from .bundled import available_models as _bundled_models
from .bundled import prepare as _prepare_bundled

__all__ = ["TINY_VLM", "prepare", "available_models"]

#: the vision-language model trained here (iclr26.models.vlm_train); ``"tiny-vlm:SEED"`` names a seed
TINY_VLM = "tiny-vlm"


def _tiny_vlm_seed(name: str) -> int | None:
    if name == TINY_VLM:
        return 0
    if name.startswith(TINY_VLM + ":") and name.split(":", 1)[1].isdigit():
        return int(name.split(":", 1)[1])
    return None


def prepare(name: str, **kwargs):
    """Build (once) and return the cached folder of a bundled model (:func:`iclr26.models.bundled.prepare`)
    or of the tiny VLM (``"tiny-vlm"`` is seed 0, ``"tiny-vlm:3"`` seed 3;
    :func:`iclr26.models.vlm_train.prepare_tiny_vlm`)."""
    seed = _tiny_vlm_seed(name) if isinstance(name, str) else None
    if seed is not None:
        from .vlm_train import prepare_tiny_vlm

        return prepare_tiny_vlm(seed=seed, **kwargs)
    return _prepare_bundled(name, **kwargs)


def available_models() -> list[dict]:
    """The bundled models (:func:`iclr26.models.bundled.available_models`) and the tiny VLM, whose
    ``installed`` is whether it is built (it is trained here, not installed)."""
    rows = _bundled_models()
    from .vlm_train import built_seeds, seed_dir

    seeds = built_seeds()
    rows.append(dict(
        name=TINY_VLM,
        description="Idefics3 (SmolVLM class): SmolLM2-135M text model + a small vision tower trained here on "
                    "procedural images; estimated 45 CPU-minutes for tower + seed 0, 'tiny-vlm:N' for seed N",
        arch="idefics3", packages=list(BUNDLED["smollm2-135m"].packages), install=BUNDLED["smollm2-135m"].install,
        size_mb=560, installed=bool(seeds), cached=bool(seeds), path=str(seed_dir(0)), seeds=seeds,
    ))
    return rows
