"""Math problems with exact answers, offline.

- :func:`gsm_problems`: GSM8K-style word problems from reasoning-gym's ``gsm_symbolic`` (symbolic
  rewrites of GSM8K templates, seeded, with a numeric gold answer and a worked solution);
- :func:`arithmetic_problems`: easier procedural integer arithmetic with a difficulty knob, for small models such as SmolLM2-135M (which scores ~0 % on GSM);
- :func:`chat_prompt`, :func:`extract_answer`, :func:`is_correct`.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

__all__ = ["Problem", "gsm_problems", "arithmetic_problems", "chat_prompt", "arithmetic_prompt", "extract_answer",
           "first_number", "is_correct", "DEFAULT_SYSTEM", "ARITHMETIC_LEVELS", "ARITHMETIC_SHOTS"]

#: the instruction appended to questions by :func:`chat_prompt` when ``system`` is None
# no placeholder letter ("... 'The answer is N.'"): small instruction models copy it literally
DEFAULT_SYSTEM = "Solve the problem. Give the final answer as a number in \\boxed{}."


@dataclass
class Problem:
    question: str
    answer: str                 # the exact gold answer, as a string (e.g. "44", "-3")
    cot: str | None = None      # a worked solution when the source has one
    metadata: dict = field(default_factory=dict)


def _check_n_seed(n, seed):
    if not isinstance(n, int) or n < 0:
        raise ValueError(f"n must be a non-negative integer, got {n!r}")
    if not isinstance(seed, int) or seed < 0:
        raise ValueError(f"seed must be a non-negative integer, got {seed!r}")


def gsm_problems(n: int, seed: int = 0) -> list[Problem]:
    """``n`` GSM8K-style problems from reasoning-gym ``gsm_symbolic`` (deterministic in ``seed``).

    ``cot`` is the worked solution (ending ``#### <answer>``).
    """
    _check_n_seed(n, seed)
    if n == 0:
        return []
    import reasoning_gym as rg

    ds = rg.create_dataset("gsm_symbolic", size=n, seed=seed)
    out = []
    for x in ds:
        meta = dict(x.get("metadata", {}))
        out.append(Problem(question=x["question"], answer=str(x["answer"]).strip(),
                           cot=meta.pop("answer_cot", None), metadata=meta))
    return out


#: difficulty -> (min_terms, max_terms, min_digits, max_digits, operators)
ARITHMETIC_LEVELS = {
    1: (2, 2, 1, 1, ("+", "-")),
    2: (2, 2, 1, 2, ("+", "-")),
    3: (2, 3, 1, 2, ("+", "-", "*")),
    4: (3, 4, 1, 3, ("+", "-", "*")),
    5: (3, 6, 1, 4, ("+", "-", "*")),
}


def arithmetic_problems(n: int, seed: int = 0, difficulty: int = 1) -> list[Problem]:
    """``n`` procedural integer-arithmetic problems, ``"Calculate 12 + 7 * 3."`` (the question format
    of reasoning-gym's ``basic_arithmetic``).

    ``difficulty`` 1 (two one-digit terms, + and -) to 5 (three to six terms of up to four digits,
    with *); see :data:`ARITHMETIC_LEVELS`. The gold answer is the exact value under the usual
    operator precedence. (reasoning-gym's own ``basic_arithmetic`` without parentheses evaluates
    left to right, so its gold answers disagree with precedence; hence this generator.)
    """
    _check_n_seed(n, seed)
    if difficulty not in ARITHMETIC_LEVELS:
        raise ValueError(f"difficulty must be one of {sorted(ARITHMETIC_LEVELS)}, got {difficulty!r}")
    import numpy as np

    lo_t, hi_t, lo_d, hi_d, ops = ARITHMETIC_LEVELS[difficulty]
    rng = np.random.default_rng([seed, difficulty])
    out = []
    for i in range(n):
        k = int(rng.integers(lo_t, hi_t + 1))
        terms = []
        for _ in range(k):
            d = int(rng.integers(lo_d, hi_d + 1))
            terms.append(str(int(rng.integers(0 if d == 1 else 10 ** (d - 1), 10 ** d))))
        expr = terms[0]
        for t in terms[1:]:
            expr += f" {ops[int(rng.integers(len(ops)))]} {t}"
        value = eval(expr, {"__builtins__": {}}, {})  # digits and + - * only: built above
        out.append(Problem(question=f"Calculate {expr}.", answer=str(value), cot=None,
                           metadata=dict(expression=expr, num_terms=k, level=difficulty, index=i)))
    return out


def chat_prompt(tokenizer, question: str, system: str | None = None) -> str:
    """The prompt string for ``question`` in the tokenizer's chat template.

    The instruction ``system`` (default :data:`DEFAULT_SYSTEM`) is sent as the system message when
    the template has a system role, and is otherwise prepended to the user turn. A tokenizer with
    no chat template (a base model, the tiny tokenizer) gets ``"<system>\\n\\nQuestion: ...\\nAnswer:"``.
    Pass ``system=""`` for no instruction.
    """
    if not isinstance(question, str):
        raise TypeError(f"question must be a string, got {type(question).__name__}")
    system = DEFAULT_SYSTEM if system is None else system
    template = getattr(tokenizer, "chat_template", None)
    if not template:
        head = f"{system}\n\n" if system else ""
        return f"{head}Question: {question}\nAnswer:"
    messages = [{"role": "user", "content": question}]
    if system:
        if "system" in template:
            messages.insert(0, {"role": "system", "content": system})
        else:
            messages[0]["content"] = f"{system}\n\n{question}"
    return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)


#: worked examples for :func:`arithmetic_prompt` (not drawn from any generated problem set)
ARITHMETIC_SHOTS = (
    ("Calculate 3 + 4.", "3 + 4 = 7"),
    ("Calculate 12 - 5 * 2.", "12 - 5 * 2 = 2"),
    ("Calculate 6 * 7 - 40.", "6 * 7 - 40 = 2"),
)


def arithmetic_prompt(tokenizer, problem: Problem, shots=ARITHMETIC_SHOTS) -> str:
    """A few-shot chat prompt for an :func:`arithmetic_problems` item whose reply is already started
    with the expression and ``" ="``, so the completion is the value (read it with
    :func:`first_number`). With SmolLM2-135M (greedy) this gives roughly 70 % / 40 % / 10 % at
    difficulty 1 / 2 / 3. Tokenizers without a chat template get ``Q: ...\nA: ...`` lines.
    """
    expr = problem.metadata.get("expression")
    if expr is None:
        raise ValueError("arithmetic_prompt needs a problem from arithmetic_problems (metadata['expression'])")
    if getattr(tokenizer, "chat_template", None):
        msgs = []
        for q, a in shots:
            msgs += [{"role": "user", "content": q}, {"role": "assistant", "content": a}]
        msgs.append({"role": "user", "content": problem.question})
        head = tokenizer.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
    else:
        head = "".join(f"Q: {q}\nA: {a}\n" for q, a in shots) + f"Q: {problem.question}\nA: "
    return head + expr + " ="


def first_number(text: str | None) -> str | None:
    """The first (optionally negative) integer or decimal in ``text``, or None."""
    if text is None:
        return None
    m = re.search(r"-?\d+(?:\.\d+)?", text)
    return m.group(0) if m else None


_NUM = r"-?\$?\s?\d[\d,]*(?:\.\d+)?"
_PATTERNS = [
    re.compile(r"<answer>\s*(.*?)\s*</answer>", re.S | re.I),
    re.compile(r"\\boxed\{([^{}]*)\}"),
    re.compile(r"####\s*(" + _NUM + ")"),
    re.compile(r"answer\s*(?:is|:|=)\s*:?\s*\**\s*(" + _NUM + ")", re.I),
]
_LAST_NUM = re.compile(_NUM)


def _normalise(s: str) -> str:
    s = s.strip().strip("*").strip()
    s = s.replace("$", "").replace(",", "").replace(" ", "")
    s = s.rstrip(".")
    return s


def extract_answer(text: str) -> str | None:
    """The final answer in a completion, or None.

    In order of precedence: the last ``<answer>...</answer>``, the last ``\\boxed{...}``, the last
    ``#### N``, the last "answer is N" / "answer: N", else the last number in the text. Numbers are
    returned without ``$``, thousands separators or a trailing period.
    """
    if text is None:
        return None
    if not isinstance(text, str):
        raise TypeError(f"text must be a string, got {type(text).__name__}")
    for pat in _PATTERNS:
        found = pat.findall(text)
        if found:
            ans = _normalise(found[-1])
            if ans:
                return ans
    nums = _LAST_NUM.findall(text)
    return _normalise(nums[-1]) if nums else None


def _to_number(s: str):
    try:
        return float(_normalise(s))
    except (ValueError, AttributeError):
        return None


def is_correct(pred: str | None, gold: str) -> bool:
    """Exact-answer check: numerically equal (relative tolerance 1e-6) when both parse as numbers,
    else equal as case-insensitive normalised strings. ``None`` is never correct."""
    if pred is None:
        return False
    a, b = _to_number(str(pred)), _to_number(str(gold))
    if a is not None and b is not None:
        return abs(a - b) <= 1e-6 * max(1.0, abs(b))
    return _normalise(str(pred)).lower() == _normalise(str(gold)).lower()
