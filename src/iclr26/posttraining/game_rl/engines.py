"""Game engines for Code2Logic (Game-RL, arXiv:2505.13886, Sec. 3 "Code2Logic": step 1, the game
code -- a state space plus transition functions such as ``move`` -- that the data engine reuses).

Official code: https://github.com/tongjingqi/Game-RL (``src/<game>/``: one pure-Python generator per
game). These engines are small text-rendered re-writes of five of its games, not its code:
Sokoban, Maze, Langton's ant and Life (in-domain in the paper except Life) and Snake (an
out-of-domain game in the paper). Coordinates are ``(row, col)``, 0-indexed, row 0 at the top;
moves are ``U``/``D``/``L``/``R``.

Every engine is deterministic given its state: ``sample_state(rng, level)`` draws a state whose
size grows with ``level`` (the paper's difficulty gradation by board size), ``step(state, action)``
returns a new state (the input is never modified), ``render_text(state)`` draws it as text.
"""
from __future__ import annotations

import copy
from abc import ABC, abstractmethod

import numpy as np

__all__ = ["GameEngine", "SokobanEngine", "MazeEngine", "LangtonAntEngine", "LifeEngine", "SnakeEngine",
           "MOVES", "ENGINES"]

#: unit moves (row, col)
MOVES = {"U": (-1, 0), "D": (1, 0), "L": (0, -1), "R": (0, 1)}


def _check_level(level):
    if isinstance(level, bool) or not isinstance(level, (int, np.integer)) or not 1 <= level <= 5:
        raise ValueError(f"level must be an integer in 1..5, got {level!r}")
    return int(level)


def _check_action(action):
    if action not in MOVES:
        raise ValueError(f"action must be one of {sorted(MOVES)}, got {action!r}")
    return MOVES[action]


def _grid_text(n_rows, n_cols, cell):
    return "\n".join("".join(cell(r, c) for c in range(n_cols)) for r in range(n_rows))


class GameEngine(ABC):
    """A game: state space (``sample_state``), transition (``step``) and a text view
    (``render_text``). Subclasses set ``name`` and ``legend`` (how to read the text view)."""
    name: str = ""
    legend: str = ""
    actions: tuple = tuple(MOVES)

    def size(self, level: int) -> int:
        """Board side at ``level`` (difficulty gradation by board size): ``3 + level``."""
        return 3 + _check_level(level)

    @abstractmethod
    def sample_state(self, rng: np.random.Generator, level: int) -> dict: ...

    @abstractmethod
    def step(self, state: dict, action=None) -> dict: ...

    @abstractmethod
    def render_text(self, state: dict) -> str: ...

    def rollout(self, state: dict, actions) -> list[dict]:
        """The states after each action (``len(actions)`` states; the input is kept)."""
        out = []
        for a in actions:
            state = self.step(state, a)
            out.append(state)
        return out


class SokobanEngine(GameEngine):
    """Sokoban: the player (``@``) walks on floor (``.``) inside walls (``#``) and pushes a box
    (``$``) one cell when the cell behind it is free; a move into a wall or an unpushable box leaves
    the player in place (the official game's ``move``)."""
    name = "sokoban"
    legend = "# wall, . floor, $ box, @ player"

    def size(self, level: int) -> int:
        """Board side ``4 + level``, walls included (an inner ``(2 + level)``-square)."""
        return 4 + _check_level(level)

    def sample_state(self, rng, level):
        n = self.size(level)
        inner = [(r, c) for r in range(1, n - 1) for c in range(1, n - 1)]
        pick = rng.permutation(len(inner))
        n_boxes = _check_level(level)
        n_walls = level
        cells = [inner[i] for i in pick[: 1 + n_boxes + n_walls]]
        walls = {(r, c) for r in range(n) for c in range(n) if r in (0, n - 1) or c in (0, n - 1)}
        walls |= set(cells[1 + n_boxes:])
        return dict(n=n, player=cells[0], boxes=sorted(cells[1:1 + n_boxes]), walls=sorted(walls))

    def step(self, state, action=None):
        dr, dc = _check_action(action)
        s = copy.deepcopy(state)
        walls, boxes = set(map(tuple, s["walls"])), set(map(tuple, s["boxes"]))
        pr, pc = s["player"]
        t = (pr + dr, pc + dc)
        if t in walls:
            return s
        if t in boxes:
            beyond = (t[0] + dr, t[1] + dc)
            if beyond in walls or beyond in boxes:
                return s
            boxes.remove(t)
            boxes.add(beyond)
        s["player"], s["boxes"] = t, sorted(boxes)
        return s

    def render_text(self, state):
        walls, boxes = set(map(tuple, state["walls"])), set(map(tuple, state["boxes"]))

        def cell(r, c):
            if (r, c) == tuple(state["player"]):
                return "@"
            return "#" if (r, c) in walls else "$" if (r, c) in boxes else "."
        return _grid_text(state["n"], state["n"], cell)


class MazeEngine(GameEngine):
    """Grid maze: walls (``#``), open cells (``.``), start ``S`` and exit ``E``; a move into a wall or
    off the board is blocked. ``shortest_path`` is breadth-first search over ``step``."""
    name = "maze"
    legend = "# wall, . open, S start, E exit"
    wall_density = 0.3

    def sample_state(self, rng, level):
        n = self.size(level)
        for _ in range(1000):
            walls = rng.random((n, n)) < self.wall_density
            free = np.argwhere(~walls)
            if len(free) < 2:
                continue
            i, j = rng.choice(len(free), 2, replace=False)
            s = dict(n=n, walls=[tuple(map(int, x)) for x in np.argwhere(walls)],
                     pos=tuple(map(int, free[i])), exit=tuple(map(int, free[j])))
            d = self.shortest_path(s)
            if d is not None and d >= 2:
                return s
        raise RuntimeError("could not draw a solvable maze")   # pragma: no cover

    def step(self, state, action=None):
        dr, dc = _check_action(action)
        r, c = state["pos"][0] + dr, state["pos"][1] + dc
        s = copy.deepcopy(state)
        if 0 <= r < s["n"] and 0 <= c < s["n"] and (r, c) not in set(map(tuple, s["walls"])):
            s["pos"] = (r, c)
        return s

    def shortest_path(self, state):
        """Number of moves of a shortest path from ``pos`` to ``exit`` (BFS), ``None`` if unreachable."""
        from collections import deque

        start, goal = tuple(state["pos"]), tuple(state["exit"])
        seen, q = {start: 0}, deque([state])
        while q:
            s = q.popleft()
            p = tuple(s["pos"])
            if p == goal:
                return seen[p]
            for a in self.actions:
                t = self.step(s, a)
                tp = tuple(t["pos"])
                if tp not in seen:
                    seen[tp] = seen[p] + 1
                    q.append(t)
        return None

    def render_text(self, state):
        walls = set(map(tuple, state["walls"]))

        def cell(r, c):
            if (r, c) == tuple(state["pos"]):
                return "S"
            if (r, c) == tuple(state["exit"]):
                return "E"
            return "#" if (r, c) in walls else "."
        return _grid_text(state["n"], state["n"], cell)


class LangtonAntEngine(GameEngine):
    """Langton's ant on a torus: on a white cell (``.``) the ant turns right, on a black cell
    (``#``) left; it then flips the colour of the cell and steps forward one cell (wrapping at the
    edges)."""
    name = "langton_ant"
    legend = ". white, # black"
    actions = (None,)
    _dirs = ("U", "R", "D", "L")   # clockwise

    def sample_state(self, rng, level):
        n = self.size(level)
        black = np.argwhere(rng.random((n, n)) < 0.35)
        return dict(n=n, black=sorted(tuple(map(int, x)) for x in black),
                    ant=tuple(int(v) for v in rng.integers(0, n, 2)), heading=str(rng.choice(self._dirs)))

    def step(self, state, action=None):
        s = copy.deepcopy(state)
        black = set(map(tuple, s["black"]))
        pos = tuple(s["ant"])
        i = self._dirs.index(s["heading"])
        if pos in black:
            i = (i - 1) % 4
            black.remove(pos)
        else:
            i = (i + 1) % 4
            black.add(pos)
        h = self._dirs[i]
        dr, dc = MOVES[h]
        s["ant"] = ((pos[0] + dr) % s["n"], (pos[1] + dc) % s["n"])
        s["heading"], s["black"] = h, sorted(black)
        return s

    def render_text(self, state):
        black = set(map(tuple, state["black"]))
        board = _grid_text(state["n"], state["n"], lambda r, c: "#" if (r, c) in black else ".")
        return f"{board}\nAnt at {tuple(state['ant'])} facing {state['heading']}."


class LifeEngine(GameEngine):
    """Conway's Game of Life (B3/S23) on a bounded board (cells outside are dead): a live cell
    (``O``) with 2 or 3 live neighbours survives, a dead cell (``.``) with exactly 3 is born."""
    name = "life"
    legend = "O live, . dead"
    actions = (None,)

    def sample_state(self, rng, level):
        n = self.size(level)
        return dict(n=n, live=sorted(tuple(map(int, x)) for x in np.argwhere(rng.random((n, n)) < 0.35)))

    @staticmethod
    def neighbours(state, cell):
        live = set(map(tuple, state["live"]))
        r, c = cell
        return sum((r + i, c + j) in live for i in (-1, 0, 1) for j in (-1, 0, 1) if (i, j) != (0, 0))

    def step(self, state, action=None):
        live = set(map(tuple, state["live"]))
        n = state["n"]
        new = []
        for r in range(n):
            for c in range(n):
                k = self.neighbours(state, (r, c))
                if k == 3 or (k == 2 and (r, c) in live):
                    new.append((r, c))
        return dict(n=n, live=new)

    def render_text(self, state):
        live = set(map(tuple, state["live"]))
        return _grid_text(state["n"], state["n"], lambda r, c: "O" if (r, c) in live else ".")


class SnakeEngine(GameEngine):
    """Snake on a walled board: the body is a list of cells, head first; a move puts a new head next
    to the old one and drops the tail, unless the head lands on the food (``*``), where the snake
    grows by one. A move back into the neck is ignored (the snake keeps its heading)."""
    name = "snake"
    legend = "H head, o body, * food, . empty"

    def sample_state(self, rng, level):
        n = self.size(level)
        length = 2 + _check_level(level) // 2
        for _ in range(1000):
            head = tuple(int(v) for v in rng.integers(1, n - 1, 2))
            body = [head]
            for _ in range(length - 1):
                opts = [(body[-1][0] + dr, body[-1][1] + dc) for dr, dc in MOVES.values()]
                opts = [p for p in opts if 0 <= p[0] < n and 0 <= p[1] < n and p not in body]
                if not opts:
                    break
                body.append(opts[rng.integers(len(opts))])
            if len(body) < length:
                continue
            free = [(r, c) for r in range(n) for c in range(n) if (r, c) not in body]
            return dict(n=n, body=body, food=free[rng.integers(len(free))], alive=True)
        raise RuntimeError("could not draw a snake")   # pragma: no cover

    def step(self, state, action=None):
        dr, dc = _check_action(action)
        s = copy.deepcopy(state)
        if not s["alive"]:
            return s
        body = [tuple(p) for p in s["body"]]
        head = body[0]
        new = (head[0] + dr, head[1] + dc)
        if len(body) > 1 and new == body[1]:                       # reversing: keep heading
            new = (2 * head[0] - body[1][0], 2 * head[1] - body[1][1])
        grow = new == tuple(s["food"])
        rest = body if grow else body[:-1]
        if not (0 <= new[0] < s["n"] and 0 <= new[1] < s["n"]) or new in rest:
            s["alive"] = False
            return s
        s["body"] = [new] + rest
        return s

    def render_text(self, state):
        body = [tuple(p) for p in state["body"]]

        def cell(r, c):
            if (r, c) == body[0]:
                return "H"
            return "o" if (r, c) in body else "*" if (r, c) == tuple(state["food"]) else "."
        return _grid_text(state["n"], state["n"], cell)


ENGINES = {e.name: e for e in (SokobanEngine(), MazeEngine(), LangtonAntEngine(), LifeEngine(), SnakeEngine())}
