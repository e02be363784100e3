import math

import pytest
import torch

from iclr26.models.diffusion import ConditionalMLP
from iclr26.multimodal.prismaudio import (FastGRPOTrainer, clipped_loss, group_advantages,
                                          hybrid_ode_sde_sample, sde_mean_std)


def test_sde_step_reduces_to_euler_at_zero_noise():
    x, v = torch.randn(3, 2), torch.randn(3, 2)
    mean, std = sde_mean_std(x, v, 0.6, 0.1, noise_level=0.0)
    assert torch.allclose(mean, x - 0.1 * v) and std == 0.0


def test_sde_step_reference():
    x, v, t, dt, a = torch.tensor([[1.0, -2.0]]), torch.tensor([[0.5, 0.25]]), 0.5, 0.1, 0.7
    sigma = a * math.sqrt(t / (1 - t))
    ref = x - dt * (v + sigma**2 / (2 * t) * (x + (1 - t) * v))
    mean, std = sde_mean_std(x, v, t, dt, a)
    assert torch.allclose(mean, ref) and math.isclose(std, sigma * math.sqrt(dt))


def test_window_zero_is_ode_and_deterministic():
    torch.manual_seed(0)
    m = ConditionalMLP(2, 3, width=16, depth=1)
    noise = torch.randn(4, 2)
    y = torch.tensor([0, 1, 2, 0])
    x, traj = hybrid_ode_sde_sample(m, y, (2,), steps=5, window=0, start=0, noise=noise)
    ref = noise.clone()
    for t in torch.linspace(1, 0, 6)[:-1]:
        ref = ref - 0.2 * m(ref, torch.full((4,), float(t)), y)
    assert torch.allclose(x, ref, atol=1e-6) and traj["logps"].shape == (0, 4)


def test_window_records_steps():
    m = ConditionalMLP(2, 3, width=16, depth=1)
    x, traj = hybrid_ode_sde_sample(m, torch.tensor([0, 1]), (2,), steps=10, window=2, start=3,
                                    generator=torch.Generator().manual_seed(0))
    assert traj["logps"].shape == (2, 2) and len(traj["xs"]) == 2 and traj["ts"][0] == pytest.approx(0.7)


def test_group_advantages_reference():
    r = torch.tensor([1.0, 2.0, 3.0, 5.0, 5.0, 5.0])
    a = group_advantages(r, 3)
    assert torch.allclose(a[:3], (r[:3] - 2) / (r[:3].std(unbiased=False) + 1e-4))
    assert torch.allclose(a[3:], torch.zeros(3))


def test_clipped_loss_on_policy_is_minus_mean_adv():
    lp = torch.zeros(2, 4)
    adv = torch.tensor([1.0, -1.0, 2.0, 0.0])
    assert torch.isclose(clipped_loss(lp, lp, adv), -adv.mean())
    big = torch.full((2, 4), 1.0)
    assert torch.isclose(clipped_loss(big, lp, torch.ones(4)), torch.tensor(-1.2))


def test_trainer_learns_simple_reward():
    torch.manual_seed(0)
    m = ConditionalMLP(2, 2, width=32, depth=1)
    tr = FastGRPOTrainer(m, [lambda x, y: x[:, 0]], steps=6, window=2, group_size=8, lr=1e-3, seed=0)
    logs = [tr.step([0, 1]) for _ in range(40)]
    assert sum(l["reward"] for l in logs[-10:]) > sum(l["reward"] for l in logs[:10])
    assert logs[0]["grad_evals"] == 2 * 16


def test_rejects_bad_input():
    m = ConditionalMLP(2, 2, width=8, depth=1)
    with pytest.raises(ValueError, match="window"):
        hybrid_ode_sde_sample(m, torch.tensor([0]), (2,), steps=4, window=4)
    with pytest.raises(ValueError, match="group_size"):
        group_advantages(torch.ones(5), 2)
    with pytest.raises(ValueError, match="finite"):
        group_advantages(torch.tensor([1.0, float("nan")]), 2)
    with pytest.raises(ValueError, match="reward_fns"):
        FastGRPOTrainer(m, [])
    with pytest.raises(ValueError, match="lr"):
        FastGRPOTrainer(m, [lambda x, y: x[:, 0]], lr=-1.0)
    with pytest.raises(TypeError, match="steps"):
        hybrid_ode_sde_sample(m, torch.tensor([0]), (2,), steps="4")


def test_smoke_experiment():
    from iclr26.multimodal.prismaudio.experiment import run
    out = run("smoke", 0)
    assert set(out["metrics"]["semantic"]) == {"pretrained", "fast_grpo", "flow_grpo", "sliding_window", "semantic_only"}
    from iclr26.multimodal.prismaudio.experiment import LR_GRID
    assert out["info"]["lr_fast_grpo"] in LR_GRID and out["info"]["lr_flow_grpo"] in LR_GRID


def test_arm_wiring(monkeypatch):
    """Each arm gets its own sampler settings, tuned lr, and reward weights."""
    from iclr26.multimodal.prismaudio import experiment as ex
    calls = []

    def fake_rl(model, gm, cfg, seed, weights, full_sde=False, random_window=True, lr=3e-4):
        calls.append((tuple(weights), full_sde, random_window, lr))
        model.tag = (tuple(weights), full_sde, random_window, lr)
        return model

    def fake_eval(model, gm, n, seed, split="test"):
        tag = getattr(model, "tag", None)
        if split == "val":  # fast prefers 1e-4, flow prefers 1e-3
            return [(-abs(tag[3] - (1e-3 if tag[1] else 1e-4))), 0.0, 0.0]
        return [0.0, 0.0, 0.0] if tag is None else [1.0, float(tag[1]), float(not tag[2])]

    monkeypatch.setattr(ex, "_rl", fake_rl)
    monkeypatch.setattr(ex, "_evaluate", fake_eval)
    out = ex.run("smoke", 0)
    assert out["info"]["lr_fast_grpo"] == 1e-4 and out["info"]["lr_flow_grpo"] == 1e-3
    assert len(calls) == 2 * len(ex.LR_GRID) + 2
    assert ((1.0, 0.3, 0.3), False, False, 1e-4) in calls  # sliding window uses fast's tuned lr
    assert ((1.0, 0.0, 0.0), False, True, 1e-4) in calls  # semantic-only
    m = out["metrics"]
    assert m["semantic"]["pretrained"] == 0.0 and m["semantic"]["semantic_only"] == 1.0
    assert m["aesthetic"]["flow_grpo"] == 1.0 and m["aesthetic"]["fast_grpo"] == 0.0
    assert m["spatial"]["sliding_window"] == 1.0 and m["spatial"]["fast_grpo"] == 0.0


def test_trainer_rejects_bad_noise_and_clip_at_construction():
    import torch
    from iclr26.multimodal.prismaudio.fast_grpo import FastGRPOTrainer, clipped_loss

    model = torch.nn.Linear(2, 2)
    reward = [lambda x, y: -x.pow(2).sum(-1)]
    for kw, word in ((dict(noise_level=float("nan")), "noise_level"), (dict(noise_level=-1.0), "noise_level"),
                     (dict(noise_level=0.0), "noise_level"), (dict(clip=-0.1), "clip")):
        with pytest.raises(ValueError, match=word):
            FastGRPOTrainer(model, reward, **kw)
    with pytest.raises(ValueError, match="finite"):
        clipped_loss(torch.zeros(3), torch.zeros(3), torch.tensor([0.0, float("nan"), 1.0]))
