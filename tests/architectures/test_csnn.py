"""CSNN: the directed sheaf Laplacians against dense block matrices built by hand, reductions to the
graph Laplacian and to the undirected sheaf, the cooperative (listen / broadcast) property, the
baselines' equations, data loading and rejection of bad input."""
import math

import numpy as np
import pytest
import torch

from iclr26.architectures.csnn import CSNN, CSNNConv
from iclr26.architectures.csnn.baselines import GATConv, GCNConv, GNN, NSDConv
from iclr26.architectures.csnn.datasets import DEFAULT_ROOT, load_heterophilous, ring_transfer
from iclr26.architectures.csnn.layers import (ConformalMapLearner, check_edge_index, in_degree_laplacian,
                                              orthogonal_from_params, out_degree_laplacian, sheaf_laplacian)

@pytest.fixture(autouse=True)
def float64_default():
    """Float64 by default inside each test (exact comparisons with the dense references)."""
    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    yield
    torch.set_default_dtype(old)


def _graph():
    # a small directed graph, not symmetric, with a node of in-degree 0 (node 4 only sends)
    e = torch.tensor([[0, 1, 2, 3, 4, 4, 2, 1], [1, 2, 0, 0, 0, 3, 3, 3]])
    return e, 5


def _maps(N, d, seed=0):
    g = torch.Generator().manual_seed(seed)
    cS = 0.5 + torch.rand(N, generator=g) * 2
    cT = 0.5 + torch.rand(N, generator=g) * 2
    OS = orthogonal_from_params(torch.randn(N, d * (d - 1) // 2, generator=g), d)
    OT = orthogonal_from_params(torch.randn(N, d * (d - 1) // 2, generator=g), d)
    return cS[:, None, None] * OS, cT[:, None, None] * OT, cS, cT


def _dense(edge_index, S, T, kind, normalize):
    """Block matrices written out entry by entry from the definitions."""
    N, d = S.shape[0], S.shape[1]
    A = torch.zeros(N * d, N * d)
    D = torch.zeros(N * d, N * d)
    for u, v in edge_index.t().tolist():
        A[v * d:(v + 1) * d, u * d:(u + 1) * d] += T[v].t() @ S[u]
        if kind == "in":
            D[v * d:(v + 1) * d, v * d:(v + 1) * d] += T[v].t() @ T[v]
        else:
            D[u * d:(u + 1) * d, u * d:(u + 1) * d] += S[u].t() @ S[u]
    L = D - A
    if normalize:
        deg = torch.stack([D[i * d, i * d] for i in range(N)]).detach()
        s = torch.diag(((deg + 1) ** -0.5).repeat_interleave(d))
        L = s @ L @ s
    return L


@pytest.mark.parametrize("kind", ["in", "out"])
@pytest.mark.parametrize("normalize", [True, False])
def test_laplacians_match_dense_blocks(kind, normalize):
    e, N = _graph()
    d, h = 3, 4
    S, T, _, _ = _maps(N, d)
    x = torch.randn(N, d, h, generator=torch.Generator().manual_seed(1))
    got = sheaf_laplacian(x, e, S, T, kind, normalize)
    want = (_dense(e, S, T, kind, normalize) @ x.reshape(N * d, h)).reshape(N, d, h)
    torch.testing.assert_close(got, want)
    fn = in_degree_laplacian if kind == "in" else out_degree_laplacian
    torch.testing.assert_close(fn(x, e, S, T, normalize), want)


def test_in_and_out_differ_on_directed_graph():
    e, N = _graph()
    S, T, _, _ = _maps(N, 2)
    x = torch.randn(N, 2, 3)
    assert not torch.allclose(in_degree_laplacian(x, e, S, T), out_degree_laplacian(x, e, S, T))


def test_reduces_to_graph_laplacian():
    # d = 1, all maps 1: L_in = D_in - A with the plain adjacency
    e, N = _graph()
    one = torch.ones(N, 1, 1)
    x = torch.randn(N, 1, 1)
    A = torch.zeros(N, N)
    A[e[1], e[0]] = 1.0
    want = (torch.diag(A.sum(1)) - A) @ x[:, 0]
    torch.testing.assert_close(in_degree_laplacian(x, e, one, one, normalize=False)[:, 0], want)
    want_out = (torch.diag(A.sum(0)) - A) @ x[:, 0]
    torch.testing.assert_close(out_degree_laplacian(x, e, one, one, normalize=False)[:, 0], want_out)


def test_tied_maps_on_symmetric_graph_give_undirected_sheaf():
    e, N = _graph()
    e = torch.unique(torch.cat([e, e.flip(0)], 1), dim=1)
    _, T, _, _ = _maps(N, 3)
    x = torch.randn(N, 3, 2)
    Lin = in_degree_laplacian(x, e, T, T)
    torch.testing.assert_close(Lin, out_degree_laplacian(x, e, T, T))
    dense = _dense(e, T, T, "in", True)
    torch.testing.assert_close(dense, dense.t())  # the undirected sheaf Laplacian is symmetric


def test_non_listening_node_ignores_everyone():
    e, N = _graph()
    S, T, cS, cT = _maps(N, 2)
    T = T.clone()
    T[0] = 0.0  # node 0 (in-degree 3) does not listen
    x = torch.randn(N, 2, 3)
    y = x.clone()
    y[1:] += torch.randn(N - 1, 2, 3)  # change every other node
    f = lambda z: in_degree_laplacian(out_degree_laplacian(z, e, S, T), e, S, T)  # noqa: E731
    torch.testing.assert_close(f(x)[0], torch.zeros(2, 3))
    torch.testing.assert_close(f(y)[0], torch.zeros(2, 3))
    assert not torch.allclose(f(x)[3], f(y)[3])


def test_non_broadcasting_node_is_heard_by_nobody():
    e, N = _graph()
    S, T, _, _ = _maps(N, 2)
    S = S.clone()
    S[4] = 0.0  # node 4 (sends to 0 and 3) does not broadcast
    x = torch.randn(N, 2, 3)
    y = x.clone()
    y[4] += 5.0
    f = lambda z: in_degree_laplacian(out_degree_laplacian(z, e, S, T), e, S, T)  # noqa: E731
    torch.testing.assert_close(f(x), f(y))
    S2, _, _, _ = _maps(N, 2)
    g = lambda z: in_degree_laplacian(out_degree_laplacian(z, e, S2, T), e, S2, T)  # noqa: E731
    assert not torch.allclose(g(x), g(y))  # with a broadcasting node 4 the change is heard


@pytest.mark.parametrize("d", [2, 3, 4])
def test_orthogonal_maps_are_matrix_exponentials(d):
    p = torch.randn(50, d * (d - 1) // 2) * 2
    p[0] = 0.0
    p[1] = 1e-5
    rows, cols = torch.triu_indices(d, d, 1)
    A = torch.zeros(50, d, d)
    A[:, rows, cols] = p
    O = orthogonal_from_params(p, d)
    torch.testing.assert_close(O, torch.linalg.matrix_exp(A - A.transpose(-1, -2)))
    torch.testing.assert_close(O @ O.transpose(-1, -2), torch.eye(d).expand(50, d, d))
    torch.testing.assert_close(O[0], torch.eye(d))


def test_orthogonal_d1_and_rejection():
    torch.testing.assert_close(orthogonal_from_params(torch.zeros(3, 0), 1), torch.ones(3, 1, 1))
    with pytest.raises(ValueError, match=r"need d\(d-1\)/2 = 3 parameters per map for d=3, got 2"):
        orthogonal_from_params(torch.zeros(4, 2), 3)


def test_conformal_learner_scale_and_clamp():
    learner = ConformalMapLearner(4, 3, c_max=10.0)
    with torch.no_grad():
        learner.lin.weight.zero_()
        learner.lin.bias.copy_(torch.tensor([0.3, -0.2, 0.1, math.log(2.0)]))
    maps, c = learner(torch.randn(6, 4))
    torch.testing.assert_close(c, torch.full((6,), 2.0))
    torch.testing.assert_close(maps.transpose(-1, -2) @ maps, 4.0 * torch.eye(3).expand(6, 3, 3))
    want = orthogonal_from_params(torch.tanh(torch.tensor([0.3, -0.2, 0.1])), 3)
    torch.testing.assert_close(maps[0], 2.0 * want)
    with torch.no_grad():
        learner.lin.bias[-1] = 5.0
    _, c = learner(torch.randn(2, 4))
    torch.testing.assert_close(c, torch.full((2,), 10.0))
    with pytest.raises(ValueError, match="stalk dimension d must be >= 1, got 0"):
        ConformalMapLearner(4, 0)
    with pytest.raises(ValueError, match="c_max must be a positive finite number, got 0"):
        ConformalMapLearner(4, 2, c_max=0)


def test_conv_update_equation():
    torch.manual_seed(0)
    e, N = _graph()
    conv = CSNNConv(3, d=2, dropout=0.0)
    with torch.no_grad():
        conv.eps.copy_(torch.tensor([[0.4], [-0.7]]))
        conv.left.copy_(torch.tensor([[1.0, 0.5], [-0.3, 2.0]]))
    x = torch.randn(N, 6)
    S, T, cS, cT = conv.maps(x)
    xs = x.view(N, 2, 3)
    z = conv.right(conv.left @ xs)
    Lz = (_dense(e, S, T, "in", True) @ _dense(e, S, T, "out", True) @ z.reshape(N * 2, 3)).reshape(N, 2, 3)
    want = (1 + torch.tanh(conv.eps)) * xs - torch.nn.functional.gelu(Lz)
    torch.testing.assert_close(conv(x, e), want.reshape(N, 6))
    conv.act = False
    want = (1 + torch.tanh(conv.eps)) * xs - Lz
    torch.testing.assert_close(conv(x, e), want.reshape(N, 6))
    assert not torch.allclose(S, T)


def test_conv_tied_uses_one_map():
    conv = CSNNConv(2, d=3, tied=True)
    assert conv.source_maps is None
    S, T, cS, cT = conv.maps(torch.randn(4, 6))
    assert S is T and cS is cT


def test_conv_defaults_and_dropout():
    conv = CSNNConv(4, d=2, dropout=0.5)
    torch.testing.assert_close(conv.left.detach(), torch.eye(2))
    W = conv.right.weight.detach()
    torch.testing.assert_close(W @ W.t(), torch.eye(4))
    torch.testing.assert_close(conv.eps.detach(), torch.zeros(2, 1))
    e, N = _graph()
    x = torch.randn(N, 8)
    conv.eval()
    torch.testing.assert_close(conv(x, e), conv(x, e))
    conv.train()
    torch.manual_seed(0)
    a = conv(x, e)
    torch.manual_seed(1)
    assert not torch.allclose(a, conv(x, e))


def test_conv_rejections():
    e, N = _graph()
    conv = CSNNConv(3, d=2)
    with pytest.raises(ValueError, match=r"x must have shape \(N, d \* channels\) = \(N, 6\), got \(5, 5\)"):
        conv(torch.randn(N, 5), e)
    with pytest.raises(ValueError, match=r"edge_index must have shape \(2, E\), got \(3, 2\)"):
        conv(torch.randn(N, 6), torch.zeros(3, 2, dtype=torch.long))
    with pytest.raises(ValueError, match=r"edge_index refers to nodes outside 0..4 \(min 0, max 5\)"):
        conv(torch.randn(N, 6), torch.tensor([[0, 5], [1, 2]]))
    with pytest.raises(ValueError, match=r"edge_index refers to nodes outside 0..4 \(min -1, max 2\)"):
        conv(torch.randn(N, 6), torch.tensor([[0, -1], [1, 2]]))
    with pytest.raises(TypeError, match="edge_index must hold integer node ids"):
        conv(torch.randn(N, 6), e.double())
    with pytest.raises(TypeError, match=r"edge_index must be a torch.Tensor of shape \(2, E\), got list"):
        check_edge_index([[0], [1]], 2)
    with pytest.raises(ValueError, match="channels must be >= 1, got 0"):
        CSNNConv(0)
    with pytest.raises(ValueError, match=r"dropout must be a number in \[0, 1\), got 1.0"):
        CSNNConv(2, dropout=1.0)
    with pytest.raises(ValueError, match="kind must be 'in' or 'out', got 'both'"):
        sheaf_laplacian(torch.zeros(2, 1, 1), e[:, :0], torch.ones(2, 1, 1), torch.ones(2, 1, 1), "both")
    with pytest.raises(ValueError, match="layers must be a positive integer, got 0"):
        CSNN(4, 2, layers=0)
    assert check_edge_index(torch.tensor([[0], [1]], dtype=torch.int32), 2).dtype == torch.int64


def test_csnn_model_state_dict_roundtrip_and_dtype():
    e, N = _graph()
    torch.manual_seed(0)
    m = CSNN(7, 3, d=2, hidden=4, layers=2, dropout=0.0).eval()
    x = torch.randn(N, 7)
    out = m(x, e)
    assert out.shape == (N, 3) and out.dtype == torch.float64
    m2 = CSNN(7, 3, d=2, hidden=4, layers=2, dropout=0.0).eval()
    m2.load_state_dict(m.state_dict())
    torch.testing.assert_close(m2(x, e), out)
    m32 = m.float()
    assert m32(x.float(), e).dtype == torch.float32
    assert len(m.convs) == 2 and m.encoder.out_features == 8


def test_csnn_input_dropout_is_used():
    e, N = _graph()
    m = CSNN(7, 3, d=2, hidden=4, layers=1, dropout=0.0, input_dropout=0.9).train()
    x = torch.randn(N, 7)
    torch.manual_seed(0)
    a = m(x, e)
    m.eval()
    assert not torch.allclose(a, m(x, e))


def test_csnn_learns_heterophilic_pattern():
    # a bipartite graph whose labels alternate: neighbours always differ
    torch.manual_seed(0)
    N = 12
    y = torch.arange(N) % 2
    src = torch.arange(N)
    dst = (src + 1) % N
    e = torch.cat([torch.stack([src, dst]), torch.stack([dst, src])], 1)
    x = torch.randn(N, 4) * 0.1 + y[:, None] * 0.5
    m = CSNN(4, 2, d=2, hidden=4, layers=2, dropout=0.0)
    opt = torch.optim.Adam(m.parameters(), lr=0.05)
    for _ in range(30):
        opt.zero_grad()
        torch.nn.functional.cross_entropy(m(x, e), y).backward()
        opt.step()
    assert (m(x, e).argmax(-1) == y).float().mean() > 0.9


# ------------------------------------------------------------------ baselines
def test_gcn_equation():
    e, N = _graph()
    conv = GCNConv(3, 2)
    with torch.no_grad():
        conv.bias.copy_(torch.tensor([0.1, -0.2]))
    x = torch.randn(N, 3)
    A = torch.eye(N)
    A[e[1], e[0]] = 1.0
    deg = A.sum(1)
    want = torch.diag(deg ** -0.5) @ A @ torch.diag(deg ** -0.5) @ conv.lin(x) + conv.bias
    torch.testing.assert_close(conv(x, e), want)


def test_gcn_ignores_given_self_loops():
    e, N = _graph()
    conv = GCNConv(3, 2)
    x = torch.randn(N, 3)
    loops = torch.stack([torch.arange(N), torch.arange(N)])
    torch.testing.assert_close(conv(x, torch.cat([e, loops], 1)), conv(x, e))


def test_gat_equation():
    torch.manual_seed(0)
    e, N = _graph()
    conv = GATConv(3, 2, heads=2)
    with torch.no_grad():
        conv.bias.copy_(torch.arange(4.0) / 10)
    x = torch.randn(N, 3)
    h = conv.lin(x).view(N, 2, 2)
    out = torch.zeros(N, 2, 2)
    nbrs = {i: [i] for i in range(N)}
    for u, v in e.t().tolist():
        nbrs[v].append(u)
    for i in range(N):
        for k in range(2):
            s = torch.stack([torch.nn.functional.leaky_relu(
                conv.att_dst[k] @ h[i, k] + conv.att_src[k] @ h[j, k], 0.2) for j in nbrs[i]])
            a = torch.softmax(s, 0)
            out[i, k] = sum(a[n] * h[j, k] for n, j in enumerate(nbrs[i]))
    torch.testing.assert_close(conv(x, e), out.reshape(N, 4) + conv.bias)


def test_nsd_equation():
    torch.manual_seed(0)
    e, N = _graph()
    e = torch.unique(torch.cat([e, e.flip(0)], 1), dim=1)
    conv = NSDConv(2, d=2)
    with torch.no_grad():
        conv.eps.copy_(torch.tensor([[0.3], [-0.5]]))
    x = torch.randn(N, 4)
    xs = x.view(N, 2, 2)
    z = conv.right(conv.left @ xs)
    d = 2
    L = torch.zeros(N * d, N * d)
    deg = torch.zeros(N)
    for u, v in e.t().tolist():  # message into v from u along the edge {u, v}
        Fv = orthogonal_from_params(torch.tanh(conv.map_lin(torch.cat([x[v], x[u]]))), d)
        Fu = orthogonal_from_params(torch.tanh(conv.map_lin(torch.cat([x[u], x[v]]))), d)
        L[v * d:(v + 1) * d, v * d:(v + 1) * d] += Fv.t() @ Fv
        L[v * d:(v + 1) * d, u * d:(u + 1) * d] -= Fv.t() @ Fu
        deg[v] += 1
    s = torch.diag(((deg + 1) ** -0.5).repeat_interleave(d))
    Lz = (s @ L @ s @ z.reshape(N * d, 2)).reshape(N, d, 2)
    want = (1 + torch.tanh(conv.eps)) * xs - torch.nn.functional.gelu(Lz)
    torch.testing.assert_close(conv(x, e), want.reshape(N, 4))
    conv.act = False
    torch.testing.assert_close(conv(x, e), ((1 + torch.tanh(conv.eps)) * xs - Lz).reshape(N, 4))


@pytest.mark.parametrize("kind", GNN.KINDS)
def test_gnn_wrapper_shapes_and_roundtrip(kind):
    e, N = _graph()
    torch.manual_seed(0)
    m = GNN(kind, 6, 3, hidden=4, layers=2, dropout=0.0, d=2, heads=2).eval()
    x = torch.randn(N, 6)
    out = m(x, e)
    assert out.shape == (N, 3)
    m2 = GNN(kind, 6, 3, hidden=4, layers=2, dropout=0.0, d=2, heads=2).eval()
    m2.load_state_dict(m.state_dict())
    torch.testing.assert_close(m2(x, e), out)


def test_gnn_dropout_and_activation_matter():
    e, N = _graph()
    x = torch.randn(N, 6)
    for kind in ("gcn", "gat", "nsd"):
        torch.manual_seed(0)
        m = GNN(kind, 6, 3, hidden=4, layers=2, dropout=0.5, d=2, heads=2)
        m.eval()
        a = m(x, e)
        m.train()
        assert not torch.allclose(a, m(x, e)), kind
    torch.manual_seed(0)
    m = GNN("gcn", 6, 3, hidden=4, layers=1, dropout=0.0).eval()
    h = m.convs[0](m.encoder(x), e)
    torch.testing.assert_close(m(x, e), m.decoder(torch.relu(h)))
    m = GNN("gat", 6, 3, hidden=4, layers=1, dropout=0.0, heads=2).eval()
    h = m.convs[0](m.encoder(x), e)
    torch.testing.assert_close(m(x, e), m.decoder(torch.nn.functional.elu(h)))
    m = GNN("nsd", 6, 3, hidden=4, layers=1, dropout=0.0, d=2).eval()
    assert m.encoder.out_features == 8
    torch.testing.assert_close(m(x, e), m.decoder(m.convs[0](m.encoder(x), e)))
    m = GNN("csnn", 6, 3, hidden=4, layers=3, dropout=0.0, d=2)
    assert len(m.net.convs) == 3 and m.net.d == 2


def test_gnn_rejections():
    with pytest.raises(ValueError, match=r"kind must be one of \('gcn', 'gat', 'nsd', 'csnn', 'mlp'\), got 'sage'"):
        GNN("sage", 3, 2)
    with pytest.raises(ValueError, match=r"hidden \(6\) must be divisible by heads \(4\)"):
        GNN("gat", 3, 2, hidden=6, heads=4)


# ------------------------------------------------------------------ data
def test_ring_transfer_layout():
    r = ring_transfer(3, 4, 5, np.random.default_rng(0))
    n = 8
    assert r["x"].shape == (3 * n, 7)
    assert r["edge_index"].shape == (2, 3 * 2 * n)
    torch.testing.assert_close(r["targets"], torch.tensor([4, 12, 20]))
    for gi in range(3):
        src = r["x"][gi * n]
        assert src[:5].argmax() == r["y"][gi] and src[5] == 1 and src[6] == 0
        tgt = r["x"][gi * n + 4]
        assert tgt[:6].sum() == 0 and tgt[6] == 1
        assert r["x"][gi * n + 1].abs().sum() == 0
    # every node of a ring has degree 2 and edges stay inside each graph
    deg = torch.bincount(r["edge_index"][1], minlength=3 * n)
    assert (deg == 2).all()
    assert ((r["edge_index"][0] // n) == (r["edge_index"][1] // n)).all()
    # the target is at `distance` hops from the source: BFS on graph 0
    A = {i: set() for i in range(n)}
    for u, v in r["edge_index"][:, : 2 * n].t().tolist():
        A[u].add(v)
    dist, frontier, seen = 0, {0}, {0}
    while 4 not in frontier:
        frontier = {w for f in frontier for w in A[f]} - seen
        seen |= frontier
        dist += 1
    assert dist == 4
    with pytest.raises(ValueError, match="need distance >= 1, n_graphs >= 1, n_classes >= 2; got 0, 3, 5"):
        ring_transfer(3, 0, 5, np.random.default_rng(0))


@pytest.mark.skipif(not (DEFAULT_ROOT / "texas.npz").is_file(), reason="shared heterophilous data absent")
def test_load_texas():
    g = load_heterophilous("texas")
    assert g["x"].shape == (183, 1703) and g["x"].dtype == torch.float32
    assert g["num_classes"] == 5 and g["y"].shape == (183,)
    assert g["train_masks"].shape == (10, 183) and g["train_masks"].dtype == torch.bool
    assert not (g["train_masks"] & g["test_masks"]).any()
    e = g["edge_index"]
    assert (e[0] != e[1]).all()
    keys = set((e[0] * 183 + e[1]).tolist())
    assert len(keys) == e.shape[1]  # no duplicates
    assert all((v * 183 + u) in keys for u, v in e.t().tolist())  # symmetric
    d = load_heterophilous("texas", undirected=False)
    assert d["edge_index"].shape[1] < e.shape[1]


def _write_npz(path):
    rng = np.random.default_rng(0)
    edges = np.array([[0, 1], [1, 0], [1, 2], [2, 2], [3, 1], [0, 1]])  # a reverse pair, a self-loop, a duplicate
    masks = np.zeros((10, 4), dtype=bool)
    masks[:, 0] = True
    np.savez(path / "texas.npz", node_features=rng.normal(size=(4, 3)), node_labels=np.array([0, 2, 1, 2]),
             edges=edges, train_masks=masks, val_masks=~masks, test_masks=np.zeros((10, 4), dtype=np.uint8))


def test_loader_on_a_small_file(tmp_path):
    _write_npz(tmp_path)
    g = load_heterophilous("texas", root=tmp_path)
    assert g["x"].dtype == torch.float32 and g["x"].shape == (4, 3)
    assert g["y"].tolist() == [0, 2, 1, 2] and g["num_classes"] == 3
    pairs = sorted(map(tuple, g["edge_index"].t().tolist()))
    assert pairs == [(0, 1), (1, 0), (1, 2), (1, 3), (2, 1), (3, 1)]
    d = load_heterophilous("texas", root=str(tmp_path), undirected=False)
    assert sorted(map(tuple, d["edge_index"].t().tolist())) == [(0, 1), (1, 0), (1, 2), (3, 1)]
    for k in ("train_masks", "val_masks", "test_masks"):
        assert g[k].dtype == torch.bool and g[k].shape == (10, 4)
    assert g["train_masks"][:, 0].all() and not g["train_masks"][:, 1:].any()
    assert g["val_masks"][:, 1:].all() and not g["test_masks"].any()


def test_load_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="texas.npz not found: the heterophilous graphs"):
        load_heterophilous("texas", root=tmp_path)
    with pytest.raises(ValueError, match="unknown dataset 'cora'; available: texas, cornell"):
        load_heterophilous("cora")


@pytest.mark.slow
def test_quick_scale_runs():
    from iclr26.architectures.csnn.experiment import run
    out = run("quick", 0)
    assert set(out["metrics"]["test_accuracy"]) == {"csnn", "csnn_tied", "nsd", "gcn", "gat", "mlp"}


def test_dropout_only_in_training_and_at_the_given_rate():
    e, N = _graph()
    x = torch.randn(N, 6)
    for kind in GNN.KINDS:
        torch.manual_seed(0)
        m = GNN(kind, 6, 3, hidden=4, layers=2, dropout=0.7, d=2, heads=2).eval()
        torch.testing.assert_close(m(x, e), m(x, e))  # no dropout in eval mode
        torch.manual_seed(0)
        z = GNN(kind, 6, 3, hidden=4, layers=2, dropout=0.0, d=2, heads=2).train()
        torch.testing.assert_close(z(x, e), z(x, e))  # rate 0: nothing dropped while training
    c = CSNN(6, 3, d=2, hidden=4, layers=1, dropout=0.0, input_dropout=0.0).train()
    torch.testing.assert_close(c(x, e), c(x, e))
    c = CSNN(6, 3, d=2, hidden=4, layers=1, dropout=0.6, input_dropout=0.6).eval()
    torch.testing.assert_close(c(x, e), c(x, e))
    g = GATConv(6, 2, heads=2, dropout=0.0).train()
    torch.testing.assert_close(g(x, e), g(x, e))
    g = GATConv(6, 2, heads=2, dropout=0.9).eval()
    torch.testing.assert_close(g(x, e), g(x, e))
    n = NSDConv(3, d=2, dropout=0.9).eval()
    torch.testing.assert_close(n(x, e), n(x, e))


def test_wrapper_passes_its_arguments():
    m = GNN("csnn", 6, 3, hidden=5, layers=2, dropout=0.3, d=2)
    assert m.net.hidden == 5 and m.net.dropout == 0.3 and m.net.convs[0].dropout == 0.3
    assert m.net.convs[0].source_maps is not None  # not tied
    m = GNN("nsd", 6, 3, hidden=5, layers=2, dropout=0.3, d=2)
    assert m.convs[0].dropout == 0.3 and m.convs[0].d == 2 and m.convs[0].channels == 5
    m = GNN("gat", 6, 3)
    assert m.convs[0].heads == 4 and m.dropout == 0.5
    m = GNN("nsd", 6, 3)
    assert m.convs[0].d == 3
    c = CSNN(6, 3, d=2, hidden=4, layers=2, tied=True)
    assert all(conv.tied and conv.source_maps is None for conv in c.convs)
    assert CSNN(6, 3).dropout == 0.5 and not CSNN(6, 3).convs[0].tied
    conv = CSNNConv(3, d=2)
    assert conv.target_maps.c_max == 10.0 and conv.source_maps.c_max == 10.0
    assert CSNNConv(3, d=2, c_max=4.0).source_maps.c_max == 4.0
    assert CSNNConv(1, d=2).channels == 1  # one channel is allowed
    for name in ("in_channels", "out_channels", "d", "hidden"):
        kw = dict(in_channels=4, out_channels=2, d=2, hidden=3, layers=1)
        kw[name] = 0
        with pytest.raises(ValueError, match=f"{name} must be a positive integer, got 0"):
            CSNN(**kw)


def test_no_biases_in_the_linear_maps():
    assert GCNConv(3, 2).lin.bias is None and GATConv(3, 2).lin.bias is None
    assert NSDConv(2, d=2).right.bias is None and CSNNConv(2, d=2).right.bias is None


def test_ring_transfer_edges_and_classes():
    r = ring_transfer(200, 3, 4, np.random.default_rng(1))
    n = 6
    src, dst = r["edge_index"][:, : 2 * n]
    assert sorted(zip(src.tolist(), dst.tolist())) == sorted(
        [(i, (i + 1) % n) for i in range(n)] + [((i + 1) % n, i) for i in range(n)])
    assert set(r["y"].tolist()) == {0, 1, 2, 3} and r["num_classes"] == 4
    assert r["y"].dtype == torch.int64
    assert r["x"][0, :4].max() == 1.0 and r["x"][0, :4].sum() == 1.0
    for bad in [(0, 3, 4), (3, 0, 4), (3, 3, 1)]:
        with pytest.raises(ValueError, match="need distance >= 1, n_graphs >= 1, n_classes >= 2"):
            ring_transfer(bad[1], bad[0], bad[2], np.random.default_rng(0))
    one = ring_transfer(1, 1, 2, np.random.default_rng(0))
    assert one["x"].shape == (2, 4)


# --------------------------------------------------------------------------------------------
# torch_geometric adapter (pyg.py; needs the ``graph`` extra)
# --------------------------------------------------------------------------------------------
@pytest.fixture
def tg():
    return pytest.importorskip("torch_geometric")


def _random_digraph(seed, N=9, E=20):
    """Directed edges with duplicates and self-loops; the last two nodes are isolated."""
    rng = np.random.default_rng(seed)
    src = rng.integers(0, N - 2, E)
    dst = rng.integers(0, N - 2, E)
    src[:2] = dst[:2]                                       # two self-loops
    src[2], dst[2] = src[3], dst[3]                         # a duplicate edge
    return torch.as_tensor(np.stack([src, dst])), N


def _spread_conv(conv, seed):
    """Move a fresh layer off its symmetric init: non-identity W_left, eps != 0, map scales spread
    over (0.1, 10) and large rotation angles, so that every term of the update matters."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        conv.left.copy_(torch.eye(conv.d) + 0.5 * torch.randn(conv.d, conv.d, generator=g))
        conv.eps.copy_(torch.randn(conv.eps.shape, generator=g))
        for learner in (conv.target_maps, conv.source_maps):
            if learner is not None:
                learner.lin.weight.mul_(3.0)
                learner.lin.bias.copy_(2.0 * torch.randn(learner.lin.bias.shape, generator=g))
    return conv


def _pair(tg, channels=4, d=3, seed=0, **kw):
    from iclr26.architectures.csnn.pyg import CSNNConvPyG
    torch.manual_seed(seed)
    ref = _spread_conv(CSNNConv(channels, d, **kw), seed)
    pyg = CSNNConvPyG(channels, d, **kw)
    pyg.load_state_dict(ref.state_dict())
    return ref, pyg


def test_pyg_message_passing_is_the_off_diagonal_product(tg):
    """``out_i = sum_{j -> i} T_i^T S_j y_j`` against a per-edge loop (duplicates count twice,
    self-loops give T_i^T S_i y_i, nodes without in-edges get 0)."""
    from torch_geometric.nn import MessagePassing
    from iclr26.architectures.csnn.pyg import CSNNMessagePassing
    e, N = _random_digraph(3)
    S, T, _, _ = _maps(N, 3, seed=4)
    y = torch.randn(N, 3, 5, generator=torch.Generator().manual_seed(5))
    mp = CSNNMessagePassing()
    assert isinstance(mp, MessagePassing) and mp.node_dim == 0 and mp.flow == "source_to_target"
    assert list(mp.state_dict()) == []
    ref = torch.zeros_like(y)
    for j, i in e.t().tolist():
        ref[i] += T[i].T @ S[j] @ y[j]
    torch.testing.assert_close(mp(y, e, S, T), ref, rtol=0, atol=1e-12)
    assert mp(y, e, S, T)[N - 2:].abs().max() == 0
    # S and T swap roles: a non-symmetric T changes the result when transposed
    assert (mp(y, e, S, T) - mp(y, e, T, S)).abs().max() > 1e-3


@pytest.mark.parametrize("d,tied,seed", [(1, False, 0), (2, False, 1), (3, False, 2), (3, True, 3),
                                         (4, False, 4)])
def test_pyg_conv_equals_csnnconv(tg, d, tied, seed):
    ref, pyg = _pair(tg, channels=3, d=d, seed=seed, tied=tied)
    e, N = _random_digraph(seed + 10)
    x = torch.randn(N, d * 3, generator=torch.Generator().manual_seed(seed))
    out = pyg(x, e)
    torch.testing.assert_close(out, ref(x, e), rtol=0, atol=1e-6)
    assert (out - x).abs().max() > 1e-2                      # the layer does something
    # isolated nodes: only the (1 + tanh eps) x term acts on them
    torch.testing.assert_close(out[N - 2:].view(2, d, 3),
                               (1 + torch.tanh(ref.eps)) * x[N - 2:].view(2, d, 3), rtol=0, atol=1e-6)
    # no edges at all and int32 edges
    empty = torch.zeros(2, 0, dtype=torch.long)
    torch.testing.assert_close(pyg(x, empty), ref(x, empty), rtol=0, atol=1e-6)
    torch.testing.assert_close(pyg(x, e.int()), ref(x, e), rtol=0, atol=1e-6)


def test_pyg_conv_gradients_equal(tg):
    ref, pyg = _pair(tg, channels=4, d=3, seed=7)
    e, N = _random_digraph(8)
    x = torch.randn(N, 12, generator=torch.Generator().manual_seed(9))
    xr, xp = x.clone().requires_grad_(), x.clone().requires_grad_()
    w = torch.randn(N, 12, generator=torch.Generator().manual_seed(10))
    (ref(xr, e) * w).sum().backward()
    (pyg(xp, e) * w).sum().backward()
    torch.testing.assert_close(xp.grad, xr.grad, rtol=0, atol=1e-6)
    grads_ref = dict(ref.named_parameters())
    for name, p in pyg.named_parameters():
        assert p.grad is not None and grads_ref[name].grad.abs().max() > 0, name
        torch.testing.assert_close(p.grad, grads_ref[name].grad, rtol=0, atol=1e-6, msg=name)


def test_pyg_conv_train_mode_dropout_matches(tg):
    ref, pyg = _pair(tg, channels=4, d=2, seed=11, dropout=0.5)
    e, N = _random_digraph(12)
    x = torch.randn(N, 8, generator=torch.Generator().manual_seed(13))
    ref.train(), pyg.train()
    torch.manual_seed(0)
    a = ref(x, e)
    torch.manual_seed(0)
    torch.testing.assert_close(pyg(x, e), a, rtol=0, atol=1e-6)


def test_pyg_conv_on_a_batch_of_data(tg):
    """``Batch.from_data_list`` offsets the edges; the layer on the batch equals the layer on each
    graph (no message crosses graphs); the ``DataLoader`` gives the same batches."""
    from torch_geometric.data import Batch, Data
    from torch_geometric.loader import DataLoader
    _, pyg = _pair(tg, channels=2, d=3, seed=14)
    pyg.eval()
    graphs = []
    for s in range(3):
        e, N = _random_digraph(20 + s, N=6 + s, E=10 + 3 * s)
        graphs.append(Data(x=torch.randn(N, 6, generator=torch.Generator().manual_seed(s)), edge_index=e))
    batch = Batch.from_data_list(graphs)
    out = pyg(batch.x, batch.edge_index)
    torch.testing.assert_close(out, torch.cat([pyg(g.x, g.edge_index) for g in graphs]), rtol=0, atol=1e-6)
    loaded = next(iter(DataLoader(graphs, batch_size=3, shuffle=False)))
    torch.testing.assert_close(pyg(loaded.x, loaded.edge_index), out, rtol=0, atol=1e-12)


def test_pyg_script_and_eager(tg):
    """The message-passing module compiles with TorchScript and agrees with eager mode. The full
    conv layer runs eagerly only: its map learner (``layers.py``) is not scriptable."""
    from iclr26.architectures.csnn.pyg import CSNNMessagePassing
    e, N = _random_digraph(30)
    S, T, _, _ = _maps(N, 3, seed=31)
    y = torch.randn(N, 3, 4, generator=torch.Generator().manual_seed(32))
    scripted = torch.jit.script(CSNNMessagePassing())
    torch.testing.assert_close(scripted(y, e, S, T), CSNNMessagePassing()(y, e, S, T), rtol=0, atol=1e-12)


def test_pyg_state_dict_round_trip(tg):
    import io
    from iclr26.architectures.csnn.pyg import CSNNConvPyG
    ref, pyg = _pair(tg, channels=3, d=2, seed=40)
    assert list(pyg.state_dict()) == list(ref.state_dict())
    buf = io.BytesIO()
    torch.save(pyg.state_dict(), buf)
    buf.seek(0)
    back = CSNNConv(3, 2)                                    # PyG -> plain layer
    back.load_state_dict(torch.load(buf))
    again = CSNNConvPyG(3, 2)                                # plain -> PyG layer
    again.load_state_dict(back.state_dict())
    e, N = _random_digraph(41)
    x = torch.randn(N, 6, generator=torch.Generator().manual_seed(42))
    torch.testing.assert_close(again(x, e), ref(x, e), rtol=0, atol=1e-12)
    torch.testing.assert_close(back(x, e), ref(x, e), rtol=0, atol=1e-12)
    # float32 and a tied layer
    p32 = CSNNConvPyG(3, 2).float()
    assert p32(x.float(), e).dtype == torch.float32
    tied = CSNNConvPyG(3, 2, tied=True)
    assert tied.source_maps is None and list(tied.state_dict()) == list(CSNNConv(3, 2, tied=True).state_dict())


def test_pyg_rejections(tg):
    from iclr26.architectures.csnn.pyg import CSNNConvPyG
    from iclr26.architectures.csnn.pyg import sheaf_laplacian_pyg, CSNNMessagePassing
    conv = CSNNConvPyG(2, d=3)
    with pytest.raises(ValueError, match=r"x must have shape \(N, d \* channels\) = \(N, 6\), got \(4, 5\)"):
        conv(torch.randn(4, 5), torch.zeros(2, 0, dtype=torch.long))
    with pytest.raises(ValueError, match=r"edge_index refers to nodes outside 0..3"):
        conv(torch.randn(4, 6), torch.tensor([[0], [4]]))
    with pytest.raises(ValueError, match="kind must be 'in' or 'out', got 'both'"):
        sheaf_laplacian_pyg(torch.randn(2, 1, 1), torch.tensor([[0], [1]]), torch.ones(2, 1, 1),
                            torch.ones(2, 1, 1), "both", CSNNMessagePassing())


def test_pyg_names_without_the_graph_extra():
    """Without torch_geometric the package imports, and using the adapter names the extra."""
    import subprocess
    import sys
    code = ("import sys; sys.modules['torch_geometric'] = None\n"
            "import iclr26.architectures.csnn.pyg as m\n"
            "assert 'torch_geometric' not in [k for k, v in sys.modules.items() if v is not None]\n"
            "for cls in (m.CSNNConvPyG, m.CSNNMessagePassing):\n"
            "    try:\n"
            "        cls(2) if cls is m.CSNNConvPyG else cls()\n"
            "    except ImportError as err:\n"
            "        assert \"install the 'graph' extra\" in str(err), err\n"
            "    else:\n"
            "        raise SystemExit('no ImportError')\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]


def test_package_import_does_not_load_torch_geometric():
    import subprocess
    import sys
    code = ("import sys, iclr26.architectures.csnn\n"
            "assert 'torch_geometric' not in sys.modules\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]


# ---------------------------------------------------------------------------------- issue-30 fixes
def test_scale_is_clamped_before_the_exponential():
    """``exp(min(a, log c_max))``: a huge pre-activation gives c = c_max and finite gradients (the
    clamp after ``exp`` overflows to inf in float32 and its gradient is inf * 0 = NaN)."""
    learner = ConformalMapLearner(4, 3, c_max=10.0)
    with torch.no_grad():
        learner.lin.bias[-1] = 1e4                 # exp overflows in float32 and float64
    x = torch.randn(5, 4, requires_grad=True)
    maps, c = learner(x)
    torch.testing.assert_close(c, torch.full((5,), 10.0))
    (maps.sum() + c.sum()).backward()
    assert all(torch.isfinite(p.grad).all() for p in learner.parameters())
    assert torch.isfinite(x.grad).all()
    # below the bound the scale is exactly exp(a)
    with torch.no_grad():
        learner.lin.weight.zero_()
        learner.lin.bias[-1] = math.log(10.0) - 0.5
    _, c = learner(torch.randn(2, 4))
    torch.testing.assert_close(c, torch.full((2,), math.exp(math.log(10.0) - 0.5)))


def test_mlp_map_learner_is_the_official_shape_and_conformal():
    learner = ConformalMapLearner(6, 3, hidden=16)
    assert isinstance(learner.lin, torch.nn.Sequential)
    assert [type(m) for m in learner.lin] == [torch.nn.Linear, torch.nn.ReLU, torch.nn.Linear]
    assert learner.lin[0].out_features == 16 and learner.lin[2].out_features == 4
    maps, c = learner(torch.randn(7, 6))
    torch.testing.assert_close(maps.transpose(-1, -2) @ maps, (c ** 2)[:, None, None] * torch.eye(3).expand(7, 3, 3))
    conv = CSNNConv(4, d=3, map_hidden=16)
    assert conv.target_maps.hidden == 16 and conv.source_maps.hidden == 16
    assert all(cv.target_maps.hidden == 5 for cv in CSNN(6, 2, d=2, hidden=4, layers=2, map_hidden=5).convs)
    assert GNN("csnn", 6, 2, d=2, hidden=4, map_hidden=5).net.convs[0].source_maps.hidden == 5
    nsd = GNN("nsd", 6, 2, d=3, hidden=4, map_hidden=7)
    assert isinstance(nsd.convs[0].map_lin, torch.nn.Sequential) and nsd.convs[0].map_lin[0].out_features == 7
    assert isinstance(GNN("nsd", 6, 2, d=3, hidden=4).convs[0].map_lin, torch.nn.Linear)
    with pytest.raises(ValueError, match="hidden must be a non-negative integer"):
        ConformalMapLearner(4, 2, hidden=-1)
    with pytest.raises(ValueError, match="map_hidden must be a non-negative integer"):
        NSDConv(3, d=2, map_hidden=-2)


def test_csnn_layer_sees_two_hops_and_ring_depth_matches_receptive_field():
    """Each CSNN layer composes two Laplacians: L layers reach exactly 2L hops, so on the ring the
    extra arm csnn_half gets ceil(distance / 2) layers; CSNN and the one-hop models distance layers."""
    from iclr26.architectures.csnn.experiment import ring_layers
    n = 12
    ring = torch.arange(n)
    e = torch.stack([torch.cat([ring, (ring + 1) % n]), torch.cat([(ring + 1) % n, ring])])

    def reaches(model, hops):
        x = torch.randn(n, 5, requires_grad=True)
        model(x, e)[hops].sum().backward()
        return bool(x.grad[0].abs().sum() > 0)

    torch.manual_seed(0)
    assert reaches(CSNN(5, 2, d=2, hidden=3, layers=3, dropout=0.0), 6)
    assert not reaches(CSNN(5, 2, d=2, hidden=3, layers=2, dropout=0.0), 6)
    assert reaches(CSNN(5, 2, d=2, hidden=3, layers=2, dropout=0.0), 4)
    assert reaches(GNN("gcn", 5, 2, hidden=64, layers=6, dropout=0.0), 6)
    assert not reaches(GNN("gcn", 5, 2, hidden=64, layers=5, dropout=0.0), 6)
    assert not reaches(GNN("nsd", 5, 2, d=2, hidden=3, layers=5, dropout=0.0), 6)
    assert reaches(GNN("nsd", 5, 2, d=2, hidden=3, layers=6, dropout=0.0), 6)
    assert not reaches(GNN("mlp", 5, 2, hidden=64, layers=6, dropout=0.0), 6)
    # the main setting: every model (CSNN included) has `distance` layers; csnn_half the fewest
    # CSNN layers whose receptive field reaches the source
    assert [ring_layers(a, 6) for a in ("csnn", "csnn_half", "nsd", "gcn", "gat", "mlp")] == [6, 3, 6, 6, 6, 6]
    assert ring_layers("csnn_half", 3) == 2 and ring_layers("csnn", 3) == 3 and ring_layers("gcn", 3) == 3


def test_mlp_baseline_ignores_the_edges():
    e, N = _graph()
    x = torch.randn(N, 6)
    m = GNN("mlp", 6, 3, hidden=8, layers=2, dropout=0.0).eval()
    torch.testing.assert_close(m(x, e), m(x, torch.zeros(2, 0, dtype=torch.long)))
    assert len(m.convs) == 2 and all(isinstance(c, torch.nn.Linear) for c in m.convs)


def _tiny_graph(seed=0):
    g = torch.Generator().manual_seed(seed)
    N = 30
    y = torch.arange(N) % 3
    x = torch.nn.functional.one_hot(y, 3).float() + 0.3 * torch.randn(N, 3, generator=g)
    src = torch.randint(0, N, (60,), generator=g)
    dst = torch.randint(0, N, (60,), generator=g)
    keep = src != dst
    e = torch.unique(torch.cat([torch.stack([src, dst]), torch.stack([dst, src])], 1)[:, torch.cat([keep, keep])], dim=1)
    masks = torch.zeros(3, 1, N, dtype=torch.bool)
    part = torch.randperm(N, generator=g) % 3          # train / val / test nodes, every class in each
    for k in range(3):
        masks[k, 0, part == k] = True
    return dict(x=x, y=y, edge_index=e, train_masks=masks[0], val_masks=masks[1], test_masks=masks[2], num_classes=3)


def test_training_fails_loudly_on_nonfinite_loss_or_gradient(monkeypatch):
    from iclr26.architectures.csnn import experiment as E
    cfg = dict(E.SCALES["smoke"])
    g = _tiny_graph()
    real_build = E.build

    def poisoned(*a, **k):
        m = real_build(*a, **k)
        with torch.no_grad():
            next(m.parameters()).fill_(float("nan"))
        return m

    monkeypatch.setattr(E, "build", poisoned)
    with pytest.raises(E.NonFiniteTrainingError, match="csnn .*non-finite loss nan at step 0"):
        E._fit_node_split("csnn", g, 0, cfg, 0)
    with pytest.raises(E.NonFiniteTrainingError, match="ring gcn .*at step 0"):
        E._fit_ring("gcn", 3, cfg, 0)
    # a finite loss whose gradient is not finite is caught too
    lin = torch.nn.Linear(2, 1)
    loss = lin(torch.ones(1, 2)).sum()
    loss.backward()
    lin.weight.grad[0, 0] = float("inf")
    with pytest.raises(E.NonFiniteTrainingError, match="^probe: non-finite gradient of weight at step 7$"):
        E.check_finite(lin, loss.detach(), "probe", 7)
    lin.weight.grad[0, 0] = 0.0
    E.check_finite(lin, loss.detach(), "probe", 7)


def test_node_training_stops_early_and_picks_the_best_validation_epoch():
    from iclr26.architectures.csnn import experiment as E
    cfg = dict(E.SCALES["smoke"], epochs=300, patience=30)
    val, test, ran = E._fit_node_split("mlp", _tiny_graph(), 0, cfg, 0)
    assert len(ran) == len(cfg["grid"]) and all(r < 300 for r in ran)
    assert val > 1 / 3 and 0.0 <= test <= 1.0         # above chance on a learnable toy task
    long = E._fit_node_split("mlp", _tiny_graph(), 0, dict(cfg, patience=1000), 0)
    assert long[2] == [300] and long[0] >= val


# ------------------------------------------------------------------ bad input, selection, stopping
def test_non_finite_features_are_rejected():
    e, N = _graph()
    for bad in (float("nan"), float("inf"), -float("inf")):
        x = torch.randn(N, 7)
        x[2, 3] = bad
        with pytest.raises(ValueError, match=r"^x holds non-finite values \(NaN or inf\) in 1 entries$"):
            CSNN(7, 3, d=2, hidden=4, layers=1)(x, e)
        for kind in ("gcn", "gat", "nsd", "mlp", "csnn"):
            with pytest.raises(ValueError, match=r"x holds non-finite values \(NaN or inf\)"):
                GNN(kind, 7, 3, hidden=8, layers=1, d=2)(x, e)


def test_wrong_feature_width_names_in_channels():
    e, N = _graph()
    msg = r"^x must have shape \(N, in_channels\) = \(N, 7\), got \(5, 6\): the model was built with in_channels=7$"
    with pytest.raises(ValueError, match=msg):
        CSNN(7, 3, d=2, hidden=4, layers=1)(torch.randn(N, 6), e)
    for kind in ("gcn", "gat", "nsd", "mlp", "csnn"):
        with pytest.raises(ValueError, match=msg):
            GNN(kind, 7, 3, hidden=8, layers=1, d=2)(torch.randn(N, 6), e)
    with pytest.raises(ValueError, match=r"x must have shape \(N, in_channels\) = \(N, 7\), got \(5,\)"):
        CSNN(7, 3, d=2, hidden=4, layers=1)(torch.randn(N), e)


@pytest.mark.parametrize("c_max", [float("nan"), float("inf"), 0.0, -1.0])
def test_c_max_must_be_positive_and_finite(c_max):
    # inf would remove the clamp (log inf = inf) and bring back the float32 overflow of exp
    with pytest.raises(ValueError, match=r"^c_max must be a positive finite number, got "):
        ConformalMapLearner(4, 2, c_max=c_max)
    with pytest.raises(ValueError, match=r"^c_max must be a positive finite number, got "):
        CSNNConv(3, d=2, c_max=c_max)


def test_rates_and_sizes_checked_at_construction():
    with pytest.raises(ValueError, match=r"^d must be a positive integer, got 0$"):
        GNN("nsd", 3, 2, d=0)
    with pytest.raises(ValueError, match=r"^d must be a positive integer, got 0$"):
        NSDConv(3, d=0)
    with pytest.raises(ValueError, match=r"^d must be a positive integer, got 0$"):
        GNN("gcn", 3, 2, d=0)
    with pytest.raises(ValueError, match=r"^dropout must be a number in \[0, 1\), got 2$"):
        GNN("gcn", 3, 2, dropout=2)
    with pytest.raises(ValueError, match=r"^dropout must be a number in \[0, 1\), got -0.1$"):
        GNN("mlp", 3, 2, dropout=-0.1)
    with pytest.raises(ValueError, match=r"^dropout must be a number in \[0, 1\), got nan$"):
        NSDConv(3, d=2, dropout=float("nan"))
    with pytest.raises(ValueError, match=r"^input_dropout must be a number in \[0, 1\), got nan$"):
        CSNN(4, 2, input_dropout=float("nan"))
    with pytest.raises(ValueError, match=r"^dropout must be a number in \[0, 1\), got 1.5$"):
        CSNN(4, 2, dropout=1.5)
    with pytest.raises(ValueError, match=r"^dropout must be a number in \[0, 1\), got nan$"):
        CSNNConv(3, d=2, dropout=float("nan"))
    with pytest.raises(ValueError, match=r"^hidden must be a positive integer, got 0$"):
        GNN("gcn", 3, 2, hidden=0)
    with pytest.raises(ValueError, match=r"^in_channels must be a positive integer, got 0$"):
        GNN("mlp", 0, 2)


def test_sheaf_laplacian_rejects_out_of_range_edges():
    S, T, _, _ = _maps(3, 2)
    x = torch.randn(3, 2, 4)
    for kind in ("in", "out"):
        with pytest.raises(ValueError, match=r"^edge_index refers to nodes outside 0..2 \(min 0, max 3\)$"):
            sheaf_laplacian(x, torch.tensor([[0, 3], [1, 2]]), S, T, kind)
        with pytest.raises(ValueError, match=r"^edge_index refers to nodes outside 0..2 \(min -1, max 1\)$"):
            sheaf_laplacian(x, torch.tensor([[0, -1], [1, 1]]), S, T, kind)


def test_conv_applies_gelu_then_dropout():
    """The diffusion term is dropout(GELU(L z)) (GELU first), pinned against the formula with the
    same dropout mask: GELU(dropout(L z)) differs."""
    e, N = _graph()
    torch.manual_seed(0)
    conv = CSNNConv(4, d=2, dropout=0.5).train()
    with torch.no_grad():
        conv.eps.fill_(0.3)
    x = torch.randn(N, 8)
    S, T, _, _ = conv.maps(x)
    xs = x.view(N, 2, 4)
    z = conv.right(conv.left @ xs)
    Lz = sheaf_laplacian(sheaf_laplacian(z, e, S, T, "out"), e, S, T, "in")
    torch.manual_seed(5)
    want = ((1 + torch.tanh(conv.eps)) * xs - torch.nn.functional.dropout(torch.nn.functional.gelu(Lz), 0.5)).reshape(N, 8)
    torch.manual_seed(5)
    other = ((1 + torch.tanh(conv.eps)) * xs - torch.nn.functional.gelu(torch.nn.functional.dropout(Lz, 0.5))).reshape(N, 8)
    torch.manual_seed(5)
    got = conv(x, e)
    torch.testing.assert_close(got, want)
    assert not torch.allclose(got, other)


def test_early_stopping_counts_patience_epochs_without_improvement():
    from iclr26.architectures.csnn.experiment import EarlyStopping
    stop = EarlyStopping(3)
    # the best (0.5) at the first epoch, then exactly `patience` epochs without a strictly better one
    assert [stop.step(v) for v in (0.5, 0.4, 0.5, 0.3)] == [False, False, False, True]
    stop = EarlyStopping(2)
    assert [stop.step(v) for v in (0.1, 0.2, 0.2, 0.3, 0.3, 0.3)] == [False, False, False, False, False, True]
    with pytest.raises(ValueError, match="patience must be a positive integer, got 0"):
        EarlyStopping(0)


def test_selection_prefers_accuracy_then_the_lower_validation_loss():
    from iclr26.architectures.csnn.experiment import selection_key
    assert selection_key(0.5, 0.3) > selection_key(0.5, 0.4)        # tie on accuracy: lower loss wins
    assert selection_key(0.6, 9.0) > selection_key(0.5, 0.1)        # accuracy first
    assert max([(0.5, 0.7), (0.5, 0.2), (0.4, 0.0)], key=lambda a: selection_key(*a)) == (0.5, 0.2)


def test_ring_grid_is_widened_past_a_strictly_best_end():
    from iclr26.architectures.csnn.experiment import widened_grid
    assert widened_grid((0.005, 0.01, 0.02), {0.005: 0.9, 0.01: 0.5, 0.02: 0.4}) == 0.0025
    assert widened_grid((0.005, 0.01, 0.02), {0.005: 0.2, 0.01: 0.5, 0.02: 0.6}) == 0.04
    assert widened_grid((0.005, 0.01, 0.02), {0.005: 0.2, 0.01: 0.6, 0.02: 0.4}) is None   # interior optimum
    assert widened_grid((0.005, 0.01, 0.02), {0.005: 1.0, 0.01: 1.0, 0.02: 1.0}) is None   # a tie is not strictly best
    assert widened_grid((0.01,), {0.01: 0.3}) is None


def test_ring_learning_rate_is_chosen_per_arm_on_the_validation_graphs(monkeypatch):
    from iclr26.architectures.csnn import experiment as E
    quick = E.SCALES["quick"]
    assert len(quick["ring_grid"]) >= 3 and E.SEEDS["quick"] >= 6
    assert all(E.ring_layers(a, quick["ring_distance"]) == quick["ring_distance"] for a in quick["ring_arms"])
    cfg = dict(E.SCALES["smoke"], ring_grid=(0.001, 0.01, 0.05), ring_steps=15)
    seen = []
    real = E.widened_grid
    monkeypatch.setattr(E, "widened_grid", lambda g, acc: seen.append(dict(acc)) or real(g, acc))
    right, loss, lr, val = E._fit_ring("gcn", 3, cfg, 0)
    assert seen and set(seen[0]) == {0.001, 0.01, 0.05}
    assert lr in {float(k) for k in val} and val[str(lr)] == max(val.values())
    assert len(right) == cfg["ring_test"] and math.isfinite(loss)
    extra = real(cfg["ring_grid"], seen[0])
    assert len(val) == 3 + (extra is not None)


def test_ring_keeps_the_rate_with_the_best_validation_graphs(monkeypatch):
    """Only the middle rate trains (the others are turned into a zero step): it must be chosen,
    whatever its place in the grid."""
    from iclr26.architectures.csnn import experiment as E
    real_adam = torch.optim.Adam
    monkeypatch.setattr(torch.optim, "Adam", lambda params, lr: real_adam(params, lr=lr if lr == 0.05 else 0.0))
    cfg = dict(E.SCALES["smoke"], ring_grid=(0.001, 0.05, 0.2), ring_steps=80, ring_val=32, ring_hidden=8)
    right, loss, lr, val = E._fit_ring("gcn", 2, cfg, 0)
    assert set(val) == {"0.001", "0.05", "0.2"}                 # interior optimum: no widening
    assert val["0.05"] > max(val["0.001"], val["0.2"]) and lr == 0.05
