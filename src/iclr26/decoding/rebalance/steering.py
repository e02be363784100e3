"""ReBalance: confidence-guided steering against over- and under-thinking.

Paper: Li, Tu, Ding, Wang, Zhen, Chen, Li, Tian, "Efficient Reasoning with Balanced Thinking",
ICLR 2026, arXiv:2603.12372 (official code
https://github.com/yu-lin-li/ReBalance; this module is an independent implementation).

Per reasoning step s (steps end at a blank line, "\\n\\n"):

  step confidence   c_s = exp( mean_{t in s} ln p_t^max )     (geometric mean of the max prob.)
  confidence var.   v_s = Var( c_{s-W+1}, ..., c_s )           (sliding window of W steps)

From a small calibration set, with quantile thresholds tau_c^L < tau_c^H and tau_v^L < tau_v^H:

  overthinking  O = { s : c_s <= tau_c^L and v_s >= tau_v^H }   (low, fluctuating confidence)
  underthinking U = { s : c_s >= tau_c^H and v_s <= tau_v^L }   (steady over-confidence)

The prototypes are the mean hidden states (at a deep layer) of the first token of the O and U
steps; the steering vector is v = (mu_O - mu_U) / ||mu_O - mu_U||. While decoding, the hidden state
of the first token of each new step is shifted, h <- h + alpha_s v, with the dynamic control

  alpha_s = sign(c_s - tau_c^H) * B(c_s, v_s) * tanh(|c_s - tau_c^H|)

where c_s, v_s describe the step just finished: below tau_c^H the vector is subtracted (pull away
from the overthinking mode, prune redundancy), above it added (promote exploration). B switches
between an overthinking, an underthinking and a middle amplitude (see ``ReBalanceConfig``).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Optional, Sequence

import numpy as np
import torch
from transformers import LogitsProcessor

__all__ = ["ReBalanceConfig", "ReBalanceSteerer", "step_confidence", "window_variance",
           "control", "fit_rebalance", "decoder_layers"]


def step_confidence(max_probs: Sequence[float]) -> float:
    """c_s = exp(mean ln p^max) over the tokens of one step (geometric mean)."""
    p = np.asarray(list(max_probs), dtype=float)
    if p.size == 0:
        raise ValueError("a step needs at least one token")
    if np.any((p <= 0) | (p > 1)):
        raise ValueError("max probabilities must lie in (0, 1]")
    return float(np.exp(np.mean(np.log(p))))


def window_variance(conf: Sequence[float], window: int) -> list[float]:
    """v_s = population variance of the last ``window`` step confidences (fewer at the start)."""
    if not isinstance(window, int) or window < 1:
        raise ValueError(f"window must be a positive integer, got {window!r}")
    c = list(conf)
    return [float(np.var(c[max(0, i - window + 1):i + 1])) for i in range(len(c))]


@dataclass
class ReBalanceConfig:
    """Everything ``ReBalanceSteerer`` needs; built by :func:`fit_rebalance`.

    ``amplitudes`` = (B_o, B_u, B_m), the control amplitude for steps in the overthinking region,
    the underthinking region and neither; each is multiplied by ``strength`` and by ``scale`` (the
    mean hidden-state norm at ``layer`` on the calibration set), so ``strength`` is relative.
    """
    vector: torch.Tensor
    layer: int
    tau_c_low: float
    tau_c_high: float
    tau_v_low: float
    tau_v_high: float
    scale: float = 1.0
    strength: float = 1.0
    amplitudes: tuple = (1.0, 1.0, 0.5)
    window: int = 4
    info: dict = field(default_factory=dict)

    def __post_init__(self):
        if not isinstance(self.vector, torch.Tensor) or self.vector.dim() != 1 or self.vector.numel() == 0:
            raise ValueError("vector (the steering direction) must be a non-empty 1-D tensor of the model's "
                             f"hidden size, got {getattr(self.vector, 'shape', type(self.vector).__name__)}")
        if not bool(torch.isfinite(self.vector).all()):
            raise ValueError("vector (the steering direction) must be finite, got NaN or inf entries")
        if not bool((self.vector != 0).any()):
            raise ValueError("vector (the steering direction) is all zeros: steering would do nothing; "
                             "fit it with fit_rebalance (unit norm, mu_O - mu_U)")
        if not math.isfinite(self.strength) or self.strength < 0:
            raise ValueError(f"strength must be a finite number >= 0, got {self.strength!r}")
        if not (self.tau_c_low <= self.tau_c_high and self.tau_v_low <= self.tau_v_high):
            raise ValueError("thresholds must satisfy tau_c_low <= tau_c_high and tau_v_low <= tau_v_high")
        if not isinstance(self.window, int) or self.window < 1:
            raise ValueError(f"window must be a positive integer, got {self.window!r}")


def control(c: float, v: float, cfg: ReBalanceConfig) -> float:
    """alpha_s = sign(c - tau_c^H) * B(c, v) * tanh(|c - tau_c^H|), times strength * scale."""
    b_o, b_u, b_m = cfg.amplitudes
    if c <= cfg.tau_c_low and v >= cfg.tau_v_high:
        b = b_o
    elif c >= cfg.tau_c_high and v <= cfg.tau_v_low:
        b = b_u
    else:
        b = b_m
    d = c - cfg.tau_c_high
    return float(np.sign(d) * b * math.tanh(abs(d)) * cfg.strength * cfg.scale)


def decoder_layers(model):
    inner = getattr(model, "model", None)
    layers = getattr(inner, "layers", None)
    if not isinstance(layers, torch.nn.ModuleList):
        raise TypeError(f"ReBalance needs a decoder-only model with `.model.layers`, got {type(model).__name__}")
    return layers


class _Tracker(LogitsProcessor):
    """Reads each decoding step's distribution (never changes it) and schedules the steering."""

    def __init__(self, steerer):
        self.s = steerer

    def __call__(self, input_ids, scores):
        self.s._observe(input_ids, scores)
        return scores


class ReBalanceSteerer:
    """Context manager that steers ``model`` during generation with forward hooks.

    >>> with ReBalanceSteerer(model, tokenizer, cfg) as st:          # doctest: +SKIP
    ...     out = generate(model, tokenizer, prompts, 256, logits_processor=[st.processor])

    Greedy decoding is assumed when reading confidences (the max probability of each step's
    distribution is used, as in the paper). The hooks are removed on exit.
    """

    def __init__(self, model, tokenizer, config: ReBalanceConfig, sep: str = "\n\n"):
        layers = decoder_layers(model)
        if not 0 <= config.layer < len(layers):
            raise ValueError(f"layer must be in [0, {len(layers) - 1}], got {config.layer}")
        hidden = getattr(model.config, "hidden_size", None)
        if hidden is not None and config.vector.numel() != hidden:
            raise ValueError(f"steering vector has {config.vector.numel()} entries but the model's hidden size "
                             f"is {hidden}; it must match (fit it on this model with fit_rebalance)")
        if not isinstance(sep, str) or not sep:
            raise ValueError(f"sep (the text that ends a step) must be a non-empty string, got {sep!r}")
        self.model, self.cfg = model, config
        self.tokenizer, self.sep = tokenizer, sep
        self._pieces: dict[int, str] = {}
        self.processor = _Tracker(self)
        self._handle = None
        self.alphas_applied: list[float] = []
        self._reset(0)

    def _reset(self, bsz):
        self.bsz = bsz
        self.cur_logp: list[list[float]] = [[] for _ in range(bsz)]
        self.conf: list[list[float]] = [[] for _ in range(bsz)]
        self.tail: list[str] = ["" for _ in range(bsz)]  # text since the last step end, last len(sep)-1 chars
        self.pending = torch.zeros(bsz)
        self.prev_ids = None
        self.prev_scores_maxlogp = None

    def _observe(self, input_ids, scores):
        bsz, length = input_ids.shape
        continues = (self.prev_ids is not None and bsz == self.bsz
                     and length == self.prev_ids.shape[1] + 1
                     and torch.equal(input_ids[:, :-1].cpu(), self.prev_ids))
        if not continues:  # a new generation (or a new prompt batch) starts
            self._reset(bsz)
        elif self.prev_scores_maxlogp is not None:
            # the token appended since the last call was chosen from the previous distribution
            last = input_ids[:, -1].cpu()
            for b in range(bsz):
                self.cur_logp[b].append(float(self.prev_scores_maxlogp[b]))
                if self._ends_step(b, int(last[b])):
                    c = step_confidence(np.exp(self.cur_logp[b]))
                    self.conf[b].append(c)
                    v = window_variance(self.conf[b], self.cfg.window)[-1]
                    self.pending[b] = control(c, v, self.cfg)
                    self.cur_logp[b] = []
        self.prev_ids = input_ids.cpu()
        self.prev_scores_maxlogp = torch.log_softmax(scores.float(), -1).max(-1).values.cpu()

    def _ends_step(self, b: int, token_id: int) -> bool:
        """Whether appending ``token_id`` to row ``b`` completes the step separator. Detection is
        on the decoded text, so a separator written as several tokens (``"\\n"`` + ``"\\n"``) or
        inside a longer token (``".\\n\\n"``) ends the step just as a single ``"\\n\\n"`` token does."""
        piece = self._pieces.get(token_id)
        if piece is None:
            piece = self._pieces[token_id] = self.tokenizer.decode([token_id])
        text = self.tail[b] + piece
        keep = len(self.sep) - 1
        if self.sep in text:
            rest = text.rsplit(self.sep, 1)[1]
            self.tail[b] = rest[-keep:] if keep else ""
            return True
        self.tail[b] = text[-keep:] if keep else ""
        return False

    def _hook(self, module, args, output):
        h = output[0] if isinstance(output, tuple) else output
        if h.shape[1] != 1 or h.shape[0] != self.pending.shape[0] or not torch.any(self.pending != 0):
            return None  # prefill, or no step started: leave the forward untouched
        alpha = self.pending.to(h.device, h.dtype)
        self.alphas_applied.extend(float(a) for a in self.pending if a != 0)
        self.pending = torch.zeros_like(self.pending)
        h = h + alpha[:, None, None] * self.cfg.vector.to(h.device, h.dtype)
        return (h,) + tuple(output[1:]) if isinstance(output, tuple) else h

    def __enter__(self):
        if self.cfg.strength != 0:
            self._handle = decoder_layers(self.model)[self.cfg.layer].register_forward_hook(self._hook)
        return self

    def __exit__(self, *exc):
        if self._handle is not None:
            self._handle.remove()
            self._handle = None
        self._reset(0)
        return False


@torch.no_grad()
def fit_rebalance(model, tokenizer, prompts: Sequence[str], completions: Sequence[str], layer: int,
                  sep: str = "\n\n", q_low: float = 0.2, q_high: float = 0.8, window: int = 4,
                  strength: float = 1.0, amplitudes=(1.0, 1.0, 0.5),
                  relax: bool = False) -> ReBalanceConfig:
    """Build the steering vector and thresholds from calibration traces (teacher-forced).

    ``completions`` are the model's own outputs for ``prompts``. Thresholds are the ``q_low`` /
    ``q_high`` quantiles of the step confidences and window variances over all calibration steps.
    ``relax=True`` falls back to the confidence conditions alone when the joint O or U set is
    empty (tiny calibration sets); ``info["relaxed"]`` records it.
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
    device = next(model.parameters()).device
    conf, var, firsts, norms = [], [], [], []
    for prompt, comp in zip(prompts, completions):
        p_ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
        if not p_ids:
            raise ValueError(f"empty prompt {prompt!r}: each calibration prompt must contain at least one "
                             "token (the first step's confidence is read at the prompt's last position)")
        pieces = [s for s in comp.split(sep)]
        step_ids = []
        for i, s in enumerate(pieces):
            t = tokenizer(s + (sep if i < len(pieces) - 1 else ""), add_special_tokens=False)["input_ids"]
            if t:
                step_ids.append(t)
        if not step_ids:
            continue
        ids = p_ids + [t for s in step_ids for t in s]
        out = model(torch.tensor([ids], device=device), output_hidden_states=True)
        logp = torch.log_softmax(out.logits[0].float(), -1).max(-1).values.cpu().numpy()
        hid = out.hidden_states[layer + 1][0].float().cpu()  # output of decoder layer `layer`
        k = len(p_ids)
        cs = []
        for s in step_ids:
            cs.append(float(np.exp(np.mean(logp[k - 1:k - 1 + len(s)]))))
            firsts.append(hid[k])
            norms.append(float(hid[k].norm()))
            k += len(s)
        conf += cs
        var += window_variance(cs, window)
    conf, var = np.array(conf), np.array(var)
    tcl, tch = np.quantile(conf, [q_low, q_high])
    tvl, tvh = np.quantile(var, [q_low, q_high])
    o = (conf <= tcl) & (var >= tvh)
    u = (conf >= tch) & (var <= tvl)
    relaxed = False
    if (o.sum() == 0 or u.sum() == 0) and relax:
        # too few calibration steps for the joint conditions: use the confidence conditions only
        o, u, relaxed = conf <= tcl, conf >= tch, True
    if o.sum() == 0 or u.sum() == 0:
        raise ValueError(f"calibration found {int(o.sum())} overthinking and {int(u.sum())} "
                         "underthinking steps; use more or longer calibration traces")
    H = torch.stack(firsts)
    d = H[torch.from_numpy(o)].mean(0) - H[torch.from_numpy(u)].mean(0)
    vec = d / d.norm()
    return ReBalanceConfig(vector=vec, layer=layer, tau_c_low=float(tcl), tau_c_high=float(tch),
                           tau_v_low=float(tvl), tau_v_high=float(tvh), scale=float(np.mean(norms)),
                           strength=strength, amplitudes=tuple(amplitudes), window=window,
                           info={"n_steps": int(len(conf)), "n_over": int(o.sum()), "n_under": int(u.sum()),
                                 "relaxed": relaxed})
