"""Tests of the ICL-vs-SFT tools (ICLR 2026, OpenReview cJAtzOcAnd): the angle task's labels against
hand-worked cases, decision-field metrics against hand-computed grids, the query scorer against a plain
forward pass of the concatenated prompt (cache reuse must not change a number), layer representations
against hidden states, linear CKA / RSA / collapse index against independent formulas and their
invariances, matched-accuracy fine-tuning, and rejections."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from iclr26.interpretability.icl_vs_sft import (LABELS, angle_labels, cosine_similarity_matrix, decision_field,
                                                field_metrics, finetune_to_accuracy, format_query, icl_context,
                                                inferred_angle, label_collapse_index, label_token_ids, linear_cka,
                                                make_angle_task, rsa_correlation, score_queries, smoothness)
from iclr26.models.testing import wide_llama


class CharTok:
    """A character tokenizer over a fixed alphabet (callable like a transformers tokenizer)."""

    def __init__(self, alphabet):
        self.alphabet = alphabet

    def __call__(self, text, add_special_tokens=False):
        return {"input_ids": [self.alphabet.index(c) for c in text]}


ALPHA = "Input: 0123456789\nLabelXY"


@pytest.fixture(scope="module")
def lm():
    torch.manual_seed(0)
    return wide_llama(vocab_size=len(ALPHA), hidden_size=24, num_layers=3, seed=0), CharTok(ALPHA)


# ---------------------------------------------------------------- task

def test_angle_labels_hand_cases():
    X = np.array([[0, 0], [99, 99], [0, 99], [99, 0], [60, 10], [10, 60]])
    # theta = 0: boundary horizontal, label 1 above the centre (n2 > 49.5)
    assert angle_labels(X, 0.0).tolist() == [0, 1, 1, 0, 0, 1]
    # theta = 90: boundary vertical, label 1 left of the centre (n1 < 49.5)
    assert angle_labels(X, 90.0).tolist() == [1, 0, 1, 0, 0, 1]
    # theta = 45: label 1 where n2 > n1; points on the line get 0
    assert angle_labels(X, 45.0).tolist() == [0, 0, 1, 0, 0, 1]
    # theta = 135: label 1 where n1 + n2 < 99 (points on the line get 0)
    assert angle_labels(X, 135.0).tolist() == [1, 0, 0, 0, 1, 1]
    assert angle_labels(np.array([[80, 80], [10, 10]]), 135.0).tolist() == [0, 1]
    # a smaller grid moves the centre: (3, 3) on a 5-grid is above the centre 2
    assert angle_labels(np.array([[0, 3], [0, 2]]), 0.0, grid_size=5).tolist() == [1, 0]
    assert angle_labels(np.array([[0, 3]]), 0.0, grid_size=8).tolist() == [0]


def test_angle_labels_match_rotation_reference():
    rng = np.random.default_rng(0)
    X = rng.integers(0, 100, (500, 2))
    for theta in (10.0, 30.0, 60.0, 170.0):
        t = np.deg2rad(theta)
        # rotate by -theta: the boundary becomes the horizontal axis, label = rotated n2 > 0
        R = np.array([[np.cos(t), np.sin(t)], [-np.sin(t), np.cos(t)]])
        ref = ((X - 49.5) @ R.T)[:, 1] > 0
        assert (angle_labels(X, theta) == ref).all()


def test_make_angle_task_balanced_and_reproducible():
    X, y = make_angle_task(30.0, 7, seed=3)
    assert X.shape == (14, 2) and (np.bincount(y) == 7).all()
    assert (angle_labels(X, 30.0) == y).all()
    assert len({tuple(x) for x in X}) == 14
    X2, y2 = make_angle_task(30.0, 7, seed=3)
    assert (X == X2).all() and (y == y2).all()
    X3, _ = make_angle_task(30.0, 7, seed=4)
    assert not (X == X3).all()
    assert not (y[:7] == 0).all() or not (y[7:] == 1).all()   # shuffled, not grouped by class
    ex = X[:5]
    Xe, _ = make_angle_task(30.0, 50, seed=1, exclude=ex)
    assert not {tuple(x) for x in Xe} & {tuple(x) for x in ex}
    Xs, ys = make_angle_task(90.0, 3, seed=0, grid_size=4)
    assert Xs.max() <= 3 and (angle_labels(Xs, 90.0, 4) == ys).all()


def test_prompt_format():
    assert format_query([7, 53]) == "Input: 07 53\nLabel:"
    assert format_query([7, 3], width=3) == "Input: 007 003\nLabel:"
    ctx = icl_context(np.array([[1, 2], [30, 40]]), np.array([1, 0]))
    assert ctx == "Input: 01 02\nLabel: Rud\nInput: 30 40\nLabel: Baz\n"
    assert LABELS == (" Baz", " Rud")


# ---------------------------------------------------------------- field metrics

def test_smoothness_hand_grid():
    P = np.zeros((4, 4), dtype=int)
    assert smoothness(P) == 1.0
    P[1, 1] = 1   # an island: differs from all 4 neighbours; each neighbour differs from 1 only
    assert smoothness(P) == pytest.approx(1 - 1 / 16)
    P = np.zeros((4, 4), dtype=int)
    P[0, 0] = 1   # a corner: 2 neighbours, both differ
    assert smoothness(P) == pytest.approx(1 - 1 / 16)
    P = np.zeros((3, 3), dtype=int)
    P[:, 2] = 1   # a straight boundary: every point differs from at most 1 neighbour
    assert smoothness(P) == 1.0
    C = np.indices((4, 4)).sum(0) % 2   # checkerboard: everything differs from all neighbours
    assert smoothness(C) == 0.0
    P = np.zeros((3, 4), dtype=int)
    P[0, 1] = 1   # on the top edge: 3 neighbours, all differ
    assert smoothness(P) == pytest.approx(1 - 1 / 12)
    P = np.zeros((3, 4), dtype=int)
    P[1, 0] = 1   # on the left edge
    assert smoothness(P) == pytest.approx(1 - 1 / 12)
    P = np.zeros((3, 4), dtype=int)
    P[2, 3] = 1   # bottom-right corner
    assert smoothness(P) == pytest.approx(1 - 1 / 12)


def test_field_metrics_hand_values():
    coords = np.arange(0, 100, 10)
    n1, n2 = np.meshgrid(coords, coords, indexing="ij")
    truth = angle_labels(np.stack([n1.ravel(), n2.ravel()], 1), 0.0).reshape(10, 10)
    prob = np.where(truth == 1, 0.8, 0.3)
    m = field_metrics(prob, coords, theta=0.0)
    assert m["accuracy"] == 1.0
    assert m["confidence"] == pytest.approx(0.75)        # mean of max(0.8, 0.2) and max(0.3, 0.7)
    assert m["smoothness"] == 1.0
    assert m["angle_error"] < 2.0
    flipped = field_metrics(1 - prob, coords, theta=0.0)
    assert flipped["accuracy"] == 0.0 and flipped["confidence"] == pytest.approx(0.75)
    m90 = field_metrics(prob, coords, theta=90.0)
    assert m90["accuracy"] == pytest.approx(0.5) and m90["angle_error"] > 85
    assert "accuracy" not in field_metrics(prob, coords)
    half = field_metrics(np.full((10, 10), 0.5), coords, theta=0.0)
    assert half["confidence"] == 0.5 and half["accuracy"] == 0.5   # p = 0.5 predicts class 0
    sg = field_metrics(np.array([[0.9, 0.9], [0.1, 0.2]]), np.array([0, 3]), theta=90.0, grid_size=4)
    assert sg["accuracy"] == 1.0


@pytest.mark.parametrize("theta", [0.0, 30.0, 45.0, 60.0, 90.0, 135.0])
def test_inferred_angle_recovers_boundary(theta):
    coords = np.arange(0, 100, 4)
    n1, n2 = np.meshgrid(coords, coords, indexing="ij")
    X = np.stack([n1.ravel(), n2.ravel()], 1)
    a = inferred_angle(X, angle_labels(X, theta))
    d = abs(a - theta) % 180
    assert min(d, 180 - d) < 3.0
    assert np.isnan(inferred_angle(X, np.zeros(len(X))))


# ---------------------------------------------------------------- similarity

def test_cosine_similarity_matrix_hand():
    X = np.array([[1.0, 0.0], [1.0, 1.0], [0.0, 0.0], [-2.0, 0.0]])
    S = cosine_similarity_matrix(X)
    assert S[0, 1] == pytest.approx(1 / np.sqrt(2)) and S[0, 3] == pytest.approx(-1.0)
    assert S[2].tolist() == [0.0, 0.0, 0.0, 0.0]
    Sc = cosine_similarity_matrix(X + 5.0, center=True)
    assert np.allclose(Sc, cosine_similarity_matrix(X, center=True))
    assert not np.allclose(cosine_similarity_matrix(X + 5.0), S)


def test_linear_cka_against_hsic_reference_and_invariances():
    rng = np.random.default_rng(0)
    X, Y = rng.normal(size=(30, 6)), rng.normal(size=(30, 4))
    Y[:, 0] += 2 * X[:, 0]
    # reference: Gram-matrix form HSIC(K, L) / sqrt(HSIC(K, K) HSIC(L, L)), K = X X^T, H = I - 11^T / n
    H = np.eye(30) - np.ones((30, 30)) / 30
    K, L = H @ X @ X.T @ H, H @ Y @ Y.T @ H
    ref = np.sum(K * L) / np.sqrt(np.sum(K * K) * np.sum(L * L))
    assert linear_cka(X, Y) == pytest.approx(ref, rel=1e-10)
    Q, _ = np.linalg.qr(rng.normal(size=(6, 6)))
    assert linear_cka(X @ Q * 3.0 + 7.0, Y) == pytest.approx(ref, rel=1e-9)   # orthogonal, scale, shift
    assert linear_cka(X, X) == pytest.approx(1.0)
    assert linear_cka(X, Y) == pytest.approx(linear_cka(Y, X))
    A = rng.normal(size=(6, 6))
    assert abs(linear_cka(X @ A, Y) - ref) > 1e-3   # not invariant to general linear maps
    # hand value: X = [1, 2, 3], Y = [1, 3, 2] (1-D): CKA = corr^2 = 0.25
    assert linear_cka(np.array([[1.0], [2.0], [3.0]]), np.array([[1.0], [3.0], [2.0]])) == pytest.approx(0.25)


def test_label_collapse_index_hand_and_limits():
    y = np.array([0, 0, 1, 1])
    X = np.array([[1.0, 0.0], [1.0, 0.0], [-1.0, 0.0], [-1.0, 0.0]])
    assert label_collapse_index(X, y) == pytest.approx(2.0)         # two opposite points
    assert label_collapse_index(X, y, center=False) == pytest.approx(2.0)
    X2 = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 0.0], [0.0, 1.0]])
    # centred rows (.5,-.5), (-.5,.5), (.5,-.5), (-.5,.5): within pairs -1, between pairs average 0
    assert label_collapse_index(X2, y) == pytest.approx(-1.0)
    # uncentred: within pairs cos 0, between pairs (1 + 0 + 0 + 1) / 4
    assert label_collapse_index(X2, y, center=False) == pytest.approx(-0.5)
    # hand: within pairs (0,1) and (2,3); between pairs the 4 cross pairs
    X3 = np.array([[1.0, 0.0], [1.0, 1.0], [0.0, 1.0], [-1.0, 1.0]])
    S = cosine_similarity_matrix(X3)
    want = (S[0, 1] + S[2, 3]) / 2 - (S[0, 2] + S[0, 3] + S[1, 2] + S[1, 3]) / 4
    assert label_collapse_index(X3, y, center=False) == pytest.approx(want)
    # a shared offset (a common prompt) hides collapse without centring, not with it
    assert label_collapse_index(X + 50, y, center=False) < 0.01
    assert label_collapse_index(X + 50, y) == pytest.approx(2.0)
    rng = np.random.default_rng(1)
    Z = rng.normal(size=(40, 8))
    yy = np.arange(40) % 2
    Zc = Z + 4.0 * np.outer(2 * yy - 1, np.ones(8))
    assert label_collapse_index(Zc, yy) > label_collapse_index(Z, yy) + 0.5


def test_rsa_correlation():
    rng = np.random.default_rng(2)
    X = rng.normal(size=(12, 5))
    Q, _ = np.linalg.qr(rng.normal(size=(5, 5)))
    assert rsa_correlation(X, X @ Q) == pytest.approx(1.0)
    assert rsa_correlation(X, 2 * X, method="pearson") == pytest.approx(1.0)
    from scipy import stats
    Y = rng.normal(size=(12, 3))
    iu = np.triu_indices(12, 1)
    ref = stats.spearmanr(cosine_similarity_matrix(X)[iu], cosine_similarity_matrix(Y)[iu])[0]
    assert rsa_correlation(X, Y) == pytest.approx(ref)
    assert rsa_correlation(X + 3, Y, center=True) == pytest.approx(rsa_correlation(X, Y, center=True))


# ---------------------------------------------------------------- scoring on a transformers model

def _plain_logits(model, tok, text):
    ids = torch.tensor([tok(text)["input_ids"]])
    with torch.no_grad():
        return model(ids, output_hidden_states=True)


def test_score_queries_matches_plain_forward_with_and_without_context(lm):
    model, tok = lm
    labels = ("X", "Y")
    a, b = label_token_ids(tok, labels)
    ctx = icl_context(np.array([[12, 80], [70, 5]]), np.array([1, 0]), labels)
    queries = [format_query(x) for x in ([3, 4], [55, 90], [99, 0])] + ["Input: 5 6\nLabel:"]  # two lengths
    for context in ("", ctx):
        s = score_queries(model, tok, queries, context=context, labels=labels, layers=(0, 1), batch_size=2)
        for i, q in enumerate(queries):
            out = _plain_logits(model, tok, context + q)
            lg = out.logits[0, -1, [a, b]].numpy()
            assert np.allclose(s.logits[i], lg, atol=1e-4)
            assert s.prob[i] == pytest.approx(float(torch.softmax(torch.tensor(lg), 0)[1]), abs=1e-5)
            # decoder block l's output = hidden_states[l + 1] (hidden_states[0] is the embedding; the
            # last entry is after the final norm, so only inner blocks are compared)
            assert np.allclose(s.reps[0][i], out.hidden_states[1][0, -1].numpy(), atol=1e-4)
            assert np.allclose(s.reps[1][i], out.hidden_states[2][0, -1].numpy(), atol=1e-4)
    s0 = score_queries(model, tok, queries, labels=labels)
    assert s0.reps == {}
    assert not np.allclose(s0.prob, score_queries(model, tok, queries, context=ctx, labels=labels).prob)


def test_decision_field_layout(lm):
    model, tok = lm
    f = decision_field(model, tok, stride=40, offset=10, labels=("X", "Y"), layers=(1,))
    assert f.coords.tolist() == [10, 50, 90] and f.prob.shape == (3, 3)
    assert f.inputs[1].tolist() == [10, 50] and f.inputs[3].tolist() == [50, 10]
    s = score_queries(model, tok, [format_query(x) for x in f.inputs], labels=("X", "Y"), layers=(1,))
    assert np.allclose(f.prob.ravel(), s.prob) and np.allclose(f.reps[1], s.reps[1])
    assert f.prob[0, 1] == pytest.approx(s.prob[1]) and f.prob[1, 0] == pytest.approx(s.prob[3])
    g = decision_field(model, tok, stride=3, grid_size=6, labels=("X", "Y"))
    assert g.coords.tolist() == [0, 3]


def test_finetune_to_accuracy_stops_at_target(lm):
    from iclr26.models.lora import with_lora
    from iclr26.models.testing import wide_llama as wl

    tok = lm[1]
    labels = ("X", "Y")
    X, y = make_angle_task(90.0, 6, seed=0)
    Xv, yv = make_angle_task(90.0, 4, seed=1, exclude=X)
    base = wl(vocab_size=len(ALPHA), hidden_size=24, num_layers=2, seed=1)
    model = with_lora(base, r=4, seed=0)
    before = [p.detach().clone() for p in model.parameters() if p.requires_grad]
    out = finetune_to_accuracy(model, tok, X, y, Xv, yv, 1.0, max_steps=3, lr=5e-2, labels=labels)
    assert out["steps"] == len(out["history"]) - 1 <= 3
    assert out["reached"] == (out["val_accuracy"] >= 1.0)
    assert out["steps"] == 3 or out["reached"]
    after = [p.detach() for p in model.parameters() if p.requires_grad]
    assert any(not torch.equal(b, a) for b, a in zip(before, after))
    assert out["history"][1][2] > out["history"][-1][2] or out["steps"] == 1
    # the loss falls over a longer run
    model2 = with_lora(wl(vocab_size=len(ALPHA), hidden_size=24, num_layers=2, seed=1), r=4, seed=0)
    long = finetune_to_accuracy(model2, tok, X, y, Xv, yv, 1.0, max_steps=8, lr=5e-2,
                                labels=labels)
    losses = [h[2] for h in long["history"][1:]]
    assert losses[-1] < losses[0]
    # a target already met stops at step 0 and leaves the weights alone
    model3 = with_lora(wl(vocab_size=len(ALPHA), hidden_size=24, num_layers=2, seed=1), r=4, seed=0)
    p0 = [p.detach().clone() for p in model3.parameters()]
    z = finetune_to_accuracy(model3, tok, X, y, Xv, yv, 0.0, max_steps=5, labels=labels)
    assert z["steps"] == 0 and z["reached"] and len(z["history"]) == 1
    assert all(torch.equal(a, b) for a, b in zip(p0, model3.parameters()))
    # a target equal to the untrained accuracy is met, not exceeded-then-met: "reaches" is >=, so the
    # run stops at step 0 (the matched-accuracy rule; a strict comparison would train past the match)
    a0 = z["history"][0][1]
    assert 0.0 < a0 < 1.0
    model4 = with_lora(wl(vocab_size=len(ALPHA), hidden_size=24, num_layers=2, seed=1), r=4, seed=0)
    eq = finetune_to_accuracy(model4, tok, X, y, Xv, yv, a0, max_steps=5, lr=5e-2, labels=labels)
    assert eq["steps"] == 0 and eq["reached"] and eq["val_accuracy"] == a0
    # val accuracy reported is the accuracy of the returned model
    acc = np.mean((score_queries(model, tok, [format_query(x) for x in Xv], labels=labels).prob > 0.5) == yv)
    assert out["val_accuracy"] == pytest.approx(acc)


# ---------------------------------------------------------------- rejections

@pytest.mark.parametrize("bad", [-1.0, 181.0, float("nan"), "north"])
def test_rejects_bad_theta(bad):
    with pytest.raises(ValueError, match="theta must be an angle in degrees in \\[0, 180\\]"):
        angle_labels(np.zeros((1, 2)), bad)


def test_rejections(lm):
    model, tok = lm
    with pytest.raises(ValueError, match="shape \\(n, 2\\)"):
        angle_labels(np.zeros((3, 3)), 0.0)
    with pytest.raises(ValueError, match="grid_size must be an integer >= 2"):
        angle_labels(np.zeros((1, 2)), 0.0, grid_size=1)
    with pytest.raises(ValueError, match="k \\(exemplars per class\\) must be a positive integer"):
        make_angle_task(0.0, 0)
    with pytest.raises(ValueError, match="only .* inputs of class"):
        make_angle_task(0.0, 20, grid_size=4)
    with pytest.raises(ValueError, match="same length"):
        icl_context(np.zeros((2, 2)), np.zeros(3))
    with pytest.raises(ValueError, match="class indices 0 or 1"):
        icl_context(np.zeros((1, 2)), np.array([2]))
    with pytest.raises(ValueError, match="labels must be two strings"):
        icl_context(np.zeros((1, 2)), np.array([0]), labels=("a",))
    with pytest.raises(ValueError, match="share their first token"):
        label_token_ids(tok, ("Xa", "Xb"))
    with pytest.raises(ValueError, match="labels must be two strings"):
        label_token_ids(tok, ("X",))
    with pytest.raises(ValueError, match="non-empty list"):
        score_queries(model, tok, [], labels=("X", "Y"))
    with pytest.raises(ValueError, match="layer 5 out of range: the model has 3 decoder blocks"):
        score_queries(model, tok, ["Input: 1"], labels=("X", "Y"), layers=(5,))
    with pytest.raises(ValueError, match="batch_size must be a positive integer"):
        score_queries(model, tok, ["Input: 1"], labels=("X", "Y"), batch_size=0)
    with pytest.raises(ValueError, match="stride must be a positive integer"):
        decision_field(model, tok, stride=0, labels=("X", "Y"))
    with pytest.raises(ValueError, match="offset must be an integer in \\[0, 99\\]"):
        decision_field(model, tok, offset=100, labels=("X", "Y"))
    with pytest.raises(ValueError, match="fewer than 2 grid values"):
        decision_field(model, tok, stride=60, offset=50, labels=("X", "Y"))
    with pytest.raises(ValueError, match="2-D grid of at least 2 x 2"):
        smoothness(np.zeros(4))
    with pytest.raises(ValueError, match="square grid matching coords"):
        field_metrics(np.zeros((2, 3)), np.arange(2))
    with pytest.raises(ValueError, match="probabilities in \\[0, 1\\]"):
        field_metrics(np.full((2, 2), 1.5), np.arange(2))
    with pytest.raises(ValueError, match="inputs must be \\(n, 2\\)"):
        inferred_angle(np.zeros((3, 2)), np.zeros(4))
    with pytest.raises(ValueError, match="must be a 2-D array"):
        linear_cka(np.zeros(5), np.zeros((5, 1)))
    with pytest.raises(ValueError, match="same inputs"):
        linear_cka(np.ones((5, 2)), np.ones((4, 2)))
    with pytest.raises(ValueError, match="constant over the inputs"):
        linear_cka(np.ones((5, 2)), np.random.default_rng(0).normal(size=(5, 2)))
    with pytest.raises(ValueError, match="finite"):
        cosine_similarity_matrix(np.array([[np.nan, 1.0], [1.0, 1.0]]))
    with pytest.raises(ValueError, match="one label per row"):
        label_collapse_index(np.ones((4, 2)), np.zeros(3))
    with pytest.raises(ValueError, match="at least two labels"):
        label_collapse_index(np.random.default_rng(0).normal(size=(4, 2)), np.zeros(4))
    with pytest.raises(ValueError, match="every label occurs once"):
        label_collapse_index(np.random.default_rng(0).normal(size=(2, 2)), np.array([0, 1]))
    with pytest.raises(ValueError, match="'spearman' or 'pearson'"):
        rsa_correlation(np.ones((3, 2)), np.ones((3, 2)), method="kendall")
    with pytest.raises(ValueError, match="same inputs"):
        rsa_correlation(np.ones((3, 2)), np.ones((4, 2)))
    X, y = make_angle_task(90.0, 2, seed=0)
    with pytest.raises(ValueError, match="target_accuracy must be in \\[0, 1\\]"):
        finetune_to_accuracy(model, tok, X, y, X, y, 1.5, labels=("X", "Y"))
    with pytest.raises(ValueError, match="max_steps must be a non-negative integer"):
        finetune_to_accuracy(model, tok, X, y, X, y, 0.5, max_steps=-1, labels=("X", "Y"))
    with pytest.raises(ValueError, match="lr must be > 0"):
        finetune_to_accuracy(model, tok, X, y, X, y, 0.5, lr=0.0, labels=("X", "Y"))
    with pytest.raises(ValueError, match="non-empty and of matching lengths"):
        finetune_to_accuracy(model, tok, X, y[:1], X, y, 0.5, labels=("X", "Y"))
    frozen = wide_llama(vocab_size=len(ALPHA), num_layers=1)
    for p in frozen.parameters():
        p.requires_grad_(False)
    with pytest.raises(ValueError, match="no trainable parameters"):
        finetune_to_accuracy(frozen, tok, X, y, X, y, 1.0, labels=("X", "Y"))


@pytest.mark.slow
def test_quick_claim_check_runs():
    from iclr26.interpretability.icl_vs_sft.experiment import run

    out = run("quick", 0)
    assert set(out["metrics"]["confidence"]) == {"icl", "sft", "base"}


# ---------------------------------------------------------------- exact messages, defaults, schedule

def test_similarity_exact_messages_and_centring():
    rng = np.random.default_rng(3)
    X = rng.normal(size=(6, 3))
    with pytest.raises(ValueError, match=r"^X must be a 2-D array \(n_inputs >= 2, n_features >= 1\), got shape \(5, 0\)$"):
        linear_cka(np.zeros((5, 0)), np.zeros((5, 1)))
    with pytest.raises(ValueError, match=r"^Y must be a 2-D array"):
        linear_cka(X, np.zeros(6))
    with pytest.raises(ValueError, match=r"^Y must be a 2-D array"):
        rsa_correlation(X, np.zeros(6))
    with pytest.raises(ValueError, match=r"^X and Y must describe the same inputs \(rows\), got 6 and 4$"):
        linear_cka(X, X[:4])
    with pytest.raises(ValueError, match=r"^X and Y must describe the same inputs \(rows\), got 6 and 4$"):
        rsa_correlation(X, X[:4])
    with pytest.raises(ValueError, match=r"^a representation is constant over the inputs: CKA is undefined$"):
        linear_cka(np.ones((6, 2)), X)
    with pytest.raises(ValueError, match=r"^y must hold one label per row of X \(6\), got shape \(3,\)$"):
        label_collapse_index(X, np.zeros(3))
    with pytest.raises(ValueError, match=r"^y must hold at least two labels$"):
        label_collapse_index(X, np.zeros(6))
    with pytest.raises(ValueError, match=r"^every label occurs once: no within-label pairs$"):
        label_collapse_index(X[:2], np.array([0, 1]))
    with pytest.raises(ValueError, match=r"^method must be 'spearman' or 'pearson', got 'kendall'$"):
        rsa_correlation(X, X, method="kendall")
    # centring removes each column's own mean, not one global mean
    off = np.array([5.0, -3.0, 0.5])
    assert np.allclose(cosine_similarity_matrix(X + off, center=True), cosine_similarity_matrix(X, center=True))
    Xc = X - X.mean(0)
    U = Xc / np.linalg.norm(Xc, axis=1, keepdims=True)
    assert np.allclose(cosine_similarity_matrix(X, center=True), U @ U.T)
    # RSA centres both sides and computes the requested correlation
    from scipy import stats
    Y = rng.normal(size=(6, 2))
    iu = np.triu_indices(6, 1)
    for method, fn in (("spearman", stats.spearmanr), ("pearson", stats.pearsonr)):
        ref = fn(cosine_similarity_matrix(X, True)[iu], cosine_similarity_matrix(Y, True)[iu])[0]
        assert rsa_correlation(X + off, Y + np.array([4.0, -2.0]), center=True, method=method) == pytest.approx(ref)
    ref_p = stats.pearsonr(cosine_similarity_matrix(X)[iu], cosine_similarity_matrix(Y)[iu])[0]
    assert rsa_correlation(X, Y, method="pearson") == pytest.approx(ref_p)
    assert rsa_correlation(X, Y, method="pearson") != pytest.approx(rsa_correlation(X, Y))


def test_context_width_and_field_arguments(lm):
    model, tok = lm
    assert icl_context(np.array([[1, 2]]), np.array([0]), ("X", "Y"), width=3) == "Input: 001 002\nLabel:X\n"
    with pytest.raises(ValueError, match=r"^y must hold class indices 0 or 1$"):
        icl_context(np.zeros((1, 2)), np.array([2]))
    g = decision_field(model, tok, grid_size=4, labels=("X", "Y"))
    assert g.coords.tolist() == [0, 1, 2, 3]                       # default stride 1, offset 0
    ctx = icl_context(np.array([[1, 2], [3, 0]]), np.array([1, 0]), ("X", "Y"))
    f = decision_field(model, tok, context=ctx, grid_size=4, stride=2, offset=1, labels=("X", "Y"), layers=(0,))
    s = score_queries(model, tok, [format_query(x) for x in f.inputs], context=ctx, labels=("X", "Y"), layers=(0,))
    assert np.allclose(f.prob.ravel(), s.prob) and np.allclose(f.reps[0], s.reps[0])
    assert not np.allclose(f.prob, decision_field(model, tok, grid_size=4, stride=2, offset=1, labels=("X", "Y")).prob)
    sw = decision_field(model, tok, grid_size=4, labels=("Y", "X"))
    assert np.allclose(sw.prob, 1 - g.prob)
    for bad in (dict(stride=True), dict(stride=1.0)):
        with pytest.raises(ValueError, match="stride must be a positive integer"):
            decision_field(model, tok, labels=("X", "Y"), **bad)
    for bad in (dict(offset=True), dict(offset=-1), dict(offset=1.0)):
        with pytest.raises(ValueError, match="offset must be an integer"):
            decision_field(model, tok, labels=("X", "Y"), **bad)


def _fresh_lora(seed=1):
    from iclr26.models.lora import with_lora

    return with_lora(wide_llama(vocab_size=len(ALPHA), hidden_size=24, num_layers=2, seed=seed), r=4, seed=0)


def test_finetune_loss_targets_and_cosine_adamw_reference(lm):
    """Step 1's loss is the cross-entropy of the label's first token after the query under the
    untrained model; two steps equal torch AdamW with the cosine factor 0.5 (1 + cos(pi s / S))."""
    tok = lm[1]
    labels = ("X", "Y")
    a, b = label_token_ids(tok, labels)
    X, y = make_angle_task(90.0, 3, seed=2)
    Xv = np.array([[10, 10], [10, 10]])
    yv = np.array([0, 1])                                   # contradictory: accuracy 0.5 at most
    ref = _fresh_lora()
    ids = torch.tensor([tok(format_query(x))["input_ids"] for x in X])
    tgt = torch.tensor([a if c == 0 else b for c in y])
    with torch.no_grad():
        ce0 = float(torch.nn.functional.cross_entropy(ref(input_ids=ids).logits[:, -1, :], tgt))
    model = _fresh_lora()
    out = finetune_to_accuracy(model, tok, X, y, Xv, yv, 1.0, max_steps=5, lr=2e-2, weight_decay=0.1, labels=labels)
    assert out["history"][0][0] == 0 and out["history"][1][0] == 1
    assert out["history"][1][2] == pytest.approx(ce0, rel=1e-5)
    assert out["steps"] == 5 and not out["reached"]          # unreachable target: exactly max_steps
    m2 = _fresh_lora()
    finetune_to_accuracy(m2, tok, X, y, Xv, yv, 1.0, max_steps=2, lr=2e-2, weight_decay=0.1, labels=labels)
    # m2 ran 2 steps of a 2-step schedule: factors 1 and 0.5 (1 + cos(pi / 2)) = 0.5; rebuild for S = 2
    ref2 = _fresh_lora()
    params2 = [p for p in ref2.parameters() if p.requires_grad]
    opt2 = torch.optim.AdamW(params2, lr=2e-2, weight_decay=0.1)
    for s in range(2):
        for g in opt2.param_groups:
            g["lr"] = 2e-2 * 0.5 * (1 + np.cos(np.pi * s / 2))
        loss = torch.nn.functional.cross_entropy(ref2(input_ids=ids).logits[:, -1, :], tgt)
        opt2.zero_grad()
        loss.backward()
        opt2.step()
    for p, q in zip([p for p in m2.parameters() if p.requires_grad], params2):
        assert torch.allclose(p, q, atol=1e-6)
    assert not m2.training
    # an unbalanced validation set: the reported accuracy is the returned model's, not its complement
    Xu, _ = make_angle_task(90.0, 3, seed=5)
    Xu = Xu[:5]
    yu = angle_labels(Xu, 90.0)
    m3 = _fresh_lora()
    z = finetune_to_accuracy(m3, tok, X, y, Xu, yu, 0.0, labels=labels)
    acc = np.mean((score_queries(m3, tok, [format_query(x) for x in Xu], labels=labels).prob > 0.5) == yu)
    assert z["val_accuracy"] == pytest.approx(acc) and z["history"][0][1] == pytest.approx(acc)


def test_finetune_exact_rejections(lm):
    model, tok = lm
    X, y = make_angle_task(90.0, 2, seed=0)
    for bad in (True, 1.5):
        with pytest.raises(ValueError, match=r"^max_steps must be a non-negative integer, got "):
            finetune_to_accuracy(model, tok, X, y, X, y, 0.5, max_steps=bad, labels=("X", "Y"))
    msg = r"^X/y and X_val/y_val must be non-empty and of matching lengths$"
    for args in ((X[:0], y[:0], X, y), (X, y, X[:0], y[:0]), (X, y, X, y[:1]), (X[:1], y, X, y)):
        with pytest.raises(ValueError, match=msg):
            finetune_to_accuracy(model, tok, *args, 0.5, labels=("X", "Y"))
    frozen = wide_llama(vocab_size=len(ALPHA), num_layers=1)
    for p in frozen.parameters():
        p.requires_grad_(False)
    with pytest.raises(ValueError, match=r"^model has no trainable parameters$"):
        finetune_to_accuracy(frozen, tok, X, y, X, y, 1.0, labels=("X", "Y"))
