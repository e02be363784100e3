"""Code2Logic data engine: task templates filled by simulating the game code (Game-RL,
arXiv:2505.13886, Sec. 3 "Code2Logic": step 2, task templates -- a question template and a
step-wise analysis template per reasoning pattern -- and step 3, the data engine that reuses the
game's transition functions to fill them; answers are multiple choice, as in GameQA).

``Code2LogicGenerator(engine, templates).generate(n, level, seed)`` returns question records with
the exact answer (computed by ``engine.step``), the step-wise analysis and ``n_options`` choices,
one of them right; :func:`verifiable_reward` scores completions against the answer letter and is a
TRL ``GRPOTrainer`` reward function as it stands.
"""
from __future__ import annotations

import re
import zlib
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np

from .engines import ENGINES, GameEngine, LangtonAntEngine, LifeEngine, MazeEngine, SnakeEngine, SokobanEngine

__all__ = ["TaskTemplate", "Code2LogicGenerator", "TEMPLATES", "generator_for", "LETTERS", "format_value",
           "extract_choice", "is_correct", "verifiable_reward"]

LETTERS = "ABCDEFGH"


def format_value(v) -> str:
    """Canonical text of an answer value: ``(r, c)`` for a cell, the integer for a count."""
    if isinstance(v, (tuple, list)):
        return "(" + ", ".join(str(int(x)) for x in v) + ")"
    if isinstance(v, (bool, np.bool_)):
        return "yes" if v else "no"
    return str(int(v)) if isinstance(v, (int, np.integer)) else str(v)


@dataclass(frozen=True)
class TaskTemplate:
    """One reasoning pattern of a game (GameQA's "task").

    ``question_fmt`` is filled (``str.format``) with ``board``, ``legend`` and the fields of
    ``setup(engine, state, rng, level) -> dict`` (the task's own draws: moves, step counts);
    ``answer_fn(engine, state, params)`` computes the exact answer by running the game code;
    ``analysis_fn(engine, state, params)`` the step-wise analysis (list of lines);
    ``distractor_fn(engine, state, params, answer)`` the wrong options to draw from (at least
    ``n_options - 1`` distinct values other than the answer)."""
    name: str
    question_fmt: str
    setup: Callable[..., dict]
    answer_fn: Callable[..., Any]
    analysis_fn: Callable[..., list]
    distractor_fn: Callable[..., list]
    n_options: int = 4

    def __post_init__(self):
        if isinstance(self.n_options, bool) or not isinstance(self.n_options, int) or not 2 <= self.n_options <= len(LETTERS):
            raise ValueError(f"n_options must be an integer in 2..{len(LETTERS)}, got {self.n_options!r}")
        for f in ("setup", "answer_fn", "analysis_fn", "distractor_fn"):
            if not callable(getattr(self, f)):
                raise TypeError(f"TaskTemplate.{f} must be callable")


class Code2LogicGenerator:
    """Data engine for one game: draws a state per question (``engine.sample_state``), a template
    (round robin over ``templates``), fills it, and shuffles the right answer among the options."""

    def __init__(self, engine: GameEngine, templates: Sequence[TaskTemplate]):
        if not isinstance(engine, GameEngine):
            raise TypeError(f"engine must be a GameEngine, got {type(engine).__name__}")
        templates = list(templates)
        if not templates or not all(isinstance(t, TaskTemplate) for t in templates):
            raise TypeError("templates must be a non-empty sequence of TaskTemplate")
        self.engine, self.templates = engine, templates

    def _rng(self, level, seed):
        return np.random.default_rng([int(seed), int(level), zlib.crc32(self.engine.name.encode())])

    def generate(self, n: int, level: int = 1, seed: int = 0) -> list[dict]:
        """``n`` question records at difficulty ``level``, deterministic in ``(engine, level, seed)``.
        Each record: ``game``, ``task``, ``level``, ``question`` (board, question and lettered options), ``prompt`` (question + ``"\\nAnswer:"``), ``options``, ``answer`` (the letter),
        ``value`` (the answer's text), ``analysis`` (step-wise lines), ``state`` and ``params``."""
        if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 0:
            raise ValueError(f"n must be a non-negative integer, got {n!r}")
        if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
            raise ValueError(f"seed must be a non-negative integer, got {seed!r}")
        rng = self._rng(level, seed)
        return [self._one(self.templates[i % len(self.templates)], rng, level) for i in range(int(n))]

    def _one(self, t: TaskTemplate, rng, level):
        e = self.engine
        state = e.sample_state(rng, level)
        params = t.setup(e, state, rng, level)
        value = format_value(t.answer_fn(e, state, params))
        wrong = []
        for d in t.distractor_fn(e, state, params, t.answer_fn(e, state, params)):
            d = format_value(d)
            if d != value and d not in wrong:
                wrong.append(d)
        if len(wrong) < t.n_options - 1:
            raise RuntimeError(f"template {t.name!r} gave {len(wrong)} distinct distractors, needs {t.n_options - 1}")
        pick = rng.choice(len(wrong), t.n_options - 1, replace=False)
        options = [value] + [wrong[i] for i in pick]
        options = [options[i] for i in rng.permutation(len(options))]
        letter = LETTERS[options.index(value)]
        body = t.question_fmt.format(board=e.render_text(state), legend=e.legend, **params)
        opts = "\n".join(f"{LETTERS[i]}. {o}" for i, o in enumerate(options))
        question = f"{body}\n{opts}"
        return dict(game=e.name, task=t.name, level=int(level), question=question, prompt=question + "\nAnswer:",
                    options=options, answer=letter, value=value, analysis=t.analysis_fn(e, state, params),
                    state=state, params=params)

    def verify(self, record: dict) -> bool:
        """Exact re-check of a record: re-run the game code on its state and parameters and test
        that the option under its answer letter is the simulated answer."""
        t = {x.name: x for x in self.templates}.get(record.get("task"))
        if t is None:
            raise ValueError(f"record task {record.get('task')!r} is not one of this generator's templates "
                             f"{[x.name for x in self.templates]}")
        value = format_value(t.answer_fn(self.engine, record["state"], record["params"]))
        i = LETTERS.find(record["answer"])
        return 0 <= i < len(record["options"]) and record["options"][i] == value


# ----------------------------------------------------------------------------- templates
def _moves(rng, k):
    return "".join(rng.choice(list("UDLR"), k))


def _near_cells(n, cell, extra=(), radius=2):
    r0, c0 = cell
    out = [(r, c) for r in range(n) for c in range(n) if 0 < abs(r - r0) + abs(c - c0) <= radius]
    return list(extra) + out


def _near_ints(v, lo=0):
    return [v + d for d in (-1, 1, -2, 2, -3, 3, 4, 5) if v + d >= lo]


def _walk_analysis(e, state, moves, key, label):
    lines, s = [], state
    for a in moves:
        t = e.step(s, a)
        was, now = tuple(s[key]) if key != "body" else tuple(s[key][0]), tuple(t[key]) if key != "body" else tuple(t[key][0])
        lines.append(f"Move {a}: {label} {format_value(was)} -> {format_value(now)}"
                     + (" (blocked)" if was == now else ""))
        s = t
    lines.append(f"So the {label} ends at {format_value(now)}.")
    return lines


def _final(e, state, moves):
    s = state
    for a in moves:
        s = e.step(s, a)
    return s


SOKOBAN_PLAYER = TaskTemplate(
    name="player_position",
    question_fmt=("Sokoban ({legend}); rows, cols from 0; boxes are pushed.\n{board}\n"
                  "Player at {start} moves {moves}. Player ends at?"),
    setup=lambda e, s, rng, level: dict(moves=_moves(rng, 1 + level), start=format_value(s["player"])),
    answer_fn=lambda e, s, p: _final(e, s, p["moves"])["player"],
    analysis_fn=lambda e, s, p: _walk_analysis(e, s, p["moves"], "player", "player"),
    distractor_fn=lambda e, s, p, a: _near_cells(s["n"], a, extra=[s["player"]]),
)

MAZE_PATH = TaskTemplate(
    name="shortest_path_length",
    question_fmt="Maze ({legend}).\n{board}\nFewest moves from S to E?",
    setup=lambda e, s, rng, level: {},
    answer_fn=lambda e, s, p: e.shortest_path(s),
    analysis_fn=lambda e, s, p: [f"Breadth-first search from S {format_value(s['pos'])} reaches E "
                                 f"{format_value(s['exit'])} after {e.shortest_path(s)} moves."],
    distractor_fn=lambda e, s, p, a: _near_ints(a, lo=1),
)


def _ant_analysis(e, s, p):
    lines = []
    for i in range(p["steps"]):
        t = e.step(s)
        colour = "black" if tuple(s["ant"]) in set(map(tuple, s["black"])) else "white"
        lines.append(f"Step {i + 1}: {colour} cell {format_value(s['ant'])}, turn to {t['heading']}, "
                     f"flip it, move to {format_value(t['ant'])}")
        s = t
    return lines


LANGTON_POSITION = TaskTemplate(
    name="ant_position",
    question_fmt=("Langton's ant ({legend}); rows, cols from 0; edges wrap. White: turn right, black: turn left; "
                  "flip, step.\n{board}\nAnt position after {steps} steps?"),
    setup=lambda e, s, rng, level: dict(steps=1 + level),
    answer_fn=lambda e, s, p: e.rollout(s, [None] * p["steps"])[-1]["ant"],
    analysis_fn=_ant_analysis,
    distractor_fn=lambda e, s, p, a: _near_cells(s["n"], a, extra=[s["ant"]]),
)

LIFE_COUNT = TaskTemplate(
    name="live_count_next",
    question_fmt="Game of Life ({legend}); B3/S23.\n{board}\nLive cells after one step?",
    setup=lambda e, s, rng, level: {},
    answer_fn=lambda e, s, p: len(e.step(s)["live"]),
    analysis_fn=lambda e, s, p: [f"{len(s['live'])} live cells now; applying the rules cell by cell leaves "
                                 f"{len(e.step(s)['live'])} live cells."],
    distractor_fn=lambda e, s, p, a: _near_ints(a, lo=0) + [len(s["live"])],
)


def _snake_ok(e, s, moves):
    """The snake survives and no move points back into its neck (where the rule is a convention)."""
    for a in moves:
        body = s["body"]
        dr, dc = {"U": (-1, 0), "D": (1, 0), "L": (0, -1), "R": (0, 1)}[a]
        if len(body) > 1 and (body[0][0] + dr, body[0][1] + dc) == tuple(body[1]):
            return False
        s = e.step(s, a)
    return s["alive"]


def _snake_setup(e, s, rng, level):
    for _ in range(500):
        moves = _moves(rng, 1 + level)
        if _snake_ok(e, s, moves):
            break
    return dict(moves=moves, start=format_value(s["body"][0]))


SNAKE_HEAD = TaskTemplate(
    name="head_position",
    question_fmt=("Snake ({legend}); rows, cols from 0.\n{board}\nHead at {start} moves {moves}. Head ends at?"),
    setup=_snake_setup,
    answer_fn=lambda e, s, p: _final(e, s, p["moves"])["body"][0],
    analysis_fn=lambda e, s, p: _walk_analysis(e, s, p["moves"], "body", "head"),
    distractor_fn=lambda e, s, p, a: _near_cells(s["n"], a, extra=[s["body"][0]]),
)

#: the templates of each engine
TEMPLATES = {
    SokobanEngine.name: [SOKOBAN_PLAYER],
    MazeEngine.name: [MAZE_PATH],
    LangtonAntEngine.name: [LANGTON_POSITION],
    LifeEngine.name: [LIFE_COUNT],
    SnakeEngine.name: [SNAKE_HEAD],
}


def generator_for(game: str) -> Code2LogicGenerator:
    """The bundled generator of ``game`` (one of ``ENGINES``)."""
    if game not in ENGINES:
        raise ValueError(f"unknown game {game!r}; choose one of {sorted(ENGINES)}")
    return Code2LogicGenerator(ENGINES[game], TEMPLATES[game])


# ----------------------------------------------------------------------------- verifiers
_LEAD = re.compile(r"^\s*(?:answer\s*[:：]?\s*)?[\(\[]?([A-H])(?![A-Za-z])", re.IGNORECASE)
_STATED = re.compile(r"answer\s*(?:is)?\s*[:：]?\s*[\(\[]?([A-H])(?![A-Za-z])", re.IGNORECASE)


def _text(completion) -> str:
    if isinstance(completion, str):
        return completion
    if isinstance(completion, list) and completion and isinstance(completion[-1], dict):
        return str(completion[-1].get("content", ""))
    raise TypeError(f"a completion must be a string or a list of chat messages, got {type(completion).__name__}")


def extract_choice(text: str) -> str | None:
    """The option letter a completion commits to: a leading letter (``" B"``, ``"(B) ..."``,
    ``"Answer: B"``), else the last ``"answer is X"``; ``None`` when there is none."""
    m = _LEAD.match(text)
    if m and (m.group(1).isupper() or text.strip().lower().startswith("answer")):
        return m.group(1).upper()
    found = _STATED.findall(text)
    return found[-1].upper() if found else None


def is_correct(completion, answer: str) -> bool:
    """Exact verifier: the completion's option letter equals ``answer`` (a letter A-H)."""
    if not isinstance(answer, str) or len(answer.strip()) != 1 or answer.strip().upper() not in LETTERS:
        raise ValueError(f"answer must be one option letter in {LETTERS!r}, got {answer!r}")
    return extract_choice(_text(completion)) == answer.strip().upper()


def verifiable_reward(prompts=None, completions=None, answer=None, **kwargs) -> list[float]:
    """Game-RL's 0/1 outcome reward (Sec. 4, "Game-RL": 1 for a right final answer, else 0; the
    paper judges equivalence with an LLM, here the exact option-letter verifier :func:`is_correct`).
    TRL ``GRPOTrainer`` calling convention: ``completions`` and the dataset's ``answer`` column by
    name; other columns arrive in ``kwargs`` and are ignored."""
    if completions is None or answer is None:
        raise ValueError("verifiable_reward needs completions and answer (the dataset's 'answer' column)")
    if len(completions) != len(answer):
        raise ValueError(f"{len(completions)} completions but {len(answer)} answers")
    return [1.0 if is_correct(c, a) else 0.0 for c, a in zip(completions, answer)]
