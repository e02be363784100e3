"""Tests for iclr26.rl.sse (arXiv:2506.21039)."""
import heapq
import itertools

import numpy as np
import pytest

from iclr26.rl.sse import FailureAwareGraphPlanner, FlatHER, FrontierReplayBuffer, GoalQ, GridMaze, SSEAgent
from iclr26.rl.sse.experiment import (ARMS, EPS_GRID, EVAL_SEED, KINDS, MAZE, Q_GRID, SEEDS, TUNED, VALIDATION_EVAL_SEED,
                                      VALIDATION_SEEDS, build, evaluate, make_agent, random_success, run, tune)

SMALL = ["#######",
         "#S..#.#",
         "###.#.#",
         "#G....#",
         "#######"]


def reference_dijkstra(costs, start, goal):
    """Shortest path cost on a dict-of-dicts graph (textbook Dijkstra)."""
    dist = {start: 0.0}
    heap = [(0.0, start)]
    while heap:
        d, u = heapq.heappop(heap)
        if d > dist.get(u, np.inf):
            continue
        for v, w in costs[u].items():
            if d + w < dist.get(v, np.inf):
                dist[v] = d + w
                heapq.heappush(heap, (d + w, v))
    return dist.get(goal, np.inf)


# ----------------------------------------------------------------------------- FER buffer
def test_fer_success_failure_partial_rows():
    buf = FrontierReplayBuffer(capacity=10, mode="fer", rng=np.random.default_rng(0))
    buf.store_step(3, 7, True, 0.0, 7, episode_done=False)
    np.testing.assert_array_equal(buf.rows[0], [3, 7, 0.0, 7, 0.0])
    buf.store_step(7, 9, True, 1.0, 9, episode_done=True)
    np.testing.assert_array_equal(buf.rows[1], [7, 9, 1.0, 9, 1.0])
    # a failure after reaching waypoint 8: terminal zero row for the subgoal + partial success row
    buf.store_step(9, 20, False, 0.5, 11, episode_done=False, last_waypoint=8, waypoint_reward=0.25,
                   waypoint_state=8)
    np.testing.assert_array_equal(buf.rows[2], [9, 20, 0.0, 11, 1.0])
    np.testing.assert_array_equal(buf.rows[3], [9, 8, 0.25, 8, 0.0])
    # a failure without progress: no partial row; a "waypoint" equal to the start is no progress
    buf.store_step(4, 5, False, 0.0, 4, episode_done=False)
    buf.store_step(4, 6, False, 0.0, 4, episode_done=False, last_waypoint=4, waypoint_state=4)
    assert len(buf) == 6
    assert buf.counts == {"success": 2, "failure": 3, "partial": 1, "relabelled": 0}
    with pytest.raises(ValueError, match="waypoint_state"):
        buf.store_step(1, 2, False, 0.0, 1, episode_done=False, last_waypoint=3)


def test_her_mode_relabels_failures_as_successes():
    buf = FrontierReplayBuffer(mode="her")
    buf.store_step(9, 20, False, 0.5, 11, episode_done=False, last_waypoint=8, waypoint_reward=0.25,
                   waypoint_state=8)
    buf.store_step(11, 30, False, 0.0, 12, episode_done=True)
    assert len(buf) == 2
    np.testing.assert_array_equal(buf.rows[0], [9, 11, 0.5, 11, 0.0])
    np.testing.assert_array_equal(buf.rows[1], [11, 12, 0.0, 12, 1.0])
    assert buf.counts == {"success": 0, "failure": 0, "partial": 0, "relabelled": 2}
    buf.store_step(1, 2, True, 0.0, 2, episode_done=False)
    np.testing.assert_array_equal(buf.rows[2], [1, 2, 0.0, 2, 0.0])


def test_fer_buffer_wraps_samples_and_rejects():
    buf = FrontierReplayBuffer(capacity=3, rng=np.random.default_rng(1))
    for k in range(5):
        buf.add(k, k + 10, float(k), k + 1, k % 2 == 0)
    assert len(buf) == 3 and buf.pos == 2
    np.testing.assert_array_equal(buf.rows[:, 0], [3, 4, 2])
    s, g, r, s2, d = buf.sample(50)
    assert s.dtype.kind == "i" and g.dtype.kind == "i" and s2.dtype.kind == "i"
    assert set(s.tolist()) == {2, 3, 4}
    np.testing.assert_array_equal(g, s + 10)
    np.testing.assert_array_equal(r, s.astype(float))
    np.testing.assert_array_equal(s2, s + 1)
    np.testing.assert_array_equal(d, (s % 2 == 0).astype(float))
    with pytest.raises(ValueError, match="mode must be one of .*fer.*her"):
        FrontierReplayBuffer(mode="per")
    with pytest.raises(ValueError, match="capacity"):
        FrontierReplayBuffer(capacity=0)
    with pytest.raises(ValueError, match="empty"):
        FrontierReplayBuffer().sample(1)


# ----------------------------------------------------------------------------- planner
def test_planner_costs_follow_the_refinement_formula():
    p = FailureAwareGraphPlanner(3, 4, c_dist=10.0, fail_count=3)
    assert p.node(1, 2) == 6 and p.cell(6) == (1, 2) and p.n == 12
    assert sorted(p.neighbours(0)) == [1, 4] and sorted(p.neighbours(5)) == [1, 4, 6, 9]
    assert sorted(p.neighbours(11)) == [7, 10]
    assert p.fail_ratio(5) == 0.0 and p.edge_cost(4, 5) == 1.0
    p.record(5, True)
    p.record(5, False)                                # 1 of 2 failed
    assert p.fail_ratio(5) == 0.5 and p.edge_cost(4, 5) == pytest.approx(5.0)
    p.record(6, True)
    for _ in range(9):
        p.record(6, True)
    p.record(6, False)                                # 1 of 11: 10/11 < 1 -> cost floor 1
    assert p.edge_cost(5, 6) == 1.0
    for _ in range(3):
        p.record(7, False)
    assert not p.disconnected(7) and p.edge_cost(6, 7) == 10.0
    p.record(7, False)                                # 4 > fail_count attempts, no success
    assert p.disconnected(7) and p.edge_cost(6, 7) == 1000.0
    assert p.attempts[7] == 4 and p.successes[7] == 0 and p.successes[6] == 10


def test_planner_paths_match_reference_dijkstra():
    rng = np.random.default_rng(0)
    p = FailureAwareGraphPlanner(5, 6, c_dist=4.0, fail_count=2)
    for v in rng.integers(0, p.n, 60):
        p.record(int(v), bool(rng.random() < 0.4))
    costs = {u: {v: p.edge_cost(u, v) for v in p.neighbours(u)} for u in range(p.n)}
    d_all = p.distances(0)
    for s, g in itertools.product([0, 7, 29], [5, 12, 24, 29]):
        path = p.shortest_path(s, g)
        assert path[0] == s and path[-1] == g
        assert all(b in p.neighbours(a) for a, b in zip(path[:-1], path[1:]))
        assert p.path_cost(path) == pytest.approx(reference_dijkstra(costs, s, g))
        if s == 0:
            assert d_all[g] == pytest.approx(reference_dijkstra(costs, 0, g))
    assert p.shortest_path(3, 3) == [3]
    assert p.distances(0)[0] == 0.0


def test_planner_routes_around_failures_and_rejects():
    p = FailureAwareGraphPlanner(3, 3, c_dist=10.0)
    assert p.shortest_path(0, 2) == [0, 1, 2]
    p.record(1, False)
    assert p.shortest_path(0, 2) == [0, 3, 4, 5, 2]
    with pytest.raises(ValueError, match="goal node 9 is outside"):
        p.shortest_path(0, 9)
    with pytest.raises(ValueError, match="start node -1 is outside"):
        p.distances(-1)
    with pytest.raises(ValueError, match="height and width"):
        FailureAwareGraphPlanner(0, 3)
    with pytest.raises(ValueError, match="c_dist"):
        FailureAwareGraphPlanner(2, 2, c_dist=-1.0)
    with pytest.raises(ValueError, match="fail_count"):
        FailureAwareGraphPlanner(2, 2, fail_count=0)


# ----------------------------------------------------------------------------- maze and learners
def test_grid_maze_rules():
    env = GridMaze(SMALL, slip=0.0, max_steps=5)
    assert (env.height, env.width, env.n) == (5, 7, 35)
    assert env.start == 8 and env.goal == 22
    s, info = env.reset(seed=0)
    assert s == 8 and info == {}
    assert env.step(0)[0] == 8                         # wall above: stays
    s, r, te, tr, _ = env.step(3)
    assert (s, r, te, tr) == (9, 0.0, False, False)
    env.step(3)
    env.step(1)                                        # (2, 3)
    s, r, te, tr, _ = env.step(1)                      # (3, 3), step 5 = max_steps
    assert s == 24 and tr is True and te is False
    env.reset()
    env.pos = 23
    s, r, te, tr, _ = env.step(2)
    assert (s, r, te, tr) == (22, 1.0, True, False)
    with pytest.raises(ValueError, match="action must be in 0..3"):
        env.step(4)
    with pytest.raises(ValueError, match="exactly one 'S' and one 'G'"):
        GridMaze(["#S.#", "#..#"])
    with pytest.raises(ValueError, match="equally long"):
        GridMaze(["#S", "#G#"])
    with pytest.raises(ValueError, match="slip"):
        GridMaze(SMALL, slip=1.5)


def test_grid_maze_slip_is_seeded():
    a, b = GridMaze(SMALL, slip=1.0), GridMaze(SMALL, slip=1.0)
    a.reset(seed=3)
    b.reset(seed=3)
    assert [a.step(3)[0] for _ in range(10)] == [b.step(3)[0] for _ in range(10)]
    c = GridMaze(SMALL, slip=1.0)
    c.reset(seed=3)
    moves = {c.step(0)[0] for _ in range(30)}
    assert len(moves) > 1                              # "up" is a wall: only slips move the agent


def test_goalq_update_and_her():
    q = GoalQ(4, 2, alpha=0.5, gamma=0.9, her_k=0, rng=np.random.default_rng(0))
    q.update(0, 1, 1, 1)                               # reaching the goal: target 1
    assert q.q[0, 1, 1] == 0.5
    q.q[2, 3] = [0.2, 0.4]
    q.update(1, 0, 2, 3)                               # bootstrap: 0.9 * max Q[2, 3]
    assert q.q[1, 3, 0] == pytest.approx(0.5 * 0.9 * 0.4)
    q2 = GoalQ(5, 2, alpha=1.0, gamma=0.9, her_k=3, rng=np.random.default_rng(0))
    q2.update_episode([(0, 1, 1), (1, 1, 2), (2, 1, 3)], [4, 4, 4])
    # relabelled goals are achieved later: the last transition is relabelled with goal 3 only
    assert q2.q[2, 3, 1] == 1.0
    assert q2.q[1, 2, 1] == 1.0 or q2.q[1, 3, 1] > 0
    assert np.all(q2.q[:, 4] == 0)                     # the commanded goal was never reached
    assert np.all(q2.q[:, 0] == 0)                     # never achieved: never relabelled with it
    q3 = GoalQ(3, 3, rng=np.random.default_rng(0))
    q3.q[0, 1] = [0.1, 0.7, 0.7]
    assert {q3.act(0, 1, 0.0) for _ in range(40)} == {1, 2}
    assert len({q3.act(0, 1, 1.0) for _ in range(60)}) == 3


def test_flat_her_learns_a_short_corridor():
    env = GridMaze(["#####", "#S.G#", "#####"], slip=0.0, max_steps=20)
    agent = FlatHER(env, eps=0.2, seed=0).learn(400)
    assert agent.run_episode(seed=1)
    assert agent.low.q[6, 8].max() > agent.low.q[6, 8].min()
    assert len(agent.episode_success) > 5 and agent.episode_success[-1] == 1.0


def test_sse_components_interact_on_a_small_maze():
    env = GridMaze(SMALL, slip=0.0, max_steps=60)
    agent = SSEAgent(env, seed=0).learn(3000)
    succ, high = agent.evaluate(5)
    assert succ.mean() == 1.0 and high.mean() <= 3
    assert agent.buffer.counts["failure"] > 0 and agent.buffer.counts["success"] > 0
    walls = np.flatnonzero(env.walls.ravel())
    tried_walls = walls[agent.planner.attempts[walls] > 0]
    assert tried_walls.size > 0 and np.all(agent.planner.successes[walls] == 0)
    # unreachable subgoals were pushed to 0 by FER's terminal failures
    s0 = env.start
    cand = np.flatnonzero(agent.candidates[s0])
    wall_cand = [g for g in cand if env.walls.ravel()[g] and agent.tries[g] > 0]
    assert wall_cand and max(agent.qh[s0, g] for g in wall_cand) < 0.5


def test_her_ablation_keeps_unreachable_subgoals_optimistic():
    env = GridMaze(SMALL, slip=0.0, max_steps=60)
    agent = SSEAgent(env, mode="her", seed=0).learn(3000)
    assert agent.buffer.counts["failure"] == 0 and agent.buffer.counts["relabelled"] > 0
    walls = env.walls.ravel()
    tried = [g for g in np.flatnonzero(agent.candidates[env.start]) if walls[g] and agent.tries[g] > 0]
    assert tried and all(agent.qh[env.start, g] == 1.0 for g in tried)


def test_candidates_explore_and_choose():
    env = GridMaze(MAZE, slip=0.0)
    agent = SSEAgent(env, radius=2, eta=1.0, seed=0)
    s = env.start
    cand = set(np.flatnonzero(agent.candidates[s]).tolist())
    r0, c0 = divmod(s, env.width)
    assert cand == {v for v in range(env.n)
                    if 0 < abs(divmod(v, env.width)[0] - r0) + abs(divmod(v, env.width)[1] - c0) <= 2}
    picks = [agent.explore(s) for _ in range(60)]
    assert env.goal in picks                           # one option is the final goal
    assert all(p != s for p in picks)
    agent.planner.record(env.start + 3, True)          # the only reached node
    agent.planner.record(env.start + 1, True)
    assert max(picks := [agent.explore(s) for _ in range(60)]) >= 0 and env.start + 3 in picks
    agent.tries[:] = 5
    agent.tries[env.start + 2] = 0
    assert env.start + 2 in [agent.explore(s) for _ in range(60)]
    agent.eta = 0.0
    agent.qh[s, :] = 0.0
    agent.qh[s, env.start + 1] = 2.0
    assert {agent.choose(s, train=False) for _ in range(20)} == {env.start + 1}
    assert agent.choose(s, train=True) in cand
    with pytest.raises(ValueError, match="eta"):
        SSEAgent(env, eta=1.5)
    with pytest.raises(ValueError, match="radius"):
        SSEAgent(env, radius=0)


def test_update_high_matches_q_learning_target():
    env = GridMaze(SMALL, slip=0.0)
    agent = SSEAgent(env, q_init=0.0, alpha_h=0.5, gamma_h=0.9, batch=1, updates=1, seed=0)
    agent.qh[10, :] = 0.0
    agent.qh[10, 9] = 0.8
    agent.buffer.add(8, 10, 0.0, 10, False)
    agent.update_high()
    assert agent.qh[8, 10] == pytest.approx(0.5 * 0.9 * 0.8)
    agent.buffer = FrontierReplayBuffer(rng=agent.rng)
    agent.buffer.add(9, 22, 1.0, 22, True)
    agent.update_high()
    assert agent.qh[9, 22] == pytest.approx(0.5)
    empty = SSEAgent(env, seed=0)
    before = empty.qh.copy()
    empty.update_high()
    np.testing.assert_array_equal(empty.qh, before)


def test_execute_records_waypoints_and_strictness():
    env = GridMaze(SMALL, slip=0.0, max_steps=60)
    agent = SSEAgent(env, waypoint_steps=3, subgoal_steps=50, seed=0)
    env.reset(seed=0)
    traj, goals = [], []
    # subgoal inside a wall: never reached, waypoint failures recorded, strict failure
    wall = 1                                           # cell (0, 1)
    reached, R, end, t, done, wp, wp_r, wp_s = agent.execute(env.start, wall, 0, True, traj, goals)
    assert reached is False and agent.planner.attempts[wall] > 0 and agent.planner.successes[wall] == 0
    assert t == len(traj) == len(goals) and t <= 50
    assert agent.execute(env.start, env.start, 0, True, [], []) == (False, 0.0, env.start, 0, False, None, 0.0, None)


def test_make_agent_and_random_floor():
    env = GridMaze(MAZE)
    assert make_agent("sse", env, 0).mode == "fer" and make_agent("sse_no_fer", env, 0).mode == "her"
    assert isinstance(make_agent("flat_her", env, 0), FlatHER)
    assert ARMS == ("sse", "sse_no_fer", "sse_q0", "sse_no_fer_q0", "flat_her", "flat_q", "flat_q_opt")
    q_sse = TUNED["sse"]["q_init"]
    assert make_agent("sse", env, 0).qh.min() == q_sse and make_agent("sse_no_fer", env, 0).qh.max() == q_sse
    q0, h0 = make_agent("sse_q0", env, 0), make_agent("sse_no_fer_q0", env, 0)
    assert (q0.mode, h0.mode) == ("fer", "her") and q0.qh.max() == 0.0 and h0.qh.max() == 0.0
    flat = make_agent("flat_her", env, 0)
    assert flat.low.q.max() == TUNED["flat_her"]["q_init"] and flat.low.her_k == 4 and flat.eps == TUNED["flat_her"]["eps"]
    fq = make_agent("flat_q", env, 0)
    assert fq.low.q.min() == TUNED["flat_q"]["q_init"] and fq.low.her_k == 0 and fq.eps == TUNED["flat_q"]["eps"]
    opt = make_agent("flat_q_opt", env, 0)
    assert isinstance(opt, FlatHER) and opt.low.q.min() == 1.0 and opt.low.her_k == 0 and opt.eps == 0.2
    with pytest.raises(ValueError, match="unknown arm"):
        make_agent("hiro", env, 0)
    assert random_success(GridMaze(MAZE, slip=0.1, max_steps=200), 20, 0).mean() == 0.0
    easy = GridMaze(["####", "#SG#", "####"], slip=0.0, max_steps=50)
    assert random_success(easy, 10, 0).mean() == 1.0


def test_learning_is_deterministic_given_the_seed():
    def once():
        agent = SSEAgent(GridMaze(SMALL, slip=0.1, max_steps=60), seed=4).learn(600)
        return agent.episode_success, agent.qh.copy(), agent.planner.attempts.copy()

    (a1, q1, n1), (a2, q2, n2) = once(), once()
    assert a1 == a2
    np.testing.assert_array_equal(q1, q2)
    np.testing.assert_array_equal(n1, n2)


@pytest.mark.slow
def test_smoke_run_is_deterministic():
    a, b = run("smoke", 0), run("smoke", 0)
    assert a["metrics"] == b["metrics"]
    assert set(a["metrics"]["success_rate"]) == set(ARMS) | {"random"}


class SpyMaze(GridMaze):
    """GridMaze that records the seeds it is reset with and counts its steps."""

    def __init__(self, *a, **k):
        super().__init__(*a, **k)
        self.seeds, self.n_steps = [], 0

    def reset(self, seed=None, options=None):
        self.seeds.append(seed)
        return super().reset(seed=seed)

    def step(self, a):
        self.n_steps += 1
        return super().step(a)


def test_flat_her_budget_seeds_and_greedy_rollout():
    env = SpyMaze(["######", "#S..G#", "######"], slip=0.0, max_steps=30)
    agent = FlatHER(env, eps=0.3, seed=7).learn(500)
    assert env.n_steps == 500                                   # exactly the budget
    assert env.seeds == [7 * 100_003 + e for e in range(len(env.seeds))] and len(env.seeds) == len(agent.episode_success)
    again = FlatHER(SpyMaze(["######", "#S..G#", "######"], slip=0.0, max_steps=30), eps=0.3, seed=7).learn(500)
    np.testing.assert_array_equal(agent.low.q, again.low.q)    # the agent's own generator is seeded
    assert agent.episode_success == again.episode_success
    clean = SpyMaze(["######", "#S..G#", "######"], slip=0.0, max_steps=30)
    agent.env = clean
    for k in range(5):
        assert agent.run_episode(seed=40 + k) and clean.t == 3   # greedy: straight to the goal
    assert clean.seeds == [40, 41, 42, 43, 44]


def test_sse_episode_bookkeeping():
    env = SpyMaze(SMALL, slip=0.0, max_steps=60)
    agent = SSEAgent(env, seed=2)
    decisions = []
    real_choose = agent.choose
    agent.choose = lambda s, train: decisions.append(s) or real_choose(s, train)
    ok, t, n_high = agent.run_episode(seed=11, train=True)
    assert env.seeds == [11] and t == env.n_steps == env.t and n_high == len(decisions)
    assert agent.tries.sum() == n_high
    agent.learn(1500)
    assert agent.tries.sum() == len(decisions)
    assert sum(agent.high_steps) == len(decisions) - n_high
    assert agent.buffer.counts["partial"] > 0                  # failures after some progress were kept
    calls = []
    real = agent.run_episode
    agent.run_episode = lambda seed, train=True: calls.append((seed, train)) or real(seed, train)
    succ, high = agent.evaluate(3, seed=500)
    assert calls == [(500, False), (501, False), (502, False)]
    assert succ.dtype == np.float64 and high.dtype == np.float64 and np.all(high >= 1)


def test_boundary_settings_are_accepted_and_messages_exact():
    p = FailureAwareGraphPlanner(1, 1, c_dist=0.0, fail_count=1)
    assert p.n == 1 and p.shortest_path(0, 0) == [0] and p.neighbours(0) == []
    assert FailureAwareGraphPlanner(1, 3).shortest_path(0, 2) == [0, 1, 2]
    assert FailureAwareGraphPlanner(3, 1).shortest_path(2, 0) == [2, 1, 0]
    flat = FailureAwareGraphPlanner(2, 2, c_dist=0.0)
    flat.record(1, False)
    assert flat.edge_cost(0, 1) == 1.0                 # c_dist = 0 switches refinement off
    two = FailureAwareGraphPlanner(2, 2, fail_count=1)
    two.record(1, False)
    assert not two.disconnected(1)
    two.record(1, False)
    assert two.disconnected(1)
    with pytest.raises(ValueError, match="start node 7 is outside"):
        FailureAwareGraphPlanner(2, 2).shortest_path(7, 0)
    one = FrontierReplayBuffer(capacity=1)
    one.add(1, 2, 0.5, 3, False)
    one.add(4, 5, 0.5, 6, True)
    assert len(one) == 1 and one.sample(3)[0].tolist() == [4, 4, 4]  # default generator works
    with pytest.raises(ValueError, match="^cannot sample from an empty FrontierReplayBuffer$"):
        FrontierReplayBuffer().sample(1)
    buf = FrontierReplayBuffer()
    with pytest.raises(ValueError, match=r"^a partial success needs waypoint_state \(the state at the last"):
        buf.store_step(1, 2, False, 0.0, 1, episode_done=False, last_waypoint=3)
    buf = FrontierReplayBuffer()
    buf.store_step(1, 9, False, 0.0, 4, episode_done=False, last_waypoint=3, waypoint_state=3)
    buf.store_step(4, 9, False, 0.0, 6, episode_done=False, last_waypoint=5, waypoint_state=5)
    assert buf.counts["partial"] == 2 and buf.rows[1, 2] == 0.0   # default waypoint reward 0


CORRIDOR = ["########",
            "#S..G..#",
            "########"]                                # start 9, goal 12


def test_defaults_follow_the_documented_settings():
    env = GridMaze(SMALL)
    assert (env.slip, env.max_steps) == (0.1, 200)
    q = GoalQ(4, 2)
    assert (q.alpha, q.gamma, q.her_k) == (0.5, 0.95, 4)
    flat = FlatHER(env)
    assert (flat.eps, flat.seed, flat.low.her_k) == (0.2, 0, 4)
    agent = SSEAgent(env)
    assert (agent.eps, agent.alpha_h, agent.seed, agent.low.her_k) == (0.2, 0.2, 0, 4)
    assert (agent.waypoint_steps, agent.subgoal_steps) == (4, 50)
    assert (agent.planner.c_dist, agent.planner.fail_count) == (10.0, 3)
    plain = FailureAwareGraphPlanner(2, 2)
    assert (plain.c_dist, plain.fail_count) == (10.0, 3)
    assert plain.attempts.dtype.kind == "i" and plain.successes.dtype.kind == "i"
    assert len(FrontierReplayBuffer().rows) == 100_000
    custom = SSEAgent(env, c_dist=4.0, fail_count=2)
    assert (custom.planner.c_dist, custom.planner.fail_count) == (4.0, 2)
    assert agent.tries.dtype.kind == "i"
    agent.run_episode(seed=1)                          # train is the default: decisions are counted
    assert agent.tries.sum() > 0
    # boundary settings are accepted
    assert SSEAgent(env, eta=0.0, radius=1).candidates[env.start].sum() == 4
    with pytest.raises(ValueError, match="^layout must be a non-empty list of equally long strings$"):
        GridMaze(["#S", "#G#"])
    with pytest.raises(ValueError, match="^layout needs exactly one 'S' and one 'G'$"):
        GridMaze(["#S.#", "#..#"])


def test_grid_maze_edges_and_first_step_without_reset():
    env = GridMaze(["S..", "...", "..G"], slip=0.0, max_steps=2)
    assert [env.move(0, 0), env.move(0, 2), env.move(8, 1), env.move(8, 3)] == [0, 0, 8, 8]   # off the grid
    assert [env.move(3, 0), env.move(1, 2), env.move(5, 1), env.move(7, 3)] == [0, 0, 8, 8]   # onto the border
    assert env.pos == env.start and env.t == 0
    s, r, te, tr, _ = env.step(3)                      # the default generator works before any reset
    assert (s, r, te, tr, env.t) == (1, 0.0, False, False, 1)


def test_goalq_increments_default_generator_and_single_relabel():
    q = GoalQ(3, 2, alpha=0.5, gamma=0.9, her_k=0)
    assert q.act(0, 1, 0.0) in (0, 1)                  # the default generator works
    q.q[0, 1, 1] = 0.2
    q.update(0, 1, 1, 1)
    assert q.q[0, 1, 1] == pytest.approx(0.2 + 0.5 * (1.0 - 0.2))
    fresh = GoalQ(3, 2, alpha=0.5, her_k=0, rng=np.random.default_rng(0))
    fresh.update_episode([(0, 1, 1)], [1])
    expected = np.zeros_like(fresh.q)
    expected[0, 1, 1] = 0.5
    np.testing.assert_array_equal(fresh.q, expected)
    one = GoalQ(3, 2, alpha=1.0, her_k=1, rng=np.random.default_rng(0))
    one.update_episode([(0, 1, 1), (1, 1, 2)], [0, 0])
    assert one.q[1, 2, 1] == 1.0                       # her_k = 1: the last step relabelled with its own outcome


def test_explore_least_tried_branch_and_option_shares():
    env = GridMaze(MAZE, slip=0.0)
    agent = SSEAgent(env, seed=0)
    s = env.start
    r0, c0 = divmod(s, env.width)
    near, far = s + 1, 0                              # (r0, c0 + 1) and the top-left corner
    agent.tries[:] = 5
    agent.tries[[near, far]] = 0
    picks = [agent.explore(s) for _ in range(60)]
    assert set(picks) == {env.goal, near}             # nearest least-tried node (no node reached yet)
    agent.tries[:] = 5
    agent.tries[[s, near]] = 0
    assert set(agent.explore(s) for _ in range(60)) == {env.goal, near}   # the agent's own cell is skipped
    agent.tries[:] = 5
    agent.tries[s] = 0
    assert set(agent.explore(s) for _ in range(60)) == {env.goal, s}      # ... unless it is the only one
    agent.tries[:] = 0
    share = np.mean([agent.explore(s) == env.goal for _ in range(1500)])
    assert abs(share - 1 / 3) < 0.05                  # three options, equally likely


def test_choose_uses_eps_only_in_training_and_update_high_increments():
    env = GridMaze(SMALL, slip=0.0)
    agent = SSEAgent(env, eta=0.0, eps=1.0, seed=0)
    s = env.start
    agent.qh[s, :] = 0.0
    agent.qh[s, s + 1] = 2.0
    assert {agent.choose(s, train=False) for _ in range(20)} == {s + 1}
    assert len({agent.choose(s, train=True) for _ in range(40)}) > 1
    hi = SSEAgent(env, q_init=1.0, alpha_h=0.5, gamma_h=0.9, batch=1, updates=1, seed=0)
    hi.qh[10, :] = 0.0
    hi.qh[10, 9] = 0.8
    hi.buffer.add(8, 10, 0.0, 10, False)
    hi.update_high()
    assert hi.qh[8, 10] == pytest.approx(1.0 + 0.5 * (0.9 * 0.8 - 1.0))


def greedy_right(agent):
    agent.low.q[:] = 0.0
    agent.low.q[:, :, 3] = 1.0                         # the low level always moves right


def test_execute_greedy_waypoints_eps_and_step_limit():
    env = GridMaze(CORRIDOR, slip=0.0, max_steps=60)
    agent = SSEAgent(env, eps=1.0, seed=0)
    greedy_right(agent)
    env.reset(seed=0)
    traj, goals = [], []
    out = agent.execute(9, 11, 0, False, traj, goals)  # evaluation: greedy, eps unused
    assert out == (True, 0.0, 11, 2, False, 11, 0.0, 11)
    assert goals == [10, 11] and [a for _, a, _ in traj] == [3, 3]
    env.reset(seed=0)
    traj = []
    agent.execute(9, 11, 0, True, traj, [])            # training: eps = 1 gives random actions
    assert {a for _, a, _ in traj} != {3}
    # strict step limit: subgoal 3 cells away, 2 steps allowed
    lim = SSEAgent(env, eps=0.0, subgoal_steps=2, waypoint_steps=10, seed=0)
    greedy_right(lim)
    lim.low.q[10, :, :] = 0.0
    lim.low.q[10, :, 0] = 1.0                         # at cell 10 it bumps into the wall above
    env.reset(seed=0)
    traj = []
    reached, R, end, t, done, wp, wp_r, wp_s = lim.execute(9, 12, 0, True, traj, [])
    assert (reached, end, t, len(traj), wp, wp_s) == (False, 10, 2, 2, 10, 10)


def test_execute_waypoint_timeouts_are_counted():
    def failures(waypoint_steps, subgoal_steps):
        env = GridMaze(SMALL, slip=0.0, max_steps=100)
        agent = SSEAgent(env, eps=0.0, waypoint_steps=waypoint_steps, subgoal_steps=subgoal_steps, seed=0)
        agent.low.q[:] = 0.0
        agent.low.q[:, :, 0] = 1.0                     # always "up": at the start that is a wall
        env.reset(seed=0)
        traj = []
        out = agent.execute(env.start, 1, 0, True, traj, [])    # cell 1: the wall above the start
        assert out == (False, 0.0, env.start, subgoal_steps, False, None, 0.0, None)
        return int(agent.planner.attempts[1])

    assert failures(3, 7) == 2                         # time-outs after 3 and 6 steps
    assert failures(4, 8) == 2


def test_run_episode_continues_after_reached_subgoals_and_keeps_waypoint_reward():
    env = GridMaze(CORRIDOR, slip=0.0, max_steps=60)
    agent = SSEAgent(env, eps=0.0, updates=0, seed=0)
    greedy_right(agent)
    agent.choose = lambda s, train: s + 2
    ok, t, n_high = agent.run_episode(seed=0, train=True)
    assert (ok, t, n_high) == (True, 3, 2)             # 9 -> 11 reached, 11 -> 13 stopped at the goal 12
    np.testing.assert_array_equal(agent.buffer.rows[:3], [[9, 11, 0.0, 11, 0.0],
                                                          [11, 13, 0.0, 12, 1.0],
                                                          [11, 12, 1.0, 12, 0.0]])


def test_learn_budget_seeds_and_records():
    env = SpyMaze(SMALL, slip=0.0, max_steps=1)      # every episode is exactly one environment step
    agent = SSEAgent(env, seed=3).learn(5)
    assert env.n_steps == 5 and env.seeds == [3 * 100_003 + e for e in range(5)]
    assert agent.episode_success == [0.0] * 5 and agent.high_steps == [1] * 5


# ----------------------------------------------------------------------------- issue-30 fixes
def test_high_level_bootstraps_over_the_candidate_set_only():
    """The next-state value is the max over ``candidates[s']`` (nodes within ``radius``), never
    over all nodes: a large value at a far node must not leak into the target."""
    env = GridMaze(SMALL, slip=0.0)
    agent = SSEAgent(env, q_init=0.0, alpha_h=0.5, gamma_h=0.9, batch=1, updates=1, radius=1, seed=0)
    s2 = 10
    far = int(np.flatnonzero(~agent.candidates[s2])[-1])
    assert far != s2 and not agent.candidates[s2, far]
    agent.qh[s2, far] = 5.0
    near = int(np.flatnonzero(agent.candidates[s2])[0])
    agent.qh[s2, near] = 0.2
    agent.buffer.add(9, s2, 0.0, s2, False)
    agent.update_high()
    assert agent.qh[9, s2] == pytest.approx(0.5 * 0.9 * 0.2)


def test_optimistic_start_of_the_flat_learners():
    q = GoalQ(3, 2, q_init=1.0, rng=np.random.default_rng(0))
    assert q.q.shape == (3, 3, 2) and np.all(q.q == 1.0)
    q.update(0, 1, 2, 1)                              # not the goal: target 0.95 * max Q[2, 1] = 0.95
    assert q.q[0, 1, 1] == pytest.approx(1.0 + 0.5 * (0.95 - 1.0))
    assert np.all(GoalQ(3, 2).q == 0.0)
    with pytest.raises(ValueError, match="q_init must be a finite number"):
        GoalQ(3, 2, q_init=float("nan"))
    flat = FlatHER(GridMaze(SMALL), q_init=1.0, her_k=0)
    assert np.all(flat.low.q == 1.0) and flat.low.her_k == 0
    # the optimistic flat learner explores systematically and solves the small maze greedily
    opt = FlatHER(GridMaze(SMALL, slip=0.0, max_steps=30), q_init=1.0, her_k=0, seed=0).learn(1500)
    assert all(opt.run_episode(seed=k) for k in range(3))


def test_deleted_waypoints_cost_the_disconnect_cost():
    p = FailureAwareGraphPlanner(3, 3, c_dist=0.0)
    assert p.edge_cost(0, 1, deleted={1}) == 1000.0 and p.edge_cost(0, 1) == 1.0
    assert p.shortest_path(0, 2) == [0, 1, 2]
    assert p.shortest_path(0, 2, deleted={1}) == [0, 3, 4, 5, 2]
    assert p.shortest_path(0, 1, deleted={1}) == [0, 1]    # a deleted goal is still the goal


def test_execute_deletes_a_timed_out_waypoint_for_the_rest_of_the_step():
    def goals_after_timeout(delete):
        env = GridMaze(SMALL, slip=0.0, max_steps=100)
        agent = SSEAgent(env, eps=0.0, c_dist=0.0, waypoint_steps=2, subgoal_steps=4, seed=0,
                         delete_failed_waypoints=delete)
        agent.low.q[:] = 0.0
        agent.low.q[:, :, 0] = 1.0                     # always "up": from the start that is a wall
        env.reset(seed=0)
        goals = []
        agent.execute(env.start, env.start + 2, 0, True, [], goals)
        return goals

    # c_dist = 0: a failure alone does not change the costs, so only the deletion reroutes
    assert goals_after_timeout(False) == [9, 9, 9, 9]
    assert goals_after_timeout(True) == [9, 9, 1, 1]  # around the deleted cell 9 (through row 0)
    assert SSEAgent(GridMaze(SMALL)).delete_failed_waypoints is False


# ----------------------------------------------------------------------------- tuning, budgets, input checks
def test_tuned_settings_come_from_the_grid_on_disjoint_seeds():
    assert set(TUNED) == set(KINDS)
    for kind in ("flat_q", "flat_her"):
        assert TUNED[kind]["q_init"] in Q_GRID and TUNED[kind]["eps"] in EPS_GRID
    assert TUNED["sse"]["q_init"] in Q_GRID and TUNED["sse"]["eps"] == 0.2
    # the optimum is interior or the grid spans 0 to the largest return
    assert min(Q_GRID) == 0.0 and max(Q_GRID) == 1.0 and len(Q_GRID) >= 5
    trial_seeds = {1000 + s for s in range(max(SEEDS.values()))}
    assert not trial_seeds & set(VALIDATION_SEEDS)
    assert VALIDATION_EVAL_SEED - EVAL_SEED >= 1000               # no evaluation episode is shared


def test_tune_ranks_by_success_then_steps():
    rows = tune("flat_q", "smoke", seeds=(2000,), q_grid=(0.0, 1.0), eps_grid=(0.2,))
    assert [set(r) for r in rows] == [{"q_init", "eps", "success", "steps"}] * 2
    assert {r["q_init"] for r in rows} == {0.0, 1.0}
    keys = [(-r["success"], r["steps"]) for r in rows]
    assert keys == sorted(keys)
    assert all(0.0 <= r["success"] <= 1.0 and 0 < r["steps"] <= 200 for r in rows)
    with pytest.raises(ValueError, match="unknown agent kind"):
        build("hiro", GridMaze(MAZE), 0, 0.0, 0.2)


def test_evaluate_counts_steps_with_failures_at_the_horizon():
    env = GridMaze(["######", "#S..G#", "######"], slip=0.0, max_steps=30)
    agent = FlatHER(env, q_init=0.0, her_k=0, seed=0)
    agent.low.q[:, :, 3] = 1.0                                   # always right: 3 steps
    succ, steps, high = evaluate(agent, 3, seed=5)
    assert succ.tolist() == [1.0] * 3 and steps.tolist() == [3.0] * 3 and np.isnan(high).all()
    agent.low.q[:] = 0.0
    agent.low.q[:, :, 2] = 1.0                                   # always left: never arrives
    succ, steps, _ = evaluate(agent, 2, seed=5)
    assert succ.tolist() == [0.0, 0.0] and steps.tolist() == [30.0, 30.0]
    sse = SSEAgent(GridMaze(CORRIDOR, slip=0.0, max_steps=60), eps=0.0, seed=0)
    succ, steps, high = evaluate(sse, 2, seed=0)
    assert succ.shape == steps.shape == high.shape == (2,) and np.all(high >= 1)
    sse.choose = lambda s, train: s                              # its own cell: a strict failure at once
    succ, steps, _ = evaluate(sse, 2, seed=0)
    assert succ.tolist() == [0.0, 0.0] and steps.tolist() == [60.0, 60.0]   # a miss counts at the horizon


def test_sse_learn_stops_exactly_at_the_budget():
    for budget in (1, 137, 600):
        env = SpyMaze(SMALL, slip=0.1, max_steps=60)
        agent = SSEAgent(env, seed=2).learn(budget)
        assert env.n_steps == budget
        assert len(agent.low.q) and np.isfinite(agent.qh).all()
    env = SpyMaze(SMALL, slip=0.0, max_steps=60)
    flat = FlatHER(env, seed=2).learn(137)
    assert env.n_steps == 137
    env = GridMaze(CORRIDOR, slip=0.0, max_steps=60)
    agent = SSEAgent(env, eps=0.0, seed=0)
    greedy_right(agent)
    ok, t, n_high = agent.run_episode(seed=0, train=True, t_max=2)
    assert (ok, t) == (False, 2)                                 # cut as a truncation after 2 steps
    assert agent.buffer.rows[len(agent.buffer) - 1, 4] == 1.0 or agent.buffer.counts["failure"] >= 1
    for bad in (-5, float("nan"), 2.5, "10", True):
        with pytest.raises(ValueError, match="total_timesteps must be a non-negative integer"):
            SSEAgent(GridMaze(SMALL), seed=0).learn(bad)
        with pytest.raises(ValueError, match="total_timesteps must be a non-negative integer"):
            FlatHER(GridMaze(SMALL), seed=0).learn(bad)
    assert SSEAgent(GridMaze(SMALL), seed=0).learn(0).episode_success == []
    with pytest.raises(ValueError, match="t_max must be an integer >= 1"):
        SSEAgent(GridMaze(SMALL), seed=0).run_episode(0, t_max=0)


def test_update_high_uses_alpha_h():
    """alpha_h = 0.2: the step moves a fifth of the way to the target (kills ``alpha_h -> 0.5``)."""
    env = GridMaze(SMALL, slip=0.0)
    hi = SSEAgent(env, q_init=1.0, alpha_h=0.2, gamma_h=0.9, batch=1, updates=1, seed=0)
    assert hi.alpha_h == 0.2
    hi.qh[10, :] = 0.0
    hi.qh[10, 9] = 0.8
    hi.buffer.add(8, 10, 0.0, 10, False)
    hi.update_high()
    assert hi.qh[8, 10] == pytest.approx(1.0 + 0.2 * (0.9 * 0.8 - 1.0))


NAN = float("nan")


@pytest.mark.parametrize("kw, name", [
    (dict(q_init=NAN), "q_init"), (dict(q_init=float("inf")), "q_init"),
    (dict(eps=-0.1), "eps"), (dict(eps=1.5), "eps"), (dict(eps=NAN), "eps"),
    (dict(eta=NAN), "eta"), (dict(eta=1.2), "eta"),
    (dict(alpha_h=0.0), "alpha_h"), (dict(alpha_h=1.5), "alpha_h"), (dict(alpha_h=NAN), "alpha_h"),
    (dict(gamma_h=-0.1), "gamma_h"), (dict(gamma_h=1.01), "gamma_h"), (dict(gamma_h=NAN), "gamma_h"),
    (dict(alpha=NAN), "alpha"), (dict(alpha=0.0), "alpha"), (dict(gamma=NAN), "gamma"), (dict(gamma=2.0), "gamma"),
    (dict(waypoint_steps=0), "waypoint_steps"), (dict(waypoint_steps=-1), "waypoint_steps"),
    (dict(subgoal_steps=0), "subgoal_steps"), (dict(batch=0), "batch"), (dict(updates=-1), "updates"),
    (dict(her_k=-1), "her_k"), (dict(radius=0), "radius"), (dict(waypoint_steps=2.5), "waypoint_steps"),
    (dict(c_dist=NAN), "c_dist"),
])
def test_sse_agent_rejects_bad_settings(kw, name):
    with pytest.raises(ValueError, match=f"^{name} must be"):
        SSEAgent(GridMaze(SMALL), **kw)


@pytest.mark.parametrize("kw, name", [
    (dict(eps=NAN), "eps"), (dict(eps=-0.01), "eps"), (dict(eps=1.01), "eps"), (dict(q_init=NAN), "q_init"),
    (dict(her_k=-2), "her_k"), (dict(alpha=NAN), "alpha"), (dict(gamma=NAN), "gamma"),
])
def test_flat_her_rejects_bad_settings(kw, name):
    with pytest.raises(ValueError, match=f"^{name} must be"):
        FlatHER(GridMaze(SMALL), **kw)


def test_accepted_edge_settings():
    SSEAgent(GridMaze(SMALL), eps=0.0, eta=1.0, alpha_h=1.0, gamma_h=0.0, updates=0, her_k=0, q_init=-1.0)
    FlatHER(GridMaze(SMALL), eps=1.0, gamma=1.0, alpha=1.0, her_k=0)


def test_maze_rejects_bad_input():
    with pytest.raises(ValueError, match="max_steps must be an integer >= 1"):
        GridMaze(SMALL, max_steps=0)
    with pytest.raises(ValueError, match="max_steps must be an integer >= 1"):
        GridMaze(SMALL, max_steps=-3)
    with pytest.raises(ValueError, match="no path of free cells from 'S' to 'G'"):
        GridMaze(["#####", "#S#G#", "#####"])
    env = GridMaze(SMALL)
    env.reset(seed=0)
    for bad in (1.7, -1, 4, "1", True):
        with pytest.raises(ValueError, match="action must be in 0..3"):
            env.step(bad)
    env.step(np.int64(1))                                        # numpy integers are actions


def test_buffer_and_planner_reject_bad_input():
    buf = FrontierReplayBuffer(n_nodes=10)
    with pytest.raises(ValueError, match="^reward must be finite"):
        buf.store_step(1, 2, True, NAN, 2, episode_done=False)
    with pytest.raises(ValueError, match="^waypoint_reward must be finite"):
        buf.store_step(1, 2, False, 0.0, 1, episode_done=False, last_waypoint=3, waypoint_reward=NAN, waypoint_state=3)
    with pytest.raises(ValueError, match=r"^end_state must be a node id \(an integer >= 0 below 10\)"):
        buf.store_step(1, 2, True, 0.0, 10, episode_done=False)
    with pytest.raises(ValueError, match="^state must be a node id"):
        buf.store_step(-1, 2, True, 0.0, 2, episode_done=False)
    with pytest.raises(ValueError, match="^subgoal must be a node id"):
        buf.store_step(1, 2.5, True, 0.0, 2, episode_done=False)
    with pytest.raises(ValueError, match="^reward must be finite"):
        buf.add(1, 2, float("inf"), 2, False)
    assert len(buf) == 0                                         # nothing half-stored
    buf.add(1, 2, 0.0, 2, False)
    for bad in (0, -1, 2.0):
        with pytest.raises(ValueError, match="^batch_size must be a positive integer"):
            buf.sample(bad)
    with pytest.raises(ValueError, match="^n_nodes must be a positive integer"):
        FrontierReplayBuffer(n_nodes=0)
    p = FailureAwareGraphPlanner(2, 2)
    with pytest.raises(ValueError, match="node node -1 is outside"):
        p.record(-1, True)
    with pytest.raises(ValueError, match="node node 4 is outside"):
        p.record(4, False)
    assert p.attempts.sum() == 0
    with pytest.raises(ValueError, match="start node must be an integer id"):
        p.shortest_path(0.5, 3)
    with pytest.raises(ValueError, match="goal node must be an integer id"):
        p.shortest_path(0, 3.0)
    for bad in (0.0, -5.0, NAN):
        with pytest.raises(ValueError, match="disconnect_cost must be a finite number > 0"):
            FailureAwareGraphPlanner(2, 2, disconnect_cost=bad)
    with pytest.raises(ValueError, match="c_dist must be a finite number >= 0"):
        FailureAwareGraphPlanner(2, 2, c_dist=NAN)


def test_non_finite_q_values_fail_loudly():
    q = GoalQ(3, 2, rng=np.random.default_rng(0))
    q.q[2, 1, :] = np.inf
    with pytest.raises(FloatingPointError, match="non-finite low-level Q value"):
        q.update(0, 0, 2, 1)
    agent = SSEAgent(GridMaze(SMALL, slip=0.0), batch=1, updates=1, seed=0)
    agent.qh[10, :] = np.inf
    agent.qh[10, :] *= -1
    agent.qh[10, 9] = np.nan
    agent.buffer.add(8, 10, 0.0, 10, False)
    with pytest.raises(FloatingPointError, match="non-finite high-level Q value"):
        agent.update_high()
