"""Tests for iclr26.rl.scorer (arXiv:2508.07452)."""
import copy

import numpy as np
import pytest
import torch

from iclr26.models.rl import DQN, Box, CartPoleEnv, Discrete, QNetwork, SyncVectorEnv
from iclr26.rl.scorer import FOLLOWER_LOSSES, ScorerDQN, bellman_error_variance, msbe
from iclr26.rl.scorer.experiment import ARMS, learning_curve_auc, make_agent, run


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
    # a network without the encoder/head split fails when the two optimizers are built
    flat = torch.nn.Sequential(torch.nn.Linear(3, 2))
    with pytest.raises(AttributeError, match="head"):
        ScorerDQN(env, q_net=flat)
    half = torch.nn.Module()
    half.encoder = torch.nn.Linear(3, 4)                 # an encoder without a head
    with pytest.raises(AttributeError, match="head"):
        ScorerDQN(env, q_net=half)
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
    cfg = dict(exploration_steps=10, learning_starts=5, target_update_interval=10)
    env = SyncVectorEnv([CartPoleEnv])
    assert type(make_agent("dqn", env, cfg, 0)) is DQN
    assert make_agent("scorer", env, cfg, 0).follower_loss == "be_variance"
    assert make_agent("scorer_msbe", env, cfg, 0).follower_loss == "msbe"
    assert ARMS == ("dqn", "scorer", "scorer_msbe")
    with pytest.raises(ValueError, match="unknown arm"):
        make_agent("ppo", env, cfg, 0)


def test_smoke_run_is_deterministic():
    a, b = run("smoke", 0), run("smoke", 0)
    assert a["metrics"] == b["metrics"]
    assert set(a["metrics"]["final_return"]) == set(ARMS)


@pytest.mark.slow
def test_quick_scale_runs():
    out = run("quick", 0)
    assert all(np.isfinite(v) for m in out["metrics"].values() for v in m.values())
