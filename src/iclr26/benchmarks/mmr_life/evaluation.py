"""MMR-Life evaluation: answer extraction, voting, per-type accuracy and the type-correlation analysis.

From "MMR-Life: Piecing Together Real-life Scenes for Multimodal Multi-image Reasoning"
(ICLR 2026, arXiv 2603.02024; official code https://github.com/BugMakerzzz/MMR-Life).

Every rule below says where it comes from in the official repository (``utils/load_data.py``,
``utils/config.py``, ``parse_result.py``, ``utils/draw_fig.py``, ``utils/reward_model.py``,
``run_exp.py``); the code here is written anew from those descriptions.
"""
from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Mapping, Sequence

import numpy as np

#: the seven reasoning types and their three tasks each (``utils/config.py`` TYPE_TASK_MAP)
TYPE_TASK_MAP: dict[str, tuple[str, str, str]] = {
    "abductive": ("HAA", "CIA", "MCA"),
    "analogical": ("ARI", "PSI", "ASI"),
    "causal": ("CIP", "MCP", "CFP"),
    "deductive": ("MCD", "CWD", "RSD"),
    "inductive": ("BMI", "PDI", "SFI"),
    "spatial": ("RPE", "CRE", "NRP"),
    "temporal": ("CTR", "DSP", "HAL"),
}
REASONING_TYPES: tuple[str, ...] = tuple(TYPE_TASK_MAP)
#: five options A-E per question (paper, Section 3; ``prompt/main_exp_prompt.py`` answer format)
LETTERS: tuple[str, ...] = ("A", "B", "C", "D", "E")
#: accuracy of a uniform guess over five options
CHANCE: float = 1.0 / len(LETTERS)
#: human accuracy per type, in percent (``parse_result.py`` get_leaderboard_results)
HUMAN_ACCURACY: dict[str, float] = {
    "overall": 72.28, "abductive": 79.76, "analogical": 57.65, "causal": 75.00, "deductive": 70.59,
    "inductive": 63.41, "spatial": 79.76, "temporal": 79.76,
}
#: sampling settings of the official runner (``run_exp.py`` argparse defaults)
OFFICIAL_SAMPLING = dict(n_sample=8, temperature=0.5, top_p=0.5, max_tokens=5000)

# Our own wording of the two system prompts of ``prompt/main_exp_prompt.py``: the same instruction
# (choose the option, reason step by step or answer directly) and the same final-line format.
COT_SYSTEM_PROMPT = (
    "You are an expert at reasoning over several images. Choose the correct option for the "
    "multiple-choice question about the images. Think step by step first, then finish with a last "
    "line of the form: # Answer: A/B/C/D/E."
)
DIRECT_SYSTEM_PROMPT = (
    "You are an expert at reasoning over several images. Choose the correct option for the "
    "multiple-choice question about the images. Do not explain: reply only in the form: "
    "# Answer: A/B/C/D/E."
)
SYSTEM_PROMPTS = {"cot": COT_SYSTEM_PROMPT, "direct": DIRECT_SYSTEM_PROMPT}

# ``utils/load_data.py`` extract_answer: "Answer: X", "\boxed{X}" or "X." (X in A-E, either case);
# the last match in the text counts; list markers "- " / "* " (any '-' or '*' and the spaces after
# it) are deleted first. The third alternative has no word boundary, so a word ending in a-e before
# a full stop ("the image.") also matches: kept, as in the official parser.
_ANSWER_RE = re.compile(r"(?:\bAnswer\s*:\s*([A-Ea-e]))|(?:\\boxed\{\s*([A-Ea-e])\s*\})|(?:([A-Ea-e])\s*\.)")
_MARKER_RE = re.compile(r"[-*]\s*")


def extract_answer(response: str) -> str:
    """The option letter a response commits to, by the official rule; ``""`` when none is found.

    >>> extract_answer("The cup is left of the plate. # Answer: c")
    'C'
    """
    if not isinstance(response, str):
        raise TypeError(f"response must be a str, got {type(response).__name__}")
    text = _MARKER_RE.sub("", response.strip())
    last = None
    for last in _ANSWER_RE.finditer(text):
        pass
    if last is None:
        return ""
    return (last.group(1) or last.group(2) or last.group(3)).upper()


def extract_answers(responses: Sequence[str]) -> list[str]:
    """:func:`extract_answer` over a list of responses (the official function's list interface)."""
    if isinstance(responses, str):
        raise TypeError("responses must be a sequence of strings, not one string (wrap it in a list)")
    return [extract_answer(r) for r in responses]


def majority_vote(preds: Sequence[str]) -> str:
    """Self-consistency answer: the most frequent extracted letter (``utils/load_data.py``
    get_final_pred, ``collections.Counter.most_common``): ties go to the letter seen first, and the
    empty "no answer" counts as a candidate like any letter, as in the official code."""
    if isinstance(preds, str) or len(preds) == 0:
        raise ValueError("preds must be a non-empty sequence of extracted letters")
    return Counter(preds).most_common(1)[0][0]


def best_of_n(answers: Sequence[str], scores: Sequence[float]) -> str:
    """Best-of-n answer: the answer of the highest-scoring completion, the first one on ties
    (``utils/reward_model.py`` find_bestn_answer, which scores completions with a reward model)."""
    if isinstance(answers, str) or len(answers) == 0:
        raise ValueError("answers must be a non-empty sequence of extracted letters")
    s = np.asarray(scores, dtype=float)
    if s.shape != (len(answers),):
        raise ValueError(f"scores must hold one score per answer ({len(answers)}), got shape {s.shape}")
    if not np.all(np.isfinite(s)):
        raise ValueError("scores must be finite")
    return answers[int(np.argmax(s))]


def _check_letter(golden: str, name: str = "golden") -> str:
    if not isinstance(golden, str) or golden.upper() not in LETTERS:
        raise ValueError(f"{name} must be one of {LETTERS}, got {golden!r}")
    return golden.upper()


def score_item(responses: Sequence[str], golden: str) -> dict:
    """One question's record as the official runner stores it (``run_exp.py``): the extracted
    ``preds``, their per-sample correctness ``cor_flag``, the voted ``pred_answer`` and ``correct``."""
    golden = _check_letter(golden)
    preds = extract_answers(responses)
    if not preds:
        raise ValueError("responses must hold at least one response")
    vote = majority_vote(preds)
    return {"preds": preds, "cor_flag": [p == golden for p in preds], "pred_answer": vote,
            "correct": vote == golden}


@dataclass
class TypeRow:
    """Accuracy of one reasoning type: point estimate, bootstrap interval, item count, chance."""
    type: str
    accuracy: float
    low: float
    high: float
    n: int
    chance: float = CHANCE
    above_chance: bool = field(default=False)


def per_type_accuracy(correct: Sequence[float], types: Sequence[str], *, n_boot: int = 2000,
                      level: float = 0.95, seed: int = 0, chance: float = CHANCE) -> dict[str, TypeRow]:
    """Accuracy per reasoning type and overall (key ``"overall"``), with percentile bootstrap
    intervals over the items of each type, and whether the interval's lower end clears ``chance``.

    ``correct`` holds 0/1 per item (or a per-item rate in [0, 1], e.g. the mean of a question's
    sampled runs); ``types`` the item's reasoning type (any label).
    """
    c = np.asarray(correct, dtype=float)
    if c.ndim != 1 or c.size == 0:
        raise ValueError(f"correct must be a non-empty 1-d sequence, got shape {c.shape}")
    if not np.all(np.isfinite(c)) or c.min() < 0 or c.max() > 1:
        raise ValueError("correct must hold finite values in [0, 1]")
    if isinstance(types, str) or len(types) != c.size:
        raise ValueError(f"types must hold one label per item ({c.size}), got {len(types)}")
    if not isinstance(n_boot, int) or n_boot < 1:
        raise ValueError(f"n_boot must be a positive integer, got {n_boot!r}")
    if not 0 < level < 1:
        raise ValueError(f"level must be in (0, 1), got {level!r}")
    if not 0 <= chance < 1:
        raise ValueError(f"chance must be in [0, 1), got {chance!r}")
    rng = np.random.default_rng(seed)
    labels = np.asarray(types, dtype=object)
    groups = {"overall": np.arange(c.size)}
    for t in dict.fromkeys(types):
        groups[str(t)] = np.flatnonzero(labels == t)
    out = {}
    q = (1 - level) / 2
    for name, idx in groups.items():
        vals = c[idx]
        boots = vals[rng.integers(0, vals.size, size=(n_boot, vals.size))].mean(axis=1)
        lo, hi = np.quantile(boots, [q, 1 - q])
        out[name] = TypeRow(name, float(vals.mean()), float(lo), float(hi), int(vals.size), chance,
                            bool(lo > chance))
    return out


@dataclass
class TypeCorrelation:
    """Pearson correlation between reasoning types across models, and its hierarchical clustering."""
    types: list[str]
    corr: np.ndarray
    linkage: np.ndarray

    def clusters(self, n_clusters: int) -> dict[str, int]:
        """Cluster label per type when the dendrogram is cut into ``n_clusters`` groups."""
        from scipy.cluster.hierarchy import fcluster
        if not isinstance(n_clusters, int) or not 1 <= n_clusters <= len(self.types):
            raise ValueError(f"n_clusters must be an integer in [1, {len(self.types)}], got {n_clusters!r}")
        lab = fcluster(self.linkage, t=n_clusters, criterion="maxclust")
        return {t: int(k) for t, k in zip(self.types, lab)}


def type_correlation(acc_table: Mapping[str, Sequence[float]], method: str = "average") -> TypeCorrelation:
    """Correlate reasoning types by the accuracies many models reach on them, and cluster them.

    ``acc_table[type]`` holds one accuracy per model (same model order in every type). As in
    ``utils/draw_fig.py`` (draw_heat / draw_dendrogram): Pearson correlation between the type
    columns, distance ``1 - r``, scipy ``linkage`` with ``method`` (official: ``"average"``).
    """
    from scipy.cluster.hierarchy import linkage
    from scipy.spatial.distance import squareform

    if not isinstance(acc_table, Mapping) or len(acc_table) < 2:
        raise ValueError("acc_table must map at least two reasoning types to per-model accuracies")
    names = [str(k) for k in acc_table]
    cols = [np.asarray(v, dtype=float) for v in acc_table.values()]
    if any(c.ndim != 1 for c in cols) or len({c.size for c in cols}) != 1 or cols[0].size < 3:
        raise ValueError("acc_table must hold the same number (>= 3) of model accuracies for every type")
    x = np.stack(cols)
    if x.shape[1] < 3:
        raise ValueError("acc_table must hold the same number (>= 3) of model accuracies for every type")
    if not np.all(np.isfinite(x)):
        raise ValueError("acc_table must hold finite accuracies")
    if np.any(x.std(axis=1) == 0):
        bad = [n for n, s in zip(names, x.std(axis=1)) if s == 0]
        raise ValueError(f"acc_table types {bad} have the same accuracy for every model: no correlation is defined")
    corr = np.corrcoef(x)
    dist = np.clip(1.0 - corr, 0.0, None)
    np.fill_diagonal(dist, 0.0)
    z = linkage(squareform(dist, checks=False), method=method)
    return TypeCorrelation(names, corr, z)


def chat_prompt(tokenizer, item: Mapping, mode: str = "cot") -> str:
    """The prompt text of one item for a chat model: the system prompt of ``mode`` ("cot" or
    "direct") and the user turn of :func:`render_user_turn`, through the tokenizer's chat template."""
    if mode not in SYSTEM_PROMPTS:
        raise ValueError(f"mode must be one of {tuple(SYSTEM_PROMPTS)}, got {mode!r}")
    msgs = [{"role": "system", "content": SYSTEM_PROMPTS[mode]},
            {"role": "user", "content": render_user_turn(item)}]
    return tokenizer.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)


def render_user_turn(item: Mapping) -> str:
    """The user turn of an item whose images are given as text (a perception-oracle rendering):
    the image descriptions in order, then ``Question: ...`` and ``Options: A. ... B. ...`` as the
    official loader writes them (``utils/load_data.py`` load_raw_dataset)."""
    for key in ("images", "question", "options"):
        if key not in item:
            raise ValueError(f"item is missing {key!r}")
    if len(item["options"]) != len(LETTERS):
        raise ValueError(f"item must have {len(LETTERS)} options, got {len(item['options'])}")
    lines = [f"Image {i + 1}: {d}" for i, d in enumerate(item["images"])]
    opts = " ".join(f"{L}. {o}" for L, o in zip(LETTERS, item["options"]))
    return "\n".join(lines) + f"\nQuestion: {item['question']}\nOptions: {opts}"


def sample_accuracy(cor_flags: Sequence[Sequence[bool]]) -> float:
    """Mean over questions of the share of a question's sampled runs that are correct: the expected
    accuracy of one CoT run (the official ``random.choice(cor_flag)`` in ``parse_result.py``
    estimates the same quantity with one draw). A question without runs counts as wrong."""
    if len(cor_flags) == 0:
        raise ValueError("cor_flags must hold at least one question")
    return float(np.mean([np.mean(f) if len(f) else 0.0 for f in cor_flags]))


__all__ = ["TYPE_TASK_MAP", "REASONING_TYPES", "LETTERS", "CHANCE", "HUMAN_ACCURACY", "OFFICIAL_SAMPLING",
           "SYSTEM_PROMPTS", "COT_SYSTEM_PROMPT", "DIRECT_SYSTEM_PROMPT", "extract_answer", "extract_answers",
           "majority_vote", "best_of_n", "score_item", "per_type_accuracy", "TypeRow", "type_correlation",
           "TypeCorrelation", "chat_prompt", "render_user_turn", "sample_accuracy"]
