"""Tests of iclr26.data.math: problem generators, prompts, answer extraction and checking."""
from __future__ import annotations

import pytest

from iclr26.data import math as M
from iclr26.models import SimpleTokenizer


def test_gsm_problems_are_deterministic_and_have_gold_and_cot():
    a, b = M.gsm_problems(5, seed=3), M.gsm_problems(5, seed=3)
    assert [p.question for p in a] == [p.question for p in b]
    assert [p.question for p in a] != [p.question for p in M.gsm_problems(5, seed=4)]
    for p in a:
        assert p.answer and p.cot.strip().endswith(p.answer)
        assert M.is_correct(M.extract_answer(p.cot), p.answer)   # the worked solution checks out


@pytest.mark.parametrize("level", [1, 2, 3, 4, 5])
def test_arithmetic_answers_equal_the_expression(level):
    probs = M.arithmetic_problems(20, seed=0, difficulty=level)
    assert len(probs) == 20
    for p in probs:
        expr = p.metadata["expression"]
        assert M.is_correct(str(_reference_value(expr)), p.answer), (expr, p.answer)
        assert set(expr) <= set("0123456789+-* ")


def _reference_value(expr: str) -> int:
    """Independent evaluation with precedence: split on + and -, multiply within each summand."""
    toks = expr.split()
    total, sign, prod, i = 0, 1, int(toks[0]), 1
    while i < len(toks):
        op, val = toks[i], int(toks[i + 1])
        if op == "*":
            prod *= val
        else:
            total += sign * prod
            sign, prod = (1 if op == "+" else -1), val
        i += 2
    return total + sign * prod


def test_arithmetic_is_deterministic_and_hand_checked():
    assert [p.question for p in M.arithmetic_problems(4, 1, 3)] == [p.question for p in M.arithmetic_problems(4, 1, 3)]
    assert _reference_value("877 - 946 * 799 * 476") == -359785627   # precedence, not left to right


def test_arithmetic_difficulty_grows():
    easy = M.arithmetic_problems(30, 0, 1)
    hard = M.arithmetic_problems(30, 0, 4)
    assert max(len(p.metadata["expression"]) for p in easy) < max(len(p.metadata["expression"]) for p in hard)


def test_rejects_bad_arguments():
    with pytest.raises(ValueError, match="difficulty must be one of"):
        M.arithmetic_problems(3, 0, difficulty=9)
    with pytest.raises(ValueError, match="n must be a non-negative integer"):
        M.gsm_problems(-1, 0)
    with pytest.raises(ValueError, match="seed must be a non-negative integer"):
        M.arithmetic_problems(3, seed=-2)
    with pytest.raises(TypeError, match="text must be a string"):
        M.extract_answer(12)


@pytest.mark.parametrize(
    "text, expected",
    [
        ("so the answer is 1,234.", "1234"),
        ("first 3 then \\boxed{42} and 7", "42"),
        ("steps...\n#### -12", "-12"),
        ("<answer>7</answer> then 9", "7"),
        ("The answer is $5.50.", "5.50"),
        ("Answer: **17**", "17"),
        ("we get 3, then 5", "5"),
        ("no number here", None),
    ],
)
def test_extract_answer(text, expected):
    assert M.extract_answer(text) == expected


def test_is_correct():
    assert M.is_correct("5.0", "5") and M.is_correct("1,000", "1000") and M.is_correct("-3", "-3")
    assert not M.is_correct("6", "5") and not M.is_correct(None, "5")
    assert M.is_correct("Paris", "paris") and not M.is_correct("Lyon", "Paris")


def test_chat_prompt_without_template_falls_back_to_plain_format():
    tok = SimpleTokenizer.from_texts(["abc"])
    assert M.chat_prompt(tok, "1+1?", system="") == "Question: 1+1?\nAnswer:"
    assert M.chat_prompt(tok, "1+1?").startswith(M.DEFAULT_SYSTEM)


class _Tok:
    chat_template = "{{ messages }}"   # no system role: instruction goes into the user turn

    def apply_chat_template(self, messages, tokenize, add_generation_prompt):
        return repr(messages)


def test_chat_prompt_uses_the_template():
    out = M.chat_prompt(_Tok(), "Q?", system="Be brief.")
    assert "Be brief.\\n\\nQ?" in out and "'system'" not in out
