"""Tests for iclr26.posttraining.ti_dpo (arXiv:2505.19653)."""
import numpy as np
import pytest
import torch
import torch.nn.functional as F

from iclr26.posttraining.ti_dpo import (DEFAULT_BETA, DEFAULT_GAMMA, DEFAULT_LAMBDA, DEFAULT_TRIPLET_MARGIN,
                                        gaussian_prior, hybrid_weights, last_positions, ti_dpo_loss,
                                        token_importance, triplet_loss, weighted_logratio)
from iclr26.posttraining.ti_dpo import experiment as exp


# ----------------------------------------------------------------------------- references (numpy)
def prior_ref(T):
    t = np.arange(T, dtype=float)
    mu, sigma = (T - 1) / 2.0, T / 4.0
    return np.exp(-0.5 * ((t - mu) / sigma) ** 2)


def masks():
    # rows: a prompt of 2 tokens then 5 response tokens; 3 response tokens then padding; 1 token
    return torch.tensor([[0, 0, 1, 1, 1, 1, 1],
                         [1, 1, 1, 0, 0, 0, 0],
                         [0, 0, 0, 1, 0, 0, 0]], dtype=torch.float64)


def test_defaults_are_table_b12():
    assert (DEFAULT_BETA, DEFAULT_GAMMA, DEFAULT_LAMBDA) == (0.1, 0.1, 0.7)
    assert DEFAULT_TRIPLET_MARGIN == 0.01


def test_gaussian_prior_matches_the_formula():
    m = masks()
    p = gaussian_prior(m).numpy()
    np.testing.assert_allclose(p[0, 2:], prior_ref(5), rtol=1e-12)
    np.testing.assert_allclose(p[1, :3], prior_ref(3), rtol=1e-12)
    assert p[2, 3] == pytest.approx(1.0)                       # T = 1: mu = 0
    assert np.all(p[m.numpy() == 0] == 0)
    assert p[0, 4] == pytest.approx(1.0) and p[0, 2] == pytest.approx(np.exp(-0.5 * 1.6 ** 2))  # (0 - 2) / 1.25
    # even length: the peak is between the two middle tokens, symmetric
    p4 = gaussian_prior(torch.ones(1, 4, dtype=torch.float64))[0].numpy()
    np.testing.assert_allclose(p4, p4[::-1])
    np.testing.assert_allclose(p4, np.exp(-0.5 * ((np.arange(4) - 1.5) / 1.0) ** 2))
    assert gaussian_prior(torch.ones(1, 3, dtype=torch.long)).dtype == torch.float32


def test_hybrid_weights_match_reference():
    m = masks()
    g = torch.Generator().manual_seed(0)
    imp = torch.rand(m.shape, generator=g, dtype=torch.float64) + 0.1
    for lam in (0.0, 0.3, 0.7, 1.0):
        w = hybrid_weights(imp, m, lam).numpy()
        for i in range(3):
            on = m[i].numpy() > 0
            T = on.sum()
            I = imp[i].numpy()[on]
            ref = lam * T * I / I.sum() + (1 - lam) * T * prior_ref(T) / prior_ref(T).sum()
            np.testing.assert_allclose(w[i, on], ref, rtol=1e-10)
            assert np.all(w[i, ~on] == 0)
            assert w[i, on].mean() == pytest.approx(1.0)          # weights average 1 over the response


def test_hybrid_weights_are_scale_free_and_keep_dtype():
    m = masks()
    imp = torch.rand(m.shape, generator=torch.Generator().manual_seed(2), dtype=torch.float64) + 0.1
    # importance sums below 1 are still normalised (not mistaken for "no attribution")
    torch.testing.assert_close(hybrid_weights(imp * 1e-3, m, 0.7), hybrid_weights(imp, m, 0.7))
    torch.testing.assert_close(hybrid_weights(imp * 1e3, m, 0.7), hybrid_weights(imp, m, 0.7))
    w_int = hybrid_weights(torch.tensor([[0, 1, 2, 3]]), torch.tensor([[0, 1, 1, 1]]), 1.0)
    assert w_int.dtype == torch.float32
    torch.testing.assert_close(w_int, torch.tensor([[0.0, 0.5, 1.0, 1.5]]))
    pol = torch.randn(3, 7, dtype=torch.float32)
    w64 = hybrid_weights(imp, m, 0.7)
    assert weighted_logratio(pol, torch.zeros_like(pol), m, w64).dtype == torch.float32
    assert weighted_logratio(pol, torch.zeros_like(pol), m).dtype == torch.float32


def test_hybrid_weights_zero_importance_is_uniform_part():
    m = masks()
    w = hybrid_weights(torch.zeros_like(m), m, 1.0)
    torch.testing.assert_close(w, m)
    w = hybrid_weights(torch.zeros_like(m), m, 0.5)
    on = m[0] > 0
    ref = 0.5 + 0.5 * 5 * prior_ref(5) / prior_ref(5).sum()
    np.testing.assert_allclose(w[0, on].numpy(), ref, rtol=1e-10)


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_hybrid_weights_reject_non_finite_importance(bad):
    m = masks()
    imp = torch.ones_like(m)
    imp[0, -1] = bad                                   # one non-finite attribution on a response token
    with pytest.raises(ValueError, match="importance must be finite"):
        hybrid_weights(imp, m, 0.5)


def test_hybrid_weights_ignore_importance_off_the_response():
    m = masks()
    imp = torch.ones_like(m)
    imp2 = imp.clone()
    imp2[m == 0] = 100.0
    torch.testing.assert_close(hybrid_weights(imp, m, 0.7), hybrid_weights(imp2, m, 0.7))
    assert not hybrid_weights(imp, m, 0.7).requires_grad


def test_weighted_logratio():
    m = masks()
    g = torch.Generator().manual_seed(1)
    pol, ref = (torch.randn(m.shape, generator=g, dtype=torch.float64) for _ in range(2))
    w = torch.rand(m.shape, generator=g, dtype=torch.float64)
    np.testing.assert_allclose(weighted_logratio(pol, ref, m).numpy(), ((pol - ref) * m).sum(1).numpy())
    np.testing.assert_allclose(weighted_logratio(pol, ref, m, w).numpy(), (w * (pol - ref) * m).sum(1).numpy())
    np.testing.assert_allclose(weighted_logratio(pol, ref, m, torch.ones_like(m)).numpy(),
                               weighted_logratio(pol, ref, m).numpy())


def test_triplet_loss_matches_reference():
    a = torch.tensor([0.0, 1.0, -2.0, 0.5], dtype=torch.float64)
    w = torch.tensor([0.5, 3.0, -2.0, 0.5], dtype=torch.float64)
    l_ = torch.tensor([1.0, 0.0, 1.0, 0.49], dtype=torch.float64)
    for margin in (0.0, 0.01, 0.5):
        ref = np.maximum(0.0, np.abs((a - w).numpy()) - np.abs((a - l_).numpy()) + margin)
        np.testing.assert_allclose(triplet_loss(a, w, l_, margin).numpy(), ref, rtol=1e-12)
    assert triplet_loss(a, w, l_).numpy()[3] == pytest.approx(0.01 - 0.01)   # default margin 0.01
    assert triplet_loss(a, w, l_, 0.0)[0] == 0.0 and triplet_loss(a, w, l_, 0.0)[1] == pytest.approx(1.0)


def _pair_batch(seed=0, n=4, L=6):
    g = torch.Generator().manual_seed(seed)
    pc, rc, pr, rr = (torch.randn(n, L, generator=g, dtype=torch.float64) * 2 - 3 for _ in range(4))
    mc = torch.zeros(n, L, dtype=torch.float64)
    mr = torch.zeros(n, L, dtype=torch.float64)
    for i in range(n):
        mc[i, 1: L - i % 3] = 1
        mr[i, 2: L - (i + 1) % 3] = 1
    wc, wr = (torch.rand(n, L, generator=g, dtype=torch.float64) * 2 for _ in range(2))
    anchor = torch.randn(n, generator=g, dtype=torch.float64) * 3
    return pc, rc, mc, pr, rr, mr, wc, wr, anchor


def test_reduces_to_dpo_with_uniform_weights_and_no_triplet():
    pc, rc, mc, pr, rr, mr, *_ = _pair_batch()
    beta = 0.3
    u = ((pc - rc) * mc).sum(1) - ((pr - rr) * mr).sum(1)
    ref = -F.logsigmoid(beta * u)
    got = ti_dpo_loss(pc, rc, mc, pr, rr, mr, beta=beta, gamma=0.0, reduction="none")
    torch.testing.assert_close(got, ref)
    torch.testing.assert_close(ti_dpo_loss(pc, rc, mc, pr, rr, mr, beta=beta, gamma=0.0), ref.mean())
    # the same as the sequence-level DPO loss of the auxdpo paper's reference implementation
    from iclr26.posttraining.auxdpo import dpo_loss
    torch.testing.assert_close(got, dpo_loss((pc * mc).sum(1), (pr * mr).sum(1), (rc * mc).sum(1), (rr * mr).sum(1),
                                             beta=beta))


def test_full_loss_matches_numpy_reference():
    pc, rc, mc, pr, rr, mr, wc, wr, anchor = _pair_batch(3)
    beta, gamma, margin = 0.2, 0.5, 0.05
    x = lambda t: t.numpy()
    uw = (x(wc) * x(mc) * (x(pc) - x(rc))).sum(1)
    ul = (x(wr) * x(mr) * (x(pr) - x(rr))).sum(1)
    anchor = anchor.clone()
    anchor[0] = float(uw[0])                                     # anchor on the chosen reward: hinge at 0
    dpo = np.logaddexp(0.0, -beta * (uw - ul))
    ra, rw, rl = beta * x(anchor), beta * uw, beta * ul
    tri = np.maximum(0.0, np.abs(ra - rw) - np.abs(ra - rl) + margin)
    got = ti_dpo_loss(pc, rc, mc, pr, rr, mr, wc, wr, beta=beta, gamma=gamma, anchor_logratio=anchor, margin=margin,
                      reduction="none")
    np.testing.assert_allclose(got.numpy(), dpo + gamma * tri, rtol=1e-10)
    assert tri.min() == 0.0 and tri.max() > 0                    # both branches of the hinge are exercised
    mean = ti_dpo_loss(pc, rc, mc, pr, rr, mr, wc, wr, beta=beta, gamma=gamma, anchor_logratio=anchor, margin=margin)
    assert mean.item() == pytest.approx(float(np.mean(dpo + gamma * tri)))


def test_gradient_is_weighted_per_token():
    pc, rc, mc, pr, rr, mr, wc, wr, _ = _pair_batch(5)
    pc = pc.clone().requires_grad_(True)
    beta = 0.1
    loss = ti_dpo_loss(pc, rc, mc, pr, rr, mr, wc, wr, beta=beta, gamma=0.0)
    loss.backward()
    u = (wc * mc * (pc - rc)).sum(1) - (wr * mr * (pr - rr)).sum(1)
    expected = -beta * torch.sigmoid(-beta * u)[:, None] * wc * mc / pc.shape[0]
    torch.testing.assert_close(pc.grad, expected.detach())


def test_triplet_gradient_pulls_chosen_towards_anchor():
    # anchor above both rewards: the triplet term pulls the chosen reward up (towards the anchor)
    z = torch.zeros(1, 2, dtype=torch.float64)
    m = torch.ones(1, 2, dtype=torch.float64)
    pc = torch.tensor([[0.5, 0.5]], dtype=torch.float64, requires_grad=True)
    pr = torch.tensor([[1.0, 1.0]], dtype=torch.float64, requires_grad=True)
    anchor = torch.tensor([4.0], dtype=torch.float64)
    with_t = ti_dpo_loss(pc, z, m, pr, z, m, beta=1.0, gamma=1.0, anchor_logratio=anchor, margin=0.0)
    no_t = ti_dpo_loss(pc, z, m, pr, z, m, beta=1.0, gamma=0.0)
    assert with_t.item() == pytest.approx(no_t.item() + 1.0)   # |4 - 1| - |4 - 2| = 1
    g_with = torch.autograd.grad(with_t, pc)[0]
    g_no = torch.autograd.grad(no_t, pc)[0]
    torch.testing.assert_close(g_with - g_no, torch.full_like(pc, -1.0))


def _raises(exc, msg):
    """The exact message (anchored at both ends)."""
    return pytest.raises(exc, match="^" + msg + "$")


def test_loss_rejects_bad_input():
    pc, rc, mc, pr, rr, mr, wc, wr, anchor = _pair_batch()
    with _raises(ValueError, r"beta must be a positive number, got 0\.0"):
        ti_dpo_loss(pc, rc, mc, pr, rr, mr, beta=0.0, gamma=0.0)
    with _raises(ValueError, r"beta must be a positive number, got True"):
        ti_dpo_loss(pc, rc, mc, pr, rr, mr, beta=True, gamma=0.0)
    with _raises(ValueError, r"beta must be a positive number, got '1'"):
        ti_dpo_loss(pc, rc, mc, pr, rr, mr, beta="1", gamma=0.0)
    with _raises(ValueError, r"gamma must be a non-negative number, got -0\.1"):
        ti_dpo_loss(pc, rc, mc, pr, rr, mr, gamma=-0.1)
    with _raises(ValueError, r"gamma must be a non-negative number, got False"):
        ti_dpo_loss(pc, rc, mc, pr, rr, mr, gamma=False)
    with _raises(ValueError, r"gamma must be a non-negative number, got None"):
        ti_dpo_loss(pc, rc, mc, pr, rr, mr, gamma=None)
    with _raises(ValueError, r"gamma > 0 needs anchor_logratio \(log pi/pi_ref of a policy sample per prompt\); "
                             r"pass gamma=0 for the loss without the triplet term"):
        ti_dpo_loss(pc, rc, mc, pr, rr, mr, gamma=0.1)
    with _raises(ValueError, r"reduction must be 'mean' or 'none', got 'sum'"):
        ti_dpo_loss(pc, rc, mc, pr, rr, mr, gamma=0.0, reduction="sum")
    with _raises(ValueError, r"policy_logps has shape \(4, 3\); it must match mask \(4, 6\)"):
        ti_dpo_loss(pc[:, :3], rc, mc, pr, rr, mr, gamma=0.0)
    with _raises(ValueError, r"ref_logps has shape \(4, 3\); it must match mask \(4, 6\)"):
        ti_dpo_loss(pc, rc[:, :3], mc, pr, rr, mr, gamma=0.0)
    with _raises(ValueError, r"chosen and rejected batches differ in size: 4 vs 2"):
        ti_dpo_loss(pc, rc, mc, pr[:2], rr[:2], mr[:2], gamma=0.0)
    with _raises(ValueError, r"weights has shape \(4, 2\); it must match mask \(4, 6\)"):
        weighted_logratio(pc, rc, mc, wc[:, :2])
    with _raises(ValueError, r"mask must be 2-D \(batch, tokens\), got shape \(6,\)"):
        weighted_logratio(pc[0], rc[0], mc[0])
    with _raises(TypeError, r"mask must be a torch\.Tensor, got list"):
        gaussian_prior([[1, 1]])
    with _raises(ValueError, r"mask must be 2-D \(batch, tokens\), got shape \(1, 1, 2\)"):
        gaussian_prior(torch.ones(1, 1, 2))
    with _raises(TypeError, r"ref_logps must be a torch\.Tensor, got ndarray"):
        weighted_logratio(pc, rc.numpy(), mc)
    with _raises(ValueError, r"margin must be a non-negative number, got -1\.0"):
        triplet_loss(anchor, anchor, anchor, margin=-1.0)
    with _raises(ValueError, r"anchor_reward must be a 1-D torch\.Tensor \(one value per pair\)"):
        triplet_loss(anchor[:, None], anchor, anchor)
    with _raises(ValueError, r"rejected_reward must be a 1-D torch\.Tensor \(one value per pair\)"):
        triplet_loss(anchor, anchor, anchor.numpy())
    with _raises(ValueError, r"chosen_reward has shape \(2,\); it must match anchor_reward \(4,\)"):
        triplet_loss(anchor, anchor[:2], anchor)
    with _raises(ValueError, r"rejected_reward has shape \(2,\); it must match anchor_reward \(4,\)"):
        triplet_loss(anchor, anchor, anchor[:2])
    with _raises(ValueError, r"chosen_reward must be a 1-D torch\.Tensor \(one value per pair\)"):
        triplet_loss(anchor, anchor[:, None], anchor)
    for lam in (1.5, -0.1, True, "0.5"):
        with _raises(ValueError, r"lam must be a number in \[0, 1\], got " + repr(lam).replace(".", r"\.")):
            hybrid_weights(wc, mc, lam)
    with _raises(ValueError, r"importance must be non-negative \(an L1 norm of gradients\)"):
        hybrid_weights(-wc, mc, 0.5)
    with _raises(ValueError, r"importance has shape \(4, 2\); it must match mask \(4, 6\)"):
        hybrid_weights(wc[:, :2], mc, 0.5)
    # boundary values are allowed
    hybrid_weights(wc, mc, 0.0), hybrid_weights(wc, mc, 1.0), hybrid_weights(wc * 0, mc, 1), hybrid_weights(wc, mc, 0)
    triplet_loss(anchor, anchor, anchor, margin=0.0), triplet_loss(anchor, anchor, anchor, margin=0)
    ti_dpo_loss(pc, rc, mc, pr, rr, mr, gamma=0, beta=1e-6), ti_dpo_loss(pc, rc, mc, pr, rr, mr, gamma=0.0, beta=2)


def test_last_positions():
    am = torch.tensor([[1, 1, 1, 0, 0], [0, 0, 1, 1, 1], [1, 1, 1, 1, 1], [1, 0, 0, 0, 0]])
    assert last_positions(am).tolist() == [2, 4, 4, 0]
    with _raises(ValueError, "every row of attention_mask needs at least one attended token"):
        last_positions(torch.tensor([[0, 0], [1, 0]]))
    with _raises(ValueError, r"attention_mask must be a 2-D \(batch, tokens\) tensor"):
        last_positions(torch.tensor([1, 1]))
    with _raises(ValueError, r"attention_mask must be a 2-D \(batch, tokens\) tensor"):
        last_positions([[1, 1]])
    assert last_positions(torch.tensor([[0.5, 0.0, 2.0]])).tolist() == [2]


# ----------------------------------------------------------------------------- experiment helpers (no model)
def test_split_dialogue_and_flip_labels():
    c = "\n\nHuman: hi\n\nAssistant: hello\n\nHuman: how?\n\nAssistant: like this"
    r = "\n\nHuman: hi\n\nAssistant: hello\n\nHuman: how?\n\nAssistant: no"
    p, a, b = exp.split_dialogue(c, r)
    assert p.endswith("how?\n\nAssistant:") and a == " like this" and b == " no"
    assert exp.split_dialogue("no turns", "no turns") is None
    assert exp.split_dialogue(c, "\n\nHuman: other\n\nAssistant: x") is None
    pairs = [dict(prompt=str(i), chosen="c", rejected="r") for i in range(10)]
    for p_ in (0.0, 0.2, 0.4):
        out = exp.flip_labels(pairs, p_, np.random.default_rng(0))
        assert sum(o["chosen"] == "r" for o in out) == round(10 * p_)
        assert all(o["prompt"] == str(i) and {o["chosen"], o["rejected"]} == {"c", "r"} for i, o in enumerate(out))
    assert pairs[0]["chosen"] == "c"                             # the input is not modified
    np.testing.assert_array_equal(exp._accuracy(np.array([0.3, -0.1, 0.0])), [1.0, 0.0, 0.5])


def test_load_hh_names_the_missing_file(tmp_path):
    with pytest.raises(FileNotFoundError, match="hh-rlhf"):
        exp.load_hh(tmp_path)


def test_scales_are_declared():
    assert {"smoke", "quick", "paper"} <= set(exp.SCALES)
    assert exp.SCALES["paper"]["noise"] == (0.0, 0.2, 0.4)
    assert set(exp.SCALES["paper"]["datasets"]) == {"verifiable", "hh"}


# ----------------------------------------------------------------------------- with a bundled model
def _smol(seed=0):
    from iclr26.models.lora import load_with_lora
    return load_with_lora("smollm2-135m", r=4, seed=seed)


PAIRS = [dict(prompt="2 + 3 = 5\n4 + 4 =", chosen=" 8", rejected=" 9"),
         dict(prompt="2 + 3 = 5\n7 - 2 =", chosen=" 5", rejected=" 3"),
         dict(prompt="The capital of France is", chosen=" Paris.", rejected=" a large river in Spain"),
         dict(prompt="Q: Is fire hot?\nA:", chosen=" Yes, it is hot.", rejected=" No")]


def _trainer(cls=None, pairs=PAIRS, steps=1, precompute=False, loss_type="sigmoid", seed=0, **kw):
    from datasets import Dataset
    from trl import DPOConfig

    from iclr26.models.lora import trl_args
    from iclr26.posttraining.ti_dpo import TIDPOTrainer
    import tempfile
    cls = cls or TIDPOTrainer
    model, tok = _smol(seed)
    args = trl_args(DPOConfig, tempfile.mkdtemp(), max_steps=steps, learning_rate=5e-3, per_device_train_batch_size=4,
                    per_device_eval_batch_size=4, beta=0.1, precompute_ref_log_probs=precompute, loss_type=loss_type,
                    logging_steps=10 ** 6)
    return cls(model=model, args=args, processing_class=tok, train_dataset=Dataset.from_list(pairs),
               eval_dataset=Dataset.from_list(pairs), **kw)


def _perturb(trainer, seed=1):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for n, p in trainer.model.named_parameters():
            if "lora_B" in n and ".default." in n:
                p.copy_(torch.randn(p.shape, generator=g) * 0.02)


def _batch(trainer):
    return trainer._prepare_inputs(next(iter(trainer.get_eval_dataloader())))


@pytest.mark.llm
def test_token_importance_matches_autograd_reference():
    model, tok = _smol()
    ids = tok(["The capital of France is Paris", "2 + 3 ="], padding=False).input_ids
    a = torch.tensor([ids[0]])
    got = token_importance(model, a)
    e = model.get_input_embeddings()(a).detach().requires_grad_(True)
    target = model(inputs_embeds=e).logits[0, -1].max()          # Eq. 5: max logit at the final position
    (g,) = torch.autograd.grad(target, e)
    np.testing.assert_allclose(got[0].numpy(), g[0].abs().sum(-1).numpy(), rtol=2e-4, atol=1e-7)   # Eq. 6: L1 norm
    assert all(p.grad is None for p in model.parameters())
    # padding (left or right) changes nothing on the real tokens
    b = torch.tensor([ids[1]])
    pad = tok.pad_token_id
    n = a.shape[1] - b.shape[1]
    right = torch.cat([b, torch.full((1, n), pad)], 1)
    left = torch.cat([torch.full((1, n), pad), b], 1)
    ones = torch.ones(1, b.shape[1], dtype=torch.long)
    zeros = torch.zeros(1, n, dtype=torch.long)
    ref = token_importance(model, b)[0]
    got_r = token_importance(model, torch.cat([a, right]), torch.cat([torch.ones_like(a), torch.cat([ones, zeros], 1)]))
    got_l = token_importance(model, left, torch.cat([zeros, ones], 1))
    torch.testing.assert_close(got_r[0], got[0], rtol=1e-3, atol=1e-6)
    torch.testing.assert_close(got_r[1, : b.shape[1]], ref, rtol=1e-3, atol=1e-6)
    torch.testing.assert_close(got_l[0, n:], ref, rtol=1e-3, atol=1e-6)
    assert torch.all(got_r[1, b.shape[1]:] == 0) and torch.all(got_l[0, :n] == 0)
    assert got[0].std() > 0.1 * got[0].mean()                    # not uniform
    with _raises(ValueError, r"input_ids must be a 2-D integer tensor \(batch, tokens\)"):
        token_importance(model, a.float())
    with _raises(ValueError, r"input_ids must be a 2-D integer tensor \(batch, tokens\)"):
        token_importance(model, a[0])
    with _raises(ValueError, r"input_ids must be a 2-D integer tensor \(batch, tokens\)"):
        token_importance(model, a.tolist())
    with _raises(ValueError, r"attention_mask has shape \(1, 2\); input_ids has \(1, \d+\)"):
        token_importance(model, a, torch.ones(1, 2, dtype=torch.long))
    with _raises(TypeError, r"token_importance needs a transformers causal LM \(with get_input_embeddings\(\)\), "
                            r"got Linear"):
        token_importance(torch.nn.Linear(2, 2), a)


@pytest.mark.llm
def test_trainer_reduces_to_trl_dpo_loss():
    from trl import DPOTrainer
    dpo, ti = _trainer(DPOTrainer), _trainer(weighting="uniform", gamma=0.0)
    _perturb(dpo), _perturb(ti)
    b = _batch(dpo)
    with torch.no_grad():
        l_dpo = dpo.compute_loss(dpo.model, b)
        l_ti = ti.compute_loss(ti.model, b)
    assert abs(l_dpo.item() - np.log(2)) > 1e-3                  # a non-trivial margin
    assert l_ti.item() == pytest.approx(l_dpo.item(), rel=1e-5)
    # the hybrid weights change the loss, and the trainer's loss is ti_dpo_loss of its own pieces
    hyb = _trainer(gamma=0.0)
    _perturb(hyb)
    ids, am, cm = b["input_ids"], b["attention_mask"], b["completion_mask"]
    with torch.no_grad():
        l_h = hyb.compute_loss(hyb.model, b)
        pol = hyb.token_logps(hyb.model, ids, am, cm)
        ref = hyb.token_logps(hyb.model, ids, am, cm, reference=True)
    w = hyb.token_weights(hyb.model, ids, am, cm)
    assert torch.all(ref <= 0) and not torch.allclose(pol, ref)
    mask = cm[:, 1:]
    (pc, pr), (rc, rr), (mc, mr), (wc, wr) = pol.chunk(2), ref.chunk(2), mask.chunk(2), w.chunk(2)
    manual = ti_dpo_loss(pc, rc, mc, pr, rr, mr, wc, wr, beta=0.1, gamma=0.0)
    assert l_h.item() == pytest.approx(manual.item(), rel=1e-5)
    assert abs(l_h.item() - l_ti.item()) > 1e-5
    with torch.no_grad():
        l_h2, out = hyb.compute_loss(hyb.model, b, return_outputs=True)
    assert l_h2.item() == pytest.approx(l_h.item(), rel=1e-6)
    r_c, r_r = 0.1 * ((pc - rc) * mc).sum(1), 0.1 * ((pr - rr) * mr).sum(1)
    torch.testing.assert_close(out["chosen_rewards"], r_c, rtol=1e-5, atol=1e-7)
    torch.testing.assert_close(out["rejected_rewards"], r_r, rtol=1e-5, atol=1e-7)
    logged = hyb._metrics["train" if hyb.model.training else "eval"]
    assert logged["rewards/accuracies"][-1] == pytest.approx((r_c > r_r).float().mean().item())
    assert logged["rewards/margins"][-1] == pytest.approx((r_c - r_r).mean().item(), rel=1e-5)
    torch.testing.assert_close(w, hybrid_weights(token_importance(hyb.model, ids, am)[:, 1:], mask, 0.7))
    # margins of the held-out set: the DPO reward with uniform weights
    from iclr26.posttraining.ti_dpo import preference_margins
    m = preference_margins(ti)
    u = ((pc - rc) * mc).sum(1) - ((pr - rr) * mr).sum(1)
    torch.testing.assert_close(m, (0.1 * u).float(), rtol=1e-4, atol=1e-6)
    with pytest.raises(TypeError, match="DPOTrainer"):
        preference_margins(object())


@pytest.mark.llm
def test_anchors_and_triplet_term():
    ti = _trainer(gamma=0.5, anchor_max_new_tokens=3, anchor_temperature=1.0)
    _perturb(ti)
    b = _batch(ti)
    n = b["input_ids"].shape[0] // 2
    ids, am, cm = b["input_ids"][:n], b["attention_mask"][:n], b["completion_mask"][:n]
    torch.manual_seed(0)
    a_ids, a_am, a_cm = ti.sample_anchors(ti.model, ids, am, cm)
    tok = ti.processing_class
    for i in range(n):
        p = ids[i][(am[i] > 0) & (cm[i] == 0)]
        assert torch.equal(a_ids[i][: len(p)], p)                # the anchor continues the same prompt
        gen = a_ids[i][a_cm[i] > 0]
        assert 1 <= len(gen) <= 3
        assert tok.eos_token_id not in gen[:-1].tolist()         # cut after the first EOS
        assert int(a_am[i].sum()) == len(p) + len(gen)
    ti.model.train()
    ti.sample_anchors(ti.model, ids, am, cm)
    assert ti.model.training                                     # the training mode is restored
    ti.model.eval()
    ti.sample_anchors(ti.model, ids, am, cm)
    assert not ti.model.training
    torch.manual_seed(0)
    lr_ = ti.anchor_logratio(ti.model, ids, am, cm)
    assert lr_.shape == (n,) and torch.isfinite(lr_).all() and lr_.abs().sum() > 0
    # the triplet term enters the loss: gamma 0.5 vs 0 on the same batch and the same anchors
    no_t = _trainer(gamma=0.0)
    _perturb(no_t)
    with torch.no_grad():
        torch.manual_seed(0)
        l_t = ti.compute_loss(ti.model, b)
        l_0 = no_t.compute_loss(no_t.model, b)
    assert l_t.item() >= l_0.item() - 1e-6 and abs(l_t.item() - l_0.item()) > 1e-6


@pytest.mark.slow
@pytest.mark.llm
def test_trainer_learns():
    from iclr26.posttraining.ti_dpo import preference_margins
    ti = _trainer(steps=4, anchor_max_new_tokens=2)
    before = preference_margins(ti)
    ti.train()
    after = preference_margins(ti)
    assert torch.all(before == 0)
    assert (after > 0).float().mean() >= 0.75 and after.mean() > 0.05
    assert any(np.isfinite(h.get("loss", np.nan)) for h in ti.state.log_history) or ti.state.global_step == 4


@pytest.mark.llm
def test_trainer_rejects_bad_settings():
    from trl import DPOConfig

    from iclr26.posttraining.ti_dpo import TIDPOTrainer
    with pytest.raises(ValueError, match="precompute_ref_log_probs=False"):
        _trainer(precompute=True)
    with pytest.raises(ValueError, match="loss_type"):
        _trainer(loss_type="ipo")
    bad = [dict(lam=1.5), dict(lam=-0.1), dict(lam=True), dict(gamma=-1.0), dict(triplet_margin=-0.1),
           dict(weighting="softmax"), dict(anchor_max_new_tokens=0), dict(anchor_max_new_tokens=2.0),
           dict(anchor_temperature=0.0), dict(anchor_top_p=0.0), dict(anchor_top_p=1.5), dict(anchor_top_k=-1),
           dict(anchor_top_k=True), dict(gamma=True), dict(anchor_max_new_tokens=True)]
    names = ["lam", "lam", "lam", "gamma", "triplet_margin", "weighting", "anchor_max_new_tokens",
             "anchor_max_new_tokens", "anchor_temperature", "anchor_top_p", "anchor_top_p", "anchor_top_k",
             "anchor_top_k", "gamma", "anchor_max_new_tokens"]
    for kw, name in zip(bad, names):
        with pytest.raises(ValueError, match=name):
            TIDPOTrainer(model=None, args=DPOConfig(output_dir="/tmp/x", use_cpu=True), **kw)
    with pytest.raises(ValueError, match="args"):
        TIDPOTrainer(model=None)
    for kw, name in ((dict(f_divergence_type="js_divergence"), "reverse_kl"), (dict(ld_alpha=0.5), "ld_alpha")):
        with pytest.raises(ValueError, match=name):
            TIDPOTrainer(model=None, args=DPOConfig(output_dir="/tmp/x", use_cpu=True, **kw))


def test_the_shipped_hh_pairs_load_and_cut():
    """The HH file shipped with the package loads, and pairs are cut to the token budgets (a
    whitespace tokenizer stands in for the model's)."""

    class Words:
        def __call__(self, text, add_special_tokens=False):
            return type("Enc", (), {"input_ids": text.split()})()

        def decode(self, ids):
            return " ".join(ids)

    rows = exp.load_hh()
    assert len(rows) > 100 and {"chosen", "rejected"} <= set(rows[0])
    pairs = exp.hh_pairs(rows[:200], Words(), prompt_tokens=5, completion_tokens=3)
    assert len(pairs) > 50
    for p in pairs:
        assert len(p["prompt"].split()) <= 5 and 0 < len(p["chosen"].split()) <= 3
        assert p["chosen"] != p["rejected"]
