"""ODPV (ICLR 2026, 'Certifying the Full YOLO Pipeline'): box ops against loop references, the
interval IoU bounds' soundness, the scenario bounds against closed forms, the NMS check against real
NMS, reductions, the DeepPAC-style comparator on an exactly linear model, rejections."""
import math

import numpy as np
import pytest
import torch
from scipy.special import comb

from iclr26.data.vision_tasks import iou as ref_iou
from iclr26.vision.odpv import (NonFiniteTrainingError, TinyYOLO, box_iou, certify_nms, deeppac_margin_size,
                                deeppac_output_range,
                                discard_budget, interval_box_iou, min_iou_to_box, nms, pac_output_range, pac_sample_size,
                                sample_perturbations, scenario_confidence, train_detector, verify_detection)
from iclr26.vision.odpv.detector import make_scenes

torch.set_num_threads(1)


def rand_boxes(n, rng, size=32.0):
    xy = rng.uniform(0, size * 0.8, size=(n, 2))
    wh = rng.uniform(1, size * 0.4, size=(n, 2))
    return torch.tensor(np.c_[xy, xy + wh], dtype=torch.float64)


def ref_nms(boxes, scores, thr):
    """Independent greedy NMS: repeatedly take the best remaining box, drop those with IoU > thr."""
    b = boxes.tolist()
    s = scores.tolist()
    remaining = sorted(range(len(b)), key=lambda i: (-s[i], i))
    keep = []
    while remaining:
        i = remaining.pop(0)
        keep.append(i)
        remaining = [j for j in remaining if ref_iou(b[i], b[j]) <= thr]
    return keep


# ----------------------------------------------------------------------------- box ops
def test_box_iou_matches_loop_reference():
    rng = np.random.default_rng(0)
    a, b = rand_boxes(7, rng), rand_boxes(5, rng)
    got = box_iou(a, b)
    want = [[ref_iou(x, y) for y in b.tolist()] for x in a.tolist()]
    np.testing.assert_allclose(got.numpy(), want, atol=1e-12)
    assert box_iou(a[:1], a[:1]).item() == pytest.approx(1.0)
    half = torch.tensor([[0.0, 0.0, 2.0, 1.0]], dtype=torch.float64)
    assert box_iou(half, torch.tensor([[1.0, 0.0, 3.0, 1.0]], dtype=torch.float64)).item() == pytest.approx(1 / 3)


@pytest.mark.parametrize("thr", [0.0, 0.3, 0.45, 0.7])
def test_nms_matches_reference(thr):
    rng = np.random.default_rng(1)
    for _ in range(20):
        b = rand_boxes(12, rng, size=16.0)
        s = torch.tensor(rng.uniform(size=12))
        assert nms(b, s, thr).tolist() == ref_nms(b, s, thr)


def test_nms_suppresses_only_strictly_above_threshold():
    b = torch.tensor([[0.0, 0.0, 2.0, 1.0], [1.0, 0.0, 3.0, 1.0]])   # IoU exactly 1/3
    s = torch.tensor([0.9, 0.8])
    assert nms(b, s, 1 / 3 + 1e-6).tolist() == [0, 1]
    assert nms(b, s, 0.3).tolist() == [0]


# ----------------------------------------------------------------------------- interval IoU
def test_interval_iou_is_exact_at_point_intervals():
    rng = np.random.default_rng(2)
    a, b = rand_boxes(6, rng), rand_boxes(4, rng)
    lo, hi = interval_box_iou(a, a, b, b)
    np.testing.assert_allclose(lo.numpy(), box_iou(a, b).numpy(), atol=1e-12)
    np.testing.assert_allclose(hi.numpy(), box_iou(a, b).numpy(), atol=1e-12)


def test_interval_iou_bounds_contain_every_box_inside():
    rng = np.random.default_rng(3)
    for _ in range(30):
        c1, c2 = rand_boxes(1, rng, 16.0), rand_boxes(1, rng, 16.0)
        w1, w2 = torch.tensor(rng.uniform(0, 2, 4)), torch.tensor(rng.uniform(0, 2, 4))
        lo1, hi1, lo2, hi2 = c1 - w1, c1 + w1, c2 - w2, c2 + w2
        lower, upper = interval_box_iou(lo1, hi1, lo2, hi2)
        for _ in range(200):
            b1 = lo1 + (hi1 - lo1) * torch.tensor(rng.uniform(size=4))
            b2 = lo2 + (hi2 - lo2) * torch.tensor(rng.uniform(size=4))
            v = ref_iou(b1[0].tolist(), b2[0].tolist())
            assert lower.item() - 1e-12 <= v <= upper.item() + 1e-12


def test_interval_iou_hand_value():
    # box 1 corners within +-0.5 of (0,0,4,4); box 2 fixed (0,0,4,4): interval arithmetic gives
    # I_min = 3^2, A_max = 5^2, so lower = 9 / (25 + 16 - 9); the true minimum (the shrunk box) is 9/16
    base = torch.tensor([[0.0, 0.0, 4.0, 4.0]], dtype=torch.float64)
    lower, upper = interval_box_iou(base - 0.5, base + 0.5, base, base)
    assert lower.item() == pytest.approx(9 / 32)
    assert upper.item() == pytest.approx(1.0)
    assert min_iou_to_box(base - 0.5, base + 0.5, base[0]).item() == pytest.approx(9 / 16)


def test_vertex_minimum_is_exact_against_a_grid():
    rng = np.random.default_rng(5)
    gt = torch.tensor([3.0, 2.0, 11.0, 9.0], dtype=torch.float64)
    for _ in range(15):
        c = gt + torch.tensor(rng.normal(0, 1.5, 4))
        w = torch.tensor(rng.uniform(0, 2, 4))
        lo, hi = (c - w)[None], (c + w)[None]
        got = min_iou_to_box(lo, hi, gt).item()
        grid = [torch.linspace(float(lo[0, j]), float(hi[0, j]), 7, dtype=torch.float64) for j in range(4)]
        pts = torch.cartesian_prod(*grid)
        brute = float(box_iou(pts, gt[None]).min())
        assert got == pytest.approx(brute, abs=1e-12)          # the grid holds the vertices
        inner = lo + (hi - lo) * torch.tensor(rng.uniform(size=(500, 4)))
        assert float(box_iou(inner, gt[None]).min()) >= got - 1e-12
        assert got >= interval_box_iou(lo, hi, gt[None], gt[None])[0].item() - 1e-12


# ----------------------------------------------------------------------------- scenario bounds
def test_scenario_confidence_closed_forms():
    n, e = 200, 0.03
    assert scenario_confidence(n, 1, e) == pytest.approx((1 - e) ** n)
    assert scenario_confidence(n, 2, e) == pytest.approx((1 - e) ** n + n * e * (1 - e) ** (n - 1))
    # Campi-Garatti 2011 with k discarded: C(k+d-1, k) sum_{i<k+d} C(N,i) e^i (1-e)^(N-i)
    d, k = 3, 2
    want = comb(k + d - 1, k) * sum(comb(n, i) * e ** i * (1 - e) ** (n - i) for i in range(k + d))
    assert scenario_confidence(n, d, e, k) == pytest.approx(min(1.0, want), rel=1e-9)
    want = comb(k + d - 1, k) * sum(comb(800, i) * e ** i * (1 - e) ** (800 - i) for i in range(k + d))
    assert 0 < want < 1 and scenario_confidence(800, d, e, k) == pytest.approx(want, rel=1e-9)
    assert scenario_confidence(5, 10, e) == 1.0


def test_pac_sample_size_is_minimal_and_grows_with_outputs():
    for d in (1, 10, 160):
        n = pac_sample_size(d, 0.05, 0.01)
        assert scenario_confidence(n, d, 0.05) <= 0.01 < scenario_confidence(n - 1, d, 0.05)
    assert pac_sample_size(1, 0.05, 0.01) == math.ceil(math.log(0.01) / math.log(0.95))
    assert pac_sample_size(160, 0.05, 0.01) > pac_sample_size(80, 0.05, 0.01)
    assert pac_sample_size(10, 0.05, 0.01, n_discard=5) > pac_sample_size(10, 0.05, 0.01)


def test_discard_budget():
    d = 20
    n = pac_sample_size(d, 0.05, 0.01)
    assert discard_budget(n, d, 0.05, 0.01) == 0
    assert discard_budget(n - 1, d, 0.05, 0.01) == -1
    k = discard_budget(3 * n, d, 0.05, 0.01)
    assert k > 0
    assert scenario_confidence(3 * n, d, 0.05, k) <= 0.01 < scenario_confidence(3 * n, d, 0.05, k + 1)


# ----------------------------------------------------------------------------- output range
def test_hull_without_discarding_is_min_max():
    y = torch.randn(50, 6, generator=torch.Generator().manual_seed(0))
    lo, hi, kept = pac_output_range(y, 0)
    assert torch.equal(lo, y.double().min(0).values) and torch.equal(hi, y.double().max(0).values)
    assert len(kept) == 50


def test_discarding_removes_the_outlier_and_leaves_it_outside():
    y = torch.randn(100, 3, generator=torch.Generator().manual_seed(1)) * 0.1
    y[17, 1] = 50.0
    lo, hi, kept = pac_output_range(y, 1)
    assert 17 not in kept.tolist() and hi[1] < 1.0
    lo5, hi5, kept5 = pac_output_range(y, 5)
    removed = sorted(set(range(100)) - set(kept5.tolist()))
    inside = ((y.double()[removed] >= lo5) & (y.double()[removed] <= hi5)).all(1)
    assert not inside.any()                      # each discarded sample violates the final hull
    assert (hi5 - lo5 <= hi - lo + 1e-12).all()


# ----------------------------------------------------------------------------- NMS check
def point(b, s):
    b = torch.as_tensor(b, dtype=torch.float64)
    s = torch.as_tensor(s, dtype=torch.float64)
    return b, b, s, s


def test_single_candidate_bound_is_its_iou():
    gt = [0.0, 0.0, 10.0, 10.0]
    ok, lb = certify_nms(*point([[1.0, 0.0, 10.0, 10.0]], [0.9]), gt)
    assert ok and lb == pytest.approx(0.9)
    ok, lb = certify_nms(*point([[1.0, 0.0, 10.0, 10.0]], [0.2]), gt)     # below the confidence threshold
    assert not ok and lb == 0.0


def test_overlapping_higher_competitor_blocks_disjoint_one_does_not():
    gt = [0.0, 0.0, 10.0, 10.0]
    target = [0.0, 0.0, 10.0, 10.0]
    ok, _ = certify_nms(*point([target, [20.0, 20.0, 30.0, 30.0]], [0.6, 0.9]), gt)
    assert ok
    # a higher-scoring box overlapping the target (IoU 0.6 > 0.45) but not the ground truth enough
    comp = [0.0, 0.0, 10.0, 10.0 / 0.6]
    ok, lb = certify_nms(*point([target, comp], [0.6, 0.9]), gt, iou_thr=0.7)
    assert not ok


def test_point_intervals_are_sound_against_real_nms():
    rng = np.random.default_rng(4)
    gt = torch.tensor([[4.0, 4.0, 14.0, 14.0]], dtype=torch.float64)
    n_ok = 0
    for _ in range(300):
        b = torch.cat([gt + torch.tensor(rng.normal(0, 2.0, (3, 4))), rand_boxes(3, rng, 20.0)])
        b = torch.cat([torch.minimum(b[:, :2], b[:, 2:] - 0.5), b[:, 2:]], 1)
        s = torch.tensor(rng.uniform(0, 1, 6))
        ok, lb = certify_nms(b, b, s, s, gt[0], iou_thr=0.3)
        keep = nms(b, s, 0.45)
        keep = keep[s[keep] >= 0.25]
        best = float(box_iou(b[keep], gt).max()) if len(keep) else 0.0
        if lb > 0:
            assert best >= lb - 1e-9
        n_ok += ok
    assert n_ok > 50


def test_wider_intervals_never_raise_the_bound():
    gt = [0.0, 0.0, 10.0, 10.0]
    b = torch.tensor([[0.5, 0.0, 10.0, 9.5], [12.0, 0.0, 20.0, 8.0]], dtype=torch.float64)
    s = torch.tensor([0.8, 0.7], dtype=torch.float64)
    prev = 1.0
    for w in (0.0, 0.5, 1.0, 2.0, 4.0):
        _, lb = certify_nms(b - w, b + w, s - 0.01 * w, s + 0.01 * w, gt)
        assert lb <= prev + 1e-12
        prev = lb


def ref_pipeline(boxes, scores, gt, conf=0.25, thr=0.45):
    """Independent confidence filter, then greedy NMS, then the best IoU of a kept box with gt."""
    b, s = boxes.tolist(), scores.tolist()
    idx = sorted((i for i in range(len(b)) if s[i] >= conf), key=lambda i: (-s[i], i))
    keep = []
    while idx:
        i = idx.pop(0)
        keep.append(i)
        idx = [j for j in idx if ref_iou(b[i], b[j]) <= thr]
    return max((ref_iou(b[i], gt) for i in keep), default=0.0)


def test_interval_certificate_is_sound_against_draws_and_vertices():
    """Random interval outputs; many outputs drawn inside each (vertices included) through an
    independent filter-then-NMS loop: none may do worse than the certified bound."""
    rng = np.random.default_rng(7)
    gt = [4.0, 4.0, 14.0, 14.0]
    n_cert = 0
    for case in range(500):
        k = int(rng.integers(2, 6))
        centre = torch.cat([torch.tensor(gt, dtype=torch.float64) + torch.tensor(rng.normal(0, 1.5, (2, 4))),
                            torch.tensor(gt, dtype=torch.float64) + torch.tensor(rng.normal(0, 4.0, (k - 2, 4)))])
        centre = torch.cat([torch.minimum(centre[:, :2], centre[:, 2:] - 1.0), centre[:, 2:]], 1)
        w = torch.tensor(rng.uniform(0, 1.5, (k, 4)))
        lo_b, hi_b = centre - w, centre + w
        s = torch.tensor(rng.uniform(0.05, 0.95, k))
        ws = torch.tensor(rng.uniform(0, 0.3, k))
        lo_s, hi_s = (s - ws).clamp(0, 1), (s + ws).clamp(0, 1)
        _, lb = certify_nms(lo_b, hi_b, lo_s, hi_s, gt, iou_thr=0.3)
        if lb <= 0:
            continue
        n_cert += 1
        for t in range(150):
            if t < 50:                       # vertices of boxes and scores
                u = torch.tensor(rng.integers(0, 2, (k, 4)), dtype=torch.float64)
                us = torch.tensor(rng.integers(0, 2, k), dtype=torch.float64)
            else:
                u, us = torch.tensor(rng.uniform(size=(k, 4))), torch.tensor(rng.uniform(size=k))
            b = lo_b + (hi_b - lo_b) * u
            sc = lo_s + (hi_s - lo_s) * us
            assert ref_pipeline(b, sc, gt) >= lb - 1e-9, (case, t)
    assert n_cert > 100


def test_nan_scores_are_rejected():
    b = torch.tensor([[0.0, 0.0, 10.0, 10.0], [1.0, 0.0, 10.0, 10.0]], dtype=torch.float64)
    s = torch.tensor([0.9, float("nan")], dtype=torch.float64)
    with pytest.raises(ValueError, match="scores"):
        certify_nms(b, b, s, s, [0.0, 0.0, 10.0, 10.0])


# ----------------------------------------------------------------------------- DeepPAC-style
@pytest.mark.parametrize("fit", ["lstsq", "chebyshev"])
def test_deeppac_exact_on_a_linear_model(fit):
    g = torch.Generator().manual_seed(2)
    f = (torch.rand(400, 5, generator=g) * 2 - 1) * 0.1
    w = torch.tensor([[1.0, -2.0], [0.5, 0.0], [0.0, 3.0], [-1.0, 1.0], [2.0, 2.0]])
    y = torch.tensor([1.0, -1.0]) + f @ w
    lo, hi = deeppac_output_range(f[:300], y[:300], f[300:], y[300:], 0.1, fit=fit)
    r = 0.1 * w.abs().sum(0)
    np.testing.assert_allclose(lo.numpy(), (torch.tensor([1.0, -1.0]) - r).numpy(), atol=1e-5)
    np.testing.assert_allclose(hi.numpy(), (torch.tensor([1.0, -1.0]) + r).numpy(), atol=1e-5)


def test_deeppac_margin_is_from_the_held_out_set_only():
    g = torch.Generator().manual_seed(3)
    f = torch.rand(300, 2, generator=g) - 0.5
    y = (f[:, :1] + 0.01 * torch.randn(300, 1, generator=g))
    y[0, 0] = 10.0                        # an outlier in the fit set does not widen the margin much
    lo, hi = deeppac_output_range(f[:200], y[:200], f[200:], y[200:], 0.5)
    coef = torch.linalg.lstsq(torch.cat([torch.ones(200, 1), f[:200]], 1).double(), y[:200].double()).solution
    pred = torch.cat([torch.ones(100, 1), f[200:]], 1).double() @ coef
    margin = (y[200:].double() - pred).abs().max()
    want_half = 0.5 * coef[1:].abs().sum() + margin
    assert float((hi - lo)[0] / 2) == pytest.approx(float(want_half), rel=1e-4)
    assert deeppac_margin_size(0.05, 0.01) == math.ceil(40 * (math.log(100) + 1)) == 225
    # not nested: the range need not contain the fit samples
    assert not bool(((y[:200].double() >= lo) & (y[:200].double() <= hi)).all())


def test_deeppac_rejects_bad_arguments():
    f, y = torch.rand(20, 2), torch.rand(20, 3)
    with pytest.raises(ValueError, match="feature_bound"):
        deeppac_output_range(f, y, f, y, float("inf"))
    with pytest.raises(ValueError, match="ridge"):
        deeppac_output_range(f, y, f, y, 0.1, ridge=-1.0)
    with pytest.raises(ValueError, match="fit"):
        deeppac_output_range(f, y, f, y, 0.1, fit="l1")
    with pytest.raises(ValueError, match="margin_features"):
        deeppac_output_range(f, y, f[:, :1], y, 0.1)


# ----------------------------------------------------------------------------- the pipeline
def const_model(box, score, k_extra=0):
    def fn(x):
        b = torch.tensor([box] + [[40.0, 40.0, 44.0, 44.0]] * k_extra).expand(len(x), -1, -1)
        s = torch.tensor([score] + [0.05] * k_extra).expand(len(x), -1)
        return b, s
    return fn


def test_constant_network_reduces_to_the_clean_iou():
    res = verify_detection(const_model([1.0, 0.0, 10.0, 10.0], 0.9, 2), torch.rand(3, 8, 8), [0.0, 0.0, 10.0, 10.0],
                           n_samples=None, refine=True)
    assert res.verified and res.iou_lower_bound == pytest.approx(0.9)
    assert res.n_samples == pac_sample_size(30, 0.05, 0.01) and res.n_discarded == 0


def test_verify_detection_is_deterministic_and_contains_its_samples():
    torch.manual_seed(0)
    model = TinyYOLO(16, 4).eval()
    img = torch.rand(3, 16, 16)
    a = verify_detection(model, img, [2.0, 2.0, 8.0, 8.0], n_samples=4000, generator=torch.Generator().manual_seed(5))
    b = verify_detection(model, img, [2.0, 2.0, 8.0, 8.0], n_samples=4000, generator=torch.Generator().manual_seed(5))
    assert torch.equal(a.lo_boxes, b.lo_boxes) and a.iou_lower_bound == b.iou_lower_bound
    with torch.no_grad():
        bx, sc = model(img[None])
    assert bool(a.contains(bx, sc).all())


def test_rejections():
    fn = const_model([1.0, 0.0, 10.0, 10.0], 0.9)
    img = torch.rand(3, 8, 8)
    gt = [0.0, 0.0, 10.0, 10.0]
    bad = img.clone()
    bad[0, 0, 0] = float("nan")
    with pytest.raises(ValueError, match="image"):
        verify_detection(fn, bad, gt)
    with pytest.raises(ValueError, match="image"):
        verify_detection(fn, torch.rand(8, 8), gt)
    with pytest.raises(ValueError, match="eps_pac"):
        verify_detection(fn, img, gt, eps_pac=1.5)
    with pytest.raises(ValueError, match="eta"):
        verify_detection(fn, img, gt, eta=0.0)
    with pytest.raises(TypeError, match="eps_pac"):
        verify_detection(fn, img, gt, eps_pac="0.1")
    with pytest.raises(ValueError, match="radius"):
        verify_detection(fn, img, gt, radius=-0.1)
    with pytest.raises(ValueError, match="n_samples"):
        verify_detection(fn, img, gt, n_samples=10)
    with pytest.raises(ValueError, match="gt_box"):
        verify_detection(fn, img, [0.0, 1.0, 2.0], n_samples=100)
    with pytest.raises(ValueError, match="model_fn"):
        verify_detection(lambda x: (torch.zeros(len(x), 2, 3), torch.zeros(len(x), 2)), img, gt)
    with pytest.raises(ValueError, match="non-finite"):
        pac_output_range(torch.tensor([[1.0, float("inf")]]))
    with pytest.raises(ValueError, match="n_discard"):
        pac_output_range(torch.zeros(3, 2), 3)
    with pytest.raises(ValueError, match="iou_threshold"):
        nms(torch.zeros(1, 4), torch.zeros(1), 2.0)
    with pytest.raises(ValueError, match="boxes1"):
        box_iou(torch.zeros(2, 3), torch.zeros(2, 4))
    with pytest.raises(ValueError, match="lo <= hi"):
        interval_box_iou(torch.ones(1, 4), torch.zeros(1, 4), torch.zeros(1, 4), torch.ones(1, 4))
    with pytest.raises(ValueError, match="nms_iou"):
        certify_nms(*point([[0.0, 0.0, 1.0, 1.0]], [0.9]), gt, nms_iou=-1)
    with pytest.raises(ValueError, match="lo_scores"):
        certify_nms(torch.zeros(1, 4), torch.ones(1, 4), torch.ones(1), torch.zeros(1), gt)
    with pytest.raises(ValueError, match="n_params"):
        scenario_confidence(10, 0, 0.1)


# ----------------------------------------------------------------------------- detector
def test_detector_contract_and_learning():
    m = TinyYOLO(32, 4)
    b, s = m(torch.rand(2, 3, 32, 32))
    assert b.shape == (2, 16, 4) and s.shape == (2, 16) and bool(((s > 0) & (s < 1)).all())
    assert bool((b[..., 2:] >= b[..., :2]).all())
    x, boxes = make_scenes(64, np.random.default_rng(0))
    _, losses = train_detector(x, boxes, steps=40, seed=0)
    assert np.mean(losses[-5:]) < 0.7 * np.mean(losses[:5])
    with pytest.raises(ValueError, match="grid"):
        TinyYOLO(30, 4)


def test_detector_training_fails_loudly_on_non_finite_loss():
    x, boxes = make_scenes(8, np.random.default_rng(0))
    x[0, 0, 0, 0] = float("nan")
    with pytest.raises(NonFiniteTrainingError):
        train_detector(x, boxes, steps=3, batch_size=8, seed=0)


def test_decoding_puts_cells_in_row_major_order():
    m = TinyYOLO(32, 4)
    raw = torch.zeros(1, 16, 5)
    boxes, _ = m.decode(raw)
    # cell index r * grid + c; centre ((c + 0.5) * 8, (r + 0.5) * 8); index 1 = row 0, column 1
    cxy = (boxes[0, :, :2] + boxes[0, :, 2:]) / 2
    assert cxy[1].tolist() == pytest.approx([12.0, 4.0])
    assert cxy[4].tolist() == pytest.approx([4.0, 12.0])


def test_refine_false_discards_nothing_and_changes_the_range():
    torch.manual_seed(1)
    model = TinyYOLO(16, 2).eval()
    img = torch.rand(3, 16, 16)
    kw = dict(n_samples=3000, radius=0.1)
    a = verify_detection(model, img, [2.0, 2.0, 8.0, 8.0], refine=True, generator=torch.Generator().manual_seed(5), **kw)
    b = verify_detection(model, img, [2.0, 2.0, 8.0, 8.0], refine=False, generator=torch.Generator().manual_seed(5), **kw)
    assert a.n_discarded > 0 and b.n_discarded == 0
    assert bool((a.hi_scores - a.lo_scores <= b.hi_scores - b.lo_scores + 1e-12).all())
    assert not torch.equal(a.lo_boxes, b.lo_boxes) or not torch.equal(a.hi_boxes, b.hi_boxes)


def test_more_rejections_and_use():
    fn = const_model([1.0, 0.0, 10.0, 10.0], 0.9)
    img = torch.rand(3, 8, 8)
    gt = [0.0, 0.0, 10.0, 10.0]
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        verify_detection(fn, img * 300, gt)
    with pytest.raises(ValueError, match="batch_size"):
        verify_detection(fn, img, gt, batch_size=0)
    model = TinyYOLO(16, 4).eval()
    with pytest.raises(TypeError, match="dtype"):
        verify_detection(model, torch.rand(3, 16, 16, dtype=torch.float64), gt)
    res = verify_detection(fn, img, gt)
    with pytest.raises(ValueError, match="boxes"):
        res.contains(torch.zeros(1, 2, 4), torch.zeros(1, 2))
    x, noise = sample_perturbations(img.double(), 0.1, 5, torch.Generator().manual_seed(0))
    assert x.dtype == torch.float64 and x.device == img.device and float(noise.abs().max()) <= 0.1


def test_targets_count_recall_over_all_objects():
    from iclr26.vision.odpv import experiment

    def model(x):                      # finds the first object of each image only
        b = torch.tensor([[0.0, 0.0, 10.0, 10.0], [20.0, 20.0, 22.0, 22.0]]).expand(len(x), -1, -1)
        return b, torch.tensor([0.9, 0.1]).expand(len(x), -1)
    boxes = [np.array([[0.0, 0.0, 10.0, 10.0], [20.0, 20.0, 30.0, 30.0]]), np.array([[0.0, 0.0, 10.0, 10.0]])]
    items, recall = experiment._targets(model, torch.zeros(2, 3, 4, 4), boxes, 5)
    assert recall == pytest.approx(2 / 3) and [i for i, _ in items] == [0, 1]


def test_smoke_experiment_wiring(monkeypatch):
    from iclr26.vision.odpv import experiment
    calls = {"perturb": [], "hull": [], "deeppac": []}
    real_p, real_h, real_d = experiment.sample_perturbations, experiment.pac_output_range, experiment.deeppac_output_range

    def perturb(img, radius, n, gen):
        calls["perturb"].append((radius, n))
        return real_p(img, radius, n, gen)

    def hull(y, k=0):
        calls["hull"].append((len(y), k))
        return real_h(y, k)

    def deeppac(f, y, fm, ym, bound, **kw):
        calls["deeppac"].append((len(y), len(ym), bound, f.shape[1], kw.get("fit")))
        return real_d(f, y, fm, ym, bound, **kw)

    monkeypatch.setattr(experiment, "sample_perturbations", perturb)
    monkeypatch.setattr(experiment, "pac_output_range", hull)
    monkeypatch.setattr(experiment, "deeppac_output_range", deeppac)
    out = experiment.run("smoke", 0)
    info, m = out["info"], out["metrics"]
    n_min = pac_sample_size(160, 0.05, 0.01)
    assert info["n_params"] == 160 and info["n_min"] == n_min == 3802
    assert info["n_samples"] == 2 * n_min and info["discard_budget"] == discard_budget(2 * n_min, 160, 0.05, 0.01) == 22
    cfg = experiment.SCALES["smoke"]
    # every perturbation (samples, validation and fresh draws) at the same radius
    assert {r for r, _ in calls["perturb"]} == {experiment.RADIUS}
    assert {n for _, n in calls["perturb"]} == {2 * n_min, cfg["n_fresh"]}
    n_items = info["n_items"]
    # per target: refined at N with k, unrefined at N_min, unrefined at N, the small hull
    assert calls["hull"].count((2 * n_min, 22)) == n_items
    assert calls["hull"].count((n_min, 0)) == n_items
    assert calls["hull"].count((2 * n_min, 0)) == n_items
    assert calls["hull"].count((cfg["n_small"], 0)) == n_items
    # DeepPAC: held-out margin set of 225, radius as the feature bound, the chosen configuration
    assert all(c[1] == 225 and c[2] == experiment.RADIUS for c in calls["deeppac"])
    assert all(c[0] == 2 * n_min - 225 or (c[4] == "chebyshev" and c[0] == experiment.LP_SAMPLES)
               for c in calls["deeppac"])
    last = calls["deeppac"][-n_items:]
    assert {c[4] for c in last} == {info["deeppac_fit"]}
    assert set(m["iou_lower_bound"]) == {"odpv", "odpv_norefine", "odpv_norefine_samen", "deeppac"}
    v = m["violation_rate"]
    assert min(v["hull_small"]) > 0.05 and max(v["odpv"]) < 0.05
    assert all(len(x) == n_items for x in v.values())
    assert all(0 <= x <= 1 for arm in m["iou_lower_bound"].values() for x in arm)
    # refined hull inside the unrefined hull of the same samples (bound can only rise)
    assert all(a >= b - 1e-12 for a, b in zip(m["iou_lower_bound"]["odpv"], m["iou_lower_bound"]["odpv_norefine_samen"]))
