"""The three PERSPECTRA tasks: item builders, prompts, answer parsing and metrics.

PERSPECTRA: A Scalable and Configurable Pluralist Benchmark of Perspectives from Arguments
(Nie, Omoomi, Flek, Zhao, Welch; ICLR 2026; arXiv 2602.08716; data caisa-lab/ICLR-2026-Pespectra).
The release holds only the data; the task construction below follows the paper's description as
far as we could read it (abstract and secondary notes, see README "Deviations"):

- opinion counting (T1): several arguments on one topic are concatenated; some voice the same
  opinion in other words; the answer is the number of distinct opinions. Metrics: accuracy, MAE and
  the normalised inverse error ``NIE = mean_i (1 + |k_hat_i - k_i| / max(1, k_i))^-1``.
- opinion matching (T2): one argument, the topic's opinions as options; exact accuracy (the source
  opinion) and stance accuracy (an option of the source's stance).
- polarity check (T3): one argument (mixed discourse: it may concede the other side); does it
  support or oppose the topic?
"""
from __future__ import annotations

import math
import re
from typing import Callable, Sequence

import numpy as np

from .dataset import Topic

LETTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
POLARITY_LABELS = ("pro", "con")           # option A = supports the topic, option B = opposes it

#: markers of concessive structure (a conceded point followed by the writer's own): the lexical cue
#: used to tag released arguments as concessive (the mini benchmark tags its framings exactly)
CONCESSIVE_MARKERS = ("although", "even though", "though", "while it is true", "it is true that",
                      "admittedly", "granted", "despite", "in spite of", "to be fair", "i understand that",
                      "i get that", "i see the point", "sure,", "of course,", "yes,", "while some")


def _rng(seed):
    if isinstance(seed, (bool, float)) or not isinstance(seed, (int, np.integer)):
        raise TypeError(f"seed must be an int, got {type(seed).__name__}")
    return np.random.default_rng(int(seed))


def _positive_int(x, name):
    if isinstance(x, bool) or not isinstance(x, (int, np.integer)) or x < 1:
        raise ValueError(f"{name} must be a positive integer, got {x!r}")
    return int(x)


def _check_topics(topics):
    topics = list(topics) if not isinstance(topics, list) else topics
    if not topics:
        raise ValueError("topics is empty: load a PERSPECTRA file or build a mini benchmark first")
    if not all(isinstance(t, Topic) for t in topics):
        raise TypeError("topics must be Topic objects (from load(), parse() or the mini benchmark)")
    return topics


def is_concessive(text: str) -> bool:
    """True when ``text`` holds a concessive marker (:data:`CONCESSIVE_MARKERS`, whole words)."""
    if not isinstance(text, str):
        raise TypeError(f"text must be a string, got {type(text).__name__}")
    low = " " + re.sub(r"\s+", " ", text.lower()) + " "
    return any(re.search(r"(?<![a-z])" + re.escape(m) + r"(?![a-z])", low) for m in CONCESSIVE_MARKERS)


# --------------------------------------------------------------------------- builders
def build_counting_task(topics, n: int, seed: int, max_count: int = 5, max_extra: int = 2) -> list[dict]:
    """``n`` counting items: a topic, ``k`` distinct opinions (``k`` uniform on 1..``max_count``, capped
    by the topic's opinions) voiced by ``k + e`` arguments (``e`` uniform on 0..``max_extra``: extra
    arguments are further expansions of the chosen opinions), shuffled. The answer options are
    1..``max_count``, so an uninformed guesser errs up and down equally often."""
    topics = _check_topics(topics)
    n, max_count = _positive_int(n, "n"), _positive_int(max_count, "max_count")
    if isinstance(max_extra, bool) or not isinstance(max_extra, (int, np.integer)) or max_extra < 0:
        raise ValueError(f"max_extra must be a non-negative integer, got {max_extra!r}")
    rng = _rng(seed)
    items = []
    for _ in range(n):
        t = topics[rng.integers(len(topics))]
        k = int(min(rng.integers(1, max_count + 1), len(t.opinions)))
        chosen = rng.choice(len(t.opinions), size=k, replace=False)
        args, owners = [], []
        pools = {int(c): list(rng.permutation(len(t.opinions[c].expanded))) for c in chosen}
        for c in chosen:
            args.append(t.opinions[c].expanded[pools[int(c)].pop()]); owners.append(int(c))
        for _ in range(int(rng.integers(0, max_extra + 1))):
            left = [int(c) for c in chosen if pools[int(c)]]
            if not left:
                break
            c = left[rng.integers(len(left))]
            args.append(t.opinions[c].expanded[pools[c].pop()]); owners.append(c)
        order = rng.permutation(len(args))
        items.append(dict(task="counting", topic=t.text, arguments=[args[i] for i in order],
                          owners=[owners[i] for i in order], answer=k, options=list(range(1, max_count + 1))))
    return items


def build_matching_task(topics, n: int, seed: int, n_options: int | None = None) -> list[dict]:
    """``n`` matching items: one expansion of an opinion; options = the topic's opinions (all of them, or
    ``n_options`` including the source), shuffled; ``answer`` = index of the source opinion."""
    topics = _check_topics(topics)
    n = _positive_int(n, "n")
    if n_options is not None:
        n_options = _positive_int(n_options, "n_options")
        if n_options < 2:
            raise ValueError(f"n_options must be at least 2, got {n_options}")
    rng = _rng(seed)
    items = []
    eligible = [t for t in topics if len(t.opinions) >= 2]
    if not eligible:
        raise ValueError("matching needs topics with at least two opinions")
    for _ in range(n):
        t = eligible[rng.integers(len(eligible))]
        src = int(rng.integers(len(t.opinions)))
        m = len(t.opinions) if n_options is None else min(n_options, len(t.opinions))
        m = min(m, len(LETTERS))
        others = [i for i in rng.permutation(len(t.opinions)) if i != src][: m - 1]
        opts = list(rng.permutation([src] + [int(i) for i in others]))
        op = t.opinions[src]
        items.append(dict(task="matching", topic=t.text, argument=op.expanded[rng.integers(len(op.expanded))],
                          options=[t.opinions[i].text for i in opts],
                          option_stances=[t.opinions[i].stance for i in opts],
                          answer=opts.index(src), stance=op.stance))
    return items


def build_polarity_task(topics, n: int, seed: int) -> list[dict]:
    """``n`` polarity items: one expansion, its stance as the answer, tagged concessive or not by
    :func:`is_concessive`."""
    topics = _check_topics(topics)
    n = _positive_int(n, "n")
    rng = _rng(seed)
    items = []
    for _ in range(n):
        t = topics[rng.integers(len(topics))]
        op = t.opinions[rng.integers(len(t.opinions))]
        arg = op.expanded[rng.integers(len(op.expanded))]
        items.append(dict(task="polarity", topic=t.text, argument=arg, answer=op.stance,
                          concessive=is_concessive(arg)))
    return items


# --------------------------------------------------------------------------- prompts
def counting_prompt(item: dict) -> str:
    args = "\n".join(f"Argument {i + 1}: {a}" for i, a in enumerate(item["arguments"]))
    return (f"Topic: {item['topic']}\n\n{args}\n\nSeveral arguments may express the same opinion in different "
            f"words. How many distinct opinions are expressed in the arguments above? Answer with a single number.")


def matching_prompt(item: dict) -> str:
    opts = "\n".join(f"{LETTERS[i]}. {o}" for i, o in enumerate(item["options"]))
    return (f"Topic: {item['topic']}\n\nArgument: {item['argument']}\n\nWhich opinion does this argument "
            f"express?\n{opts}\n\nAnswer with the letter of the opinion.")


def polarity_prompt(item: dict, swap: bool = False) -> str:
    """``swap`` lists "oppose" as option A (used to cancel the model's preference for a letter)."""
    a, b = ("oppose", "support") if swap else ("support", "oppose")
    return (f"Topic: {item['topic']}\n\nArgument: {item['argument']}\n\nDoes the argument as a whole support "
            f"or oppose the topic?\nA. {a}\nB. {b}\n\nAnswer with A or B.")


PROMPTS = {"counting": counting_prompt, "matching": matching_prompt, "polarity": polarity_prompt}


def option_labels(item: dict) -> list[str]:
    """The answer strings a model chooses among (digits for counting, letters otherwise)."""
    if item["task"] == "counting":
        return [str(o) for o in item["options"]]
    if item["task"] == "matching":
        return list(LETTERS[: len(item["options"])])
    return ["A", "B"]


# --------------------------------------------------------------------------- answer parsing
_NUMBER_WORDS = {w: i for i, w in enumerate(
    "zero one two three four five six seven eight nine ten eleven twelve".split())}


def parse_count(text: str) -> int | None:
    """The first integer (digits or an English number word up to twelve) in a free-text answer."""
    if not isinstance(text, str):
        raise TypeError(f"text must be a string, got {type(text).__name__}")
    m = re.search(r"\d+|\b(" + "|".join(_NUMBER_WORDS) + r")\b", text.lower())
    if m is None:
        return None
    return int(m.group(0)) if m.group(0).isdigit() else _NUMBER_WORDS[m.group(0)]


def parse_choice(text: str, n_options: int) -> int | None:
    """Index of the chosen option letter (A.., within ``n_options``) in a free-text answer: a letter
    opening the answer ("B", "(B)", "B. ..."), else the letter after "answer is"/"option", else the
    last stand-alone capital letter in range other than the pronoun "I"."""
    if not isinstance(text, str):
        raise TypeError(f"text must be a string, got {type(text).__name__}")
    n_options = _positive_int(n_options, "n_options")
    t = text.strip()
    ok = lambda c: c in LETTERS[:n_options]  # noqa: E731
    m = re.match(r"\(?([A-Z])(?:[\).:,]|\s|$)", t)
    if m and ok(m.group(1)) and not (m.group(1) == "I" and re.match(r"I\s+[a-z]", t)):
        return LETTERS.index(m.group(1))
    m = re.search(r"(?:answer|option|choice)\s*(?:is|:)?\s*\(?([A-Z])(?![A-Za-z])", t, flags=re.I)
    if m and ok(m.group(1).upper()):
        return LETTERS.index(m.group(1).upper())
    cands = [c for c in re.findall(r"(?<![A-Za-z])([A-Z])(?![A-Za-z])", t) if ok(c) and c != "I"]
    return LETTERS.index(cands[-1]) if cands else None


def parse_polarity(text: str) -> str | None:
    """``"pro"``/``"con"`` from a letter (A/B) or the words support/oppose (and their forms)."""
    c = parse_choice(text, 2)
    if c is not None:
        return POLARITY_LABELS[c]
    low = text.lower()
    s, o = re.search(r"support|favou?r|pro\b", low), re.search(r"oppos|against|con\b", low)
    if s and (not o or s.start() < o.start()):
        return "pro"
    return "con" if o else None


# --------------------------------------------------------------------------- metrics
def _finite_array(x, name):
    a = np.asarray(x, dtype=float)
    if a.ndim != 1 or a.size == 0:
        raise ValueError(f"{name} must be a non-empty 1-d sequence, got shape {a.shape}")
    if not np.all(np.isfinite(a)):
        raise ValueError(f"{name} holds non-finite values")
    return a


def nie_score(pred, true) -> float:
    """Normalised inverse error of counts: ``mean (1 + |pred - true| / max(1, true))^-1`` (1 = exact)."""
    p, t = _finite_array(pred, "pred"), _finite_array(true, "true")
    if p.shape != t.shape:
        raise ValueError(f"pred and true must have the same length, got {p.size} and {t.size}")
    return float(np.mean(1.0 / (1.0 + np.abs(p - t) / np.maximum(1.0, t))))


def counting_metrics(pred, true) -> dict:
    """Accuracy, MAE, NIE, mean signed error, and the shares of over- and underestimates among the
    failures (NaN when there is no failure)."""
    p, t = _finite_array(pred, "pred"), _finite_array(true, "true")
    if p.shape != t.shape:
        raise ValueError(f"pred and true must have the same length, got {p.size} and {t.size}")
    fail = p != t
    nf = int(fail.sum())
    return dict(accuracy=float(np.mean(~fail)), mae=float(np.mean(np.abs(p - t))), nie=nie_score(p, t),
                signed_error=float(np.mean(p - t)), n_fail=nf,
                over_share=float(np.mean(p[fail] > t[fail])) if nf else math.nan,
                under_share=float(np.mean(p[fail] < t[fail])) if nf else math.nan)


def matching_metrics(pred, items) -> dict:
    """Exact accuracy, stance accuracy, and the share of failures that pick an opinion of the source's
    stance (NaN without failures) beside the share of such distractors among the options."""
    pred = [int(p) for p in pred]
    if len(pred) != len(items) or not items:
        raise ValueError(f"pred and items must be non-empty and of equal length, got {len(pred)} and {len(items)}")
    exact = np.array([p == it["answer"] for p, it in zip(pred, items)])
    stance = np.array([it["option_stances"][p] == it["stance"] for p, it in zip(pred, items)])
    fails = ~exact
    base = [np.mean([s == it["stance"] for j, s in enumerate(it["option_stances"]) if j != it["answer"]])
            for it in items]
    return dict(exact_accuracy=float(exact.mean()), stance_accuracy=float(stance.mean()),
                same_stance_failure_share=float(stance[fails].mean()) if fails.any() else math.nan,
                same_stance_distractor_share=float(np.mean(base)))


def polarity_metrics(pred, items) -> dict:
    """Accuracy overall and by concessive flag, and the share of failures on concessive items."""
    if len(pred) != len(items) or not items:
        raise ValueError(f"pred and items must be non-empty and of equal length, got {len(pred)} and {len(items)}")
    ok = np.array([p == it["answer"] for p, it in zip(pred, items)])
    conc = np.array([bool(it["concessive"]) for it in items])
    out = dict(accuracy=float(ok.mean()), concessive_rate=float(conc.mean()),
               concessive_failure_share=float(conc[~ok].mean()) if (~ok).any() else math.nan)
    out["accuracy_concessive"] = float(ok[conc].mean()) if conc.any() else math.nan
    out["accuracy_plain"] = float(ok[~conc].mean()) if (~conc).any() else math.nan
    return out


# --------------------------------------------------------------------------- evaluation
def decode_answer(item: dict, answer):
    """A model answer (free text, an option index, or the value itself) as the task's label."""
    task = item["task"]
    if isinstance(answer, str):
        if task == "counting":
            return parse_count(answer)
        if task == "matching":
            return parse_choice(answer, len(item["options"]))
        return parse_polarity(answer)
    if task == "polarity" and isinstance(answer, (int, np.integer)):
        return POLARITY_LABELS[int(answer)]
    return answer


def evaluate(predict_fn: Callable[[Sequence[str]], Sequence], items: list[dict]) -> dict:
    """Run ``predict_fn`` on the prompts of ``items`` (one task) and score the answers.

    ``predict_fn(prompts) -> answers``: free text (parsed by the task's parser), or for counting an
    integer, for matching an option index, for polarity ``"pro"``/``"con"`` or index 0/1. An answer
    the parser cannot read counts as wrong (for counting it is scored as 0 in MAE/NIE).
    Returns the task's metrics plus ``predictions`` and ``unparsed`` (count of unreadable answers)."""
    if not callable(predict_fn):
        raise TypeError("predict_fn must be callable: prompts -> answers")
    if not isinstance(items, list) or not items:
        raise ValueError("items must be a non-empty list of task items")
    tasks = {it.get("task") for it in items}
    if len(tasks) != 1 or next(iter(tasks)) not in PROMPTS:
        raise ValueError(f"items must all belong to one task of {sorted(PROMPTS)}, got {sorted(map(str, tasks))}")
    task = next(iter(tasks))
    answers = list(predict_fn([PROMPTS[task](it) for it in items]))
    if len(answers) != len(items):
        raise ValueError(f"predict_fn returned {len(answers)} answers for {len(items)} prompts")
    preds = [decode_answer(it, a) for it, a in zip(items, answers)]
    unparsed = sum(p is None for p in preds)
    if task == "counting":
        out = counting_metrics([0 if p is None else p for p in preds], [it["answer"] for it in items])
    elif task == "matching":
        # an unreadable choice is wrong: score it as a pick of no option (exact and stance both 0)
        fixed = [p if p is not None else -1 for p in preds]
        ok = [p for p in fixed if p >= 0]
        if len(ok) == len(fixed):
            out = matching_metrics(fixed, items)
        else:
            sub = [it for it, p in zip(items, fixed) if p >= 0]
            out = matching_metrics(ok, sub) if sub else dict(exact_accuracy=0.0, stance_accuracy=0.0)
            frac = len(sub) / len(items)
            out["exact_accuracy"] *= frac
            out["stance_accuracy"] *= frac
    else:
        out = polarity_metrics(preds, items)
    out.update(predictions=preds, unparsed=int(unparsed))
    return out
