"""A small GRAM-DTI pretrainer: projector heads over frozen per-modality features, trained with
``lambda_1 L_vol + lambda_2 L_bi + lambda_3 L_IC50`` and (optionally) adaptive modality dropout.

Official code: ``models.py`` (projectors, IC50 head), ``losses.py`` (the objective), ``trainer.py``
(Adam, gradient clipping at 1.0). ``GRAMDTIPretrainer.fit`` runs on a user's own features: a dict
``{modality: (N, d_m) tensor}`` with row n of every tensor from the same drug-target quadruplet.
"""
from __future__ import annotations

import math
from typing import Mapping, Sequence

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from .losses import (LABEL_SMOOTHING, P_DROP, TEMPERATURE, AdaptiveModalityDropout, GramianVolumeLoss,
                     RandomModalityDropout, clip_loss, pairwise_infonce)

OBJECTIVES = ("gram", "clip", "pairwise", "pairwise_bi")
DROPOUTS = (None, "adaptive", "random", "random_aux")
N_IC50 = 3  # IC50 bins < 10 uM, 10-1000 uM, > 1000 uM (paper Sec. 3; models.py:71, Linear(256, 3))


class NonFiniteTrainingError(RuntimeError):
    """Raised when a training step produces a non-finite loss or gradient."""


def projector(in_dim: int, hidden: int = 768, out_dim: int = 512, dropout: float = 0.1) -> nn.Sequential:
    """The official projector (``models.py:29-38``): Linear-GELU-LayerNorm-Dropout(0.1)-Linear(->512)-
    GELU-LayerNorm-Linear(->projection_dim). The second hidden width is 512 in the code; here it is
    ``hidden`` too (the code's 768 -> 512 taper, scaled down with ``hidden``)."""
    return nn.Sequential(nn.Linear(in_dim, hidden), nn.GELU(), nn.LayerNorm(hidden), nn.Dropout(dropout),
                         nn.Linear(hidden, hidden), nn.GELU(), nn.LayerNorm(hidden), nn.Linear(hidden, out_dim))


def _positive_int(x, name: str) -> int:
    if isinstance(x, bool) or not isinstance(x, (int, np.integer)) or x < 1:
        raise ValueError(f"{name} must be a positive integer, got {x!r}")
    return int(x)


def _nonneg(x, name: str) -> float:
    v = float(x)
    if not math.isfinite(v) or v < 0:
        raise ValueError(f"{name} must be a non-negative finite number, got {x!r}")
    return v


def _check_ic50(ic50, n: int) -> None:
    """IC50 classes: an integer tensor of shape (n,) with values 0, 1, 2 or -1 (missing)."""
    if not isinstance(ic50, torch.Tensor):
        raise TypeError(f"ic50 must be a torch.Tensor of class ids, got {type(ic50).__name__}")
    if ic50.shape != (n,):
        raise ValueError(f"ic50 must have shape ({n},) (one class id per quadruplet), got {tuple(ic50.shape)}")
    if ic50.is_floating_point() or ic50.is_complex() or ic50.dtype == torch.bool:
        raise TypeError(f"ic50 must be an integer tensor of class ids 0, 1, 2 and -1 for a missing measurement, "
                        f"got dtype {ic50.dtype} (NaN or fractional values are not class ids; mark a missing "
                        f"value with -1)")
    if bool(((ic50 < -1) | (ic50 >= N_IC50)).any()):
        raise ValueError(f"ic50 must hold class ids 0, 1, 2 or -1 for a missing measurement, got values "
                         f"{sorted(set(ic50.unique().tolist()))[:10]}")


class GRAMDTIPretrainer(nn.Module):
    """Projector heads + the GRAM-DTI objective over frozen features.

    Parameters (defaults and their sources):
    - ``input_dims``: ``{modality: feature dim}``; the order fixes the volume's "others" order and
      the last modality is the no-drop anchor (the official order is text, HTA, SMILES, protein
      with the protein as anchor, ``losses.py:268-270``).
    - ``bi_pair = ("smiles", "protein")``: the two modalities of ``L_bi`` (``losses.py:335-340``),
      the pair whose embeddings DTI prediction uses downstream.
    - ``shared = {"hta": "text"}`` in the official model (HTA goes through the text projector,
      ``models.py:77``); default None here (a projector per modality).
    - ``objective``: ``"gram"`` (``lambda_1 L_vol + lambda_2 L_bi``, ``losses.py:367``), ``"clip"``
      (``L_bi`` only) or ``"pairwise"`` (sum of InfoNCE over every pair of modalities; the
      comparator, replacing both L_vol and L_bi). ``"pairwise_bi"`` is the pairwise sum + ``lambda_2 L_bi``
      (the comparator with the same extra SMILES-protein supervision the ``"gram"`` objective has).
      ``L_IC50`` is added with weight ``lambda_3`` when ``ic50=True`` and a batch has IC50 labels.
      With ``"gram"``, ``projection_dim`` must be at least the number of modalities (k vectors in
      fewer than k dimensions always have volume 0).
    - ``dropout``: None, ``"adaptive"`` (:class:`AdaptiveModalityDropout`), ``"random"`` (a
      uniformly drawn modality) or ``"random_aux"`` (a uniformly drawn modality outside
      ``bi_pair``); only with ``objective="gram"`` (it chooses which modalities enter the volume).
      Every rule uses the same gate stream for a given seed (see ``_ModalityDropoutBase.reseed``).
    - ``p_drop = 0.8`` (``run.py:34``), ``temperature = 0.07`` (``models.py:10``),
      ``label_smoothing = 0.1`` (``losses.py:338, 362, 327``), ``lambdas = (1, 1, 1)``
      (``run.py:40-45``), ``hidden = 768`` and ``projection_dim = 512`` (``models.py:30-37``),
      ``head_dropout = 0.1`` (``models.py:33``), IC50 head ``4 * projection_dim -> 512 -> 256 -> 3``
      with dropout 0.3 (``models.py:62-72``; its widths scale with ``ic50_hidden``).
    - ``class_weights``: IC50 class weights (the code uses the dataset's, ``trainer.py:160``);
      None: unweighted.
    """

    def __init__(self, input_dims: Mapping[str, int], *, bi_pair: Sequence[str] = ("smiles", "protein"),
                 shared: Mapping[str, str] | None = None, objective: str = "gram", dropout: str | None = "adaptive",
                 ic50: bool = True, p_drop: float = P_DROP, temperature: float = TEMPERATURE,
                 label_smoothing: float = LABEL_SMOOTHING, lambdas: Sequence[float] = (1.0, 1.0, 1.0),
                 hidden: int = 768, projection_dim: int = 512, head_dropout: float = 0.1, ic50_hidden: int = 512,
                 class_weights: Sequence[float] | None = None, seed: int = 0):
        super().__init__()
        if not isinstance(input_dims, Mapping) or len(input_dims) < 2:
            raise ValueError(f"input_dims must map at least two modality names to feature dims, got {input_dims!r}")
        self.modalities = [str(m) for m in input_dims]
        dims = {m: _positive_int(d, f"input_dims[{m!r}]") for m, d in input_dims.items()}
        if objective not in OBJECTIVES:
            raise ValueError(f"objective must be one of {OBJECTIVES}, got {objective!r}")
        if dropout not in DROPOUTS:
            raise ValueError(f"dropout must be one of {DROPOUTS}, got {dropout!r}")
        if dropout is not None and objective != "gram":
            raise ValueError(f"dropout={dropout!r} needs objective='gram' (it selects the volume's modalities)")
        if dropout is not None and len(self.modalities) < 3:
            raise ValueError("dropout needs at least 3 modalities")
        bi_pair = tuple(bi_pair)
        if len(bi_pair) != 2 or any(m not in dims for m in bi_pair) or bi_pair[0] == bi_pair[1]:
            raise ValueError(f"bi_pair must name two distinct modalities of input_dims {self.modalities}, got {bi_pair}")
        shared = dict(shared or {})
        for m, owner in shared.items():
            if m not in dims or owner not in dims or m == owner or owner in shared:
                raise ValueError(f"shared must map a modality to another modality that owns a projector, got {m!r}: {owner!r}")
            if dims[m] != dims[owner]:
                raise ValueError(f"shared modality {m!r} has dim {dims[m]}, its projector's owner {owner!r} has {dims[owner]}")
        lambdas = tuple(_nonneg(x, "lambdas") for x in lambdas)
        if len(lambdas) != 3:
            raise ValueError(f"lambdas must hold (lambda_1, lambda_2, lambda_3), got {lambdas}")
        if not any(lambdas):
            raise ValueError("lambdas are all 0: the objective would be identically 0")
        hd = float(head_dropout)
        if not (0.0 <= hd < 1.0):
            raise ValueError(f"head_dropout must be in [0, 1), got {head_dropout!r}")
        self.bi_pair = bi_pair
        self.shared = shared
        self.objective = objective
        self.dropout_kind = dropout
        self.use_ic50 = bool(ic50)
        self.lambdas = lambdas
        self.temperature = float(temperature)
        self.label_smoothing = float(label_smoothing)
        self.volume_loss = GramianVolumeLoss(temperature, label_smoothing)
        hidden = _positive_int(hidden, "hidden")
        projection_dim = _positive_int(projection_dim, "projection_dim")
        if objective == "gram" and projection_dim < len(self.modalities):
            raise ValueError(f"projection_dim={projection_dim} is too small for the Gram volume of "
                             f"{len(self.modalities)} modalities: {len(self.modalities)} vectors in fewer "
                             f"dimensions are always linearly dependent (volume 0); use projection_dim >= "
                             f"{len(self.modalities)}")
        ic50_hidden = _positive_int(ic50_hidden, "ic50_hidden")
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(int(seed))
            self.projectors = nn.ModuleDict({m: projector(dims[m], hidden, projection_dim, hd)
                                             for m in self.modalities if m not in shared})
            k = len(self.modalities)
            self.ic50_head = nn.Sequential(
                nn.Linear(projection_dim * k, ic50_hidden), nn.GELU(), nn.LayerNorm(ic50_hidden), nn.Dropout(0.3),
                nn.Linear(ic50_hidden, max(1, ic50_hidden // 2)), nn.GELU(), nn.LayerNorm(max(1, ic50_hidden // 2)),
                nn.Dropout(0.3), nn.Linear(max(1, ic50_hidden // 2), N_IC50))
        if class_weights is not None:
            w = torch.as_tensor(class_weights, dtype=torch.float32)
            if w.shape != (N_IC50,) or not bool(torch.isfinite(w).all()) or bool((w <= 0).any()):
                raise ValueError(f"class_weights must be {N_IC50} positive finite numbers, got {class_weights!r}")
            self.register_buffer("class_weights", w)
        else:
            self.class_weights = None
        self.drop = None
        if dropout == "adaptive":
            self.drop = AdaptiveModalityDropout(self.modalities, p_drop=p_drop, seed=seed)
        elif dropout == "random":
            self.drop = RandomModalityDropout(self.modalities, p_drop=p_drop, seed=seed)
        elif dropout == "random_aux":
            aux = [m for m in self.modalities if m not in bi_pair]
            if not aux:
                raise ValueError("dropout='random_aux' needs a modality outside bi_pair")
            self.drop = RandomModalityDropout(self.modalities, p_drop=p_drop, seed=seed, droppable=aux)
        self.input_dims = dims

    # -- embeddings -----------------------------------------------------------------------------
    def _check_views(self, views: Mapping[str, torch.Tensor], name: str = "views",
                     modalities: Sequence[str] | None = None) -> int:
        mods = list(self.modalities if modalities is None else modalities)
        if not isinstance(views, Mapping):
            raise TypeError(f"{name} must be a mapping modality -> tensor, got {type(views).__name__}")
        unknown = [m for m in mods if m not in self.input_dims]
        if unknown:
            raise ValueError(f"modalities {unknown} are unknown; expected a subset of {self.modalities}")
        if not mods:
            raise ValueError("modalities must name at least one modality")
        missing = [m for m in mods if m not in views]
        if missing:
            raise ValueError(f"{name} lacks modalities {missing} (expected {mods})")
        n = None
        for m in mods:
            x = views[m]
            if not isinstance(x, torch.Tensor):
                raise TypeError(f"{name}[{m!r}] must be a torch.Tensor, got {type(x).__name__}")
            if x.dim() != 2 or x.shape[1] != self.input_dims[m]:
                raise ValueError(f"{name}[{m!r}] must have shape (N, {self.input_dims[m]}), got {tuple(x.shape)}")
            if x.shape[0] == 0:
                raise ValueError(f"{name}[{m!r}] is empty")
            if not x.is_floating_point() or not bool(torch.isfinite(x).all()):
                raise ValueError(f"{name}[{m!r}] must be finite floating-point values")
            if n is None:
                n = x.shape[0]
            elif x.shape[0] != n:
                raise ValueError(f"{name}[{m!r}] has {x.shape[0]} rows, expected {n} (one row per quadruplet)")
        return n

    def _proj(self, m: str) -> nn.Module:
        return self.projectors[self.shared.get(m, m)]

    def embed(self, views: Mapping[str, torch.Tensor], modalities: Sequence[str] | None = None) -> dict:
        """L2-normalised projections (``models.py:74-80``) of the given modalities (default all)."""
        mods = list(self.modalities if modalities is None else modalities)
        self._check_views(views, "views", mods)
        return {m: F.normalize(self._proj(m)(views[m]), dim=1) for m in mods}

    @torch.no_grad()
    def transform(self, views: Mapping[str, torch.Tensor], modalities: Sequence[str] | None = None,
                  batch_size: int = 4096) -> dict:
        """Embeddings in eval mode, without gradients, as float numpy arrays."""
        mods = list(self.modalities if modalities is None else modalities)
        n = self._check_views(views, "views", mods)
        batch_size = _positive_int(batch_size, "batch_size")
        was = self.training
        self.eval()
        out = {m: [] for m in mods}
        for i in range(0, n, batch_size):
            e = self.embed({m: views[m][i:i + batch_size] for m in mods}, mods)
            for m in mods:
                out[m].append(e[m].cpu().numpy())
        self.train(was)
        return {m: np.concatenate(v) for m, v in out.items()}

    # -- objective ------------------------------------------------------------------------------
    def loss(self, views: Mapping[str, torch.Tensor], ic50: torch.Tensor | None = None) -> tuple[torch.Tensor, dict]:
        """The training objective on one batch; ``ic50`` holds class ids 0..2 or -1 (missing).

        Returns ``(loss, info)`` with the terms and the step's :class:`DropDecision` (if any).
        """
        n = self._check_views(views)
        if n < 2:
            raise ValueError(f"a batch of {n} quadruplet(s): the contrastive terms need at least 2 (the other "
                             f"samples are the negatives)")
        if ic50 is not None:
            _check_ic50(ic50, n)
        z = self.embed(views)
        for m in self.modalities:
            if not bool(torch.isfinite(z[m]).all()):
                raise NonFiniteTrainingError(f"non-finite projected embedding of modality {m!r}")
        l1, l2, l3 = self.lambdas
        info = {}
        ic50_loss = None
        if self.use_ic50 and ic50 is not None:
            mask = ic50 >= 0
            if bool(mask.any()):
                logits = self.ic50_head(torch.cat([z[m] for m in self.modalities], dim=1))
                ic50_loss = F.cross_entropy(logits[mask], ic50[mask].long(), weight=self.class_weights,
                                            label_smoothing=self.label_smoothing)  # losses.py:319-329
                info["ic50"] = float(ic50_loss.detach())
        a, b = self.bi_pair
        if self.objective in ("pairwise", "pairwise_bi"):
            total = pairwise_infonce([z[m] for m in self.modalities], self.temperature, self.label_smoothing)
            info["pairwise"] = float(total.detach())
            if self.objective == "pairwise_bi":
                bi = clip_loss(z[a], z[b], self.temperature, self.label_smoothing)
                info["bi"] = float(bi.detach())
                total = total + l2 * bi
            if ic50_loss is not None:
                total = total + l3 * ic50_loss
            return total, info
        bi = clip_loss(z[a], z[b], self.temperature, self.label_smoothing)
        info["bi"] = float(bi.detach())
        base = l2 * bi + (l3 * ic50_loss if ic50_loss is not None else 0.0)  # losses.py:342-345
        if self.objective == "clip":
            return base, info
        if self.drop is not None and self.training:
            def norms():
                grads = torch.autograd.grad(base, [z[m] for m in self.modalities], retain_graph=True,
                                            allow_unused=True)  # losses.py:146-153
                return {m: (0.0 if g is None else float(g.norm())) for m, g in zip(self.modalities, grads)}
            dec = self.drop.step(norms)
            info["drop"] = dec
            anchor, others = dec.anchor, dec.others
        else:
            anchor, others = self.modalities[-1], self.modalities[:-1]
        vol = self.volume_loss(z[anchor], [z[m] for m in others])
        info["vol"] = float(vol.detach())
        return l1 * vol + base, info  # losses.py:367

    # -- training -------------------------------------------------------------------------------
    def fit(self, views: Mapping[str, torch.Tensor], ic50: torch.Tensor | None = None, *, steps: int = 1000,
            batch_size: int = 1280, lr: float = 1e-4, clip_grad: float = 1.0, seed: int = 0,
            log_every: int = 0) -> dict:
        """Adam (``trainer.py:191``, lr 1e-4) for ``steps`` steps on shuffled batches of
        ``batch_size`` (``run.py:22``: 1280), gradients clipped at norm 1.0 (``trainer.py:64``).

        Raises :class:`NonFiniteTrainingError` on a non-finite loss or gradient. Returns a history
        with the losses and the drop counts.
        """
        n = self._check_views(views)
        steps = _positive_int(steps, "steps")
        batch_size = _positive_int(batch_size, "batch_size")
        if batch_size < 2:
            raise ValueError(f"batch_size must be at least 2 (the contrastive losses take their negatives from the "
                             f"batch; with 1 sample every loss is 0), got {batch_size}")
        if n < 2:
            raise ValueError(f"views hold {n} quadruplet; the contrastive losses need at least 2")
        if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
            raise TypeError(f"seed must be an int, got {seed!r}")
        lr = float(lr)
        if not math.isfinite(lr) or lr <= 0:
            raise ValueError(f"lr must be a positive finite number, got {lr!r}")
        clip_grad = float(clip_grad)
        if not math.isfinite(clip_grad) or clip_grad <= 0:
            raise ValueError(f"clip_grad must be a positive finite number, got {clip_grad!r}")
        if ic50 is not None:
            _check_ic50(ic50, n)
        params = [p for p in self.parameters() if p.requires_grad]
        opt = torch.optim.Adam(params, lr=lr)
        gen = torch.Generator().manual_seed(int(seed))
        bs = min(batch_size, n)
        losses = []
        if self.drop is not None:
            self.drop.reseed(int(seed))  # same seed -> same gate / anchor streams for every dropout rule
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(int(seed))  # the heads' nn.Dropout masks: a function of the seed, not of earlier fits
            self._fit_steps(views, ic50, opt, params, gen, n, bs, steps, clip_grad, losses)
        self.eval()
        return {"losses": losses, "drop_rates": (self.drop.drop_rates() if self.drop is not None else {})}

    def _fit_steps(self, views, ic50, opt, params, gen, n, bs, steps, clip_grad, losses):
        self.train()
        perm, pos = torch.randperm(n, generator=gen), 0
        for step in range(1, steps + 1):
            if pos + bs > n:
                perm, pos = torch.randperm(n, generator=gen), 0
            idx = perm[pos:pos + bs]
            pos += bs
            batch = {m: views[m][idx] for m in self.modalities}
            try:
                loss, _ = self.loss(batch, None if ic50 is None else ic50[idx])
            except NonFiniteTrainingError as e:
                raise NonFiniteTrainingError(f"{e} at step {step}") from None
            if not bool(torch.isfinite(loss)):
                raise NonFiniteTrainingError(f"non-finite loss {float(loss)} at step {step}")
            opt.zero_grad(set_to_none=True)
            loss.backward()
            gnorm = nn.utils.clip_grad_norm_(params, clip_grad)
            if not bool(torch.isfinite(gnorm)):
                raise NonFiniteTrainingError(f"non-finite gradient norm {float(gnorm)} at step {step}")
            opt.step()
            losses.append(float(loss.detach()))
