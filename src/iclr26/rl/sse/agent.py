"""Strict Subgoal Execution (SSE) agent and the flat HER baseline, tabular, on grid mazes.

Hwang, Lee, Kim, Han, "Strict Subgoal Execution: Reliable Long-Horizon Planning in Hierarchical
Reinforcement Learning", ICLR 2026, arXiv:2506.21039; official code
https://github.com/Jaebak1996/SSE (PyTorch, MuJoCo Ant mazes).

:class:`SSEAgent` (Sec. 3):

* **strict execution**: the high-level policy ``pi_h`` picks a subgoal node ``g~``; the
  :class:`.FailureAwareGraphPlanner` plans a waypoint path to it; the low level chases the
  waypoints (re-planning when a waypoint is not reached within ``waypoint_steps``, the official
  code's ``waypoint_chase_step``) for a variable number of steps until it stands on ``g~``; if
  ``g~`` is not reached within ``subgoal_steps`` or the episode's horizon, the episode ends;
* **Frontier Experience Replay** (:class:`.FrontierReplayBuffer`) for ``pi_h``'s Q-learning
  (``mode="her"`` gives the paper's "FER -> HER" ablation);
* **decoupled exploration**: with probability ``eta`` a training decision comes from the
  exploration policy instead of the epsilon-greedy exploit policy; it picks, each with probability
  1/3, the final goal, the farthest node already reached (refined graph distance from the start), or a
  least-tried node (the nearest one to the agent);
* **path refinement**: waypoint outcomes update the planner's failure ratios; with
  ``delete_failed_waypoints=True`` a waypoint the low level fails to reach in training is also
  *deleted* for the rest of the high-level step (entering it costs ``disconnect_cost``, 1000, when
  re-planning), as the official code's ``deleted_node`` (off by default here: see the README).

The low level is a goal-conditioned tabular Q-learner with hindsight relabelling (HER, "future"
strategy, ``her_k`` relabels per transition; Andrychowicz et al. 2017), shared with the flat
baseline :class:`FlatHER`, which uses the same learner directly on the final goal.

All agents act in :class:`GridMaze` (gymnasium API, integer cell observations).
"""
from __future__ import annotations

import numpy as np

from .planner import FailureAwareGraphPlanner
from .replay import FrontierReplayBuffer

MOVES = ((-1, 0), (1, 0), (0, -1), (0, 1))      # up, down, left, right


class GridMaze:
    """A grid maze from a list of strings (``#`` wall, ``S`` start, ``G`` goal, ``.`` free).

    Observation: the agent's cell id ``r * width + c``; actions 0-3 move up/down/left/right (a
    move into a wall stays put); with probability ``slip`` the action is replaced by a uniform one.
    Reward 1 and termination on reaching ``G``; truncation after ``max_steps``.
    """

    def __init__(self, layout, slip: float = 0.1, max_steps: int = 200):
        rows = [str(r) for r in layout]
        if not rows or len({len(r) for r in rows}) != 1:
            raise ValueError("layout must be a non-empty list of equally long strings")
        if sum(r.count("S") for r in rows) != 1 or sum(r.count("G") for r in rows) != 1:
            raise ValueError("layout needs exactly one 'S' and one 'G'")
        if not 0.0 <= slip <= 1.0:
            raise ValueError(f"slip must lie in [0, 1], got {slip}")
        self.height, self.width = len(rows), len(rows[0])
        self.n = self.height * self.width
        self.walls = np.array([[ch == "#" for ch in r] for r in rows])
        flat = "".join(rows)
        self.start, self.goal = flat.index("S"), flat.index("G")
        self.slip, self.max_steps = float(slip), int(max_steps)
        self.n_actions = len(MOVES)
        self.rng = np.random.default_rng()
        self.pos = self.start
        self.t = 0

    def move(self, v: int, a: int) -> int:
        r, c = divmod(int(v), self.width)
        rr, cc = r + MOVES[a][0], c + MOVES[a][1]
        if 0 <= rr < self.height and 0 <= cc < self.width and not self.walls[rr, cc]:
            return rr * self.width + cc
        return int(v)

    def reset(self, seed: int | None = None, options=None):
        if seed is not None:
            self.rng = np.random.default_rng(seed)
        self.pos, self.t = self.start, 0
        return self.pos, {}

    def step(self, a: int):
        if not 0 <= int(a) < self.n_actions:
            raise ValueError(f"action must be in 0..{self.n_actions - 1}, got {a!r}")
        if self.rng.random() < self.slip:
            a = int(self.rng.integers(self.n_actions))
        self.pos = self.move(self.pos, int(a))
        self.t += 1
        term = self.pos == self.goal
        return self.pos, float(term), bool(term), bool(self.t >= self.max_steps and not term), {}


class GoalQ:
    """Tabular goal-conditioned Q-learning ``Q[s, g, a]`` with HER "future" relabelling.

    Reward 1 on arriving at ``g`` (terminal for that goal), 0 otherwise; ``update_episode`` takes
    the transitions of one trajectory ``[(s, a, s'), ...]`` with their commanded goals and adds
    ``her_k`` relabelled copies per transition with goals achieved later in the trajectory.
    ``q_init``: the initial value of every entry (0: pessimistic; 1, the largest return:
    optimistic, a standard tabular exploration device).
    """

    def __init__(self, n_states: int, n_actions: int, alpha: float = 0.5, gamma: float = 0.95, her_k: int = 4,
                 rng: np.random.Generator | None = None, q_init: float = 0.0):
        if not np.isfinite(q_init):
            raise ValueError(f"q_init must be finite, got {q_init!r}")
        self.q = np.full((n_states, n_states, n_actions), float(q_init))
        self.alpha, self.gamma, self.her_k = float(alpha), float(gamma), int(her_k)
        self.n_actions = n_actions
        self.rng = rng if rng is not None else np.random.default_rng()

    def act(self, s: int, g: int, eps: float) -> int:
        if self.rng.random() < eps:
            return int(self.rng.integers(self.n_actions))
        q = self.q[s, g]
        return int(self.rng.choice(np.flatnonzero(q == q.max())))

    def update(self, s: int, a: int, s2: int, g: int) -> None:
        target = 1.0 if s2 == g else self.gamma * self.q[s2, g].max()
        self.q[s, g, a] += self.alpha * (target - self.q[s, g, a])

    def update_episode(self, traj, goals) -> None:
        n = len(traj)
        for i, ((s, a, s2), g) in enumerate(zip(traj, goals)):
            self.update(s, a, s2, g)
            for j in self.rng.integers(i, n, self.her_k) if self.her_k > 0 else ():
                self.update(s, a, s2, traj[j][2])


class FlatHER:
    """Flat goal-conditioned agent: :class:`GoalQ` with HER on the maze's final goal, epsilon-greedy.

    ``q_init=0`` (the default) is the usual pessimistic start: tabular HER does not generalise
    across goals, so until the agent once stands on the final goal it walks at random.
    ``q_init=1`` starts optimistic, as SSE's high level does; with ``her_k=0`` the agent is plain
    flat tabular Q-learning on the final goal.
    """

    def __init__(self, env: GridMaze, eps: float = 0.2, alpha: float = 0.5, gamma: float = 0.95, her_k: int = 4,
                 seed: int = 0, q_init: float = 0.0):
        self.env, self.eps = env, float(eps)
        self.rng = np.random.default_rng(seed)
        self.low = GoalQ(env.n, env.n_actions, alpha, gamma, her_k, self.rng, q_init=q_init)
        self.seed = int(seed)
        self.episode_success: list = []

    def learn(self, total_timesteps: int):
        steps, ep = 0, 0
        while steps < total_timesteps:
            s, _ = self.env.reset(seed=self.seed * 100_003 + ep)
            traj, done = [], False
            while not done and steps < total_timesteps:
                a = self.low.act(s, self.env.goal, self.eps)
                s2, r, te, tr, _ = self.env.step(a)
                traj.append((s, a, s2))
                s, done, steps = s2, te or tr, steps + 1
            self.low.update_episode(traj, [self.env.goal] * len(traj))
            self.episode_success.append(float(s == self.env.goal))
            ep += 1
        return self

    def run_episode(self, seed: int) -> bool:
        s, _ = self.env.reset(seed=seed)
        done = False
        while not done:
            s, _, te, tr, _ = self.env.step(self.low.act(s, self.env.goal, 0.0))
            done = te or tr
        return s == self.env.goal


class SSEAgent:
    """Strict Subgoal Execution with FER, decoupled exploration and failure-aware path refinement.

    Parameters: ``mode`` (``"fer"`` or the ablation ``"her"``), ``radius`` (the exploit policy's
    subgoal candidates: nodes within this Manhattan distance), ``eta`` (share of exploration
    decisions), ``eps`` (epsilon of the exploit policy and the low level), ``q_init`` (optimistic
    initial high-level value), ``gamma_h`` (high-level discount per decision), ``c_dist``,
    ``fail_count`` (planner), ``waypoint_steps``, ``subgoal_steps`` (execution limits),
    ``batch``/``updates`` (high-level replay updates after each episode),
    ``delete_failed_waypoints`` (the official code's per-step deletion of a waypoint that timed out).
    """

    def __init__(self, env: GridMaze, mode: str = "fer", radius: int = 3, eta: float = 0.3, eps: float = 0.2,
                 q_init: float = 1.0, alpha_h: float = 0.2, gamma_h: float = 0.95, c_dist: float = 10.0,
                 fail_count: int = 3, waypoint_steps: int = 4, subgoal_steps: int = 50, batch: int = 32,
                 updates: int = 4, alpha: float = 0.5, gamma: float = 0.95, her_k: int = 4, seed: int = 0,
                 delete_failed_waypoints: bool = False):
        if not 0.0 <= eta <= 1.0:
            raise ValueError(f"eta must lie in [0, 1], got {eta}")
        if radius < 1:
            raise ValueError(f"radius must be >= 1, got {radius}")
        self.env, self.mode, self.eta, self.eps = env, mode, float(eta), float(eps)
        self.delete_failed_waypoints = bool(delete_failed_waypoints)
        self.seed = int(seed)
        self.rng = np.random.default_rng(seed)
        self.buffer = FrontierReplayBuffer(mode=mode, rng=self.rng)
        self.planner = FailureAwareGraphPlanner(env.height, env.width, c_dist=c_dist, fail_count=fail_count)
        self.low = GoalQ(env.n, env.n_actions, alpha, gamma, her_k, self.rng)
        self.qh = np.full((env.n, env.n), float(q_init))
        self.alpha_h, self.gamma_h = float(alpha_h), float(gamma_h)
        self.waypoint_steps, self.subgoal_steps = int(waypoint_steps), int(subgoal_steps)
        self.batch, self.updates = int(batch), int(updates)
        rc = np.array([divmod(v, env.width) for v in range(env.n)])
        manhattan = np.abs(rc[:, None, :] - rc[None, :, :]).sum(-1)
        self.candidates = (manhattan <= radius) & (manhattan > 0)
        self.tries = np.zeros(env.n, int)
        self.episode_success: list = []
        self.high_steps: list = []

    # -- high level
    def exploit(self, s: int, eps: float) -> int:
        cand = np.flatnonzero(self.candidates[s])
        if self.rng.random() < eps:
            return int(self.rng.choice(cand))
        q = self.qh[s, cand]
        return int(self.rng.choice(cand[q == q.max()]))

    def explore(self, s: int) -> int:
        """The decoupled exploration policy: final goal, farthest reached node, or a novel node."""
        k = int(self.rng.integers(3))
        if k == 0:
            return self.env.goal
        if k == 1:
            reached = np.flatnonzero(self.planner.successes > 0)
            reached = reached[reached != s]
            if reached.size:
                far = self.planner.distances(self.env.start)[reached]
                return int(reached[np.argmax(far)])
        least = np.flatnonzero(self.tries == self.tries.min())
        least = least[least != s] if least.size > 1 else least
        rc = np.array([divmod(v, self.env.width) for v in least])
        d = np.abs(rc - np.array(divmod(s, self.env.width))).sum(1)
        return int(least[np.argmin(d)])

    def choose(self, s: int, train: bool) -> int:
        if train and self.rng.random() < self.eta:
            return self.explore(s)
        return self.exploit(s, self.eps if train else 0.0)

    def update_high(self) -> None:
        if len(self.buffer) == 0:
            return
        for _ in range(self.updates):
            s, g, r, s2, d = self.buffer.sample(self.batch)
            nxt = np.where(self.candidates[s2], self.qh[s2], -np.inf).max(1)
            target = r + self.gamma_h * (1.0 - d) * nxt
            self.qh[s, g] += self.alpha_h * (target - self.qh[s, g])      # a repeated pair moves once

    # -- one strictly executed high-level step
    def execute(self, s: int, subgoal: int, t: int, train: bool, traj: list, goals: list):
        """Chase the planned waypoints to ``subgoal``; returns
        ``(reached, reward, end_state, t, env_done, last_waypoint, waypoint_reward, waypoint_state)``."""
        if subgoal == s:                      # nothing to execute: counts as a failed step
            return False, 0.0, s, t, False, None, 0.0, None
        path = self.planner.shortest_path(s, subgoal)[1:]
        deleted: set = set()                  # waypoints that timed out during this step (official: deleted_node)
        reward, steps, chase = 0.0, 0, 0
        last_wp, wp_reward, wp_state = None, 0.0, None
        while path:
            wp = path[0]
            a = self.low.act(s, wp, self.eps if train else 0.0)
            s2, r, te, tr, _ = self.env.step(a)
            traj.append((s, a, s2))
            goals.append(wp)
            reward, steps, chase, t, s = reward + r, steps + 1, chase + 1, t + 1, s2
            if s == wp:
                if train:
                    self.planner.record(wp, True)
                path, chase = path[1:], 0
                last_wp, wp_reward, wp_state = wp, reward, s
            elif chase >= self.waypoint_steps:
                if train:
                    self.planner.record(wp, False)
                    if self.delete_failed_waypoints:
                        deleted.add(wp)
                path, chase = self.planner.shortest_path(s, subgoal, deleted=deleted)[1:], 0
            if te or tr or steps >= self.subgoal_steps:
                break
        reached = s == subgoal
        return reached, reward, s, t, bool(te or tr), last_wp, wp_reward, wp_state

    def run_episode(self, seed: int, train: bool = True):
        """One strict-execution episode; returns ``(success, env_steps, high_level_steps)``."""
        s, _ = self.env.reset(seed=seed)
        t, n_high, traj, goals = 0, 0, [], []
        while True:
            subgoal = self.choose(s, train)
            if train:
                self.tries[subgoal] += 1
            s0 = s
            reached, R, s, t, env_done, wp, wp_r, wp_s = self.execute(s0, subgoal, t, train, traj, goals)
            n_high += 1
            if train:
                self.buffer.store_step(s0, subgoal, reached, R, s, episode_done=env_done, last_waypoint=wp,
                                       waypoint_reward=wp_r, waypoint_state=wp_s)
            if env_done or not reached:
                break
        if train:
            self.low.update_episode(traj, goals)
            self.update_high()
        return s == self.env.goal, t, n_high

    def learn(self, total_timesteps: int):
        steps, ep = 0, 0
        while steps < total_timesteps:
            ok, t, n_high = self.run_episode(self.seed * 100_003 + ep, train=True)
            steps += t
            ep += 1
            self.episode_success.append(float(ok))
            self.high_steps.append(n_high)
        return self

    def evaluate(self, n_episodes: int, seed: int = 10**6):
        """Greedy success rate and mean high-level steps over ``n_episodes`` (no learning)."""
        res = [self.run_episode(seed + e, train=False) for e in range(n_episodes)]
        return np.array([r[0] for r in res], float), np.array([r[2] for r in res], float)
