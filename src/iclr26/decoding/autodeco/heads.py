"""AutoDeco heads and losses.

Paper: Zhichao Wang et al., "The End of Manual Decoding: Towards Truly End-to-End Language Models",
arXiv:2510.26697 (ICLR 2026). Official code: https://github.com/Zacks917/AutoDeco (not copied;
written from the paper's Section 2 description).

Two small MLP heads read the frozen language model's last hidden state ``h_t`` and predict a
token-level temperature ``T_t`` and top-p ``P_t`` (Sec. 2.1). They are trained with the model's
own next-token cross-entropy through a differentiable "soft" top-p (Sec. 2.2), so no labels for
``T`` or ``P`` are needed.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

__all__ = [
    "AutoDecoConfig",
    "AutoDecoHeads",
    "soft_top_p_probs",
    "top_p_filter",
    "warp_logits",
    "autodeco_loss",
    "probability_features",
    "autodeco_step",
]


@dataclass
class AutoDecoConfig:
    """Sizes of the two heads.

    ``head_hidden=256`` and ``max_temperature=2.0`` (a sigmoid scaled to (0, 2)) follow the
    released head architecture (paper Sec. 2.1: "lightweight MLP heads"; sizes from the official
    code's ``TempHead``/``TopPHead``). ``use_prob_features`` adds four statistics of the
    temperature-scaled distribution (max probability, entropy, variance, top-5 mass) to the top-p
    head's input, as the released heads do; the paper's Sec. 2.1 conditions the top-p head on
    ``h_t`` and the predicted temperature.
    """

    hidden_size: int
    head_hidden: int = 256
    max_temperature: float = 2.0
    use_prob_features: bool = True

    def __post_init__(self):
        if not isinstance(self.hidden_size, int) or self.hidden_size < 1:
            raise ValueError(f"hidden_size must be a positive integer, got {self.hidden_size!r}")
        if not isinstance(self.head_hidden, int) or self.head_hidden < 1:
            raise ValueError(f"head_hidden must be a positive integer, got {self.head_hidden!r}")
        if not self.max_temperature > 0:
            raise ValueError(f"max_temperature must be > 0, got {self.max_temperature!r}")
        if not math.isfinite(self.max_temperature):
            raise ValueError(f"max_temperature must be finite (> 0), got {self.max_temperature!r}")


def _features_from_logp(logp: torch.Tensor, top: torch.Tensor) -> torch.Tensor:
    """The four statistics from log-probabilities ``logp`` and the descending top probabilities
    ``top`` (at least ``min(5, V)`` of them). Tokens with probability 0 (``-inf`` logits, e.g. an
    EOS blocked by ``min_new_tokens``) add 0 to the entropy, not ``0 * -inf = NaN``."""
    p = logp.exp()
    v = p.shape[-1]
    k = min(5, v)
    entropy = -(p * logp).nansum(-1)  # 0 * -inf = NaN only where p = 0: those terms are 0
    # unbiased variance (as torch.var) in one pass over p: (sum p^2 - (sum p)^2 / V) / (V - 1)
    var = ((p * p).sum(-1) - p.sum(-1).square() / v) / max(v - 1, 1)
    return torch.stack([top[..., 0], entropy, var, top[..., :k].sum(-1)], dim=-1)


def probability_features(logits: torch.Tensor) -> torch.Tensor:
    """``[max p, entropy, variance of p, top-5 mass]`` of ``softmax(logits)`` along the last axis
    (the released heads' extra top-p inputs, see :class:`AutoDecoConfig`)."""
    logp = torch.log_softmax(logits.float(), dim=-1)
    k = min(5, logp.shape[-1])
    return _features_from_logp(logp, logp.topk(k, dim=-1).values.exp())


class AutoDecoHeads(nn.Module):
    """Temperature head and top-p head on a frozen LM's last hidden state (paper Sec. 2.1).

    ``T_t = max_temperature * sigmoid(MLP_T(h_t))`` and
    ``P_t = sigmoid(MLP_P([h_t, T_t, stats(softmax(l_t / T_t))]))`` where ``T_t`` enters the top-p
    head detached, so the top-p head does not move the temperature head through its input.

    ``forward(hidden, logits) -> (temperature, top_p)``, both shaped like ``hidden[..., 0]``.
    """

    def __init__(self, config: AutoDecoConfig):
        super().__init__()
        if not isinstance(config, AutoDecoConfig):
            raise TypeError(f"config must be an AutoDecoConfig, got {type(config).__name__}")
        self.config = config
        h, k = config.hidden_size, config.head_hidden
        self.temp_head = nn.Sequential(nn.Linear(h, k), nn.ReLU(), nn.Linear(k, 1))
        extra = 1 + (4 if config.use_prob_features else 0)
        self.top_p_head = nn.Sequential(nn.Linear(h + extra, k), nn.ReLU(), nn.Linear(k, 1))

    @classmethod
    def from_base(cls, model, **kwargs) -> "AutoDecoHeads":
        """Heads sized for a transformers causal LM (reads ``model.config.hidden_size``)."""
        cfg = model.config
        hidden = getattr(cfg, "hidden_size", None)
        if hidden is None and hasattr(cfg, "get_text_config"):
            hidden = cfg.get_text_config().hidden_size
        if hidden is None:
            raise ValueError("model.config has no hidden_size; build AutoDecoConfig(hidden_size=...) yourself")
        return cls(AutoDecoConfig(hidden_size=int(hidden), **kwargs))

    def temperature(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.config.max_temperature * torch.sigmoid(self.temp_head(hidden.float())).squeeze(-1)

    def forward(self, hidden: torch.Tensor, logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if hidden.shape[:-1] != logits.shape[:-1]:
            raise ValueError(
                f"hidden {tuple(hidden.shape)} and logits {tuple(logits.shape)} must share leading dimensions"
            )
        if hidden.shape[-1] != self.config.hidden_size:
            raise ValueError(f"hidden size {hidden.shape[-1]} != config.hidden_size {self.config.hidden_size}")
        hidden = hidden.float()
        temp = self.temperature(hidden)
        t_in = temp.detach()
        feats = [hidden, t_in.unsqueeze(-1)]
        if self.config.use_prob_features:
            with torch.no_grad():
                feats.append(probability_features(logits.float() / t_in.clamp_min(1e-2).unsqueeze(-1)))
        top_p = torch.sigmoid(self.top_p_head(torch.cat(feats, dim=-1))).squeeze(-1)
        return temp, top_p

    @torch.no_grad()
    def set_constant(self, temperature: float = 1.0, top_p: float = 1.0) -> "AutoDecoHeads":
        """Make both heads output constants (zero weights, bias = logit of the target).

        ``top_p=1.0`` is represented by a bias of 40 (sigmoid = 1.0 in float32). Used for the
        reduction "AutoDeco with T=1, p=1 is plain sampling" and as a neutral start.
        """
        if not 0 < temperature < self.config.max_temperature:
            raise ValueError(f"temperature must be in (0, {self.config.max_temperature}), got {temperature!r}")
        if not 0 < top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {top_p!r}")
        for head, target in ((self.temp_head, temperature / self.config.max_temperature), (self.top_p_head, top_p)):
            last = head[-1]
            last.weight.zero_()
            last.bias.fill_(40.0 if target >= 1.0 else float(torch.logit(torch.tensor(target, dtype=torch.float64))))
        return self


def _check_values(name: str, v: torch.Tensor, high: float | None, low_closed: bool = False) -> None:
    """Raise unless every value of ``v`` is in ``(0, high]`` (``[0, high]`` with ``low_closed``),
    or in ``(0, inf)`` when ``high`` is None; NaN is named apart."""
    if torch.isnan(v).any():
        raise ValueError(f"{name} must not be NaN")
    rng = ("[0, " if low_closed else "(0, ") + (f"{high}]" if high is not None else "inf)")
    if bool((v < 0).any() if low_closed else (v <= 0).any()) or (high is not None and bool((v > high).any())) or \
            (high is None and bool(torch.isinf(v).any())):
        raise ValueError(f"{name} must lie in {rng}, got values from {float(v.min())} to {float(v.max())}")


def _per_position(name: str, value, logits: torch.Tensor, high: float | None) -> torch.Tensor:
    """``value`` as a float tensor broadcastable against ``logits`` (a scalar, or shaped
    ``logits.shape[:-1]`` or ``logits.shape[:-1] + (1,)``), checked to lie in its range."""
    v = torch.as_tensor(value, dtype=torch.float32, device=logits.device)
    lead = tuple(logits.shape[:-1])
    if v.dim() > 0 and tuple(v.shape) not in (lead, lead + (1,)):
        raise ValueError(f"{name} has shape {tuple(v.shape)}; it must be a scalar or shaped like the logits "
                         f"without the vocabulary axis, {lead} (or {lead + (1,)})")
    _check_values(name, v, high)
    if v.dim() == len(lead):
        v = v.expand(lead).unsqueeze(-1) if lead else v.reshape(1)
    return v


def top_p_filter(probs: torch.Tensor, top_p: torch.Tensor | float) -> torch.Tensor:
    """Hard nucleus mask: keep the smallest set of highest-probability tokens whose mass reaches
    ``top_p`` (the top token is always kept; ``top_p = 1`` keeps every token). ``top_p`` is a scalar or has ``probs.shape[:-1]``.
    Returns a boolean mask shaped like ``probs``.
    """
    top_p = _per_position("top_p", top_p, probs, 1.0).to(probs.dtype)
    sorted_p, order = probs.sort(dim=-1, descending=True)
    before = sorted_p.cumsum(-1) - sorted_p  # mass strictly before each sorted token
    # P = 1 keeps every token (as transformers' top-p = 1): the float cumulative sum can reach 1
    # before the tail, which would otherwise cut tokens of probability ~1e-8
    keep_sorted = (before < top_p) | (top_p >= 1)
    keep_sorted[..., 0] = True
    return torch.zeros_like(keep_sorted).scatter(-1, order, keep_sorted)


def warp_logits(logits: torch.Tensor, temperature, top_p) -> torch.Tensor:
    """Inference-time AutoDeco warp: ``l / T`` then a hard top-p cut at ``P`` (Sec. 2.3),
    returned as new logits with ``-inf`` outside the nucleus. ``temperature``/``top_p`` are
    scalars or tensors shaped ``logits.shape[:-1]``."""
    t = _per_position("temperature", temperature, logits, None)
    scaled = logits.float() / t.clamp_min(1e-6)
    keep = top_p_filter(torch.softmax(scaled, dim=-1), top_p)
    return scaled.masked_fill(~keep, float("-inf"))


@torch.no_grad()
def autodeco_step(heads: AutoDecoHeads, hidden: torch.Tensor, logits: torch.Tensor, *, candidates: int = 256):
    """One decoding step (Sec. 2.3): ``(warped_logits, T, P)`` for hidden ``(..., H)`` and logits ``(..., V)``.

    Gives the same result as ``warp_logits(logits, *heads(hidden, logits))`` (up to float rounding
    of the nucleus boundary) but does the vocabulary-sized work once: one log-softmax of
    ``l / T`` serves both the top-p head's features and the nucleus, and the nucleus is found among
    the ``candidates`` most probable tokens (``topk``) instead of a sort of the whole vocabulary;
    rows whose nucleus is wider than ``candidates`` fall back to the full sort. With ``T`` below the
    features' 0.01 clamp the warp needs its own log-softmax, which is then computed separately.
    """
    if not isinstance(candidates, int) or candidates < 1:
        raise ValueError(f"candidates must be a positive integer, got {candidates!r}")
    if hidden.shape[:-1] != logits.shape[:-1]:
        raise ValueError(
            f"hidden {tuple(hidden.shape)} and logits {tuple(logits.shape)} must share leading dimensions"
        )
    if hidden.shape[-1] != heads.config.hidden_size:
        raise ValueError(f"hidden size {hidden.shape[-1]} != config.hidden_size {heads.config.hidden_size}")
    scores = logits.float()
    hidden = hidden.float()
    k = min(candidates, scores.shape[-1])
    temp = heads.temperature(hidden)
    scaled = scores / temp.clamp_min(1e-6).unsqueeze(-1)  # the warp's l / T
    low = bool((temp < 1e-2).any())  # the features divide by max(T, 0.01), the warp by max(T, 1e-6)
    logp = torch.log_softmax(scaled, dim=-1)
    top_lp, top_idx = logp.topk(k, dim=-1)
    top = top_lp.exp()
    feats = [hidden, temp.unsqueeze(-1)]
    if heads.config.use_prob_features:
        if low or k < min(5, scores.shape[-1]):
            logp_f = torch.log_softmax(scores / temp.clamp_min(1e-2).unsqueeze(-1), dim=-1)
            feats.append(_features_from_logp(logp_f, logp_f.topk(min(5, scores.shape[-1]), dim=-1).values.exp()))
        else:
            feats.append(_features_from_logp(logp, top))
    top_p = torch.sigmoid(heads.top_p_head(torch.cat(feats, dim=-1))).squeeze(-1)
    before = top.cumsum(-1) - top  # mass strictly before each of the k most probable tokens
    keep_top = before < top_p.unsqueeze(-1)
    keep_top[..., 0] = True
    out = torch.full_like(scaled, float("-inf"))
    out.scatter_(-1, top_idx, scaled.gather(-1, top_idx).masked_fill(~keep_top, float("-inf")))
    every = top_p >= 1  # P = 1 keeps every token (see top_p_filter)
    if bool(every.any()):
        out[every] = scaled[every]
    wide = ((before[..., -1] + top[..., -1]) < top_p) & ~every  # the nucleus reaches past the k candidates
    if bool(wide.any()):
        out[wide] = scaled[wide].masked_fill(~top_p_filter(logp[wide].exp(), top_p[wide]), float("-inf"))
    return out, temp, top_p


def _soft_argument(name: str, value, logits: torch.Tensor, high: float | None, *, low_closed: bool) -> torch.Tensor:
    """``value`` as a tensor (a number becomes a float32 scalar; a tensor is returned as it is,
    so gradients reach it), checked to broadcast to ``logits.shape[:-1]`` and to lie in range."""
    if not isinstance(value, torch.Tensor):
        value = torch.tensor(float(value), dtype=torch.float32, device=logits.device)
    lead = tuple(logits.shape[:-1])
    try:
        ok = tuple(torch.broadcast_shapes(tuple(value.shape), lead)) == lead
    except RuntimeError:
        ok = False
    if not ok:
        raise ValueError(f"{name} has shape {tuple(value.shape)}; it must be a scalar or broadcast to the logits "
                         f"without the vocabulary axis, {lead}")
    _check_values(name, value.detach(), high, low_closed=low_closed)
    return value


def soft_top_p_probs(logits: torch.Tensor, temperature: torch.Tensor, top_p: torch.Tensor, alpha: float = 30.0,
                     *, presorted: bool = False):
    """The paper's differentiable top-p (Sec. 2.2).

    ``p = softmax(l / T)``; sort descending, ``c = cumsum``; ``m_sorted = exp(-alpha * ReLU(c - P))``,
    scattered back to vocabulary order; ``p~ = (p * m) / (sum(p * m) + 1e-9)``.
    ``alpha`` (steepness) = 30 as in the released training code. Differentiable in ``T`` and ``P``.
    ``presorted=True``: ``logits`` are already sorted descending along the last axis (the order of
    ``softmax(l / T)`` does not depend on ``T > 0``, so a training set can be sorted once); the
    sort and scatter are skipped and the result is in that sorted order.

    ``temperature`` must lie in ``(0, inf)`` (``l / 0`` is NaN where a logit is 0 and the
    softmax of infinities is NaN) and ``top_p`` in ``[0, 1]`` (a sigmoid's range; ``P = 0``
    keeps only the top token's share); both are scalars or broadcast to ``logits.shape[:-1]``.
    ``alpha`` must be a finite number > 0. Anything else raises a ``ValueError``.
    """
    if not alpha > 0:
        raise ValueError(f"alpha must be > 0, got {alpha!r}")
    if not math.isfinite(alpha):
        raise ValueError(f"alpha must be finite (> 0), got {alpha!r}")
    temperature = _soft_argument("temperature", temperature, logits, None, low_closed=False)
    top_p = _soft_argument("top_p", top_p, logits, 1.0, low_closed=True)
    p = torch.softmax(logits.float() / temperature.unsqueeze(-1), dim=-1)
    if presorted:
        m = torch.exp(-alpha * F.relu(p.cumsum(-1) - top_p.unsqueeze(-1)))
        pm = p * m
        return pm / (pm.sum(-1, keepdim=True) + 1e-9)
    sorted_p, order = p.sort(dim=-1, descending=True)
    c = sorted_p.cumsum(-1)
    m_sorted = torch.exp(-alpha * F.relu(c - top_p.unsqueeze(-1)))
    m = torch.zeros_like(p).scatter(-1, order, m_sorted)
    pm = p * m
    return pm / (pm.sum(-1, keepdim=True) + 1e-9)


def autodeco_loss(
    heads: AutoDecoHeads,
    hidden: torch.Tensor,
    logits: torch.Tensor,
    labels: torch.Tensor,
    *,
    alpha: float = 30.0,
    easy_drop: float = 0.6,
    min_temperature: float = 0.01,
    weights: torch.Tensor | None = None,
    generator: torch.Generator | None = None,
    presorted: bool = False,
) -> tuple[torch.Tensor, dict]:
    """``L = L_T + L_P`` on flattened positions (``hidden (N, H)``, ``logits (N, V)``, ``labels (N,)``).

    - ``L_T``: cross-entropy of ``softmax(l / max(T, min_temperature))`` at the label,
      weighted by the frozen model's ``p(y)`` (detached; the paper's "dynamic fine-tuning"
      weighting, Sec. 2.2), with **easy-token masking**: a random ``easy_drop`` fraction (60 %) of
      the positions where the base model's argmax already equals the label is left out.
    - ``L_P``: negative log-likelihood of the label under the soft top-p distribution
      (:func:`soft_top_p_probs`), with the same ``p(y)`` weighting. Its gradient reaches both heads
      (``T`` is not detached here; only the top-p head's *input* copy of ``T`` is).

    ``weights`` (N,) multiplies each position's loss (e.g. multiplicities of accepted samples).
    The base model's logits are treated as constants. Returns ``(loss, parts)``.
    ``presorted=True``: each row of ``logits`` is sorted descending and ``labels`` are positions in
    that order (every term is invariant to a permutation of the vocabulary, so the loss is the same;
    see :func:`soft_top_p_probs`).
    """
    if hidden.dim() != 2 or logits.dim() != 2 or labels.dim() != 1:
        raise ValueError("autodeco_loss expects flattened hidden (N, H), logits (N, V) and labels (N,)")
    if not (hidden.shape[0] == logits.shape[0] == labels.shape[0]):
        raise ValueError(
            f"hidden, logits and labels must have the same number of positions, got "
            f"{hidden.shape[0]}, {logits.shape[0]}, {labels.shape[0]}"
        )
    if not 0.0 <= easy_drop < 1.0:
        raise ValueError(f"easy_drop must be in [0, 1), got {easy_drop!r}")
    if not (min_temperature > 0 and math.isfinite(min_temperature)):
        raise ValueError(f"min_temperature must be a finite number > 0 (the temperature loss divides the logits by "
                         f"max(T, min_temperature)), got {min_temperature!r}")
    if weights is not None:
        if tuple(weights.shape) != (labels.shape[0],):
            raise ValueError(f"weights must have shape ({labels.shape[0]},), got {tuple(weights.shape)}")
        wd = weights.detach()
        if not bool(torch.isfinite(wd).all()) or bool((wd < 0).any()):
            raise ValueError(f"weights must be finite and >= 0, got values from {float(wd.min())} to {float(wd.max())}")
    logits = logits.detach().float()
    temp, top_p = heads(hidden, logits)
    with torch.no_grad():
        p_base = torch.softmax(logits, dim=-1)
        w_dft = p_base.gather(-1, labels.unsqueeze(-1)).squeeze(-1)
        easy = p_base.argmax(-1) == labels
        u = torch.rand(labels.shape, generator=generator, device=labels.device)
        keep_t = ~(easy & (u < easy_drop))
        w = torch.ones_like(w_dft) if weights is None else weights.float()
    # temperature loss
    ce_t = F.cross_entropy(logits / temp.clamp_min(min_temperature).unsqueeze(-1), labels, reduction="none")
    wt = (w * keep_t).float()
    loss_t = (ce_t * w_dft * wt).sum() / wt.sum().clamp_min(1.0)
    # soft top-p loss
    q = soft_top_p_probs(logits, temp.clamp_min(1e-8), top_p, alpha=alpha, presorted=presorted)
    nll_p = -torch.log(q.gather(-1, labels.unsqueeze(-1)).squeeze(-1) + 1e-9)
    loss_p = (nll_p * w_dft * w).sum() / w.sum().clamp_min(1.0)
    loss = loss_t + loss_p
    parts = {
        "loss_t": float(loss_t.detach()),
        "loss_p": float(loss_p.detach()),
        "mean_T": float(temp.detach().mean()),
        "mean_P": float(top_p.detach().mean()),
    }
    return loss, parts
