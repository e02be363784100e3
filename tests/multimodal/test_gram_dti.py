"""GRAM-DTI: the volume against an explicit-determinant reference, its invariances, the loss against
a hand-written cross-entropy, the adaptive dropout rule on hand-made gradient norms, the pretrainer's
training loop and rejections."""
import math

import numpy as np
import pytest
import torch

from iclr26.multimodal.gram_dti import (AdaptiveModalityDropout, GRAMDTIPretrainer, GramianVolumeLoss,
                                        NonFiniteTrainingError, RandomModalityDropout, clip_loss, gram_volumes,
                                        make_dti_data, pairwise_infonce)


@pytest.fixture(autouse=True)
def one_thread():
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def reference_volumes(anchor, others):
    """Paper formula written out: V_ij = sqrt|det(X X^T)|, X = rows (a_i, m1_j, ..) of unit vectors."""
    unit = lambda x: x / np.linalg.norm(x, axis=1, keepdims=True)
    a = unit(np.asarray(anchor, dtype=np.float64))
    os_ = [unit(np.asarray(o, dtype=np.float64)) for o in others]
    V = np.zeros((a.shape[0], os_[0].shape[0]))
    for i in range(a.shape[0]):
        for j in range(os_[0].shape[0]):
            X = np.stack([a[i]] + [o[j] for o in os_])
            V[i, j] = math.sqrt(abs(np.linalg.det(X @ X.T)))
    return V


def reference_loss(V, tau, eps):
    def ce(logits):
        logp = logits - np.log(np.exp(logits - logits.max(1, keepdims=True)).sum(1, keepdims=True)) - logits.max(1, keepdims=True)
        n = logits.shape[0]
        return np.mean([(1 - eps) * -logp[i, i] + eps * -logp[i].mean() for i in range(n)])
    return 0.5 * (ce(-V / tau) + ce(-V.T / tau))


@pytest.mark.parametrize("k", [2, 3, 4, 5])
def test_volume_matches_explicit_determinant(k):
    g = torch.Generator().manual_seed(k)
    a = torch.randn(5, 6, generator=g, dtype=torch.float64)
    others = [torch.randn(7, 6, generator=g, dtype=torch.float64) for _ in range(k - 1)]
    V = gram_volumes(a, others, eps=0.0)
    assert V.shape == (5, 7) and V.dtype == torch.float64
    np.testing.assert_allclose(V.numpy(), reference_volumes(a, others), atol=1e-10)


def test_two_modalities_reduce_to_sine():
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(4, 3, generator=g, dtype=torch.float64), torch.randn(4, 3, generator=g, dtype=torch.float64)
    cos = torch.nn.functional.normalize(a, dim=1) @ torch.nn.functional.normalize(b, dim=1).T
    np.testing.assert_allclose(gram_volumes(a, [b], eps=0).numpy(), torch.sqrt(1 - cos ** 2).numpy(), atol=1e-12)


def test_volume_extremes_and_invariances():
    e = torch.eye(4, dtype=torch.float64)
    # orthonormal anchor and others -> 1; the anchor repeated among the others -> 0
    assert float(gram_volumes(e[:1], [e[1:2], e[2:3], e[3:4]], eps=0)) == pytest.approx(1.0)
    assert float(gram_volumes(e[:1], [e[:1] * 3.0, e[2:3]], eps=0)) == pytest.approx(0.0, abs=1e-12)
    g = torch.Generator().manual_seed(1)
    a = torch.randn(6, 5, generator=g, dtype=torch.float64)
    o = [torch.randn(6, 5, generator=g, dtype=torch.float64) for _ in range(3)]
    V = gram_volumes(a, o, eps=0)
    assert bool(((V >= 0) & (V <= 1 + 1e-12)).all())
    scale = torch.rand(6, 1, generator=g, dtype=torch.float64) * 5 + 0.1
    torch.testing.assert_close(gram_volumes(a * scale, [x * 2.5 for x in o], eps=0), V)  # row scale
    torch.testing.assert_close(gram_volumes(a, [o[2], o[0], o[1]], eps=0), V)  # order of the others
    Q, _ = torch.linalg.qr(torch.randn(5, 5, generator=g, dtype=torch.float64))
    torch.testing.assert_close(gram_volumes(a @ Q, [x @ Q for x in o], eps=0), V)  # common rotation
    # the unnormalised volume scales with the product of the norms
    Vr = gram_volumes(a * 2, [o[0] * 3], eps=0, normalize=False)
    torch.testing.assert_close(Vr, 6 * gram_volumes(a, [o[0]], eps=0, normalize=False))


def test_eps_only_touches_tiny_volumes_and_keeps_gradients_finite():
    a = torch.tensor([[1.0, 0.0, 0.0]], requires_grad=True)
    b = torch.tensor([[1.0, 0.0, 0.0]], requires_grad=True)
    V = gram_volumes(a, [b])
    V.sum().backward()
    assert torch.isfinite(a.grad).all() and float(V.detach()) == pytest.approx(1e-5)
    g = torch.Generator().manual_seed(2)
    x, y = torch.randn(4, 3, generator=g), torch.randn(4, 3, generator=g)
    torch.testing.assert_close(gram_volumes(x, [y]), gram_volumes(x, [y], eps=0))


def test_loss_matches_hand_written_cross_entropy():
    g = torch.Generator().manual_seed(3)
    a = torch.randn(6, 8, generator=g, dtype=torch.float64)
    o = [torch.randn(6, 8, generator=g, dtype=torch.float64) for _ in range(3)]
    V = reference_volumes(a, o)
    for tau, ls in ((0.07, 0.1), (0.5, 0.0)):
        got = float(GramianVolumeLoss(tau, ls, eps=0)(a, o))
        assert got == pytest.approx(reference_loss(V, tau, ls), rel=1e-6)


def test_loss_prefers_aligned_positives_and_is_symmetric_for_two_modalities():
    g = torch.Generator().manual_seed(4)
    base = torch.randn(8, 6, generator=g)
    near = [base + 0.05 * torch.randn(8, 6, generator=g) for _ in range(3)]
    shuffled = [x[torch.randperm(8, generator=g)] for x in near]
    L = GramianVolumeLoss()
    assert float(L(base, near)) < float(L(base, shuffled))
    x, y = torch.randn(5, 4, generator=g), torch.randn(5, 4, generator=g)
    assert float(L(x, [y])) == pytest.approx(float(L(y, [x])), rel=1e-6)


def test_clip_and_pairwise():
    g = torch.Generator().manual_seed(5)
    v = [torch.randn(5, 4, generator=g) for _ in range(3)]
    x, y = torch.nn.functional.normalize(v[0], dim=1), torch.nn.functional.normalize(v[1], dim=1)
    logits = (x @ y.T) / 0.07
    t = torch.arange(5)
    ref = 0.5 * (torch.nn.functional.cross_entropy(logits, t, label_smoothing=0.1)
                 + torch.nn.functional.cross_entropy(logits.T, t, label_smoothing=0.1))
    torch.testing.assert_close(clip_loss(v[0], v[1]), ref)
    total = clip_loss(v[0], v[1]) + clip_loss(v[0], v[2]) + clip_loss(v[1], v[2])
    torch.testing.assert_close(pairwise_infonce(v), total)


MODS = ["text", "hta", "smiles", "protein"]


def filled(norms_list, **kw):
    d = AdaptiveModalityDropout(MODS, seed=0, **kw)
    for n in norms_list:
        d.update(dict(zip(MODS, n)))
    return d


def test_dropout_rule_outlier_and_minimum():
    # smiles far above mean + 1.5 sd -> smiles dropped
    assert filled([[1, 1, 10, 1]] * 2).choose() == "smiles"
    # no outlier -> the smallest smoothed norm (text)
    assert filled([[1, 2, 3, 4]] * 2).choose() == "text"
    # 1.5 sd is the threshold: [1, 1, 4, 1] has z = sqrt(3) = 1.73 > 1.5 -> drop; with std_multiplier 2 -> minimum
    assert filled([[1, 1, 4, 1]] * 2).choose() == "smiles"
    assert filled([[1, 1, 4, 1]] * 2, std_multiplier=2.0).choose() in ("text", "hta", "protein")
    # ties at the minimum are broken among the tied modalities only
    d = filled([[0, 0, 3, 3]] * 2)
    picks = {d.choose() for _ in range(50)}
    assert picks == {"text", "hta"}


def test_dropout_history_weights_and_length():
    d = filled([[1, 1, 1, 1], [3, 1, 1, 1]])
    assert d.scores()["text"] == pytest.approx((0.9 * 1 + 1.0 * 3) / 1.9)
    d = filled([[i, 0, 0, 0] for i in range(7)])
    assert d.history["text"] == [2, 3, 4, 5, 6]
    w = [0.9 ** (4 - i) for i in range(5)]
    assert d.scores()["text"] == pytest.approx(sum(x * wi for x, wi in zip([2, 3, 4, 5, 6], w)) / sum(w))
    # the newest step weighs most: a recent spike is an outlier, an old one less so
    recent = filled([[1, 1, 1, 1]] * 4 + [[1, 1, 9, 1]]).scores()["smiles"]
    old = filled([[1, 1, 9, 1]] + [[1, 1, 1, 1]] * 4).scores()["smiles"]
    assert recent > old


def test_dropout_step_gating_and_anchor():
    calls = []
    def norms():
        calls.append(1)
        return {"text": 1.0, "hta": 1.0, "smiles": 10.0, "protein": 1.0}
    never = AdaptiveModalityDropout(MODS, p_drop=0.0, seed=0)
    for _ in range(20):
        dec = never.step(norms)
        assert dec.dropped is None and dec.anchor == "protein" and dec.others == ["text", "hta", "smiles"]
    assert not calls  # gradients are not computed when no drop is drawn
    always = AdaptiveModalityDropout(MODS, p_drop=1.0, seed=0)
    decs = [always.step(norms) for _ in range(30)]
    assert len(calls) == 30
    assert all(d.dropped == "smiles" for d in decs[2:])  # after 2 recorded steps the rule applies
    for d in decs[2:]:
        assert d.anchor != "smiles" and set(d.others) | {d.anchor} == {"text", "hta", "protein"}
    assert len({d.anchor for d in decs[2:]}) > 1  # the anchor is random among the remaining
    rnd = RandomModalityDropout(MODS, p_drop=0.8, seed=0)
    for _ in range(2000):
        rnd.step()
    rates = rnd.drop_rates()
    assert rates["none"] == pytest.approx(0.2, abs=0.03)
    for m in MODS:
        assert rates[m] == pytest.approx(0.2, abs=0.03)


def tiny_views(n=24, seed=0):
    g = torch.Generator().manual_seed(seed)
    return {m: torch.randn(n, 5, generator=g) for m in MODS}


def test_pretrainer_trains_and_uses_gradient_norms():
    views = tiny_views()
    ic50 = torch.tensor([0, 1, 2, -1] * 6)
    model = GRAMDTIPretrainer({m: 5 for m in MODS}, shared={"hta": "text"}, hidden=8, projection_dim=4,
                              ic50_hidden=8, p_drop=1.0, seed=0)
    loss, info = model.loss(views, ic50)
    assert torch.isfinite(loss) and set(info) >= {"bi", "vol", "ic50", "drop"}
    assert all(v > 0 for v in info["drop"].norms.values())  # L_IC50 reaches all four modalities
    model2 = GRAMDTIPretrainer({m: 5 for m in MODS}, hidden=8, projection_dim=4, ic50_hidden=8, p_drop=1.0,
                               ic50=False, seed=0)
    _, info2 = model2.loss(views)
    n = info2["drop"].norms
    assert n["text"] == 0.0 and n["hta"] == 0.0 and n["smiles"] > 0 and n["protein"] > 0  # L_bi only
    hist = model.fit(views, ic50, steps=15, batch_size=24, lr=3e-3)
    assert hist["losses"][-1] < hist["losses"][0]
    emb = model.transform(views)
    assert emb["smiles"].shape == (24, 4)
    np.testing.assert_allclose(np.linalg.norm(emb["protein"], axis=1), 1.0, atol=1e-5)
    sd = model.state_dict()
    assert "projectors.text.0.weight" in sd and "projectors.hta.0.weight" not in sd  # shared projector


def test_pretrainer_objectives_differ_and_nonfinite_stops():
    views = tiny_views()
    losses = {}
    for obj in ("gram", "clip", "pairwise"):
        m = GRAMDTIPretrainer({k: 5 for k in MODS}, objective=obj, dropout=None, hidden=8, projection_dim=4, seed=0)
        losses[obj] = float(m.loss(views)[0])
    assert len(set(round(v, 6) for v in losses.values())) == 3
    m = GRAMDTIPretrainer({k: 5 for k in MODS}, dropout=None, hidden=8, projection_dim=4, seed=0)
    with torch.no_grad():
        m.projectors["smiles"][0].weight[0, 0] = float("nan")
    with pytest.raises(NonFiniteTrainingError, match="modality 'smiles' at step 1"):
        m.fit(views, steps=2, batch_size=8)


def test_rejections_name_the_argument():
    a = torch.randn(4, 3)
    with pytest.raises(ValueError, match="others"):
        gram_volumes(a, [])
    with pytest.raises(ValueError, match="others have dimension 2, anchor has 3"):
        gram_volumes(a, [torch.randn(4, 2)])
    with pytest.raises(ValueError, match="anchor contains NaN"):
        gram_volumes(torch.full((2, 3), float("nan")), [a])
    with pytest.raises(ValueError, match="anchor must be 2-D"):
        gram_volumes(torch.randn(3), [a])
    with pytest.raises(ValueError, match="anchor must be non-empty"):
        gram_volumes(torch.randn(0, 3), [a])
    with pytest.raises(ValueError, match="temperature"):
        GramianVolumeLoss(temperature=0.0)
    with pytest.raises(ValueError, match="label_smoothing"):
        GramianVolumeLoss(label_smoothing=1.0)
    with pytest.raises(ValueError, match="eps"):
        GramianVolumeLoss(eps=-1)
    with pytest.raises(ValueError, match="same batch size"):
        GramianVolumeLoss()(torch.randn(3, 2), [torch.randn(4, 2)])
    with pytest.raises(ValueError, match="p_drop"):
        AdaptiveModalityDropout(MODS, p_drop=1.5)
    with pytest.raises(ValueError, match="std_multiplier"):
        AdaptiveModalityDropout(MODS, std_multiplier=-1)
    with pytest.raises(ValueError, match="history_length"):
        AdaptiveModalityDropout(MODS, history_length=1)
    with pytest.raises(ValueError, match="decay"):
        AdaptiveModalityDropout(MODS, decay=0.0)
    with pytest.raises(ValueError, match="modalities"):
        AdaptiveModalityDropout(["a", "b"])
    d = AdaptiveModalityDropout(MODS)
    with pytest.raises(ValueError, match="grad_norms\\['text'\\]"):
        d.update({"text": float("nan")})
    with pytest.raises(ValueError, match="unknown modalities"):
        d.update({"image": 1.0})
    dims = {k: 5 for k in MODS}
    with pytest.raises(ValueError, match="objective"):
        GRAMDTIPretrainer(dims, objective="volume")
    with pytest.raises(ValueError, match="dropout"):
        GRAMDTIPretrainer(dims, objective="clip", dropout="adaptive")
    with pytest.raises(ValueError, match="bi_pair"):
        GRAMDTIPretrainer(dims, bi_pair=("smiles", "image"))
    with pytest.raises(ValueError, match="input_dims\\['text'\\]"):
        GRAMDTIPretrainer({**dims, "text": 0})
    m = GRAMDTIPretrainer(dims, hidden=8, projection_dim=4)
    views = tiny_views()
    with pytest.raises(ValueError, match="lacks modalities \\['protein'\\]"):
        m.loss({k: v for k, v in views.items() if k != "protein"})
    with pytest.raises(ValueError, match="views\\['smiles'\\] must be finite"):
        m.loss({**views, "smiles": torch.full((24, 5), float("nan"))})
    with pytest.raises(ValueError, match="views\\['protein'\\] has 3 rows, expected 24"):
        m.loss({**views, "protein": torch.randn(3, 5)})
    with pytest.raises(ValueError, match="ic50 must hold class ids"):
        m.fit(views, torch.full((24,), 3), steps=1)
    with pytest.raises(ValueError, match="lr"):
        m.fit(views, steps=1, lr=-1.0)
    with pytest.raises(ValueError, match="steps"):
        m.fit(views, steps=0)
    with pytest.raises(ValueError, match="positive_rate"):
        make_dti_data(positive_rate=1.5)
    with pytest.raises(ValueError, match="noise\\['smiles'\\]"):
        make_dti_data(noise={"smiles": -1.0})


def test_data_is_drug_cold_and_deterministic():
    d1, d2 = make_dti_data(60, 20, seed=3), make_dti_data(60, 20, seed=3)
    np.testing.assert_array_equal(d1.labels, d2.labels)
    s = d1.split
    assert not (set(s["train"]) & set(s["val"]) or set(s["train"]) & set(s["test"]) or set(s["val"]) & set(s["test"]))
    assert set(d1.pretrain_pairs[:, 0]) <= set(s["train"])  # no pre-training on unseen drugs
    assert d1.labels.mean() == pytest.approx(0.1, abs=0.01)
    assert set(np.unique(d1.pretrain_ic50)) <= {-1, 0, 1, 2}
