"""Tests for iclr26.classical.cpd_mrdpg (arXiv:2506.21878)."""
import numpy as np
import pytest
from threadpoolctl import threadpool_limits

from iclr26.classical.cpd_mrdpg import (MRDPGChangePoint, cusum_split, hetero_pca, limiting_quantiles,
                                        seeded_intervals, simulate_dmrdpg, th_pca)
from iclr26.classical.cpd_mrdpg.experiment import (SCALES, coverage, covering_metric, hausdorff, interval_audit,
                                                  kernel_cpd, run)


@pytest.fixture(autouse=True)
def _one_blas_thread():
    with threadpool_limits(1):
        yield


def test_seeded_intervals_hand_computed():
    # T = 16, alpha = sqrt(1/2), the official construct_intervals' floating-point arithmetic: layer lengths
    # 16, 11.31, 8 + 2 ulp, 5.66, 4 + 1 ulp (ceilings 16, 12, 9, 6, 5)
    iv = {tuple(x) for x in seeded_intervals(16)}
    expected = {(0, 16),                                    # layer 1
                (0, 12), (2, 14), (4, 16),                  # layer 2
                (0, 9), (3, 12), (7, 16),                   # layer 3: ceil(8 + 2 ulp) = 9, floor(4 - 1 ulp) = 3
                (0, 6), (2, 9), (5, 11), (7, 14), (10, 16),  # layer 4
                (0, 5), (2, 7), (4, 8), (6, 10), (8, 12), (10, 14), (12, 16)}  # layer 5: ceil(4 + 1 ulp) = 5
    assert iv == expected
    assert all(e - s >= 4 for s, e in iv)


def test_seeded_intervals_match_the_official_arithmetic():
    # a direct transcription of the construction (layer cap ceil(log_{1/alpha} T), no rounding guards)
    for T in (16, 50, 100, 37):
        a = np.sqrt(0.5)
        ref = set()
        for k in range(1, int(np.ceil(np.log(T) / np.log(1 / a))) + 1):
            nk = 2 * int(np.ceil((1 / a) ** (k - 1))) - 1
            lk = T * a ** (k - 1)
            if np.ceil(lk) < 4:
                break
            sk = 0 if nk == 1 else (T - lk) / (nk - 1)
            for i in range(nk):
                s, e = int(np.floor(i * sk)), int(min(np.ceil(i * sk + lk), T))
                if e - s >= 4:
                    ref.add((s, e))
        assert {tuple(x) for x in seeded_intervals(T)} == ref
    # T = 100: the layer of length 50 + 1 ulp ends at 51 (the official intervals), not 50
    assert (0, 51) in {tuple(x) for x in seeded_intervals(100)}


def test_cusum_matches_direct_formula():
    rng = np.random.default_rng(0)
    A, B = rng.random((12, 7)), rng.random((12, 7))
    CA = np.vstack([np.zeros(7), np.cumsum(A, 0)])
    CB = np.vstack([np.zeros(7), np.cumsum(B, 0)])
    s, e = 2, 11
    ts, D = cusum_split(CA, CB, s, e)
    for t, d in zip(ts, D):
        w = np.array([np.sqrt((e - t) / ((e - s) * (t - s))) if u <= t else -np.sqrt((t - s) / ((e - s) * (e - t)))
                      for u in range(s + 1, e + 1)])
        At = (w[:, None] * A[s:e]).sum(0)     # A(u) for u = s+1..e is row u-1
        Bt = (w[:, None] * B[s:e]).sum(0)
        assert d == pytest.approx(abs(At @ Bt))


def test_cusum_peaks_at_noiseless_change():
    mean = np.r_[np.zeros(8), np.ones(12)][:, None] * np.ones((1, 5))
    C = np.vstack([np.zeros(5), np.cumsum(mean, 0)])
    t, D = cusum_split(C, C, 0, 20)
    assert t[np.argmax(D)] == 8
    # the population CUSUM at the change: (8 * 12 / 20) * ||jump||^2
    assert D.max() == pytest.approx(8 * 12 / 20 * 5)


def test_hetero_pca_removes_diagonal_bias():
    rng = np.random.default_rng(1)
    U = np.linalg.qr(rng.standard_normal((40, 3)))[0]
    G = U @ np.diag([10.0, 6.0, 3.0]) @ U.T + np.diag(rng.uniform(0, 5, 40))
    Uh = hetero_pca(G, 3, tmax=200, tol=1e-12)
    # principal angles: ||sin Theta|| small; plain eigenvectors are worse
    err = np.linalg.norm(U @ U.T - Uh @ Uh.T)
    Up = np.linalg.eigh(G)[1][:, -3:]
    assert err < 0.05 < np.linalg.norm(U @ U.T - Up @ Up.T)


def test_th_pca_reproduces_low_rank_tensor():
    # a noiseless Tucker-rank (3, 3, L) tensor is a fixed point of TH-PCA (diagonal deletion is imputed back);
    # the layer mode keeps full rank L as in the paper (a 4 x 4 Gram with its diagonal deleted cannot be
    # completed to rank 2 uniquely)
    rng = np.random.default_rng(0)
    # (well-conditioned core: HeteroPCA needs the deleted diagonal to be small next to the eigenvalues)
    U1, U2 = (np.linalg.qr(rng.standard_normal((60, 3)))[0] for _ in range(2))
    U3 = np.linalg.qr(rng.standard_normal((4, 4)))[0]
    core = np.zeros((3, 3, 4))
    core[0, 0, 0], core[1, 1, 1], core[2, 2, 2], core[0, 1, 3] = 5.0, 4.0, 3.0, 1.0
    P = np.einsum("abc,ia,jb,lc->ijl", core, U1, U2, U3)
    np.testing.assert_allclose(th_pca(P, (3, 3, 4), tmax=300, clip=None), P, atol=1e-3)


def test_th_pca_denoises_rdpg_mean():
    A, Ps, _ = simulate_dmrdpg(T=40, n=40, L=3, d=3, change_points=(), random_state=0)
    Y = A.mean(axis=0).astype(float)
    err_low = np.linalg.norm(th_pca(Y, (3, 3, 3)) - Ps[0])
    assert err_low < 0.5 * np.linalg.norm(Y - Ps[0])


def test_limiting_quantiles_scale_with_sigma_squared():
    # argmin of |r| + 2 sigma W(|r|) scales as sigma^2 (Brownian scaling)
    q1 = limiting_quantiles(1.0, 1.0, (0.025, 0.975), 400, rng=3)
    q2 = limiting_quantiles(2.0, 2.0, (0.025, 0.975), 400, rng=3)
    np.testing.assert_allclose(q2, 4 * q1, rtol=1e-12)
    assert q1[0] < 0 < q1[1]
    q = limiting_quantiles(1.0, 1.0, (0.025, 0.975), 4000, rng=4)
    assert q[0] == pytest.approx(-q[1], rel=0.15)


def test_detects_strong_changes_and_covers():
    A, _, cps = simulate_dmrdpg(T=60, n=20, L=2, d=3, change_points=(20, 40), jump=1.0, random_state=5)
    m = MRDPGChangePoint(ranks=(3, 3, 2), random_state=0, n_sim=200).fit(A)
    assert m.change_points_.tolist() == [20, 40]
    assert m.predict() == [20, 40, 60]
    cis = m.confidence_intervals()
    assert coverage(cis, cps) == [1.0, 1.0]


def test_no_change_no_detection():
    A, _, _ = simulate_dmrdpg(T=60, n=20, L=2, d=3, change_points=(), random_state=6)
    # the constant of the threshold rate c n sqrt(L) log(T/2)^{3/2} must suit the size; 0.2 here
    m = MRDPGChangePoint(ranks=(3, 3, 2), threshold_c=0.2).fit(A)
    assert m.change_points_.size == 0


def test_raw_ranks_reduce_to_same_stage1():
    A, _, _ = simulate_dmrdpg(T=60, n=20, L=2, d=3, change_points=(30,), jump=0.5, random_state=7)
    a = MRDPGChangePoint(ranks=(3, 3, 2)).fit(A)
    b = MRDPGChangePoint(ranks=None).fit(A)
    np.testing.assert_array_equal(a.stage1_half_, b.stage1_half_)
    c = MRDPGChangePoint(ranks=None, refine=False).fit(A)
    np.testing.assert_array_equal(c.change_points_, 2 * c.stage1_half_)


def test_deterministic():
    A, _, _ = simulate_dmrdpg(T=40, n=15, L=2, d=2, change_points=(20,), random_state=8)
    x = MRDPGChangePoint(ranks=(2, 2, 2), random_state=1, n_sim=100).fit(A).confidence_intervals()
    y = MRDPGChangePoint(ranks=(2, 2, 2), random_state=1, n_sim=100).fit(A).confidence_intervals()
    assert x == y


def test_hausdorff_reference():
    assert hausdorff([10, 52], [10, 50], 100) == 2
    assert hausdorff([], [10], 100) == 100
    assert hausdorff([10, 30, 50], [10, 50], 100) == 20


@pytest.mark.parametrize("kw, word", [({"ranks": (2, 2)}, "ranks"), ({"threshold": -1}, "threshold"),
                                      ({"alpha": 1.5}, "alpha"), ({"min_len": 1}, "min_len"),
                                      ({"n_sim": 3}, "n_sim"), ({"threshold_c": 0}, "threshold_c")])
def test_rejects_bad_parameters(kw, word):
    A, _, _ = simulate_dmrdpg(T=40, n=10, L=2, d=2, change_points=(20,), random_state=0)
    with pytest.raises(ValueError, match=word):
        MRDPGChangePoint(**kw).fit(A)


def test_rejects_bad_input():
    with pytest.raises(ValueError, match=r"\(T, n, n, L\)"):
        MRDPGChangePoint().fit(np.zeros((40, 5, 6, 2)))
    with pytest.raises(ValueError, match="too short"):
        MRDPGChangePoint(ranks=None).fit(np.zeros((6, 5, 5, 2)))
    with pytest.raises(RuntimeError, match="not fitted"):
        MRDPGChangePoint().predict()
    with pytest.raises(ValueError, match="jump"):
        simulate_dmrdpg(jump=0.0)
    with pytest.raises(ValueError, match="alpha"):
        seeded_intervals(20, alpha=1.0)


def _brute_force_refine(model, A, B, nu):
    """eta_k = argmin over s_k < eta < e_k of the least-squares cost, by direct summation (README, Refinement)."""
    Th = A.shape[0]
    bounds = [0, *nu, Th]
    out = []
    for k in range(1, len(bounds) - 1):
        s, e = (bounds[k - 1] + bounds[k]) // 2, -(-(bounds[k] + bounds[k + 1]) // 2)
        Pl, Pr = (model._estimate(B[a:b].mean(axis=0)) for a, b in ((bounds[k - 1], bounds[k]), (bounds[k], bounds[k + 1])))
        ml, mr = bounds[k] - bounds[k - 1], bounds[k + 1] - bounds[k]
        if model.ranks is None:   # raw means: ||P||^2 replaced by its unbiased estimate
            adj_l = np.sum((ml * Pl ** 2 - Pl) / (ml - 1)) - np.sum(Pl ** 2)
            adj_r = np.sum((mr * Pr ** 2 - Pr) / (mr - 1)) - np.sum(Pr ** 2)
        else:
            adj_l = adj_r = 0.0
        best, arg = np.inf, None
        for eta in range(s + 1, e):
            cost = sum(np.sum((A[t] - Pl) ** 2) + adj_l for t in range(s, eta))
            cost += sum(np.sum((A[t] - Pr) ** 2) + adj_r for t in range(eta, e))
            if cost < best - 1e-9:
                best, arg = cost, eta
        out.append(arg)
    return out


@pytest.mark.parametrize("ranks", [(2, 2, 2), None])
def test_refinement_matches_brute_force_least_squares(ranks):
    rng = np.random.default_rng(3)
    n, L, Th = 8, 2, 24
    P1, P2 = rng.uniform(0.2, 0.5, (n, n, L)), rng.uniform(0.4, 0.8, (n, n, L))
    P = np.stack([P1] * 9 + [P2] * 8 + [P1] * 7)           # changes at half-times 9 and 17
    A = (rng.random((Th, n, n, L)) < P).astype(float)
    B = (rng.random((Th, n, n, L)) < P).astype(float)
    model = MRDPGChangePoint(ranks=ranks)
    model._A, model._B = A, B
    for nu in ([8, 18], [10, 15], [9]):
        assert model._refine(nu) == _brute_force_refine(model, A, B, nu)


def test_raw_squared_norm_is_unbiased():
    rng = np.random.default_rng(0)
    P = rng.uniform(0.05, 0.95, (6, 6, 2))
    m = 4
    Bbar = (rng.random((20000, m, *P.shape)) < P).mean(axis=1)
    raw = MRDPGChangePoint(ranks=None)
    est = np.mean([raw._squared_norm(b, m) for b in Bbar])
    plain = np.mean(np.sum(Bbar ** 2, axis=(1, 2, 3)))
    target = np.sum(P ** 2)
    assert est == pytest.approx(target, rel=0.01)
    # the plain squared norm overstates it by sum P (1 - P) / m
    assert plain - target == pytest.approx(np.sum(P * (1 - P)) / m, rel=0.05)
    # TH-PCA estimates (the paper's refinement) enter unchanged; a single graph cannot be corrected
    assert MRDPGChangePoint()._squared_norm(P, m) == pytest.approx(target)
    assert raw._squared_norm(P, 1) == pytest.approx(target)


def test_raw_refinement_is_not_pulled_to_the_shorter_segment():
    # one weak change at half-time 12 of 48 (segments 12 and 36 long), stage 1 handed the truth: with the
    # plain ||Bbar||^2 the argmin drifts towards the short left segment; the corrected cost does not
    rng = np.random.default_rng(11)
    n, L, Th, c = 30, 2, 48, 12
    P1 = rng.uniform(0.3, 0.6, (n, n, L))
    P2 = np.clip(P1 + rng.normal(0, 0.08, P1.shape), 0.01, 0.99)
    errors = []
    for _ in range(12):
        P = np.stack([P1] * c + [P2] * (Th - c))
        model = MRDPGChangePoint(ranks=None)
        model._A = (rng.random((Th, n, n, L)) < P).astype(float)
        model._B = (rng.random((Th, n, n, L)) < P).astype(float)
        errors.append(model._refine([c])[0] - c)
    assert abs(np.mean(errors)) <= 1.5 and np.median(np.abs(errors)) <= 1


def test_rejects_non_binary_and_odd_length():
    A, _, _ = simulate_dmrdpg(T=40, n=10, L=2, d=2, change_points=(20,), random_state=0)
    weighted = A.copy()
    weighted[3, 1, 2, 0] = 0.5
    with pytest.raises(ValueError, match="binary adjacency"):
        MRDPGChangePoint().fit(weighted)
    negative = A.copy()
    negative[5, 0, 1, 1] = -1
    with pytest.raises(ValueError, match=r"binary adjacency.*min -1"):
        MRDPGChangePoint().fit(negative)
    with pytest.raises(ValueError, match="T must be even.*T = 39"):
        MRDPGChangePoint().fit(A[:39])
    MRDPGChangePoint(ranks=(2, 2, 2)).fit(A[:38])       # even lengths are fine


def _direct_D(X, Y, s, e, t):
    """D_{s,e}(t) = |<A~_{s,e}(t), B~_{s,e}(t)>| summed term by term (README, CUSUM); X[u - 1] is time u."""
    a, b = np.sqrt((e - t) / ((e - s) * (t - s))), np.sqrt((t - s) / ((e - s) * (e - t)))
    At = a * X[s:t].sum(axis=0) - b * X[t:e].sum(axis=0)
    Bt = a * Y[s:t].sum(axis=0) - b * Y[t:e].sum(axis=0)
    return abs(np.sum(At * Bt))


def test_stage1_candidates_match_direct_cusum():
    # T = 140 (70 per half): the longest seeded intervals exceed 64 and are trimmed by 2 at each end
    A, _, _ = simulate_dmrdpg(T=140, n=6, L=2, d=2, change_points=(50, 96), jump=0.6, random_state=2)
    model = MRDPGChangePoint(ranks=(2, 2, 2), min_len=5, threshold=1e9).fit(A)
    half_A, half_B = A[1::2].astype(float), A[0::2].astype(float)
    rows = []
    for s0, e0 in seeded_intervals(70, np.sqrt(0.5), 5):
        eps = int(np.ceil((e0 - s0) / 64))
        s, e = s0 + eps, e0 - eps
        if e - s <= 1:
            continue
        D = {t: _direct_D(half_A, half_B, s, e, t) for t in range(s + 1, e)}
        rows.append((D, s, e))
    assert any(e - s > 64 for _, s, e in rows) and any(s == 2 for _, s, e in rows)   # a trimmed long interval
    assert model.candidates_.shape == (len(rows), 4)
    for (D, s, e), (t, gain, s_m, e_m) in zip(rows, model.candidates_):
        assert (s_m, e_m) == (s, e)
        assert gain == pytest.approx(max(D.values()), rel=1e-9)
        assert D[int(t)] == pytest.approx(max(D.values()), rel=1e-9)   # t attains the maximum (ties exist)
    assert model.stage1_half_.size == 0          # nothing clears a threshold of 1e9


def test_threshold_rate_and_explicit_value():
    A, _, _ = simulate_dmrdpg(T=40, n=10, L=3, d=2, change_points=(20,), random_state=0)
    m = MRDPGChangePoint(ranks=(2, 2, 3), threshold_c=0.2).fit(A)
    assert m.threshold_ == pytest.approx(0.2 * 10 * np.sqrt(3) * np.log(20) ** 1.5)
    m = MRDPGChangePoint(ranks=(2, 2, 3), threshold=7.5).fit(A)
    assert m.threshold_ == 7.5
    assert isinstance(m.threshold_, float)


def test_confidence_intervals_by_hand():
    # a weak jump: wide intervals; every quantity recomputed from the definitions (README, Limiting distribution)
    A, _, _ = simulate_dmrdpg(T=80, n=16, L=2, d=2, change_points=(40,), jump=0.5, random_state=2)
    model = MRDPGChangePoint(ranks=(2, 2, 2), n_sim=300, random_state=9).fit(A)
    assert model.half_change_points_.size == 1
    cis = model.confidence_intervals(level=0.9)
    half_A, half_B = A[1::2].astype(float), A[0::2].astype(float)
    eta = int(model.half_change_points_[0])
    Pl, Pr = th_pca(half_B[:eta].mean(axis=0), (2, 2, 2)), th_pca(half_B[eta:].mean(axis=0), (2, 2, 2))
    kappa = np.linalg.norm(Pr - Pl)
    psi = (Pr - Pl) / kappa
    sig_l = np.sqrt(sum(np.sum((half_A[t] - Pl) * psi) ** 2 for t in range(eta)) / (eta - 1))
    sig_r = np.sqrt(sum(np.sum((half_A[t] - Pr) * psi) ** 2 for t in range(eta, 40)) / (40 - eta - 1))
    ci = cis[0]
    # centred at the least-squares re-estimate (official construct_CI runs refinement2 first)
    centre = model._refine([eta])[0]
    assert ci.estimate == 2 * centre
    assert (ci.kappa, ci.sigma_left, ci.sigma_right) == (pytest.approx(kappa), pytest.approx(sig_l), pytest.approx(sig_r))
    # the simulated quantiles move with the last digits of sigma (a path's argmin can flip), so they are drawn
    # with the sigmas just checked and the estimator's random stream
    q = limiting_quantiles(ci.sigma_left, ci.sigma_right, (0.05, 0.95), 300, np.random.default_rng(9))
    assert ci.lower == pytest.approx(2 * (centre - q[1] / kappa ** 2))
    assert ci.upper == pytest.approx(2 * (centre - q[0] / kappa ** 2))
    assert ci.lower < ci.estimate < ci.upper


def test_confidence_interval_without_a_jump_is_unbounded():
    # least-squares fit: the intervals sit at the fitted points (no second refinement on flat segments)
    model = MRDPGChangePoint(ranks=None, refinement="least_squares", n_sim=100, random_state=0)
    rng = np.random.default_rng(0)
    A = (rng.random((12, 5, 5, 2)) < 0.3).astype(float)
    model._A, model._B = A, np.repeat(A[:1], 12, axis=0)         # identical B graphs: both segment means agree
    model.half_change_points_, model.change_points_ = np.array([6, 9]), np.array([12, 18])
    cis = model.confidence_intervals()
    assert [c.estimate for c in cis] == [12, 18]
    for c in cis:
        assert (c.lower, c.upper, c.kappa) == (-np.inf, np.inf, 0.0) and np.isnan(c.sigma_left) and np.isnan(c.sigma_right)


@pytest.mark.parametrize("level", [0, 1, 1.5, -0.2, "0.9"])
def test_rejects_bad_level(level):
    A, _, _ = simulate_dmrdpg(T=40, n=10, L=2, d=2, change_points=(20,), random_state=0)
    m = MRDPGChangePoint(ranks=(2, 2, 2), n_sim=100).fit(A)
    with pytest.raises(ValueError, match=r"^level must lie in \(0, 1\), got "):
        m.confidence_intervals(level)


def test_validation_messages_and_boundaries():
    A, _, _ = simulate_dmrdpg(T=40, n=10, L=2, d=2, change_points=(20,), random_state=0)
    with pytest.raises(ValueError, match=r"^the sequence is too short: T = 10 < 12$"):
        MRDPGChangePoint().fit(A[:10])
    MRDPGChangePoint(ranks=(1, 1, 1), n_sim=50).fit(A[:12])          # T = 2 (min_len + 2) is enough
    with pytest.raises(ValueError, match=r"^A contains NaN or infinite entries$"):
        MRDPGChangePoint().fit(np.where(np.arange(40)[:, None, None, None] == 3, np.nan, A))
    bad = A.copy()
    bad[2, 0, 0, 0], bad[7, 1, 0, 1] = 0.25, 3.0
    with pytest.raises(ValueError, match=r"found 2 other entries, e\.g\. 0\.25 \(min 0\): binarise weighted networks first$"):
        MRDPGChangePoint().fit(bad)
    with pytest.raises(RuntimeError, match=r"^this MRDPGChangePoint is not fitted yet: call fit\(A\) first$"):
        MRDPGChangePoint().confidence_intervals()
    # boundaries that are allowed
    MRDPGChangePoint(ranks=(2, 2, 2), min_len=2, threshold=0.5, alpha=0.5, n_sim=50).fit(A)


@pytest.mark.parametrize("kw, word", [({"ranks": (0, 2, 2)}, "ranks"), ({"ranks": (2.0, 2, 2)}, "ranks"),
                                      ({"threshold": 0}, "threshold"), ({"alpha": 1.0}, "alpha"),
                                      ({"alpha": 0.0}, "alpha"), ({"alpha": "x"}, "alpha"),
                                      ({"min_len": 2.5}, "min_len"), ({"min_len": "4"}, "min_len"),
                                      ({"n_sim": 49}, "n_sim"), ({"n_sim": 100.0}, "n_sim"),
                                      ({"refinement": "cusm"}, "refinement"), ({"refinement": None}, "refinement"),
                                      ({"refine": "yes"}, "refine")])
def test_rejects_boundary_parameters(kw, word):
    A, _, _ = simulate_dmrdpg(T=40, n=10, L=2, d=2, change_points=(20,), random_state=0)
    with pytest.raises(ValueError, match=f"^{word} must"):
        MRDPGChangePoint(**kw).fit(A)


def test_smoke_experiment():
    out = run("smoke", 0)
    assert out["metrics"]["k_correct"]["lowrank"] == [1.0]
    assert all(np.isfinite(v) for v in out["metrics"]["hausdorff"].values())


def _brute_force_refinement1(A, nu, ranks):
    """The official refinement1 (CUSUM.R, CUSUM_refinement) by direct weighted sums over u, per t."""
    Th = A.shape[0]
    bounds = [0, *nu, Th]
    out = []

    def tilde(s, e, t):
        w = np.array([np.sqrt((e - t) / ((e - s) * (t - s))) if u <= t else -np.sqrt((t - s) / ((e - s) * (e - t)))
                      for u in range(s + 1, e + 1)])
        return np.tensordot(w, A[s:e], axes=(0, 0))       # A[u - 1] is the u-th graph (1-based u)

    for k in range(1, len(bounds) - 1):
        s, e, v = (bounds[k - 1] + bounds[k]) // 2, -(-(bounds[k] + bounds[k + 1]) // 2), bounds[k]
        ub = 2 * np.sqrt((e - v) * (v - s) / (e - s))
        P = tilde(s, e, v) if ranks is None else th_pca(tilde(s, e, v), ranks, clip=None)
        P = np.clip(P, -ub, ub)
        best, arg = 0.0, v
        for t in range(s + 1, e):
            gain = abs(np.sum(P * tilde(s, e, t))) / np.linalg.norm(P)
            if gain > best:
                best, arg = gain, t
        out.append(arg)
    return out


@pytest.mark.parametrize("ranks", [(2, 2, 2), None])
def test_cusum_refinement_matches_official_refinement1(ranks):
    rng = np.random.default_rng(4)
    n, L, Th = 8, 2, 24
    P1, P2 = rng.uniform(0.2, 0.5, (n, n, L)), rng.uniform(0.4, 0.8, (n, n, L))
    P = np.stack([P1] * 9 + [P2] * 8 + [P1] * 7)
    A = (rng.random((Th, n, n, L)) < P).astype(float)
    model = MRDPGChangePoint(ranks=ranks)
    model._A = A
    model._CA = np.vstack([np.zeros(A[0].size), np.cumsum(A.reshape(Th, -1), axis=0)])
    for nu in ([8, 18], [11, 15], [9], [5]):
        assert model._refine_cusum(nu) == _brute_force_refinement1(A, nu, ranks)


def test_cusum_refinement_moves_an_offset_estimate_to_a_clean_change():
    # noiseless means with one jump at half-time 12: the projected CUSUM peaks at the jump, whatever
    # stage-1 point the window is centred on
    n, L, Th = 6, 2, 24
    P = np.concatenate([np.full((12, n, n, L), 0.2), np.full((12, n, n, L), 0.7)])
    model = MRDPGChangePoint(ranks=(1, 1, 1))
    model._A = P
    model._CA = np.vstack([np.zeros(P[0].size), np.cumsum(P.reshape(Th, -1), axis=0)])
    assert model._refine_cusum([10]) == [12]
    assert model._refine_cusum([14]) == [12]


def test_default_refinement_is_the_official_refinement1():
    # a weak jump with a false alarm in stage 1 (half-times 15, 21): the two refinements disagree
    A, _, _ = simulate_dmrdpg(T=80, n=20, L=2, d=3, change_points=(40,), jump=0.3, random_state=0)
    a = MRDPGChangePoint(ranks=(3, 3, 2)).fit(A)
    b = MRDPGChangePoint(ranks=(3, 3, 2), refinement="cusum").fit(A)
    c = MRDPGChangePoint(ranks=(3, 3, 2), refinement="least_squares").fit(A)
    assert a.stage1_half_.tolist() == [15, 21]
    assert a.change_points_.tolist() == b.change_points_.tolist() == [30, 42]
    assert c.change_points_.tolist() == [34, 38]
    assert b.half_change_points_.tolist() == b._refine_cusum(b.stage1_half_.tolist())
    assert c.half_change_points_.tolist() == c._refine(c.stage1_half_.tolist())


def test_kernel_competitor_finds_a_clean_change():
    A, _, cps = simulate_dmrdpg(T=60, n=15, L=2, d=3, change_points=(30,), jump=1.0, random_state=0)
    assert kernel_cpd(A, n_bkps=1).tolist() == [30]
    assert kernel_cpd(A, pen=1.0).tolist() == [30]
    # no change at all: the penalised fit finds none
    B, _, _ = simulate_dmrdpg(T=60, n=15, L=2, d=3, change_points=(), jump=1.0, random_state=0)
    assert kernel_cpd(B, pen=1.0).size == 0


def test_experiment_arms_and_settings():
    out = run("smoke", 0)
    m = out["metrics"]
    assert set(m["hausdorff"]) == {"lowrank", "lowrank_r2", "sbs", "kernel", "lowrank_xhalf", "lowrank_ls", "raw",
                                   "kernel_oracle_k"}
    assert set(m["hausdorff_paper_jump"]) == {"lowrank", "lowrank_r2", "sbs", "kernel"}
    assert set(m["moved"]) == {"lowrank", "lowrank_xhalf"} and set(m["moved_paper_jump"]) == {"lowrank"}
    assert set(m["covering_paper_jump"]) == {"lowrank", "lowrank_r2", "kernel"}
    # every CPDmrdpg arm at one jump shares the threshold constant chosen on development seeds
    assert out["info"]["weak_jump"]["threshold_c"] == SCALES["smoke"]["threshold_c"]["weak"]
    assert SCALES["quick"]["change_points"] == (70, 140)
    # the two settings are different draws at the two jumps
    assert out["info"]["paper_jump"]["kernel_pen"] == SCALES["smoke"]["kernel_pen"]["paper"]
    assert out["info"]["weak_jump"]["kernel_pen"] == SCALES["smoke"]["kernel_pen"]["weak"]
    assert SCALES["quick"]["jump"] == 1.0 and SCALES["quick"]["weak_jump"] == 0.12


def test_intervals_are_centred_by_the_official_refinement2():
    # the weak-jump case with a false alarm: refinement1 keeps half-times (15, 21), refinement2 moves them to (17, 20)
    A, _, _ = simulate_dmrdpg(T=80, n=20, L=2, d=3, change_points=(40,), jump=0.3, random_state=0)
    m = MRDPGChangePoint(ranks=(3, 3, 2), n_sim=100, random_state=0).fit(A)
    centres = m._refine(m.half_change_points_.tolist())
    assert centres != m.half_change_points_.tolist()
    assert [ci.estimate for ci in m.confidence_intervals()] == [2 * c for c in centres]
    ls = MRDPGChangePoint(ranks=(3, 3, 2), refinement="least_squares", n_sim=100, random_state=0).fit(A)
    assert [ci.estimate for ci in ls.confidence_intervals()] == ls.change_points_.tolist()


def test_limiting_quantiles_left_sigma_drives_negative_side():
    # P(r) = -r + 2 sigma_left W1(-r) for r < 0: a quiet left side (sigma_left small) keeps the argmin
    # from wandering left, a noisy right side lets it wander right (a left/right swap reverses this)
    q = limiting_quantiles(0.1, 2.0, (0.025, 0.975), 2000, rng=0)
    assert q[0] > -0.2 and q[1] > 5.0
    q_sw = limiting_quantiles(2.0, 0.1, (0.025, 0.975), 2000, rng=0)
    assert q_sw[1] < 0.2 and q_sw[0] < -5.0
    # the law of argmin |r| + 2 sigma W(|r|): scale 4 sigma^2 from Brownian scaling; its 97.5 % quantile
    # for sigma = 1 is near 4 x 2.5 (Bhattacharya-Brockwell law; +-15 % for 4000 draws)
    q1 = limiting_quantiles(1.0, 1.0, (0.025, 0.975), 4000, rng=1)
    assert 7.0 < q1[1] < 13.0


def test_limiting_quantiles_default_grid_pinned():
    # the defaults: step max(sigma)^2 / 50, horizon 60 max(sigma)^2
    probs = (0.05, 0.5, 0.95)
    a = limiting_quantiles(0.5, 2.0, probs, 200, rng=7)
    b = limiting_quantiles(0.5, 2.0, probs, 200, rng=7, grid_step=4.0 / 50, horizon=240.0)
    np.testing.assert_array_equal(a, b)
    c = limiting_quantiles(0.5, 2.0, probs, 200, rng=7, grid_step=4.0 / 5, horizon=240.0)
    assert not np.array_equal(a, c)


@pytest.mark.parametrize("args, word", [((-1.0, -1.0), "sigma_left"), ((1.0, np.nan), "sigma_right"),
                                        ((1.0, np.inf), "sigma_right"), ((True, 1.0), "sigma_left")])
def test_limiting_quantiles_rejects_bad_sigma(args, word):
    with pytest.raises(ValueError, match=f"^{word} must"):
        limiting_quantiles(*args, (0.025, 0.975), 100, rng=0)


def test_limiting_quantiles_rejects_bad_arguments():
    with pytest.raises(ValueError, match="^n_sim must"):
        limiting_quantiles(1.0, 1.0, (0.025, 0.975), 0, rng=0)
    with pytest.raises(ValueError, match="^probs must"):
        limiting_quantiles(1.0, 1.0, (0.025, 1.5), 10, rng=0)
    with pytest.raises(ValueError, match="^grid_step must"):
        limiting_quantiles(1.0, 1.0, (0.5,), 10, rng=0, grid_step=0.0)
    with pytest.raises(ValueError, match="^horizon must"):
        limiting_quantiles(1.0, 1.0, (0.5,), 10, rng=0, horizon=np.inf)


def test_refinement1_clips_the_jump_estimate_at_twice_the_cusum_scale():
    # a jump of 3 per entry (an internal input beyond {0, 1}): the CUSUM entries are 3 sqrt(w), clipped
    # to the official bound 2 sqrt(w), w = (e - v)(v - s)/(e - s)
    n, L, Th = 4, 2, 20
    X = np.concatenate([np.zeros((10, n, n, L)), np.full((10, n, n, L), 3.0)])
    model = MRDPGChangePoint(ranks=None)
    model._A = X
    model._CA = np.vstack([np.zeros(X[0].size), np.cumsum(X.reshape(Th, -1), axis=0)])
    s, e, v = 4, 16, 10
    w = (e - v) * (v - s) / (e - s)
    P = model._jump_estimate(s, e, v)
    np.testing.assert_allclose(P, -2 * np.sqrt(w))
    # the unclipped value when the jump is within the bound
    model._CA = model._CA / 3.0
    np.testing.assert_allclose(model._jump_estimate(s, e, v), -np.sqrt(w))


def test_refinement_window_bounds():
    # s_k = floor((nu_{k-1} + nu_k)/2), e_k = ceil((nu_k + nu_{k+1})/2): odd sums pin floor and ceil
    assert MRDPGChangePoint._window([0, 11, 24, 40], 1) == (5, 18)
    assert MRDPGChangePoint._window([0, 11, 24, 40], 2) == (17, 32)
    assert MRDPGChangePoint._window([0, 10, 13, 24], 1) == (5, 12)


def test_least_squares_refinement_reaches_the_window_end():
    # the true change sits at e_k - 1 = 11 (window (5, 12) around nu = 10, next point 13): only the ceiling
    # of the window end makes it a candidate
    n, L, Th = 6, 2, 24
    P = np.concatenate([np.full((11, n, n, L), 0.2), np.full((13, n, n, L), 0.7)])
    model = MRDPGChangePoint(ranks=(1, 1, 1))
    model._A, model._B = P, P
    assert model._refine([10, 13])[0] == 11


def test_cross_half_jump_estimate_uses_the_other_half():
    rng = np.random.default_rng(5)
    n, L, Th = 8, 2, 24
    P1, P2 = rng.uniform(0.2, 0.5, (n, n, L)), rng.uniform(0.4, 0.8, (n, n, L))
    P = np.stack([P1] * 9 + [P2] * 8 + [P1] * 7)
    A = (rng.random((Th, n, n, L)) < P).astype(float)
    B = (rng.random((Th, n, n, L)) < P).astype(float)
    cum = lambda X: np.vstack([np.zeros(X[0].size), np.cumsum(X.reshape(Th, -1), axis=0)])
    same = MRDPGChangePoint(ranks=None)
    same._A, same._CA, same._CB = A, cum(A), cum(B)
    other = MRDPGChangePoint(ranks=None, jump_half="other")
    other._A, other._CA, other._CB = A, cum(A), cum(B)
    swapped = MRDPGChangePoint(ranks=None)
    swapped._A, swapped._CA = B, cum(B)
    np.testing.assert_allclose(other._jump_estimate(4, 13, 9), swapped._jump_estimate(4, 13, 9))
    assert not np.allclose(other._jump_estimate(4, 13, 9), same._jump_estimate(4, 13, 9))
    # the gain is still the CUSUM of A projected on the (B-half) estimate: brute force over t
    nu = [9, 17]
    out = other._refine_cusum(nu)
    for k, (s, e) in enumerate([MRDPGChangePoint._window([0, *nu, Th], 1), MRDPGChangePoint._window([0, *nu, Th], 2)]):
        Phat = other._jump_estimate(s, e, nu[k])
        gains = {t: abs(np.sum(Phat.ravel() * (np.sqrt((e - t) / ((e - s) * (t - s))) * A[s:t].sum(0)
                                              - np.sqrt((t - s) / ((e - s) * (e - t))) * A[t:e].sum(0)).ravel()))
                 for t in range(s + 1, e)}
        assert out[k] == max(gains, key=lambda t: (gains[t], -t))


def test_simulation_follows_the_official_layer_order():
    # official get_dirichlet_params: regime-2 layer l (1-based) draws from [(3L + l - 1)/(4L), (3L + l)/(4L)];
    # rows of X, Y sum to 1, so every P_ij of layer l lies in its layer's range (no reversal of the layers)
    L = 4
    A, Ps, cps = simulate_dmrdpg(T=20, n=30, L=L, d=3, change_points=(7, 14), jump=1.0, random_state=0)
    assert cps.tolist() == [7, 14] and len(Ps) == 3
    for l in range(L):
        assert (2 * L + l) / (4 * L) <= Ps[0][..., l].min() and Ps[0][..., l].max() <= (2 * L + l + 1) / (4 * L)
        assert (3 * L + l) / (4 * L) <= Ps[1][..., l].min() and Ps[1][..., l].max() <= (3 * L + l + 1) / (4 * L)
    np.testing.assert_array_equal(Ps[0], Ps[2])
    assert simulate_dmrdpg.__defaults__[4] == (70, 140)      # the official scenario f1


@pytest.mark.parametrize("kw, word", [({"change_points": (20, 20)}, "distinct"),
                                      ({"change_points": (20.5,)}, "integers"),
                                      ({"change_points": (0,)}, "strictly inside"),
                                      ({"n": 0}, "n must"), ({"d": 0}, "d must"), ({"L": 0}, "L must"),
                                      ({"T": 1.5}, "T must"), ({"jump": np.nan}, "jump"), ({"jump": True}, "jump")])
def test_simulate_rejects_bad_arguments(kw, word):
    base = dict(T=40, n=5, L=2, d=2, change_points=(20,))
    with pytest.raises(ValueError, match=word):
        simulate_dmrdpg(**{**base, **kw})


def test_hetero_pca_and_th_pca_reject_bad_input():
    with pytest.raises(ValueError, match="square"):
        hetero_pca(np.ones((3, 4)), 1)
    with pytest.raises(ValueError, match="^r "):
        hetero_pca(np.eye(3), 4)
    with pytest.raises(ValueError, match="^r "):
        hetero_pca(np.eye(3), 0)
    with pytest.raises(ValueError, match="NaN"):
        hetero_pca(np.full((3, 3), np.nan), 1)
    Y = np.random.default_rng(0).random((5, 5, 2))
    with pytest.raises(ValueError, match="one rank per mode"):
        th_pca(Y, (2, 2))
    with pytest.raises(ValueError, match=r"ranks\[0\]"):
        th_pca(Y, (0, 2, 2))
    with pytest.raises(ValueError, match=r"ranks\[2\]"):
        th_pca(Y, (2, 2, 3))


@pytest.mark.parametrize("kw, word", [({"threshold": True}, "threshold"), ({"threshold": np.inf}, "threshold"),
                                      ({"threshold": np.nan}, "threshold"), ({"threshold_c": np.inf}, "threshold_c"),
                                      ({"threshold_c": True}, "threshold_c"), ({"ranks": (0, 0, 0)}, "ranks"),
                                      ({"ranks": (11, 2, 2)}, "ranks"), ({"ranks": (2, 2, 3)}, "ranks"),
                                      ({"jump_half": "B"}, "jump_half"), ({"n_sim": True}, "n_sim")])
def test_rejects_silent_parameters(kw, word):
    A, _, _ = simulate_dmrdpg(T=40, n=10, L=2, d=2, change_points=(20,), random_state=0)
    with pytest.raises(ValueError, match=f"^{word}"):
        MRDPGChangePoint(**kw).fit(A)


def test_rejects_empty_networks():
    with pytest.raises(ValueError, match="at least one node"):
        MRDPGChangePoint(ranks=None).fit(np.zeros((40, 0, 0, 2)))
    with pytest.raises(ValueError, match="at least one node"):
        MRDPGChangePoint(ranks=None).fit(np.zeros((40, 3, 3, 0)))


def test_covering_metric_reference():
    # official eval_CP: sum over true segments |A| max J(A, A') / T; 0 without detections
    assert covering_metric([70, 140], [70, 140], 200) == 1.0
    assert covering_metric([], [70, 140], 200) == 0.0
    # truth {1..70}, {71..140}, {141..200}; estimate {1..60}, {61..140}, {141..200}
    expected = (70 * (60 / 70) + 70 * (70 / 80) + 60 * 1.0) / 200
    assert covering_metric([60, 140], [70, 140], 200) == pytest.approx(expected)
    # a false alarm splits a true segment: {71..140} best matched by {101..140} (40/70)
    expected = (70 * 1.0 + 70 * max(30 / 70, 40 / 70) + 60) / 200
    assert covering_metric([70, 100, 140], [70, 140], 200) == pytest.approx(expected)


def test_interval_audit_separates_detection_exactness_and_coverage():
    from iclr26.classical.cpd_mrdpg.changepoint import ConfidenceInterval
    cis = [ConfidenceInterval(70, 69.0, 71.0, 1, 1, 1), ConfidenceInterval(136, 130.0, 139.0, 1, 1, 1)]
    assert interval_audit(cis, [70, 140]) == [(True, True, True), (True, False, False)]
    # one interval for two change points: the far one is matched to a false alarm, not a detection
    assert interval_audit(cis[:1], [70, 140])[1] == (False, False, False)
