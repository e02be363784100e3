"""A synthetic rubric environment for RaR (arXiv:2507.17746): latent per-criterion truth, judges of
controlled quality, and a small GRPO policy over response types.

The paper trains Qwen2.5-7B with GRPO (Sec. 4.2) on rewards from a gpt-4o-mini judge; this module
keeps the parts of that loop that decide which reward wins (what the judge sees, how noisy it is,
how the reward is aggregated, group-normalised policy updates) and replaces the language models by
latent variables, so the comparison runs in seconds on a CPU.

* :func:`make_environment`: ``n_prompts`` prompts, each with an instance-specific rubric
  (categories of Sec. 3: Essential/Important/Optional/Pitfall, weights of Sec. 4.4) and
  ``n_responses`` candidate responses whose per-criterion satisfaction is latent truth. A response
  has an ability ``a ~ N(0, 1)`` and a criterion a difficulty ``b ~ N(0, 1)``;
  ``P(satisfied) = sigmoid(slope * a - b)``, so good responses tend to satisfy many criteria but
  not always the heavy ones. True quality is Eq. 1 over the true verdicts.
* :class:`SimulatedJudge`: a judge of error rate ``eps`` (the stand-in for judge size) that
  perceives every criterion it considers with a flip probability ``eps``. Per criterion
  (explicit protocol) it returns the perceived verdict; holistically (implicit protocol) it
  aggregates its perceived verdicts with its own noisy reading of the weights and reports a
  1..10 Likert rating with rating noise ``rating_sd``. A rubric-free judge (Direct-Likert, Sec. 4.3)
  does the same over only the criteria it would think of unprompted: a fixed share ``recall`` of
  each prompt's criteria, equally weighted.
* :func:`grpo_bandit`: tabular softmax policy per prompt over its responses, trained with GRPO's
  group-normalised advantages (Shao et al. 2024; 16 samples per prompt as in Sec. 4.2) on the
  rewards of any TRL-style reward function, e.g. :class:`~iclr26.posttraining.rar.RubricReward`.
"""
from __future__ import annotations

import numpy as np

from .reward import CATEGORY_WEIGHTS, Rubric, RubricItem

__all__ = ["DEFAULT_CATEGORIES", "RubricEnvironment", "make_environment", "SimulatedJudge", "grpo_bandit"]

#: an 8-item rubric with every category (the paper's rubrics have 7-20 items, Sec. 3.2)
DEFAULT_CATEGORIES = ("essential", "essential", "important", "important", "important", "optional", "optional",
                      "pitfall")


class RubricEnvironment:
    """Prompts ``"prompt i"``, responses ``"response m"``, rubrics and the latent truth
    ``satisfied[i, m, j]`` (bool) of criterion ``j`` of prompt ``i`` for response ``m``."""

    def __init__(self, rubrics: list, satisfied: np.ndarray, known: np.ndarray):
        satisfied = np.asarray(satisfied, dtype=bool)
        if satisfied.ndim != 3 or satisfied.shape[0] != len(rubrics):
            raise ValueError(f"satisfied must have shape (n_prompts, n_responses, n_items) with n_prompts = "
                             f"{len(rubrics)}, got {satisfied.shape}")
        if any(len(r) != satisfied.shape[2] for r in rubrics):
            raise ValueError("every rubric must have n_items items")
        self.rubrics = list(rubrics)
        self.satisfied = satisfied
        self.known = np.asarray(known, dtype=bool)
        self.weights = np.array([r.weights for r in rubrics], dtype=float)        # (P, k)
        self.prompts = [f"prompt {i}" for i in range(len(rubrics))]
        self.index = {it: (i, j) for i, r in enumerate(rubrics) for j, it in enumerate(r)}

    @property
    def n_prompts(self) -> int:
        return self.satisfied.shape[0]

    @property
    def n_responses(self) -> int:
        return self.satisfied.shape[1]

    @staticmethod
    def completion(m: int) -> str:
        return f"response {m}"

    @staticmethod
    def parse(prompt: str, completion: str) -> tuple[int, int]:
        """(prompt index, response index) of a prompt and completion string of this environment."""
        return int(prompt.rsplit(" ", 1)[1]), int(completion.rsplit(" ", 1)[1])

    def true_quality(self) -> np.ndarray:
        """Eq. 1 over the true verdicts: ``(n_prompts, n_responses)`` in [0, 1]."""
        w = self.weights[:, None, :]
        return (self.satisfied * w).sum(-1) / w.sum(-1)


def make_environment(n_prompts: int, n_responses: int, rng: np.random.Generator, *,
                     categories=DEFAULT_CATEGORIES, slope: float = 1.5, recall: float = 0.5) -> RubricEnvironment:
    """Draw an environment (see the module docstring). ``recall`` is the share of each prompt's
    criteria a rubric-free judge considers (rounded, at least one)."""
    if n_prompts < 1 or n_responses < 2:
        raise ValueError(f"need n_prompts >= 1 and n_responses >= 2, got {n_prompts}, {n_responses}")
    if not 0 < recall <= 1:
        raise ValueError(f"recall must lie in (0, 1], got {recall!r}")
    k = len(categories)
    rubrics = [Rubric(tuple(RubricItem(f"criterion {j} of prompt {i}", c) for j, c in enumerate(categories)))
               for i in range(n_prompts)]
    ability = rng.standard_normal((n_prompts, n_responses, 1))
    difficulty = rng.standard_normal((n_prompts, 1, k))
    p_sat = 1.0 / (1.0 + np.exp(-(slope * ability - difficulty)))
    satisfied = rng.random((n_prompts, n_responses, k)) < p_sat
    n_known = max(1, int(round(recall * k)))
    known = np.zeros((n_prompts, k), dtype=bool)
    for i in range(n_prompts):
        known[i, rng.choice(k, size=n_known, replace=False)] = True
    return RubricEnvironment(rubrics, satisfied, known)


class SimulatedJudge:
    """A judge of error rate ``eps`` over a :class:`RubricEnvironment` (see the module docstring).

    ``mode``: ``"criterion"`` (explicit protocol: one verdict per item), ``"rubric"`` (implicit
    protocol: a Likert rating given the rubric) or ``"direct"`` (a Likert rating without the
    rubric, over the criteria it recalls; use it with any rubric column, which it ignores).
    ``weight_sd`` is the log-normal spread of the holistic judge's reading of the weights.
    """

    def __init__(self, env: RubricEnvironment, eps: float, mode: str, rng: np.random.Generator, *,
                 rating_sd: float = 1.0, weight_sd: float = 0.3):
        if mode not in ("criterion", "rubric", "direct"):
            raise ValueError(f"mode must be 'criterion', 'rubric' or 'direct', got {mode!r}")
        if not 0 <= eps <= 0.5:
            raise ValueError(f"eps (flip probability) must lie in [0, 0.5], got {eps!r}")
        if rating_sd < 0 or weight_sd < 0:
            raise ValueError("rating_sd and weight_sd must be >= 0")
        self.env, self.eps, self.mode, self.rng = env, float(eps), mode, rng
        self.rating_sd, self.weight_sd = float(rating_sd), float(weight_sd)

    def _perceive(self, truth: np.ndarray) -> np.ndarray:
        return truth ^ (self.rng.random(truth.shape) < self.eps)

    def __call__(self, prompts, completions, items_or_rubrics) -> list[float]:
        env = self.env
        idx = np.array([env.parse(p, c) for p, c in zip(prompts, completions)], dtype=int).reshape(-1, 2)
        if self.mode == "criterion":
            j = np.array([env.index[it][1] for it in items_or_rubrics], dtype=int)
            return self._perceive(env.satisfied[idx[:, 0], idx[:, 1], j]).astype(float).tolist()
        truth = env.satisfied[idx[:, 0], idx[:, 1]]                                  # (n, k)
        seen = self._perceive(truth).astype(float)
        if self.mode == "rubric":
            w = env.weights[idx[:, 0]] * np.exp(self.weight_sd * self.rng.standard_normal(truth.shape))
        else:
            w = env.known[idx[:, 0]].astype(float)
        score = (seen * w).sum(1) / w.sum(1)
        rating = 1.0 + 9.0 * score + self.rating_sd * self.rng.standard_normal(len(score))
        return np.clip(np.rint(rating), 1, 10).tolist()


def grpo_bandit(env: RubricEnvironment, reward_fn, rng: np.random.Generator, *, steps: int = 50,
                group: int = 16, lr: float = 1.0, rubric_key: str = "rubric") -> np.ndarray:
    """Train one softmax policy per prompt over its responses with GRPO and ``reward_fn``.

    Each step samples ``group`` responses per prompt, scores them with
    ``reward_fn(prompts=..., completions=..., rubric=...)`` and ascends the policy gradient with the
    group-normalised advantage ``(r - mean(r)) / (std(r) + 1e-4)`` (GRPO, no KL term). Returns the
    final policy ``(n_prompts, n_responses)``.
    """
    if steps < 0 or group < 2 or not lr > 0:
        raise ValueError(f"need steps >= 0, group >= 2 and lr > 0, got {steps}, {group}, {lr}")
    P, M = env.n_prompts, env.n_responses
    theta = np.zeros((P, M))
    rows = np.repeat(np.arange(P), group)
    prompts = [env.prompts[i] for i in rows]
    rubrics = [env.rubrics[i] for i in rows]
    for _ in range(steps):
        probs = np.exp(theta - theta.max(1, keepdims=True))
        probs /= probs.sum(1, keepdims=True)
        u = rng.random((P, group, 1))
        acts = (u > np.cumsum(probs, 1)[:, None, :]).sum(-1).clip(max=M - 1)         # (P, G)
        comps = [env.completion(m) for m in acts.ravel()]
        r = np.asarray(reward_fn(prompts=prompts, completions=comps, **{rubric_key: rubrics}), float).reshape(P, group)
        adv = (r - r.mean(1, keepdims=True)) / (r.std(1, keepdims=True) + 1e-4)
        onehot = np.zeros((P, group, M))
        np.put_along_axis(onehot, acts[..., None], 1.0, axis=-1)
        grad = (adv[..., None] * (onehot - probs[:, None, :])).mean(1)
        theta += lr * grad
    probs = np.exp(theta - theta.max(1, keepdims=True))
    return probs / probs.sum(1, keepdims=True)
