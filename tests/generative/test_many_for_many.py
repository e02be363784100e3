"""Tests of Many-for-Many (src/iclr26/generative/many_for_many): the light condition adapter, the
unified condition input, the adapter-conditioned video DiT and multi-task flow-matching training."""
import numpy as np
import pytest
import torch
from torch.nn import functional as F

from iclr26.generative.many_for_many import (TASKS, MfMConditionAdapter, MfMVideoTransformer, bind_condition,
                                             flow_matching_loss, sample_task, task_condition, task_mask,
                                             train_multitask, unified_condition)
from iclr26.models import diffusion as D
from iclr26.models.video import moving_digits

FRAMES = 4


def _model(seed=0, width=32, depth=2):
    """An adapter-conditioned video DiT with non-degenerate weights (adaLN modulation, output layer
    and positions drawn; the zero init would make the DiT output 0 whatever the condition)."""
    torch.manual_seed(seed)
    m = MfMVideoTransformer(FRAMES, D.DiTConfig(image_size=16, patch=4, width=width, depth=depth, heads=4))
    with torch.no_grad():
        for b in m.dit.blocks:
            b.ada[1].weight.normal_(0, 0.3)
            b.ada[1].bias.normal_(0, 0.3)
        m.dit.ada_out[1].weight.normal_(0, 0.3)
        m.dit.out.weight.normal_(0, 0.3)
        m.dit.pos.normal_(0, 1.0)
    return m.eval()


def _videos(B=3, seed=1):
    X, y = moving_digits(B, frames=FRAMES, seed=seed)
    return torch.from_numpy(X), torch.from_numpy(y)


def _reference_adapter(ad, cond):
    """The official ConvitConditioningEmbedding forward, written with functional convs on the
    adapter's weights: frames folded into the batch for 2-D convs, unfolded for the 3-D ones."""
    B, _, f, H, W = cond.shape
    e = cond.transpose(1, 2).reshape(B * f, -1, H, W)
    e = F.silu(F.conv2d(e, ad.conv_in.weight, ad.conv_in.bias, padding=1))
    for blk in ad.blocks:
        if isinstance(blk, torch.nn.Conv3d):
            e5 = e.reshape(B, f, *e.shape[1:]).transpose(1, 2)
            e5 = F.conv3d(e5, blk.weight, blk.bias, stride=blk.stride, padding=1)
            f = e5.shape[2]
            e = e5.transpose(1, 2).reshape(B * f, *e5.shape[1:2], *e5.shape[3:])
        else:
            e = F.conv2d(e, blk.weight, blk.bias, stride=blk.stride, padding=1)
        e = F.silu(e)
    e = F.conv2d(e, ad.conv_out.weight, ad.conv_out.bias, padding=1)
    return e.reshape(B, f, *e.shape[1:]).transpose(1, 2)


# ------------------------------------------------------------------------------------ adapter


def test_adapter_structure_follows_official_light_adapter():
    ad = MfMConditionAdapter(64)
    assert (ad.conditioning_channels, ad.block_out_channels, ad.temporal_stride) == (4, (16, 32, 96, 256), 2)
    kinds = [type(b).__name__ for b in ad.blocks]
    assert kinds == ["Conv2d", "Conv3d", "Conv2d", "Conv2d", "Conv2d", "Conv3d"]
    chans = [(b.in_channels, b.out_channels) for b in ad.blocks]
    assert chans == [(16, 16), (16, 32), (32, 32), (32, 96), (96, 96), (96, 256)]
    assert [b.stride for b in ad.blocks] == [(1, 1), (2, 2, 2), (1, 1), (2, 2), (1, 1), (2, 2, 2)]
    assert all(b.kernel_size in ((3, 3), (3, 3, 3)) for b in ad.blocks)
    assert (ad.conv_in.in_channels, ad.conv_in.out_channels, ad.conv_out.out_channels) == (4, 16, 64)
    assert ad.spatial_factor == 8


@pytest.mark.parametrize("temporal_stride,frames,out_frames", [(2, 5, 2), (2, 8, 2), (1, 5, 5)])
def test_adapter_matches_functional_reference(temporal_stride, frames, out_frames):
    torch.manual_seed(0)
    ad = MfMConditionAdapter(24, 3, (4, 8, 12, 16), temporal_stride=temporal_stride)
    cond = torch.randn(2, 3, frames, 16, 16)
    out = ad(cond)
    assert out.shape == (2, 24, out_frames, 2, 2)
    torch.testing.assert_close(out, _reference_adapter(ad, cond), rtol=1e-5, atol=1e-5)


def test_adapter_temporal_receptive_field():
    """With temporal stride 1 and one Conv3d (kernel 3), output frame f sees input frames f-1..f+1."""
    torch.manual_seed(1)
    ad = MfMConditionAdapter(8, 2, (4, 8, 8), temporal_stride=1)
    cond = torch.randn(1, 2, 4, 16, 16)
    bumped = cond.clone()
    bumped[:, :, 0] += 1.0
    diff = (ad(bumped) - ad(cond)).abs().amax((0, 1, 3, 4))
    assert diff[0] > 0 and diff[1] > 0
    assert diff[2] == 0 and diff[3] == 0


# --------------------------------------------------------------------------- unified condition


def test_task_masks():
    assert task_mask("c2v", 2, 4, 16).sum() == 0
    m = task_mask("i2v", 2, 4, 16)
    assert m.shape == (2, 4, 1, 16, 16)
    assert m[:, 0].min() == 1 and m[:, 1:].max() == 0
    m = task_mask("inpaint", 1, 4, 16)
    assert m.sum() == 4 * (256 - 64)
    assert m[0, :, 0, 4:12, 4:12].max() == 0 and m[0, :, 0, 3, :].min() == 1 and m[0, :, 0, :, 12].min() == 1
    m = task_mask("inpaint", 1, 2, 16, hole=4)
    assert m[0, 0, 0, 6:10, 6:10].max() == 0 and m.sum() == 2 * (256 - 16)


def test_unified_condition_layout_and_values():
    X, _ = _videos(2)
    cond, mask = task_condition(X, ["i2v", "inpaint"])
    assert cond.shape == (2, 2, FRAMES, 16, 16)                     # (B, C + 1, F, H, W)
    torch.testing.assert_close(cond[:, 1], mask[:, :, 0])           # last channel: the mask
    torch.testing.assert_close(cond[0, 0, 0], X[0, 0, 0])           # i2v: the first frame given
    assert cond[0, 0, 1:].abs().max() == 0                          # the rest hidden (0, not background -1)
    assert cond[1, 0, :, 4:12, 4:12].abs().max() == 0
    torch.testing.assert_close(cond[1, 0, :, :4], X[1, :, 0, :4])
    cond_c2v, mask_c2v = task_condition(X, "c2v")
    assert cond_c2v.abs().max() == 0 and mask_c2v.max() == 0


def test_condition_does_not_see_hidden_pixels():
    X, _ = _videos(2)
    Y = X.clone()
    Y[:, 1:] = torch.randn_like(Y[:, 1:])                           # change what i2v must generate
    torch.testing.assert_close(task_condition(X, "i2v")[0], task_condition(Y, "i2v")[0])
    Y = X.clone()
    Y[..., 4:12, 4:12] = 0.7                                        # change the inpainting hole
    torch.testing.assert_close(task_condition(X, "inpaint")[0], task_condition(Y, "inpaint")[0])


# ------------------------------------------------------------------------------------ model


def test_no_condition_and_zero_adapter_reduce_to_the_plain_dit():
    m = _model()
    X, y = _videos(2)
    t = torch.tensor([0.3, 0.8])
    x = X + 0.5 * torch.randn(X.shape, generator=torch.Generator().manual_seed(0))
    plain = m.dit(x, t, y)
    torch.testing.assert_close(m(x, t, y), plain)
    cond, _ = task_condition(X, "i2v")
    assert (m(x, t, y, cond) - plain).abs().max() > 1e-3            # the condition changes the output
    torch.testing.assert_close(m(x, t, y), plain)                   # and is gone after the call
    with torch.no_grad():
        m.adapter.conv_out.weight.zero_()
        m.adapter.conv_out.bias.zero_()
    torch.testing.assert_close(m(x, t, y, cond), plain)


def test_condition_tokens_are_added_at_their_grid_position():
    """The adapter's output at (frame f, row r, column c) goes to token f * g^2 + r * g + c, the
    token of patch (r, c) of frame f."""
    m = _model()
    X, y = _videos(2)
    cond, _ = task_condition(X, "inpaint")
    seen = []
    h = m.dit.patch_in.register_forward_hook(lambda mod, i, o: seen.append(o.detach().clone()))
    try:
        m(X, torch.tensor([0.5, 0.5]), y)
        m(X, torch.tensor([0.5, 0.5]), y, cond)
    finally:
        h.remove()
    # forward hooks run in registration order: the model's own hook (registered at construction)
    # adds the condition before the test's hook sees the output
    e = m.adapter(cond)                                             # (B, width, F, 4, 4)
    tokens = m.condition_tokens(cond)
    torch.testing.assert_close(seen[1] - seen[0], tokens, rtol=1e-5, atol=1e-5)
    for f, r, c in [(0, 0, 0), (1, 2, 3), (3, 3, 1)]:
        torch.testing.assert_close(tokens[:, f * 16 + r * 4 + c], e[:, :, f, r, c])
    # the token of patch (r, c) of frame f is the patch of pixels [4r:4r+4, 4c:4c+4] of that frame
    x = torch.zeros(1, FRAMES, 1, 16, 16)
    x[0, 2, 0, 8:12, 4:8] = 1.0
    got = []
    h = m.dit.patch_in.register_forward_hook(lambda mod, i, o: got.append(i[0].detach().clone()))
    try:
        m(x, torch.tensor([0.5]), torch.tensor([1]))
    finally:
        h.remove()
    nonzero = torch.nonzero(got[0][0].abs().sum(-1)).flatten().tolist()
    assert nonzero == [2 * 16 + 2 * 4 + 1]


def test_bind_condition_repeats_for_guidance_and_checks_batch():
    m = _model()
    X, y = _videos(2)
    cond, _ = task_condition(X, "i2v")
    bound = bind_condition(m, cond)
    assert bound.n_classes == m.n_classes
    x = torch.randn(4, *X.shape[1:])
    t = torch.full((4,), 0.4)
    yy = torch.cat([y, torch.full_like(y, 10)])
    out = bound(x, t, yy)
    torch.testing.assert_close(out[:2], m(x[:2], t[:2], yy[:2], cond))
    torch.testing.assert_close(out[2:], m(x[2:], t[2:], yy[2:], cond))
    with pytest.raises(ValueError, match=r"^batch 3 is not a multiple of the condition's 2$"):
        bound(x[:3], t[:3], yy[:3])
    s = D.sample(bound, y, tuple(X.shape[1:]), "flow", steps=2, guidance=D.ClassifierFreeGuidance(1.0),
                 generator=torch.Generator().manual_seed(0))
    assert s.shape == X.shape and torch.isfinite(s).all()


def test_state_dict_round_trip():
    m = _model()
    m2 = MfMVideoTransformer(FRAMES, m.dit.config)
    m2.load_state_dict(m.state_dict())
    X, y = _videos(2)
    cond, _ = task_condition(X, "inpaint")
    t = torch.tensor([0.2, 0.9])
    torch.testing.assert_close(m2.eval()(X, t, y, cond), m(X, t, y, cond))
    assert any(k.startswith("adapter.conv_in") for k in m.state_dict())
    ad = MfMConditionAdapter(8, 2, (4, 8)).double()                 # the adapter itself is dtype-generic
    assert ad(cond.double()).dtype == torch.float64


# ---------------------------------------------------------------------------- training / eval


def test_flow_matching_loss_matches_direct_computation():
    m = _model()
    X, y = _videos(3, seed=4)
    grid = torch.tensor([0.1, 0.5, 0.9])
    for task in TASKS:
        cond, mask = task_condition(X, task)
        g = torch.Generator().manual_seed(5)
        ref = torch.zeros(3)
        with torch.no_grad():
            for t in grid:
                eps = torch.randn(X.shape, generator=g)
                xt = (1 - t) * X + t * eps
                err = (m(xt, torch.full((3,), float(t)), y, cond) - (eps - X)) ** 2
                for i in range(3):
                    ref[i] += err[i][mask[i] == 0].mean() / 3
        per = flow_matching_loss(m, X, y, task, t_grid=grid, seed=5, per_video=True)
        np.testing.assert_allclose(per, ref.numpy(), rtol=1e-5)
        assert flow_matching_loss(m, X, y, task, t_grid=grid, seed=5) == pytest.approx(float(ref.mean()), rel=1e-5)


def test_untrained_model_loss_is_the_zero_velocity_level():
    """The zero-initialised output layer predicts v = 0: the loss is E[(eps - x_0)^2] = 1 + E[x_0^2]
    over the generated pixels (the floor of the claims)."""
    torch.manual_seed(0)
    m = MfMVideoTransformer(FRAMES, D.DiTConfig(image_size=16, patch=4, width=16, depth=1, heads=4))
    X, y = _videos(64, seed=2)
    _, mask = task_condition(X, "i2v")
    level = 1.0 + float((X[mask == 0] ** 2).mean())
    assert flow_matching_loss(m, X, y, "i2v", seed=0) == pytest.approx(level, rel=0.02)


def test_training_learns_and_single_task_weights_reduce():
    X, y = moving_digits(64, frames=FRAMES, seed=3)
    Xv, yv = moving_digits(32, frames=FRAMES, seed=4, split="val")
    kw = dict(steps=30, batch_size=8, lr=3e-3, seed=1, ema=None)

    def fresh():
        torch.manual_seed(7)
        return MfMVideoTransformer(FRAMES, D.DiTConfig(image_size=16, patch=4, width=16, depth=1, heads=4))

    m = fresh()
    before = flow_matching_loss(m, Xv, yv, "inpaint")
    losses = train_multitask(m, X, y, TASKS, **kw)
    assert len(losses) == 30
    assert flow_matching_loss(m, Xv, yv, "inpaint") < 0.9 * before
    assert np.mean(losses[-5:]) < np.mean(losses[:5])
    a, b = fresh(), fresh()
    la = train_multitask(a, X, y, ("i2v",), **kw)
    lb = train_multitask(b, X, y, TASKS, task_weights=[0.0, 1.0, 0.0], **kw)
    assert la == lb                                                # weight 1 on i2v = single-task i2v
    c = fresh()
    lc = train_multitask(c, X, y, ("c2v",), **kw)
    assert lc != la                                                # the task changes the training
    d = fresh()
    train_multitask(d, X, y, ("i2v",), **dict(kw, ema=0.9))
    assert not torch.equal(d.dit.out.weight, a.dit.out.weight)     # the EMA weights are kept


def test_sample_task_is_deterministic_and_c2v_ignores_video():
    m = _model()
    X, y = _videos(2)
    noise = torch.randn(X.shape, generator=torch.Generator().manual_seed(3))
    s1 = sample_task(m, X, y, "c2v", steps=3, noise=noise)
    s2 = sample_task(m, torch.zeros_like(X), y, "c2v", steps=3, noise=noise)
    torch.testing.assert_close(s1, s2)
    s3 = sample_task(m, X, y, "i2v", steps=3, noise=noise)
    assert s3.shape == X.shape and (s3 - s1).abs().max() > 1e-4
    manual = D.sample(bind_condition(m, task_condition(X, "i2v")[0]), y, tuple(X.shape[1:]), "flow", steps=3,
                      noise=noise)
    torch.testing.assert_close(s3, manual)


# ---------------------------------------------------------------------------------- rejection


def test_rejects_bad_input():
    with pytest.raises(ValueError, match=r"^task must be one of"):
        task_mask("t2i", 1, 2, 16)
    with pytest.raises(ValueError, match=r"^hole must be in 1\.\.15, got 16$"):
        task_mask("inpaint", 1, 2, 16, hole=16)
    with pytest.raises(ValueError, match=r"^batch, frames and size must be >= 1"):
        task_mask("c2v", 0, 2, 16)
    X, y = _videos(2)
    with pytest.raises(ValueError, match=r"^mask must hold only 0 and 1$"):
        unified_condition(X, torch.full((2, FRAMES, 1, 16, 16), 0.5))
    with pytest.raises(ValueError, match=r"^mask \(2, 4, 2, 16, 16\) must match video"):
        unified_condition(X, torch.ones(2, FRAMES, 2, 16, 16))
    with pytest.raises(ValueError, match=r"^video and mask must be \(B, F, C, H, W\)"):
        unified_condition(X[0], torch.ones(FRAMES, 1, 16, 16))
    with pytest.raises(ValueError, match=r"^need one task per video: 2 videos, 1 tasks$"):
        task_condition(X, ["c2v"])
    with pytest.raises(ValueError, match=r"^temporal_stride must be 1 or 2, got 3$"):
        MfMConditionAdapter(8, temporal_stride=3)
    with pytest.raises(ValueError, match=r"^block_out_channels must be a non-empty sequence"):
        MfMConditionAdapter(8, block_out_channels=())
    with pytest.raises(ValueError, match=r"^embedding_channels and conditioning_channels must be >= 1"):
        MfMConditionAdapter(0)
    ad = MfMConditionAdapter(8, 2, (4, 8))
    with pytest.raises(ValueError, match=r"^cond must have shape \(B, 2, F, H, W\)"):
        ad(torch.zeros(1, 3, 2, 16, 16))
    with pytest.raises(ValueError, match=r"^H and W \(15, 15\) must be divisible by 2$"):
        ad(torch.zeros(1, 2, 2, 15, 15))
    with pytest.raises(ValueError, match=r"^the adapter shrinks space by 2 but the patch is 4"):
        MfMVideoTransformer(FRAMES, D.DiTConfig(image_size=16, patch=4, width=16, depth=1, heads=4),
                            block_out_channels=(4, 8))
    m = _model()
    cond, _ = task_condition(X, "i2v")
    with pytest.raises(ValueError, match=r"^cond has batch 2 but x has 1$"):
        m(X[:1], torch.tensor([0.5]), y[:1], cond)
    with pytest.raises(ValueError, match=r"^tasks must be a non-empty sequence"):
        train_multitask(m, X, y, ("t2v",), steps=1)
    with pytest.raises(ValueError, match=r"^task_weights must be 3 non-negative"):
        train_multitask(m, X, y, TASKS, task_weights=[1.0, -1.0, 1.0], steps=1)
    with pytest.raises(ValueError, match=r"^steps and batch_size must be >= 1"):
        train_multitask(m, X, y, TASKS, steps=0)
    with pytest.raises(ValueError, match=r"^X must be \(n, F, C, H, W\) with one label per video"):
        train_multitask(m, X, y[:1], TASKS, steps=1)
    with pytest.raises(ValueError, match=r"^t_grid must be a non-empty 1-D grid"):
        flow_matching_loss(m, X, y, "i2v", t_grid=[1.5])


def test_rejects_more_bad_input_and_accepts_the_edges():
    X, y = _videos(2)
    MfMConditionAdapter(1, 1, (1, 2))                               # the smallest valid sizes
    assert task_mask("inpaint", 1, 1, 16, hole=1).sum() == 255
    assert task_mask("inpaint", 1, 1, 16, hole=15).sum() == 256 - 225
    with pytest.raises(ValueError, match=r"^hole must be in 1\.\.15, got 0$"):
        task_mask("inpaint", 1, 1, 16, hole=0)
    for bad in [(1, 0, 16), (1, 2, 0)]:
        with pytest.raises(ValueError, match=r"^batch, frames and size must be >= 1"):
            task_mask("c2v", *bad)
    with pytest.raises(ValueError, match=r"^mask \(2, 3, 1, 16, 16\) must match video"):
        unified_condition(X, torch.ones(2, 3, 1, 16, 16))
    with pytest.raises(ValueError, match=r"^mask \(2, 4, 1, 8, 8\) must match video"):
        unified_condition(X, torch.ones(2, FRAMES, 1, 8, 8))
    with pytest.raises(ValueError, match=r"^video and mask must be"):
        unified_condition(X, torch.ones(FRAMES, 1, 16, 16))
    with pytest.raises(ValueError, match=r"^frames must be square, got 16x8$"):
        task_condition(X[..., :8], "c2v")
    with pytest.raises(ValueError, match=r"^embedding_channels and conditioning_channels must be >= 1"):
        MfMConditionAdapter(4, 0)
    with pytest.raises(ValueError, match=r"^block_out_channels must be a non-empty sequence of positive ints"):
        MfMConditionAdapter(4, 2, (4, 0))
    with pytest.raises(ValueError, match=r"^temporal_stride must be 1 or 2, got 0$"):
        MfMConditionAdapter(4, temporal_stride=0)
    with pytest.raises(ValueError, match=r"^cond must have shape"):
        MfMConditionAdapter(8, 2, (4, 8))(torch.zeros(2, 16, 16))
    m = _model()
    for w in ([0.0, 0.0, 0.0], [1.0, 1.0], [float("nan"), 1.0, 1.0]):
        with pytest.raises(ValueError, match=r"^task_weights must be"):
            train_multitask(m, X, y, TASKS, task_weights=w, steps=1)
    with pytest.raises(ValueError, match=r"^tasks must be a non-empty sequence"):
        train_multitask(m, X, y, (), steps=1)
    with pytest.raises(ValueError, match=r"^steps and batch_size must be >= 1"):
        train_multitask(m, X, y, TASKS, steps=1, batch_size=0)
    with pytest.raises(ValueError, match=r"^X must be \(n, F, C, H, W\)"):
        train_multitask(m, X[:, 0], y, TASKS, steps=1)
    for grid in ([-0.1], [], [[0.5]]):
        with pytest.raises(ValueError, match=r"^t_grid must be a non-empty 1-D grid in \[0, 1\]"):
            flow_matching_loss(m, X, y, "i2v", t_grid=grid)
    assert np.isfinite(flow_matching_loss(m, X, y, "i2v", t_grid=[0.0, 1.0]))
    # a failing call leaves no condition behind
    cond, _ = task_condition(X, "i2v")
    with pytest.raises(ValueError):
        m(X[:, :2], torch.tensor([0.5, 0.5]), y, cond)
    t = torch.tensor([0.5, 0.5])
    torch.testing.assert_close(m(X, t, y), m.dit(X, t, y))


def test_defaults_are_documented_values():
    import inspect

    sig = inspect.signature(train_multitask).parameters
    assert {k: sig[k].default for k in ("tasks", "task_weights", "steps", "batch_size", "lr", "p_uncond", "seed",
                                         "ema", "hole")} == dict(tasks=TASKS, task_weights=None, steps=600,
                                                                 batch_size=32, lr=2e-3, p_uncond=0.1, seed=0,
                                                                 ema=0.999, hole=None)
    assert inspect.signature(sample_task).parameters["steps"].default == 20
    assert inspect.signature(flow_matching_loss).parameters["seed"].default == 0
    m = MfMVideoTransformer()
    assert (m.frames, m.dit.config.width, m.dit.config.depth, m.dit.config.patch) == (4, 64, 4, 4)
    assert m.adapter.block_out_channels == (8, 16, 32) and m.adapter.temporal_stride == 1
    assert m.adapter.conditioning_channels == 2 and m.adapter.embedding_channels == 64
    X, y = _videos(2)
    grid = torch.arange(0.05, 1.0, 0.1)
    assert len(grid) == 10
    assert flow_matching_loss(_model(), X, y, "inpaint") == pytest.approx(
        flow_matching_loss(_model(), X, y, "inpaint", t_grid=grid, seed=0), rel=1e-6)


def test_training_loop_matches_reference_recipe():
    """Two steps of train_multitask equal an independent AdamW (no weight decay) + cosine schedule
    loop on the shared flow loss, drawing the batch and then the tasks from one generator."""
    X, y = moving_digits(16, frames=FRAMES, seed=3)
    Xt, yt = torch.from_numpy(X), torch.from_numpy(y)

    def fresh():
        torch.manual_seed(11)
        return MfMVideoTransformer(FRAMES, D.DiTConfig(image_size=16, patch=4, width=16, depth=1, heads=4))

    a = fresh()
    la = train_multitask(a, X, y, ("i2v", "inpaint"), task_weights=[1.0, 3.0], steps=3, batch_size=4, lr=1e-2,
                         p_uncond=0.3, seed=5, ema=None)
    b = fresh()
    g = torch.Generator().manual_seed(5)
    opt = torch.optim.AdamW(b.parameters(), lr=1e-2, weight_decay=0.0)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, 3)
    w = torch.tensor([0.25, 0.75], dtype=torch.float64)
    lb = []
    b.train()
    for _ in range(3):
        idx = torch.randint(16, (4,), generator=g)
        pick = torch.multinomial(w, 4, replacement=True, generator=g)
        cond, _ = task_condition(Xt[idx], [("i2v", "inpaint")[int(k)] for k in pick])
        loss = D.diffusion_loss(bind_condition(b, cond), Xt[idx], yt[idx], "flow", 0.3, g)
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
        lb.append(float(loss.detach()))
    np.testing.assert_allclose(la, lb, rtol=1e-6)
    for p, q in zip(a.parameters(), b.parameters()):
        torch.testing.assert_close(p, q)
    assert not a.training
    # a task name alone is one task; batch size 1 is valid; float64 videos are cast to float32
    f1, f2 = fresh(), fresh()
    l1 = train_multitask(f1, X, y, "inpaint", steps=1, batch_size=1, seed=2, ema=None)
    l2 = train_multitask(f2, X.astype(np.float64), y, ("inpaint",), steps=1, batch_size=1, seed=2, ema=None)
    assert l1 == l2
    # weight EMA: with ema = 0.5 and one step the kept weights are (w_0 + w_1) / 2
    c, d, e = fresh(), fresh(), fresh()
    train_multitask(c, X, y, ("i2v",), steps=1, batch_size=4, seed=5, ema=None)
    train_multitask(d, X, y, ("i2v",), steps=1, batch_size=4, seed=5, ema=0.5)
    for p0, p1, pe in zip(e.parameters(), c.parameters(), d.parameters()):
        torch.testing.assert_close(pe, 0.5 * (p0 + p1))


def test_edges_killing_untested_paths():
    X, y = _videos(3)
    ad = MfMConditionAdapter(8)
    assert ad.conv_in.kernel_size == (3, 3) and ad.conv_out.kernel_size == (3, 3)
    assert ad.conv_in.padding == (1, 1) and ad.conv_out.padding == (1, 1)
    one = MfMConditionAdapter(4, 2, (4,))                           # no stride-2 step: a per-frame 3x3 pair
    assert one.spatial_factor == 1 and len(one.blocks) == 0
    assert one(torch.zeros(1, 2, 3, 5, 7)).shape == (1, 4, 3, 5, 7)
    torch.manual_seed(2)
    ad = MfMConditionAdapter(6, 2, (4, 8, 8), temporal_stride=2)
    cond = torch.randn(2, 2, 3, 16, 8)                              # non-square frames
    out = ad(cond)
    assert out.shape == (2, 6, 2, 4, 2)
    torch.testing.assert_close(out, _reference_adapter(ad, cond), rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match=r"^H and W \(16, 15\) must be divisible by 4$"):
        ad(torch.zeros(1, 2, 3, 16, 15))
    # the hole size reaches the condition and the training
    cond4, mask4 = task_condition(X, "inpaint", hole=4)
    assert mask4[0, 0, 0, 6:10, 6:10].max() == 0 and mask4[0, 0, 0, 5, 5] == 1
    torch.testing.assert_close(mask4, task_mask("inpaint", 3, FRAMES, 16, hole=4))
    # a given config is used (not the default one); the default is the 16x16, 4x4-patch DiT
    m16 = MfMVideoTransformer(FRAMES, D.DiTConfig(image_size=16, patch=4, width=16, depth=1, heads=2))
    assert (m16.dit.config.width, m16.dit.config.heads, m16.adapter.embedding_channels) == (16, 2, 16)
    c = MfMVideoTransformer().dit.config
    assert (c.image_size, c.patch, c.width, c.depth, c.heads, c.n_classes) == (16, 4, 64, 4, 4, 10)
    m = _model()
    cond3, _ = task_condition(X, "i2v")
    with pytest.raises(ValueError, match=r"^cond has batch 3 but x has 2$"):
        m(X[:2], torch.tensor([0.5, 0.5]), y[:2], cond3)
    with pytest.raises(ValueError, match=r"^batch 4 is not a multiple of the condition's 3$"):
        bind_condition(m, cond3)(torch.zeros(4, *X.shape[1:]), torch.full((4,), 0.5), torch.zeros(4, dtype=torch.long))


def test_training_defaults_and_hole_reach_the_loop():
    X, y = moving_digits(40, frames=FRAMES, seed=3)

    def fresh():
        torch.manual_seed(13)
        return MfMVideoTransformer(FRAMES, D.DiTConfig(image_size=16, patch=4, width=16, depth=1, heads=4))

    a, b, w0 = fresh(), fresh(), fresh()
    la = train_multitask(a, X, y, steps=1)                          # defaults: batch 32, lr 2e-3, seed 0, ema 0.999
    lb = train_multitask(b, X, y, TASKS, steps=1, batch_size=32, lr=2e-3, p_uncond=0.1, seed=0, ema=None)
    assert la == lb
    for p0, p1, pe in zip(w0.parameters(), b.parameters(), a.parameters()):
        torch.testing.assert_close(pe, 0.999 * p0 + 0.001 * p1)
    h4, h8 = fresh(), fresh()
    l4 = train_multitask(h4, X, y, "inpaint", steps=2, batch_size=4, ema=None, hole=4)
    l8 = train_multitask(h8, X, y, "inpaint", steps=2, batch_size=4, ema=None)
    assert l4[0] == l8[0] and l4[1] != l8[1]                        # step 1: the zero-init output ignores the condition


@pytest.mark.slow
def test_quick_scale_claims():
    from iclr26.generative.many_for_many import experiment as E

    r = E.run("quick", 0)
    assert set(r["metrics"]) >= {"log_fm_loss_c2v", "log_fm_loss_i2v", "log_fm_loss_inpaint"}
    for arms in r["metrics"].values():
        assert arms["multi"] < arms["untrained"]


def test_multitask_steps_draw_one_task_per_example_on_the_shared_loop(monkeypatch):
    """Each step: the batch rows of the shared loop (``train_diffusion``'s first draw), then one
    task per example from ``task_weights``, then the flow-matching loss of the bound model."""
    from iclr26.generative.many_for_many import training

    X, y = moving_digits(40, frames=FRAMES, seed=5)
    seen = []
    real = training.task_condition

    def spy(video, task, hole=None):
        seen.append((video.clone(), list(task)))
        return real(video, task, hole)

    monkeypatch.setattr(training, "task_condition", spy)
    torch.manual_seed(0)
    m = MfMVideoTransformer(FRAMES, D.DiTConfig(image_size=16, patch=4, width=16, depth=1, heads=4))
    train_multitask(m, X, y, TASKS, task_weights=[0.5, 0.25, 0.25], steps=3, batch_size=16, seed=2, ema=None)
    assert len(seen) == 3 and all(len(t) == 16 for _, t in seen)
    g = torch.Generator().manual_seed(2)
    idx = torch.randint(len(X), (16,), generator=g)
    torch.testing.assert_close(seen[0][0], torch.as_tensor(X)[idx])          # the loop's batch rows
    pick = torch.multinomial(torch.tensor([0.5, 0.25, 0.25], dtype=torch.float64), 16, replacement=True,
                             generator=g)
    assert seen[0][1] == [TASKS[int(k)] for k in pick]                       # then the per-example tasks
    assert len({t for _, ts in seen for t in ts}) == 3


# ------------------------------------------------------------------------------------ non-finite input


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
def test_hidden_non_finite_pixels_are_zero_in_the_condition(bad):
    """The unified condition holds 0 at hidden pixels whatever the video holds there: ``video * mask``
    would turn a hidden NaN / inf into NaN (0 * nan = nan)."""
    X, _ = _videos(2)
    Y = X.clone()
    Y[:, 1:, :, 3, 5] = bad                                         # hidden for i2v (frames 2..)
    Y[:, :, :, 8, 8] = bad                                          # hidden for inpaint (inside the hole)
    Y[:, 0, :, 8, 8] = X[:, 0, :, 8, 8]                             # ... but the first frame is given for i2v
    for task in ("i2v", "c2v"):
        cond, _ = task_condition(Y, task)
        assert torch.isfinite(cond).all()
        torch.testing.assert_close(cond, task_condition(X, task)[0])
    Z = X.clone()
    Z[:, :, :, 8, 8] = bad
    cond, _ = task_condition(Z, "inpaint")
    assert torch.isfinite(cond).all() and cond[:, 0, :, 8, 8].abs().max() == 0
    torch.testing.assert_close(cond, task_condition(X, "inpaint")[0])


def test_non_finite_given_pixels_and_training_videos_raise():
    X, y = _videos(2)
    Y = X.clone()
    Y[0, 0, 0, 1, 1] = float("nan")                                 # given for i2v and inpaint
    for task in ("i2v", "inpaint"):
        with pytest.raises(ValueError, match=r"^video must be finite where the mask gives pixels \(it holds NaN or inf there\)$"):
            task_condition(Y, task)
    assert torch.isfinite(task_condition(Y, "c2v")[0]).all()       # c2v gives nothing: no error
    m = MfMVideoTransformer(FRAMES, D.DiTConfig(image_size=16, patch=4, width=16, depth=1, heads=4))
    with pytest.raises(ValueError, match=r"^X must be finite \(it holds NaN or inf\)$"):
        train_multitask(m, Y.numpy(), y.numpy(), ("c2v",), steps=1, batch_size=2)


def test_training_stops_on_a_non_finite_loss_and_gradient(nan_grad):
    X, y = moving_digits(16, frames=FRAMES, seed=5)
    torch.manual_seed(0)
    m = MfMVideoTransformer(FRAMES, D.DiTConfig(image_size=16, patch=4, width=16, depth=1, heads=4))
    with torch.no_grad():
        m.dit.out.bias.fill_(float("inf"))
    with pytest.raises(FloatingPointError, match="non-finite training loss"):
        train_multitask(m, X, y, TASKS, steps=2, batch_size=4, ema=None)

    torch.manual_seed(0)
    m = MfMVideoTransformer(FRAMES, D.DiTConfig(image_size=16, patch=4, width=16, depth=1, heads=4))
    m.adapter.conv_out.register_forward_hook(lambda mod, inp, out: nan_grad(out))
    with pytest.raises(FloatingPointError, match="non-finite gradient"):
        train_multitask(m, X, y, ("i2v",), steps=2, batch_size=4, ema=None)


def test_equal_exposure_arm_is_the_multitask_model_at_three_times_the_steps(monkeypatch):
    """The experiment's ``multi_3x`` arm: the same multi-task training, 3 x ``steps`` (each task then
    drawn as often as by its single-task model)."""
    from iclr26.generative.many_for_many import experiment as E

    calls = []
    real = E.train_multitask

    def spy(model, X, y, tasks, **kw):
        calls.append((tuple(tasks), kw["steps"], kw["batch_size"]))
        return real(model, X, y, tasks, **kw)

    monkeypatch.setattr(E, "train_multitask", spy)
    r = E.run("smoke", 0)
    s = E.SCALES["smoke"]["steps"]
    b = E.SCALES["smoke"]["batch"]
    assert calls == [(TASKS, s, b), (TASKS, 3 * s, b), (("c2v",), s, b), (("i2v",), s, b), (("inpaint",), s, b)]
    for name, arms in r["metrics"].items():
        assert set(arms) == {"untrained", "multi", "multi_3x", "single"}, name
