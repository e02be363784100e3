"""The failure-aware graph planner of Strict Subgoal Execution (path refinement).

Hwang, Lee, Kim, Han, ICLR 2026, arXiv:2506.21039; official code ``SSE/rl/algo/graph.py``.

The goal space is covered by a grid graph of landmark nodes (here: every cell of a ``height x
width`` grid, 4-neighbour edges of base length ``d = 1``; the walls are *not* known to the
planner). Each node keeps how often the low level was sent to it as a waypoint (``attempts``) and
how often it got there (``successes``). Path refinement (Sec. 3, "Path refinement"; code
``apply_fail_percentage``) inflates the cost of entering a node with its failure ratio,

    d~(v1 -> v2) = d(v1 -> v2) * max(1, c_dist * fail_ratio(v2)),
    fail_ratio(v) = (attempts(v) - successes(v)) / attempts(v)   (0 before any attempt),

and a node tried more than ``fail_count`` times without a single success is disconnected
(entering it costs ``disconnect_cost``), as in the official code's ``disconnected`` list. A
waypoint that fails during a high-level step is also *deleted* for the rest of that step (entering
it costs ``disconnect_cost`` when re-planning; official code ``deleted_node``). Paths are Dijkstra
shortest paths under ``d~``.
"""
from __future__ import annotations

import heapq

import numpy as np


class FailureAwareGraphPlanner:
    """Grid-graph planner whose edge costs grow with the observed low-level failures.

    Parameters: ``height``, ``width`` (the grid of goal-space nodes, node id ``r * width + c``),
    ``c_dist`` (failure weight; official code ``fail_weight``), ``fail_count`` (attempts without
    success before a node is disconnected), ``disconnect_cost`` (official code: 1000).
    """

    def __init__(self, height: int, width: int, c_dist: float = 10.0, fail_count: int = 3,
                 disconnect_cost: float = 1000.0):
        if height < 1 or width < 1:
            raise ValueError(f"height and width must be >= 1, got {height}x{width}")
        if not np.isfinite(c_dist) or c_dist < 0:
            raise ValueError(f"c_dist must be a finite number >= 0, got {c_dist}")
        if fail_count < 1:
            raise ValueError(f"fail_count must be >= 1, got {fail_count}")
        if not np.isfinite(disconnect_cost) or disconnect_cost <= 0:
            raise ValueError(f"disconnect_cost must be a finite number > 0, got {disconnect_cost}")
        self.height, self.width = int(height), int(width)
        self.n = self.height * self.width
        self.c_dist, self.fail_count, self.disconnect_cost = float(c_dist), int(fail_count), float(disconnect_cost)
        self.attempts = np.zeros(self.n, int)
        self.successes = np.zeros(self.n, int)

    def node(self, r: int, c: int) -> int:
        return int(r) * self.width + int(c)

    def cell(self, v: int) -> tuple[int, int]:
        return divmod(int(v), self.width)

    def neighbours(self, v: int) -> list[int]:
        r, c = self.cell(v)
        out = []
        for dr, dc in ((-1, 0), (1, 0), (0, -1), (0, 1)):
            rr, cc = r + dr, c + dc
            if 0 <= rr < self.height and 0 <= cc < self.width:
                out.append(self.node(rr, cc))
        return out

    def record(self, v: int, success: bool) -> None:
        """Count one attempt to reach node ``v`` as a waypoint, and its outcome."""
        self._check(node=v)
        self.attempts[v] += 1
        self.successes[v] += int(bool(success))

    def fail_ratio(self, v: int) -> float:
        a = self.attempts[v]
        return 0.0 if a == 0 else float(a - self.successes[v]) / float(a)

    def disconnected(self, v: int) -> bool:
        return bool(self.successes[v] == 0 and self.attempts[v] > self.fail_count)

    def edge_cost(self, u: int, v: int, deleted=()) -> float:
        """``d~(u -> v)`` for grid neighbours ``u``, ``v`` (base length 1); entering a node in
        ``deleted`` (waypoints that failed during the current high-level step) or a disconnected
        node costs ``disconnect_cost``."""
        if v in deleted or self.disconnected(v):
            return self.disconnect_cost
        return max(1.0, self.c_dist * self.fail_ratio(v))

    def _check(self, **nodes) -> None:
        for name, v in nodes.items():
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
                raise ValueError(f"{name} node must be an integer id, got {v!r}")
            if not 0 <= v < self.n:
                raise ValueError(f"{name} node {v} is outside the graph's {self.n} nodes")

    def distances(self, start: int) -> np.ndarray:
        """Refined path cost from ``start`` to every node (single-source Dijkstra under ``d~``)."""
        self._check(start=start)
        return self._dijkstra(start, -1)[0]

    def shortest_path(self, start: int, goal: int, deleted=()) -> list[int]:
        """Dijkstra under ``d~``: the node list from ``start`` to ``goal``, both included.
        ``deleted``: nodes whose entry costs ``disconnect_cost`` for this query (the official
        code's ``deleted_node``: waypoints that failed during the current high-level step)."""
        self._check(start=start, goal=goal)
        prev = self._dijkstra(start, goal, deleted)[1]
        path = [int(goal)]
        while path[-1] != start:
            path.append(int(prev[path[-1]]))
        return path[::-1]

    def _dijkstra(self, start: int, goal: int, deleted=()):
        dist = np.full(self.n, np.inf)
        prev = np.full(self.n, -1)
        dist[start] = 0.0
        heap = [(0.0, int(start))]
        while heap:
            d, u = heapq.heappop(heap)
            if u == goal:
                break
            if d > dist[u]:
                continue
            for v in self.neighbours(u):
                nd = d + self.edge_cost(u, v, deleted)
                if nd < dist[v]:
                    dist[v], prev[v] = nd, u
                    heapq.heappush(heap, (nd, v))
        return dist, prev

    def path_cost(self, path) -> float:
        return float(sum(self.edge_cost(u, v) for u, v in zip(path[:-1], path[1:])))
