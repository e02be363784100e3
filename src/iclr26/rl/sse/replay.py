"""Frontier Experience Replay (FER), the high-level replay of Strict Subgoal Execution.

Hwang, Lee, Kim, Han, "Strict Subgoal Execution: Reliable Long-Horizon Planning in Hierarchical
Reinforcement Learning", ICLR 2026, arXiv:2506.21039; official code
https://github.com/Jaebak1996/SSE (``SSE/rl/algo/sse.py``).

Under strict execution a high-level step either reaches its subgoal ``g~`` (within ``lambda``) or
ends the episode. FER stores, for a high-level step from state ``s`` with final goal ``g``
(Sec. 3, "Frontier Experience Replay"):

* **success**: ``(s, g, g~, sum r, s')``, bootstrapping from ``s'`` unless the episode ended there;
* **failure**: ``(s, g, g~, 0, s_T)`` marked *terminal*: the unreachable subgoal gets value 0,
  which is what draws the reachability frontier;
* **partial success**: when the low level reached some waypoints of the planned path before
  failing, also ``(s, g, wp_final, sum r up to t_wp, s_{t_wp})`` with ``wp_final`` the last
  waypoint really reached (a success for an admissible, nearer subgoal).

No hindsight relabelling happens at the high level. The ablation ``mode="her"`` replaces FER by
conventional hindsight relabelling: a failed step is stored as a success for the subgoal it
actually achieved, ``(s, g, phi(s_T), sum r, s_T)``, and the unreachable ``g~`` is never
penalised.
"""
from __future__ import annotations

import numpy as np

MODES = ("fer", "her")


class FrontierReplayBuffer:
    """High-level replay of ``(state, subgoal, reward, next_state, done)`` integer/float rows.

    ``store_step(...)`` turns one strictly executed high-level step into rows according to
    ``mode`` (``"fer"``: success / terminal failure / partial success; ``"her"``: hindsight
    relabelling of failures). States and subgoals are integer node ids (goal-space cells).
    """

    def __init__(self, capacity: int = 100_000, mode: str = "fer", rng: np.random.Generator | None = None,
                 n_nodes: int | None = None):
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
        if not isinstance(capacity, (int, np.integer)) or capacity < 1:
            raise ValueError(f"capacity must be a positive integer, got {capacity!r}")
        if n_nodes is not None and (not isinstance(n_nodes, (int, np.integer)) or n_nodes < 1):
            raise ValueError(f"n_nodes must be a positive integer or None, got {n_nodes!r}")
        self.mode = mode
        self.n_nodes = None if n_nodes is None else int(n_nodes)
        self.capacity = int(capacity)
        self.rows = np.zeros((self.capacity, 5))
        self.size = 0
        self.pos = 0
        self.rng = rng if rng is not None else np.random.default_rng()
        self.counts = {"success": 0, "failure": 0, "partial": 0, "relabelled": 0}

    def __len__(self) -> int:
        return self.size

    def _node(self, name: str, v) -> None:
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 0 \
                or (self.n_nodes is not None and v >= self.n_nodes):
            bound = "" if self.n_nodes is None else f" below {self.n_nodes}"
            raise ValueError(f"{name} must be a node id (an integer >= 0{bound}), got {v!r}")

    def add(self, state: int, subgoal: int, reward: float, next_state: int, done: bool) -> None:
        for name, v in (("state", state), ("subgoal", subgoal), ("next_state", next_state)):
            self._node(name, v)
        if not np.isfinite(reward):
            raise ValueError(f"reward must be finite, got {reward!r}")
        self.rows[self.pos] = (state, subgoal, reward, next_state, float(done))
        self.pos = (self.pos + 1) % self.capacity
        self.size = min(self.size + 1, self.capacity)

    def store_step(self, state: int, subgoal: int, reached: bool, reward: float, end_state: int,
                   episode_done: bool, last_waypoint: int | None = None, waypoint_reward: float = 0.0,
                   waypoint_state: int | None = None) -> None:
        """Store one high-level step.

        ``reached``: the subgoal was reached; ``reward``: the summed reward of the step;
        ``end_state``: where the step ended (the subgoal's cell on success, ``s_T`` on failure);
        ``episode_done``: the episode ended at ``end_state`` for a reason other than this step's
        failure (final goal reached or time out after a success). On failure, ``last_waypoint``
        (the last waypoint reached, if any, and not the start), ``waypoint_reward`` (reward up to
        it) and ``waypoint_state`` (the state there) give the partial-success row.
        """
        for name, v in (("state", state), ("subgoal", subgoal), ("end_state", end_state)):
            self._node(name, v)
        for name, v in (("reward", reward), ("waypoint_reward", waypoint_reward)):
            if isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)) or not np.isfinite(v):
                raise ValueError(f"{name} must be finite, got {v!r}")
        if reached:
            self.add(state, subgoal, reward, end_state, episode_done)
            self.counts["success"] += 1
            return
        if self.mode == "her":
            self.add(state, end_state, reward, end_state, episode_done)
            self.counts["relabelled"] += 1
            return
        self.add(state, subgoal, 0.0, end_state, True)
        self.counts["failure"] += 1
        if last_waypoint is not None and last_waypoint != state:
            if waypoint_state is None:
                raise ValueError("a partial success needs waypoint_state (the state at the last waypoint reached)")
            self.add(state, last_waypoint, waypoint_reward, waypoint_state, False)
            self.counts["partial"] += 1

    def sample(self, batch_size: int):
        """``(states, subgoals, rewards, next_states, dones)`` arrays of a uniform batch."""
        if isinstance(batch_size, bool) or not isinstance(batch_size, (int, np.integer)) or batch_size < 1:
            raise ValueError(f"batch_size must be a positive integer, got {batch_size!r}")
        if self.size == 0:
            raise ValueError("cannot sample from an empty FrontierReplayBuffer")
        r = self.rows[self.rng.integers(0, self.size, batch_size)]
        return r[:, 0].astype(int), r[:, 1].astype(int), r[:, 2], r[:, 3].astype(int), r[:, 4]
