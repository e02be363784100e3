"""ReBalance: confidence-guided steering against over- and under-thinking.

Paper: Li, Tu, Ding, Wang, Zhen, Chen, Li, Tian, "Efficient Reasoning with Balanced Thinking",
ICLR 2026, arXiv:2603.12372 (official code https://github.com/yu-lin-li/ReBalance; this module is
an independent implementation that follows its placement and amplitude).

Steps end at a blank line ("\\n\\n"). For step s with tokens t (the separator token excluded):

  step confidence   c_s = mean_t p_t^max                 (official online rule; ``kind="geometric"``
                                                           gives exp(mean ln p^max), the paper's Eq.)
  confidence var.   v_s = Var(c_{s-1}, c_s) = (c_s - c_{s-1})^2 / 4   (two-step window, v_1 = 0)

Calibration (Sec. 3.2): with quantile thresholds tau_c^L < tau_c^H, tau_v^L < tau_v^H (quartiles),

  overthinking  O = { s : c_s <= tau_c^L and v_s >= tau_v^H }   (low, fluctuating confidence)
  underthinking U = { s : c_s >= tau_c^H and v_s <= tau_v^L }   (steady over-confidence)

the prototypes mu_O, mu_U are the mean hidden states, at the input of decoder layer l, of the first
token of those steps, and the steering vector is the *unnormalised* difference v = mu_O - mu_U (the
official ``build_steer_vector_mean_only``).

Decoding (Sec. 3.3): when the token just written is a step separator, its hidden state at the input
of layer l is shifted, h <- h + g(c_s, v_s) v, where (c_s, v_s) describe the step that separator
closes and g is the official model-behaviour-based dynamic control function (see :func:`control`):
about -1 at tau_c^L, down to about -2 for low and fluctuating confidence (push away from the
overthinking prototype, prune redundancy), about 0 at high confidence and +0.1 for steady
over-confidence (promote exploration).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Optional, Sequence

import numpy as np
import torch

__all__ = ["ReBalanceConfig", "ReBalanceSteerer", "step_confidence", "window_variance",
           "control", "baseline_control", "fit_rebalance", "decoder_layers"]

# Official per-model defaults (transformer_inference_steer_dp.py, MODEL_DYN_DEFAULTS, for
# DeepSeek-R1-Distill-Qwen-1.5B): F(tau_c^L) = -1.02, F(tau_c^L, tau_v^H) = -1.91, F(1, tau_v^L) = +0.1;
# F(1) = 0.01 is fixed in the official modeling code.
R1_1P5B_LOW_1, R1_1P5B_LOW_2, HIGH_1, HIGH_2 = -1.02, -1.91, 0.01, 0.1
_GATE_SHARPNESS = 1200.0  # official sigmoid gates: sigmoid((q - x) / IQR * 1200), clipped to +-60
_CAL_SHARPNESS = 12.0     # official normaliser of the high-side gate uses 12 (not 1200)


def step_confidence(max_probs: Sequence[float], kind: str = "arithmetic") -> float:
    """Confidence of one step from the max probabilities of the distributions that wrote it.

    ``"arithmetic"``: mean p^max (the official online rule, ``_step_prob_sum / _step_tok_count``);
    ``"geometric"``: exp(mean ln p^max) (the paper's step confidence, official ``avg2``)."""
    p = np.asarray(list(max_probs), dtype=float)
    if p.size == 0:
        raise ValueError("a step needs at least one token")
    if not np.isfinite(p).all():
        raise ValueError("max probabilities must be finite (got NaN or inf)")
    if np.any((p <= 0) | (p > 1)):
        raise ValueError("max probabilities must lie in (0, 1]")
    if kind == "arithmetic":
        return float(np.mean(p))
    if kind == "geometric":
        return float(np.exp(np.mean(np.log(p))))
    raise ValueError(f"kind must be 'arithmetic' or 'geometric', got {kind!r}")


def window_variance(conf: Sequence[float], window: int = 2) -> list[float]:
    """v_s = population variance of the last ``window`` step confidences (fewer at the start).
    ``window=2`` is the official two-step variance (c_s - c_{s-1})^2 / 4, 0 for the first step."""
    if not isinstance(window, int) or window < 1:
        raise ValueError(f"window must be a positive integer, got {window!r}")
    c = list(conf)
    if not np.isfinite(np.asarray(c, dtype=float)).all():
        raise ValueError("step confidences must be finite (got NaN or inf)")
    return [float(np.var(c[max(0, i - window + 1):i + 1])) for i in range(len(c))]


@dataclass
class ReBalanceConfig:
    """Everything ``ReBalanceSteerer`` needs; built by :func:`fit_rebalance`.

    ``vector`` is mu_O - mu_U (unnormalised); the added shift is ``strength * g(c, v) * vector``.
    ``tau_*`` are the confidence / variance quartiles of the calibration steps (official q25/q75).
    ``low_1`` = g at (tau_c^L, moderate v), ``low_2`` = g at (tau_c^L, tau_v^H), ``high_1`` = g at
    (c = 1, moderate v), ``high_2`` = g at (1, tau_v^L): official R1-Distill-Qwen-1.5B values.
    ``placement``: ``"separator"`` (official: the separator token itself) or ``"next_token"`` (the
    first token of the new step); ``site``: ``"input"`` (official: input of decoder layer ``layer``)
    or ``"output"`` (its output).
    """
    vector: torch.Tensor
    layer: int
    tau_c_low: float
    tau_c_high: float
    tau_v_low: float
    tau_v_high: float
    low_1: float = R1_1P5B_LOW_1
    low_2: float = R1_1P5B_LOW_2
    high_1: float = HIGH_1
    high_2: float = HIGH_2
    strength: float = 1.0
    window: int = 2
    kind: str = "arithmetic"
    placement: str = "separator"
    site: str = "input"
    info: dict = field(default_factory=dict)

    def __post_init__(self):
        if not isinstance(self.vector, torch.Tensor) or self.vector.dim() != 1 or self.vector.numel() == 0:
            raise ValueError("vector (the steering direction) must be a non-empty 1-D tensor of the model's "
                             f"hidden size, got {getattr(self.vector, 'shape', type(self.vector).__name__)}")
        if not bool(torch.isfinite(self.vector).all()):
            raise ValueError("vector (the steering direction) must be finite, got NaN or inf entries")
        if not bool((self.vector != 0).any()):
            raise ValueError("vector (the steering direction) is all zeros: steering would do nothing; "
                             "fit it with fit_rebalance (mu_O - mu_U)")
        if not math.isfinite(self.strength) or self.strength < 0:
            raise ValueError(f"strength must be a finite number >= 0, got {self.strength!r}")
        if not (self.tau_c_low < self.tau_c_high and self.tau_v_low < self.tau_v_high):
            raise ValueError("thresholds must satisfy tau_c_low < tau_c_high and tau_v_low < tau_v_high, got "
                             f"{self.tau_c_low}, {self.tau_c_high}, {self.tau_v_low}, {self.tau_v_high}")
        if not self.low_1 < 0 < self.high_1 or self.high_2 <= 0:
            raise ValueError("need low_1 < 0 < high_1 and high_2 > 0 (the official control passes from "
                             f"pruning to exploration), got low_1={self.low_1}, high_1={self.high_1}, "
                             f"high_2={self.high_2}")
        if not isinstance(self.window, int) or self.window < 1:
            raise ValueError(f"window must be a positive integer, got {self.window!r}")
        if self.kind not in ("arithmetic", "geometric"):
            raise ValueError(f"kind must be 'arithmetic' or 'geometric', got {self.kind!r}")
        if self.placement not in ("separator", "next_token"):
            raise ValueError(f"placement must be 'separator' or 'next_token', got {self.placement!r}")
        if self.site not in ("input", "output"):
            raise ValueError(f"site must be 'input' or 'output', got {self.site!r}")


def _solve_k(m: float, s: float, ratio_target: float) -> float:
    """k > 0 with tanh(k (1 - m)) / tanh(k s) = ratio_target (the ratio falls from (1-m)/s to 1)."""
    def ratio(k):
        return math.tanh(k * max(0.0, 1.0 - m)) / math.tanh(k * s)
    lo, hi = 1e-6, 1.0
    while ratio(hi) > ratio_target and hi < 1e6:
        hi *= 2.0
    for _ in range(100):
        mid = 0.5 * (lo + hi)
        if ratio(mid) > ratio_target:
            lo = mid
        else:
            hi = mid
    return 0.5 * (lo + hi)


def baseline_control(c: float, cfg: ReBalanceConfig) -> float:
    """The 1-D part F(c) = a + b tanh(k (c - m)) of the official control: m, s = midpoint and half
    width of [tau_c^L, tau_c^H], F(tau_c^L) = low_1, F(tau_c^H) = 0, and k solved so F(1) = high_1."""
    m = 0.5 * (cfg.tau_c_low + cfg.tau_c_high)
    s = 0.5 * (cfg.tau_c_high - cfg.tau_c_low)
    _check_finite(c=c)
    a = 0.5 * cfg.low_1
    k = _solve_k(m, s, 2.0 * (cfg.high_1 - a) / (0.0 - cfg.low_1))
    b = -cfg.low_1 / (2.0 * math.tanh(k * s))
    c = min(max(float(c), 0.0), 1.0)
    return a + b * math.tanh(k * (c - m))


def _check_finite(**values):
    for name, x in values.items():
        if not math.isfinite(float(x)):
            raise ValueError(f"{name} must be a finite step statistic, got {x!r}")


def _sig(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-max(min(x, 60.0), -60.0)))


def control(c: float, v: float, cfg: ReBalanceConfig) -> float:
    """Official dynamic control g(c, v) (``modeling_qwen2_dynamic_3D.py``), times ``strength``.

    g = F(c) + (low_2 - F(tau_c^L)) w_o + (high_2 - F(1)) w_u, clipped to [min(low_1, low_2),
    max(high_1, high_2)], with the region weights (sigmoid gates, IQR-scaled)
    w_o = min(1, G(tau_c^L - c) G(v - tau_v^H) / 0.25)       low and fluctuating confidence
    w_u = min(1, G(c - tau_c^H) G(tau_v^L - v) / g_m)         steady over-confidence
    G(x) = sigmoid(1200 x / IQR), g_m = sigmoid(12 (1 - tau_c^H) / IQR_c) / 2 (as in the code)."""
    _check_finite(c=c, v=v)
    iqr_c = max(1e-12, cfg.tau_c_high - cfg.tau_c_low)
    iqr_v = max(1e-12, cfg.tau_v_high - cfg.tau_v_low)
    c = min(max(float(c), 0.0), 1.0)
    g = _GATE_SHARPNESS
    w_o = _sig((cfg.tau_c_low - c) / iqr_c * g) * _sig((v - cfg.tau_v_high) / iqr_v * g) / 0.25
    g_m = _sig((1.0 - cfg.tau_c_high) / iqr_c * _CAL_SHARPNESS) * 0.5
    w_u = _sig((c - cfg.tau_c_high) / iqr_c * g) * _sig((cfg.tau_v_low - v) / iqr_v * g) / g_m
    w_o, w_u = min(w_o, 1.0), min(w_u, 1.0)
    out = (baseline_control(c, cfg) + (cfg.low_2 - baseline_control(cfg.tau_c_low, cfg)) * w_o
           + (cfg.high_2 - baseline_control(1.0, cfg)) * w_u)
    out = min(max(out, min(cfg.low_1, cfg.low_2)), max(cfg.high_1, cfg.high_2))
    return float(out * cfg.strength)


def decoder_layers(model):
    inner = getattr(model, "model", None)
    layers = getattr(inner, "layers", None)
    if not isinstance(layers, torch.nn.ModuleList):
        raise TypeError(f"ReBalance needs a decoder-only model with `.model.layers`, got {type(model).__name__}")
    return layers


class _StepSplitter:
    """Finds step ends in a token stream by decoded text, so a separator written as one token
    ("\\n\\n", ".\\n\\n") or as several ("\\n" + "\\n") ends the step at the token that completes it."""

    def __init__(self, tokenizer, sep: str):
        if not isinstance(sep, str) or not sep:
            raise ValueError(f"sep (the text that ends a step) must be a non-empty string, got {sep!r}")
        self.tokenizer, self.sep = tokenizer, sep
        self.pieces: dict[int, str] = {}

    def ends(self, tail: str, token_id: int) -> tuple[bool, str]:
        """(whether ``token_id`` completes ``sep`` after the text tail ``tail``, the new tail)."""
        piece = self.pieces.get(token_id)
        if piece is None:
            piece = self.pieces[token_id] = self.tokenizer.decode([token_id])
        text = tail + piece
        keep = len(self.sep) - 1
        if self.sep in text:
            rest = text.rsplit(self.sep, 1)[1]
            return True, (rest[-keep:] if keep else "")
        return False, (text[-keep:] if keep else "")


class ReBalanceSteerer:
    """Context manager that steers ``model`` during generation with forward hooks.

    >>> with ReBalanceSteerer(model, tokenizer, cfg) as st:          # doctest: +SKIP
    ...     out = generate(model, tokenizer, prompts, 256)

    Hooks: one on the model (reads the fed token ids and each step's next-token distribution, and
    schedules the steering; it never changes logits) and one on decoder layer ``cfg.layer`` (adds
    the shift). Decoding must use the KV cache (one new token per forward), as in the official code.
    The max probability of the raw (unprocessed) distribution is the confidence signal. The hooks
    are removed on exit; ``events`` counts the steering shifts applied, ``coefs`` their values.
    """

    def __init__(self, model, tokenizer, config: ReBalanceConfig, sep: str = "\n\n"):
        layers = decoder_layers(model)
        if not 0 <= config.layer < len(layers):
            raise ValueError(f"layer must be in [0, {len(layers) - 1}], got {config.layer}")
        hidden = getattr(model.config, "hidden_size", None)
        if hidden is not None and config.vector.numel() != hidden:
            raise ValueError(f"steering vector has {config.vector.numel()} entries but the model's hidden size "
                             f"is {hidden}; it must match (fit it on this model with fit_rebalance)")
        self.splitter = _StepSplitter(tokenizer, sep)
        self.model, self.cfg, self.tokenizer, self.sep = model, config, tokenizer, sep
        self._handles: list = []
        self.coefs: list[float] = []
        self._reset(0)

    @property
    def events(self) -> int:
        return len(self.coefs)

    def _reset(self, bsz: int):
        self.bsz = bsz
        self.tail = ["" for _ in range(bsz)]
        self.step_p: list[list[float]] = [[] for _ in range(bsz)]   # max-probs of the current step
        self.conf: list[list[float]] = [[] for _ in range(bsz)]     # closed steps' confidences
        self.coef = [0.0] * bsz           # last computed coefficient per row (kept across empty steps)
        self.last_maxp: Optional[torch.Tensor] = None
        self.pending = torch.zeros(bsz)   # shift coefficient for the forward now running
        self.carry = torch.zeros(bsz)     # "next_token" placement: shift for the following forward

    def _on_tokens(self, input_ids: torch.Tensor, new_generation: bool):
        """Called before every forward with the fed ids; sets ``pending`` for this forward."""
        bsz, length = input_ids.shape
        if new_generation or bsz != self.bsz or length != 1:
            self._reset(bsz)
            return
        ids = input_ids[:, 0].tolist()
        now = torch.zeros(bsz)
        for b, tid in enumerate(ids):
            ended, self.tail[b] = self.splitter.ends(self.tail[b], tid)
            if not ended:
                if self.last_maxp is not None:
                    self.step_p[b].append(float(self.last_maxp[b]))
                continue
            if self.step_p[b]:  # the official ready-mask: a step with at least one token
                c = step_confidence(self.step_p[b], self.cfg.kind)
                self.conf[b].append(c)
                v = window_variance(self.conf[b][-self.cfg.window:], self.cfg.window)[-1]
                self.coef[b] = control(c, v, self.cfg)
                self.step_p[b] = []
            now[b] = self.coef[b]
        if self.cfg.placement == "separator":
            self.pending = now
        else:
            self.pending, self.carry = self.carry, now

    def _model_pre_hook(self, module, args, kwargs):
        ids = kwargs.get("input_ids", args[0] if args else None)
        if ids is None:
            raise ValueError("ReBalanceSteerer needs generation with input_ids (not inputs_embeds)")
        pos = kwargs.get("cache_position")
        new = pos is not None and pos.numel() > 0 and int(pos.reshape(-1)[0]) == 0
        self._on_tokens(ids.detach().cpu(), new)
        return None

    def _model_hook(self, module, args, kwargs, output):
        logits = output.logits if hasattr(output, "logits") else output[0]
        self.last_maxp = torch.softmax(logits[:, -1].float(), -1).max(-1).values.cpu()
        return None

    def _shift(self, h: torch.Tensor) -> Optional[torch.Tensor]:
        if h.shape[1] != 1 or h.shape[0] != self.pending.shape[0] or not torch.any(self.pending != 0):
            return None  # prefill, or no separator in this forward: leave it untouched
        alpha = self.pending.to(h.device, h.dtype)
        self.coefs.extend(float(a) for a in self.pending if a != 0)
        self.pending = torch.zeros_like(self.pending)
        return h + alpha[:, None, None] * self.cfg.vector.to(h.device, h.dtype)

    def _layer_pre_hook(self, module, args, kwargs):
        h = args[0] if args else kwargs["hidden_states"]
        new = self._shift(h)
        if new is None:
            return None
        if args:
            return (new,) + tuple(args[1:]), kwargs
        return args, {**kwargs, "hidden_states": new}

    def _layer_hook(self, module, args, output):
        h = output[0] if isinstance(output, tuple) else output
        new = self._shift(h)
        if new is None:
            return None
        return (new,) + tuple(output[1:]) if isinstance(output, tuple) else new

    def __enter__(self):
        self._reset(0)
        if self.cfg.strength != 0:
            layer = decoder_layers(self.model)[self.cfg.layer]
            self._handles = [
                self.model.register_forward_pre_hook(self._model_pre_hook, with_kwargs=True),
                self.model.register_forward_hook(self._model_hook, with_kwargs=True),
                (layer.register_forward_pre_hook(self._layer_pre_hook, with_kwargs=True)
                 if self.cfg.site == "input" else layer.register_forward_hook(self._layer_hook)),
            ]
        return self

    def __exit__(self, *exc):
        for h in self._handles:
            h.remove()
        self._handles = []
        self._reset(0)
        return False


def _segment(splitter: _StepSplitter, gen_ids: Sequence[int], maxp: Sequence[float]):
    """Online segmentation of one generated sequence: returns, per step, the max-probs of its
    non-separator tokens and the index (into ``gen_ids``) of the token that starts it."""
    steps, cur, start, tail = [], [], 0, ""
    for j, tid in enumerate(gen_ids):
        ended, tail = splitter.ends(tail, int(tid))
        if ended:
            if cur:
                steps.append((cur, start))
            cur, start = [], j + 1
        else:
            cur.append(float(maxp[j]))
    if cur:
        steps.append((cur, start))
    return steps


@torch.no_grad()
def fit_rebalance(model, tokenizer, prompts: Sequence[str], completions: Sequence, layer: int,
                  sep: str = "\n\n", q_low: float = 0.25, q_high: float = 0.75, window: int = 2,
                  kind: str = "arithmetic", strength: float = 1.0, low_1: float = R1_1P5B_LOW_1,
                  low_2: float = R1_1P5B_LOW_2, relax: bool = False, min_steps: int = 1,
                  normalize: bool = False, **config_kw) -> ReBalanceConfig:
    """Build the steering vector and thresholds from calibration traces (teacher-forced, one pass).

    ``completions`` are the model's own outputs for ``prompts`` (strings, or lists of generated
    token ids, which keep the exact tokenisation). Steps are split as during decoding; the thresholds
    are the ``q_low`` / ``q_high`` quantiles (official quartiles) of the step confidences and
    two-step variances; the prototypes are the mean hidden states at the input of decoder layer
    ``layer`` (``hidden_states[layer]``, as the official dump) of the first token of each O / U
    step (steps that follow a separator). ``relax=True`` falls back to the confidence conditions
    alone when a joint set has fewer than ``min_steps`` steps (``info["relaxed"]``).
    """
    if isinstance(prompts, str) or isinstance(completions, str):
        raise TypeError("prompts and completions must be sequences of strings, not single strings")
    if len(prompts) != len(completions) or not prompts:
        raise ValueError("need the same positive number of prompts and completions")
    if not 0 <= q_low < q_high <= 1:
        raise ValueError(f"need 0 <= q_low < q_high <= 1, got {q_low}, {q_high}")
    n_layers = len(decoder_layers(model))
    if not 0 <= layer < n_layers:
        raise ValueError(f"layer must be in [0, {n_layers - 1}], got {layer}")
    splitter = _StepSplitter(tokenizer, sep)
    device = next(model.parameters()).device
    conf, var, firsts = [], [], []   # firsts[i] is None for a step without a preceding separator
    for prompt, comp in zip(prompts, completions):
        p_ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
        if not p_ids:
            raise ValueError(f"empty prompt {prompt!r}: each calibration prompt must contain at least one "
                             "token (the first step's confidence is read at the prompt's last position)")
        g_ids = (tokenizer(comp, add_special_tokens=False)["input_ids"] if isinstance(comp, str)
                 else [int(t) for t in comp])
        if not g_ids:
            continue
        ids = p_ids + g_ids
        out = model(torch.tensor([ids], device=device), output_hidden_states=True)
        k = len(p_ids)
        maxp = torch.softmax(out.logits[0, k - 1:len(ids) - 1].float(), -1).max(-1).values.cpu().tolist()
        hid = out.hidden_states[layer][0, k:].float().cpu()   # input of decoder layer `layer`
        steps = _segment(splitter, g_ids, maxp)
        cs = [step_confidence(p, kind) for p, _ in steps]
        conf += cs
        var += window_variance(cs, window)
        firsts += [hid[start] if start > 0 else None for _, start in steps]
    if not conf:
        raise ValueError("the calibration completions hold no tokens")
    conf, var = np.array(conf), np.array(var)
    tcl, tch = np.quantile(conf, [q_low, q_high])
    tvl, tvh = np.quantile(var, [q_low, q_high])
    has = np.array([f is not None for f in firsts])
    o = (conf <= tcl) & (var >= tvh) & has
    u = (conf >= tch) & (var <= tvl) & has
    relaxed = False
    if (o.sum() < min_steps or u.sum() < min_steps) and relax:
        o, u, relaxed = (conf <= tcl) & has, (conf >= tch) & has, True
    if o.sum() == 0 or u.sum() == 0:
        raise ValueError(f"calibration found {int(o.sum())} overthinking and {int(u.sum())} "
                         "underthinking steps; use more or longer calibration traces")
    mu_o = torch.stack([firsts[i] for i in np.flatnonzero(o)]).mean(0)
    mu_u = torch.stack([firsts[i] for i in np.flatnonzero(u)]).mean(0)
    vec = mu_o - mu_u
    if normalize:
        vec = vec / vec.norm()
    norms = [float(f.norm()) for f in firsts if f is not None]
    return ReBalanceConfig(vector=vec, layer=layer, tau_c_low=float(tcl), tau_c_high=float(tch),
                           tau_v_low=float(tvl), tau_v_high=float(tvh), low_1=low_1, low_2=low_2,
                           strength=strength, window=window, kind=kind, **config_kw,
                           info={"n_steps": int(len(conf)), "n_over": int(o.sum()), "n_under": int(u.sum()),
                                 "relaxed": relaxed, "vector_norm": float(vec.norm()),
                                 "hidden_norm": float(np.mean(norms)) if norms else 0.0})
