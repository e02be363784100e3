"""Unit ablation through forward hooks: the perturbation of "Inducing Dyslexia in Vision Language
Models" (arXiv 2509.24597; official ``apply_VWFA_mask_roar.py``, ``ZO = True``: masked units set to
zero, ``scale_factor = 0``).

>>> loc = localise_units(model, gate_proj_modules(model), stimuli)      # doctest: +SKIP
>>> with UnitAblation(model, loc):                                       # doctest: +SKIP
...     model.generate(**batch)

Works on any ``torch.nn.Module`` whose hooked submodules return ``[..., n_units]`` (a transformers
VLM's ``mlp.gate_proj`` returns ``[batch, tokens, intermediate_size]``): every token position,
prompt and generated tokens alike, is ablated, with or without ``use_cache``. Hooks are removed on
exit, also when the body raises.
"""
from __future__ import annotations

import contextlib
from typing import Mapping

import torch
from torch import nn

from iclr26.models.hooks import get_module, patch_activations

from .localiser import UnitLocalisation

__all__ = ["UnitAblation"]


class UnitAblation(contextlib.AbstractContextManager):
    """Context manager that replaces the selected units' outputs by ``value`` (default 0).

    ``masks``: a :class:`~.localiser.UnitLocalisation` or a dict ``{submodule name (or module):
    1-D bool tensor}`` with True at the units to ablate (the last axis of the module's output).
    ``value`` is a float (0: the paper's zero-ablation) or, per module, a tensor of ``n_units``
    values (e.g. the units' mean activation, for mean-ablation).
    """

    def __init__(self, model: nn.Module, masks, value=0.0):
        if not isinstance(model, nn.Module):
            raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
        if isinstance(masks, UnitLocalisation):
            masks = masks.masks
        if not isinstance(masks, Mapping) or not masks:
            raise ValueError("masks must be a UnitLocalisation or a non-empty dict module -> bool mask")
        self.model = model
        self._specs = []
        for key, m in masks.items():
            mod = get_module(model, key) if isinstance(key, str) else key
            if not isinstance(mod, nn.Module):
                raise TypeError(f"masks key {key!r} is neither a submodule name nor a module")
            if not isinstance(m, torch.Tensor) or m.dtype != torch.bool or m.ndim != 1:
                raise TypeError(f"masks[{key!r}] must be a 1-D bool tensor (True = ablate)")
            n_out = getattr(mod, "out_features", None)
            if n_out is not None and n_out != m.numel():
                raise ValueError(f"masks[{key!r}] has {m.numel()} units, the module outputs {n_out}")
            v = value[key] if isinstance(value, Mapping) else value
            if isinstance(v, torch.Tensor):
                if v.shape != m.shape or not torch.isfinite(v).all():
                    raise ValueError(f"value for {key!r} must be a finite tensor of shape {tuple(m.shape)}")
            else:
                if isinstance(v, bool) or not isinstance(v, (int, float)) or v != v or v in (float("inf"), float("-inf")):
                    raise ValueError(f"value must be a finite number or a tensor per module, got {v!r}")
                v = float(v)
            self._specs.append((key, mod, m, v))
        self._stack: contextlib.ExitStack | None = None

    @property
    def n_ablated(self) -> int:
        return int(sum(int(m.sum()) for _, _, m, _ in self._specs))

    def _patch(self, key, mask, value):
        def fn(out: torch.Tensor) -> torch.Tensor:
            if out.shape[-1] != mask.numel():
                raise ValueError(f"{key!r} outputs {out.shape[-1]} units, its mask has {mask.numel()}")
            keep = (~mask).to(device=out.device, dtype=out.dtype)
            if isinstance(value, torch.Tensor):
                fill = value.to(device=out.device, dtype=out.dtype) * (1 - keep)
                return out * keep + fill
            if value == 0.0:
                return out * keep
            return out * keep + value * (1 - keep)
        return fn

    def __enter__(self):
        if self._stack is not None:
            raise RuntimeError("UnitAblation is already active (it is not re-entrant)")
        patches = {mod: self._patch(key, m, v) for key, mod, m, v in self._specs if bool(m.any())}
        stack = contextlib.ExitStack()
        if patches:
            stack.enter_context(patch_activations(self.model, patches))
        self._stack = stack
        return self

    def __exit__(self, *exc):
        stack, self._stack = self._stack, None
        if stack is not None:
            stack.close()
        return False
