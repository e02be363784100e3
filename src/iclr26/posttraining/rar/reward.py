"""Rubrics as Rewards (RaR): rubric-based rewards for on-policy post-training.

Paper: Gunjal, Wang, Lau, Nath, He, Liu, Hendryx, "Rubrics as Rewards: Reinforcement Learning Beyond
Verifiable Domains", arXiv:2507.17746 (v2, ICLR 2026). No official training code is public; Scale AI
released the rubric data sets (RaR-Medicine, RaR-Science).

Every prompt ``x`` carries a rubric of ``k`` items ``(w_j, c_j)``: a weight and a binary criterion
``c_j(x, y) in {0, 1}`` that a judge evaluates on the response ``y``.

* **Explicit aggregation** (Sec. 2.2, Eq. 1): every criterion is judged on its own and

      r(x, y) = sum_j w_j * c_j(x, y) / sum_j w_j

  with the categorical weights of Sec. 4.4 (RaR-Explicit): Essential 1.0, Important 0.7,
  Optional 0.3, Pitfall 0.9. Pitfall items are phrased in positive form ("the response avoids
  ..."), so a satisfied pitfall item adds to the reward (Sec. 4.4, footnote).
* **Implicit aggregation** (Sec. 2.2, Eq. 2): one judge call sees the prompt, the response and the
  whole rubric and returns one Likert rating in 1..10, normalised to [0, 1] (Sec. 4.4, RaR-Implicit).

:class:`RubricReward` has the calling convention of a TRL ``GRPOTrainer`` reward function,
``reward(prompts, completions, **kwargs) -> list[float]``; the rubric of each sample arrives as a
dataset column (``rubric=`` by default). The judge is pluggable: any callable of the batched
protocol below, or :class:`TransformersYesNoJudge`, which scores a criterion by the next-token
likelihood of "Yes" against "No" under a causal language model.

Judge protocol (batched: one call per reward evaluation)

* explicit: ``judge(prompts, completions, items) -> sequence of floats in [0, 1]``, one verdict per
  ``(prompt, completion, RubricItem)`` triple (1 = criterion satisfied; a probability is allowed
  and thresholded at 0.5 unless ``binary=False``);
* implicit: ``judge(prompts, completions, rubrics) -> sequence of Likert ratings`` in
  ``[likert_min, likert_max]``, one per ``(prompt, completion, Rubric)``.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Mapping, Sequence

__all__ = ["CATEGORY_WEIGHTS", "RubricItem", "Rubric", "as_rubric", "explicit_reward", "normalize_likert",
           "rubric_list_string", "criterion_prompt", "likert_prompt", "RubricReward", "TransformersYesNoJudge",
           "TransformersLikertJudge"]

#: RaR-Explicit's categorical weights (arXiv:2507.17746v2, Sec. 4.4; v1 used 0.8 for Pitfall).
CATEGORY_WEIGHTS: dict[str, float] = {"essential": 1.0, "important": 0.7, "optional": 0.3, "pitfall": 0.9}


@dataclass(frozen=True)
class RubricItem:
    """One rubric criterion: a self-contained description, its category and its weight.

    ``weight`` defaults to :data:`CATEGORY_WEIGHTS` of the category. Weights must be positive:
    pitfalls are phrased so that "satisfied" means "pitfall avoided" (the paper's convention), so a
    released data set with signed pitfall weights (-1/-2 on "Does not mention ..." items) must be
    converted (rephrase the item, use a positive weight) before use.
    """

    description: str
    category: str = "essential"
    weight: float | None = None

    def __post_init__(self):
        if not isinstance(self.description, str) or not self.description.strip():
            raise ValueError("rubric item description must be a non-empty string")
        cat = str(self.category).strip().lower()
        if cat not in CATEGORY_WEIGHTS:
            raise ValueError(f"rubric item category must be one of {sorted(CATEGORY_WEIGHTS)}, got {self.category!r}")
        object.__setattr__(self, "category", cat)
        w = CATEGORY_WEIGHTS[cat] if self.weight is None else float(self.weight)
        if not (w > 0 and math.isfinite(w)):
            raise ValueError(f"rubric item weight must be a finite number > 0 (pitfalls are phrased so that "
                             f"'satisfied' means 'avoided'), got {self.weight!r}")
        object.__setattr__(self, "weight", w)


@dataclass(frozen=True)
class Rubric:
    """The instance-specific rubric of one prompt: a non-empty tuple of :class:`RubricItem`."""

    items: tuple

    def __post_init__(self):
        items = tuple(as_item(i) for i in self.items)
        if not items:
            raise ValueError("a rubric needs at least one item")
        object.__setattr__(self, "items", items)

    @property
    def weights(self) -> list[float]:
        return [i.weight for i in self.items]

    def __len__(self) -> int:
        return len(self.items)

    def __iter__(self):
        return iter(self.items)


def as_item(obj) -> RubricItem:
    """A :class:`RubricItem` from an item, a description string (Essential) or a mapping with
    ``description`` (or ``criterion``), optional ``category`` and ``weight``."""
    if isinstance(obj, RubricItem):
        return obj
    if isinstance(obj, str):
        return RubricItem(obj)
    if isinstance(obj, Mapping):
        desc = obj.get("description", obj.get("criterion"))
        return RubricItem(desc, obj.get("category", "essential"), obj.get("weight"))
    raise TypeError(f"a rubric item must be a RubricItem, a string or a mapping, got {type(obj).__name__}")


def as_rubric(obj) -> Rubric:
    """A :class:`Rubric` from a rubric or a sequence of items (see :func:`as_item`)."""
    if isinstance(obj, Rubric):
        return obj
    if isinstance(obj, (str, bytes)) or not isinstance(obj, Sequence):
        raise TypeError(f"a rubric must be a Rubric or a list of items, got {type(obj).__name__}")
    return Rubric(tuple(obj))


def explicit_reward(verdicts: Sequence[float], weights: Sequence[float]) -> float:
    """Eq. 1: ``sum_j w_j c_j / sum_j w_j`` for verdicts ``c_j`` in [0, 1] and weights ``w_j > 0``."""
    if len(verdicts) != len(weights) or not len(weights):
        raise ValueError(f"need one verdict per weight and at least one, got {len(verdicts)} verdicts "
                         f"and {len(weights)} weights")
    num = den = 0.0
    for c, w in zip(verdicts, weights):
        c, w = float(c), float(w)
        if not 0.0 <= c <= 1.0:
            raise ValueError(f"verdicts must lie in [0, 1], got {c!r}")
        if not w > 0:
            raise ValueError(f"weights must be > 0, got {w!r}")
        num += w * c
        den += w
    return num / den


def normalize_likert(rating: float, low: float = 1.0, high: float = 10.0) -> float:
    """A Likert rating in ``[low, high]`` mapped linearly onto [0, 1] (Sec. 4.3-4.4: "normalized to
    [0, 1]"; the paper does not spell out the map, the linear one is our choice)."""
    r = float(rating)
    if not high > low:
        raise ValueError(f"Likert scale needs high > low, got low={low!r}, high={high!r}")
    if not low <= r <= high:
        raise ValueError(f"Likert rating must lie in [{low}, {high}], got {rating!r}")
    return (r - low) / (high - low)


def rubric_list_string(rubric) -> str:
    """The rubric as the implicit judge sees it: one line per item, ``[Category] (weight) text``."""
    return "\n".join(f"- [{i.category.capitalize()}] (weight {i.weight:g}) {i.description}"
                     for i in as_rubric(rubric))


def criterion_prompt(prompt: str, completion: str, item) -> str:
    """The per-criterion question of the explicit judge (the paper gives no template for it)."""
    item = as_item(item)
    return ("You are an expert evaluator. Decide whether the response satisfies the criterion.\n"
            f"<prompt>\n{prompt}\n</prompt>\n<response>\n{completion}\n</response>\n"
            f"<criterion>\n{item.description}\n</criterion>\n"
            "Does the response satisfy the criterion? Answer Yes or No.")


def _text(c) -> str:
    """The text of a completion: a string, or TRL's conversational form (list of messages)."""
    if isinstance(c, str):
        return c
    if isinstance(c, Sequence) and c and isinstance(c[-1], Mapping) and "content" in c[-1]:
        return str(c[-1]["content"])
    raise TypeError(f"a completion must be a string or a list of chat messages, got {type(c).__name__}")


def _check_verdict(x, j: int) -> float:
    """A judge verdict as a float, validated *before* any thresholding: finite and in [0, 1]
    (a NaN would otherwise compare False with 0.5 and silently become 0)."""
    try:
        v = float(x)
    except (TypeError, ValueError):
        raise TypeError(f"judge verdict {j} must be a number in [0, 1], got {x!r}") from None
    if not math.isfinite(v) or not 0.0 <= v <= 1.0:
        raise ValueError(f"judge verdict {j} must be a finite number in [0, 1], got {x!r}")
    return v


def _check_rating(x, j: int) -> float:
    """A judge's Likert rating as a float, rejected when it is not finite (NaN, inf)."""
    try:
        r = float(x)
    except (TypeError, ValueError):
        raise TypeError(f"judge rating {j} must be a number, got {x!r}") from None
    if not math.isfinite(r):
        raise ValueError(f"judge rating {j} must be finite, got {x!r}")
    return r


class RubricReward:
    """A TRL-compatible reward function that scores completions against per-prompt rubrics.

    ``RubricReward(judge, aggregation="explicit")(prompts, completions, rubric=rubrics)`` returns
    one float in [0, 1] per completion: Eq. 1 over the judge's per-criterion verdicts
    (``aggregation="explicit"``) or the judge's normalised holistic Likert rating given the whole
    rubric (``"implicit"``, Eq. 2). ``weights`` (a mapping category -> weight) replaces the weight
    of every item of a listed category, e.g. uniform weights as in RaR-Predefined; ``binary`` thresholds
    probabilistic verdicts at 0.5 (the paper's c_j are binary). ``rubric_key`` names the dataset
    column holding the rubrics.
    """

    def __init__(self, judge: Callable, aggregation: str = "explicit", *, weights: Mapping[str, float] | None = None,
                 binary: bool = True, likert_min: float = 1.0, likert_max: float = 10.0, rubric_key: str = "rubric"):
        if not callable(judge):
            raise TypeError(f"judge must be callable, got {type(judge).__name__}")
        if aggregation not in ("explicit", "implicit"):
            raise ValueError(f"aggregation must be 'explicit' or 'implicit', got {aggregation!r}")
        if weights is not None:
            bad = sorted(set(weights) - set(CATEGORY_WEIGHTS))
            if bad:
                raise ValueError(f"weights keys must be categories {sorted(CATEGORY_WEIGHTS)}, got {bad}")
            if not all(float(v) > 0 for v in weights.values()):
                raise ValueError("category weights must be > 0")
        if not likert_max > likert_min:
            raise ValueError(f"likert_max must exceed likert_min, got {likert_min!r}, {likert_max!r}")
        self.judge = judge
        self.aggregation = aggregation
        self.weights = dict(weights) if weights is not None else None
        self.binary = binary
        self.likert_min, self.likert_max = float(likert_min), float(likert_max)
        self.rubric_key = rubric_key
        self.__name__ = f"rar_{aggregation}"   # TRL logs reward functions by name

    def _weight(self, item: RubricItem) -> float:
        if self.weights is not None:
            return float(self.weights.get(item.category, item.weight))
        return item.weight

    def __call__(self, prompts=None, completions=None, **kwargs) -> list[float]:
        if completions is None:
            raise ValueError("completions are required")
        if self.rubric_key not in kwargs:
            raise ValueError(f"no rubrics: pass them as the {self.rubric_key!r} keyword (a dataset column)")
        rubrics_raw = kwargs[self.rubric_key]
        texts = [_text(c) for c in completions]
        n = len(texts)
        prompts = [""] * n if prompts is None else [_text(p) for p in prompts]
        if len(prompts) != n or len(rubrics_raw) != n:
            raise ValueError(f"prompts ({len(prompts)}), completions ({n}) and rubrics ({len(rubrics_raw)}) "
                             "must have the same length")
        rubrics = [as_rubric(r) for r in rubrics_raw]
        if self.aggregation == "implicit":
            ratings = list(self.judge(prompts, texts, rubrics))
            if len(ratings) != n:
                raise ValueError(f"judge returned {len(ratings)} ratings for {n} completions")
            return [normalize_likert(_check_rating(r, j), self.likert_min, self.likert_max)
                    for j, r in enumerate(ratings)]
        flat_p, flat_c, flat_i = [], [], []
        for p, c, rub in zip(prompts, texts, rubrics):
            for it in rub:
                flat_p.append(p), flat_c.append(c), flat_i.append(it)
        verdicts = list(self.judge(flat_p, flat_c, flat_i))
        if len(verdicts) != len(flat_i):
            raise ValueError(f"judge returned {len(verdicts)} verdicts for {len(flat_i)} criteria")
        verdicts = [_check_verdict(x, j) for j, x in enumerate(verdicts)]
        out, pos = [], 0
        for rub in rubrics:
            k = len(rub)
            v = verdicts[pos:pos + k]
            if self.binary:
                v = [1.0 if x >= 0.5 else 0.0 for x in v]
            w = [self._weight(it) for it in rub]
            out.append(explicit_reward(v, w))
            pos += k
        return out


class TransformersYesNoJudge:
    """A per-criterion judge from a causal LM: ``P(Yes) / (P(Yes) + P(No))`` of the next token.

    Follows the explicit judge protocol (batched). The question is :func:`criterion_prompt`,
    wrapped in the tokenizer's chat template when it has one. Left padding, one forward pass per
    batch of ``batch_size`` criteria; no generation.
    """

    def __init__(self, model, tokenizer, *, batch_size: int = 8, template: Callable = criterion_prompt,
                 yes: str = "Yes", no: str = "No", use_chat_template: bool | None = None):
        if not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"batch_size must be a positive integer, got {batch_size!r}")
        self.model, self.tokenizer, self.batch_size, self.template = model, tokenizer, batch_size, template
        ids_y = tokenizer.encode(yes, add_special_tokens=False)
        ids_n = tokenizer.encode(no, add_special_tokens=False)
        if not ids_y or not ids_n or ids_y[0] == ids_n[0]:
            raise ValueError(f"'{yes}' and '{no}' must start with different tokens")
        self.yes_id, self.no_id = ids_y[0], ids_n[0]
        if use_chat_template is None:
            use_chat_template = getattr(tokenizer, "chat_template", None) is not None
        self.use_chat_template = use_chat_template

    def _format(self, prompt, completion, item) -> str:
        q = self.template(prompt, completion, item)
        if self.use_chat_template:
            return self.tokenizer.apply_chat_template([{"role": "user", "content": q}], tokenize=False,
                                                      add_generation_prompt=True)
        return q + "\nAnswer:"

    def __call__(self, prompts, completions, items) -> list[float]:
        import torch

        if not len(prompts) == len(completions) == len(items):
            raise ValueError("prompts, completions and items must have the same length")
        texts = [self._format(p, c, i) for p, c, i in zip(prompts, completions, items)]
        logits = _last_logits(self.model, self.tokenizer, texts, self.batch_size)
        pair = torch.log_softmax(logits[:, [self.yes_id, self.no_id]], dim=-1)
        return pair[:, 0].exp().tolist()


def _last_logits(model, tokenizer, texts, batch_size):
    """Next-token logits (float32, one row per text) after each text: left padding, no generation."""
    import torch

    tok = tokenizer
    side = tok.padding_side
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    tok.padding_side = "left"
    rows = []
    try:
        for s in range(0, len(texts), batch_size):
            enc = tok(texts[s:s + batch_size], return_tensors="pt", padding=True)
            enc = {k: v.to(model.device) for k, v in enc.items()}
            with torch.no_grad():
                rows.append(model(**enc, logits_to_keep=1).logits[:, -1].float().cpu())
    finally:
        tok.padding_side = side
    if not rows:
        return torch.zeros(0, len(tok))
    return torch.cat(rows)


def likert_prompt(prompt: str, completion: str, rubric=None, low: int = 1, high: int = 9) -> str:
    """The holistic rating question (Sec. 4.3-4.4). With ``rubric`` it is RaR-Implicit's judge
    (Eq. 2: the whole rubric in view, one rating); with ``rubric=None`` it is Direct-Likert's
    (no rubric, no reference). The paper's exact wording is not public; this template is ours."""
    head = ("You are an expert evaluator. Rate the quality of the response to the prompt "
            f"on a scale from {low} (worst) to {high} (best).\n"
            f"<prompt>\n{prompt}\n</prompt>\n<response>\n{completion}\n</response>\n")
    if rubric is not None:
        head += ("Judge the response against this rubric (each item is a criterion the response should "
                 f"satisfy; higher weights matter more):\n<rubric>\n{rubric_list_string(rubric)}\n</rubric>\n")
    return head + f"Answer with a single digit from {low} to {high}."


class TransformersLikertJudge:
    """A holistic Likert judge from a causal LM: the expected rating under the next-token
    distribution restricted to the digit tokens ``low..high`` (one forward pass, no generation).

    Follows the implicit judge protocol: ``judge(prompts, completions, rubrics) -> ratings``.
    ``use_rubric=True`` is RaR-Implicit's judge (Eq. 2); ``use_rubric=False`` ignores the rubric
    column and is the Direct-Likert baseline (Sec. 4.3). Pair it with
    ``RubricReward(judge, "implicit", likert_min=low, likert_max=high)``. Ratings are single digits so
    that each is one token; the paper's scale is 1-10 (a deviation, see the README).
    """

    def __init__(self, model, tokenizer, *, use_rubric: bool = True, low: int = 1, high: int = 9,
                 batch_size: int = 8, template: Callable = likert_prompt, use_chat_template: bool | None = None):
        if not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"batch_size must be a positive integer, got {batch_size!r}")
        if not (isinstance(low, int) and isinstance(high, int) and 0 <= low < high <= 9):
            raise ValueError(f"low and high must be single digits with low < high, got low={low!r}, high={high!r}")
        self.model, self.tokenizer, self.batch_size, self.template = model, tokenizer, batch_size, template
        self.use_rubric, self.low, self.high = bool(use_rubric), low, high
        ids = []
        for k in range(low, high + 1):
            t = tokenizer.encode(str(k), add_special_tokens=False)
            if len(t) != 1:
                raise ValueError(f"the rating {k} must be a single token of this tokenizer, got {t}")
            ids.append(t[0])
        if len(set(ids)) != len(ids):
            raise ValueError("the rating digits must be distinct tokens")
        self.ids = ids
        if use_chat_template is None:
            use_chat_template = getattr(tokenizer, "chat_template", None) is not None
        self.use_chat_template = use_chat_template

    def _format(self, prompt, completion, rubric) -> str:
        q = self.template(prompt, completion, rubric if self.use_rubric else None, self.low, self.high)
        if self.use_chat_template:
            return self.tokenizer.apply_chat_template([{"role": "user", "content": q}], tokenize=False,
                                                      add_generation_prompt=True)
        return q + "\nRating:"

    def __call__(self, prompts, completions, rubrics) -> list[float]:
        import torch

        if not len(prompts) == len(completions) == len(rubrics):
            raise ValueError("prompts, completions and rubrics must have the same length")
        texts = [self._format(p, c, r) for p, c, r in zip(prompts, completions, rubrics)]
        logits = _last_logits(self.model, self.tokenizer, texts, self.batch_size)
        probs = torch.softmax(logits[:, self.ids], dim=-1)
        scale = torch.arange(self.low, self.high + 1, dtype=probs.dtype)
        return (probs * scale).sum(-1).tolist()
