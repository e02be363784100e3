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


def _real(name: str, v, lo: float | None = None, hi: float | None = None, lo_open: bool = False) -> float:
    """``v`` as a finite float in ``[lo, hi]`` (``(lo, hi]`` with ``lo_open``), else a ValueError naming it."""
    if isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)) or not np.isfinite(v):
        raise ValueError(f"{name} must be a finite number, got {v!r}")
    v = float(v)
    if lo is not None and (v < lo or (lo_open and v == lo)):
        raise ValueError(f"{name} must be {'>' if lo_open else '>='} {lo:g}, got {v:g}")
    if hi is not None and v > hi:
        raise ValueError(f"{name} must be <= {hi:g}, got {v:g}")
    return v


def _int(name: str, v, lo: int) -> int:
    """``v`` as an integer >= ``lo``, else a ValueError naming it."""
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < lo:
        raise ValueError(f"{name} must be an integer >= {lo}, got {v!r}")
    return int(v)


def _budget(total_timesteps) -> int:
    if isinstance(total_timesteps, bool) or not isinstance(total_timesteps, (int, np.integer, float, np.floating)) \
            or not np.isfinite(total_timesteps) or total_timesteps < 0 or total_timesteps != int(total_timesteps):
        raise ValueError(f"total_timesteps must be a non-negative integer, got {total_timesteps!r}")
    return int(total_timesteps)


def _reachable(maze: "GridMaze") -> bool:
    seen, todo = {maze.start}, [maze.start]
    while todo:
        v = todo.pop()
        for a in range(maze.n_actions):
            w = maze.move(v, a)
            if w not in seen:
                seen.add(w)
                todo.append(w)
    return maze.goal in seen


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
        max_steps = _int("max_steps", max_steps, 1)
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
        if not _reachable(self):
            raise ValueError("layout has no path of free cells from 'S' to 'G'")

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
        if isinstance(a, bool) or not isinstance(a, (int, np.integer)) or not 0 <= a < self.n_actions:
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
        q_init = _real("q_init", q_init)
        self.q = np.full((n_states, n_states, n_actions), q_init)
        self.alpha = _real("alpha", alpha, 0.0, 1.0, lo_open=True)
        self.gamma = _real("gamma", gamma, 0.0, 1.0)
        self.her_k = _int("her_k", her_k, 0)
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
        if not np.isfinite(self.q[s, g, a]):
            raise FloatingPointError(f"non-finite low-level Q value at state {s}, goal {g}, action {a}")

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
        self.env, self.eps = env, _real("eps", eps, 0.0, 1.0)
        self.rng = np.random.default_rng(seed)
        self.low = GoalQ(env.n, env.n_actions, alpha, gamma, her_k, self.rng, q_init=q_init)
        self.seed = int(seed)
        self.episode_success: list = []

    def learn(self, total_timesteps: int):
        """Train for exactly ``total_timesteps`` environment steps (the last episode is cut there)."""
        total_timesteps = _budget(total_timesteps)
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
        eta = _real("eta", eta, 0.0, 1.0)
        radius = _int("radius", radius, 1)
        eps = _real("eps", eps, 0.0, 1.0)
        q_init = _real("q_init", q_init)
        alpha_h = _real("alpha_h", alpha_h, 0.0, 1.0, lo_open=True)
        gamma_h = _real("gamma_h", gamma_h, 0.0, 1.0)
        waypoint_steps, subgoal_steps = _int("waypoint_steps", waypoint_steps, 1), _int("subgoal_steps", subgoal_steps, 1)
        batch, updates = _int("batch", batch, 1), _int("updates", updates, 0)
        self.env, self.mode, self.eta, self.eps = env, mode, eta, eps
        self.delete_failed_waypoints = bool(delete_failed_waypoints)
        self.seed = int(seed)
        self.rng = np.random.default_rng(seed)
        self.buffer = FrontierReplayBuffer(mode=mode, rng=self.rng, n_nodes=env.n)
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
            if not np.all(np.isfinite(self.qh[s, g])):
                raise FloatingPointError("non-finite high-level Q value after an update")

    # -- one strictly executed high-level step
    def execute(self, s: int, subgoal: int, t: int, train: bool, traj: list, goals: list, t_max: int | None = None):
        """Chase the planned waypoints to ``subgoal``; returns
        ``(reached, reward, end_state, t, env_done, last_waypoint, waypoint_reward, waypoint_state)``.
        ``t_max``: the episode also ends (``env_done``, a truncation) once ``t`` reaches it (the
        training budget of :meth:`learn`)."""
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
            if t_max is not None and t >= t_max:
                tr = True
            if te or tr or steps >= self.subgoal_steps:
                break
        reached = s == subgoal
        return reached, reward, s, t, bool(te or tr), last_wp, wp_reward, wp_state

    def run_episode(self, seed: int, train: bool = True, t_max: int | None = None):
        """One strict-execution episode; returns ``(success, env_steps, high_level_steps)``.
        ``t_max``: cut the episode after that many environment steps (as a truncation)."""
        if t_max is not None:
            t_max = _int("t_max", t_max, 1)
        s, _ = self.env.reset(seed=seed)
        t, n_high, traj, goals = 0, 0, [], []
        while True:
            subgoal = self.choose(s, train)
            if train:
                self.tries[subgoal] += 1
            s0 = s
            reached, R, s, t, env_done, wp, wp_r, wp_s = self.execute(s0, subgoal, t, train, traj, goals, t_max)
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
        """Train for exactly ``total_timesteps`` environment steps (the last episode is cut there,
        as in :meth:`FlatHER.learn`)."""
        total_timesteps = _budget(total_timesteps)
        steps, ep = 0, 0
        while steps < total_timesteps:
            ok, t, n_high = self.run_episode(self.seed * 100_003 + ep, train=True, t_max=total_timesteps - steps)
            steps += t
            ep += 1
            self.episode_success.append(float(ok))
            self.high_steps.append(n_high)
        return self

    def evaluate(self, n_episodes: int, seed: int = 10**6):
        """Greedy success rate and mean high-level steps over ``n_episodes`` (no learning)."""
        n_episodes = _int("n_episodes", n_episodes, 1)
        res = [self.run_episode(seed + e, train=False) for e in range(n_episodes)]
        return np.array([r[0] for r in res], float), np.array([r[2] for r in res], float)
