"""RelayFormer: tiling against loop references, axial RoPE's rotation law, the gated decoder's formula,
the loss against a hand-written BCE, the tile-isolation reductions (m = 0 and relay without global
attention see nothing outside their tile), the splice generator, and rejections."""
import math

import numpy as np
import pytest
import torch
from sklearn.metrics import f1_score

from iclr26.vision.relayformer import (GatedMaskDecoder, LoRA, NonFiniteLossError, RelayBlock, RelayFormer,
                                       axial_rope, edge_weight_map, make_batch, make_splice, merge_tiles, pixel_f1,
                                       relay_loss, split_tiles)
from iclr26.vision.relayformer import experiment


# ---------------------------------------------------------------- tiling
@pytest.mark.parametrize("hw,tile,overlap", [((20, 33), 8, 0), ((17, 17), 8, 2), ((8, 8), 8, 1), ((5, 30), 6, 1)])
def test_split_tiles_matches_loop_reference(hw, tile, overlap):
    H, W = hw
    x = torch.randn(2, 3, H, W)
    tiles, (nh, nw) = split_tiles(x, tile, overlap)
    stride = tile - 2 * overlap
    assert nh * stride + 2 * overlap >= H and (nh - 1) * stride + 2 * overlap < max(H, tile)
    pad = torch.zeros(2, 3, nh * stride + 2 * overlap, nw * stride + 2 * overlap)
    pad[:, :, :H, :W] = x
    k = 0
    for i in range(nh):
        for j in range(nw):
            ref = pad[:, :, i * stride:i * stride + tile, j * stride:j * stride + tile]
            assert torch.equal(tiles[:, k], ref)
            k += 1
    assert tiles.shape[1] == k


@pytest.mark.parametrize("hw,tile,overlap", [((20, 33), 8, 0), ((17, 17), 8, 2), ((30, 12), 6, 1)])
def test_merge_inverts_split(hw, tile, overlap):
    x = torch.randn(1, 2, *hw)
    tiles, grid = split_tiles(x, tile, overlap)
    torch.testing.assert_close(merge_tiles(tiles, grid, hw, overlap), x)


def test_merge_averages_overlaps():
    tiles = torch.stack([torch.full((1, 4, 4), 1.0), torch.full((1, 4, 4), 3.0)])[None]  # grid 1 x 2
    out = merge_tiles(tiles, (1, 2), (4, 6), overlap=1)  # stride 2: columns 2, 3 covered twice
    assert torch.equal(out[0, 0, 0], torch.tensor([1.0, 1.0, 2.0, 2.0, 3.0, 3.0]))


# ---------------------------------------------------------------- RoPE
def test_axial_rope_against_pairwise_rotation():
    x = torch.randn(1, 3, 10)
    pos = torch.tensor([[0, 2], [1, 0], [3, 5]])
    y = axial_rope(x, pos, (4, 2), base=100.0)
    ref = x.clone()
    for l in range(3):
        for start, d, a in ((0, 4, 0), (4, 2, 1)):
            half = d // 2
            for j in range(half):
                th = pos[l, a].item() * 100.0 ** (-j / half)
                u, v = x[0, l, start + j].item(), x[0, l, start + j + half].item()
                ref[0, l, start + j] = u * math.cos(th) - v * math.sin(th)
                ref[0, l, start + j + half] = v * math.cos(th) + u * math.sin(th)
    torch.testing.assert_close(y, ref)
    assert torch.equal(y[..., 6:], x[..., 6:])


def test_axial_rope_is_relative():
    q, k = torch.randn(1, 1, 12), torch.randn(1, 1, 12)
    dims = (4, 4, 4)
    p1, p2 = torch.tensor([[1, 2, 3]]), torch.tensor([[0, 5, 1]])
    s = (axial_rope(q, p1, dims) * axial_rope(k, p2, dims)).sum()
    shift = torch.tensor([[4, -2, 7]])
    s2 = (axial_rope(q, p1 + shift, dims) * axial_rope(k, p2 + shift, dims)).sum()
    torch.testing.assert_close(s, s2)
    torch.testing.assert_close(axial_rope(q, torch.zeros(1, 3, dtype=torch.long), dims), q)
    torch.testing.assert_close(axial_rope(q, p1, dims).norm(), q.norm())


# ---------------------------------------------------------------- blocks, decoder, model
def test_global_lora_starts_as_the_local_block():
    torch.manual_seed(0)
    blk = RelayBlock(16, 2, lora_rank=4)
    x = torch.randn(2, 5, 16)
    torch.testing.assert_close(blk(x, use_global=True), blk(x))
    with torch.no_grad():
        blk.lora_qkv.B.normal_()
    assert not torch.allclose(blk(x, use_global=True), blk(x))


def test_lora_formula():
    lo = LoRA(3, 2, rank=2, alpha=4.0)
    with torch.no_grad():
        lo.B.normal_()
    x = torch.randn(5, 3)
    torch.testing.assert_close(lo(x), x @ lo.A @ lo.B * 2.0)


def test_gated_decoder_formula():
    torch.manual_seed(0)
    dec = GatedMaskDecoder(6, hidden=8, n_queries=3, heads=2, layers=1).eval()
    with torch.no_grad():  # final conv = identity
        dec.final.weight.zero_()
        dec.final.weight[0, 0, 1, 1] = 1.0
        dec.final.bias.zero_()
    feats = torch.randn(2, 6, 4, 5)
    seen = {}
    dec.norms[2].register_forward_hook(lambda m, i, o: seen.__setitem__("q", o))
    out = dec(feats)
    P = dec.proj(feats)
    q = seen["q"]
    ref = sum(torch.sigmoid(dec.gate(q[:, j]))[:, :, None, None] * torch.einsum("bd,bdhw->bhw", q[:, j], P)[:, None]
              for j in range(3))
    torch.testing.assert_close(out, ref)


def _model(**kw):
    torch.manual_seed(0)
    return RelayFormer(tile=8, patch=4, dim=16, heads=2, depth=3, rope_dims=(2, 2, 2), **kw).eval()


@pytest.mark.parametrize("hw", [(8, 8), (13, 21), (24, 9)])
def test_any_resolution_keeps_shape(hw):
    out = _model()(torch.randn(2, 3, *hw))
    assert out.shape == (2, 1, *hw) and torch.isfinite(out).all()


@pytest.mark.parametrize("kw,isolated", [(dict(n_relay=0), True), (dict(n_relay=2, global_attention=False), True),
                                         (dict(n_relay=2), False)])
def test_tiles_exchange_only_through_relay(kw, isolated):
    """Reduction: without relay-global attention a tile's features depend on that tile alone."""
    model = _model(**kw)
    with torch.no_grad():  # make the global LoRA non-zero so the global path differs from the local one
        for blk in model.blocks:
            blk.lora_qkv.B.normal_(std=0.1)
    x = torch.randn(1, 3, 8, 16)
    y = x.clone()
    y[..., 8:] = torch.randn(1, 3, 8, 8)  # change the right tile only
    fx, fy = model.features(x), model.features(y)
    same = torch.allclose(fx[..., :2], fy[..., :2], atol=1e-6)  # the left tile's 2 x 2 feature cells
    assert same == isolated


def test_model_learns_fixed_batch():
    torch.manual_seed(0)
    model = RelayFormer(tile=16, patch=4, dim=16, heads=2, depth=2, rope_dims=(2, 2, 2))
    x, m = make_batch(np.random.default_rng(0), 2, 32, 32)
    opt = torch.optim.Adam(model.parameters(), 3e-3)
    losses = []
    for _ in range(40):
        loss = relay_loss(model(x), m, edge_weight_map(m))
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert np.mean(losses[-5:]) < 0.7 * np.mean(losses[:5])


# ---------------------------------------------------------------- loss and metric
def test_relay_loss_against_hand_bce():
    logits = torch.randn(2, 1, 5, 5)
    mask = (torch.rand(2, 1, 5, 5) > 0.5).float()
    edge = edge_weight_map(mask)
    p = torch.sigmoid(logits)
    bce = -(mask * p.log() + (1 - mask) * (1 - p).log())
    torch.testing.assert_close(relay_loss(logits, mask, edge), bce.mean() + 20 * (edge * bce).mean())
    torch.testing.assert_close(relay_loss(logits, mask, edge, edge_lambda=0), bce.mean())
    torch.testing.assert_close(relay_loss(logits, mask), bce.mean())


def test_edge_map_against_loop():
    mask = torch.zeros(1, 1, 7, 7)
    mask[0, 0, 2:5, 1:6] = 1
    e = edge_weight_map(mask)[0, 0]
    m = mask[0, 0]
    for i in range(7):
        for j in range(7):
            win = m[max(0, i - 1):i + 2, max(0, j - 1):j + 2]
            assert e[i, j] == float(win.max() != win.min())


def test_pixel_f1_against_sklearn():
    rng = np.random.default_rng(0)
    pred = torch.from_numpy(rng.random((4, 1, 6, 6)) > 0.5)
    mask = torch.from_numpy(rng.random((4, 1, 6, 6)) > 0.6)
    f = pixel_f1(pred, mask)
    for b in range(4):
        assert f[b].item() == pytest.approx(f1_score(mask[b].flatten().numpy(), pred[b].flatten().numpy()))
    assert pixel_f1(torch.zeros(1, 1, 2, 2), torch.zeros(1, 1, 2, 2)).item() == 1.0
    assert pixel_f1(torch.zeros(1, 1, 2, 2), torch.ones(1, 1, 2, 2)).item() == 0.0


# ---------------------------------------------------------------- data
def test_splices_deterministic_and_in_range():
    a = make_splice(np.random.default_rng(3), 40, 70)
    b = make_splice(np.random.default_rng(3), 40, 70)
    assert np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1])
    fracs = [make_splice(np.random.default_rng(s), 64, 64)[1].mean() for s in range(30)]
    assert 0.05 < min(fracs) and max(fracs) < 0.5
    x, m = make_batch(np.random.default_rng(0), 3, 32, 48)
    assert x.shape == (3, 3, 32, 48) and m.shape == (3, 1, 32, 48) and set(m.unique().tolist()) <= {0.0, 1.0}


# ---------------------------------------------------------------- rejections
def test_rejections():
    with pytest.raises(TypeError, match="tile"):
        split_tiles(torch.zeros(1, 1, 4, 4), 4.0)
    with pytest.raises(ValueError, match="overlap"):
        split_tiles(torch.zeros(1, 1, 4, 4), 4, 2)
    with pytest.raises(ValueError, match="x must be"):
        split_tiles(torch.zeros(4, 4), 4)
    with pytest.raises(ValueError, match="grid"):
        merge_tiles(torch.zeros(1, 3, 1, 4, 4), (2, 2), (4, 4))
    with pytest.raises(ValueError, match="patch"):
        RelayFormer(tile=10, patch=4)
    with pytest.raises(ValueError, match="n_relay"):
        RelayFormer(n_relay=-1)
    with pytest.raises(ValueError, match="heads"):
        RelayFormer(dim=30, heads=4)
    with pytest.raises(ValueError, match="rope_dims"):
        RelayFormer(dim=32, heads=4, rope_dims=(4, 4, 4))
    with pytest.raises(ValueError, match="images"):
        _model()(torch.zeros(1, 1, 8, 8))
    with pytest.raises(ValueError, match="logits"):
        relay_loss(torch.zeros(1, 1, 2, 2), torch.zeros(1, 1, 2, 3))
    with pytest.raises(ValueError, match="edge_lambda"):
        relay_loss(torch.zeros(1, 1, 2, 2), torch.zeros(1, 1, 2, 2), edge_lambda=-1)
    with pytest.raises(NonFiniteLossError):
        relay_loss(torch.full((1, 1, 2, 2), float("nan")), torch.zeros(1, 1, 2, 2))
    with pytest.raises(TypeError, match="rng"):
        make_splice(0, 32, 32)
    with pytest.raises(ValueError, match="h, w"):
        make_splice(np.random.default_rng(0), 4, 32)
    with pytest.raises(ValueError, match="ratio"):
        make_splice(np.random.default_rng(0), 32, 32, ratio=1.0)
    with pytest.raises(ValueError, match="pos"):
        axial_rope(torch.zeros(1, 2, 8), torch.zeros(2, 2), (2, 2, 2))


# ---------------------------------------------------------------- experiment
def test_smoke_run_is_deterministic():
    a, b = experiment.run("smoke", 0), experiment.run("smoke", 0)
    assert a["metrics"] == b["metrics"]
    f1 = a["metrics"]["f1"]
    assert set(f1) == {"relay", "local", "relay_no_global", "resize", "all_tampered"}
    assert len({len(v) for v in f1.values()}) == 1
