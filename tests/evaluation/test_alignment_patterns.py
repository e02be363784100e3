"""Tests of alignment patterns, APS and the bootstrap equivalence (ICLR 2026): equations against
independent references, reductions, rejections and the experiment's pieces."""
import numpy as np
import pytest
from scipy.spatial.distance import pdist
from scipy.stats import pearsonr

from iclr26.evaluation.alignment_patterns import (
    BrainAlignmentPatterns,
    alignment_matrix,
    alignment_pattern_analysis,
    brain_alignment_patterns,
    brain_brain_aps,
    equivalence_test,
    linear_predictivity,
    model_alignment_patterns,
    model_aps,
    rdm,
    rsa,
    select_layers,
    subject_bootstrap_means,
)
from iclr26.evaluation.alignment_patterns.experiment import (
    best_candidate_aps,
    far_map,
    generator_layers,
    share_above,
    simulate_brains,
    standardised_difference,
    top_ranked_aps,
    wrong_pattern_layers,
)


def _world(n_subj=4, n_roi=4, n_stim=30, seed=0, noise=0.5):
    rng = np.random.default_rng(seed)
    latent = [rng.normal(size=(n_stim, 6)) for _ in range(n_roi)]
    brains = []
    for s in range(n_subj):
        rois = []
        for r in range(n_roi):
            mix = latent[r] + 0.5 * latent[(r + 1) % n_roi]
            rois.append(mix @ rng.normal(size=(6, 5 + s)) + noise * rng.normal(size=(n_stim, 5 + s)))
        brains.append(rois)
    return brains, latent


# ---------------------------------------------------------------- equations vs references
def test_rdm_and_rsa_match_scipy():
    rng = np.random.default_rng(1)
    x, y = rng.normal(size=(12, 7)), rng.normal(size=(12, 3))
    d = rdm(x)
    assert np.allclose(d[np.triu_indices(12, 1)], pdist(x, "correlation"))
    assert np.allclose(np.diag(d), 0) and np.allclose(d, d.T)
    ref = pearsonr(pdist(x, "correlation"), pdist(y, "correlation"))[0]
    assert rsa(x, y) == pytest.approx(ref, abs=1e-12)
    assert rsa(x, x) == pytest.approx(1.0)
    # RSA only sees the geometry: invariant to a per-stimulus scaling and shift of the units
    assert rsa(3 * x + 2, y) == pytest.approx(ref, abs=1e-12)


def test_alignment_matrix_is_pairwise_rsa():
    rng = np.random.default_rng(2)
    P = [rng.normal(size=(10, 4)) for _ in range(3)]
    T = [rng.normal(size=(10, 6)) for _ in range(2)]
    A = alignment_matrix(P, T)
    assert A.shape == (3, 2)
    for i in range(3):
        for j in range(2):
            assert A[i, j] == pytest.approx(rsa(P[i], T[j]), abs=1e-12)


def test_linear_predictivity_matches_manual_kfold_ridge():
    from sklearn.linear_model import Ridge
    from sklearn.model_selection import KFold
    rng = np.random.default_rng(3)
    x = rng.normal(size=(60, 5))
    y = x @ rng.normal(size=(5, 3)) + 0.5 * rng.normal(size=(60, 3))
    alphas = [3.0]  # one alpha: RidgeCV reduces to Ridge
    got = linear_predictivity(x, y, alphas=alphas, n_folds=5, random_state=1)
    xs, ys = (x - x.mean(0)) / x.std(0), (y - y.mean(0)) / y.std(0)
    tot = 0.0
    for tr, te in KFold(5, shuffle=True, random_state=1).split(xs):
        m = Ridge(alpha=3.0).fit(xs[tr], ys[tr])
        pred = m.predict(xs[te])
        r2 = 1 - ((ys[te] - pred) ** 2).sum(0) / ((ys[te] - ys[te].mean(0)) ** 2).sum(0)
        tot += r2.mean() * len(te)
    assert got == pytest.approx(tot / 60, abs=1e-10)
    assert got > 0.7
    assert linear_predictivity(rng.normal(size=(60, 5)), y) < 0.1  # unrelated predictors
    # a constant predictor column is dropped, not turned into NaN
    xc = np.hstack([x, np.ones((60, 1))])
    assert linear_predictivity(xc, y, alphas=alphas) == pytest.approx(got, abs=1e-10)


def test_brain_patterns_entries_are_cross_subject_rsa():
    brains, _ = _world()
    bp = brain_alignment_patterns(brains)
    P = bp.scores
    assert P.shape == (4, 4, 4, 4)
    assert np.all(np.isnan(P[[0, 1, 2, 3], [0, 1, 2, 3]]))
    for p, s, r, t in [(0, 1, 2, 3), (3, 0, 1, 1), (2, 1, 0, 2)]:
        assert P[p, s, r, t] == pytest.approx(rsa(brains[p][r], brains[s][t]), abs=1e-12)
    lp = brain_alignment_patterns(brains, metric=lambda a, b: float(np.corrcoef(a[:, 0], b[:, 0])[0, 1]))
    assert lp.scores[1, 2, 0, 3] == pytest.approx(np.corrcoef(brains[1][0][:, 0], brains[2][3][:, 0])[0, 1])


def _naive_brain_aps(P):
    n_s, _, n_r, _ = P.shape
    out = np.zeros((n_s, n_r))
    for s in range(n_s):
        for r in range(n_r):
            refs = [P[p, q, r] for p in range(n_s) for q in range(n_s) if p != q and s not in (p, q)]
            ref = np.mean(refs, axis=0)
            out[s, r] = np.mean([pearsonr(ref, P[p, s, r])[0] for p in range(n_s) if p != s])
    return out


def test_brain_brain_aps_matches_naive_loop():
    brains, _ = _world(n_subj=5, n_roi=4)
    bp = brain_alignment_patterns(brains)
    assert np.allclose(brain_brain_aps(bp), _naive_brain_aps(bp.scores), atol=1e-12)


def test_model_aps_matches_naive_loop_and_selected_layers():
    brains, latent = _world(n_subj=4, n_roi=5)
    bp = brain_alignment_patterns(brains)
    layers = [latent[0], latent[2] + latent[3], np.random.default_rng(9).normal(size=(30, 4))]
    Q = model_alignment_patterns(layers, brains)
    assert Q.shape == (3, 4, 5)
    assert Q[1, 2, 3] == pytest.approx(rsa(layers[1], brains[2][3]))
    A = model_aps(Q, bp)
    for l, s, r in [(0, 0, 0), (1, 3, 2), (2, 1, 4)]:
        ref = np.mean([pearsonr(Q[l, s], bp.scores[p, s, r])[0] for p in range(4) if p != s])
        assert A[l, s, r] == pytest.approx(ref, abs=1e-12)
    assert select_layers(Q).tolist() == np.argmax(Q.mean(axis=1), axis=0).tolist()


# ---------------------------------------------------------------- reductions
def test_identical_subjects_give_aps_one_and_a_copy_model_too():
    rng = np.random.default_rng(4)
    one = [rng.normal(size=(25, 6)) @ rng.normal(size=(6, 8)) for _ in range(4)]
    one[1] = one[0] + 0.7 * one[1]
    brains = [list(one) for _ in range(3)]
    bp = brain_alignment_patterns(brains)
    assert np.allclose(brain_brain_aps(bp), 1.0)
    # a model layer equal to ROI r reproduces ROI r's pattern exactly
    Q = model_alignment_patterns(one, brains)
    A = model_aps(Q, bp)
    assert np.allclose(A[np.arange(4), :, np.arange(4)], 1.0)


def test_equivalence_matches_independent_bootstrap():
    rng = np.random.default_rng(5)
    v = np.vstack([rng.normal(0.5, 0.05, 10), rng.normal(0.49, 0.05, 10), rng.normal(0.2, 0.05, 10)])
    res = equivalence_test(v, ["a", "b", "c"], n_boot=2000, random_state=7)
    idx = np.random.default_rng(7).integers(0, 10, size=(2000, 10))
    boot_best = v[res.best][idx].mean(axis=1)
    assert res.threshold == pytest.approx(np.quantile(boot_best, 0.025))
    assert res.statistic.tolist() == pytest.approx(v.mean(axis=1).tolist())
    assert res.equivalent[res.best] and not res.equivalent[2]
    assert res.equivalent_names[0] == res.best_name
    assert np.all(res.ci_low <= res.statistic) and np.all(res.statistic <= res.ci_high)
    d = equivalence_test({"x": v[0], "y": v[2]}, n_boot=500)
    assert d.names == ["x", "y"] and d.best_name == "x"
    boot = subject_bootstrap_means(v.T, n_boot=300, random_state=1)
    assert boot.shape == (300, 3)


def test_analysis_end_to_end_picks_the_generator():
    rng = np.random.default_rng(6)
    n = 80
    stages = [rng.normal(size=(n, 10))]
    for _ in range(3):
        stages.append(np.tanh(stages[-1] @ rng.normal(size=(10, 10)) / 2))
    W = np.array([[1, .3, 0, 0], [.3, 1, .3, 0], [0, .3, 1, .3], [0, 0, .3, 1]])
    brains = simulate_brains(stages, 5, 12, 0.8, rng, weights=W)
    tr = [[a[:40] for a in s] for s in brains]
    te = [[a[40:] for a in s] for s in brains]
    models = {"oracle": ([z[:40] for z in stages], [z[40:] for z in stages]),
              "noise": ([rng.normal(size=(40, 5))], [rng.normal(size=(40, 5))])}
    res = alignment_pattern_analysis(tr, te, models, n_boot=200)
    assert res.score.shape == (2, 5, 4) and res.aps.shape == (2, 5, 4) and res.brain_aps.shape == (5, 4)
    assert res.layer[0].tolist() == [0, 1, 2, 3]
    assert res.score[0].mean() > res.score[1].mean() + 0.2
    assert res.equivalent_score[0].all() and res.equivalent_both.shape == (2, 4)
    assert res.aps[0].mean() > res.aps[1].mean()
    lp = alignment_pattern_analysis(tr, te, {"oracle": models["oracle"]}, metric="linear_predictivity", n_boot=100)
    assert np.all(np.isfinite(lp.aps)) and lp.metric == "linear_predictivity"


def test_wrong_pattern_layers_reduce_to_stages_at_gamma_zero():
    rng = np.random.default_rng(8)
    st = [rng.normal(size=(20, k)) for k in (4, 5, 6, 7)]
    w = wrong_pattern_layers(st, 0.0)
    for a, b in zip(w, st):
        assert rsa(a[:, :b.shape[1]], b) == pytest.approx(1.0)
        assert np.allclose(a[:, b.shape[1]:], 0)


def test_far_map_pairs_each_level_with_the_other_end():
    assert far_map(4) == {0: 3, 1: 3, 2: 0, 3: 0}
    assert far_map(6) == {0: 5, 1: 5, 2: 5, 3: 0, 4: 0, 5: 0}
    with pytest.raises(ValueError, match="far_map"):
        far_map(1)


def test_wrong_pattern_adds_the_far_layer_at_unit_variance():
    rng = np.random.default_rng(11)
    st = [rng.normal(size=(20, k)) * (k + 1) for k in (3, 4, 5, 6, 7, 8)]
    w = wrong_pattern_layers(st, 0.6)
    far = far_map(6)
    for j, (a, z) in enumerate(zip(w, st)):
        own, extra = a[:, :z.shape[1]], a[:, z.shape[1]:]
        assert own.var(axis=0).sum() == pytest.approx(1.0)
        assert extra.var(axis=0).sum() == pytest.approx(0.36)
        f = st[far[j]]
        assert np.allclose(extra, 0.6 * f / np.sqrt(f.var(axis=0).sum()))


def test_generator_layers_reproduce_the_noiseless_simulated_rois():
    rng = np.random.default_rng(12)
    n = 40
    stages = [rng.normal(size=(n, 6))]
    for _ in range(3):
        stages.append(np.tanh(stages[-1] @ rng.normal(size=(6, 6))))
    stages = [(z - z.mean(0)) / z.std(0) for z in stages]
    W = np.array([[1, .5, 0, 0], [0, 1, .5, 0], [0, 0, 1, .5], [0, 0, .2, 1]])
    gen = generator_layers(stages, W)
    assert [g.shape[1] for g in gen] == [12, 12, 12, 12]
    assert np.allclose(gen[0], np.hstack([stages[0], .5 * stages[1]]) / np.sqrt(6))
    brains = simulate_brains(stages, 1, 1500, 0.0, rng, weights=W)[0]
    for r in range(4):
        own = rsa(gen[r], brains[r])
        assert own > 0.9
        assert own > max(rsa(gen[t], brains[r]) for t in range(4) if t != r)


def test_best_candidate_is_the_per_roi_max_and_top_ranked_follows_the_train_score():
    aps = np.array([[0.9, 0.1, 0.5], [0.2, 0.8, 0.4], [0.3, 0.3, 0.7], [1.0, 1.0, 1.0]])
    assert best_candidate_aps(aps, [0, 1, 2]).tolist() == [0.9, 0.8, 0.7]  # max, not mean, not row 3
    train = np.array([[0.1, 0.9, 0.0], [0.5, 0.1, 0.0], [0.2, 0.2, 0.3], [9.0, 9.0, 9.0]])
    val, pick = top_ranked_aps(train, aps, [0, 1, 2])
    assert pick.tolist() == [1, 0, 2]  # chosen by train score, not by the APS it is judged on
    assert val.tolist() == [0.2, 0.1, 0.7]


def test_share_and_standardised_difference_per_roi():
    assert share_above([0.9, 0.5, 0.7, 0.7], [0.8, 0.6, 0.7, 0.1]) == 0.5  # a tie does not count
    a = np.array([[1.0, 2.0, 5.0], [3.0, 2.0, 5.0], [5.0, 2.0, 5.0]])
    b = np.array([[0.0, 2.0, 5.0], [0.0, 2.0, 6.0], [0.0, 2.0, 7.0]])
    d = standardised_difference(a, b)
    assert d[0] == pytest.approx(3.0 / 2.0)  # diff 1, 3, 5: mean 3, sd 2
    assert d[1] == 0.0  # no difference and no spread
    assert d[2] == pytest.approx(-1.0)


def test_equivalence_counts_a_tie_with_the_threshold():
    v = np.array([[0.5] * 6, [0.4, 0.6, 0.5, 0.5, 0.5, 0.5], [0.49] * 6])
    res = equivalence_test(v, n_boot=200)
    assert res.best == 0 and res.threshold == 0.5
    assert res.equivalent.tolist() == [True, True, False]  # mean >= threshold, the best included


def test_fixed_layers_replace_the_train_selection():
    brains, latent = _world(n_subj=4, n_roi=4)
    tr, te = [[a[:15] for a in s] for s in brains], [[a[15:] for a in s] for s in brains]
    layers = ([z[:15] for z in latent], [z[15:] for z in latent])
    res = alignment_pattern_analysis(tr, te, {"m": layers}, n_boot=100, fixed_layers={"m": np.array([3, 2, 1, 0])})
    assert res.layer[0].tolist() == [3, 2, 1, 0]
    Q = model_alignment_patterns(layers[1], te)
    assert res.score[0, :, 1] == pytest.approx(Q[2, :, 1])
    with pytest.raises(ValueError, match="fixed_layers"):
        alignment_pattern_analysis(tr, te, {"m": layers}, n_boot=100, fixed_layers={"m": np.array([0, 1, 2, 9])})
    with pytest.raises(ValueError, match="fixed_layers"):
        alignment_pattern_analysis(tr, te, {"m": layers}, n_boot=100, fixed_layers={"x": np.arange(4)})


# ---------------------------------------------------------------- rejections
def test_bad_inputs_are_rejected_with_the_argument_named():
    brains, latent = _world()
    bad = [list(s) for s in brains]
    bad[1][2] = bad[1][2].copy()
    bad[1][2][0, 0] = np.nan
    with pytest.raises(ValueError, match=r"brains\[1\]\[2\].*NaN"):
        brain_alignment_patterns(bad)
    with pytest.raises(ValueError, match="at least 3 subjects"):
        brain_alignment_patterns(brains[:2])
    short = [list(s) for s in brains]
    short[0][0] = short[0][0][:-1]
    with pytest.raises(ValueError, match="stimuli"):
        brain_alignment_patterns(short)
    with pytest.raises(ValueError, match="same number of ROIs"):
        brain_alignment_patterns([brains[0], brains[1][:3], brains[2]])
    with pytest.raises(ValueError, match="metric must be"):
        brain_alignment_patterns(brains, metric="cka")
    three = brain_alignment_patterns([s[:2] for s in brains])
    with pytest.raises(ValueError, match="at least 3 ROIs"):
        brain_brain_aps(three)
    with pytest.raises(TypeError, match="BrainAlignmentPatterns"):
        brain_brain_aps(np.zeros((3, 3, 3, 3)))
    with pytest.raises(ValueError, match="same value in every unit"):
        rsa(np.ones((5, 3)), np.random.default_rng(0).normal(size=(5, 3)))
    with pytest.raises(ValueError, match="2-D"):
        rsa(np.zeros(5), np.zeros(5))
    with pytest.raises(ValueError, match="n_boot"):
        equivalence_test(np.ones((2, 5)), n_boot=10)
    with pytest.raises(ValueError, match="confidence"):
        equivalence_test(np.ones((2, 5)), confidence=1.5)
    with pytest.raises(ValueError, match="NaN"):
        equivalence_test(np.array([[1.0, np.nan], [1.0, 2.0]]))
    with pytest.raises(ValueError, match="constant"):
        linear_predictivity(np.random.default_rng(0).normal(size=(20, 3)), np.ones((20, 2)))
    with pytest.raises(ValueError, match="n_folds"):
        linear_predictivity(latent[0], latent[1], n_folds=1)
    with pytest.raises(ValueError, match="alphas"):
        linear_predictivity(latent[0], latent[1], alphas=[-1.0])
    bp = brain_alignment_patterns(brains)
    with pytest.raises(ValueError, match="shape"):
        model_aps(np.zeros((2, 3, 4)), bp)
    with pytest.raises(ValueError, match="metric .* non-finite"):
        brain_alignment_patterns(brains, metric=lambda a, b: float("nan"))
    with pytest.raises(ValueError, match="sigma"):
        simulate_brains(latent, 3, 4, -1.0, np.random.default_rng(0))
    with pytest.raises(ValueError, match="models"):
        alignment_pattern_analysis(brains, brains, {})
    assert isinstance(bp, BrainAlignmentPatterns) and bp.pattern(0).shape == (4,)


def test_other_subject_reference_averages_the_other_subjects_patterns():
    brains, latent = _world(n_subj=4, n_roi=5)
    bp = brain_alignment_patterns(brains)
    Q = model_alignment_patterns([latent[1], latent[3]], brains)
    A = model_aps(Q, bp, reference="other_subjects")
    for l, s, r in [(0, 0, 1), (1, 2, 4)]:
        q = Q[l, [i for i in range(4) if i != s]].mean(axis=0)
        ref = np.mean([pearsonr(q, bp.scores[p, s, r])[0] for p in range(4) if p != s])
        assert A[l, s, r] == pytest.approx(ref, abs=1e-12)
    with pytest.raises(ValueError, match="reference"):
        model_aps(Q, bp, reference="loso")


def test_mapping_input_keeps_roi_names_and_rejects_mismatched_names():
    brains, latent = _world(n_subj=3, n_roi=3)
    named = [{"V1": s[0], "V2": s[1], "MT": s[2]} for s in brains]
    bp = brain_alignment_patterns(named)
    assert bp.rois == ["V1", "V2", "MT"]
    assert np.allclose(bp.scores[0, 1], brain_alignment_patterns(brains).scores[0, 1])
    bad = [dict(named[0]), dict(named[1]), {"V1": brains[2][0], "MT": brains[2][2], "V2": brains[2][1]}]
    with pytest.raises(ValueError, match="same names, same order"):
        brain_alignment_patterns(bad)
    with pytest.raises(ValueError, match="names has"):
        equivalence_test(np.ones((2, 4)), names=["a"])
