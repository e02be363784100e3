"""Math problems for the decoding experiments: ``iclr26.data.math`` when it is installed, else the
same reasoning-gym generators read directly (identical problems for a given seed either way is
not guaranteed; the experiment records which source it used)."""
from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass
class Problem:
    question: str
    answer: str
    cot: str = ""


def source() -> str:
    try:
        from iclr26.data import math as _dm  # noqa: F401
        return "iclr26.data.math"
    except ImportError:
        return "reasoning_gym"


def gsm_problems(n: int, seed: int):
    try:
        from iclr26.data import math as dm
        return dm.gsm_problems(n, seed)
    except ImportError:
        import reasoning_gym as rg
        ds = rg.create_dataset("gsm_symbolic", size=n, seed=seed)
        return [Problem(x["question"], str(x["answer"]), x["metadata"].get("answer_cot", "")) for x in ds]


def arithmetic_problems(n: int, seed: int, difficulty: int = 1):
    try:
        from iclr26.data import math as dm
        return dm.arithmetic_problems(n, seed, difficulty)
    except ImportError:
        import random
        r = random.Random(seed)
        out = []
        for _ in range(n):
            a, b = r.randint(1, 9 * difficulty), r.randint(1, 9 * difficulty)
            out.append(Problem(f"What is {a} + {b}?", str(a + b)))
        return out


def chat_prompt(tokenizer, question: str, system: str | None = None) -> str:
    try:
        from iclr26.data import math as dm
        return dm.chat_prompt(tokenizer, question, system=system)
    except ImportError:
        msgs = ([{"role": "system", "content": system}] if system else []) + [
            {"role": "user", "content": question}]
        return tokenizer.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)


_NUM = r"-?\d[\d,]*(?:\.\d+)?"


def extract_answer(text: str):
    try:
        from iclr26.data import math as dm
        return dm.extract_answer(text)
    except ImportError:
        if not text:
            return None
        m = re.findall(r"answer is[:\s\$\\boxed{]*(" + _NUM + ")", text)
        if not m:
            m = re.findall(_NUM, text)
        return m[-1].replace(",", "").rstrip(".") if m else None


def is_correct(pred, gold) -> bool:
    try:
        from iclr26.data import math as dm
        return bool(dm.is_correct(pred, gold))
    except ImportError:
        if pred is None:
            return False
        try:
            return abs(float(pred) - float(gold)) < 1e-6
        except ValueError:
            return str(pred).strip() == str(gold).strip()
