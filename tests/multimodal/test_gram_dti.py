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


# -- independent references for the full objective, the temperature, L_bi and the dropout rule ------
def np_sym_ce(logits, eps):
    """Symmetric cross-entropy against the diagonal with label smoothing eps, written out in numpy."""
    def ce(lg):
        m = lg.max(1, keepdims=True)
        logp = lg - m - np.log(np.exp(lg - m).sum(1, keepdims=True))
        return np.mean([(1 - eps) * -logp[i, i] + eps * -logp[i].mean() for i in range(lg.shape[0])])
    return 0.5 * (ce(logits) + ce(logits.T))


def np_ce(logits, y, eps):
    m = logits.max(1, keepdims=True)
    logp = logits - m - np.log(np.exp(logits - m).sum(1, keepdims=True))
    return np.mean([(1 - eps) * -logp[i, c] + eps * -logp[i].mean() for i, c in enumerate(y)])


def test_clip_loss_against_numpy_both_directions():
    g = torch.Generator().manual_seed(11)
    x, y = torch.randn(7, 5, generator=g, dtype=torch.float64), torch.randn(7, 5, generator=g, dtype=torch.float64)
    unit = lambda t: (t / t.norm(dim=1, keepdim=True)).numpy()
    S = unit(x) @ unit(y).T
    for tau, ls in ((0.07, 0.1), (0.3, 0.0), (1.5, 0.2)):
        ref = np_sym_ce(S / tau, ls)
        assert float(clip_loss(x, y, tau, ls)) == pytest.approx(ref, rel=1e-6)  # logits in float32
        # one direction alone differs from the symmetric loss on these data: the check sees a one-sided L_bi
        assert abs(np_sym_ce(S / tau, ls) - np_ce(S / tau, range(7), ls)) > 1e-3


@pytest.mark.parametrize("with_ic50", [False, True])
def test_pretrainer_objective_against_independent_reference(with_ic50):
    """L = l1 L_vol + l2 L_bi + l3 L_IC50 recomputed in numpy from the model's own embeddings, with a
    non-default temperature, label smoothing and lambdas (each term is then visible on its own)."""
    tau, ls, lam = 0.3, 0.05, (2.0, 0.5, 1.5)
    views = tiny_views(n=10, seed=7)
    ic50 = torch.tensor([0, 1, 2, -1, 0, 2, -1, 1, 1, 0])
    model = GRAMDTIPretrainer({m: 5 for m in MODS}, dropout=None, ic50=with_ic50, temperature=tau,
                              label_smoothing=ls, lambdas=lam, hidden=8, projection_dim=6, ic50_hidden=8, seed=3)
    model.eval()  # no head dropout: a deterministic forward
    with torch.no_grad():
        loss, info = model.loss(views, ic50)
        z = {m: e.double().numpy() for m, e in model.embed(views).items()}
        logits = model.ic50_head(torch.cat([torch.as_tensor(z[m]).float() for m in MODS], 1)).double().numpy()
    vol = reference_loss(reference_volumes(z["protein"], [z["text"], z["hta"], z["smiles"]]), tau, ls)
    bi = np_sym_ce(z["smiles"] @ z["protein"].T / tau, ls)
    ref = lam[0] * vol + lam[1] * bi
    mask = ic50.numpy() >= 0
    if with_ic50:
        ref += lam[2] * np_ce(logits[mask], ic50.numpy()[mask], ls)
    assert info["vol"] == pytest.approx(vol, rel=1e-4)
    assert info["bi"] == pytest.approx(bi, rel=1e-4)
    assert float(loss) == pytest.approx(ref, rel=1e-4)
    # pairwise_bi = the pairwise sum + l2 L_bi
    pb = GRAMDTIPretrainer({m: 5 for m in MODS}, objective="pairwise_bi", dropout=None, ic50=False, temperature=tau,
                           label_smoothing=ls, lambdas=lam, hidden=8, projection_dim=6, seed=3).eval()
    with torch.no_grad():
        zz = {m: e.double().numpy() for m, e in pb.embed(views).items()}
        got = float(pb.loss(views)[0])
    pw = sum(np_sym_ce(zz[MODS[i]] @ zz[MODS[j]].T / tau, ls) for i in range(4) for j in range(i + 1, 4))
    assert got == pytest.approx(pw + lam[1] * np_sym_ce(zz["smiles"] @ zz["protein"].T / tau, ls), rel=1e-4)


def test_dropout_step_uses_base_loss_gradients_and_the_decision_in_the_volume():
    """With p_drop = 1 every step is a drop step: the recorded norms are ||d(l2 L_bi + l3 L_IC50)/dz_m||
    (recomputed here by autograd), and L_vol is the volume of the decision's anchor and others."""
    tau, lam = 0.2, (1.0, 0.7, 1.3)
    views = tiny_views(n=12, seed=8)
    ic50 = torch.tensor([0, 1, 2, -1] * 3)
    model = GRAMDTIPretrainer({m: 5 for m in MODS}, p_drop=1.0, temperature=tau, lambdas=lam, hidden=8,
                              projection_dim=6, ic50_hidden=8, seed=4)
    model.train()
    for _ in range(4):
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(0)
            loss, info = model.loss(views, ic50)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(0)  # the same head-dropout masks
            z = model.embed(views)
            logits = model.ic50_head(torch.cat([z[m] for m in MODS], 1))
        mask = ic50 >= 0
        base = lam[1] * clip_loss(z["smiles"], z["protein"], tau) + lam[2] * torch.nn.functional.cross_entropy(
            logits[mask], ic50[mask], label_smoothing=0.1)
        grads = torch.autograd.grad(base, [z[m] for m in MODS])
        dec = info["drop"]
        for m, gr in zip(MODS, grads):
            assert dec.norms[m] == pytest.approx(float(gr.norm()), rel=1e-5)
        if dec.dropped is not None:
            zz = {m: t.detach().double().numpy() for m, t in z.items()}
            vol = reference_loss(reference_volumes(zz[dec.anchor], [zz[m] for m in dec.others]), tau, 0.1)
            assert len(dec.others) == 2 and info["vol"] == pytest.approx(vol, rel=1e-4)


def reference_rule(history, decay, mult):
    """The drop rule written out from the paper / losses.py:181-204: weighted means (newest weight 1,
    then decay, decay^2 ...), threshold mean + mult * population std; the first modality above it in
    order, else the set of minima."""
    scores = []
    for h in history:
        w = [decay ** k for k in range(len(h))][::-1]
        scores.append(sum(a * b for a, b in zip(h, w)) / sum(w))
    mu = sum(scores) / len(scores)
    sd = math.sqrt(sum((s - mu) ** 2 for s in scores) / len(scores))
    for i, s in enumerate(scores):
        if s > mu + mult * sd:
            return {i}
    return {i for i, s in enumerate(scores) if s == min(scores)}


def test_dropout_rule_against_reference_on_random_histories():
    rng = np.random.default_rng(0)
    n_checked = 0
    for case in range(400):
        steps = int(rng.integers(2, 9))
        decay, mult = float(rng.choice([0.9, 0.5, 1.0])), float(rng.choice([1.5, 1.0, 0.5]))
        norms = rng.exponential(1.0, size=(steps, 4))
        if case % 3 == 0:
            norms[:, rng.integers(4)] *= 8.0  # an outlier modality
        d = AdaptiveModalityDropout(MODS, decay=decay, std_multiplier=mult, seed=case)
        for row in norms:
            d.update(dict(zip(MODS, row.tolist())))
        hist = [list(norms[-5:, j]) for j in range(4)]
        want = {MODS[i] for i in reference_rule(hist, decay, mult)}
        assert d.choose() in want
        n_checked += 1
    assert n_checked == 400
    # equal scores: nothing is above mean + 1.5 sd (strict), the minimum is a tie of all four
    d = filled([[2, 2, 2, 2]] * 3)
    assert {d.choose() for _ in range(80)} == set(MODS)


def test_volume_float32_tolerance_and_exactness_in_float64():
    """float64: the cofactor formula equals the explicit determinant to 1e-10 (test above). float32: an
    absolute error of at most 1e-5 on general unit vectors; for nearly aligned vectors (small volumes)
    the error is absolute too, so small volumes carry a large relative error (documented in the README)."""
    g = torch.Generator().manual_seed(12)
    a = torch.randn(16, 16, generator=g)
    o = [torch.randn(16, 16, generator=g) for _ in range(3)]
    ref = reference_volumes(a.double(), [x.double() for x in o])
    np.testing.assert_allclose(gram_volumes(a, o, eps=0).double().numpy(), ref, atol=1e-5)
    for scale in (1e-1, 1e-2):
        near = [a + scale * torch.randn(16, 16, generator=g) for _ in range(3)]
        ref = np.diag(reference_volumes(a.double(), [x.double() for x in near]))
        got = torch.diagonal(gram_volumes(a, near, eps=0)).double().numpy()
        np.testing.assert_allclose(got, ref, atol=2e-4)


def test_fit_is_a_function_of_its_seed_and_dropout_rules_share_the_gate():
    views = tiny_views(n=40, seed=9)
    ic50 = torch.tensor([0, 1, 2, -1] * 10)
    dims = {m: 5 for m in MODS}
    kw = dict(hidden=8, projection_dim=4, ic50_hidden=8, seed=2)
    h1 = GRAMDTIPretrainer(dims, **kw).fit(views, ic50, steps=6, batch_size=16, lr=1e-3, seed=5)["losses"]
    torch.rand(1000)  # consume the global stream: the fit must not depend on it
    h2 = GRAMDTIPretrainer(dims, **kw).fit(views, ic50, steps=6, batch_size=16, lr=1e-3, seed=5)["losses"]
    assert h1 == h2
    h3 = GRAMDTIPretrainer(dims, **kw).fit(views, ic50, steps=6, batch_size=16, lr=1e-3, seed=6)["losses"]
    assert h3 != h1
    # the same seed: the adaptive, random and random_aux rules drop on exactly the same steps
    gates = {}
    for kind in ("adaptive", "random", "random_aux"):
        rule = GRAMDTIPretrainer(dims, dropout=kind, **kw).drop
        rule.reseed(5)
        decs = [rule.step(lambda: dict(zip(MODS, [1.0, 2.0, 3.0, 4.0]))) for _ in range(200)]
        gates[kind] = [d.dropped is None for d in decs]
        if kind == "random_aux":
            assert {d.dropped for d in decs} == {None, "text", "hta"}
    assert gates["adaptive"] == gates["random"] == gates["random_aux"]
    assert 0.1 < np.mean(gates["random"]) < 0.3  # p_drop 0.8


def test_new_rejections_name_the_argument():
    dims = {m: 5 for m in MODS}
    views = tiny_views()
    m = GRAMDTIPretrainer(dims, hidden=8, projection_dim=4)
    with pytest.raises(ValueError, match="batch_size must be at least 2"):
        m.fit(views, steps=1, batch_size=1)
    with pytest.raises(ValueError, match="projection_dim=3 is too small .* use projection_dim >= 4"):
        GRAMDTIPretrainer(dims, projection_dim=3)
    GRAMDTIPretrainer(dims, objective="clip", dropout=None, projection_dim=2)  # no volume: any dim
    with pytest.raises(ValueError, match="4 vectors .* in 3 dimensions"):
        gram_volumes(torch.randn(2, 3), [torch.randn(2, 3)] * 3)
    with pytest.raises(ValueError, match="at least 2 samples"):
        GramianVolumeLoss()(torch.randn(1, 4), [torch.randn(1, 4)])
    with pytest.raises(ValueError, match="at least 2 samples"):
        clip_loss(torch.randn(1, 4), torch.randn(1, 4))
    with pytest.raises(TypeError, match="ic50 must be an integer tensor .*torch.float32"):
        m.fit(views, torch.full((24,), float("nan")), steps=1, batch_size=8)
    with pytest.raises(TypeError, match="ic50 must be an integer tensor"):
        m.loss(views, torch.full((24,), 0.7))
    with pytest.raises(ValueError, match="views\\['smiles'\\] must be finite"):
        m.transform({"smiles": torch.full((4, 5), float("nan"))}, ["smiles"])
    with pytest.raises(ValueError, match="views lacks modalities \\['protein'\\]"):
        m.transform({"smiles": torch.randn(4, 5)}, ["protein"])
    with pytest.raises(ValueError, match="views\\['smiles'\\] is empty"):
        m.transform({"smiles": torch.randn(0, 5)}, ["smiles"])
    with pytest.raises(ValueError, match="views\\['smiles'\\] must have shape \\(N, 5\\)"):
        m.transform({"smiles": torch.randn(4, 6)}, ["smiles"])
    with pytest.raises(ValueError, match="unknown"):
        m.transform({"image": torch.randn(4, 5)}, ["image"])
    with pytest.raises(ValueError, match="lambdas are all 0"):
        GRAMDTIPretrainer(dims, lambdas=(0, 0, 0))
    with pytest.raises(ValueError, match="droppable"):
        RandomModalityDropout(MODS, droppable=["image"])
    with pytest.raises(ValueError, match="all-zero row"):
        gram_volumes(torch.zeros(2, 3), [torch.randn(2, 3)])
    with pytest.raises(ValueError, match="split_fractions"):
        make_dti_data(60, 20, split_fractions=(0.5, 0.5))


def test_corpus_regime_keeps_pretraining_drugs_apart():
    d = make_dti_data(100, 30, split_fractions=(0.4, 0.2, 0.2, 0.2), seed=1)
    s = d.split
    assert set(s) == {"corpus", "train", "val", "test"}
    assert set(d.pretrain_pairs[:, 0]) <= set(s["corpus"])
    for part in ("train", "val", "test"):
        assert not set(s[part]) & set(s["corpus"])
