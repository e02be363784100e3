"""DeAltHDR: flow-guided masked attention (equations, reductions, contracts, rejections)."""
import math

import numpy as np
import pytest
import torch

from iclr26.vision.dealthdr import (TRAINING_SENSITIVITIES, FlowGuidedMaskedAttention, NonFiniteTrainingError,
                                    TinyDeAltHDR, block_matching_flow, consistency_error, make_triplets,
                                    model_macs, mu_law, occlusion_mask, prepare, psnr, random_masks_like,
                                    sample_training_sensitivities, train_model, warp)
from iclr26.vision.dealthdr.model import effective_keys, subset


def _texture(B=1, C=3, H=24, W=24, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.rand(B, C, H, W, generator=g)
    return torch.nn.functional.avg_pool2d(x, 3, 1, 1)        # smooth but textured


def _const_flow(B, H, W, dx, dy):
    f = torch.zeros(B, 2, H, W)
    f[:, 0], f[:, 1] = dx, dy
    return f


# --- warp -----------------------------------------------------------------------------------------
def test_warp_zero_flow_is_identity():
    x = _texture()
    assert torch.allclose(warp(x, torch.zeros(1, 2, 24, 24)), x, atol=1e-6)


def test_warp_integer_flow_samples_shifted_pixels():
    x = _texture()
    out = warp(x, _const_flow(1, 24, 24, 2, -1))             # out(y, x) = x(y - 1, x + 2)
    assert torch.allclose(out[..., 1:, :-2], x[..., :-1, 2:], atol=1e-5)


def test_warp_half_pixel_is_bilinear_mean():
    x = _texture()
    out = warp(x, _const_flow(1, 24, 24, 0.5, 0))
    assert torch.allclose(out[..., :-1], 0.5 * (x[..., :-1] + x[..., 1:]), atol=1e-5)


# --- block matching --------------------------------------------------------------------------------
def test_block_matching_recovers_translation():
    big = _texture(H=40, W=40, seed=1)
    a = big[..., 8:32, 8:32]
    b = big[..., 8 - 1:32 - 1, 8 + 2:32 + 2]      # b(y, x) = a(y - 1, x + 2), so a(y, x) = b(y + 1, x - 2)
    f = block_matching_flow(a, b, radius=3, window=5)
    inner = f[..., 4:-4, 4:-4]
    assert torch.all(inner[:, 0] == -2) and torch.all(inner[:, 1] == 1)
    assert torch.allclose(warp(b, f)[..., 4:-4, 4:-4], a[..., 4:-4, 4:-4], atol=1e-5)


def test_block_matching_same_image_gives_zero_flow():
    a = _texture()
    assert torch.all(block_matching_flow(a, a, radius=2) == 0)


# --- consistency error and mask (Eq. 3-5) ----------------------------------------------------------
def test_consistency_error_zero_for_consistent_flows():
    x = _texture()
    D = consistency_error(x, _const_flow(1, 24, 24, -1, 0), _const_flow(1, 24, 24, 1, 0))
    assert D.shape == (1, 1, 24, 24)
    assert D[..., 2:-2].abs().max() < 1e-3


def test_consistency_error_is_mean_abs_in_255_units():
    x = _texture()
    f = _const_flow(1, 24, 24, 1, 0)                          # both flows the same: round trip moves 2 px
    D = consistency_error(x, f, f)
    ref = (x[..., 2:] - x[..., :-2]).abs().mean(1, keepdim=True) * 255
    assert torch.allclose(D[..., :-2], ref, atol=1e-3)
    assert torch.allclose(consistency_error(x * 2, f, f, data_range=2.0), D, atol=1e-3)


def test_mask_threshold_reference_values():
    # s D / 255 > 0.5 with s = 15: D = 8.5 is on the boundary (not marked), 8.6 is marked
    D = torch.tensor([0.0, 8.4, 8.5, 8.6, 100.0]).view(1, 1, 1, 5)
    assert occlusion_mask(D, 15.0).flatten().tolist() == [0, 0, 0, 1, 1]
    assert occlusion_mask(D, 100.0).flatten().tolist() == [0, 1, 1, 1, 1]
    assert occlusion_mask(D, 1.0).flatten().tolist() == [0, 0, 0, 0, 0]


def test_mask_limits_flow_only_and_full_attention():
    D = torch.rand(2, 1, 6, 6) * 50
    D[0, 0, 0, 0] = 0.0
    assert occlusion_mask(D, 0.0).sum() == 0
    assert occlusion_mask(D, math.inf).min() == 1            # also where D = 0


def test_mask_per_sample_sensitivities():
    D = torch.full((3, 1, 2, 2), 10.0)
    m = occlusion_mask(D, torch.tensor([0.0, 15.0, math.inf]))
    assert m[0].sum() == 0 and m[1].min() == 1 and m[2].min() == 1
    # s * 10 / 255 > 0.5 needs s > 12.75 (12.75 itself is on the boundary)
    assert occlusion_mask(D, torch.tensor([12.0, 12.75, 13.0])).flatten(1).mean(1).tolist() == [0.0, 0.0, 1.0]


def test_mask_monotone_in_s():
    D = torch.rand(1, 1, 16, 16) * 60
    ratios = [occlusion_mask(D, s).mean().item() for s in (0, 1, 5, 15, 50, 100, math.inf)]
    assert ratios == sorted(ratios) and ratios[0] == 0 and ratios[-1] == 1


# --- training schedule of s (official dealthdr_model.py) -------------------------------------------
def test_training_sensitivities_are_the_16_official_points():
    assert len(TRAINING_SENSITIVITIES) == 16
    assert TRAINING_SENSITIVITIES[0] == 0 and TRAINING_SENSITIVITIES[-1] == math.inf
    assert 15.0 in TRAINING_SENSITIVITIES and 100.0 in TRAINING_SENSITIVITIES
    assert sum(0 < s <= 1 for s in TRAINING_SENSITIVITIES) == 6
    assert TRAINING_SENSITIVITIES[7] == pytest.approx(1 + 99 / 6)


def test_training_modes_30_30_40():
    s = sample_training_sensitivities(10, torch.Generator().manual_seed(0))
    assert s.shape == (10,)
    # at least floor(0.3 B) each of flow-only and attention-only (the mixed draws may add more)
    assert (s == 0).sum() >= 3 and torch.isinf(s).sum() >= 3
    assert set(s.tolist()) <= set(TRAINING_SENSITIVITIES)


# --- FGMA ------------------------------------------------------------------------------------------
def _dense_attention(mod, fc, fn):
    """Independent reference: full spatial cross-attention at every pixel, one head."""
    B, C, H, W = fc.shape
    q = torch.einsum("oc,bchw->bohw", mod.q.weight[:, :, 0, 0], fc).flatten(2)
    kv = torch.einsum("oc,bchw->bohw", mod.kv.weight[:, :, 0, 0], fn).flatten(2)
    k, v = kv[:, :C], kv[:, C:]
    a = torch.softmax(q.transpose(1, 2) @ k / math.sqrt(C), dim=-1)          # (B, HW, HW)
    out = (a @ v.transpose(1, 2)).transpose(1, 2)                              # (B, C, HW)
    out = torch.einsum("oc,bcn->bon", mod.proj_out.weight[:, :, 0, 0], out)
    return out.view(B, C, H, W)


@pytest.fixture
def fgma_inputs():
    torch.manual_seed(0)
    fc, fn = torch.randn(2, 8, 6, 6), torch.randn(2, 8, 6, 6)
    flow = torch.randint(-1, 2, (2, 2, 6, 6)).float()
    D = torch.rand(2, 1, 6, 6) * 20
    return fc, fn, flow, D


def test_fgma_s0_is_flow_warp_only(fgma_inputs):
    fc, fn, flow, D = fgma_inputs
    mod = FlowGuidedMaskedAttention(8)
    out, mask = mod(fc, fn, flow, D, 0.0)
    assert out.shape == (2, 17, 6, 6) and mask.sum() == 0
    assert torch.allclose(out[:, :8], warp(fn, flow))
    assert out[:, 8:].abs().sum() == 0


def test_fgma_sinf_equals_dense_attention(fgma_inputs):
    fc, fn, flow, D = fgma_inputs
    mod = FlowGuidedMaskedAttention(8)
    out, mask = mod(fc, fn, flow, D, math.inf)
    assert mask.min() == 1
    assert torch.allclose(out[:, 9:], _dense_attention(mod, fc, fn), atol=1e-5)


def test_fgma_partial_mask_is_sparse_dense_attention(fgma_inputs):
    fc, fn, flow, D = fgma_inputs
    mod = FlowGuidedMaskedAttention(8)
    out, mask = mod(fc, fn, flow, D, 15.0)
    assert 0 < mask.mean() < 1
    ref = _dense_attention(mod, fc, fn) * mask
    assert torch.allclose(out[:, 9:], ref, atol=1e-5)
    assert torch.equal(out[:, 8:9], mask)


def test_fgma_multi_head_matches_per_head_reference(fgma_inputs):
    fc, fn, flow, D = fgma_inputs
    mod = FlowGuidedMaskedAttention(8, num_heads=2)
    out, _ = mod(fc, fn, flow, D, math.inf)
    C, d = 8, 4
    q = torch.einsum("oc,bchw->bohw", mod.q.weight[:, :, 0, 0], fc).flatten(2).view(2, 2, d, 36)
    kv = torch.einsum("oc,bchw->bohw", mod.kv.weight[:, :, 0, 0], fn).flatten(2)
    k, v = kv[:, :C].reshape(2, 2, d, 36), kv[:, C:].reshape(2, 2, d, 36)
    a = torch.softmax(q.transpose(2, 3) @ k / math.sqrt(d), -1)
    o = (a @ v.transpose(2, 3)).transpose(2, 3).reshape(2, C, 36)
    o = torch.einsum("oc,bcn->bon", mod.proj_out.weight[:, :, 0, 0], o).view(2, C, 6, 6)
    assert torch.allclose(out[:, 9:], o, atol=1e-5)


def _dense_cosine_attention(mod, fc, fn):
    """Independent reference for qk_norm: cosine similarity of queries and keys times the
    temperature, one head."""
    B, C, H, W = fc.shape
    q = torch.einsum("oc,bchw->bohw", mod.q.weight[:, :, 0, 0], fc).flatten(2)
    kv = torch.einsum("oc,bchw->bohw", mod.kv.weight[:, :, 0, 0], fn).flatten(2)
    k, v = kv[:, :C], kv[:, C:]
    cos = (q / q.norm(dim=1, keepdim=True)).transpose(1, 2) @ (k / k.norm(dim=1, keepdim=True))
    a = torch.softmax(cos * mod.temperature[0], dim=-1)
    out = (a @ v.transpose(1, 2)).transpose(1, 2)
    out = torch.einsum("oc,bcn->bon", mod.proj_out.weight[:, :, 0, 0], out)
    return out.view(B, C, H, W)


@pytest.mark.parametrize("window", [None, 1])
def test_fgma_qk_norm_is_cosine_attention_with_temperature(fgma_inputs, window):
    fc, fn, flow, D = fgma_inputs
    mod = FlowGuidedMaskedAttention(8, qk_norm=True, temperature=7.0, window=window)
    assert torch.allclose(mod.temperature, torch.tensor([7.0]))
    out, mask = mod(fc, fn, flow, D, math.inf)
    if window is None:
        assert torch.allclose(out[:, 9:], _dense_cosine_attention(mod, fc, fn), atol=1e-5)
    # invariant to the scale of the features (normalised q, k; v is linear in the neighbour)
    out2, _ = mod(fc * 3.0, fn, flow, D, math.inf)
    assert torch.allclose(out2[:, 9:], out[:, 9:], atol=1e-5)
    # the temperature is learned
    out[:, 9:].square().sum().backward()
    assert mod.temperature.grad is not None and mod.temperature.grad.abs().sum() > 0
    # without qk_norm the attention is not invariant to the query scale and has no temperature
    plain = FlowGuidedMaskedAttention(8)
    assert plain.temperature is None
    assert not torch.allclose(plain(fc * 3.0, fn, flow, D, math.inf)[0][:, 9:],
                              plain(fc, fn, flow, D, math.inf)[0][:, 9:], atol=1e-4)


def test_fgma_qk_norm_high_temperature_picks_the_best_match():
    # the neighbour holds the current features shifted by one pixel: at a large temperature each
    # query's weight goes to the neighbour pixel with the same feature direction
    torch.manual_seed(1)
    C, H, W = 4, 1, 5
    feats = torch.nn.functional.normalize(torch.randn(1, C, H, W), dim=1)
    mod = FlowGuidedMaskedAttention(C, qk_norm=True, temperature=200.0)
    with torch.no_grad():
        mod.q.weight.copy_(torch.eye(C)[..., None, None])
        mod.kv.weight.copy_(torch.cat([torch.eye(C), torch.eye(C)])[..., None, None])
        mod.proj_out.weight.copy_(torch.eye(C)[..., None, None])
    nbr = torch.roll(feats, 1, dims=-1)
    out, _ = mod(feats, nbr, torch.zeros(1, 2, H, W), torch.zeros(1, 1, H, W), math.inf)
    assert torch.allclose(out[:, C + 1:], feats, atol=1e-3)


def test_effective_keys_uniform_and_concentrated():
    d = make_triplets(2, np.random.default_rng(6), size=8)
    P = prepare(d["ldr"], d["exposure"])
    m = TinyDeAltHDR(dim=4, qk_norm=True, temperature=1e-6)       # softmax of ~0: uniform over 64 keys
    assert effective_keys(m, P) == pytest.approx(64, rel=1e-4)
    m = TinyDeAltHDR(dim=4, qk_norm=True, temperature=1e4)        # nearly an argmax: about one key
    assert effective_keys(m, P) < 3
    with pytest.raises(ValueError, match="global attention"):
        effective_keys(TinyDeAltHDR(dim=4, window=1), P)


def test_triplets_knobs():
    rng = np.random.default_rng(7)
    d = make_triplets(4, rng, size=16, exposure_ratio=8.0)
    assert set(np.unique(d["exposure"])) == {1.0, 8.0}
    # the default knobs reproduce the default draw exactly
    a = make_triplets(2, np.random.default_rng(8), size=16)
    b = make_triplets(2, np.random.default_rng(8), size=16, fg_level=(0.05, 0.6), fg_texture=1.0,
                      exposure_ratio=4.0)
    assert all(np.array_equal(a[k], b[k]) for k in a)
    # fg_texture = 0: the objects are flat, so the target has fewer distinct values
    flat = make_triplets(2, np.random.default_rng(8), size=16, fg_texture=0.0)
    assert not np.array_equal(flat["hdr"], a["hdr"])
    for bad in (dict(fg_level=(0.5, 0.2)), dict(fg_level=(0.1, 1.5)), dict(fg_texture=2.0),
                dict(exposure_ratio=0.5), dict(exposure_ratio=float("inf"))):
        with pytest.raises(ValueError, match=next(iter(bad))):
            make_triplets(1, np.random.default_rng(0), **bad)


def test_fgma_batch_equals_single_samples(fgma_inputs):
    fc, fn, flow, D = fgma_inputs
    mod = FlowGuidedMaskedAttention(8)
    s = torch.tensor([5.0, 50.0])
    out, _ = mod(fc, fn, flow, D, s)
    for b in range(2):
        ob, _ = mod(fc[b:b + 1], fn[b:b + 1], flow[b:b + 1], D[b:b + 1], float(s[b]))
        assert torch.allclose(out[b:b + 1], ob, atol=1e-6)


def test_fgma_mask_override_and_gradients(fgma_inputs):
    fc, fn, flow, D = fgma_inputs
    fc.requires_grad_(True)
    mod = FlowGuidedMaskedAttention(8)
    mo = torch.zeros(2, 1, 6, 6)
    mo[:, :, :3] = 1
    out, mask = mod(fc, fn, flow, D, 0.0, mask_override=mo)
    assert torch.equal(mask, mo)
    out[:, 9:].sum().backward()
    assert fc.grad is not None and fc.grad.abs().sum() > 0
    assert mod.q.weight.grad is not None


def test_fgma_state_dict_round_trip_and_double(fgma_inputs):
    fc, fn, flow, D = fgma_inputs
    a, b = FlowGuidedMaskedAttention(8), FlowGuidedMaskedAttention(8)
    b.load_state_dict(a.state_dict())
    assert torch.allclose(a(fc, fn, flow, D, 15.0)[0], b(fc, fn, flow, D, 15.0)[0])
    a.double()
    out, _ = a(fc.double(), fn.double(), flow.double(), D.double(), 15.0)
    assert out.dtype == torch.float64


def test_attention_cost_linear_in_queries():
    mod = FlowGuidedMaskedAttention(8)
    assert mod.attention_macs(0, 36) == 0
    c1, c2, c3 = (mod.attention_macs(n, 36) for n in (1, 2, 3))
    assert c2 - c1 == c3 - c2 == 2 * 64 + 2 * 36 * 8


# --- data, model, training -------------------------------------------------------------------------
def test_mu_law_reference_values():
    h = torch.tensor([0.0, 0.5, 1.0])
    assert torch.allclose(mu_law(h), torch.tensor([0.0, math.log(2501) / math.log(5001), 1.0]))
    assert np.allclose(mu_law(np.array([0.5])), math.log(2501) / math.log(5001))


def test_triplets_alternate_exposures_and_range():
    d = make_triplets(6, np.random.default_rng(0), size=16)
    assert d["ldr"].shape == (6, 3, 3, 16, 16) and d["hdr"].shape == (6, 3, 16, 16)
    assert d["ldr"].min() >= 0 and d["ldr"].max() <= 1
    e = d["exposure"]
    assert np.all(e[:, 0] == e[:, 2]) and np.all(e[:, 0] != e[:, 1])


def test_prepare_and_model_shapes():
    d = make_triplets(3, np.random.default_rng(1), size=16)
    P = prepare(d["ldr"], d["exposure"])
    assert P["inp"].shape == (3, 3, 6, 16, 16) and P["flow"].shape == (3, 2, 2, 16, 16)
    assert P["D"].shape == (3, 2, 1, 16, 16) and (P["D"] >= 0).all()
    m = TinyDeAltHDR(dim=8)
    out, masks = m(P, 15.0)
    assert out.shape == (3, 3, 16, 16) and masks.shape == (3, 2, 1, 16, 16)
    macs = model_macs(m, masks)
    assert (macs >= model_macs(m, torch.zeros_like(masks))).all()


def test_single_frame_estimate_is_perfect_without_noise():
    # a short-exposure frame that does not saturate: its own linearised radiance is the target
    h = np.full((1, 3, 3, 8, 8), 0.2, np.float32)
    ldr = np.round(h ** (1 / 2.2) * 255) / 255
    P = prepare(ldr, np.array([[4.0, 1.0, 4.0]], np.float32))
    assert psnr(P["base"], mu_law(torch.tensor(ldr[:, 1] ** 2.2))).item() > 100


def test_training_reduces_loss_and_is_deterministic():
    d = make_triplets(8, np.random.default_rng(2), size=16)
    P = prepare(d["ldr"], d["exposure"])
    tgt = mu_law(torch.as_tensor(d["hdr"]))
    runs = []
    for _ in range(2):
        torch.manual_seed(0)
        m = TinyDeAltHDR(dim=8)
        runs.append(train_model(m, P, tgt, steps=25, batch_size=4, lr=3e-3, seed=0))
    assert runs[0] == runs[1]
    assert np.mean(runs[0][-5:]) < np.mean(runs[0][:5])


def test_non_finite_training_stops_loudly():
    d = make_triplets(4, np.random.default_rng(3), size=16)
    P = prepare(d["ldr"], d["exposure"])
    m = TinyDeAltHDR(dim=8)
    with torch.no_grad():
        m.fuse[-1].bias.fill_(float("nan"))
    with pytest.raises(NonFiniteTrainingError):
        train_model(m, P, mu_law(torch.as_tensor(d["hdr"])), steps=2, batch_size=2, lr=1e-3, seed=0)


def test_random_masks_keep_counts():
    m = (torch.rand(3, 2, 1, 8, 8) > 0.7).float()
    r = random_masks_like(m, torch.Generator().manual_seed(0))
    assert torch.equal(r.flatten(2).sum(-1), m.flatten(2).sum(-1))
    assert not torch.equal(r, m)


def test_subset_indexes_every_field():
    d = make_triplets(4, np.random.default_rng(4), size=16)
    P = prepare(d["ldr"], d["exposure"])
    S = subset(P, torch.tensor([2, 0]))
    assert torch.equal(S["inp"][0], P["inp"][2]) and torch.equal(S["is_long"], P["is_long"][[2, 0]])


# --- rejection of bad input ------------------------------------------------------------------------
@pytest.mark.parametrize("s", [-1.0, float("nan"), "15", torch.tensor([1.0, 2.0, 3.0])])
def test_mask_rejects_bad_sensitivity(s):
    with pytest.raises((ValueError, TypeError), match="s must"):
        occlusion_mask(torch.rand(2, 1, 4, 4), s)


def test_mask_rejects_bad_D():
    with pytest.raises(ValueError, match="D must have one channel"):
        occlusion_mask(torch.rand(1, 2, 4, 4), 15.0)
    with pytest.raises(ValueError, match="D must be non-negative"):
        occlusion_mask(-torch.rand(1, 1, 4, 4), 15.0)
    with pytest.raises(ValueError, match="D holds non-finite"):
        occlusion_mask(torch.full((1, 1, 2, 2), float("nan")), 15.0)


def test_warp_and_flow_reject_bad_input():
    x = torch.rand(1, 3, 8, 8)
    with pytest.raises(ValueError, match="flow must have shape"):
        warp(x, torch.zeros(1, 3, 8, 8))
    with pytest.raises(TypeError, match="x must be a torch.Tensor"):
        warp(np.zeros((1, 3, 8, 8)), torch.zeros(1, 2, 8, 8))
    with pytest.raises(ValueError, match="window must be a positive odd"):
        block_matching_flow(x, x, window=4)
    with pytest.raises(ValueError, match="radius must be"):
        block_matching_flow(x, x, radius=-1)
    with pytest.raises(ValueError, match="a and b must have the same shape"):
        block_matching_flow(x, torch.rand(1, 3, 8, 9))
    with pytest.raises(ValueError, match="data_range"):
        consistency_error(x, torch.zeros(1, 2, 8, 8), torch.zeros(1, 2, 8, 8), data_range=0)


def test_fgma_rejects_bad_construction_and_input(fgma_inputs):
    fc, fn, flow, D = fgma_inputs
    with pytest.raises(ValueError, match="num_heads"):
        FlowGuidedMaskedAttention(8, num_heads=3)
    with pytest.raises(ValueError, match="dim"):
        FlowGuidedMaskedAttention(0)
    with pytest.raises(ValueError, match="s must be >= 0"):
        FlowGuidedMaskedAttention(8, sensitivity=-1)
    mod = FlowGuidedMaskedAttention(8)
    with pytest.raises(ValueError, match="feat_cur has 4 channels"):
        mod(fc[:, :4], fn[:, :4], flow, D)
    with pytest.raises(ValueError, match="D must be a tensor"):
        mod(fc, fn, flow, D[:, :, :3])
    with pytest.raises(ValueError, match="feat_nbr holds non-finite"):
        mod(fc, fn * float("nan"), flow, D)
    with pytest.raises(ValueError, match="feat_cur and feat_nbr"):
        mod(fc, fn[:1], flow, D)
    with pytest.raises(ValueError, match="temperature must be"):
        FlowGuidedMaskedAttention(8, qk_norm=True, temperature=0.0)
    with pytest.raises(TypeError, match="qk_norm must be a bool"):
        FlowGuidedMaskedAttention(8, qk_norm=1)


def test_prepare_and_training_reject_bad_input():
    d = make_triplets(2, np.random.default_rng(5), size=16)
    bad = d["ldr"].copy()
    bad[0, 0, 0, 0, 0] = np.nan
    with pytest.raises(ValueError, match="ldr must hold finite"):
        prepare(bad, d["exposure"])
    with pytest.raises(ValueError, match="ldr must have shape"):
        prepare(d["ldr"][:, :2], d["exposure"])
    with pytest.raises(ValueError, match="exposure must hold positive"):
        prepare(d["ldr"], -d["exposure"])
    P = prepare(d["ldr"], d["exposure"])
    tgt = mu_law(torch.as_tensor(d["hdr"]))
    with pytest.raises(ValueError, match="schedule"):
        train_model(TinyDeAltHDR(dim=8), P, tgt, steps=1, batch_size=2, lr=1e-3, seed=0, schedule="attention")
    with pytest.raises(ValueError, match="lr must be"):
        train_model(TinyDeAltHDR(dim=8), P, tgt, steps=1, batch_size=2, lr=float("nan"), seed=0)
    with pytest.raises(ValueError, match="n must be"):
        make_triplets(0, np.random.default_rng(0))
    with pytest.raises(ValueError, match="fg_speed"):
        make_triplets(1, np.random.default_rng(0), fg_speed=(3.0, 1.0))


# --- experiment ------------------------------------------------------------------------------------
def test_smoke_experiment_arms_and_determinism():
    from iclr26.vision.dealthdr.experiment import run

    a, b = run("smoke", 0), run("smoke", 0)
    assert a["metrics"] == b["metrics"]
    assert set(a["metrics"]["psnr"]) == {"s15", "s0", "sinf", "random_mask", "flow_only", "single"}
    r = a["metrics"]["attention_ratio"]
    assert r["s0"] == 0 and r["sinf"] == 1 and 0 <= r["s15"] <= 1
    assert a["metrics"]["mmacs"]["s0"] <= a["metrics"]["mmacs"]["s15"] <= a["metrics"]["mmacs"]["sinf"]
    assert 0 < a["metrics"]["attention_spread"]["fgma"] <= 1
    assert set(a["metrics"]["output_change"]) == {"sinf", "s15"}
    assert all(v >= 0 for v in a["metrics"]["output_change"].values())
