"""Tests for iclr26.classical.cpd_mrdpg (arXiv:2506.21878)."""
import numpy as np
import pytest
from threadpoolctl import threadpool_limits

from iclr26.classical.cpd_mrdpg import (MRDPGChangePoint, cusum_split, hetero_pca, limiting_quantiles,
                                        seeded_intervals, simulate_dmrdpg, th_pca)
from iclr26.classical.cpd_mrdpg.experiment import coverage, hausdorff, run


@pytest.fixture(autouse=True)
def _one_blas_thread():
    with threadpool_limits(1):
        yield


def test_seeded_intervals_hand_computed():
    # T = 16, alpha = sqrt(1/2): layers of lengths 16, 11.3, 8, 5.7, 4 (computed by hand)
    iv = {tuple(x) for x in seeded_intervals(16)}
    for expected in [(0, 16), (0, 12), (2, 14), (4, 16), (0, 8), (4, 12), (8, 16), (2, 9), (5, 11), (7, 14),
                     (10, 16), (0, 4), (12, 16), (6, 10)]:
        assert expected in iv
    assert len(iv) == 1 + 3 + 3 + 5 + 7
    assert all(e - s >= 4 for s, e in iv)


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
        MRDPGChangePoint().fit(np.zeros((6, 5, 5, 2)))
    with pytest.raises(RuntimeError, match="not fitted"):
        MRDPGChangePoint().predict()
    with pytest.raises(ValueError, match="jump"):
        simulate_dmrdpg(jump=0.0)
    with pytest.raises(ValueError, match="alpha"):
        seeded_intervals(20, alpha=1.0)


def test_smoke_experiment():
    out = run("smoke", 0)
    assert out["metrics"]["k_correct"]["lowrank"] == [1.0]
    assert all(np.isfinite(v) for v in out["metrics"]["hausdorff"].values())
