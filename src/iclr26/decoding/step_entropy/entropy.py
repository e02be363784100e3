"""Step entropy of chain-of-thought steps and pruning of the lowest-entropy steps.

Paper: Li, Zhong, Zheng, Wen, Xu, Cheng, Zhang, Xu, "Making Slow Thinking Faster: Compressing LLM
Chain-of-Thought via Step Entropy", ICLR 2026, arXiv:2508.03346. Official code:
https://github.com/staymylove/COT_Compresstion_via_Step_entropy (independent implementation).

A chain of thought is split into steps S_1..S_N at the step separator ("\\n\\n", Sec. 3). The
entropy of step S_i is the sum of the Shannon entropies of the model's next-token distributions at
the tokens of that step, each conditioned on the question and everything before it (Sec. 3, the
step-entropy definition):

    H(t_ij) = - sum_w p(w | x, S_<i, t_i,<j) log2 p(w | ...)          (token entropy)
    H(S_i)  = sum_j H(t_ij)                                             (step entropy)

Theorem 1 bounds the information a step adds about the answer by its entropy, so low-entropy
steps are redundant. Compression replaces the floor(kappa * N) lowest-entropy steps by a
"[SKIP]" marker (kappa = 0.8 in the paper's main results, Sec. 4) and lets the model answer.
"""
from __future__ import annotations

import math
from typing import Optional, Sequence

import numpy as np
import torch

__all__ = [
    "split_steps",
    "token_entropies",
    "step_entropy",
    "select_steps",
    "compress_cot",
    "random_steps_matching_tokens",
    "skip_steps",
    "DEFAULT_KAPPA",
    "SKIP_TOKEN",
]

#: fraction of steps pruned in the paper's main results (Sec. 4, "80% of low-entropy steps")
DEFAULT_KAPPA = 0.8
#: the marker that replaces a pruned step (Sec. 3)
SKIP_TOKEN = "[SKIP]"
_MODES = ("low", "high", "random")
_REDUCTIONS = ("sum", "mean", "none")


def split_steps(cot: str, sep: str = "\n\n") -> list[str]:
    """Split a chain of thought into its non-empty steps at ``sep`` (paper: blank lines)."""
    if not isinstance(cot, str):
        raise TypeError(f"cot must be a string, got {type(cot).__name__}")
    if not isinstance(sep, str) or not sep:
        raise ValueError("sep must be a non-empty string (the paper splits steps at '\\n\\n')")
    return [s for s in cot.split(sep) if s.strip()]


def token_entropies(logits: torch.Tensor, base: float = 2.0) -> torch.Tensor:
    """Shannon entropy of softmax(logits) along the last axis, in units of log ``base``."""
    if not base > 1:
        raise ValueError(f"base must be > 1, got {base!r}")
    logp = torch.log_softmax(logits.float(), dim=-1)
    h = -(logp.exp() * logp).sum(-1)  # nats; 0 * -inf terms are 0 * finite after log_softmax
    return h / math.log(base)


@torch.no_grad()
def step_entropy(model, tokenizer, prompt: str, steps: Sequence[str], sep: str = "\n\n",
                 base: float = 2.0, reduction: str = "sum"):
    """Entropy of each step of a chain of thought under ``model`` (teacher-forced, one pass).

    ``prompt`` is the text before the chain of thought (e.g. the chat-formatted question);
    ``steps`` are its steps in order (see :func:`split_steps`). Each step is tokenized on its own
    (the separator that follows a step belongs to it), so token-to-step attribution is exact.
    ``reduction="sum"`` is the paper's definition (Sec. 3, H(S_i) = sum_j H(t_ij)); ``"mean"``
    divides by the step's token count (what the official code ranks by); ``"none"`` returns one
    numpy array of token entropies per step, so both reductions come from a single forward pass.
    """
    if isinstance(steps, str):
        raise TypeError("steps must be a sequence of step strings; use split_steps(cot) first")
    if reduction not in _REDUCTIONS:
        raise ValueError(f"reduction must be one of {_REDUCTIONS} ('sum' is the paper's), got {reduction!r}")
    steps = list(steps)
    if not steps:
        return []
    enc = lambda s: tokenizer(s, add_special_tokens=False)["input_ids"]  # noqa: E731
    prompt_ids = enc(prompt)
    if not prompt_ids:
        raise ValueError("prompt must contain at least one token (the question)")
    pieces = [enc(s + (sep if i < len(steps) - 1 else "")) for i, s in enumerate(steps)]
    ids = prompt_ids + [t for p in pieces for t in p]
    device = next(model.parameters()).device
    logits = model(torch.tensor([ids], device=device)).logits[0]
    # the distribution that produced token k sits at position k - 1
    h = token_entropies(logits[len(prompt_ids) - 1:-1], base=base).cpu().numpy()
    out, k = [], 0
    for p in pieces:
        hs = h[k:k + len(p)]
        k += len(p)
        if reduction == "none":
            out.append(hs)
        elif reduction == "sum":
            out.append(float(hs.sum()))
        else:
            out.append(float(hs.mean()) if len(hs) else 0.0)
    return out


def select_steps(entropies: Sequence[float], kappa: float = DEFAULT_KAPPA, mode: str = "low",
                 rng: Optional[np.random.Generator] = None) -> list[int]:
    """Indices of the floor(kappa * N) steps to prune: lowest entropy (the method), highest
    entropy, or uniformly random (the paper's two controls). Ties keep the earlier step first."""
    if mode not in _MODES:
        raise ValueError(f"mode must be one of {_MODES}, got {mode!r}")
    k = _validate_kappa(kappa)
    e = np.asarray(list(entropies), dtype=float)
    if e.ndim != 1 or not np.all(np.isfinite(e)):
        raise ValueError("entropies must be a 1-D sequence of finite numbers")
    n_prune = int(math.floor(k * len(e) + 1e-9))
    if n_prune == 0:
        return []
    if mode == "random":
        if rng is None:
            raise ValueError("mode='random' needs rng (a numpy Generator) for reproducibility")
        return sorted(rng.choice(len(e), size=n_prune, replace=False).tolist())
    order = np.argsort(e if mode == "low" else -e, kind="stable")
    return sorted(order[:n_prune].tolist())


def _validate_kappa(kappa) -> float:
    try:
        k = float(kappa)
    except (TypeError, ValueError):
        raise TypeError(f"kappa must be a number in [0, 1], got {kappa!r}") from None
    if not 0.0 <= k <= 1.0:
        raise ValueError(f"kappa (fraction of steps pruned) must be in [0, 1], got {kappa!r}")
    return k


def compress_cot(steps: Sequence[str], entropies: Sequence[float], kappa: float = DEFAULT_KAPPA,
                 mode: str = "low", skip_token: str = SKIP_TOKEN, sep: str = "\n\n",
                 rng: Optional[np.random.Generator] = None) -> str:
    """Rebuild the chain of thought with the selected steps replaced by ``skip_token``.

    ``kappa=0`` returns the steps joined unchanged (no pruning).
    """
    steps = list(steps)
    if len(steps) != len(list(entropies)):
        raise ValueError(f"got {len(steps)} steps but {len(list(entropies))} entropies")
    return skip_steps(steps, select_steps(entropies, kappa, mode, rng), skip_token, sep)


def skip_steps(steps: Sequence[str], drop: Sequence[int], skip_token: str = SKIP_TOKEN,
               sep: str = "\n\n") -> str:
    """Join ``steps`` with ``sep``, each step whose index is in ``drop`` replaced by ``skip_token``
    (Sec. 3, Fig. 2: a pruned step leaves its [SKIP] marker in place)."""
    steps = list(steps)
    drop = set(int(i) for i in drop)
    bad = [i for i in drop if not 0 <= i < len(steps)]
    if bad:
        raise ValueError(f"step indices {sorted(bad)} are out of range for {len(steps)} steps")
    return sep.join(skip_token if i in drop else s for i, s in enumerate(steps))


def random_steps_matching_tokens(lengths: Sequence[int], n_tokens: float,
                                 rng: np.random.Generator) -> list[int]:
    """Random steps that together hold about ``n_tokens`` tokens (a length-matched control).

    Not in the paper: low-entropy pruning by the summed entropy tends to drop short steps, so at
    the same step count it removes fewer tokens than random pruning. This control visits the steps
    in a random order and prunes the prefix of that order whose token total is closest to
    ``n_tokens`` (the smaller one on a tie), so it removes as much text as the method did.
    """
    n = np.asarray(list(lengths), dtype=float)
    if n.ndim != 1 or not np.all(np.isfinite(n)) or np.any(n < 0):
        raise ValueError("lengths must be a 1-D sequence of non-negative token counts")
    if not (np.isfinite(n_tokens) and n_tokens >= 0):
        raise ValueError(f"n_tokens must be a finite number >= 0, got {n_tokens!r}")
    if rng is None:
        raise ValueError("random_steps_matching_tokens needs rng (a numpy Generator) for reproducibility")
    order = rng.permutation(len(n))
    totals = np.concatenate([[0.0], np.cumsum(n[order])])
    best = int(np.argmin(np.abs(totals - n_tokens)))  # argmin takes the first (smaller) prefix on a tie
    return sorted(order[:best].tolist())
