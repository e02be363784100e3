"""A small class-conditional diffusion / flow-matching substrate shared by the generative papers.

No pretrained diffusion or flow checkpoint exists offline, so the generative papers train small
ones here. The module holds

* data: :func:`load_digits_8x8` (scikit-learn's 8x8 digits scaled to ``[-1, 1]``, split
  deterministically into train / validation / test) and :class:`GaussianMixture`, an isotropic
  Gaussian mixture whose noised marginals, class-conditional and unconditional scores are exact
  (:func:`ring_mixture` and :func:`two_gaussians` build the usual analytic targets);
* models: :class:`TinyDiT` (a DiT with adaLN-Zero blocks, Peebles & Xie 2023) for images and
  :class:`ConditionalMLP` for vectors; both take ``(x, t, y)`` with ``y == n_classes`` meaning
  "no label" (the classifier-free null class). The DiT pieces are public for the models built on
  them (the video DiT of :mod:`iclr26.models.video`, the decoupled DiT of DUPA): the size checks
  :func:`check_dit_sizes`, :class:`CondEmbed`, :class:`DiTBlock`, :func:`input_layers`,
  :func:`output_layers` / :func:`final_layer` and :func:`patchify` / :func:`unpatchify`;
* training: :func:`diffusion_loss` / :func:`train_diffusion` for the DDPM noise-prediction objective
  (Ho et al. 2020, cosine schedule of Nichol & Dhariwal 2021) and the flow-matching velocity
  objective (rectified flow, Lipman et al. 2023 / Liu et al. 2023), both with classifier-free
  label dropout (Ho & Salimans 2022); :func:`train_diffusion` also takes a per-batch loss callable
  (multi-task conditions, auxiliary losses) with the same optimiser, schedule and EMA;
* sampling: :func:`sample` (DDIM, Song et al. 2021, for ``"eps"``; Euler for ``"flow"``) with a
  pluggable guidance callable ``guidance(pred_cond, pred_uncond, score_scale) -> pred``;
  :class:`ClassifierFreeGuidance` is the standard one;
* evaluation: :class:`FeatureClassifier` (a small MLP trained on the real data whose penultimate
  layer is the feature space), :func:`frechet_distance` and :func:`knn_precision_recall`
  (Kynkaanniemi et al. 2019).

Conventions. Time ``t`` runs in ``[0, 1]`` with ``t = 0`` the data. ``"eps"``:
``x_t = a(t) x_0 + s(t) eps`` with ``a^2 = alpha_bar(t)`` (cosine) and ``s^2 = 1 - a^2``; the model
predicts ``eps``. ``"flow"``: ``x_t = (1 - t) x_0 + t eps`` (the convention of diffusers'
``FlowMatchEulerDiscreteScheduler``) and the model predicts ``v = eps - x_0``. In both, the score
is an affine function of the prediction, ``grad log p_t(x) = -(x * b + c * pred)`` with the
``score_scale`` ``c`` handed to guidance callables: ``c = 1 / s(t)`` for ``"eps"`` and
``c = (1 - t) / t`` for ``"flow"``, so that ``score_cond - score_uncond = -c (pred_cond -
pred_uncond)``.

``diffusers`` comes with the ``generative`` extra, but these samplers do not need it: they are
written here (DDIM with ``eta`` and the flow Euler step are the updates of diffusers'
``DDIMScheduler`` and ``FlowMatchEulerDiscreteScheduler``), and the guidance callables take the
arguments a diffusers pipeline has at hand (the two predictions and the noise level).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import numpy as np
import torch
from torch import nn

OBJECTIVES = ("eps", "flow")

# ----------------------------------------------------------------------------------------- data


def load_digits_8x8(split: str = "train", seed: int = 0, val_frac: float = 0.2, test_frac: float = 0.2):
    """scikit-learn's 8x8 digits as ``(X, y)``: ``X`` float32 ``(n, 1, 8, 8)`` in ``[-1, 1]``
    (pixel values 0..16 mapped linearly), ``y`` int64 labels 0..9.

    ``split`` is ``"train"``, ``"val"``, ``"test"`` or ``"all"``; the split is a stratified
    permutation fixed by ``seed`` (the default split is the same for every caller).
    """
    from sklearn.datasets import load_digits

    if split not in ("train", "val", "test", "all"):
        raise ValueError(f"split must be one of 'train', 'val', 'test', 'all', got {split!r}")
    if not (0 < val_frac < 1 and 0 < test_frac < 1 and val_frac + test_frac < 1):
        raise ValueError(f"val_frac and test_frac must be in (0, 1) with sum < 1, got {val_frac}, {test_frac}")
    d = load_digits()
    X = (d.data.astype(np.float32) / 8.0 - 1.0).reshape(-1, 1, 8, 8)
    y = d.target.astype(np.int64)
    if split == "all":
        return X, y
    rng = np.random.default_rng(seed)
    parts = {"train": [], "val": [], "test": []}
    for c in np.unique(y):
        idx = rng.permutation(np.flatnonzero(y == c))
        n_val, n_test = int(round(val_frac * len(idx))), int(round(test_frac * len(idx)))
        parts["val"].append(idx[:n_val])
        parts["test"].append(idx[n_val:n_val + n_test])
        parts["train"].append(idx[n_val + n_test:])
    sel = np.sort(np.concatenate(parts[split]))
    return X[sel], y[sel]


class GaussianMixture:
    """Isotropic Gaussian mixture ``sum_k w_k N(mu_k, std_k^2 I)`` with exact scores.

    ``means`` ``(K, D)``, ``std`` a scalar or ``(K,)``, ``weights`` ``(K,)`` (default uniform).
    :meth:`noised` gives the exact marginal of ``a x_0 + s eps``; :meth:`score` the exact
    unconditional score, or with ``component=k`` the score of component ``k`` (the class-conditional
    score when each class is one component).
    """

    def __init__(self, means, std=1.0, weights=None):
        means = np.atleast_2d(np.asarray(means, dtype=float))
        K = means.shape[0]
        std = np.broadcast_to(np.asarray(std, dtype=float), (K,)).copy()
        if np.any(~np.isfinite(std)) or np.any(std <= 0):
            raise ValueError(f"std must be positive and finite, got {std}")
        w = np.full(K, 1.0 / K) if weights is None else np.asarray(weights, dtype=float)
        if w.shape != (K,) or np.any(w < 0) or not np.isclose(w.sum(), 1.0):
            raise ValueError(f"weights must be {K} non-negative numbers summing to 1, got {w}")
        self.means, self.std, self.weights = means, std, w

    @property
    def dim(self) -> int:
        return self.means.shape[1]

    @property
    def n_components(self) -> int:
        return self.means.shape[0]

    def noised(self, a: float, s: float) -> "GaussianMixture":
        """The law of ``a x + s eps`` for ``x`` from this mixture and ``eps ~ N(0, I)``."""
        if s < 0:
            raise ValueError(f"noise level s must be >= 0, got {s}")
        return GaussianMixture(a * self.means, np.sqrt(a**2 * self.std**2 + s**2), self.weights)

    def sample(self, n: int, rng: np.random.Generator, component=None):
        """``(x, labels)``: ``n`` draws; ``component`` fixes the component of every draw."""
        if component is None:
            lab = rng.choice(self.n_components, size=n, p=self.weights)
        else:
            lab = np.full(n, int(component))
        x = self.means[lab] + self.std[lab, None] * rng.standard_normal((n, self.dim))
        return x, lab

    def _log_comp(self, x):
        x = np.atleast_2d(x)
        d2 = ((x[:, None, :] - self.means[None]) ** 2).sum(-1)
        D = self.dim
        return (np.log(self.weights + 1e-300)[None] - 0.5 * d2 / self.std**2
                - D * np.log(self.std)[None] - 0.5 * D * np.log(2 * np.pi))

    def log_prob(self, x) -> np.ndarray:
        lc = self._log_comp(x)
        m = lc.max(1, keepdims=True)
        return (m + np.log(np.exp(lc - m).sum(1, keepdims=True)))[:, 0]

    def posterior(self, x) -> np.ndarray:
        """``(n, K)`` component responsibilities ``p(k | x)``."""
        lc = self._log_comp(x)
        lc -= lc.max(1, keepdims=True)
        p = np.exp(lc)
        return p / p.sum(1, keepdims=True)

    def score(self, x, component=None) -> np.ndarray:
        """``grad_x log p(x)``, or of component ``component`` alone."""
        x = np.atleast_2d(np.asarray(x, dtype=float))
        if component is not None:
            k = int(component)
            return (self.means[k] - x) / self.std[k] ** 2
        r = self.posterior(x)
        comp = (self.means[None] - x[:, None, :]) / (self.std**2)[None, :, None]
        return (r[:, :, None] * comp).sum(1)


def ring_mixture(k: int = 8, radius: float = 4.0, std: float = 0.5) -> GaussianMixture:
    """``k`` equal components evenly spaced on a circle in 2-D (the "8 Gaussians" target)."""
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    ang = 2 * np.pi * np.arange(k) / k
    return GaussianMixture(radius * np.stack([np.cos(ang), np.sin(ang)], 1), std)


def two_gaussians(d: int, std: float = 1.0) -> GaussianMixture:
    """Two equal components at ``+m`` and ``-m`` with ``m = (1, ..., 1)``, ``|m| = sqrt(d)``."""
    if d < 1:
        raise ValueError(f"d must be >= 1, got {d}")
    m = np.ones(d)
    return GaussianMixture(np.stack([m, -m]), std)


# --------------------------------------------------------------------------------- schedules


def cosine_alpha_bar(t, s: float = 0.008):
    """``alpha_bar(t) = cos^2((t + s) / (1 + s) * pi / 2) / cos^2(s / (1 + s) * pi / 2)``
    (Nichol & Dhariwal 2021, eq. 17), clipped to ``[1e-5, 1]``."""
    t = _as_float(t)
    f = torch.cos((t + s) / (1 + s) * math.pi / 2) ** 2 / math.cos(s / (1 + s) * math.pi / 2) ** 2
    return f.clamp(1e-5, 1.0)


def noise_coefficients(t, objective: str):
    """``(a(t), s(t))`` with ``x_t = a x_0 + s eps`` for the objective's path."""
    _check_objective(objective)
    t = _as_float(t)
    if objective == "flow":
        return 1.0 - t, t
    ab = cosine_alpha_bar(t)
    return ab.sqrt(), (1.0 - ab).sqrt()


def _as_float(t):
    """``t`` as a floating tensor (float64 stays float64, anything else becomes float32)."""
    t = torch.as_tensor(t)
    return t if t.dtype == torch.float64 else t.to(torch.float32)


def _check_objective(objective):
    if objective not in OBJECTIVES:
        raise ValueError(f"objective must be one of {OBJECTIVES}, got {objective!r}")


# ------------------------------------------------------------------------------------ models


def timestep_embedding(t: torch.Tensor, dim: int, max_period: float = 10000.0) -> torch.Tensor:
    """Sinusoidal embedding of ``1000 t`` (the DDPM / DiT convention), ``(B, dim)``."""
    half = dim // 2
    freqs = torch.exp(-math.log(max_period) * torch.arange(half, dtype=torch.float32) / half)
    args = 1000.0 * t.float()[:, None] * freqs[None]
    emb = torch.cat([torch.cos(args), torch.sin(args)], -1)
    return torch.nn.functional.pad(emb, (0, dim - 2 * half))


class CondEmbed(nn.Module):
    """The DiT condition embedding: ``MLP(timestep_embedding(t)) + Embedding(y)`` (Peebles & Xie
    2023, Sec. 3.2), ``(B, width)``; label ``n_classes`` is the classifier-free null label. Creates
    ``label`` then ``time`` (the order fixes seeded initialisations)."""

    def __init__(self, n_classes: int, width: int):
        super().__init__()
        self.n_classes, self.width = n_classes, width
        self.label = nn.Embedding(n_classes + 1, width)          # index n_classes = null label
        self.time = time_mlp(width)

    def forward(self, t, y):
        if y.min() < 0 or y.max() > self.n_classes:
            raise ValueError(f"labels must be in 0..{self.n_classes} ({self.n_classes} = no label)")
        return self.time(timestep_embedding(t, self.width)) + self.label(y)


_CondEmbed = CondEmbed          # the former private name


def time_mlp(width: int) -> nn.Sequential:
    """The timestep MLP of DiT: ``Linear -> SiLU -> Linear`` on the sinusoidal embedding."""
    return nn.Sequential(nn.Linear(width, width), nn.SiLU(), nn.Linear(width, width))


def check_dit_sizes(image_size: int, patch: int, width: int, heads: int, /, **counts: int) -> None:
    """The size checks shared by the DiT configurations: ``image_size`` divisible by ``patch``,
    ``width`` even and divisible by ``heads``, and every entry of ``counts`` (named in the
    message, in the order given) at least 1."""
    if image_size % patch:
        raise ValueError(f"image_size {image_size} must be divisible by patch {patch}")
    if width % heads or width % 2:
        raise ValueError(f"width {width} must be even and divisible by heads {heads}")
    if min(counts.values()) < 1:
        names = list(counts)
        raise ValueError(f"{', '.join(names[:-1])} and {names[-1]} must be >= 1")


@dataclass
class DiTConfig:
    """Size of a :class:`TinyDiT`. Defaults fit 8x8 digits on one CPU core."""

    image_size: int = 8
    channels: int = 1
    patch: int = 2
    width: int = 64
    depth: int = 3
    heads: int = 4
    n_classes: int = 10

    def __post_init__(self):
        check_dit_sizes(self.image_size, self.patch, self.width, self.heads, channels=self.channels,
                        depth=self.depth, heads=self.heads, n_classes=self.n_classes)


class DiTBlock(nn.Module):
    """A DiT block with adaLN-Zero modulation (Peebles & Xie 2023, Fig. 3): ``u = LN(h)(1 + s1) + b1``,
    ``h += g1 attn(u)``, ``h += g2 mlp(LN(h)(1 + s2) + b2)`` with ``(s1, b1, g1, s2, b2, g2) =
    Linear(SiLU(c))`` zero-initialised. ``forward(h (B, N, W), c)``: the condition ``c`` is ``(B, W)``
    (one per sample, as in DiT) or ``(B, N, W)`` (one per token, as in the DDT decoder)."""

    def __init__(self, width: int, heads: int):
        super().__init__()
        self.n1 = nn.LayerNorm(width, elementwise_affine=False, eps=1e-6)
        self.attn = nn.MultiheadAttention(width, heads, batch_first=True)
        self.n2 = nn.LayerNorm(width, elementwise_affine=False, eps=1e-6)
        self.mlp = nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(approximate="tanh"), nn.Linear(4 * width, width))
        self.ada = nn.Sequential(nn.SiLU(), nn.Linear(width, 6 * width))
        nn.init.zeros_(self.ada[1].weight)
        nn.init.zeros_(self.ada[1].bias)

    def forward(self, h, c):
        s1, b1, g1, s2, b2, g2 = _per_token(self.ada(c)).chunk(6, -1)
        u = self.n1(h) * (1 + s1) + b1
        h = h + g1 * self.attn(u, u, u, need_weights=False)[0]
        return h + g2 * self.mlp(self.n2(h) * (1 + s2) + b2)


_DiTBlock = DiTBlock            # the former private name


def _per_token(mod):
    """A per-sample modulation ``(B, k)`` as ``(B, 1, k)``; a per-token one ``(B, N, k)`` as is."""
    return mod[:, None] if mod.dim() == 2 else mod


def input_layers(config: DiTConfig, n_tokens: int):
    """The DiT input layers for ``n_tokens`` patch tokens (``config``: anything with ``channels``,
    ``patch`` and ``width``): ``(proj, pos)`` with ``proj`` the patch
    embedding ``Linear(channels * patch^2, width)`` and ``pos`` a learned position embedding
    ``(1, n_tokens, width)`` drawn from ``N(0, 0.02^2)`` (created in that order)."""
    proj = nn.Linear(config.channels * config.patch**2, config.width)
    pos = nn.Parameter(0.02 * torch.randn(1, n_tokens, config.width))
    return proj, pos


def output_layers(config: DiTConfig):
    """The adaLN-Zero DiT output head (Peebles & Xie 2023, Sec. 3.2): ``(norm, ada, out)`` with the
    modulation ``ada`` and the projection ``out`` zero-initialised; apply with :func:`final_layer`."""
    norm = nn.LayerNorm(config.width, elementwise_affine=False, eps=1e-6)
    ada = nn.Sequential(nn.SiLU(), nn.Linear(config.width, 2 * config.width))
    out = nn.Linear(config.width, config.channels * config.patch**2)
    for m in (ada[1], out):
        nn.init.zeros_(m.weight)
        nn.init.zeros_(m.bias)
    return norm, ada, out


def final_layer(h, cond, norm, ada, out):
    """``out(norm(h) (1 + scale) + shift)`` with ``(shift, scale) = ada(cond)``; ``cond`` per sample
    ``(B, W)`` or per token ``(B, N, W)``. Returns patch tokens ``(B, N, channels * patch^2)``."""
    sh, sc = _per_token(ada(cond)).chunk(2, -1)
    return out(norm(h) * (1 + sc) + sh)


def patchify(x: torch.Tensor, patch: int) -> torch.Tensor:
    """``(B, ..., C, H, W)`` -> tokens ``(B, N, C * patch^2)``: the ``patch x patch`` patches in
    the order (leading frame axes, row, column), each flattened as (channel, row, column)."""
    B, (C, H, W) = x.shape[0], x.shape[-3:]
    gh, gw = H // patch, W // patch
    return (x.reshape(-1, C, gh, patch, gw, patch).permute(0, 2, 4, 1, 3, 5)
            .reshape(B, -1, C * patch * patch))


def unpatchify(tok: torch.Tensor, shape, patch: int) -> torch.Tensor:
    """The inverse of :func:`patchify` for an output of ``shape`` ``(B, ..., C, H, W)``."""
    C, H, W = shape[-3:]
    return (tok.reshape(-1, H // patch, W // patch, C, patch, patch).permute(0, 3, 1, 4, 2, 5)
            .reshape(shape))


class TinyDiT(nn.Module):
    """A class-conditional DiT (patchify, adaLN-Zero blocks, zero-initialised output layer).

    ``forward(x, t, y)``: ``x`` ``(B, C, H, W)``, ``t`` ``(B,)`` in ``[0, 1]``, ``y`` ``(B,)`` labels
    with ``n_classes`` for "no label"; returns the prediction, shaped like ``x``.

    The pieces are public for models built on it: :meth:`embed` (patch embedding plus position),
    :meth:`condition` (time plus label), the :class:`DiTBlock` stack ``blocks`` and :meth:`head`
    (adaLN-Zero output layer back to pixels). ``n_tokens`` (default ``(image_size / patch)^2``) sets
    the length of the position embedding; a subclass with other inputs overrides
    :attr:`input_shape` (see :class:`iclr26.models.video.TinyVideoDiT`).
    """

    def __init__(self, config: DiTConfig | None = None, n_tokens: int | None = None):
        super().__init__()
        self.config = c = config or DiTConfig()
        self.n_classes = c.n_classes
        self.grid = c.image_size // c.patch
        self.n_tokens = self.grid**2 if n_tokens is None else int(n_tokens)
        if self.n_tokens < 1:
            raise ValueError(f"n_tokens must be >= 1, got {n_tokens}")
        self.patch_in, self.pos = input_layers(c, self.n_tokens)
        self.cond = CondEmbed(c.n_classes, c.width)
        self.blocks = nn.ModuleList(DiTBlock(c.width, c.heads) for _ in range(c.depth))
        self.n_out, self.ada_out, self.out = output_layers(c)

    @property
    def input_shape(self) -> tuple:
        """The shape of one input sample."""
        c = self.config
        return (c.channels, c.image_size, c.image_size)

    def check_input(self, x):
        shape = self.input_shape
        if x.dim() != len(shape) + 1 or tuple(x.shape[1:]) != shape:
            raise ValueError(f"x must have shape (B, {', '.join(map(str, shape))}), got {tuple(x.shape)}")

    def embed(self, x):
        """Patch tokens plus positions, ``(B, n_tokens, width)``."""
        return self.patch_in(patchify(x, self.config.patch)) + self.pos

    def condition(self, t, y):
        """The per-sample condition ``(B, width)`` of the blocks and the head."""
        return self.cond(t, y)

    def head(self, h, cond, shape):
        """The adaLN-Zero output layer on tokens ``h``, back to an output of ``shape``."""
        return unpatchify(final_layer(h, cond, self.n_out, self.ada_out, self.out), shape, self.config.patch)

    def forward(self, x, t, y):
        self.check_input(x)
        h = self.embed(x)
        cond = self.condition(t, y)
        for blk in self.blocks:
            h = blk(h, cond)
        return self.head(h, cond, x.shape)


class ConditionalMLP(nn.Module):
    """A class-conditional MLP denoiser for vectors: ``forward(x (B, D), t (B,), y (B,))``."""

    def __init__(self, dim: int, n_classes: int, width: int = 128, depth: int = 3):
        super().__init__()
        if min(dim, n_classes, width, depth) < 1:
            raise ValueError("dim, n_classes, width and depth must be >= 1")
        self.dim, self.n_classes = dim, n_classes
        self.cond = _CondEmbed(n_classes, width)
        self.inp = nn.Linear(dim, width)
        self.hidden = nn.ModuleList(nn.Linear(width, width) for _ in range(depth))
        self.out = nn.Linear(width, dim)

    def forward(self, x, t, y):
        if x.dim() != 2 or x.shape[1] != self.dim:
            raise ValueError(f"x must have shape (B, {self.dim}), got {tuple(x.shape)}")
        c = self.cond(t, y)
        h = self.inp(x)
        for lin in self.hidden:
            h = h + lin(nn.functional.silu(h + c))
        return self.out(nn.functional.silu(h))


# ---------------------------------------------------------------------------------- training


def diffusion_loss(model, x0, y, objective: str = "eps", p_uncond: float = 0.1, generator=None):
    """Mean squared error of the model's prediction on one random noise level per example.

    ``"eps"``: target ``eps`` at ``x_t = a x_0 + s eps`` (DDPM, cosine schedule); ``"flow"``:
    target ``eps - x_0`` at ``x_t = (1 - t) x_0 + t eps``. Each label is replaced by the null label
    (``model.n_classes``) with probability ``p_uncond`` (classifier-free label dropout).
    """
    _check_objective(objective)
    if not 0.0 <= p_uncond <= 1.0:
        raise ValueError(f"p_uncond must be in [0, 1], got {p_uncond}")
    B = x0.shape[0]
    t = torch.rand(B, generator=generator)
    eps = torch.randn(x0.shape, generator=generator)
    a, s = noise_coefficients(t, objective)
    shape = (B,) + (1,) * (x0.dim() - 1)
    xt = a.view(shape) * x0 + s.view(shape) * eps
    drop = torch.rand(B, generator=generator) < p_uncond
    y = torch.where(drop, torch.full_like(y, model.n_classes), y)
    target = eps if objective == "eps" else eps - x0
    return ((model(xt, t, y) - target) ** 2).mean()


LR_SCHEDULES = ("cosine", "constant")


def train_diffusion(model, X, y, objective: str = "eps", steps: int = 2000, batch_size: int = 128,
                    lr: float = 2e-3, p_uncond: float = 0.1, seed: int = 0, ema: float | None = 0.999, *,
                    loss_fn: Callable | None = None, extra=None, extra_params=(), lr_schedule: str = "cosine",
                    checkpoints=(), on_checkpoint: Callable | None = None, history: dict | None = None):
    """Train ``model`` in place with AdamW (cosine-decayed ``lr``) and return the losses per step.

    With ``ema`` the model's weights are replaced at the end by their exponential moving average
    (the usual diffusion practice); ``None`` (or 0) keeps the last iterate.

    Every step draws ``batch_size`` rows of ``(X, y)`` with replacement (one generator seeded by
    ``seed`` for all the step's randomness) and takes one step on
    :func:`diffusion_loss` ``(model, X[idx], y[idx], objective, p_uncond, generator)``, or on
    ``loss_fn(model, X[idx], y[idx], generator)`` when given (``objective`` and ``p_uncond`` are then
    the callable's business); with ``extra`` (indexed like ``X``, e.g. a per-example condition) it
    is called with ``extra=extra[idx]`` as well. ``loss_fn`` returns the scalar loss, or ``(loss,
    logs)`` with ``logs`` a mapping of floats appended to ``history[name]`` (a dict the caller
    passes; without one the logs are dropped). ``extra_params`` are optimised with the model (e.g. a projector) but not averaged;
    ``lr_schedule`` is ``"cosine"`` or ``"constant"``. At each step in ``checkpoints``
    ``on_checkpoint(step, model)`` runs with the averaged weights loaded in eval mode (the live
    weights and train mode are restored afterwards).
    """
    if steps < 1 or batch_size < 1:
        raise ValueError(f"steps and batch_size must be >= 1, got {steps}, {batch_size}")
    if lr_schedule not in LR_SCHEDULES:
        raise ValueError(f"lr_schedule must be one of {LR_SCHEDULES}, got {lr_schedule!r}")
    bad = [s for s in checkpoints if not 1 <= int(s) <= steps]
    if bad:
        raise ValueError(f"checkpoints must lie in 1..{steps}, got {bad}")
    X = torch.as_tensor(np.asarray(X), dtype=torch.float32)
    y = torch.as_tensor(np.asarray(y), dtype=torch.long)
    if len(X) != len(y):
        raise ValueError(f"X and y must have the same length, got {len(X)} and {len(y)}")
    if extra is not None:
        extra = torch.as_tensor(extra) if not isinstance(extra, torch.Tensor) else extra
        if len(extra) != len(X):
            raise ValueError(f"extra must have one row per example of X ({len(X)}), got {len(extra)}")
    g = torch.Generator().manual_seed(int(seed))
    params = list(model.parameters())
    opt = torch.optim.AdamW(params + list(extra_params), lr=lr, weight_decay=0.0)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, steps) if lr_schedule == "cosine" else None
    avg = [p.detach().clone() for p in params] if ema else None
    marks = {int(s) for s in checkpoints}
    losses = []
    model.train()
    for step in range(1, steps + 1):
        idx = torch.randint(len(X), (batch_size,), generator=g)
        if loss_fn is None:
            loss = diffusion_loss(model, X[idx], y[idx], objective, p_uncond, g)
        else:
            kw = {} if extra is None else {"extra": extra[idx]}
            loss = loss_fn(model, X[idx], y[idx], g, **kw)
            if isinstance(loss, tuple):
                loss, logs = loss
                for k, v in (logs.items() if history is not None else ()):
                    history.setdefault(k, []).append(v)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if sched is not None:
            sched.step()
        losses.append(float(loss.detach()))
        if avg is not None:
            with torch.no_grad():
                for a_, p in zip(avg, params):
                    a_.mul_(ema).add_(p.detach(), alpha=1 - ema)
        if step in marks and on_checkpoint is not None:
            _with_weights(model, params, avg, lambda: on_checkpoint(step, model))
    if avg is not None:
        with torch.no_grad():
            for a_, p in zip(avg, params):
                p.copy_(a_)
    model.eval()
    return losses


def _with_weights(model, params, weights, fn):
    """Run ``fn()`` with ``weights`` (a list like ``params``; ``None``: the live ones) in eval mode,
    then restore the live weights and train mode."""
    live = None
    if weights is not None:
        with torch.no_grad():
            live = [p.detach().clone() for p in params]
            for w, p in zip(weights, params):
                p.copy_(w)
    was = model.training
    model.eval()
    try:
        return fn()
    finally:
        if live is not None:
            with torch.no_grad():
                for w, p in zip(live, params):
                    p.copy_(w)
        model.train(was)


# ---------------------------------------------------------------------------------- sampling

Guidance = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]


class ClassifierFreeGuidance:
    """``pred = pred_c + omega (pred_c - pred_u)`` (Ho & Salimans 2022; ``omega = 0`` is the plain
    conditional model; diffusers' ``guidance_scale`` is ``1 + omega``)."""

    def __init__(self, omega: float = 1.0):
        if not np.isfinite(omega):
            raise ValueError(f"omega must be finite, got {omega}")
        self.omega = float(omega)

    def __call__(self, pred_cond, pred_uncond, score_scale=None):
        return pred_cond + self.omega * (pred_cond - pred_uncond)


def score_scale(t, objective: str):
    """``c(t)`` with ``score_cond - score_uncond = -c (pred_cond - pred_uncond)``."""
    _check_objective(objective)
    t = torch.as_tensor(t, dtype=torch.float32)
    if objective == "eps":
        return 1.0 / noise_coefficients(t, "eps")[1]
    return (1.0 - t) / t


@torch.no_grad()
def sample(model, y, shape, objective: str = "eps", steps: int = 50, guidance: Guidance | None = None,
           generator=None, eta: float = 0.0, t_max: float = 1.0, t_min: float = 1e-3, noise=None,
           clip_x0: float | None = None):
    """Draw one sample per label in ``y`` (``(B,)``; ``shape`` is one sample's shape).

    ``guidance=None`` uses the conditional prediction alone; otherwise each step evaluates the model
    with the labels and with the null label and calls ``guidance(pred_c, pred_u, c)`` with ``c`` the
    per-example :func:`score_scale` (``(B, 1, ...)``). ``"eps"``: DDIM from ``t_max`` to ``t_min``
    (``eta = 0`` deterministic, ``eta = 1`` DDPM-like ancestral noise) and a final denoising to
    ``t = 0``; ``"flow"``: Euler on ``dx/dt = v`` from ``t_max`` to 0.
    """
    _check_objective(objective)
    if steps < 1:
        raise ValueError(f"steps must be >= 1, got {steps}")
    if not 0.0 <= eta <= 1.0:
        raise ValueError(f"eta must be in [0, 1], got {eta}")
    y = torch.as_tensor(y, dtype=torch.long)
    B = y.shape[0]
    view = (B,) + (1,) * len(shape)
    x = torch.randn((B,) + tuple(shape), generator=generator) if noise is None else noise.clone()
    null = torch.full_like(y, model.n_classes)
    end = t_min if objective == "eps" else 0.0
    ts = torch.linspace(t_max, end, steps + 1)

    def predict(x, t):
        tt = torch.full((B,), float(t))
        if guidance is None:
            return model(x, tt, y)
        both = model(torch.cat([x, x]), torch.cat([tt, tt]), torch.cat([y, null]))
        pc, pu = both[:B], both[B:]
        return guidance(pc, pu, score_scale(tt, objective).view(view))

    for i in range(steps):
        t, tn = float(ts[i]), float(ts[i + 1])
        pred = predict(x, t)
        if objective == "flow":
            x = x + (tn - t) * pred
            continue
        a, s = (float(v) for v in noise_coefficients(t, "eps"))
        an, sn = (float(v) for v in noise_coefficients(tn, "eps"))
        x0 = (x - s * pred) / a
        if clip_x0 is not None:
            x0 = x0.clamp(-clip_x0, clip_x0)
            pred = (x - a * x0) / s
        sig = eta * math.sqrt(max((sn**2 / s**2) * (1 - a**2 / an**2), 0.0))
        dirn = math.sqrt(max(sn**2 - sig**2, 0.0)) * pred
        x = an * x0 + dirn
        if sig > 0:
            x = x + sig * torch.randn(x.shape, generator=generator)
    if objective == "eps":
        a, s = (float(v) for v in noise_coefficients(end, "eps"))
        x = (x - s * predict(x, end)) / a
        if clip_x0 is not None:
            x = x.clamp(-clip_x0, clip_x0)
    return x


class ExactMixtureModel(nn.Module):
    """The exact prediction of a :class:`GaussianMixture` target, as a drop-in "model".

    ``forward(x, t, y)`` returns the ``"eps"`` or ``"flow"`` prediction implied by the exact score
    of the noised mixture: of component ``y`` for ``y < n_classes`` and of the whole mixture for the
    null label ``y == n_classes`` (one component per class). Lets samplers and guidance rules be
    checked against an analytic reference (float64 inside).
    """

    def __init__(self, mixture: GaussianMixture, objective: str = "eps"):
        super().__init__()
        _check_objective(objective)
        self.mixture, self.objective = mixture, objective
        self.n_classes = mixture.n_components

    def forward(self, x, t, y):
        x64 = x.detach().double().reshape(len(x), -1).numpy()
        t = torch.as_tensor(t, dtype=torch.float64)
        y = torch.as_tensor(y).numpy()
        if y.min() < 0 or y.max() > self.n_classes:
            raise ValueError(f"labels must be in 0..{self.n_classes} ({self.n_classes} = no label)")
        out = np.empty_like(x64)
        for tv in np.unique(t.numpy()):
            rows = np.flatnonzero(t.numpy() == tv)
            a, s = (float(v) for v in noise_coefficients(torch.tensor(tv, dtype=torch.float64), self.objective))
            mix = self.mixture.noised(a, s)
            for lab in np.unique(y[rows]):
                r = rows[y[rows] == lab]
                if self.objective == "eps":                       # E[eps | x_t] = -s * score
                    out[r] = -s * mix.score(x64[r], None if lab == self.n_classes else int(lab))
                    continue
                # flow: v = E[eps | x_t] - E[x_0 | x_t], with E[x_0 | x_t, k] by Gaussian conditioning
                # (finite at t = 1, where a = 0)
                g = self.mixture
                resp = (mix.posterior(x64[r]) if lab == self.n_classes
                        else np.eye(self.n_classes)[np.full(len(r), int(lab))])
                gain = a * g.std**2 / mix.std**2                  # (K,)
                x0k = g.means[None] + gain[None, :, None] * (x64[r][:, None, :] - a * g.means[None])
                x0 = (resp[:, :, None] * x0k).sum(1)
                out[r] = (x64[r] - a * x0) / s - x0
        return torch.from_numpy(out).to(x.dtype).reshape(x.shape)


# -------------------------------------------------------------------------------- evaluation


class FeatureClassifier(nn.Module):
    """A small MLP classifier trained on real data; :meth:`features` (its penultimate layer) is the
    feature space of the Frechet distance and of k-NN precision / recall (an Inception-free
    stand-in for FID on small data)."""

    def __init__(self, dim: int, n_classes: int, hidden: int = 128, feat_dim: int = 64):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(dim, hidden), nn.ReLU(), nn.Linear(hidden, feat_dim), nn.ReLU())
        self.head = nn.Linear(feat_dim, n_classes)
        self.dim = dim

    def _flat(self, X):
        X = torch.as_tensor(np.asarray(X), dtype=torch.float32).reshape(len(X), -1)
        if X.shape[1] != self.dim:
            raise ValueError(f"inputs must have {self.dim} features, got {X.shape[1]}")
        return X

    def forward(self, X):
        return self.head(self.body(self._flat(X)))

    @torch.no_grad()
    def features(self, X) -> np.ndarray:
        return self.body(self._flat(X)).numpy().astype(np.float64)

    @torch.no_grad()
    def predict(self, X) -> np.ndarray:
        return self.forward(X).argmax(1).numpy()

    @classmethod
    def fit(cls, X, y, n_classes: int | None = None, epochs: int = 60, seed: int = 0, **kw) -> "FeatureClassifier":
        """Train on ``(X, y)`` (Adam, full passes of batch 64, light Gaussian input noise)."""
        X = np.asarray(X, dtype=np.float32).reshape(len(X), -1)
        y = np.asarray(y, dtype=np.int64)
        n_classes = int(y.max()) + 1 if n_classes is None else n_classes
        g = torch.Generator().manual_seed(int(seed))
        torch.manual_seed(int(seed))
        net = cls(X.shape[1], n_classes, **kw)
        opt = torch.optim.Adam(net.parameters(), lr=2e-3, weight_decay=1e-4)
        Xt, yt = torch.from_numpy(X), torch.from_numpy(y)
        for _ in range(epochs):
            perm = torch.randperm(len(Xt), generator=g)
            for i in range(0, len(Xt), 64):
                b = perm[i:i + 64]
                xb = Xt[b] + 0.1 * torch.randn(Xt[b].shape, generator=g)
                loss = nn.functional.cross_entropy(net(xb), yt[b])
                opt.zero_grad()
                loss.backward()
                opt.step()
        net.eval()
        return net


def frechet_distance(feat_a, feat_b) -> float:
    """``|mu_a - mu_b|^2 + tr(S_a + S_b - 2 (S_a S_b)^{1/2})`` between Gaussian fits of two
    feature sets (Heusel et al. 2017, the FID formula)."""
    from scipy import linalg

    a, b = np.asarray(feat_a, float), np.asarray(feat_b, float)
    if a.ndim != 2 or b.ndim != 2 or a.shape[1] != b.shape[1] or min(len(a), len(b)) < 2:
        raise ValueError(f"need two (n, d) feature arrays with n >= 2 and equal d, got {a.shape} and {b.shape}")
    mu = a.mean(0) - b.mean(0)
    Sa, Sb = np.cov(a, rowvar=False), np.cov(b, rowvar=False)
    Sa, Sb = np.atleast_2d(Sa), np.atleast_2d(Sb)
    covmean = linalg.sqrtm(Sa @ Sb)
    if np.iscomplexobj(covmean):
        covmean = covmean.real
    return float(max(mu @ mu + np.trace(Sa) + np.trace(Sb) - 2 * np.trace(covmean), 0.0))


def knn_precision_recall(real, fake, k: int = 3) -> tuple[float, float]:
    """Improved precision and recall (Kynkaanniemi et al. 2019): precision is the share of fake
    points inside some real point's k-NN ball (radius: distance to its k-th nearest real
    neighbour); recall the share of real points inside some fake point's k-NN ball."""
    real, fake = np.asarray(real, float), np.asarray(fake, float)
    if real.ndim != 2 or fake.ndim != 2 or real.shape[1] != fake.shape[1]:
        raise ValueError(f"need two (n, d) arrays with equal d, got {real.shape} and {fake.shape}")
    if not 1 <= k < min(len(real), len(fake)):
        raise ValueError(f"k must be in 1..{min(len(real), len(fake)) - 1}, got {k}")

    def cover(ref, query):
        dref = np.sqrt(((ref[:, None] - ref[None]) ** 2).sum(-1))
        radius = np.sort(dref, 1)[:, k]                       # column 0 is the point itself
        dq = np.sqrt(((query[:, None] - ref[None]) ** 2).sum(-1))
        return float((dq <= radius[None]).any(1).mean())

    return cover(real, fake), cover(fake, real)
