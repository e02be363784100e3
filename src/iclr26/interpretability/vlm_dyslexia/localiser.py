"""Functional localisation of category-selective units (the visual-word-form localiser of
"Inducing Dyslexia in Vision Language Models", Honarmand, Sharma, AlKhamissi, Mehrer, Schrimpf,
arXiv 2509.24597; official code github.com/epflneuroailab/VWFA-Localization).

The recipe (paper Sec. "Localising VWF units"; official ``extract_activations.py`` and
``contrast_activations.py``):

1. show localiser images of the target category (words) and of control categories (the official
   localiser: faces, line drawings, scrambled words) with one prompt (official: "Describe the image.");
2. record every unit of the chosen modules (official: the output of ``mlp.gate_proj`` in every
   decoder block of the language model), averaged over the sequence's token positions;
3. per unit, Welch's t statistic of target vs the pooled controls (``scipy.stats.ttest_ind(...,
   equal_var=False)``; NaN set to t = 0, p = 1);
4. the units with the largest t over all modules jointly, a fixed share of all units (official
   default ``percentage = 21``), form the mask.

:func:`random_unit_masks` draws the control of the paper: as many units, at random.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, Mapping

import numpy as np
import torch
from scipy import stats
from torch import nn

from iclr26.models.hooks import get_module, record_activations

__all__ = ["SelectivityResult", "UnitLocalisation", "selectivity_tstat", "unit_activations", "localise_from_activations",
           "localise_units", "random_unit_masks", "gate_proj_modules"]

#: share of units kept by the official ``contrast_activations.py`` (``percentage = 21``)
OFFICIAL_FRACTION = 0.21


@dataclass(frozen=True)
class SelectivityResult:
    """Welch's two-sample t test per unit (``statistic``, two-sided ``pvalue``, Welch-Satterthwaite
    ``df``) with the two category means."""
    statistic: np.ndarray
    pvalue: np.ndarray
    df: np.ndarray
    mean_target: np.ndarray
    mean_other: np.ndarray


def _as_2d(x, name: str) -> np.ndarray:
    if isinstance(x, torch.Tensor):
        x = x.detach().cpu().double().numpy()
    a = np.asarray(x, dtype=float)
    if a.ndim < 1:
        raise ValueError(f"{name} must have a leading stimulus axis, got a scalar")
    if a.ndim == 1:
        a = a[:, None]
    if a.shape[0] < 2:
        raise ValueError(f"{name} needs at least 2 stimuli for a variance, got {a.shape[0]}")
    if not np.isfinite(a).all():
        raise ValueError(f"{name} holds non-finite activations")
    return a


def selectivity_tstat(target, other) -> SelectivityResult:
    """Welch's t of ``target`` vs ``other`` for every unit (axis 0 = stimuli, the rest = units).

    ``t = (mean_t - mean_o) / sqrt(var_t / n_t + var_o / n_o)`` with unbiased variances; a unit with
    zero variance in both groups gets t = 0 and p = 1 (the official code's ``nan_to_num``)."""
    a, b = _as_2d(target, "target"), _as_2d(other, "other")
    if a.shape[1:] != b.shape[1:]:
        raise ValueError(f"target and other must have the same unit shape, got {a.shape[1:]} and {b.shape[1:]}")
    na, nb = a.shape[0], b.shape[0]
    ma, mb = a.mean(0), b.mean(0)
    va, vb = a.var(0, ddof=1) / na, b.var(0, ddof=1) / nb
    se2 = va + vb
    with np.errstate(divide="ignore", invalid="ignore"):
        t = (ma - mb) / np.sqrt(se2)
        df = se2 ** 2 / (va ** 2 / (na - 1) + vb ** 2 / (nb - 1))
    bad = ~np.isfinite(t)
    t = np.where(bad, 0.0, t)
    df = np.where(np.isfinite(df), df, float(na + nb - 2))
    p = np.where(bad, 1.0, 2 * stats.t.sf(np.abs(t), df))
    return SelectivityResult(t, p, df, ma, mb)


@dataclass
class UnitLocalisation:
    """The selected units: ``masks[name]`` a bool tensor over the module's units (True = selected),
    with the t statistics and p values of every unit, the number ``k`` selected and ``n_units``."""
    masks: dict[str, torch.Tensor]
    tstats: dict[str, torch.Tensor]
    pvalues: dict[str, torch.Tensor]
    k: int
    n_units: int
    target: str = "words"
    controls: tuple[str, ...] = field(default_factory=tuple)

    @property
    def fraction(self) -> float:
        return self.k / self.n_units

    def counts(self) -> dict[str, int]:
        """Selected units per module."""
        return {name: int(m.sum()) for name, m in self.masks.items()}


def gate_proj_modules(model: nn.Module) -> dict[str, nn.Module]:
    """``{name: module}`` of every module whose name ends in ``mlp.gate_proj`` (the official
    ``define_layers``): in a SmolVLM/Idefics3 model these are the text model's MLP gates (the tower's
    MLPs are named ``fc1``/``fc2``)."""
    mods = {n: m for n, m in model.named_modules() if n.endswith("mlp.gate_proj")}
    if not mods:
        raise ValueError(f"{type(model).__name__} has no module named '*mlp.gate_proj'; pass modules explicitly")
    return mods


def _resolve(model: nn.Module, modules) -> dict[str, nn.Module]:
    if isinstance(modules, Mapping):
        out = {str(k): (get_module(model, v) if isinstance(v, str) else v) for k, v in modules.items()}
    elif isinstance(modules, str):
        out = {modules: get_module(model, modules)}
    else:
        out = {}
        for m in modules:
            if not isinstance(m, str):
                raise TypeError("modules must be a mapping name -> module or a list of submodule names")
            out[m] = get_module(model, m)
    if not out:
        raise ValueError("modules is empty")
    for k, v in out.items():
        if not isinstance(v, nn.Module):
            raise TypeError(f"modules[{k!r}] is not an nn.Module")
    return out


@torch.no_grad()
def unit_activations(model: nn.Module, modules, batches: Iterable[Mapping]) -> dict[str, torch.Tensor]:
    """Per stimulus, each unit's output averaged over the token positions (``attention_mask`` == 1
    where the batch has one; the official code runs one stimulus at a time and averages over all
    positions, which is the same thing); a module whose positions are not the text tokens (a vision
    tower's patches) is averaged over all its positions, one row per image it sees.
    ``batches``: model inputs, e.g. processor outputs.
    Returns ``{name: tensor [n_stimuli, n_units]}``."""
    mods = _resolve(model, modules)
    out: dict[str, list] = {k: [] for k in mods}
    n = 0
    for batch in batches:
        if not isinstance(batch, Mapping):
            raise TypeError(f"each batch must be a mapping of model inputs, got {type(batch).__name__}")
        with record_activations(model, mods) as acts:
            model(**batch)
        am = batch.get("attention_mask")
        for k in mods:
            if len(acts[k]) != 1:
                raise RuntimeError(f"module {k!r} ran {len(acts[k])} times in one forward pass; expected once")
            a = acts[k][0].float()
            if a.ndim == 3:
                if am is not None and tuple(am.shape) == tuple(a.shape[:2]):
                    # token positions of the text model: padding does not count
                    w = am.to(a.dtype).unsqueeze(-1)
                    a = (a * w).sum(1) / w.sum(1).clamp_min(1.0)
                else:
                    a = a.mean(1)
            elif a.ndim != 2:
                raise ValueError(f"module {k!r} returned shape {tuple(a.shape)}; expected [batch, tokens, units]")
            out[k].append(a)
        n += 1
    if n == 0:
        raise ValueError("batches is empty")
    res = {k: torch.cat(v, 0) for k, v in out.items()}
    for k, v in res.items():
        if not torch.isfinite(v).all():
            raise FloatingPointError(f"non-finite activations recorded at {k!r}")
    return res


def _n_select(fraction, k, total: int) -> int:
    if k is not None:
        if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or not 1 <= k <= total:
            raise ValueError(f"k must be an integer in [1, {total}], got {k!r}")
        return int(k)
    if isinstance(fraction, bool) or not isinstance(fraction, (int, float, np.floating)) or not np.isfinite(fraction):
        raise ValueError(f"fraction must be a finite number in (0, 1], got {fraction!r}")
    if not 0 < fraction <= 1:
        raise ValueError(f"fraction must be in (0, 1], got {fraction!r}")
    n = int(fraction * total)          # official: int((percentage / 100) * total_units)
    if n < 1:
        raise ValueError(f"fraction {fraction} of {total} units selects no unit")
    return n


def localise_from_activations(acts: Mapping[str, Mapping[str, object]], target: str = "words", *,
                              fraction: float = OFFICIAL_FRACTION, k: int | None = None) -> UnitLocalisation:
    """Select the ``k`` (default ``int(fraction * n_units)``) units with the largest Welch t of
    ``target`` vs the pooled other categories, over all modules jointly.

    ``acts``: ``{category: {module name: [n_stimuli, n_units]}}`` (e.g. from :func:`unit_activations`).
    Ties in t are broken by position (module order, then unit index)."""
    if not isinstance(acts, Mapping) or target not in acts:
        raise ValueError(f"acts must map categories to activations and hold the target category {target!r}")
    controls = tuple(c for c in acts if c != target)
    if not controls:
        raise ValueError("acts needs at least one control category besides the target")
    names = list(acts[target])
    if not names:
        raise ValueError("acts[target] holds no module")
    for c in controls:
        if list(acts[c]) != names:
            raise ValueError(f"category {c!r} has modules {list(acts[c])}, the target has {names}")
    tstats, pvalues, sizes = {}, {}, []
    for name in names:
        tgt = _as_2d(acts[target][name], f"acts[{target!r}][{name!r}]")
        oth = np.concatenate([_as_2d(acts[c][name], f"acts[{c!r}][{name!r}]") for c in controls], 0)
        res = selectivity_tstat(tgt, oth)
        tstats[name] = torch.as_tensor(res.statistic.reshape(-1))
        pvalues[name] = torch.as_tensor(res.pvalue.reshape(-1))
        sizes.append(tstats[name].numel())
    flat = torch.cat([tstats[n] for n in names])
    total = flat.numel()
    n_sel = _n_select(fraction, k, total)
    order = torch.argsort(-flat, stable=True)[:n_sel]
    sel = torch.zeros(total, dtype=torch.bool)
    sel[order] = True
    masks, start = {}, 0
    for name, size in zip(names, sizes):
        masks[name] = sel[start:start + size].clone()
        start += size
    return UnitLocalisation(masks, tstats, pvalues, n_sel, total, target, controls)


def localise_units(model: nn.Module, modules, stimuli: Mapping[str, Iterable[Mapping]], target: str = "words", *,
                   fraction: float = OFFICIAL_FRACTION, k: int | None = None) -> UnitLocalisation:
    """Run the localiser: ``stimuli`` maps each category to its input batches (``target`` the
    preferred category, every other one a control), ``modules`` the units to test (a list of
    submodule names or a dict name -> module; :func:`gate_proj_modules` gives the official choice)."""
    if not isinstance(stimuli, Mapping) or len(stimuli) < 2:
        raise ValueError("stimuli must map at least two categories (the target and a control) to batches")
    was_training = model.training
    model.eval()
    try:
        acts = {cat: unit_activations(model, modules, batches) for cat, batches in stimuli.items()}
    finally:
        model.train(was_training)
    return localise_from_activations(acts, target, fraction=fraction, k=k)


def random_unit_masks(reference, *, seed: int = 0, match: str = "total", exclude_reference: bool = False) -> dict[str, torch.Tensor]:
    """Random masks with as many units as ``reference`` (a :class:`UnitLocalisation` or a dict of
    bool masks). ``match="total"``: the same total, drawn uniformly over all units of all modules
    (the paper's random-unit control); ``"module"``: the same count in every module (a control for
    where the selected units sit). ``exclude_reference``: draw only among units not in ``reference``."""
    masks = reference.masks if isinstance(reference, UnitLocalisation) else reference
    if not isinstance(masks, Mapping) or not masks:
        raise ValueError("reference must be a UnitLocalisation or a non-empty dict of bool masks")
    if match not in ("total", "module"):
        raise ValueError(f"match must be 'total' or 'module', got {match!r}")
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ValueError(f"seed must be a non-negative integer, got {seed!r}")
    for k, m in masks.items():
        if not isinstance(m, torch.Tensor) or m.dtype != torch.bool or m.ndim != 1:
            raise TypeError(f"reference mask {k!r} must be a 1-D bool tensor")
    g = torch.Generator().manual_seed(int(seed))
    names = list(masks)

    def draw(ref: torch.Tensor, where: str) -> torch.Tensor:
        """As many random units as ``ref`` selects, from its complement (or anywhere)."""
        pool = torch.nonzero(~ref if exclude_reference else torch.ones_like(ref)).flatten()
        n = int(ref.sum())
        if n > pool.numel():
            raise ValueError(f"{where}cannot draw {n} units from {pool.numel()}")
        sel = torch.zeros_like(ref)
        sel[pool[torch.randperm(pool.numel(), generator=g)[:n]]] = True
        return sel

    if match == "module":
        return {name: draw(masks[name], f"module {name!r}: ") for name in names}
    sel = draw(torch.cat([masks[n] for n in names]), "")
    out, start = {}, 0
    for name in names:
        size = masks[name].numel()
        out[name] = sel[start:start + size].clone()
        start += size
    return out
