"""Tests of iclr26.common.training: the minibatch stream and the shared training loop."""
import itertools
import math

import pytest
import torch
from torch import nn

from iclr26.common.training import TrainResult, batches, train


# ----------------------------------------------------------------------------- TrainResult
def test_train_result_first_step_reaching():
    r = TrainResult(losses=[3.0, 2.0], evals=[(0, {"acc": 0.1, "loss": 2.0}), (5, {"acc": 0.5, "loss": 1.0}),
                                              (10, {"acc": 0.9, "loss": 0.5})])
    assert r.final_loss == 2.0
    assert r.first_step_reaching("acc", 0.5) == 5          # >= counts
    assert r.first_step_reaching("acc", 0.6) == 10
    assert r.first_step_reaching("acc", 0.95) is None
    assert r.first_step_reaching("loss", 1.0, mode="min") == 5
    assert r.first_step_reaching("loss", 0.4, mode="min") is None
    assert r.first_step_reaching("loss", 2.0, mode="min") == 0
    assert math.isnan(TrainResult().final_loss)
    assert TrainResult().losses == [] and TrainResult().evals == []


# ----------------------------------------------------------------------------- batches
def test_batches_cover_each_pass_once_in_a_new_order():
    x = torch.arange(10).float()[:, None]
    y = torch.arange(10)
    it = batches(x, y, 3, torch.Generator().manual_seed(0))
    passes = []
    for _ in range(4):
        rows = [next(it) for _ in range(3)]                  # 10 // 3 = 3 full batches per pass
        for bx, by in rows:
            assert bx.shape == (3, 1) and by.shape == (3,)
            assert torch.equal(bx[:, 0].long(), by)          # x and y stay paired
        ids = torch.cat([by for _, by in rows])
        assert len(set(ids.tolist())) == 9                    # no repeats within a pass
        passes.append(ids.tolist())
    assert len({tuple(p) for p in passes}) == 4               # reshuffled every pass
    again = batches(x, y, 3, torch.Generator().manual_seed(0))
    assert [next(again)[1].tolist() for _ in range(3)] == [passes[0][i:i + 3] for i in (0, 3, 6)]


def test_batches_exact_multiple_and_small_sets():
    x, y = torch.arange(6).float(), torch.arange(6)
    it = batches(x, y, 2, torch.Generator().manual_seed(1))
    ids = torch.cat([next(it)[1] for _ in range(3)])
    assert sorted(ids.tolist()) == list(range(6))
    it = batches(x, y, 6, torch.Generator().manual_seed(1))
    assert sorted(next(it)[1].tolist()) == list(range(6))
    it = batches(x[:4], y[:4], 8, torch.Generator().manual_seed(1))   # n < batch: whole set each time
    first, second = next(it)[1], next(it)[1]
    assert sorted(first.tolist()) == sorted(second.tolist()) == [0, 1, 2, 3]


def test_batches_rejections():
    with pytest.raises(ValueError, match=r"^batch_size must be positive, got 0$"):
        next(batches(torch.zeros(4), torch.zeros(4), 0, torch.Generator()))
    with pytest.raises(ValueError, match=r"^x and y must have the same number of rows, got 4 and 3$"):
        next(batches(torch.zeros(4), torch.zeros(3), 2, torch.Generator()))


# ----------------------------------------------------------------------------- train
class _Recorder(torch.optim.SGD):
    """SGD that records the gradient norm it sees at each step."""

    def __init__(self, params, lr):
        super().__init__(params, lr=lr)
        self.grad_norms = []

    def step(self, closure=None):
        self.grad_norms.append(float(torch.sqrt(sum((p.grad ** 2).sum() for g in self.param_groups
                                                     for p in g["params"]))))
        return super().step(closure)


def _quadratic():
    """Loss 1/2 ||w - b||^2 on a fixed 'batch' b: GD with lr eta shrinks w - b by (1 - eta) per step."""
    model = nn.Linear(1, 3, bias=False)
    with torch.no_grad():
        model.weight.copy_(torch.tensor([[4.0], [-2.0], [1.0]]))
    data = itertools.repeat(torch.tensor([[1.0], [1.0], [1.0]]))
    return model, data, lambda m, b: 0.5 * ((m.weight - b) ** 2).sum()


def test_train_runs_plain_gradient_descent():
    model, data, loss_fn = _quadratic()
    res = train(model, torch.optim.SGD(model.parameters(), lr=0.5), data, 4, loss_fn)
    want = [0.5 * 18 * 0.25 ** t for t in range(4)]           # losses before each step
    assert res.losses == pytest.approx(want)
    torch.testing.assert_close(model.weight, torch.tensor([[1 + 3 / 16], [1 - 3 / 16], [1.0]]))
    assert res.evals == [] and model.training


def test_train_steps_the_scheduler_every_step():
    model, data, loss_fn = _quadratic()
    opt = torch.optim.SGD(model.parameters(), lr=1.0)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 0.5 ** s)
    lrs = []
    train(model, opt, data, 3, loss_fn, scheduler=sched, callback=lambda s, m, v: lrs.append(opt.param_groups[0]["lr"]))
    assert lrs == [0.5, 0.25, 0.125]                          # stepped after each optimizer step
    assert sched.last_epoch == 3
    # lr 1, then 0.5, then 0.25: w - b scales by 0 after the first step already
    torch.testing.assert_close(model.weight, torch.ones(3, 1))


def test_train_clips_gradients():
    model, data, loss_fn = _quadratic()
    opt = _Recorder(model.parameters(), lr=0.1)
    train(model, opt, data, 2, loss_fn, clip_grad=0.5)
    assert opt.grad_norms == pytest.approx([0.5, 0.5])
    model, data, loss_fn = _quadratic()
    opt = _Recorder(model.parameters(), lr=0.1)
    train(model, opt, data, 1, loss_fn)
    assert opt.grad_norms == pytest.approx([math.sqrt(18)])


def test_train_evaluates_in_eval_mode_without_grad():
    model, data, loss_fn = _quadratic()
    seen = []

    def eval_fn(m):
        seen.append((m.training, torch.is_grad_enabled()))
        return {"w0": float(m.weight[0, 0])}

    res = train(model, torch.optim.SGD(model.parameters(), lr=0.5), data, 7, loss_fn, eval_fn=eval_fn, eval_every=3)
    assert [s for s, _ in res.evals] == [0, 3, 6, 7]
    assert res.evals[0][1]["w0"] == 4.0
    assert res.evals[1][1]["w0"] == pytest.approx(1 + 3 * 0.5 ** 3)
    assert seen == [(False, False)] * 4
    assert model.training
    # no duplicate evaluation when the last step is a multiple of eval_every
    model, data, loss_fn = _quadratic()
    res = train(model, torch.optim.SGD(model.parameters(), lr=0.5), data, 6, loss_fn, eval_fn=eval_fn, eval_every=3)
    assert [s for s, _ in res.evals] == [0, 3, 6]
    # without eval_every: one evaluation, after the last step
    model, data, loss_fn = _quadratic()
    res = train(model, torch.optim.SGD(model.parameters(), lr=0.5), data, 2, loss_fn, eval_fn=eval_fn)
    assert [s for s, _ in res.evals] == [2]
    model.eval()
    train(model, torch.optim.SGD(model.parameters(), lr=0.5), data, 1, loss_fn, eval_fn=eval_fn)
    assert model.training                                      # train() puts the model in training mode


def test_train_callback_and_step_fn():
    model, data, loss_fn = _quadratic()
    calls = []
    train(model, torch.optim.SGD(model.parameters(), lr=0.5), data, 3, loss_fn,
          callback=lambda s, m, v: calls.append((s, v)))
    assert [s for s, _ in calls] == [1, 2, 3]
    assert [v for _, v in calls] == pytest.approx([9.0, 9.0 / 4, 9.0 / 16])
    model, data, loss_fn = _quadratic()
    used = []

    def step_fn(m, opt, batch):
        used.append(batch.shape)
        opt.zero_grad()
        loss = loss_fn(m, batch)
        loss.backward()
        opt.step()
        return loss * 0 + 42.0

    res = train(model, torch.optim.SGD(model.parameters(), lr=0.5), data, 2, loss_fn=None, step_fn=step_fn)
    assert res.losses == [42.0, 42.0] and len(used) == 2


def test_train_zero_grads_between_steps():
    model, data, loss_fn = _quadratic()
    opt = _Recorder(model.parameters(), lr=0.0)              # lr 0: the same gradient every step
    train(model, opt, data, 3, loss_fn)
    assert opt.grad_norms == pytest.approx([math.sqrt(18)] * 3)


def test_train_stops_at_nan_and_validates_steps():
    model, data, _ = _quadratic()
    vals = iter([1.0, float("nan"), 3.0])
    calls = []
    res = train(model, torch.optim.SGD(model.parameters(), lr=0.0), data, 3,
                lambda m, b: m.weight.sum() * 0 + next(vals), callback=lambda *a: calls.append(a),
                eval_fn=lambda m: {}, eval_every=0)
    assert len(res.losses) == 2 and math.isnan(res.losses[-1]) and len(calls) == 1
    assert [s for s, _ in res.evals] == [2]
    res = train(model, torch.optim.SGD(model.parameters(), lr=0.1), data, 0, lambda m, b: m.weight.sum(),
                eval_fn=lambda m: {"x": 1.0})
    assert res.losses == [] and res.evals == [(0, {"x": 1.0})]
    with pytest.raises(ValueError, match=r"^steps must be >= 0, got -1$"):
        train(model, torch.optim.SGD(model.parameters(), lr=0.1), data, -1, lambda m, b: m.weight.sum())


def test_batches_drop_a_short_last_batch_and_accept_batch_size_one():
    x, y = torch.arange(5).float(), torch.arange(5)
    it = batches(x, y, 2, torch.Generator().manual_seed(2))
    sizes = [len(next(it)[1]) for _ in range(6)]
    assert sizes == [2] * 6                                    # 5 // 2 = 2 full batches per pass
    it = batches(x, y, 1, torch.Generator().manual_seed(2))
    assert sorted(int(next(it)[1]) for _ in range(5)) == [0, 1, 2, 3, 4]


def test_train_callback_receives_the_model():
    model, data, loss_fn = _quadratic()
    got = []
    train(model, torch.optim.SGD(model.parameters(), lr=0.1), data, 2, loss_fn,
          callback=lambda s, m, v: got.append(m))
    assert got == [model, model]


def test_train_clears_gradients_to_none():
    """A parameter without a gradient this step is skipped (weight decay too), not decayed on a zero gradient."""
    a, b = nn.Parameter(torch.ones(1)), nn.Parameter(torch.ones(1))
    model = nn.Module()
    model.a, model.b = a, b
    calls = iter(range(10))

    def loss_fn(m, batch):
        return (m.a * 2).sum() + ((m.b * 3).sum() if next(calls) == 0 else 0.0)

    train(model, torch.optim.SGD(model.parameters(), lr=0.1, weight_decay=0.5), itertools.repeat(None), 3, loss_fn)
    # b: one step with grad 3 + 0.5 * 1, then no gradient (None): skipped
    assert b.item() == pytest.approx(1 - 0.1 * 3.5)
