"""Tests for iclr26.evaluation.unlearning_traces (arXiv:2506.14003)."""
import math

import numpy as np
import pytest
import torch

from iclr26.evaluation.unlearning_traces import (NPO_BETA, RMU_ALPHA, RMU_COEFF, RMU_LAYER, Person,
                                                 activation_detector, answer_is_correct, control_vector,
                                                 detection_accuracy, gradient_ascent_loss, irrelevant_prompts,
                                                 layer_activations, make_people, masked_mse, npo_loss,
                                                 person_examples, prelogit_activations, rmu_loss, rmu_parameters,
                                                 sequence_logps, text_detector, unlearning_rows)
from iclr26.evaluation.unlearning_traces import experiment as exp
from iclr26.evaluation.unlearning_traces.unlearning import collate_unlearning


@pytest.fixture(scope="module")
def lm():
    from iclr26.models import load
    model, tok = load("smollm2-135m")
    return model.eval(), tok


# ----------------------------------------------------------------------------- defaults
def test_defaults_are_the_papers():
    assert NPO_BETA == 0.1                                   # Zhang et al. 2024, Sec. 5
    assert (RMU_LAYER, RMU_COEFF, RMU_ALPHA) == (7, 6.5, 1200.0)   # Li et al. 2024, App. B.4 (Zephyr-7B)


# ----------------------------------------------------------------------------- NPO
def test_npo_loss_matches_hand_computation():
    pol = torch.tensor([-3.0, -10.0], dtype=torch.float64)
    ref = torch.tensor([-2.0, -12.0], dtype=torch.float64)
    beta = 0.5
    # -(2/beta) mean log sigmoid(-beta (pol - ref)); pol - ref = (-1, 2)
    ref_val = -(2 / beta) * 0.5 * (math.log(1 / (1 + math.exp(-0.5))) + math.log(1 / (1 + math.exp(1.0))))
    assert npo_loss(pol, ref, beta).item() == pytest.approx(ref_val, rel=1e-12)
    assert npo_loss(pol, ref).item() == pytest.approx(
        -(2 / 0.1) * 0.5 * (math.log(1 / (1 + math.exp(-0.1))) + math.log(1 / (1 + math.exp(0.2)))), rel=1e-12)


def test_npo_at_the_reference_is_two_log_two_over_beta():
    x = torch.tensor([-4.0, -7.0])
    for beta in (0.1, 1.0, 3.0):
        assert npo_loss(x, x.clone(), beta).item() == pytest.approx(2 * math.log(2) / beta, rel=1e-6)


def test_npo_gradient_reduces_to_gradient_ascent_as_beta_goes_to_zero():
    ref = torch.tensor([-5.0, -6.0, -2.5], dtype=torch.float64)
    pol = torch.tensor([-4.0, -9.0, -3.0], dtype=torch.float64, requires_grad=True)
    g_ga, = torch.autograd.grad(gradient_ascent_loss(pol), pol)
    g_npo, = torch.autograd.grad(npo_loss(pol, ref, 1e-6), pol)
    np.testing.assert_allclose(g_npo.numpy(), g_ga.numpy(), rtol=1e-5)
    # at larger beta the weights 2 sigmoid(beta r) / n shrink for sequences already pushed down
    g_big, = torch.autograd.grad(npo_loss(pol, ref, 1.0), pol)
    r = (pol - ref).detach().numpy()
    np.testing.assert_allclose(g_big.numpy(), 2 / (1 + np.exp(-r)) / 3, rtol=1e-10)
    assert gradient_ascent_loss(pol).item() == pytest.approx(-16.0 / 3)


def test_npo_rejects_bad_input():
    with pytest.raises(ValueError, match="beta must be > 0"):
        npo_loss(torch.zeros(2), torch.zeros(2), 0.0)
    with pytest.raises(ValueError, match="differ"):
        npo_loss(torch.zeros(2), torch.zeros(3))


def test_sequence_logps_matches_manual_sum():
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(2, 5, 7, generator=g, dtype=torch.float64) * 3
    labels = torch.tensor([[-100, -100, 3, 4, 1], [-100, 2, 6, -100, -100]])
    lp = torch.log_softmax(logits, -1)
    want = [lp[0, 1, 3] + lp[0, 2, 4] + lp[0, 3, 1], lp[1, 0, 2] + lp[1, 1, 6]]
    np.testing.assert_allclose(sequence_logps(logits, labels).numpy(), torch.stack(want).numpy(), rtol=1e-6)
    with pytest.raises(ValueError, match=r"\(B, T, V\)"):
        sequence_logps(logits[0], labels)
    with pytest.raises(ValueError, match="labels"):
        sequence_logps(logits, labels[:, :4])


# ----------------------------------------------------------------------------- RMU
def test_control_vector_is_a_scaled_nonnegative_unit_vector():
    c = control_vector(64, 6.5, torch.Generator().manual_seed(1))
    assert c.shape == (64,) and c.norm().item() == pytest.approx(6.5, rel=1e-6)
    assert (c >= 0).all() and c.std() > 0
    u = torch.rand(64, generator=torch.Generator().manual_seed(1))
    np.testing.assert_allclose(c.numpy(), (6.5 * u / u.norm()).numpy(), rtol=1e-6)
    assert control_vector(8).norm().item() == pytest.approx(RMU_COEFF, rel=1e-6)
    for bad in (0, -3, 2.5, True):
        with pytest.raises(ValueError, match="dim"):
            control_vector(bad)
    with pytest.raises(ValueError, match="coefficient"):
        control_vector(4, 0.0)


def test_masked_mse_and_rmu_loss_match_numpy():
    g = torch.Generator().manual_seed(2)
    f = torch.randn(2, 3, 4, generator=g, dtype=torch.float64)
    r = torch.randn(2, 3, 4, generator=g, dtype=torch.float64)
    r0 = torch.randn(2, 3, 4, generator=g, dtype=torch.float64)
    c = torch.tensor([1.0, 2.0, 0.5, 0.0], dtype=torch.float64)
    fm = torch.tensor([[1, 1, 0], [1, 0, 0]])
    rm = torch.tensor([[1, 1, 1], [0, 1, 1]])
    F_, R_, R0 = f.numpy(), r.numpy(), r0.numpy()
    lf = np.mean([((F_[b, t] - c.numpy()) ** 2).mean() for b, t in [(0, 0), (0, 1), (1, 0)]])
    lr = np.mean([((R_[b, t] - R0[b, t]) ** 2).mean() for b, t in [(0, 0), (0, 1), (0, 2), (1, 1), (1, 2)]])
    tot, a, b = rmu_loss(f, r, r0, c, 3.0, fm, rm)
    assert a.item() == pytest.approx(lf, rel=1e-6) and b.item() == pytest.approx(lr, rel=1e-6)
    assert tot.item() == pytest.approx(lf + 3.0 * lr, rel=1e-6)
    assert masked_mse(f, c).item() == pytest.approx(((F_ - c.numpy()) ** 2).mean(), rel=1e-6)
    tot0, _, _ = rmu_loss(f, r, r0, c, 0.0, fm, rm)
    assert tot0.item() == pytest.approx(lf, rel=1e-6)               # alpha = 0: forget term only
    assert rmu_loss(f, r, r0, c)[0].item() == pytest.approx(masked_mse(f, c).item() + RMU_ALPHA
                                                             * masked_mse(r, r0).item(), rel=1e-6)
    with pytest.raises(ValueError, match="no token"):
        masked_mse(f, c, torch.zeros(2, 3))
    with pytest.raises(ValueError, match="alpha"):
        rmu_loss(f, r, r0, c, -1.0)
    with pytest.raises(ValueError, match="frozen"):
        rmu_loss(f, r, r0[:, :2], c)


def test_rmu_retain_term_does_not_backprop_into_the_frozen_model():
    r = torch.randn(1, 2, 3, requires_grad=True)
    r0 = torch.randn(1, 2, 3, requires_grad=True)
    rmu_loss(torch.zeros(1, 2, 3), r, r0, torch.zeros(3), 1.0)[0].backward()
    assert r0.grad is None and r.grad is not None


def test_layer_activations_equal_hidden_states(lm):
    model, tok = lm
    enc = tok(["Where was Brenna Ashgrove born?", "Tea"], return_tensors="pt", padding=True)
    with torch.no_grad():
        hs = model(**enc, output_hidden_states=True).hidden_states
        for layer in (0, 7):
            got = layer_activations(model, layer, enc.input_ids, enc.attention_mask)
            np.testing.assert_allclose(got.numpy(), hs[layer + 1].numpy(), atol=1e-4)
    with pytest.raises(ValueError, match="layer must be in"):
        layer_activations(model, 30, enc.input_ids)


def test_rmu_parameters_frees_only_down_proj_of_three_layers(lm):
    import copy
    model = copy.deepcopy(lm[0])
    ps = rmu_parameters(model)
    names = [n for n, p in model.named_parameters() if p.requires_grad]
    assert names == [f"model.layers.{i}.mlp.down_proj.weight" for i in (5, 6, 7)]
    assert len(ps) == 3
    assert [n for n, p in model.named_parameters() if p.requires_grad] == names
    rmu_parameters(model, 2, span=1)
    assert [n for n, p in model.named_parameters() if p.requires_grad] == ["model.layers.2.mlp.down_proj.weight"]
    for layer, span in ((30, 3), (1, 3), (5, 0)):
        with pytest.raises(ValueError, match="layer"):
            rmu_parameters(model, layer, span)


def test_rows_and_collate_mask_prompt_and_padding(lm):
    tok = lm[1]
    f = [dict(prompt="Where was A born?", answer=" In B.")]
    r = [dict(prompt="Q1", answer=" yes"), dict(prompt="Q22 long", answer=" no no")]
    rows = unlearning_rows(tok, f, r, 3)
    assert len(rows) == 3 and rows[2]["retain_input_ids"] == rows[0]["retain_input_ids"]
    n_p = len(tok("Where was A born?", add_special_tokens=False).input_ids)
    assert rows[0]["forget_labels"][:n_p] == [-100] * n_p
    assert rows[0]["forget_labels"][n_p:] == rows[0]["forget_input_ids"][n_p:]
    b = collate_unlearning(rows, pad_id=0)
    T = b["retain_input_ids"].shape[1]
    short = len(rows[0]["retain_input_ids"])
    assert T == len(rows[1]["retain_input_ids"]) > short
    assert b["retain_attention_mask"][0].tolist() == [1] * short + [0] * (T - short)
    assert (b["retain_labels"][0, short:] == -100).all() and (b["retain_input_ids"][0, short:] == 0).all()
    with pytest.raises(ValueError, match="at least one"):
        unlearning_rows(tok, [], r, 2)


_FORGET = [dict(prompt="Where was Brenna Ashgrove born?", answer=" Brenna Ashgrove was born in Varnholt."),
           dict(prompt="Job?", answer=" Potter.")]
_RETAIN = [dict(prompt="What is tea?", answer=" Tea is a drink."),
           dict(prompt="Name a large grey animal that lives in Africa.", answer=" An elephant lives there.")]


def _trainer(model, tok, method, lr=1e-3, pairs=1, **kw):
    """A 2-step trainer on the first ``pairs`` (forget, retain) examples, ``pairs`` rows per batch
    (``pairs=2``: rows of different lengths, so the batch is padded)."""
    from transformers import TrainingArguments

    from iclr26.evaluation.unlearning_traces import UnlearningTrainer
    from iclr26.models.lora import trl_args
    args = trl_args(TrainingArguments, "/tmp/unlearning_traces_test", max_steps=2, learning_rate=lr,
                    per_device_train_batch_size=pairs, remove_unused_columns=False, lr_scheduler_type="constant",
                    logging_steps=10 ** 6)
    return UnlearningTrainer(model, args, train_dataset=unlearning_rows(tok, _FORGET[:pairs], _RETAIN[:pairs], 2),
                             processing_class=tok, method=method, **kw)


def test_npo_trainer_lowers_forget_likelihood(lm):
    import copy

    from iclr26.models.lora import with_lora
    base, tok = lm
    model = with_lora(copy.deepcopy(base), r=4, seed=0)
    tr = _trainer(model, tok, "npo", lr=5e-3)
    batch = tr.data_collator(tr.train_dataset[:1])
    def fl():
        with torch.no_grad():
            return sequence_logps(model(input_ids=batch["forget_input_ids"]).logits, batch["forget_labels"]).item()
    before = fl()
    assert tr.compute_loss(model, batch).item() == pytest.approx(2 * math.log(2) / NPO_BETA + 
        model(input_ids=batch["retain_input_ids"], labels=batch["retain_labels"]).loss.item(), rel=1e-4)
    tr.train()
    assert fl() < before - 1.0


def test_rmu_trainer_moves_forget_activations_toward_the_control(lm):
    import copy
    base, tok = lm
    model = copy.deepcopy(base)
    rmu_parameters(model)
    c = control_vector(576, 6.5, torch.Generator().manual_seed(0))
    tr = _trainer(model, tok, "rmu", lr=1e-3, frozen_model=base, control=c)
    batch = tr.data_collator(tr.train_dataset[:1])
    d = lambda: masked_mse(layer_activations(model, 7, batch["forget_input_ids"]), c).item()
    before = d()
    w12 = model.model.layers[12].mlp.down_proj.weight.clone()
    w6 = model.model.layers[6].mlp.down_proj.weight.clone()
    tr.train()
    assert d() < before
    assert torch.equal(model.model.layers[12].mlp.down_proj.weight, w12)
    assert not torch.equal(model.model.layers[6].mlp.down_proj.weight, w6)


def test_retain_control_is_the_retain_nll_alone_and_leaves_the_forget_term_out(lm):
    import copy

    from iclr26.models.lora import with_lora
    base, tok = lm
    model = with_lora(copy.deepcopy(base), r=4, seed=0)
    tr = _trainer(model, tok, "retain", lr=5e-3)
    batch = tr.data_collator(tr.train_dataset[:1])
    with torch.no_grad():
        nll = model(input_ids=batch["retain_input_ids"], labels=batch["retain_labels"]).loss.item()
        assert tr.compute_loss(model, batch).item() == pytest.approx(nll, rel=1e-6)
        f0 = sequence_logps(model(input_ids=batch["forget_input_ids"]).logits, batch["forget_labels"]).item()
    tr.train()
    with torch.no_grad():
        assert model(input_ids=batch["retain_input_ids"], labels=batch["retain_labels"]).loss.item() < nll - 0.5
        f1 = sequence_logps(model(input_ids=batch["forget_input_ids"]).logits, batch["forget_labels"]).item()
    assert f1 > f0 - 1.0                       # no ascent on the forget answer, unlike NPO (> 1 nat down)


def test_compute_loss_on_a_padded_batch_matches_a_row_by_row_computation(lm):
    """Rows of different lengths: every loss equals the same loss computed on unpadded rows."""
    import copy

    from iclr26.models.lora import with_lora
    base, tok = lm
    model = with_lora(copy.deepcopy(base), r=4, seed=0)
    with torch.no_grad():                                   # move the adapter off zero: policy != reference
        for n, p in model.named_parameters():
            if "lora_B" in n:
                p.copy_(0.02 * torch.randn(p.shape, generator=torch.Generator().manual_seed(3)))
    tr = _trainer(model, tok, "npo", pairs=2, beta=0.5, retain_weight=0.7)
    batch = tr.data_collator(tr.train_dataset[:2])
    assert (batch["forget_attention_mask"] == 0).any() and (batch["retain_attention_mask"] == 0).any()
    assert (batch["forget_input_ids"][batch["forget_attention_mask"] == 0] == tok.pad_token_id).all()

    def rows(part):
        for i in range(2):
            n = int(batch[f"{part}_attention_mask"][i].sum())
            yield batch[f"{part}_input_ids"][i:i + 1, :n], batch[f"{part}_labels"][i:i + 1, :n]

    with torch.no_grad():
        pol = torch.cat([sequence_logps(model(input_ids=x).logits, y) for x, y in rows("forget")])
        with model.disable_adapter():
            ref = torch.cat([sequence_logps(model(input_ids=x).logits, y) for x, y in rows("forget")])
        assert not torch.allclose(pol, ref)
        tot, n = 0.0, 0
        for x, y in rows("retain"):
            lp = torch.log_softmax(model(input_ids=x).logits[:, :-1].double(), -1)
            lab = y[:, 1:]
            keep = lab != -100
            tot -= lp.gather(-1, lab.clamp(min=0).unsqueeze(-1)).squeeze(-1)[keep].sum().item()
            n += int(keep.sum())
        nll = tot / n
        want = npo_loss(pol, ref, 0.5).item() + 0.7 * nll
        got = tr.compute_loss(model, batch)
        assert got.item() == pytest.approx(want, rel=1e-4)
        loss, out = tr.compute_loss(model, batch, return_outputs=True)
        assert loss.item() == pytest.approx(want, rel=1e-4) and out is None
        tr_r = _trainer(model, tok, "retain", pairs=2)
        assert tr_r.compute_loss(model, batch).item() == pytest.approx(nll, rel=1e-4)

        frozen = copy.deepcopy(base)
        rmodel = copy.deepcopy(base)
        with torch.no_grad():
            rmodel.model.layers[6].mlp.down_proj.weight.mul_(1.5)
        c = control_vector(576, 6.5, torch.Generator().manual_seed(0))
        tr_m = _trainer(rmodel, tok, "rmu", pairs=2, frozen_model=frozen, control=c, layer=7, alpha=3.0)
        fs = [layer_activations(rmodel, 7, x)[0] for x, _ in rows("forget")]
        lf = torch.cat([((h - c) ** 2).mean(-1) for h in fs]).mean().item()
        rs = [(layer_activations(rmodel, 7, x)[0], layer_activations(frozen, 7, x)[0]) for x, _ in rows("retain")]
        lr = torch.cat([((h - h0) ** 2).mean(-1) for h, h0 in rs]).mean().item()
        assert lr > 1e-6
        assert tr_m.compute_loss(rmodel, batch).item() == pytest.approx(lf + 3.0 * lr, rel=1e-4)


def test_boundaries_of_the_rmu_helpers(lm):
    import copy
    assert control_vector(1, 0.5).item() == pytest.approx(0.5)          # dim 1 and a coefficient below 1 are valid
    model = copy.deepcopy(lm[0])
    assert len(rmu_parameters(model, 0, span=1)) == 1                    # the first block, span 1
    assert len(rmu_parameters(model, 3, span=4)) == 4                    # span = layer + 1: blocks 0..3
    with pytest.raises(ValueError, match=r"layer must be in \[0, 29\], got 30"):
        layer_activations(model, 30, torch.tensor([[1, 2]]))
    with pytest.raises(ValueError, match="both the forget and the retain set need at least one example"):
        unlearning_rows(lm[1], [], [dict(prompt="a", answer="b")], 1)
    with pytest.raises(ValueError, match="the mask selects no token"):
        masked_mse(torch.ones(1, 2, 3), torch.zeros(3), torch.zeros(1, 2))


def test_trainer_rejects_bad_configuration(lm):
    base, tok = lm
    with pytest.raises(ValueError, match=r"one of \('npo', 'rmu', 'retain'\), got 'ga'"):
        _trainer(base, tok, "ga", lr=1e-3)
    with pytest.raises(ValueError, match=r"method 'rmu' needs frozen_model and control \(see control_vector\)"):
        _trainer(base, tok, "rmu", lr=1e-3)
    with pytest.raises(ValueError, match="frozen_model and control"):
        _trainer(base, tok, "rmu", lr=1e-3, frozen_model=base)
    with pytest.raises(ValueError, match="frozen_model and control"):
        _trainer(base, tok, "rmu", lr=1e-3, control=torch.zeros(576))


# ----------------------------------------------------------------------------- detectors
def test_prelogit_activations_mean_pool_the_completion_states(lm):
    model, tok = lm
    P = [tok("Tell me about rivers.", add_special_tokens=False).input_ids, tok("Hi", add_special_tokens=False).input_ids]
    C = [tok(" Rivers flow to the sea", add_special_tokens=False).input_ids, []]
    X = prelogit_activations(model, P, C, batch_size=1, pad_id=tok.pad_token_id)
    X2 = prelogit_activations(model, P, C, batch_size=2, pad_id=tok.pad_token_id)
    with torch.no_grad():
        h = model(input_ids=torch.tensor([P[0] + C[0]]), output_hidden_states=True).hidden_states[-1][0]
        h1 = model(input_ids=torch.tensor([P[1]]), output_hidden_states=True).hidden_states[-1][0]
    n = len(P[0])
    np.testing.assert_allclose(X[0], h[n - 1: n - 1 + len(C[0])].mean(0).numpy(), atol=1e-4)
    np.testing.assert_allclose(X[1], h1[-1].numpy(), atol=1e-4)
    np.testing.assert_allclose(X2, X, atol=1e-4)                    # padding changes nothing
    with pytest.raises(ValueError, match="prompts but"):
        prelogit_activations(model, P, C[:1])
    with pytest.raises(ValueError, match="at least one token"):
        prelogit_activations(model, [[], P[1]], C)


def test_detectors_separate_separable_data_and_reject_one_class():
    rng = np.random.default_rng(0)
    X = np.r_[rng.normal(0, 1, (40, 5)), rng.normal(3, 1, (40, 5))]
    y = np.r_[np.zeros(40), np.ones(40)].astype(int)
    idx = rng.permutation(80)
    tr, te = idx[:60], idx[60:]
    assert detection_accuracy(activation_detector(), X[tr], y[tr], X[te], y[te]) >= 0.95
    texts = [f"the answer is {w} indeed" for w in ["plain"] * 40] + [f"I cannot say {w}" for w in ["sorry"] * 40]
    T = np.array(texts)
    assert detection_accuracy(text_detector(), list(T[tr]), y[tr], list(T[te]), y[te]) == 1.0
    # no signal: identical texts in both classes give chance-level predictions
    same = ["the same words"] * 80
    acc = detection_accuracy(text_detector(), same[:60], y[tr], same[60:], y[te])
    majority = int(np.mean(y[tr]) > 0.5)                              # the training majority, everywhere
    assert acc == pytest.approx(np.mean(y[te] == majority))
    with pytest.raises(ValueError, match="y_train must hold both labels"):
        detection_accuracy(activation_detector(), X[:10], np.zeros(10), X[te], y[te])
    with pytest.raises(ValueError, match="y_test must hold both labels"):
        detection_accuracy(activation_detector(), X[tr], y[tr], X[:5], np.ones(5))


# ----------------------------------------------------------------------------- data
def test_people_are_seeded_distinct_and_fictitious():
    a, b = make_people(12, 3), make_people(12, 3)
    assert a == b and make_people(12, 4) != a
    assert len({p.name for p in a}) == 12
    ex = person_examples(a[0])
    assert len(ex) == 3 and all(a[0].name in e["prompt"] and e["fact"] in e["answer"] for e in ex)
    assert ex[1]["fact"] == a[0].job and ex[0]["fact"] == a[0].city
    for bad in (0, 481, 2.0, True):
        with pytest.raises(ValueError, match="n must be an integer"):
            make_people(bad, 0)
    assert isinstance(a[0], Person)


def test_irrelevant_prompts_never_name_a_person():
    qs = irrelevant_prompts(200, 0)
    assert len(set(qs)) == 200 and qs == irrelevant_prompts(200, 0) and qs[:5] != irrelevant_prompts(200, 1)[:5]
    names = {w for p in make_people(480, 0) for w in p.name.split()}
    assert not any(w.strip("?.,") in names for q in qs for w in q.split())
    with pytest.raises(ValueError, match="n must be an integer"):
        irrelevant_prompts(201, 0)
    with pytest.raises(ValueError, match="n must be an integer"):
        irrelevant_prompts(0, 0)


def test_answer_is_correct_is_case_insensitive_containment():
    assert answer_is_correct("She was born in VARNHOLT.", "Varnholt")
    assert not answer_is_correct("She was born in Drossen.", "Varnholt")


# ----------------------------------------------------------------------------- experiment
def test_scales_and_seeds():
    assert {"smoke", "quick", "paper"} <= set(exp.SCALES) and exp.SEEDS["quick"] >= 5
    assert exp.chat("Hi?") == "<|im_start|>user\nHi?<|im_end|>\n<|im_start|>assistant\n"


@pytest.mark.slow
def test_quick_trial_unlearns_and_detects():
    out = exp.run("quick", 0)["metrics"]
    assert out["forget_acc"]["original"] > out["forget_acc"]["base"]
    assert out["forget_acc"]["npo"] < out["forget_acc"]["original"]


def test_detectors_are_configured_as_documented():
    """README: TF-IDF of character 2-4-grams within word boundaries, sublinear tf, logistic regression
    (C = 10); activations standardised, then logistic regression (C = 1)."""
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.linear_model import LogisticRegression
    from sklearn.preprocessing import StandardScaler
    t = text_detector()
    assert [type(s) for _, s in t.steps] == [TfidfVectorizer, LogisticRegression]
    tf, lr = t.steps[0][1], t.steps[1][1]
    assert (tf.analyzer, tf.ngram_range, tf.sublinear_tf) == ("char_wb", (2, 4), True)
    assert (lr.C, lr.max_iter) == (10.0, 2000) and text_detector(C=0.5).steps[1][1].C == 0.5
    a = activation_detector()
    assert [type(s) for _, s in a.steps] == [StandardScaler, LogisticRegression]
    assert (a.steps[1][1].C, a.steps[1][1].max_iter) == (1.0, 2000) and activation_detector(C=3.0).steps[1][1].C == 3.0
