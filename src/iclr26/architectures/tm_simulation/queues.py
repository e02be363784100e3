"""Multi-tape TM -> synchronous multi-queue TM (the paper's Step 1) and the single-queue baseline.

Li & Wang, "Efficient Turing Machine Simulation with Transformers", ICLR 2026 (arXiv:2512.00003).

*Synchronous* queues: at every tick each of the ``K`` queues pops its front and pushes one symbol,
so a queue of fixed length ``N`` is a delay line: what is pushed at tick ``t`` is the front at tick
``t + N``, and cell ``c`` is at the front exactly at the ticks ``t = c (mod N)``. A tick is one
chain-of-thought step of the transformer that runs the machine (:mod:`.transformer`); the number of
ticks per simulated TM step is the overhead the paper bounds.

**The paper's construction (abstract; Theorem on multi-tape -> synchronous multi-queue TMs).** Each
tape is two stacks (the cells left of the head, and the head cell with the cells to its right).
Each stack is held in ``k'`` *levels* of queues; level ``i`` has ``N_i = 2 b^i`` cells with
``b = ceil(s^(1/k'))`` (so the last level holds ``2 b^k' >= 2 s`` symbols and the context window is
``O(s)``). A level holds real symbols followed by dummy symbols; the top of the stack lives in
level 1. A push writes the first dummy cell of level 1; when level 1 is full its bottom half moves up
to level 2, recursively; a pop from an empty level 1 refills it with the top block of level 2,
recursively. A level-``i`` operation waits at most one rotation ``N_i`` and happens once per
``b^(i-1)`` stack operations, so every stack operation costs ``O(k' s^(1/k'))`` ticks amortised and
a TM step ``O(s^(1/k'))`` ticks: with ``K = H * L`` heads times layers and ``k' = K/(6k)`` levels,
``O(s^c)`` CoT steps per TM step, ``c = 6k/K``.

**The baseline** (Li & Wang 2025, a single queue): the tapes are tracks of one queue of ``s + 1``
cells with head markers; each TM step rotates it once to read the heads and once to write and move
them, ``Theta(s)`` ticks per TM step.

Tick semantics (shared with the transformer): one opcode ``(kind, a, src)`` per tick,

=========  =====================================================================================
``keep``   every queue pushes its front back (nothing changes)
``load``   ``reg <- front[a]``; queue ``a`` pushes a dummy (a pop)
``store``  queue ``a`` pushes ``reg`` (a push)
``write``  queue ``a`` pushes ``writes[src]`` (a push of the symbol tape ``src`` writes)
``copy``   queue ``a`` pushes ``front[src]``, queue ``src`` pushes a dummy (moves one symbol between levels)
``blank``  ``reg <- BLANK`` (a pop from an empty stack)
``head``   ``heads[src] <- reg``
``delta``  ``(state, writes, moves) <- delta(state, heads)``
=========  =====================================================================================
"""
from __future__ import annotations

import math

from .machines import BLANK, TuringMachine, initial_tapes, normalise_list

DUMMY = "#"
KINDS = ("keep", "load", "store", "write", "copy", "blank", "head", "delta")


def integer_root(s: int, k: int) -> int:
    """``ceil(s ** (1/k))`` computed exactly on integers."""
    if s < 1 or k < 1:
        raise ValueError(f"need s >= 1 and k >= 1, got s={s}, k={k}")
    b = max(1, int(round(s ** (1.0 / k))))
    while b ** k < s:
        b += 1
    while b > 1 and (b - 1) ** k >= s:
        b -= 1
    return b


class Clock:
    """The shared tick counter of a synchronous machine, with an optional opcode log."""

    def __init__(self, record: bool = False):
        self.t = 0
        self.record = record
        self.ops: list = []
        self.counts = {k: 0 for k in KINDS}       # opcodes spent, per kind (``copy`` = level moves)

    def wait_for(self, residue: int, modulus: int) -> None:
        """Advance (with ``keep`` ticks) to the first tick ``t' >= t`` with ``t' = residue (mod modulus)``."""
        self.t += (residue - self.t) % modulus

    def op(self, kind, a=-1, src=-1) -> int:
        """Spend one tick on an opcode; return the tick it ran at."""
        if self.record:
            self.ops.append((self.t, (kind, a, src)))
        self.counts[kind] += 1
        self.t += 1
        return self.t - 1


class LayeredQueueStack:
    """A stack held in ``levels`` synchronous queues of lengths ``2 b, 2 b^2, ..., 2 b^levels``.

    Layout: level ``i`` keeps ``count[i]`` real symbols in the cells ``bottom[i], bottom[i] + 1, ...``
    (mod ``N_i``), the deepest first, dummies elsewhere; ``bottom[i]`` is always ``0`` or ``b^i``
    (a half of the level) and ``count[i]`` a multiple of ``b^(i-1)``. Level 1 holds the top of the
    stack; the symbols of level ``i + 1`` lie below those of level ``i``. Blocks of ``b^i`` symbols
    move between level ``i`` and ``i + 1`` in ``b^i`` consecutive ``copy`` ticks; both cells must be
    at their fronts at the same tick, which holds because the next free block of level ``i + 1``
    and the bottom half of level ``i`` always have the same parity (kept by every move). This
    replaces the paper's buffer queues (see the README's deviations).
    """

    def __init__(self, clock: Clock, b: int, levels: int, qids: list, cells: list):
        if b < 2:
            raise ValueError(f"the level base b must be >= 2, got {b}")
        if levels < 1 or len(qids) != levels or len(cells) != levels:
            raise ValueError(f"need levels >= 1 with one queue id and one cell list per level, got {levels}")
        self.clock, self.b, self.levels, self.qids, self.cells = clock, b, levels, list(qids), cells
        self.N = [2 * b ** (i + 1) for i in range(levels)]
        if any(len(c) != n for c, n in zip(cells, self.N)):
            raise ValueError("cell lists must have lengths 2 b^i")
        self.bottom = [0] * levels
        self.count = [0] * levels

    # ------------------------------------------------------------------ layout
    def __len__(self):
        return sum(self.count)

    def contents(self, cells=None, layout=None) -> list:
        """The stack, deepest symbol first, read from ``cells`` (default: the live queue cells) with
        ``layout = (bottoms, counts)`` (default: the current one)."""
        cells = self.cells if cells is None else cells
        bottom, count = self.layout() if layout is None else layout
        out = []
        for i in reversed(range(self.levels)):
            n = self.N[i]
            out += [cells[i][(bottom[i] + m) % n] for m in range(count[i])]
        return out

    def layout(self):
        return tuple(self.bottom), tuple(self.count)

    # ------------------------------------------------------------------ operations
    def push(self, kind: str, src: int, value) -> None:
        """Push ``value`` (already in ``reg`` for ``kind='store'``, or ``writes[src]`` for ``'write'``)."""
        if self.count[0] == self.N[0]:
            self._up(0)
        c = (self.bottom[0] + self.count[0]) % self.N[0]
        self.clock.wait_for(c, self.N[0])
        self.clock.op(kind, self.qids[0], src)
        self.cells[0][c] = value
        self.count[0] += 1

    def pop(self):
        """Pop the top symbol into ``reg`` (``BLANK`` when the stack is empty)."""
        if len(self) == 0:
            self.clock.op("blank")
            return BLANK
        if self.count[0] == 0:
            self._down(0)
        c = (self.bottom[0] + self.count[0] - 1) % self.N[0]
        self.clock.wait_for(c, self.N[0])
        self.clock.op("load", self.qids[0])
        value, self.cells[0][c] = self.cells[0][c], DUMMY
        self.count[0] -= 1
        return value

    def _up(self, i: int) -> None:
        """Level ``i`` is full: move its bottom half to the top of level ``i + 1``."""
        if i + 1 == self.levels:
            raise OverflowError(f"stack overflow: more than {self.N[-1]} symbols (raise s)")
        if self.count[i + 1] == self.N[i + 1]:
            self._up(i + 1)
        blk = self.b ** (i + 1)
        dst = (self.bottom[i + 1] + self.count[i + 1]) % self.N[i + 1]
        src = self.bottom[i]
        self._move(i, src, i + 1, dst, blk)
        self.bottom[i] = (src + blk) % self.N[i]
        self.count[i] -= blk
        self.count[i + 1] += blk

    def _down(self, i: int) -> None:
        """Level ``i`` is empty: refill it with the top block of level ``i + 1``."""
        if self.count[i + 1] == 0:
            self._down(i + 1)
        blk = self.b ** (i + 1)
        src = (self.bottom[i + 1] + self.count[i + 1] - blk) % self.N[i + 1]
        dst = (self.bottom[i] - blk) % self.N[i]
        self._move(i + 1, src, i, dst, blk)
        self.bottom[i] = dst
        self.count[i] += blk
        self.count[i + 1] -= blk

    def _move(self, li: int, src: int, lj: int, dst: int, n: int) -> None:
        """``n`` copy ticks from level ``li`` cell ``src`` on to level ``lj`` cell ``dst`` on."""
        big = max(li, lj)
        start = src if li == big else dst
        self.clock.wait_for(start, self.N[big])
        t0 = self.clock.t
        if (t0 - src) % self.N[li] or (t0 - dst) % self.N[lj]:
            raise AssertionError("level blocks are not aligned")   # the parity invariant is broken
        for m in range(n):
            self.clock.op("copy", self.qids[lj], self.qids[li])
            a, b = (src + m) % self.N[li], (dst + m) % self.N[lj]
            self.cells[lj][b], self.cells[li][a] = self.cells[li][a], DUMMY


class QueueSimulator:
    """Run a :class:`TuringMachine` as a synchronous ``2 k k'``-queue machine (the paper's Step 1).

    ``s`` is the space bound (tape cells the run may use), ``k_prime`` the number of levels per stack
    (the paper's ``k' = K / (6k)``). ``run(word)`` simulates the machine; ``ticks_per_step`` and
    ``configs`` (decoded from the queue cells after every TM step) come out.
    """

    def __init__(self, tm: TuringMachine, s: int, k_prime: int, record: bool = False):
        if not isinstance(tm, TuringMachine):
            raise TypeError(f"tm must be a TuringMachine, got {type(tm).__name__}")
        if isinstance(s, bool) or not isinstance(s, int) or s < 2:
            raise ValueError(f"space bound s must be an integer >= 2, got {s!r}")
        if isinstance(k_prime, bool) or not isinstance(k_prime, int) or k_prime < 1:
            raise ValueError(f"k_prime (levels per stack) must be an integer >= 1, got {k_prime!r}")
        self.tm, self.s, self.k_prime = tm, s, k_prime
        self.b = max(2, integer_root(s, k_prime))
        self.clock = Clock(record)
        self.queue_lengths = []
        self.stacks = []          # per tape: (left stack, right stack)
        self.cells = []           # per queue: its cell list
        for _ in range(tm.tapes):
            pair = []
            for _side in range(2):
                qids = list(range(len(self.queue_lengths), len(self.queue_lengths) + k_prime))
                cells = [[DUMMY] * (2 * self.b ** (i + 1)) for i in range(k_prime)]
                self.queue_lengths += [len(c) for c in cells]
                self.cells += cells
                pair.append(LayeredQueueStack(self.clock, self.b, k_prime, qids, cells))
            self.stacks.append(tuple(pair))

    @property
    def window(self) -> int:
        """The context window the transformer needs: the longest queue plus one."""
        return max(self.queue_lengths) + 1

    def load_input(self, word: str) -> None:
        """Place ``word`` on tape 1 (head on its first symbol) without spending ticks."""
        tapes, _ = initial_tapes(self.tm, word)
        if len(word) > self.s:
            raise ValueError(f"input of length {len(word)} exceeds the space bound s={self.s}")
        for i, (left, right) in enumerate(self.stacks):
            cells = [tapes[i][p] for p in sorted(tapes[i])]
            for a in reversed(cells):                       # the head cell ends on top of the right stack
                right.push("store", -1, a)
        self.clock.t, self.clock.ops = 0, []
        self.clock.counts = {k: 0 for k in KINDS}

    def decode(self, cells=None, layouts=None):
        """The tapes ``((string, head offset), ...)`` held in the queue cells (default: the live
        cells and layout; else ``cells`` per queue and ``layouts`` as in :attr:`step_layouts`)."""
        out = []
        layouts = self.layouts() if layouts is None else layouts
        for (left, right), (ll, rl) in zip(self.stacks, layouts):
            lst = left.contents(None if cells is None else [cells[q] for q in left.qids], ll)
            rst = right.contents(None if cells is None else [cells[q] for q in right.qids], rl)
            tape = lst + list(reversed(rst))
            out.append(normalise_list(tape if rst else tape + [BLANK], len(lst)))
        return tuple(out)

    def run(self, word: str, max_steps: int = 10**7, snapshots: bool = True):
        """Simulate ``tm`` on ``word``; return ``self`` with ``configs``, ``step_ticks`` and ``state``."""
        self.load_input(word)
        self.prompt_cells = [list(c) for c in self.cells]     # the queues at tick 0: the transformer's prompt
        tm, state = self.tm, self.tm.start
        self.configs = [(state, self.decode())] if snapshots else []
        self.step_ticks = []
        self.step_layouts = [self.layouts()] if snapshots else []
        self.step_end = [0]                                  # tick count after each TM step
        self.step_moves = []                                 # the head moves delta chose, per TM step
        for _ in range(max_steps):
            t0 = self.clock.t
            heads = []
            for k, (left, right) in enumerate(self.stacks):     # read: pop every head cell into heads
                heads.append(right.pop())
                self.clock.op("head", -1, k)
            out = tm.step(state, heads)
            if out is None:                                    # halt: put the head cells back
                for k, (left, right) in enumerate(self.stacks):
                    right.push("write", k, heads[k])
                self.halt_ticks = self.clock.t - t0
                self.state = state
                return self
            self.clock.op("delta")
            state, write, move = out
            self.step_moves.append(tuple(move))
            for k, (left, right) in enumerate(self.stacks):
                if move[k] == 1:
                    left.push("write", k, write[k])
                elif move[k] == 0:
                    right.push("write", k, write[k])
                else:
                    right.push("write", k, write[k])
                    a = left.pop()
                    right.push("store", -1, a)
            self.step_ticks.append(self.clock.t - t0)
            self.step_end.append(self.clock.t)
            if snapshots:
                self.configs.append((state, self.decode()))
                self.step_layouts.append(self.layouts())
        raise RuntimeError(f"{tm.name} did not halt within max_steps={max_steps}")

    def layouts(self):
        return tuple((l.layout(), r.layout()) for l, r in self.stacks)



class SingleQueueSimulator:
    """The earlier construction (Li & Wang 2025), executed tick by tick: every tape is a track of one
    synchronous queue of ``s + 1`` cells (cell ``s`` is a left end marker), with one head marker per
    track, and the finite control holds one cell in a register (a one-cell delay line, so that it can
    still mark the cell left of a head when the head cell reaches the front).

    Every tick pops the queue's front into the register and pushes the register's previous cell
    (possibly rewritten), so the ring of ``s + 2`` cells (queue + register) advances by one cell per
    tick. A TM step is a read rotation (``s + 2`` ticks: every marked cell passes the register and the
    control latches its symbol), one ``delta`` tick, and a write rotation (``s + 2`` ticks: the marked
    cell gets the written symbol, and the marker moves to the next cell (right), stays, or moves to
    the register's cell (left)). The tick count is that of the ticks executed, not a formula; with
    this control it is ``2 (s + 2) + 1`` per TM step whatever the machine does.
    Positions run from ``-1`` (one blank cell left of the input, cell 0) to ``s - 2`` (cell ``s - 1``).
    """

    def __init__(self, tm: TuringMachine, s: int):
        if not isinstance(tm, TuringMachine):
            raise TypeError(f"tm must be a TuringMachine, got {type(tm).__name__}")
        if isinstance(s, bool) or not isinstance(s, int) or s < 2:
            raise ValueError(f"space bound s must be an integer >= 2, got {s!r}")
        self.tm, self.s = tm, s
        self.N = s + 1

    def _ring(self):
        """The cells in tape order (cell 0 first), read from the register and the queue."""
        cells = [self.reg] + list(self.q)
        return sorted(cells, key=lambda c: c[0])

    def _tapes(self):
        cells = self._ring()[: self.s]                       # drop the end marker (cell s)
        out = []
        for i in range(self.tm.tapes):
            syms = [c[1][i] for c in cells]
            heads = [j for j, c in enumerate(cells) if c[2] >> i & 1]
            if len(heads) != 1:
                raise AssertionError(f"track {i} holds {len(heads)} head markers")
            out.append(normalise_list(syms, heads[0]))
        return tuple(out)

    def run(self, word: str, max_steps: int = 10**7, snapshots: bool = True):
        """Simulate ``tm`` on ``word`` tick by tick; return ``self`` with ``configs`` (decoded from the
        ring after every TM step), ``step_ticks`` and ``state``."""
        from collections import deque

        initial_tapes(self.tm, word)                         # rejects symbols outside the alphabet
        if len(word) > self.s - 2:
            raise ValueError(f"input of length {len(word)} exceeds the space bound s - 2 = {self.s - 2}")
        tm, k, s = self.tm, self.tm.tapes, self.s
        # a cell: [index, symbols per track, head-marker bit mask]; cell s is the end marker
        cells = [[j, [BLANK] * k, 0] for j in range(s)] + [[s, [DUMMY] * k, 0]]
        for j, a in enumerate(word):
            cells[j + 1][1][0] = a
        cells[1][2] = (1 << k) - 1                           # every head on position 0 (cell 1)
        self.reg = cells[-1]                                 # the control starts holding the end marker
        self.q = deque(cells[:-1])
        q, ring = self.q, s + 2
        t, state = 0, tm.start
        self.configs = [(state, self._tapes())] if snapshots else []
        self.step_ticks = []
        for _ in range(max_steps):
            t0 = t
            read = [BLANK] * k
            for _tick in range(ring):                        # read rotation
                x = q.popleft()
                q.append(self.reg)
                self.reg = x
                t += 1
                if x[2]:
                    for i in range(k):
                        if x[2] >> i & 1:
                            read[i] = x[1][i]
            out = tm.step(state, read)
            if out is None:
                self.state = state
                self.ticks = t
                return self
            x = q.popleft()                                  # delta tick: the ring advances once more
            q.append(self.reg)
            self.reg = x
            t += 1
            state, write, move = out
            done, pending = 0, 0                             # tracks already rewritten; marks to put on the next cell
            for _tick in range(ring):                        # write rotation
                x = q.popleft()
                y = self.reg
                if pending:                                  # x is the cell right of a head just handled
                    if x[0] == s:
                        raise OverflowError(f"a head left the s={s} cells of the queue (right end)")
                    x[2] |= pending
                    pending = 0
                m = x[2] & ~done
                if m:                                        # x carries a head not yet handled
                    for i in range(k):
                        if m >> i & 1:
                            done |= 1 << i
                            x[1][i] = write[i]
                            if move[i] == 1:
                                x[2] &= ~(1 << i)
                                pending |= 1 << i
                            elif move[i] == -1:
                                if y[0] == s:
                                    raise OverflowError(f"a head left the s={s} cells of the queue (left end)")
                                x[2] &= ~(1 << i)
                                y[2] |= 1 << i
                q.append(y)
                self.reg = x
                t += 1
            if pending:                                      # the head cell was the last one of the rotation
                x = q[0]
                if x[0] == s:
                    raise OverflowError(f"a head left the s={s} cells of the queue (right end)")
                x[2] |= pending
            self.step_ticks.append(t - t0)
            if snapshots:
                self.configs.append((state, self._tapes()))
        raise RuntimeError(f"{tm.name} did not halt within max_steps={max_steps}")


def overhead_per_step(sim) -> float:
    """Mean ticks (CoT steps) per simulated TM step of a finished run."""
    if not sim.step_ticks:
        raise ValueError("the run made no TM step")
    return float(sum(sim.step_ticks)) / len(sim.step_ticks)


def loglog_slope(s_values, overheads) -> float:
    """Least-squares slope of ``log overhead`` on ``log s`` (the fitted exponent)."""
    if len(s_values) < 2 or len(s_values) != len(overheads):
        raise ValueError("need at least two (s, overhead) pairs of equal length")
    if any(not (math.isfinite(v) and v > 0) for v in list(s_values) + list(overheads)):
        raise ValueError("s values and overheads must be finite and > 0")
    xs = [math.log(v) for v in s_values]
    ys = [math.log(v) for v in overheads]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    sxx = sum((x - mx) ** 2 for x in xs)
    if sxx == 0:
        raise ValueError("the s values must not all be equal")
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx
