"""Tests for the shared DQN substrate iclr26.models.rl."""
import math

import numpy as np
import pytest
import torch

from iclr26.models.rl import (DQN, Box, CartPoleEnv, Discrete, L1Norm, QNetwork, ReplayBuffer, SyncVectorEnv, iqm,
                              linear_schedule)


# ----------------------------------------------------------------------------- helpers
def cartpole_reference(state, action):
    """Cart-pole dynamics written from Barto, Sutton & Anderson (1983) / gymnasium's docs (Euler)."""
    g, mc, mp, l, F, dt = 9.8, 1.0, 0.1, 0.5, 10.0, 0.02
    x, xd, th, thd = state
    f = F if action == 1 else -F
    tmp = (f + mp * l * thd**2 * np.sin(th)) / (mc + mp)
    thacc = (g * np.sin(th) - np.cos(th) * tmp) / (l * (4 / 3 - mp * np.cos(th) ** 2 / (mc + mp)))
    xacc = tmp - mp * l * thacc * np.cos(th) / (mc + mp)
    return np.array([x + dt * xd, xd + dt * xacc, th + dt * thd, thd + dt * thacc])


class Bandit:
    """One-step episodes: action 1 pays 1, action 0 pays 0; observation is a fixed non-zero vector."""

    def __init__(self):
        self.observation_space = Box(-1, 1, shape=(3,))
        self.action_space = Discrete(2)

    def reset(self, seed=None, options=None):
        return np.array([0.5, -0.2, 0.3], np.float32), {}

    def step(self, a):
        return np.array([0.5, -0.2, 0.3], np.float32), float(a == 1), True, False, {}


class Counter:
    """Episodes of fixed length 3 with reward 2 per step; observation = step count."""

    def __init__(self):
        self.observation_space = Box(0, 3, shape=(1,))
        self.action_space = Discrete(2)
        self.t = 0

    def reset(self, seed=None, options=None):
        self.t = 0
        return np.array([0.0], np.float32), {}

    def step(self, a):
        self.t += 1
        return np.array([float(self.t)], np.float32), 2.0, self.t >= 3, False, {}


# ----------------------------------------------------------------------------- spaces and envs
def test_spaces_and_rejections():
    d = Discrete(3)
    assert d.n == 3 and 0 <= d.sample(np.random.default_rng(0)) < 3
    with pytest.raises(ValueError, match="positive integer n"):
        Discrete(0)
    b = Box(-1.0, 1.0, shape=(2, 3))
    assert b.shape == (2, 3) and b.low.shape == (2, 3) and np.all(b.high == 1)


def test_cartpole_matches_reference_dynamics():
    env = CartPoleEnv()
    obs, info = env.reset(seed=3)
    assert obs.shape == (4,) and obs.dtype == np.float32 and np.all(np.abs(obs) <= 0.05) and info == {}
    state = env.state.copy()
    rng = np.random.default_rng(0)
    for _ in range(8):
        a = int(rng.integers(2))
        obs, r, term, trunc, _ = env.step(a)
        state = cartpole_reference(state, a)
        np.testing.assert_allclose(env.state, state, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(obs, state.astype(np.float32))
        assert r == 1.0 and not trunc
        if term:
            break


def test_cartpole_terminates_and_truncates():
    env = CartPoleEnv()
    env.reset(seed=0)
    env.state = np.array([0.0, 0.0, 0.25, 0.0])          # beyond 12 degrees
    assert env.step(1)[2] is True
    env.state = np.array([2.39, 1.0, 0.0, 0.0])          # x crosses 2.4
    assert env.step(0)[2] is True
    short = CartPoleEnv(max_episode_steps=3)
    short.reset(seed=0)
    flags = [short.step(t % 2)[2:4] for t in range(3)]
    assert flags == [(False, False), (False, False), (False, True)]
    with pytest.raises(ValueError, match="0 or 1"):
        short.step(2)
    with pytest.raises(RuntimeError, match="reset"):
        CartPoleEnv().step(0)
    with pytest.raises(ValueError, match="max_episode_steps"):
        CartPoleEnv(0)
    a = CartPoleEnv(); b = CartPoleEnv()
    np.testing.assert_array_equal(a.reset(seed=5)[0], b.reset(seed=5)[0])
    assert math.isclose(CartPoleEnv.theta_threshold, 12 * math.pi / 180)


def test_sync_vector_env_autoresets_with_final_obs():
    venv = SyncVectorEnv([Counter, Counter])
    obs = venv.reset(seed=0)
    assert obs.shape == (2, 1) and venv.num_envs == 2
    for t in range(2):
        obs, rew, term, trunc, info = venv.step(np.array([0, 1]))
        assert info["episode_returns"] == [] and info["final_obs"] == [None, None]
        np.testing.assert_array_equal(rew, [2.0, 2.0])
    obs, rew, term, trunc, info = venv.step(np.array([0, 0]))
    assert term.tolist() == [True, True] and info["episode_returns"] == [6.0, 6.0]
    np.testing.assert_array_equal(obs, [[0.0], [0.0]])                      # already reset
    np.testing.assert_array_equal(info["final_obs"][0], [3.0])
    with pytest.raises(ValueError, match="shape"):
        venv.step(np.array([0]))
    with pytest.raises(ValueError, match="at least one"):
        SyncVectorEnv([])


# ----------------------------------------------------------------------------- replay, schedules, nets
def test_replay_buffer_wraps_and_samples():
    buf = ReplayBuffer(4, (2,), np.random.default_rng(0))
    for k in range(3):
        buf.add(np.full((2, 2), k), [k, k], [float(k)] * 2, np.full((2, 2), k + 0.5), [0, 1])
    assert len(buf) == 4 and buf.pos == 2
    # rows 0,1 hold the third add (k=2), rows 2,3 the second (k=1)
    np.testing.assert_array_equal(buf.actions, [2, 2, 1, 1])
    np.testing.assert_array_equal(buf.dones, [0, 1, 0, 1])
    np.testing.assert_array_equal(buf.next_obs[:, 0], [2.5, 2.5, 1.5, 1.5])
    b = buf.sample(16)
    assert b["obs"].shape == (16, 2) and b["obs"].dtype == torch.float32 and b["actions"].dtype == torch.int64
    assert set(b["actions"].tolist()) <= {1, 2}
    np.testing.assert_array_equal(b["rewards"].numpy(), b["actions"].numpy().astype(np.float32))
    np.testing.assert_array_equal(b["next_obs"].numpy()[:, 0], b["obs"].numpy()[:, 0] + 0.5)
    with pytest.raises(ValueError, match="rows"):
        buf.add(np.zeros((2, 2)), [0], [0.0, 0.0], np.zeros((2, 2)), [0, 0])
    with pytest.raises(ValueError, match="empty"):
        ReplayBuffer(3, (1,)).sample(1)
    with pytest.raises(ValueError, match="capacity"):
        ReplayBuffer(0, (1,))


def test_linear_schedule():
    assert linear_schedule(1.0, 0.05, 100, 0) == 1.0
    assert linear_schedule(1.0, 0.05, 100, 50) == pytest.approx(0.525)
    assert linear_schedule(1.0, 0.05, 100, 100) == pytest.approx(0.05)
    assert linear_schedule(1.0, 0.05, 100, 10_000) == pytest.approx(0.05)
    assert linear_schedule(0.0, 1.0, 10, 5) == pytest.approx(0.5)
    assert linear_schedule(0.0, 1.0, 10, 50) == pytest.approx(1.0)
    assert linear_schedule(1.0, 0.1, 0, 0) == 0.1


def test_l1norm_and_qnetwork():
    x = torch.tensor([[1.0, -3.0, 2.0], [0.5, 0.5, 0.5]])
    y = L1Norm()(x)
    np.testing.assert_allclose(y.abs().mean(-1).numpy(), [1.0, 1.0], rtol=1e-5)
    np.testing.assert_allclose(y[0].numpy(), (x[0] / 2.0).numpy(), rtol=1e-5)
    torch.manual_seed(0)
    net = QNetwork(4, 3, latent_dim=8, hidden=16)
    assert net(torch.zeros(5, 4)).shape == (5, 3)
    assert net.head[-1].weight.abs().max() < 0.05 and net.head[0].weight.abs().max() > 0.1
    other = QNetwork(4, 3, latent_dim=8, hidden=16)
    other.load_state_dict(net.state_dict())
    inp = torch.randn(7, 4)
    torch.testing.assert_close(other(inp), net(inp))
    torch.testing.assert_close(net.double()(inp.double()), other.double()(inp.double()))
    with pytest.raises(ValueError, match=">= 1"):
        QNetwork(4, 0)


def test_iqm():
    assert iqm([1, 2, 3, 4, 100, -100, 5, 6]) == pytest.approx(np.mean([2, 3, 4, 5]))
    assert iqm([7.0]) == 7.0
    with pytest.raises(ValueError, match="empty"):
        iqm([])


# ----------------------------------------------------------------------------- the agent
def test_td_target_equation():
    agent = DQN(SyncVectorEnv([Counter]), gamma=0.9, seed=0)
    batch = {"obs": torch.tensor([[0.0], [1.0]]), "actions": torch.tensor([0, 1]),
             "rewards": torch.tensor([1.0, 2.0]), "next_obs": torch.tensor([[1.0], [2.0]]),
             "dones": torch.tensor([0.0, 1.0])}
    with torch.no_grad():
        nxt = agent.target_net(batch["next_obs"]).max(-1).values
        q = agent.q_net(batch["obs"])
    torch.testing.assert_close(agent.td_target(batch), torch.stack([1.0 + 0.9 * nxt[0], torch.tensor(2.0)]))
    torch.testing.assert_close(agent.q_selected(batch), torch.stack([q[0, 0], q[1, 1]]))


def test_dqn_learns_a_bandit_and_predicts():
    agent = DQN(Bandit(), learning_rate=1e-2, learning_starts=10, exploration_steps=100, batch_size=16,
                target_update_interval=20, lr_decay=False, seed=1)
    agent.learn(400)
    q = agent.q_net(torch.tensor([[0.5, -0.2, 0.3]])).detach().numpy()[0]
    assert q[1] == pytest.approx(1.0, abs=0.15) and q[0] == pytest.approx(0.0, abs=0.15)
    assert agent.predict(np.array([0.5, -0.2, 0.3], np.float32))[0] == 1
    acts, _ = agent.predict(np.zeros((4, 3), np.float32))
    assert acts.shape == (4,)
    assert agent.log.n_updates == 400 - 15            # from step 16: > learning_starts and a full batch
    assert len(agent.log.episode_returns) == 400
    assert np.mean(agent.log.episode_returns[-50:]) > 0.85                # epsilon reached 0.05
    np.testing.assert_array_equal(agent.evaluate(Bandit(), 3), [1.0, 1.0, 1.0])


def test_dqn_schedules_and_target_copies():
    venv = SyncVectorEnv([Counter, Counter])
    agent = DQN(venv, learning_rate=1e-3, learning_starts=4, target_update_interval=6, train_frequency=2,
                exploration_steps=10, batch_size=4, seed=0)
    copies = []
    agent._update_target = lambda: copies.append(agent.num_timesteps)
    agent.learn(20)
    assert copies == [6, 12, 18]
    assert agent.log.n_updates == 4                       # env steps 6, 10, 14, 18 (even vector steps past 4)
    assert agent.num_timesteps == 20 and agent.epsilon() == pytest.approx(0.05)
    assert agent.optimizers[0].param_groups[0]["lr"] == pytest.approx(1e-3 * (1 - 18 / 20))
    assert agent.log.episode_returns == [6.0] * 6 and agent.log.episode_steps == [6, 6, 12, 12, 18, 18]


def test_dqn_target_update_tau():
    agent = DQN(SyncVectorEnv([Counter]), tau=0.25, seed=0)
    with torch.no_grad():
        for p in agent.q_net.parameters():
            p.add_(1.0)
    before = [t.clone() for t in agent.target_net.parameters()]
    agent._update_target()
    for t, b, p in zip(agent.target_net.parameters(), before, agent.q_net.parameters()):
        torch.testing.assert_close(t, 0.75 * b + 0.25 * p)


def test_replay_stores_final_obs_and_termination_only():
    agent = DQN(SyncVectorEnv([Counter]), learning_starts=10**6, seed=0)
    agent.learn(6)
    np.testing.assert_array_equal(agent.buffer.next_obs[:6, 0], [1, 2, 3, 1, 2, 3])
    np.testing.assert_array_equal(agent.buffer.dones[:6], [0, 0, 1, 0, 0, 1])


def test_dqn_rejections():
    with pytest.raises(ValueError, match="discrete action space"):
        env = Counter()
        env.action_space = Box(0, 1, shape=(1,))
        DQN(env)
    for kw, msg in ((dict(learning_rate=0), "learning_rate"), (dict(batch_size=0), "batch_size"),
                    (dict(gamma=1.5), "gamma"), (dict(tau=0.0), "tau")):
        with pytest.raises(ValueError, match=msg):
            DQN(Counter(), **kw)
    with pytest.raises(ValueError, match="total_timesteps"):
        DQN(SyncVectorEnv([Counter, Counter])).learn(1)
