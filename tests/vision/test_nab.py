"""NAB (arXiv 2602.02356): the encoding against the paper's formula, the projector against
skimage's radon algorithm and analytic line integrals, reductions, gradients, rejections."""
import math

import numpy as np
import pytest
import torch
from scipy import ndimage

from iclr26.vision.nab import (NABEncoding, NonFiniteTrainingError, ParallelBeamProjector, RFFEncoding, build_inr,
                               fbp, pixel_grid, psnr, radon, reconstruct)
from iclr26.vision.nab.phantoms import industrial_phantom, render, shepp_logan_like, simulate_scan

torch.set_num_threads(1)


def paper_bins(x, y, u, v, h, w, k, theta, lam):
    """Independent reference, written from the paper's equations, one bin and one point at a time."""
    out = np.zeros((len(x), len(u)))
    for p in range(len(x)):
        for i in range(len(u)):
            rot = np.array([[math.cos(theta[i]), -math.sin(theta[i])],
                            [math.sin(theta[i]), math.cos(theta[i])]])  # the paper's R(theta)
            xr, yr = rot @ np.array([x[p] - u[i], y[p] - v[i]])
            gamma = 0.5 * math.tanh(k[i] * (xr + h[i] / 2)) - 0.5 * math.tanh(k[i] * (xr - h[i] / 2))
            mu = 0.5 * math.tanh(k[i] * (yr + w[i] / 2)) - 0.5 * math.tanh(k[i] * (yr - w[i] / 2))
            out[p, i] = lam[i] * gamma * mu
    return out


def set_params(enc, **vals):
    with torch.no_grad():
        for name, val in vals.items():
            getattr(enc, name).copy_(torch.tensor(val, dtype=torch.float32))


FIXED = dict(u=[0.1, -0.3, 0.5], v=[0.0, 0.2, -0.4], h=[0.5, 0.3, 0.8], w=[0.4, 0.6, 0.2],
             k=[5.0, 20.0, 2.0], theta=[0.3, -0.7, 1.2], lam=[1.0, -0.5, 2.0])


def test_encoding_matches_paper_formula():
    enc = NABEncoding(3)
    set_params(enc, **FIXED)
    rng = np.random.default_rng(0)
    pts = rng.uniform(-1, 1, size=(50, 2))
    got = enc(torch.tensor(pts, dtype=torch.float32)).detach().numpy()
    want = paper_bins(pts[:, 0], pts[:, 1], **{k: np.array(v) for k, v in FIXED.items()})
    np.testing.assert_allclose(got, want, atol=2e-6)
    assert enc(torch.zeros(4, 7, 2)).shape == (4, 7, 3)


def test_zero_rotation_is_the_axis_aligned_square_wave():
    enc = NABEncoding(2, rotation=False)
    assert float(enc.theta.abs().max()) == 0.0 and not enc.theta.requires_grad
    set_params(enc, u=[0.2, -0.1], v=[0.1, 0.3], h=[0.6, 0.4], w=[0.3, 0.5], k=[8.0, 3.0])
    x = torch.linspace(-1, 1, 11)
    c = torch.stack([x, torch.full_like(x, 0.1)], -1)
    b = enc.bins(c)
    gamma = 0.5 * torch.tanh(enc.k * (x[:, None] - enc.u + enc.h / 2)) - 0.5 * torch.tanh(enc.k * (x[:, None] - enc.u - enc.h / 2))
    mu = 0.5 * torch.tanh(enc.k * (0.1 - enc.v + enc.w / 2)) - 0.5 * torch.tanh(enc.k * (0.1 - enc.v - enc.w / 2))
    np.testing.assert_allclose(b.detach().numpy(), (gamma * mu).detach().numpy(), atol=1e-6)


def test_large_steepness_gives_the_hard_rotated_box():
    enc = NABEncoding(1)
    th = 0.4
    set_params(enc, u=[0.1], v=[-0.2], h=[0.8], w=[0.4], k=[1e4], theta=[th])
    pts = np.random.default_rng(1).uniform(-1, 1, size=(2000, 2))
    xr = math.cos(th) * (pts[:, 0] - 0.1) - math.sin(th) * (pts[:, 1] + 0.2)
    yr = math.sin(th) * (pts[:, 0] - 0.1) + math.cos(th) * (pts[:, 1] + 0.2)
    margin = np.minimum(np.abs(np.abs(xr) - 0.4), np.abs(np.abs(yr) - 0.2)) > 1e-2
    box = ((np.abs(xr) < 0.4) & (np.abs(yr) < 0.2)).astype(float)
    got = enc(torch.tensor(pts, dtype=torch.float32)).detach().numpy()[:, 0]
    assert box.sum() > 50
    np.testing.assert_allclose(got[margin], box[margin], atol=1e-6)


def test_quarter_turn_swaps_the_sides():
    a, b = NABEncoding(1), NABEncoding(1)
    set_params(a, u=[0.0], v=[0.0], h=[0.8], w=[0.3], k=[6.0], theta=[math.pi / 2])
    set_params(b, u=[0.0], v=[0.0], h=[0.3], w=[0.8], k=[6.0], theta=[0.0])
    c = pixel_grid(16)
    np.testing.assert_allclose(a(c).detach().numpy(), b(c).detach().numpy(), atol=1e-5)


def test_gradients_reach_every_bin_parameter_and_freezing_stops_them():
    enc = NABEncoding(8, k_scales=(3.0, 6.0), generator=torch.Generator().manual_seed(0))
    enc(pixel_grid(12)).pow(2).sum().backward()
    for name in ("u", "v", "h", "w", "k", "theta", "lam"):
        g = getattr(enc, name).grad
        assert g is not None and float(g.abs().sum()) > 0, name
    frozen = NABEncoding(8, learn_bins=False)
    assert [n for n, p in frozen.named_parameters() if p.requires_grad] == ["lam"]


def test_k_scales_cycle_over_the_bins():
    enc = NABEncoding(5, k_scales=(25.0, 50.0, 75.0))
    assert enc.k.tolist() == [25.0, 50.0, 75.0, 25.0, 50.0]


def skimage_radon_reference(img, angles):
    """skimage.transform.radon's algorithm (circle=True): rotate about N // 2 with order-1
    interpolation (zero outside), sum the rows."""
    n = img.shape[0]
    c = n // 2
    s, t = np.meshgrid(np.arange(n) - c, np.arange(n) - c, indexing="ij")
    out = np.zeros((n, len(angles)))
    for j, a in enumerate(np.deg2rad(angles)):
        col = c + np.cos(a) * t + np.sin(a) * s
        row = c - np.sin(a) * t + np.cos(a) * s
        out[:, j] = ndimage.map_coordinates(img, [row, col], order=1, mode="constant", cval=0.0).sum(0)
    return out


def test_projector_matches_skimage_radon_algorithm():
    img = render(shepp_logan_like(np.random.default_rng(3)), 32)
    ang = np.linspace(0, 180, 7, endpoint=False)
    np.testing.assert_allclose(radon(img, ang), skimage_radon_reference(img, ang), atol=1e-4)
    np.testing.assert_allclose(radon(img, [0.0])[:, 0], img.sum(0), atol=1e-4)  # 0 degrees: column sums


def test_projector_matches_analytic_disc_line_integrals():
    n, r, row0, col0 = 64, 9.0, 26.0, 38.0
    fine = 8
    t = (np.arange(n * fine) + 0.5) / fine - 0.5
    rr, cc = np.meshgrid(t, t, indexing="ij")
    disc = (((rr - row0) ** 2 + (cc - col0) ** 2) <= r * r).astype(float)
    img = disc.reshape(n, fine, n, fine).mean(axis=(1, 3))
    ang = np.array([0.0, 37.0, 90.0, 145.0])
    sino = radon(img, ang)
    c = n // 2
    for j, a in enumerate(np.deg2rad(ang)):
        t0 = np.cos(a) * (col0 - c) - np.sin(a) * (row0 - c)
        det = np.arange(n) - c
        exact = 2 * np.sqrt(np.clip(r * r - (det - t0) ** 2, 0, None))
        inner = np.abs(det - t0) < r - 1.5  # away from the tangent rays, where sqrt is steep
        assert np.abs(sino[inner, j] - exact[inner]).max() < 0.3
        assert abs(sino[:, j].sum() - math.pi * r * r) < 0.01 * math.pi * r * r


def test_projector_is_differentiable_and_batched():
    proj = ParallelBeamProjector(16, [0.0, 45.0, 90.0])
    x = torch.rand(2, 3, 16, 16, requires_grad=True)
    y = proj(x)
    assert y.shape == (2, 3, 16, 3)
    np.testing.assert_allclose(y[1, 2].detach().numpy(), proj(x[1, 2]).detach().numpy(), atol=1e-6)
    y.sum().backward()
    assert x.grad is not None and torch.isfinite(x.grad).all()


def test_fbp_inverts_a_dense_scan():
    img = render(shepp_logan_like(np.random.default_rng(0)), 32)
    ang = np.linspace(0, 180, 90, endpoint=False)
    assert psnr(fbp(radon(img, ang), ang, "ramp"), img) > 24


def test_phantoms_and_scan():
    shapes = industrial_phantom(np.random.default_rng(5))
    ang = np.linspace(0, 180, 6, endpoint=False)
    gt, sino = simulate_scan(shapes, 16, ang)
    assert gt.shape == (16, 16) and sino.shape == (16, 6) and gt.max() > 0.3 and gt.min() >= 0
    # consistent data: the measurement is exactly the reconstruction's forward model of the truth
    np.testing.assert_allclose(sino, skimage_radon_reference(gt, ang), atol=1e-5)
    _, noisy = simulate_scan(shapes, 16, ang, noise=0.01, rng=np.random.default_rng(0))
    assert 0.002 < np.std(noisy - sino) / sino.max() < 0.02


def test_reconstruct_fits_the_sinogram():
    gt, sino = simulate_scan(industrial_phantom(np.random.default_rng(2)), 16, np.linspace(0, 180, 8, endpoint=False))
    ang = np.linspace(0, 180, 8, endpoint=False)
    for enc in ("nab", "nab_frozen", "rff"):
        r = reconstruct(sino, ang, enc, steps=30, lr=1e-2, n_features=32, hidden=16, layers=2,
                        k_scales=(10.0,), sigma=2.0)
        assert r.image.shape == (16, 16)
        assert r.losses[-1] < 0.5 * r.losses[0], enc


class NaNEncoding(torch.nn.Module):
    out_features = 2

    def __init__(self):
        super().__init__()
        self.s = torch.nn.Parameter(torch.tensor(float("nan")))

    def forward(self, c):
        return c * self.s


def test_training_stops_on_non_finite_loss():
    ang = [0.0, 90.0]
    with pytest.raises(NonFiniteTrainingError, match="step 0"):
        reconstruct(np.ones((8, 2)), ang, NaNEncoding(), steps=3)


@pytest.mark.parametrize("kwargs,match", [
    (dict(n_bins=0), "n_bins"), (dict(n_bins=2.5), "n_bins"), (dict(k_scales=(-1.0,)), "k_scales"),
    (dict(k_scales=(float("nan"),)), "k_scales"), (dict(k_scales=()), "k_scales"),
    (dict(width_range=(0.5, 0.1)), "width_range"), (dict(extent=0), "extent")])
def test_encoding_rejects_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        NABEncoding(**kwargs)


def test_encodings_reject_bad_coordinates():
    for enc in (NABEncoding(4), RFFEncoding(4)):
        with pytest.raises(ValueError, match="coords"):
            enc(torch.zeros(5, 3))
        with pytest.raises(ValueError, match="coords"):
            enc(torch.tensor([[0.0, float("nan")]]))
    with pytest.raises(ValueError, match="sigma"):
        RFFEncoding(4, sigma=0.0)
    with pytest.raises(ValueError, match="n_features"):
        RFFEncoding(5)


def test_projector_and_fbp_reject_bad_input():
    with pytest.raises(ValueError, match="angles"):
        ParallelBeamProjector(8, [])
    with pytest.raises(ValueError, match="angles"):
        ParallelBeamProjector(8, [0.0, float("nan")])
    with pytest.raises(ValueError, match="size"):
        ParallelBeamProjector(1, [0.0])
    with pytest.raises(ValueError, match="image"):
        ParallelBeamProjector(8, [0.0])(torch.zeros(7, 8))
    with pytest.raises(ValueError, match="image"):
        radon(np.full((4, 4), np.nan), [0.0])
    with pytest.raises(ValueError, match="sinogram"):
        fbp(np.zeros((8, 3)), [0.0, 1.0])
    with pytest.raises(ValueError, match="filter_name"):
        fbp(np.zeros((8, 2)), [0.0, 1.0], "box")


@pytest.mark.parametrize("kwargs,match", [
    (dict(sinogram=np.full((8, 2), np.nan)), "sinogram"), (dict(sinogram=np.zeros((8, 3))), "sinogram"),
    (dict(steps=-1), "steps"), (dict(lr=0.0), "lr"), (dict(lr=float("inf")), "lr"),
    (dict(encoding="siren"), "encoding")])
def test_reconstruct_rejects_bad_arguments(kwargs, match):
    args = dict(sinogram=np.zeros((8, 2)), angles=[0.0, 90.0], steps=1)
    args.update(kwargs)
    with pytest.raises(ValueError, match=match):
        reconstruct(**args)


def test_psnr_rejects_mismatch():
    with pytest.raises(ValueError, match="shape"):
        psnr(np.zeros(3), np.zeros(4))
    assert psnr(np.zeros(4), np.array([0.0, 1.0, 0.0, 0.0])) == pytest.approx(10 * math.log10(4))


# --- the paper's conventions and defaults ---------------------------------------------------------

def test_rotation_sign_is_the_papers():
    """R(theta) = [[cos, -sin], [sin, cos]] on the offset: with theta = +pi/4 a long thin bin
    (h = 1, w = 0.2) at the origin covers (0.3, -0.3) and not (0.3, 0.3); the opposite sign would
    swap them."""
    enc = NABEncoding(1)
    set_params(enc, u=[0.0], v=[0.0], h=[1.0], w=[0.2], k=[200.0], theta=[math.pi / 4], lam=[1.0])
    got = enc(torch.tensor([[0.3, -0.3], [0.3, 0.3]])).detach().numpy()[:, 0]
    np.testing.assert_allclose(got, [1.0, 0.0], atol=1e-4)


def test_defaults_are_the_papers_bin_count_and_nerp_backbone():
    assert NABEncoding().n_bins == 456 and RFFEncoding().out_features == 456
    inr = build_inr("rff")
    linears = [m for m in inr.mlp if isinstance(m, torch.nn.Linear)]
    assert len(linears) == 8 and linears[0].out_features == 256  # NeRP: network_depth 8, width 256
    assert isinstance(inr.mlp[-1], torch.nn.Sigmoid)              # NeRP's FFN output
    out = inr(pixel_grid(8))
    assert float(out.min()) > 0 and float(out.max()) < 1
    assert not isinstance(build_inr("rff", output="linear").mlp[-1], torch.nn.Sigmoid)
    with pytest.raises(ValueError, match="output"):
        build_inr("rff", output="tanh")


def test_rff_features_against_the_formula():
    """[cos(2 pi B c), sin(2 pi B c)] with B fixed by hand: a frequency of 1 cycle per unit has
    period 1 in x (kills a missing 2 pi)."""
    enc = RFFEncoding(4, sigma=1.0)
    B = np.array([[1.0, 0.0], [0.5, -2.0]])
    enc.B.copy_(torch.tensor(B, dtype=torch.float32))
    pts = np.random.default_rng(4).uniform(-1, 1, size=(30, 2))
    want = np.concatenate([np.cos(2 * np.pi * pts @ B.T), np.sin(2 * np.pi * pts @ B.T)], axis=1)
    got = enc(torch.tensor(pts, dtype=torch.float32)).numpy()
    np.testing.assert_allclose(got, want, atol=1e-5)
    shifted = enc(torch.tensor(pts + [1.0, 0.0], dtype=torch.float32)).numpy()
    np.testing.assert_allclose(shifted[:, [0, 2]], got[:, [0, 2]], atol=1e-4)


def test_initial_steepness_sets_the_edge_width():
    """The 10-90 % rise of a wide bin's edge spans 2 atanh(0.8) / k in coordinates, with k taken
    from ``k_scales`` at initialisation (kills a rescaled steepness anywhere before the tanh)."""
    for k0 in (8.0, 20.0):
        enc = NABEncoding(1, k_scales=(k0,))
        set_params(enc, u=[0.0], v=[0.0], h=[1.2], w=[1.8], theta=[0.0], lam=[1.0])
        x = torch.linspace(0.0, 1.2, 24001)
        g = enc(torch.stack([x, torch.zeros_like(x)], -1)).detach().numpy()[:, 0]
        hi, lo = x.numpy()[np.argmin(np.abs(g - 0.9))], x.numpy()[np.argmin(np.abs(g - 0.1))]
        assert lo - hi == pytest.approx(2 * math.atanh(0.8) / k0, rel=2e-3)
        r = reconstruct(np.zeros((8, 2)), [0.0, 90.0], "nab", steps=0, n_features=4, hidden=4, layers=1,
                        k_scales=(k0,))
        assert r.model.encoding.k.tolist() == [k0] * 4


def test_experiment_rescales_the_papers_steepness_by_image_size():
    from iclr26.vision.nab import experiment as ex
    assert ex.k_scales(256) == (600.0, 800.0)      # the paper's CaCO3 set at its 256-px slices
    assert ex.k_scales(64) == (150.0, 200.0)       # the same edge width in pixels at 64 px
    assert ex.k_scales(32, 2.0) == (150.0, 200.0)  # times the tuned factor


def test_nab_trains_its_bins_and_nab_frozen_does_not():
    ang = np.linspace(0, 180, 4, endpoint=False)
    gt, sino = simulate_scan(industrial_phantom(np.random.default_rng(7)), 12, ang)
    geo = ("u", "v", "h", "w", "k", "theta")
    init = build_inr("nab", n_features=8, hidden=8, layers=1, k_scales=(10.0,),
                     generator=torch.Generator().manual_seed(3)).encoding
    for arm, moves in (("nab", True), ("nab_frozen", False)):
        enc = reconstruct(sino, ang, arm, steps=5, lr=1e-2, seed=3, n_features=8, hidden=8, layers=1,
                          k_scales=(10.0,)).model.encoding
        for name in geo:
            changed = not torch.equal(getattr(enc, name).detach(), getattr(init, name).detach())
            assert changed == moves, (arm, name)
            assert getattr(enc, name).requires_grad == moves, (arm, name)
        assert not torch.equal(enc.lam.detach(), init.lam.detach()), arm  # heights always train
    assert isinstance(build_inr("rff").encoding, RFFEncoding)


def test_reconstruct_returns_the_image_untransposed():
    """An off-centre, asymmetric object: the reconstruction must match the truth, not its transpose."""
    size = 16
    ang = np.linspace(0, 180, 10, endpoint=False)
    shapes = [("rect", 0.9, 0.4, -0.35, 0.3, 0.1, 0.0, "set")]
    gt, sino = simulate_scan(shapes, size, ang)
    assert psnr(gt.T, gt) < 15
    r = reconstruct(sino, ang, "rff", steps=250, lr=1e-2, sigma=1.0, n_features=64, hidden=32, layers=2)
    assert psnr(r.image, gt) > psnr(r.image.T, gt) + 3
