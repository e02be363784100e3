"""Multi-tape Turing machines and a reference runner.

Li & Wang, "Efficient Turing Machine Simulation with Transformers", ICLR 2026 (arXiv:2512.00003),
simulates any ``(t(n), s(n))``-bounded *k*-tape TM. This module holds the TM itself: a transition
table ``delta[(state, symbols read)] = (new state, symbols written, moves)`` with moves in
``{-1, 0, +1}`` on ``k`` two-way infinite tapes, a step-by-step reference run, and three real
machines used by the tests and the experiment (binary increment, copy, palindrome).
"""
from __future__ import annotations

from dataclasses import dataclass, field

BLANK = "_"
MOVES = (-1, 0, 1)


@dataclass(frozen=True)
class TuringMachine:
    """A deterministic ``k``-tape Turing machine.

    ``delta`` maps ``(state, (a_1..a_k))`` to ``(state', (w_1..w_k), (d_1..d_k))``; a configuration
    with no entry halts. ``alphabet`` must hold every symbol of ``delta`` and :data:`BLANK`.
    """

    name: str
    tapes: int
    states: tuple
    alphabet: tuple
    start: str
    delta: dict = field(hash=False, compare=False)
    accept: tuple = ()

    def __post_init__(self):
        if not isinstance(self.tapes, int) or self.tapes < 1:
            raise ValueError(f"tapes must be an integer >= 1, got {self.tapes!r}")
        if BLANK not in self.alphabet:
            raise ValueError(f"alphabet must contain the blank {BLANK!r}; got {self.alphabet!r}")
        if self.start not in self.states:
            raise ValueError(f"start state {self.start!r} is not one of the states {self.states!r}")
        for (q, read), (q2, write, move) in self.delta.items():
            if q not in self.states or q2 not in self.states:
                raise ValueError(f"transition {(q, read)!r} uses a state outside {self.states!r}")
            if not (len(read) == len(write) == len(move) == self.tapes):
                raise ValueError(f"transition {(q, read)!r}: read, write and move need {self.tapes} entries each")
            if not set(read) | set(write) <= set(self.alphabet):
                raise ValueError(f"transition {(q, read)!r} uses a symbol outside the alphabet {self.alphabet!r}")
            if not set(move) <= set(MOVES):
                raise ValueError(f"transition {(q, read)!r}: moves must be in {MOVES}, got {move!r}")

    def step(self, state, read):
        """``delta(state, read)`` or ``None`` when the machine halts there."""
        return self.delta.get((state, tuple(read)))


def normalise(cells: dict, head: int):
    """A tape as ``(string, head offset)`` over the span of its non-blank cells and the head."""
    used = [i for i, a in cells.items() if a != BLANK] + [head]
    lo, hi = min(used), max(used)
    return "".join(cells.get(i, BLANK) for i in range(lo, hi + 1)), head - lo


def normalise_list(cells: list, head: int):
    """:func:`normalise` for a tape given as a list (index = position)."""
    return normalise(dict(enumerate(cells)), head)


def initial_tapes(tm: TuringMachine, word: str):
    """Tape 1 holds ``word`` from position 0, the other tapes are blank; every head at 0."""
    bad = set(word) - set(tm.alphabet)
    if bad:
        raise ValueError(f"input symbols {sorted(bad)} are not in the alphabet {tm.alphabet!r}")
    tapes = [dict(enumerate(word))] + [{} for _ in range(tm.tapes - 1)]
    return tapes, [0] * tm.tapes


def run_reference(tm: TuringMachine, word: str, max_steps: int = 10**7):
    """Run ``tm`` on ``word``; return the configurations ``(state, ((tape, head), ...))`` after each
    step, the initial one first (tapes normalised with :func:`normalise`)."""
    tapes, heads = initial_tapes(tm, word)
    state = tm.start
    configs = [(state, tuple(normalise(t, h) for t, h in zip(tapes, heads)))]
    for _ in range(max_steps):
        out = tm.step(state, [t.get(h, BLANK) for t, h in zip(tapes, heads)])
        if out is None:
            return configs
        state, write, move = out
        for i in range(tm.tapes):
            tapes[i][heads[i]] = write[i]
            heads[i] += move[i]
        configs.append((state, tuple(normalise(t, h) for t, h in zip(tapes, heads))))
    raise RuntimeError(f"{tm.name} did not halt within max_steps={max_steps}")


# ----------------------------------------------------------------------------- machines
def binary_increment() -> TuringMachine:
    """One tape: add 1 to a binary number written most significant bit first (head on its first bit)."""
    d = {}
    for a in "01":
        d[("right", (a,))] = ("right", (a,), (1,))
    d[("right", (BLANK,))] = ("carry", (BLANK,), (-1,))
    d[("carry", ("1",))] = ("carry", ("0",), (-1,))
    d[("carry", ("0",))] = ("done", ("1",), (0,))
    d[("carry", (BLANK,))] = ("done", ("1",), (0,))
    return TuringMachine("binary_increment", 1, ("right", "carry", "done"), ("0", "1", BLANK), "right", d,
                         accept=("done",))


def copy_machine() -> TuringMachine:
    """Two tapes: copy tape 1 onto tape 2, then rewind both heads to the first cell."""
    d = {}
    for a in "01":
        d[("copy", (a, BLANK))] = ("copy", (a, a), (1, 1))
        d[("rewind", (a, a))] = ("rewind", (a, a), (-1, -1))
    d[("copy", (BLANK, BLANK))] = ("rewind", (BLANK, BLANK), (-1, -1))
    d[("rewind", (BLANK, BLANK))] = ("done", (BLANK, BLANK), (1, 1))
    return TuringMachine("copy", 2, ("copy", "rewind", "done"), ("0", "1", BLANK), "copy", d, accept=("done",))


def palindrome_machine() -> TuringMachine:
    """Two tapes: copy the input to tape 2, rewind tape 1, then compare tape 1 forwards with tape 2
    backwards; halts in ``yes`` or ``no``."""
    d = {}
    for a in "01":
        d[("copy", (a, BLANK))] = ("copy", (a, a), (1, 1))
        for c in "01":
            d[("rewind", (a, c))] = ("rewind", (a, c), (-1, 0))
            d[("compare", (a, c))] = ("compare" if a == c else "no", (a, c), (1, -1) if a == c else (0, 0))
    d[("copy", (BLANK, BLANK))] = ("rewind", (BLANK, BLANK), (-1, -1))
    for c in ("0", "1", BLANK):
        d[("rewind", (BLANK, c))] = ("compare", (BLANK, c), (1, 0))
    d[("compare", (BLANK, BLANK))] = ("yes", (BLANK, BLANK), (0, 0))
    return TuringMachine("palindrome", 2, ("copy", "rewind", "compare", "yes", "no"), ("0", "1", BLANK), "copy", d,
                         accept=("yes",))


MACHINES = {"binary_increment": binary_increment, "copy": copy_machine, "palindrome": palindrome_machine}
