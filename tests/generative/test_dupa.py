"""Tests of DUPA's dual-path condition alignment and the decoupled diffusion transformer
(src/iclr26/generative/dupa)."""
import re

import numpy as np
import pytest
import torch
from torch import nn

from iclr26.generative.dupa import (DDTConfig, DecoupledDiT, DUPALoss, REPALoss, condition_disagreement,
                                    negative_cosine, train_ddt, training_loss)
from iclr26.generative.dupa.model import AdaLNBlock
from iclr26.models import diffusion as D


def _rand(*shape, seed=0, dtype=torch.float64):
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed), dtype=dtype)


def _np_cos(a, b):
    return (a * b).sum(-1) / (np.linalg.norm(a, axis=-1) * np.linalg.norm(b, axis=-1))


def _small(seed=0, width=32):
    torch.manual_seed(seed)
    return DecoupledDiT(DDTConfig(width=width, enc_depth=1, dec_depth=1, heads=4))


@pytest.fixture(scope="module")
def trained():
    """A small DDT trained for 60 steps on the digits (not a random model)."""
    X, y = D.load_digits_8x8("train")
    m = _small(0)
    train_ddt(m, X, y, "none", steps=60, batch_size=64, lr=3e-3, seed=0, ema=None)
    return m, X, y


# ------------------------------------------------------------------------------------- equations


def test_negative_cosine_against_numpy_per_token():
    p, t = _rand(3, 5, 7, seed=1), _rand(3, 5, 7, seed=2)
    ref = np.mean(1 - _np_cos(p.numpy(), t.numpy()))
    assert float(negative_cosine(p, t)) == pytest.approx(ref, rel=1e-12)
    # a global (B, D) target is compared with every token of its image (REPA with one feature per image)
    g = _rand(3, 7, seed=3)
    ref_g = np.mean(1 - _np_cos(p.numpy(), g.numpy()[:, None, :]))
    assert float(negative_cosine(p, g)) == pytest.approx(ref_g, rel=1e-12)
    # invariant to positive rescaling per token, 0 for identical directions, 2 for opposite ones
    assert float(negative_cosine(p, 3.0 * p)) == pytest.approx(0.0, abs=1e-12)
    assert float(negative_cosine(p, -p)) == pytest.approx(2.0, abs=1e-12)


def test_dupa_loss_equation_with_a_linear_projector():
    z1, z2 = _rand(2, 4, 6, seed=4), _rand(2, 4, 6, seed=5)
    W = _rand(6, 6, seed=6)
    proj = nn.Linear(6, 6, bias=False).double()
    with torch.no_grad():
        proj.weight.copy_(W)
    a, b, w = z1.numpy(), z2.numpy(), W.numpy()
    one = np.mean(1 - _np_cos(a @ w.T, b))
    two = np.mean(1 - _np_cos(b @ w.T, a))
    assert float(DUPALoss(6, projector=proj, symmetric=False)(z1, z2)) == pytest.approx(one, rel=1e-12)
    assert float(DUPALoss(6, projector=proj)(z1, z2)) == pytest.approx(0.5 * (one + two), rel=1e-12)
    # identity projector: the symmetric loss is the plain cosine distance of the two conditions
    ref = np.mean(1 - _np_cos(a, b))
    assert float(DUPALoss(6, projector=False)(z1, z2)) == pytest.approx(ref, rel=1e-12)


def test_dupa_stop_gradient_routes_gradients_through_the_projected_path_only():
    z1, z2 = _rand(2, 3, 4, seed=7).requires_grad_(), _rand(2, 3, 4, seed=8).requires_grad_()
    DUPALoss(4, projector=False, symmetric=False)(z1, z2).backward()
    assert z2.grad is None or torch.all(z2.grad == 0)
    assert z1.grad.abs().sum() > 0
    # without the stop-gradient the target path gets a gradient too
    z1.grad = None
    z2b = z2.detach().clone().requires_grad_()
    DUPALoss(4, projector=False, symmetric=False, stop_gradient=False)(z1, z2b).backward()
    assert z2b.grad.abs().sum() > 0
    # symmetric + stop-gradient: each path's gradient is its own projected term's (halved)
    a, b = _rand(2, 3, 4, seed=9).requires_grad_(), _rand(2, 3, 4, seed=10).requires_grad_()
    DUPALoss(4, projector=False)(a, b).backward()
    a2 = a.detach().clone().requires_grad_()
    (0.5 * negative_cosine(a2, b.detach())).backward()
    torch.testing.assert_close(a.grad, a2.grad)


def test_repa_loss_is_projected_cosine_to_a_detached_target():
    torch.manual_seed(0)
    loss = REPALoss(8, 5).double()
    h, tgt = _rand(2, 4, 8, seed=11), _rand(2, 5, seed=12).requires_grad_()
    out = loss(h, tgt)
    ref = np.mean(1 - _np_cos(loss.projector(h).detach().numpy(), tgt.detach().numpy()[:, None]))
    assert float(out) == pytest.approx(ref, rel=1e-12)
    out.backward()
    assert tgt.grad is None
    # a per-token target equal to the broadcast global one gives the same loss
    assert float(loss(h, tgt.detach()[:, None].expand(2, 4, 5))) == pytest.approx(float(out), rel=1e-12)


def _fm_reference(model, x0, y, p_uncond, seed, two_paths, share_t=True):
    """Independent flow-matching reference: the same draws in the same order as training_loss."""
    g = torch.Generator().manual_seed(seed)
    B = len(x0)
    drop = torch.rand(B, generator=g) < p_uncond
    yy = y.clone()
    yy[drop] = model.n_classes
    t1 = torch.rand(B, generator=g)
    e1 = torch.randn(x0.shape, generator=g)
    paths = [(t1, e1)]
    if two_paths:
        t2 = t1 if share_t else torch.rand(B, generator=g)
        paths.append((t2, torch.randn(x0.shape, generator=g)))
    errs, zs = [], []
    for t, e in paths:
        xt = x0 * (1 - t)[:, None, None, None] + e * t[:, None, None, None]
        z = model.encode(xt, t, yy)
        v = model.decode(xt, t, z)
        errs.append(((v - (e - x0)) ** 2).mean())
        zs.append(z)
    return sum(errs) / len(errs), zs


@pytest.mark.parametrize("share_t", [True, False])
def test_training_loss_matches_an_independent_flow_matching_reference(trained, share_t):
    m, X, y = trained
    x0, yy = torch.as_tensor(X[:12]), torch.as_tensor(y[:12])
    fm_ref, _ = _fm_reference(m, x0, yy, 0.3, 5, two_paths=False)
    loss, fm, al = training_loss(m, x0, yy, "none", p_uncond=0.3, generator=torch.Generator().manual_seed(5))
    assert fm == pytest.approx(float(fm_ref), rel=1e-5) and float(loss) == pytest.approx(fm, rel=1e-6) and al == 0.0
    fm2_ref, (z1, z2) = _fm_reference(m, x0, yy, 0.3, 5, two_paths=True, share_t=share_t)
    align = DUPALoss(m.config.width)
    lam = 0.7
    loss, fm, al = training_loss(m, x0, yy, "dupa", align, lam, p_uncond=0.3, share_t=share_t,
                                 generator=torch.Generator().manual_seed(5))
    assert fm == pytest.approx(float(fm2_ref), rel=1e-5)
    assert al == pytest.approx(float(align(z1, z2)), rel=1e-5)
    assert float(loss) == pytest.approx(fm + lam * al, rel=1e-5)
    # "dual" is the same two paths without the alignment term
    loss_d, fm_d, al_d = training_loss(m, x0, yy, "dual", align, lam, p_uncond=0.3, share_t=share_t,
                                       generator=torch.Generator().manual_seed(5))
    assert fm_d == pytest.approx(fm, rel=1e-6) and al_d == 0.0 and float(loss_d) == pytest.approx(fm_d, rel=1e-6)


def test_shared_timestep_noises_the_same_image_at_the_same_level(trained):
    m, X, y = trained
    x0, yy = torch.as_tensor(X[:6]), torch.as_tensor(y[:6])
    seen = []

    class Spy(nn.Module):
        n_classes = m.n_classes

        def forward(self, x, t, y, return_condition=False):
            seen.append((x, t, y))
            return m(x, t, y, return_condition=True)

    training_loss(Spy(), x0, yy, "dual", p_uncond=0.5, generator=torch.Generator().manual_seed(1))
    x, t, lab = seen[-1]
    torch.testing.assert_close(t[:6], t[6:])
    torch.testing.assert_close(lab[:6], lab[6:])                    # the same label drop on both paths
    assert not torch.allclose(x[:6], x[6:])                         # independent noise
    training_loss(Spy(), x0, yy, "dual", share_t=False, generator=torch.Generator().manual_seed(1))
    assert not torch.allclose(seen[-1][1][:6], seen[-1][1][6:])


def test_repa_training_loss_adds_lambda_times_the_alignment(trained):
    m, X, y = trained
    x0, yy = torch.as_tensor(X[:8]), torch.as_tensor(y[:8])
    torch.manual_seed(3)
    align = REPALoss(m.config.width, 5)
    tgt = _rand(8, 5, seed=13, dtype=torch.float32)
    _, zs = _fm_reference(m, x0, yy, 0.0, 2, two_paths=False)
    loss, fm, al = training_loss(m, x0, yy, "repa", align, 0.25, tgt, p_uncond=0.0,
                                 generator=torch.Generator().manual_seed(2))
    assert al == pytest.approx(float(align(zs[0], tgt)), rel=1e-5)
    assert float(loss) == pytest.approx(fm + 0.25 * al, rel=1e-5)


# ----------------------------------------------------------------------------------------- model


def test_forward_is_decode_of_encode_and_starts_at_zero(trained):
    m, X, y = trained
    x, t, lab = torch.as_tensor(X[:5]), torch.linspace(0.1, 0.9, 5), torch.as_tensor(y[:5])
    v, z = m(x, t, lab, return_condition=True)
    torch.testing.assert_close(v, m.decode(x, t, m.encode(x, t, lab)))
    torch.testing.assert_close(v, m(x, t, lab))
    assert z.shape == (5, 16, 32) and v.shape == x.shape
    assert v.abs().sum() > 0
    fresh = _small(1)
    assert torch.all(fresh(x, t, lab) == 0)                          # adaLN-Zero output layer


def test_decoder_is_conditioned_token_wise_on_the_encoder_output(trained):
    m, X, y = trained
    x, t = torch.as_tensor(X[:2]), torch.full((2,), 0.5)
    z = m.encode(x, t, torch.as_tensor(y[:2]))
    z2 = z.clone()
    z2[:, 3] += 1.0
    d = (m.decode(x, t, z2) - m.decode(x, t, z)).abs()
    assert d.sum() > 0
    # the label reaches the decoder only through z
    za = m.encode(x, t, torch.tensor([1, 1]))
    zb = m.encode(x, t, torch.tensor([7, 7]))
    assert not torch.allclose(m.decode(x, t, za), m.decode(x, t, zb))


def test_patchify_round_trip_and_token_layout():
    m = DecoupledDiT(DDTConfig(image_size=8, channels=2, patch=2, width=16, heads=2))
    x = _rand(3, 2, 8, 8, seed=14, dtype=torch.float32)
    tok = m.patchify(x)
    assert tok.shape == (3, 16, 8)
    torch.testing.assert_close(m.unpatchify(tok), x)
    # token 1 is the patch at grid row 0, column 1: pixels [0:2, 2:4] of each channel
    torch.testing.assert_close(tok[0, 1], x[0, :, 0:2, 2:4].reshape(-1))


def test_adaln_block_image_condition_equals_broadcast_token_condition():
    torch.manual_seed(0)
    blk = AdaLNBlock(16, 2)
    nn.init.normal_(blk.ada[1].weight, std=0.1)
    h, c = _rand(2, 5, 16, seed=15, dtype=torch.float32), _rand(2, 16, seed=16, dtype=torch.float32)
    torch.testing.assert_close(blk(h, c), blk(h, c[:, None].expand(2, 5, 16)))
    assert not torch.allclose(blk(h, c), h)


def test_state_dict_round_trip_and_sampler_compatibility(trained):
    m, X, y = trained
    m2 = _small(5)
    m2.load_state_dict(m.state_dict())
    x, t, lab = torch.as_tensor(X[:4]), torch.full((4,), 0.3), torch.as_tensor(y[:4])
    torch.testing.assert_close(m2(x, t, lab), m(x, t, lab))
    g = torch.Generator().manual_seed(0)
    s = D.sample(m, torch.arange(4), (1, 8, 8), "flow", steps=4, generator=g,
                 guidance=D.ClassifierFreeGuidance(1.0))
    assert s.shape == (4, 1, 8, 8) and torch.isfinite(s).all()


# -------------------------------------------------------------------------------------- training


def test_dupa_training_learns_and_aligns():
    X, y = D.load_digits_8x8("train")
    m = _small(2)
    align = DUPALoss(32)
    h = train_ddt(m, X, y, "dupa", steps=60, batch_size=64, lr=3e-3, align=align, seed=1)
    assert np.mean(h["fm"][-10:]) < 0.8 * np.mean(h["fm"][:10])
    assert np.all(np.asarray(h["align"]) > 0)
    np.testing.assert_allclose(h["loss"], np.asarray(h["fm"]) + 0.5 * np.asarray(h["align"]), rtol=1e-5)
    assert not m.training


def test_checkpoints_see_ema_weights_without_changing_training():
    X, y = D.load_digits_8x8("train")
    seen = {}

    def cb(step, model):
        assert not model.training
        seen[step] = {k: v.clone() for k, v in model.state_dict().items()}

    a, b = _small(3), _small(3)
    train_ddt(a, X, y, "none", steps=12, batch_size=16, seed=2, ema=0.9, checkpoints=(4, 12), on_checkpoint=cb)
    train_ddt(b, X, y, "none", steps=12, batch_size=16, seed=2, ema=0.9)
    assert sorted(seen) == [4, 12]
    for k in a.state_dict():
        torch.testing.assert_close(a.state_dict()[k], b.state_dict()[k])      # training undisturbed
        torch.testing.assert_close(seen[12][k], a.state_dict()[k])            # final = EMA at the last step
    assert any(not torch.allclose(seen[4][k], seen[12][k]) for k in seen[4])
    c = _small(3)
    train_ddt(c, X, y, "none", steps=12, batch_size=16, seed=2, ema=None)
    assert any(not torch.allclose(c.state_dict()[k], a.state_dict()[k]) for k in a.state_dict())


def test_matched_compute_dual_methods_see_half_the_images_twice():
    X, y = D.load_digits_8x8("train")
    sizes = {}
    for method in ("none", "dual", "dupa"):
        m = _small(4)
        seen = []
        real = m.forward

        def spy(x, t, yy, return_condition=False, real=real, seen=seen):
            seen.append(len(x))
            return real(x, t, yy, return_condition)

        m.forward = spy
        train_ddt(m, X, y, method, steps=2, batch_size=20, align=DUPALoss(32) if method == "dupa" else None)
        sizes[method] = seen
    assert sizes == {"none": [20, 20], "dual": [20, 20], "dupa": [20, 20]}


def _batch_sizes(method, batch_size, match, steps=2):
    X, y = D.load_digits_8x8("train")
    m = _small(4)
    seen, real = [], m.forward

    def spy(x, t, yy, return_condition=False):
        seen.append(len(x))
        return real(x, t, yy, return_condition)

    m.forward = spy
    train_ddt(m, X, y, method, steps=steps, batch_size=batch_size, match=match,
              align=DUPALoss(32) if method == "dupa" else None)
    return seen


def test_matched_images_dual_methods_see_every_image_twice():
    assert _batch_sizes("none", 20, "images") == [20, 20]
    assert _batch_sizes("dual", 20, "images") == [40, 40]
    assert _batch_sizes("dupa", 21, "images") == [42, 42]          # any batch size at matched images
    assert _batch_sizes("none", 21, "compute") == [21, 21]         # single-path methods take odd batches


def test_matched_images_pairs_the_two_noisings_of_one_image():
    """At matched images the two halves of the model batch are two noisings of the same images."""
    X, y = D.load_digits_8x8("train")
    m = _small(4)
    batches, real = [], m.forward

    def spy(x, t, yy, return_condition=False):
        batches.append((x.detach().clone(), t.detach().clone(), yy.clone()))
        return real(x, t, yy, return_condition)

    m.forward = spy
    train_ddt(m, X, y, "dual", steps=1, batch_size=6, match="images", p_uncond=0.0)
    x, t, yy = batches[0]
    assert torch.equal(t[:6], t[6:]) and torch.equal(yy[:6], yy[6:])
    assert not torch.allclose(x[:6], x[6:])
    idx = torch.randint(len(X), (6,), generator=torch.Generator().manual_seed(0))
    assert torch.equal(yy[:6], torch.as_tensor(y)[idx])


def test_odd_batch_at_matched_compute_is_rejected_for_dual_methods():
    for method in ("dual", "dupa"):
        with _raises(f"batch_size must be even for method {method!r} at matched compute "
                     "(it counts noisy inputs, two per image), got 21"):
            _batch_sizes(method, 21, "compute")
    with _raises("match must be one of ('compute', 'images'), got 'epochs'"):
        _batch_sizes("none", 20, "epochs")


# ------------------------------------------------------------------------------------- non-finite input


def test_nan_images_and_targets_raise():
    m = _small(0)
    X, Y = np.zeros((10, 1, 8, 8), np.float32), np.zeros(10, np.int64)
    for bad in (np.nan, np.inf, -np.inf):
        Xb = X.copy()
        Xb[3, 0, 2, 2] = bad
        with _raises("X must be finite (it holds NaN or inf)"):
            train_ddt(m, Xb, Y, "none", steps=1, batch_size=2)
        with _raises("x0 must be finite (it holds NaN or inf)"):
            training_loss(m, torch.as_tensor(Xb[2:4]), torch.tensor([0, 1]), "none")
        with _raises("x0 must be finite (it holds NaN or inf)"):
            condition_disagreement(m, torch.as_tensor(Xb[2:4]), torch.tensor([0, 1]))
    tgt = torch.zeros(2, 4)
    tgt[1, 1] = float("nan")
    with _raises("target must be finite (it holds NaN or inf)"):
        training_loss(m, torch.zeros(2, 1, 8, 8), torch.tensor([0, 1]), "repa", REPALoss(32, 4), target=tgt)


def test_training_stops_on_a_non_finite_loss():
    X, y = D.load_digits_8x8("train")
    m = _small(0)
    with torch.no_grad():
        m.out.weight.fill_(float("inf"))
    with pytest.raises(FloatingPointError, match="non-finite training loss"):
        train_ddt(m, X, y, "none", steps=3, batch_size=8)


class _NaNGradProjector(nn.Module):
    def __init__(self, nan_grad):
        super().__init__()
        self.lin = nn.Linear(32, 32)
        self.nan_grad = nan_grad

    def forward(self, z):
        return self.nan_grad(self.lin(z))


def test_training_stops_on_a_non_finite_gradient_and_removes_its_hooks(nan_grad):
    X, y = D.load_digits_8x8("train")
    m = _small(0)
    align = DUPALoss(32, projector=_NaNGradProjector(nan_grad))
    with pytest.raises(FloatingPointError, match="non-finite gradient"):
        train_ddt(m, X, y, "dupa", steps=3, batch_size=8, align=align)
    # the hooks are gone: a plain backward with a NaN gradient no longer raises
    v = m(torch.zeros(2, 1, 8, 8), torch.rand(2), torch.tensor([0, 1]))
    (v.sum() * float("nan")).backward()


# ------------------------------------------------------------------------------------- mechanism probe


def test_condition_disagreement_against_a_manual_reference(trained):
    m, X, y = trained
    x0, yy = torch.as_tensor(X[:12]), torch.as_tensor(y[:12])
    for share_t in (True, False):
        got = condition_disagreement(m, x0, yy, share_t=share_t, generator=torch.Generator().manual_seed(3))
        g = torch.Generator().manual_seed(3)
        t1 = torch.rand(12, generator=g)
        t2 = t1 if share_t else torch.rand(12, generator=g)
        e1, e2 = torch.randn(x0.shape, generator=g), torch.randn(x0.shape, generator=g)
        with torch.no_grad():
            z1 = m.encode((1 - t1.view(-1, 1, 1, 1)) * x0 + t1.view(-1, 1, 1, 1) * e1, t1, yy).numpy()
            z2 = m.encode((1 - t2.view(-1, 1, 1, 1)) * x0 + t2.view(-1, 1, 1, 1) * e2, t2, yy).numpy()
        ref = float(np.mean(1 - _np_cos(z1.astype(np.float64), z2.astype(np.float64))))
        assert got == pytest.approx(ref, rel=1e-5, abs=1e-7)
        assert 0.0 < got < 2.0
    m.train()
    condition_disagreement(m, x0, yy)
    assert m.training


def test_condition_disagreement_is_zero_for_identical_paths_and_grows_with_separate_timesteps(trained):
    m, X, y = trained
    x0, yy = torch.as_tensor(X[:40]), torch.as_tensor(y[:40])

    # an encoder that ignores its input gives identical conditions: zero disagreement
    class Const(nn.Module):
        training = False

        def encode(self, x, t, y):
            return torch.ones(len(x), 16, 8)

        def train(self, mode=True):
            return self

        def eval(self):
            return self

    assert condition_disagreement(Const(), x0, yy) == pytest.approx(0.0, abs=1e-7)
    shared = condition_disagreement(m, x0, yy, True, torch.Generator().manual_seed(5))
    separate = condition_disagreement(m, x0, yy, False, torch.Generator().manual_seed(5))
    assert separate > shared


# ------------------------------------------------------------------------------------- steps to reach an FD


def test_steps_to_reach_interpolates_log_linearly_and_censors():
    from iclr26.generative.dupa.experiment import steps_to_reach

    steps = [50, 100, 200, 400]
    # FD halves per doubling of steps: log FD is linear in log step, so the interpolation is exact
    fds = [80.0, 40.0, 20.0, 10.0]
    assert steps_to_reach(steps, fds, 40.0, 800) == pytest.approx(100.0)
    assert steps_to_reach(steps, fds, 40.0 / np.sqrt(2), 800) == pytest.approx(100.0 * np.sqrt(2))
    assert steps_to_reach(steps, fds, 15.0, 800) == pytest.approx(200 * 20 / 15)
    assert steps_to_reach(steps, fds, 100.0, 800) == 50.0                 # already there at the first checkpoint
    assert steps_to_reach(steps, fds, 9.99, 800) == 800.0                 # never reached: censored
    # the FIRST crossing counts even if the curve rises again afterwards
    assert steps_to_reach(steps, [80.0, 30.0, 60.0, 20.0], 40.0, 800) < 100.0
    assert steps_to_reach(steps, [80.0, 30.0, 60.0, 20.0], 40.0, 800) > 50.0
    with _raises("beyond must exceed the last step 400.0, got 400"):
        steps_to_reach(steps, fds, 15.0, 400)
    with _raises("fds and target must be finite and > 0"):
        steps_to_reach(steps, [80.0, np.nan, 20.0, 10.0], 15.0, 800)
    with _raises("fds and target must be finite and > 0"):
        steps_to_reach(steps, fds, float("nan"), 800)
    with _raises("steps must be positive and increasing, got [50.0, 50.0, 200.0, 400.0]"):
        steps_to_reach([50, 50, 200, 400], fds, 15.0, 800)
    with _raises("steps and fds must be 1-d arrays of one length, got (4,) and (3,)"):
        steps_to_reach(steps, fds[:3], 15.0, 800)


# ------------------------------------------------------------------------------------- rejection


def _raises(msg):
    """The exact message (anchored), so that a changed message fails the test."""
    return pytest.raises(ValueError, match="^" + re.escape(msg) + "$")


def test_rejections():
    m = _small(0)
    x = torch.zeros(2, 1, 8, 8)
    t, y = torch.rand(2), torch.tensor([0, 1])
    with _raises("x must have shape (B, 1, 8, 8), got (2, 1, 7, 8)"):
        m(torch.zeros(2, 1, 7, 8), t, y)
    with _raises("x must have shape (B, 1, 8, 8), got (1, 8, 8)"):
        m.decode(torch.zeros(1, 8, 8), t, torch.zeros(2, 16, 32))
    with _raises("t must have shape (2,), got (3,)"):
        m(x, torch.rand(3), y)
    with _raises("y must be 2 labels in 0..10 (10 = no label)"):
        m(x, t, torch.tensor([0, 11]))
    with _raises("y must be 2 labels in 0..10 (10 = no label)"):
        m(x, t, torch.tensor([-1, 3]))
    with _raises("y must be 2 labels in 0..10 (10 = no label)"):
        m(x, t, torch.tensor([1, 2, 3]))
    with _raises("z must have shape (2, 16, 32), got (2, 15, 32)"):
        m.decode(x, t, torch.zeros(2, 15, 32))
    with _raises("image_size 8 must be divisible by patch 3"):
        DDTConfig(image_size=8, patch=3)
    with _raises("width 30 must be even and divisible by heads 4"):
        DDTConfig(width=30, heads=4)
    with _raises("width 9 must be even and divisible by heads 3"):
        DDTConfig(width=9, heads=3)
    for bad in (dict(dec_depth=0), dict(enc_depth=0), dict(channels=0), dict(n_classes=0), dict(patch=0, image_size=8)):
        with pytest.raises((ValueError, ZeroDivisionError)):
            DDTConfig(**bad)
    with _raises("channels, enc_depth, dec_depth, heads, n_classes and patch must be >= 1"):
        DDTConfig(dec_depth=0)
    with _raises("method must be one of ('none', 'dual', 'dupa', 'repa'), got 'repa2'"):
        training_loss(m, x, y, "repa2")
    with _raises("method 'dupa' needs an align module"):
        training_loss(m, x, y, "dupa")
    with _raises("method 'repa' needs an align module"):
        training_loss(m, x, y, "repa", target=torch.zeros(2, 4))
    with _raises("method 'repa' needs the encoder targets of x0"):
        training_loss(m, x, y, "repa", REPALoss(32, 4))
    with _raises("p_uncond must be in [0, 1], got 1.5"):
        training_loss(m, x, y, "none", p_uncond=1.5)
    with _raises("p_uncond must be in [0, 1], got -0.1"):
        training_loss(m, x, y, "none", p_uncond=-0.1)
    with _raises("lam must be finite and >= 0, got -1.0"):
        training_loss(m, x, y, "dupa", DUPALoss(32), lam=-1.0)
    with _raises("lam must be finite and >= 0, got nan"):
        training_loss(m, x, y, "dupa", DUPALoss(32), lam=float("nan"))
    with _raises("z1 and z2 must have the same shape (..., 4), got (2, 3, 4) and (2, 2, 4)"):
        DUPALoss(4)(torch.zeros(2, 3, 4), torch.zeros(2, 2, 4))
    with _raises("z1 and z2 must have the same shape (..., 4), got (2, 3, 5) and (2, 3, 5)"):
        DUPALoss(4)(torch.zeros(2, 3, 5), torch.zeros(2, 3, 5))
    with _raises("projector must be True, False or an nn.Module, got 'mlp'"):
        DUPALoss(4, projector="mlp")
    with _raises("dim must be >= 1, got 0"):
        DUPALoss(0)
    with _raises("pred and target must share the last dimension, got (2, 3) and (2, 4)"):
        negative_cosine(torch.zeros(2, 3), torch.zeros(2, 4))
    with _raises("h must end in 4 and target in 3, got (2, 5, 4) and (2, 4)"):
        REPALoss(4, 3)(torch.zeros(2, 5, 4), torch.zeros(2, 4))
    with _raises("h must end in 4 and target in 3, got (2, 5, 5) and (2, 3)"):
        REPALoss(4, 3)(torch.zeros(2, 5, 5), torch.zeros(2, 3))
    from iclr26.generative.dupa.loss import mlp_projector
    with _raises("in_dim, out_dim and hidden must be >= 1, got 4, 0, 8"):
        mlp_projector(4, 0)
    with _raises("in_dim, out_dim and hidden must be >= 1, got 4, 4, -1"):
        mlp_projector(4, 4, -1)
    X, Y = np.zeros((10, 1, 8, 8), np.float32), np.zeros(10, np.int64)
    with _raises("checkpoints must lie in 1..5, got [6]"):
        train_ddt(m, X, Y, "none", steps=5, checkpoints=(6,))
    with _raises("checkpoints must lie in 1..5, got [0]"):
        train_ddt(m, X, Y, "none", steps=5, checkpoints=(0, 5))
    with _raises("method 'repa' needs target_fn"):
        train_ddt(m, X, Y, "repa", steps=5, align=REPALoss(32, 4))
    with _raises("ema must be in [0, 1) or None, got 1.0"):
        train_ddt(m, X, Y, "none", steps=5, ema=1.0)
    with _raises("ema must be in [0, 1) or None, got -0.5"):
        train_ddt(m, X, Y, "none", steps=5, ema=-0.5)
    with _raises("X and y must have the same length, got 10 and 5"):
        train_ddt(m, X, Y[:5], "none", steps=5)
    with _raises("steps must be >= 1 and batch_size >= 2, got 0, 128"):
        train_ddt(m, X, Y, "none", steps=0)
    with _raises("steps must be >= 1 and batch_size >= 2, got 3, 1"):
        train_ddt(m, X, Y, "none", steps=3, batch_size=1)
    with _raises("method must be one of ('none', 'dual', 'dupa', 'repa'), got 'ddt'"):
        train_ddt(m, X, Y, "ddt", steps=1)


def test_boundary_values_are_accepted():
    from iclr26.generative.dupa.loss import mlp_projector

    m = _small(0)
    X, Y = np.zeros((10, 1, 8, 8), np.float32), np.zeros(10, np.int64)
    train_ddt(m, X, Y, "none", steps=1, batch_size=2, ema=0.0, checkpoints=(1,), on_checkpoint=lambda s, mm: None)
    train_ddt(m, X, Y, "dual", steps=1, batch_size=2, ema=None)
    x, y = torch.zeros(2, 1, 8, 8), torch.tensor([0, 10])
    for p in (0.0, 1.0):
        training_loss(m, x, y, "none", p_uncond=p)
    training_loss(m, x, y, "dupa", DUPALoss(32), lam=0.0)
    assert len(mlp_projector(1, 1, 1)) == 5
    DUPALoss(1)
    DDTConfig(image_size=4, patch=1, width=2, heads=1, enc_depth=1, dec_depth=1, n_classes=1, channels=1)
    m(x, torch.tensor([0.0, 1.0]), torch.tensor([0, 10]))


def test_documented_defaults():
    import inspect

    def defaults(fn):
        return {k: v.default for k, v in inspect.signature(fn).parameters.items() if v.default is not inspect._empty}

    assert defaults(train_ddt) == dict(method="dupa", steps=1000, batch_size=128, lr=1e-3, lam=0.5, align=None,
                                       target_fn=None, p_uncond=0.1, ema=0.995, seed=0, share_t=True,
                                       checkpoints=(), on_checkpoint=None, match="compute")
    assert defaults(training_loss) == dict(method="dupa", align=None, lam=0.5, target=None, p_uncond=0.1,
                                           share_t=True, generator=None)
    assert defaults(DUPALoss.__init__) == dict(projector=True, symmetric=True, stop_gradient=True, hidden=None)
    assert defaults(negative_cosine) == dict(stop_gradient=True)
    c = DDTConfig()
    assert (c.image_size, c.channels, c.patch, c.width, c.enc_depth, c.dec_depth, c.heads, c.n_classes) == \
        (8, 1, 2, 64, 2, 2, 4, 10)


@pytest.mark.slow
def test_quick_claim_check_runs():
    from iclr26.generative.dupa import experiment

    out = experiment.run("quick", 0)
    assert set(out["metrics"]["log_fd_final"]) == {"ddt", "dupa_img", "dual_img", "dupa_sep", "trivial"}
    assert all(np.isfinite(v) for v in out["metrics"]["log_fd_final"].values())


def test_checkpoint_without_ema_sees_live_weights_in_eval_mode_and_restores_train_mode():
    X, y = D.load_digits_8x8("train")
    modes, states = [], []
    m = _small(6)

    def cb(step, model):
        modes.append(model.training)
        states.append({k: v.clone() for k, v in model.state_dict().items()})
        assert model is m

    steps_seen = []
    orig = m.train

    def spy_train(mode=True):
        steps_seen.append(mode)
        return orig(mode)

    m.train = spy_train
    train_ddt(m, X, y, "none", steps=3, batch_size=8, ema=None, checkpoints=(2,), on_checkpoint=cb)
    assert modes == [False]
    assert steps_seen[0] is True and True in steps_seen[1:]          # training resumes in train mode
    assert not m.training
    assert any(not torch.allclose(states[0][k], m.state_dict()[k]) for k in states[0])


def test_projector_shapes_and_options():
    from iclr26.generative.dupa.loss import mlp_projector

    p = mlp_projector(6, 5)
    lins = [l for l in p if isinstance(l, nn.Linear)]
    assert [(l.in_features, l.out_features) for l in lins] == [(6, 12), (12, 12), (12, 5)]
    assert sum(isinstance(l, nn.SiLU) for l in p) == 2
    assert [l.out_features for l in mlp_projector(4, 4, hidden=7) if isinstance(l, nn.Linear)] == [7, 7, 4]
    with pytest.raises(ValueError, match="must be >= 1"):
        mlp_projector(0, 4)
    d = DUPALoss(8, hidden=3)
    assert [l.out_features for l in d.projector if isinstance(l, nn.Linear)] == [3, 3, 8]
    assert isinstance(DUPALoss(8, projector=False).projector, nn.Identity)
    r = REPALoss(8, 5, hidden=4)
    assert [l.out_features for l in r.projector if isinstance(l, nn.Linear)] == [4, 4, 5]
    assert (r.dim, r.target_dim) == (8, 5)
    # the DUPA projector is trained with the model (its parameters reach the optimiser)
    X, y = D.load_digits_8x8("train")
    m = _small(7)
    align = DUPALoss(32)
    before = [p.detach().clone() for p in align.parameters()]
    train_ddt(m, X, y, "dupa", steps=2, batch_size=8, align=align)
    assert any(not torch.allclose(a, b) for a, b in zip(before, align.parameters()))


def test_zero_vectors_do_not_give_nan():
    z = torch.zeros(2, 3, 4)
    assert torch.isfinite(negative_cosine(z, z))
    assert float(negative_cosine(z, z)) == pytest.approx(1.0)


def test_architecture_matches_the_ddt_layout():
    c = DDTConfig(width=16, enc_depth=2, dec_depth=3, heads=2, patch=2, image_size=8, channels=1, n_classes=10)
    m = DecoupledDiT(c)
    w, pdim, n = 16, 4, 16
    block = 18 * w * w + 15 * w                    # attention 4w^2+4w, MLP (4x) 8w^2+5w, adaLN 6w^2+6w
    expected = ((pdim * w + w) + n * w + 11 * w + 2 * (w * w + w) + 2 * block      # encoder
                + (pdim * w + w) + n * w + 2 * (w * w + w) + 3 * block              # decoder
                + (2 * w * w + 2 * w) + (w * pdim + pdim))                          # adaLN-Zero output
    assert sum(p.numel() for p in m.parameters()) == expected
    assert len(m.encoder) == 2 and len(m.decoder) == 3
    blk = m.encoder[0]
    assert isinstance(blk.mlp[1], nn.GELU) and blk.mlp[1].approximate == "tanh"
    assert blk.attn.num_heads == 2 and blk.attn.batch_first
    for norm in (blk.n1, blk.n2, m.enc_norm, m.n_out):
        assert norm.eps == 1e-6 and not norm.elementwise_affine
    for lin in [b.ada[1] for b in list(m.encoder) + list(m.decoder)] + [m.ada_out[1], m.out]:
        assert torch.all(lin.weight == 0) and torch.all(lin.bias == 0)     # adaLN-Zero
    assert 0.01 < float(m.enc_pos.std()) < 0.03 and 0.01 < float(m.dec_pos.std()) < 0.03
    assert m.label.num_embeddings == 11                                      # + the null label
    assert m.grid == 4 and m.n_classes == 10


def _manual_training(model, align, X, y, method, steps, n_img, lr, lam, ema, seed, target_fn=None):
    """An independent re-implementation of the loop: AdamW without weight decay, EMA of the weights."""
    g = torch.Generator().manual_seed(seed)
    Xt, yt = torch.as_tensor(X, dtype=torch.float32), torch.as_tensor(y, dtype=torch.long)
    params = list(model.parameters()) + (list(align.parameters()) if align is not None else [])
    opt = torch.optim.AdamW(params, lr=lr, weight_decay=0.0)
    avg = {k: v.clone() for k, v in model.state_dict().items()}
    for _ in range(steps):
        idx = torch.randint(len(Xt), (n_img,), generator=g)
        tgt = target_fn(Xt[idx]) if target_fn is not None else None
        loss, _, _ = training_loss(model, Xt[idx], yt[idx], method, align, lam, tgt, 0.1, True, g)
        opt.zero_grad()
        loss.backward()
        opt.step()
        with torch.no_grad():
            for k, v in model.state_dict().items():
                avg[k] = ema * avg[k] + (1 - ema) * v
    return avg


@pytest.mark.parametrize("method", ["dupa", "repa", "none"])
def test_training_loop_matches_a_manual_loop(method):
    X, y = D.load_digits_8x8("train")
    X, y = X[:200].astype(np.float64), y[:200].astype(np.int32)      # dtypes are converted
    torch.manual_seed(0)
    feats = nn.Linear(64, 5)

    def target_fn(x0):
        assert x0.shape == (8, 1, 8, 8) and x0.dtype == torch.float32
        return feats(x0.reshape(len(x0), -1)).detach()

    mk_align = {"dupa": lambda: DUPALoss(32), "repa": lambda: REPALoss(32, 5), "none": lambda: None}[method]
    a, b = _small(8), _small(8)
    torch.manual_seed(1)
    al_a = mk_align()
    torch.manual_seed(1)
    al_b = mk_align()
    train_ddt(a, X, y, method, steps=3, batch_size=8, lr=2e-3, lam=0.3, align=al_a, ema=0.7, seed=4,
              target_fn=target_fn if method == "repa" else None)
    ref = _manual_training(b, al_b, X, y, method, 3, 4 if method == "dupa" else 8, 2e-3, 0.3, 0.7, 4,
                           target_fn if method == "repa" else None)
    for k, v in a.state_dict().items():
        torch.testing.assert_close(v, ref[k], rtol=1e-5, atol=1e-6)


def test_default_arguments_behave_as_documented():
    X, y = D.load_digits_8x8("train")
    X, y = X[:300], y[:300]
    a, b = _small(9), _small(9)
    torch.manual_seed(2)
    al_a = DUPALoss(32)
    torch.manual_seed(2)
    al_b = DUPALoss(32)
    ha = train_ddt(a, X, y, steps=2, align=al_a)                                   # method "dupa" by default
    hb = train_ddt(b, X, y, "dupa", steps=2, batch_size=128, lr=1e-3, lam=0.5, align=al_b, p_uncond=0.1,
                   ema=0.995, seed=0, share_t=True)
    assert ha == hb and all(v > 0 for v in ha["align"])
    for k, v in a.state_dict().items():
        torch.testing.assert_close(v, b.state_dict()[k])
    with _raises("checkpoints must lie in 1..1000, got [1001]"):                    # steps = 1000 by default
        train_ddt(a, X, y, checkpoints=(1001,), align=al_a)


def test_training_loss_defaults_are_dupa_with_lambda_one_half(trained):
    m, X, y = trained
    x0, yy = torch.as_tensor(X[:6]), torch.as_tensor(y[:6])
    align = DUPALoss(m.config.width)
    loss, fm, al = training_loss(m, x0, yy, align=align, generator=torch.Generator().manual_seed(3))
    ref, fm2, al2 = training_loss(m, x0, yy, "dupa", align, 0.5, generator=torch.Generator().manual_seed(3))
    assert al > 0 and (fm, al) == (fm2, al2)
    assert float(loss) == pytest.approx(fm + 0.5 * al, rel=1e-6)


def test_adaln_block_matches_a_hand_written_adaln_zero_reference():
    """Peebles & Xie 2023, Fig. 3: u = LN(h)(1 + s1) + b1; h += g1 attn(u); h += g2 mlp(LN(h)(1 + s2) + b2),
    with (s1, b1, g1, s2, b2, g2) = Linear(SiLU(c)); weights drawn away from the zero init."""
    torch.manual_seed(0)
    blk = AdaLNBlock(8, 2)
    with torch.no_grad():
        blk.ada[1].weight.normal_(0, 0.5)
        blk.ada[1].bias.normal_(0, 0.5)
    h, c = torch.randn(3, 5, 8), torch.randn(3, 8) * 2 - 1
    mod = (c * torch.sigmoid(c)) @ blk.ada[1].weight.T + blk.ada[1].bias
    s1, b1, g1, s2, b2, g2 = [m[:, None] for m in mod.split(8, -1)]
    ln = lambda x: (x - x.mean(-1, keepdim=True)) / torch.sqrt(x.var(-1, unbiased=False, keepdim=True) + 1e-6)
    u = ln(h) * (1 + s1) + b1
    want = h + g1 * blk.attn(u, u, u, need_weights=False)[0]
    want = want + g2 * blk.mlp(ln(want) * (1 + s2) + b2)
    torch.testing.assert_close(blk(h, c), want, rtol=1e-5, atol=1e-5)


def test_decoder_output_modulation_and_time_mlps_match_a_reference():
    """Patch 3 on 9x9 images (patch ** 2 = 9 values per token), non-zero output layers: the velocity is
    Linear(LN(h)(1 + sc) + sh) with (sh, sc) = Linear(SiLU(z + time_mlp(emb(t)))), and the time MLPs are
    Linear -> SiLU -> Linear."""
    torch.manual_seed(1)
    cfg = DDTConfig(image_size=9, patch=3, width=16, enc_depth=1, dec_depth=1, heads=2)
    m = DecoupledDiT(cfg)
    assert m.enc_in.in_features == 9 and m.grid == 3
    with torch.no_grad():
        for p in (m.ada_out[1].weight, m.ada_out[1].bias, m.out.weight, m.out.bias,
                  *(q for blk in (*m.encoder, *m.decoder) for q in blk.ada[1].parameters())):
            p.normal_(0, 0.3)
    x, t = torch.randn(2, 1, 9, 9), torch.tensor([0.3, 0.8])
    y = torch.tensor([1, 4])
    silu = lambda v: v * torch.sigmoid(v)
    from iclr26.generative.dupa import model as M
    emb = M.timestep_embedding(t, 16)
    mlp = lambda seq, v: seq[2](silu(seq[0](v)))
    z = m.encode(x, t, y)
    torch.testing.assert_close(z, m.enc_norm(m.encoder[0](m.enc_in(m.patchify(x)) + m.enc_pos,
                                                          mlp(m.time, emb) + m.label(y))), rtol=1e-5, atol=1e-5)
    cond = z + mlp(m.dec_time, emb)[:, None]
    h = m.decoder[0](m.dec_in(m.patchify(x)) + m.dec_pos, cond)
    sh, sc = (silu(cond) @ m.ada_out[1].weight.T + m.ada_out[1].bias).split(16, -1)
    ln = lambda v: (v - v.mean(-1, keepdim=True)) / torch.sqrt(v.var(-1, unbiased=False, keepdim=True) + 1e-6)
    want = m.unpatchify(m.out(ln(h) * (1 + sc) + sh))
    torch.testing.assert_close(m.decode(x, t, z), want, rtol=1e-5, atol=1e-5)
    assert want.abs().max() > 0.1


def test_state_dict_of_the_earlier_layout_loads_and_seeded_init_is_unchanged():
    """The label embedding and encoder time MLP moved into ``cond`` (the shared DiT condition
    embedding); a state dict with the earlier top-level ``label.*`` / ``time.*`` keys loads into the
    same parameters, and the seeded initialisation (recorded before the move) is unchanged."""
    torch.manual_seed(0)
    m = DecoupledDiT()
    assert [float(m.dec_pos.sum()), float(m.decoder[-1].mlp[2].weight.sum()), float(m.label.weight.sum())] == \
        pytest.approx([-0.6363731622695923, 6.383399963378906, -18.99164390563965], rel=1e-6)
    assert m.label is m.cond.label and m.time is m.cond.time and isinstance(m.encoder[0], D.DiTBlock)
    with torch.no_grad():
        for p in m.parameters():
            p.normal_(0, 0.2)
    old = {(k[len("cond."):] if k.startswith("cond.") else k): v.clone() for k, v in m.state_dict().items()}
    assert {k for k in old if k.startswith(("label.", "time."))} == {
        "label.weight", "time.0.weight", "time.0.bias", "time.2.weight", "time.2.bias"}
    torch.manual_seed(1)
    fresh = DecoupledDiT()
    fresh.load_state_dict(old)                                   # strict: every key matched
    x, t, y = torch.randn(2, 1, 8, 8), torch.tensor([0.2, 0.9]), torch.tensor([3, 10])
    assert torch.equal(fresh(x, t, y), m(x, t, y))
    fresh.load_state_dict(m.state_dict())                        # and the current layout
    with pytest.raises(RuntimeError, match="Missing key"):
        fresh.load_state_dict({k: v for k, v in old.items() if k != "label.weight"})
