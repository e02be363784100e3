"""Tests for iclr26.rl.scorer (arXiv:2508.07452)."""
import copy

import numpy as np
import pytest
import torch

from iclr26.models.rl import DQN, Box, CartPoleEnv, Discrete, QNetwork, SyncVectorEnv
from iclr26.rl.scorer import FOLLOWER_LOSSES, ScorerDQN, bellman_error_variance, msbe
from iclr26.rl.scorer.envs import GymnasiumVecEnv, make_env, make_vec_env
from iclr26.rl.scorer.experiment import ARMS, SCALES, learning_curve_auc, make_agent, run, run_task
from iclr26.rl.scorer.networks import MinAtarQNetwork


class Line:
    """Observation = a fixed 3-vector with a per-episode offset; two actions; reward 1 or 3."""

    def __init__(self):
        self.observation_space = Box(-2, 2, shape=(3,))
        self.action_space = Discrete(2)
        self.rng = np.random.default_rng(0)

    def reset(self, seed=None, options=None):
        if seed is not None:
            self.rng = np.random.default_rng(seed)
        self.o = self.rng.normal(size=3).astype(np.float32)
        return self.o, {}

    def step(self, a):
        return self.o, 1.0 + 2.0 * a, True, False, {}


def filled_agent(follower_loss="be_variance", **kw):
    agent = ScorerDQN(SyncVectorEnv([Line, Line]), follower_loss=follower_loss, learning_starts=0, batch_size=32,
                      seed=0, **kw)
    rng = np.random.default_rng(1)
    obs = rng.normal(size=(64, 3)).astype(np.float32)
    agent.buffer.add(obs, rng.integers(0, 2, 64), rng.normal(size=64) * 2 + 1, obs[::-1].copy(),
                     (rng.random(64) < 0.5).astype(np.float32))
    # move the target away from the online net so delta is not trivially small
    with torch.no_grad():
        for p in agent.target_net.parameters():
            p.add_(0.3 * torch.randn_like(p))
    return agent


def fixed_batch(agent):
    g = torch.Generator().manual_seed(3)
    return {"obs": torch.randn(32, 3, generator=g), "actions": torch.randint(0, 2, (32,), generator=g),
            "rewards": torch.randn(32, generator=g) * 2, "next_obs": torch.randn(32, 3, generator=g),
            "dones": (torch.rand(32, generator=g) < 0.5).float()}


def grads(loss, params):
    return torch.autograd.grad(loss, list(params), allow_unused=True)


# ----------------------------------------------------------------------------- objectives
def test_objectives_against_references():
    d = torch.tensor([1.0, -2.0, 0.5, 4.0])
    assert float(msbe(d)) == pytest.approx(float(np.mean(d.numpy() ** 2)))
    assert float(bellman_error_variance(d)) == pytest.approx(float(np.var(d.numpy())))
    torch.testing.assert_close(bellman_error_variance(d + 7.0), bellman_error_variance(d))
    # MSBE = variance + mean^2 (the decomposition the leader/follower split rests on)
    assert float(msbe(d)) == pytest.approx(float(bellman_error_variance(d) + d.mean() ** 2))
    assert FOLLOWER_LOSSES == ("be_variance", "msbe")


# ----------------------------------------------------------------------------- construction
def test_optimizers_split_head_and_encoder():
    agent = ScorerDQN(SyncVectorEnv([Line]), lr_q=2e-4, lr_enc=7e-4, seed=0)
    lead, follow = agent.optimizers
    assert {id(p) for g in lead.param_groups for p in g["params"]} == {id(p) for p in agent.q_net.head.parameters()}
    assert {id(p) for g in follow.param_groups for p in g["params"]} == \
        {id(p) for p in agent.q_net.encoder.parameters()}
    assert lead.param_groups[0]["lr"] == 2e-4 and follow.param_groups[0]["lr"] == 7e-4
    assert agent.base_lrs == [[2e-4], [7e-4]]
    default = ScorerDQN(SyncVectorEnv([Line]), seed=0)
    assert (default.lr_q, default.lr_enc, default.leader_interval, default.follower_interval,
            default.follower_steps, default.follower_loss) == (1e-4, 3e-4, 1, 1, 1, "be_variance")
    # same initial weights as a DQN with the same seed (the comparison starts from one network)
    dqn = DQN(SyncVectorEnv([Line]), seed=0)
    for a, b in zip(default.q_net.parameters(), dqn.q_net.parameters()):
        torch.testing.assert_close(a, b)


def test_rejections():
    env = SyncVectorEnv([Line])
    with pytest.raises(ValueError, match="follower_loss must be one of .*be_variance.*msbe.*got 'mse'"):
        ScorerDQN(env, follower_loss="mse")
    with pytest.raises(ValueError, match="lr_q must be > 0"):
        ScorerDQN(env, lr_q=0.0)
    with pytest.raises(ValueError, match="lr_enc must be > 0"):
        ScorerDQN(env, lr_enc=-1.0)
    for name in ("leader_interval", "follower_interval", "follower_steps"):
        with pytest.raises(ValueError, match=f"{name} must be an integer >= 1"):
            ScorerDQN(env, **{name: 0})
        with pytest.raises(ValueError, match=name):
            ScorerDQN(env, **{name: 1.5})
    # a network without the encoder/head split is refused before anything is built
    flat = torch.nn.Sequential(torch.nn.Linear(3, 2))
    with pytest.raises(ValueError, match=r"q_net with .encoder and .head sub-modules; missing: \['encoder', 'head'\]"):
        ScorerDQN(env, q_net=flat)
    half = torch.nn.Module()
    half.encoder = torch.nn.Linear(3, 4)                 # an encoder without a head
    with pytest.raises(ValueError, match=r"missing: \['head'\]$"):
        ScorerDQN(env, q_net=half)
    headless = torch.nn.Module()
    headless.head = torch.nn.Linear(4, 2)                # a head without an encoder
    with pytest.raises(ValueError, match=r"missing: \['encoder'\]$"):
        ScorerDQN(env, q_net=headless)
    own = QNetwork(3, 2, latent_dim=8, hidden=8)
    agent = ScorerDQN(env, q_net=own)                    # a user's split network is accepted and used
    assert agent.q_net is own and agent.optimizers[0].param_groups[0]["params"][0] is own.head[0].weight


# ----------------------------------------------------------------------------- the two players
def test_leader_step_moves_only_the_head_along_the_msbe_gradient():
    agent = filled_agent()
    batch = fixed_batch(agent)
    enc0 = copy.deepcopy(agent.q_net.encoder.state_dict())
    head0 = [p.detach().clone() for p in agent.q_net.head.parameters()]
    # reference: MSBE with detached features, gradient on the head only
    ref = copy.deepcopy(agent.q_net)
    z = ref.encoder(batch["obs"]).detach()
    q = ref.head(z).gather(-1, batch["actions"].unsqueeze(-1)).squeeze(-1)
    ref_loss = ((agent.td_target(batch) - q) ** 2).mean()
    g = grads(ref_loss, ref.head.parameters())
    loss = agent.leader_step(batch)
    assert float(loss) == pytest.approx(float(ref_loss), rel=1e-6)
    for k, v in agent.q_net.encoder.state_dict().items():
        torch.testing.assert_close(v, enc0[k])
    moved = 0
    for p, p0, gi in zip(agent.q_net.head.parameters(), head0, g):
        step = (p.detach() - p0)
        big = gi.abs() > 1e-4
        # Adam's first step is -lr * sign(grad) (up to eps)
        torch.testing.assert_close(step[big], -1e-4 * torch.sign(gi[big]), rtol=2e-2, atol=1e-6)
        moved += int(big.sum())
    assert moved > 10
    assert all(p.grad is None or torch.all(p.grad == 0) for p in agent.q_net.encoder.parameters())


@pytest.mark.parametrize("kind", ["be_variance", "msbe"])
def test_follower_step_moves_only_the_encoder_along_its_objective(kind):
    agent = filled_agent(kind)
    batch = fixed_batch(agent)
    head0 = copy.deepcopy(agent.q_net.head.state_dict())
    enc0 = [p.detach().clone() for p in agent.q_net.encoder.parameters()]
    ref = copy.deepcopy(agent.q_net)
    def delta():
        return agent.td_target(batch) - ref(batch["obs"]).gather(-1, batch["actions"].unsqueeze(-1)).squeeze(-1)

    want = torch.var(delta(), unbiased=False) if kind == "be_variance" else (delta() ** 2).mean()
    other = (delta() ** 2).mean() if kind == "be_variance" else torch.var(delta(), unbiased=False)
    g = grads(want, ref.encoder.parameters())
    g_other = grads(other, ref.encoder.parameters())
    loss = agent.follower_step(batch)
    assert float(loss) == pytest.approx(float(want), rel=1e-5)
    for k, v in agent.q_net.head.state_dict().items():
        torch.testing.assert_close(v, head0[k])
    assert all(p.requires_grad for p in agent.q_net.head.parameters())          # restored after the step
    assert all(p.grad is None for p in agent.q_net.head.parameters())
    agree = disagree = 0
    for p, p0, gi, go in zip(agent.q_net.encoder.parameters(), enc0, g, g_other):
        if gi is None:
            continue
        step = p.detach() - p0
        big = gi.abs() > 1e-4
        torch.testing.assert_close(step[big], -3e-4 * torch.sign(gi[big]), rtol=2e-2, atol=1e-6)
        agree += int(big.sum())
        disagree += int(((torch.sign(go) != torch.sign(gi)) & big & (go.abs() > 1e-4)).sum())
    assert agree > 10 and disagree > 0          # the two objectives point different ways on this batch


def test_variance_follower_ignores_a_constant_reward_shift():
    """With every transition terminal, delta = r - Q: shifting r shifts delta only, which the
    variance objective ignores and the MSBE does not."""
    outs = {}
    for kind in FOLLOWER_LOSSES:
        for shift in (0.0, 5.0):
            agent = filled_agent(kind)
            batch = fixed_batch(agent)
            batch["dones"] = torch.ones(32)
            batch["rewards"] = batch["rewards"] + shift
            agent.follower_step(batch)
            outs[kind, shift] = [p.detach().clone() for p in agent.q_net.encoder.parameters()]
    for a, b in zip(outs["be_variance", 0.0], outs["be_variance", 5.0]):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)
    assert any(not torch.allclose(a, b, atol=1e-6) for a, b in zip(outs["msbe", 0.0], outs["msbe", 5.0]))


def test_train_step_schedule():
    agent = filled_agent(leader_interval=3, follower_interval=2, follower_steps=2)
    calls = []
    agent.leader_step = lambda b: calls.append("L") or torch.tensor(1.0)
    agent.follower_step = lambda b: calls.append("F") or torch.tensor(2.0)
    outs = [agent.train_step() for _ in range(6)]
    # updates 0..5: leader at 0 and 3, follower (twice) at 0, 2, 4; leader before follower
    assert "".join(calls) == "LFF" + "" + "FF" + "L" + "FF" + ""
    assert outs[0] == {"leader_loss": 1.0, "follower_loss": 2.0} and outs[1] == {} and outs[3] == {"leader_loss": 1.0}


def test_train_step_uses_independent_batches():
    agent = filled_agent(follower_steps=2)
    seen = []
    real = agent.buffer.sample
    agent.buffer.sample = lambda n: seen.append(n) or real(n)
    agent.train_step()
    assert seen == [32, 32, 32]


def test_learn_end_to_end_and_state_dict():
    agent = ScorerDQN(SyncVectorEnv([Line, Line]), learning_starts=20, exploration_steps=100, batch_size=16,
                      lr_q=3e-3, lr_enc=3e-3, lr_decay=False, target_update_interval=50, seed=0)
    agent.learn(600)
    assert agent.log.n_updates == 290 and agent._k == 290
    obs = np.stack([Line().reset(seed=s)[0] for s in range(20)])
    q = agent.q_net(torch.from_numpy(obs)).detach().numpy()
    assert np.mean(q[:, 1] > q[:, 0]) >= 0.9                  # learned that action 1 pays more
    clone = QNetwork(3, 2)
    clone.load_state_dict(agent.q_net.state_dict())
    torch.testing.assert_close(clone(torch.from_numpy(obs)), agent.q_net(torch.from_numpy(obs)))


# ----------------------------------------------------------------------------- experiment helpers
def test_learning_curve_auc():
    r = [10, 20, 30, 40]
    s = [10, 20, 30, 40]
    # checkpoints 20, 40 with window 10 -> means of finished episodes: (10+20)/2, (10+..+40)/4
    assert learning_curve_auc(r, s, total=40, n_points=2) == pytest.approx((15 + 25) / 2)
    assert learning_curve_auc(r, s, total=40, n_points=2, window=1) == pytest.approx((20 + 40) / 2)
    assert learning_curve_auc([5], [30], total=40, n_points=4) == pytest.approx((0 + 0 + 5 + 5) / 4)


def test_make_agent_arms():
    cfg = dict(exploration_steps=10, learning_starts=5, target_update_interval=10, lr=2e-4, lr_enc=6e-4)
    env = SyncVectorEnv([CartPoleEnv])
    dqn = make_agent("dqn", env, cfg, 0)
    assert type(dqn) is DQN and dqn.optimizers[0].param_groups[0]["lr"] == 2e-4
    sc = make_agent("scorer", env, cfg, 0)
    assert sc.follower_loss == "be_variance" and (sc.lr_q, sc.lr_enc) == (2e-4, 6e-4)
    assert make_agent("scorer_msbe", env, cfg, 0).follower_loss == "msbe"
    for a, b in zip(dqn.q_net.parameters(), sc.q_net.parameters()):     # one initial network for every arm
        torch.testing.assert_close(a, b)
    assert (dqn.exploration_steps if hasattr(dqn, "exploration_steps") else dqn.eps_steps) == 10
    assert dqn.learning_starts == 5 and dqn.target_update_interval == 10 and dqn.eps1 == 0.05
    assert ARMS == ("dqn", "scorer", "scorer_msbe")
    with pytest.raises(ValueError, match="unknown arm 'ppo'; allowed: dqn, scorer, scorer_msbe"):
        make_agent("ppo", env, cfg, 0)
    mcfg = dict(cfg, network="minatar", exploration_final_eps=0.01, buffer_size=300, batch_size=8)
    m = make_agent("scorer", make_vec_env("MinAtar/Breakout-v1", 2), mcfg, 0)
    assert isinstance(m.q_net, MinAtarQNetwork) and m.eps1 == 0.01 and m.buffer.capacity == 300 and m.batch_size == 8


def test_run_task_is_deterministic_and_pairs_the_arms():
    cfg = dict(SCALES["smoke"]["tasks"][""], total_timesteps=400, n_envs=4, eval_max_steps=20)
    a, b = run_task(cfg, 3), run_task(cfg, 3)
    assert a[0] == b[0] and set(a[0]["final_return"]) == set(ARMS)
    assert a[1]["updates"] == {"dqn": 50, "scorer": 50, "scorer_msbe": 50}
    assert all(len(v) == 2 and max(v) <= 20 for v in a[1]["eval_returns"].values())


def test_smoke_run_measures_every_claim():
    a = run("smoke", 0)
    assert set(a["metrics"]["final_return"]) == set(ARMS)
    assert set(a["metrics"]) == {"final_return", "auc", "acrobot_final_return", "acrobot_auc",
                                 "breakout_final_return", "breakout_auc"}
    assert set(a["metrics"]["breakout_auc"]) == {"dqn", "scorer"}
    # every scale runs the same metrics and arms (the claims read them at every scale)
    for scale in SCALES.values():
        assert set(scale["tasks"]) == {"", "acrobot_", "breakout_"}
        assert scale["tasks"][""]["env_id"] == "CartPole-v1" and scale["tasks"]["acrobot_"]["env_id"] == "Acrobot-v1"


@pytest.mark.slow
def test_quick_scale_runs():
    out = run("quick", 0)
    assert all(np.isfinite(v) for m in out["metrics"].values() for v in m.values())


# ----------------------------------------------------------------------------- gymnasium vector envs
def test_vec_env_matches_gymnasium_step_for_step():
    """The adapter returns exactly what n independent gymnasium CartPole-v1 copies return, with the
    true last observation of a finished episode in final_obs and the episode return counted."""
    import gymnasium

    vec = make_vec_env("CartPole-v1", 3)
    assert isinstance(vec, GymnasiumVecEnv) and vec.num_envs == 3 and vec.single_action_space.n == 2
    refs = [gymnasium.make("CartPole-v1") for _ in range(3)]
    obs = vec.reset(seed=7)
    ref_obs = np.stack([r.reset(seed=7 + i)[0] for i, r in enumerate(refs)])
    np.testing.assert_array_equal(obs, ref_obs)
    rng = np.random.default_rng(0)
    ret, finished = np.zeros(3), 0
    for _ in range(120):
        a = rng.integers(0, 2, 3)
        obs, rew, term, trunc, info = vec.step(a)
        for i, r in enumerate(refs):
            o, rr, te, tr, _ = r.step(int(a[i]))
            ret[i] += rr
            assert rew[i] == rr and term[i] == te and trunc[i] == tr
            if te or tr:
                np.testing.assert_array_equal(info["final_obs"][i], o)
                assert ret[i] in info["episode_returns"]
                finished += 1
                ret[i] = 0.0
                o, _ = r.reset()
                assert not np.array_equal(obs[i], info["final_obs"][i])
            else:
                assert info["final_obs"][i] is None
            np.testing.assert_array_equal(obs[i], o)
        assert len(info["episode_returns"]) == int(np.sum(term | trunc))
    assert finished >= 3 and obs.dtype == np.float32
    with pytest.raises(ValueError, match=r"actions must have shape \(3,\), got \(2,\)"):
        vec.step(np.zeros(2, int))
    vec.close()


def test_vec_env_rejections_and_minatar():
    import gymnasium

    nxt = gymnasium.vector.SyncVectorEnv([lambda: gymnasium.make("CartPole-v1")])     # NEXT_STEP autoreset
    with pytest.raises(ValueError, match="autoreset_mode=SAME_STEP, got .*NEXT_STEP"):
        GymnasiumVecEnv(nxt)
    for bad in (0, 1.5):
        with pytest.raises(ValueError, match=f"n_envs must be an integer >= 1, got {bad}"):
            make_vec_env("CartPole-v1", bad)
    env = make_env("MinAtar/Breakout-v1")                     # registers the MinAtar ids on demand
    assert env.action_space.n == 3 and env.observation_space.shape == (10, 10, 4)
    assert make_env("MinAtar/Breakout-v1", max_episode_steps=7).spec.max_episode_steps == 7
    vec = make_vec_env("MinAtar/Breakout-v1", 2)
    o = vec.reset(seed=0)
    assert o.shape == (2, 10, 10, 4) and o.dtype == np.float32 and set(np.unique(o)) <= {0.0, 1.0}
    assert make_env("Acrobot-v1").action_space.n == 3


# ----------------------------------------------------------------------------- MinAtar network
def test_minatar_network_layout_and_init():
    torch.manual_seed(0)
    net = MinAtarQNetwork((10, 10, 4), 3)
    enc = [m for m in net.encoder if isinstance(m, torch.nn.Linear)]
    head = [m for m in net.head if isinstance(m, torch.nn.Linear)]
    assert [(m.in_features, m.out_features) for m in enc] == [(400, 128), (128, 128)]
    assert [(m.in_features, m.out_features) for m in head] == [(128, 128), (128, 3)]
    assert [type(m).__name__ for m in net.encoder] == ["Flatten", "L1Norm", "Linear", "ReLU", "Linear", "ReLU",
                                                       "L1Norm"]
    assert [type(m).__name__ for m in net.head] == ["Linear", "ReLU", "Linear"]
    for m, gain in zip(enc + head, [2 ** 0.5] * 3 + [0.01]):
        w = m.weight.detach()
        rows = w if w.shape[0] <= w.shape[1] else w.T          # orthogonal rows (or columns) of norm = gain
        torch.testing.assert_close(rows @ rows.T, gain ** 2 * torch.eye(rows.shape[0]), atol=1e-5, rtol=1e-4)
        assert torch.all(m.bias == 0)
    x = (torch.rand(5, 10, 10, 4) < 0.1).float()
    z = net.encoder(x)
    torch.testing.assert_close(z.abs().mean(-1), torch.ones(5), atol=1e-4, rtol=1e-4)   # L1Norm output
    manual = torch.relu(enc[0](x.flatten(1) / (x.flatten(1).abs().mean(-1, keepdim=True) + 1e-6)))
    manual = torch.relu(enc[1](manual))
    manual = manual / (manual.abs().mean(-1, keepdim=True) + 1e-6)
    torch.testing.assert_close(z, manual)
    torch.testing.assert_close(net(x), net.head(z))
    assert net(x).shape == (5, 3)
    clone = MinAtarQNetwork((10, 10, 4), 3)
    clone.load_state_dict(net.state_dict())
    torch.testing.assert_close(clone(x), net(x))
    assert MinAtarQNetwork((10, 10, 6), 6, latent_dim=16, hidden=8)(torch.zeros(2, 10, 10, 6)).shape == (2, 6)
    with pytest.raises(ValueError, match=r"must all be positive, got \(10, 10, 4\), 0, 128, 128"):
        MinAtarQNetwork((10, 10, 4), 0)
    with pytest.raises(ValueError, match="must all be positive"):
        MinAtarQNetwork((10, 10, 4), 3, latent_dim=0)
    with pytest.raises(ValueError, match="must all be positive"):
        MinAtarQNetwork((10, 10, 4), 3, hidden=0)


def test_scorer_learns_on_minatar_vector_env():
    torch.manual_seed(0)
    env = make_vec_env("MinAtar/Breakout-v1", 4)
    net = MinAtarQNetwork((10, 10, 4), 3, latent_dim=32, hidden=32)
    agent = ScorerDQN(env, q_net=net, lr_enc=5e-4, learning_starts=40, batch_size=16, buffer_size=500,
                      exploration_steps=100, target_update_interval=80, seed=0)
    enc0 = [p.detach().clone() for p in net.encoder.parameters()]
    agent.learn(200)
    assert agent.log.n_updates == 40 and agent.num_timesteps == 200
    assert all(not torch.equal(a, b) for a, b in zip(enc0, net.encoder.parameters()))
    ret = agent.evaluate(make_env("MinAtar/Breakout-v1", max_episode_steps=30), n_episodes=2, seed=3)
    assert ret.shape == (2,) and np.all(ret >= 0)


class FakeSameStepVec:
    """A minimal same-step-autoreset vector env that returns plain lists (ints, bools as ints)."""

    def __init__(self):
        import gymnasium

        self.metadata = {"autoreset_mode": gymnasium.vector.AutoresetMode.SAME_STEP}
        self.num_envs = 2
        self.single_observation_space = Box(0, 1, shape=(2,))
        self.single_action_space = Discrete(2)

    def reset(self, seed=None):
        return [[0, 1], [1, 0]], {}

    def step(self, actions):
        return ([[1, 1], [0, 0]], [2, 3], [1, 0], [0, 0],
                {"final_obs": [np.array([True, False]), None], "_final_obs": np.array([True, False])})


def test_vec_env_casts_whatever_the_vector_env_returns():
    vec = GymnasiumVecEnv(FakeSameStepVec())
    o = vec.reset(seed=0)
    assert o.dtype == np.float32 and o.tolist() == [[0, 1], [1, 0]]
    obs, rew, term, trunc, info = vec.step(np.array([0, 1]))
    assert obs.dtype == np.float32 and rew.dtype == np.float64 and term.dtype == bool and trunc.dtype == bool
    assert rew.tolist() == [2.0, 3.0] and term.tolist() == [True, False] and trunc.tolist() == [False, False]
    assert info["final_obs"][0].dtype == np.float32 and info["final_obs"][0].tolist() == [1.0, 0.0]
    assert info["final_obs"][1] is None and info["episode_returns"] == [2.0]
    obs, rew, term, trunc, info = vec.step(np.array([0, 1]))
    assert info["episode_returns"] == [2.0]                  # env 1's running return is 6 and not reported
    with pytest.raises(ValueError, match="autoreset_mode=SAME_STEP, got None"):
        GymnasiumVecEnv(object())                          # no metadata at all


def test_make_env_registers_minatar_once_and_passes_kwargs():
    import warnings

    import gymnasium

    for k in [k for k in gymnasium.registry if k.startswith("MinAtar/")]:
        del gymnasium.registry[k]                           # as in a fresh process
    env = make_env("MinAtar/Breakout-v1")
    assert env.action_space.n == 3 and "MinAtar/Asterix-v0" in gymnasium.registry
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        make_env("MinAtar/Breakout-v1")                     # already registered: not registered again
        make_env("CartPole-v1")
    assert not [w for w in caught if "Overrid" in str(w.message)]
    vec = make_vec_env("CartPole-v1", 1, max_episode_steps=5)
    assert vec.num_envs == 1
    vec.reset(seed=0)
    trunc = [vec.step(np.array([i % 2]))[3][0] for i in range(5)]
    assert trunc == [False] * 4 + [True]                    # the kwargs reach every copy
    vec = make_vec_env("MinAtar/Breakout-v1", 2)
    vec.reset(seed=1)
    for _ in range(500):                                    # random play loses the ball quickly
        obs, rew, term, trunc, info = vec.step(np.array([0, 2]))
        if info["episode_returns"]:
            break
    done = [f for f in info["final_obs"] if f is not None]
    assert done and done[0].dtype == np.float32 and done[0].shape == (10, 10, 4) and obs.dtype == np.float32


def test_minatar_network_size_edges():
    assert MinAtarQNetwork((10, 10, 4), 1, latent_dim=1, hidden=1)(torch.zeros(1, 10, 10, 4)).shape == (1, 1)
    with pytest.raises(ValueError, match=r"got \(0, 10, 4\)"):
        MinAtarQNetwork((0, 10, 4), 3)
