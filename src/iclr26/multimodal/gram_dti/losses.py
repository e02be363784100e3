"""GRAM-DTI losses: the Gramian-volume contrastive loss, CLIP / pairwise InfoNCE, and the
gradient-driven adaptive modality dropout.

Sources: the paper (Jiang, Mollaysa et al., "GRAM-DTI: Adaptive Multimodal Representation
Learning for Drug-Target Interaction Prediction", ICLR 2026, arXiv 2509.21971) and its official
code, github.com/uta-smile/GRAM-DTI at commit 01952ee, ``pretraining/losses.py`` (cited below as
``losses.py:LINE``), ``models.py``, ``trainer.py`` and ``run.py``.

Volume (paper Sec. 3, "Gramian volume-based multimodal alignment"; ``losses.py:41-125``): for an
anchor embedding ``a`` of sample i and the other modalities' embeddings ``m_1 .. m_k`` of sample
j, all L2-normalised, the Gram matrix is ``G_ij = [v_p . v_q]`` over ``v = (a_i, m_1j, .., m_kj)``
and the volume of the parallelotope they span is

    V_ij = sqrt(|det G_ij|)                                             (the paper's volume)

``V`` is 0 when the vectors are linearly dependent (perfectly aligned) and 1 when they are
orthonormal. With one other modality ``V = sqrt(1 - cos^2) = |sin angle|``. The similarity is
``-V / tau`` and the loss is the symmetric (anchor -> others, others -> anchor) cross-entropy with
the matching sample as the target class (``losses.py:359-365``):

    L_vol = 1/2 [ CE(-V / tau, I) + CE(-V^T / tau, I) ]

with label smoothing 0.1 (``losses.py:362-363``) and tau = 0.07 (``models.py:10``,
``temperature=0.07`` passed to ``GRAM4ModalLoss(contra_temp=...)``).
"""
from __future__ import annotations

import math
import random
from dataclasses import dataclass, field
from typing import Callable, Mapping, Sequence

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

# -- defaults, each with where it is from ------------------------------------------------------
TEMPERATURE = 0.07  # models.py:10 (temperature=0.07) -> losses.py:9 contra_temp; also the CLIP term, losses.py:335
LABEL_SMOOTHING = 0.1  # losses.py:338-339 (L_bi), 362-363 (L_vol), 327/329 (L_IC50)
P_DROP = 0.8  # run.py:34 (--drop_prob default 0.8, the official entry point); the classes' own default is 0.3 (losses.py:9)
STD_MULTIPLIER = 1.5  # losses.py:10 gradient_std_multiplier; run.py:46
HISTORY_LENGTH = 5  # losses.py:10 gradient_history_length; run.py:48
HISTORY_DECAY = 0.9  # losses.py:39 gradient_weight_decay
VOLUME_EPS = 1e-10  # ours (the code has none): |det G| is clamped at eps before the square root, see gram_volumes


def _check_temperature(temperature: float, name: str = "temperature") -> float:
    t = float(temperature)
    if not math.isfinite(t) or t <= 0:
        raise ValueError(f"{name} must be a positive finite number, got {temperature!r}")
    return t


def _check_smoothing(label_smoothing: float) -> float:
    s = float(label_smoothing)
    if not (0.0 <= s < 1.0):
        raise ValueError(f"label_smoothing must be in [0, 1), got {label_smoothing!r}")
    return s


def _check_embeddings(tensors: Sequence[torch.Tensor], names: Sequence[str], same_rows: bool = True) -> None:
    dim = None
    rows = None
    for t, name in zip(tensors, names):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if t.dim() != 2:
            raise ValueError(f"{name} must be 2-D (batch, dim), got shape {tuple(t.shape)}")
        if t.shape[0] == 0 or t.shape[1] == 0:
            raise ValueError(f"{name} must be non-empty, got shape {tuple(t.shape)}")
        if not t.is_floating_point():
            raise TypeError(f"{name} must be a floating-point tensor, got {t.dtype}")
        if not bool(torch.isfinite(t).all()):
            raise ValueError(f"{name} contains NaN or infinite values")
        if dim is None:
            dim, rows = t.shape[1], t.shape[0]
        elif t.shape[1] != dim:
            raise ValueError(f"{name} has dimension {t.shape[1]}, expected {dim} (as {names[0]})")
        elif same_rows and t.shape[0] != rows:
            raise ValueError(f"{name} has {t.shape[0]} rows, expected {rows} (as {names[0]})")


def gram_volumes(anchor: torch.Tensor, others: Sequence[torch.Tensor], eps: float = VOLUME_EPS,
                 normalize: bool = True) -> torch.Tensor:
    """Volume matrix ``V[i, j] = sqrt(|det G(anchor_i, others[0]_j, .., others[k-1]_j)|)``.

    ``anchor`` is ``(B1, D)``; each entry of ``others`` is ``(B2, D)`` (the same B2 for all). The
    Gram matrix of pair (i, j) is the ``(k+1) x (k+1)`` matrix of inner products of the anchor of
    sample i with the other modalities of sample j, as ``losses.py:41-88`` (4 modalities) and
    ``losses.py:90-125`` (3 modalities, after a drop) build it; any k >= 1 works here.

    ``normalize=True`` L2-normalises every row first (the official model does it before the loss,
    ``models.py:75-78``); the volume of unit vectors lies in [0, 1]. The determinant is taken in at
    least float32 (``losses.py:85``: ``torch.det(G.float())``) and the result is returned in the
    inputs' dtype. ``eps`` (ours; the code has none) clamps ``|det G|`` from below before the
    square root: the gradient of ``sqrt`` at 0 is infinite, which turns an exactly aligned
    positive into NaN gradients. With ``eps = 1e-10`` only volumes below 1e-5 are affected; pass
    ``eps=0`` for the code's exact formula.
    """
    if isinstance(others, torch.Tensor):
        raise TypeError("others must be a sequence of tensors (one per non-anchor modality), got a tensor")
    others = list(others)
    if len(others) < 1:
        raise ValueError("others must hold at least one modality besides the anchor")
    eps = float(eps)
    if not math.isfinite(eps) or eps < 0:
        raise ValueError(f"eps must be a non-negative finite number, got {eps!r}")
    _check_embeddings([anchor], ["anchor"])
    _check_embeddings(others, [f"others[{i}]" for i in range(len(others))])
    if others[0].shape[1] != anchor.shape[1]:
        raise ValueError(f"others have dimension {others[0].shape[1]}, anchor has {anchor.shape[1]}")
    if len(others) + 1 > anchor.shape[1]:
        raise ValueError(f"{len(others) + 1} vectors (the anchor and {len(others)} others) in {anchor.shape[1]} "
                         f"dimensions are always linearly dependent, so every volume is 0: the embedding "
                         f"dimension must be at least the number of modalities in the volume ({len(others) + 1})")
    if normalize:
        for t, name in zip([anchor] + others, ["anchor"] + [f"others[{i}]" for i in range(len(others))]):
            if bool((t.detach().norm(dim=1) == 0).any()):
                raise ValueError(f"{name} has an all-zero row: it has no direction to normalise")
    out_dtype = anchor.dtype
    work = torch.promote_types(anchor.dtype, torch.float32)
    a = anchor.to(work)
    ms = [o.to(work) for o in others]
    if normalize:
        a = F.normalize(a, dim=1)
        ms = [F.normalize(m, dim=1) for m in ms]
    b1, b2, k = a.shape[0], ms[0].shape[0], len(ms) + 1
    M = torch.stack(ms, dim=1)  # (B2, k-1, D)
    aa = (a * a).sum(1)  # (B1,)
    am = torch.einsum("id,jmd->ijm", a, M)  # (B1, B2, k-1): anchor_i . m_j
    mm = torch.einsum("jpd,jqd->jpq", M, M)  # (B2, k-1, k-1): Gram block of sample j's others
    if k <= 4:
        # det [[aa, b^T], [b, M]] = aa det(M) - b^T adj(M) b (cofactor expansion along the first
        # row and column; an identity, valid also for singular M, not an approximation; the
        # floating-point error is that of the products, see the README). adj(M) and det(M) depend on j only, so the
        # B1 x B2 determinants cost O(B1 B2 k^2) instead of B1 B2 LU factorisations.
        det_m, adj = _det_adj(mm)
        quad = (torch.bmm(am.transpose(0, 1), adj).transpose(0, 1) * am).sum(-1)  # b_ij^T adj(M_j) b_ij
        det = aa[:, None] * det_m[None, :] - quad
    else:
        G = torch.empty(b1, b2, k, k, dtype=work, device=a.device)
        G[:, :, 0, 0] = aa[:, None]
        G[:, :, 0, 1:] = am
        G[:, :, 1:, 0] = am
        G[:, :, 1:, 1:] = mm[None]
        det = torch.linalg.det(G)
    det = det.abs()
    if eps > 0:
        det = det.clamp(min=eps)
    return det.sqrt().to(out_dtype)


def _det_adj(m: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Determinant and adjugate of a batch of 1x1, 2x2 or 3x3 matrices ``(B, n, n)``, in closed form."""
    n = m.shape[-1]
    if n == 1:
        return m[:, 0, 0], torch.ones_like(m)
    if n == 2:
        p, q, r, s = m[:, 0, 0], m[:, 0, 1], m[:, 1, 0], m[:, 1, 1]
        adj = torch.stack([torch.stack([s, -q], -1), torch.stack([-r, p], -1)], -2)
        return p * s - q * r, adj
    c0, c1, c2 = m[:, :, 0], m[:, :, 1], m[:, :, 2]  # columns
    r0, r1, r2 = torch.cross(c1, c2, dim=-1), torch.cross(c2, c0, dim=-1), torch.cross(c0, c1, dim=-1)
    return (c0 * r0).sum(-1), torch.stack([r0, r1, r2], dim=-2)  # rows of adj(M) = rows of det * M^-1


class GramianVolumeLoss(nn.Module):
    """Symmetric volume contrastive loss ``L_vol`` (``losses.py:293-365``).

    ``loss(anchor, others)`` with ``anchor`` ``(B, D)`` and ``others`` a list of ``(B, D)`` tensors,
    row b of every tensor from the same sample b. Logits ``-V / temperature`` (``losses.py:359``,
    ``volume_to_similarity(method="negative")``), cross-entropy against the diagonal in both
    directions, averaged (``losses.py:362-365``). The official code computes the reverse direction
    as the volume of ``anchor_all`` against sample i's others, transposed (``losses.py:271-273``);
    on one device (no gathered batch) that is exactly ``V^T``, which is what is used here.
    """

    def __init__(self, temperature: float = TEMPERATURE, label_smoothing: float = LABEL_SMOOTHING,
                 eps: float = VOLUME_EPS, normalize: bool = True):
        super().__init__()
        self.temperature = _check_temperature(temperature)
        self.label_smoothing = _check_smoothing(label_smoothing)
        e = float(eps)
        if not math.isfinite(e) or e < 0:
            raise ValueError(f"eps must be a non-negative finite number, got {eps!r}")
        self.eps = e
        self.normalize = bool(normalize)

    def volumes(self, anchor: torch.Tensor, others: Sequence[torch.Tensor]) -> torch.Tensor:
        return gram_volumes(anchor, others, eps=self.eps, normalize=self.normalize)

    def forward(self, anchor: torch.Tensor, others: Sequence[torch.Tensor]) -> torch.Tensor:
        V = self.volumes(anchor, others)
        if V.shape[0] < 2:
            raise ValueError(f"the contrastive loss needs a batch of at least 2 samples (the other samples are "
                             f"the negatives), got {V.shape[0]}")
        if V.shape[0] != V.shape[1]:
            raise ValueError(f"anchor and others must have the same batch size, got {V.shape[0]} and {V.shape[1]}")
        logits = -V.float() / self.temperature
        target = torch.arange(V.shape[0], device=V.device)
        loss = 0.5 * (F.cross_entropy(logits, target, label_smoothing=self.label_smoothing)
                      + F.cross_entropy(logits.T, target, label_smoothing=self.label_smoothing))
        return loss.to(anchor.dtype)


def clip_loss(x: torch.Tensor, y: torch.Tensor, temperature: float = TEMPERATURE,
              label_smoothing: float = LABEL_SMOOTHING, normalize: bool = True) -> torch.Tensor:
    """Symmetric InfoNCE between two modalities, ``L_bi`` of the paper (``losses.py:335-340``).

    ``1/2 [CE(x y^T / tau, I) + CE(y x^T / tau, I)]`` on L2-normalised rows, label smoothing 0.1.
    """
    temperature = _check_temperature(temperature)
    label_smoothing = _check_smoothing(label_smoothing)
    _check_embeddings([x, y], ["x", "y"])
    if x.shape[0] < 2:
        raise ValueError(f"the contrastive loss needs a batch of at least 2 samples (the other samples are "
                         f"the negatives), got {x.shape[0]}")
    if normalize:
        x, y = F.normalize(x, dim=1), F.normalize(y, dim=1)
    logits = (x @ y.T).float() / temperature
    target = torch.arange(x.shape[0], device=x.device)
    return 0.5 * (F.cross_entropy(logits, target, label_smoothing=label_smoothing)
                  + F.cross_entropy(logits.T, target, label_smoothing=label_smoothing))


def pairwise_infonce(views: Sequence[torch.Tensor], temperature: float = TEMPERATURE,
                     label_smoothing: float = LABEL_SMOOTHING, normalize: bool = True) -> torch.Tensor:
    """Sum of :func:`clip_loss` over every unordered pair of modalities (the pairwise comparator:
    what one writes to align k modalities without a higher-order term; not in the official code)."""
    views = list(views)
    if len(views) < 2:
        raise ValueError(f"views must hold at least two modalities, got {len(views)}")
    total = 0.0
    for i in range(len(views)):
        for j in range(i + 1, len(views)):
            total = total + clip_loss(views[i], views[j], temperature, label_smoothing, normalize)
    return total


# -- modality dropout --------------------------------------------------------------------------
@dataclass
class DropDecision:
    """One step's decision: ``dropped`` (None: all modalities), the ``anchor`` and the ``others``
    (in the order used for the volume), the smoothed ``scores`` and the step's raw ``norms``."""

    dropped: str | None
    anchor: str
    others: list[str]
    scores: dict = field(default_factory=dict)
    norms: dict = field(default_factory=dict)


class _ModalityDropoutBase:
    def __init__(self, modalities: Sequence[str], p_drop: float = P_DROP, full_anchor: str | None = None,
                 seed: int | None = None):
        modalities = list(modalities)
        if len(modalities) < 3:
            raise ValueError(f"modalities must name at least 3 modalities (one is dropped and a volume needs 2), "
                             f"got {modalities}")
        if len(set(modalities)) != len(modalities):
            raise ValueError(f"modalities must be distinct, got {modalities}")
        p = float(p_drop)
        if not (0.0 <= p <= 1.0):
            raise ValueError(f"p_drop must be in [0, 1], got {p_drop!r}")
        self.modalities = modalities
        self.p_drop = p
        # losses.py:213, 268-270: without a drop the anchor is the protein and the others follow
        self.full_anchor = modalities[-1] if full_anchor is None else full_anchor
        if self.full_anchor not in modalities:
            raise ValueError(f"full_anchor {full_anchor!r} is not one of modalities {modalities}")
        self.reseed(seed)
        self.counts = {m: 0 for m in modalities}
        self.counts["none"] = 0

    def reseed(self, seed: int | None) -> None:
        """Three independent streams, each a function of ``seed`` only: ``gate_rng`` (drop or not,
        one draw per step), ``pick_rng`` (which modality, where the rule is random) and
        ``anchor_rng`` (the anchor after a drop). Two dropout rules with the same seed therefore
        drop on exactly the same steps and draw their anchors from the same stream; only the
        choice of the dropped modality differs (the official code draws all three from one global
        stream, ``losses.py:209, 177, 240``; the rule and the rates are the same)."""
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, (int, np.integer))):
            raise TypeError(f"seed must be an int or None, got {seed!r}")
        self.seed = None if seed is None else int(seed)
        mk = (lambda tag: random.Random()) if seed is None else (lambda tag: random.Random(f"{int(seed)}:{tag}"))
        self.gate_rng, self.pick_rng, self.anchor_rng = mk("gate"), mk("pick"), mk("anchor")

    def _full(self, scores=None, norms=None) -> DropDecision:
        others = [m for m in self.modalities if m != self.full_anchor]
        self.counts["none"] += 1
        return DropDecision(None, self.full_anchor, others, dict(scores or {}), dict(norms or {}))

    def _dropped(self, dropped: str, scores=None, norms=None) -> DropDecision:
        remaining = [m for m in self.modalities if m != dropped]
        anchor = self.anchor_rng.choice(remaining)  # losses.py:240: a random anchor among the remaining
        self.counts[dropped] += 1
        return DropDecision(dropped, anchor, [m for m in remaining if m != anchor], dict(scores or {}),
                            dict(norms or {}))

    def drop_rates(self) -> dict:
        n = sum(self.counts.values())
        return {k: (v / n if n else 0.0) for k, v in self.counts.items()}


class AdaptiveModalityDropout(_ModalityDropoutBase):
    """Gradient-informed modality dropout (paper Sec. 3, "adaptive modality dropout";
    ``losses.py:127-249``).

    ``step(grad_norms)`` decides one training step:
    1. with probability ``1 - p_drop`` nothing is dropped (``losses.py:209``) and the norms are
       not computed; ``grad_norms`` may be a mapping or a zero-argument callable (called only when
       needed: the official code computes the gradients only on a drop step, ``losses.py:219``);
    2. otherwise the per-modality gradient norms ``||dL_base / dz_m||_2`` (``losses.py:141-161``;
       ``L_base = lambda_2 L_bi + lambda_3 L_IC50``, ``losses.py:342-345``) are appended to a history
       of the last ``history_length`` values (``losses.py:165-170``);
    3. :meth:`choose` applies the rule to the history.

    :meth:`choose`: with fewer than 2 recorded steps, a uniform choice among "none" and the
    modalities (``losses.py:176-179``). Otherwise each modality's score is the weighted mean of
    its history with weights ``decay^age`` (age 0 = newest; ``losses.py:181-186``); the first
    modality (in ``modalities`` order) whose score exceeds ``mean + std_multiplier * std`` (numpy's
    population std over the modalities) is dropped, else the one with the smallest score (ties
    broken at random) (``losses.py:194-204``). A random anchor among the remaining modalities
    follows (``losses.py:237-240``).

    Defaults: ``p_drop = 0.8`` (``run.py:34``, the official entry point; ``losses.py:9`` defaults
    to 0.3), ``std_multiplier = 1.5`` (``losses.py:10``), ``history_length = 5``
    (``losses.py:10``), ``decay = 0.9`` (``losses.py:39``).
    """

    def __init__(self, modalities: Sequence[str] = ("text", "hta", "smiles", "protein"), p_drop: float = P_DROP,
                 std_multiplier: float = STD_MULTIPLIER, history_length: int = HISTORY_LENGTH,
                 decay: float = HISTORY_DECAY, full_anchor: str | None = None, seed: int | None = None):
        super().__init__(modalities, p_drop, full_anchor, seed)
        s = float(std_multiplier)
        if not math.isfinite(s) or s < 0:
            raise ValueError(f"std_multiplier must be a non-negative finite number, got {std_multiplier!r}")
        if isinstance(history_length, bool) or not isinstance(history_length, (int, np.integer)) or history_length < 2:
            raise ValueError(f"history_length must be an integer >= 2 (the rule needs 2 recorded steps), "
                             f"got {history_length!r}")
        d = float(decay)
        if not (0.0 < d <= 1.0):
            raise ValueError(f"decay must be in (0, 1], got {decay!r}")
        self.std_multiplier = s
        self.history_length = int(history_length)
        self.decay = d
        self.history = {m: [] for m in self.modalities}

    def update(self, grad_norms: Mapping[str, float]) -> None:
        """Append one step's gradient norms (a missing modality counts 0, as ``losses.py:167``)."""
        if not isinstance(grad_norms, Mapping):
            raise TypeError(f"grad_norms must be a mapping modality -> norm, got {type(grad_norms).__name__}")
        unknown = set(grad_norms) - set(self.modalities)
        if unknown:
            raise ValueError(f"grad_norms names unknown modalities {sorted(unknown)}; expected {self.modalities}")
        for m in self.modalities:
            v = float(grad_norms.get(m, 0.0))
            if not math.isfinite(v) or v < 0:
                raise ValueError(f"grad_norms[{m!r}] must be a non-negative finite number, got {grad_norms.get(m)!r}")
            self.history[m].append(v)
            if len(self.history[m]) > self.history_length:
                self.history[m].pop(0)

    def scores(self) -> dict:
        """Weighted mean of each modality's history, weights ``decay^(len - 1 - i)`` (``losses.py:181-186``)."""
        out = {}
        for m in self.modalities:
            h = self.history[m]
            w = [self.decay ** (len(h) - 1 - i) for i in range(len(h))]
            out[m] = sum(x * wi for x, wi in zip(h, w)) / sum(w) if h else 0.0
        return out

    def choose(self) -> str | None:
        """The modality to drop given the current history (None: drop nothing)."""
        if min(len(self.history[m]) for m in self.modalities) < 2:
            pick = self.pick_rng.choice(["none"] + self.modalities)
            return None if pick == "none" else pick
        sc = self.scores()
        vals = list(sc.values())
        threshold = float(np.mean(vals)) + self.std_multiplier * float(np.std(vals))
        for m in self.modalities:
            if sc[m] > threshold:
                return m
        low = min(vals)
        return self.pick_rng.choice([m for m in self.modalities if sc[m] == low])

    def step(self, grad_norms: Mapping[str, float] | Callable[[], Mapping[str, float]]) -> DropDecision:
        if self.gate_rng.random() > self.p_drop:  # losses.py:209
            return self._full()
        norms = grad_norms() if callable(grad_norms) else grad_norms
        self.update(norms)
        dropped = self.choose()
        scores = self.scores()
        if dropped is None:
            return self._full(scores, norms)
        return self._dropped(dropped, scores, norms)


class RandomModalityDropout(_ModalityDropoutBase):
    """Control: with probability ``p_drop`` drop a uniformly chosen modality of ``droppable``
    (default: all), then a random anchor among the rest; no gradients are looked at. Same rate,
    gate stream and anchor rule as :class:`AdaptiveModalityDropout` (not in the official code: it
    isolates the gradient rule). ``droppable=("text", "hta")`` drops only the modalities outside
    the ``L_bi`` pair, which is what the adaptive rule ends up doing when their ``L_bi`` gradients
    are zero."""

    def __init__(self, modalities: Sequence[str] = ("text", "hta", "smiles", "protein"), p_drop: float = P_DROP,
                 full_anchor: str | None = None, seed: int | None = None, droppable: Sequence[str] | None = None):
        super().__init__(modalities, p_drop, full_anchor, seed)
        drop = list(self.modalities if droppable is None else droppable)
        bad = [m for m in drop if m not in self.modalities]
        if not drop or bad or len(set(drop)) != len(drop):
            raise ValueError(f"droppable must name distinct modalities of {self.modalities}, got {droppable!r}")
        self.droppable = drop

    def step(self, grad_norms=None) -> DropDecision:
        if self.gate_rng.random() > self.p_drop:
            return self._full()
        return self._dropped(self.pick_rng.choice(self.droppable))
