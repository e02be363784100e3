"""Tests of Parallel Token Prediction: the Pick map against an independent reference, auxiliaries
inside the teacher's CDF intervals, the auxiliary embedding, the PTP model's one-call contract
(causality in u, the independent control), exact verification and its reduction to autoregressive
inverse-CDF sampling, training, state_dict round trips, dtype, and input rejections."""
import numpy as np
import pytest
import torch
from torch.nn import functional as F

from iclr26.decoding.ptp import (
    AuxiliaryEmbedding, PTPConfig, PTPForCausalLM, ar_sample, pick, ptp_generate, ptp_loss, sample_auxiliaries,
    token_intervals, train_ptp, verify_ptp,
)
from iclr26.models.tiny import TinyLMConfig, build_tiny_lm

V = 10


def _teacher(seed=0, std=0.4, vocab=V):
    """A tiny Llama with a wide init (std 0.4): peaked, context-dependent next-token distributions."""
    torch.manual_seed(seed)
    cfg = TinyLMConfig(hidden_size=32, num_hidden_layers=1, intermediate_size=64, initializer_range=std)
    return build_tiny_lm(cfg, vocab, pad_token_id=0, bos_token_id=1, eos_token_id=2).eval()


@pytest.fixture(scope="module")
def teacher():
    return _teacher()


@pytest.fixture(scope="module")
def student(teacher):
    torch.manual_seed(1)
    s = PTPForCausalLM.from_teacher(teacher)
    with torch.no_grad():
        s.aux_embed.anchors.weight.normal_(0, 0.4)
    return s.eval()


def _pick_reference(u, p):
    """Loop over tokens: the first j whose cumulative (normalised) mass exceeds u."""
    p = np.asarray(p, dtype=np.float64)
    p = p / p.sum()
    c = 0.0
    for j, pj in enumerate(p):
        c += pj
        if c > u:
            return j
    return len(p) - 1


# ---------------------------------------------------------------------------------------------- Pick
def test_pick_matches_the_reference_loop():
    g = torch.Generator().manual_seed(0)
    probs = torch.rand(50, 7, generator=g) ** 3
    probs[::5, 2] = 0.0
    u = torch.rand(50, generator=g, dtype=torch.float64)
    got = pick(u, probs)
    assert got.dtype == torch.long and got.shape == (50,)
    ref = [_pick_reference(float(a), b.numpy()) for a, b in zip(u, probs)]
    assert got.tolist() == ref


def test_pick_hand_example_and_edges():
    p = torch.tensor([0.2, 0.0, 0.5, 0.3], dtype=torch.float64)
    # CDF 0.2, 0.2, 0.7, 1.0: u in [0, .2) -> 0, [.2, .7) -> 2, [.7, 1) -> 3; token 1 never
    u = torch.tensor([0.0, 0.1999, 0.2, 0.5, 0.6999, 0.7, 0.99999], dtype=torch.float64)
    assert pick(u, p.expand(7, 4)).tolist() == [0, 0, 2, 2, 2, 3, 3]
    # unnormalised probabilities are normalised
    assert pick(torch.tensor([0.5]), torch.tensor([[2.0, 0.0, 5.0, 3.0]])).tolist() == [2]


def test_pick_of_uniform_u_samples_the_distribution():
    p = torch.tensor([0.1, 0.6, 0.05, 0.25])
    u = torch.rand(40_000, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    freq = torch.bincount(pick(u, p.expand(len(u), 4)), minlength=4).double() / len(u)
    torch.testing.assert_close(freq, p.double(), atol=0.01, rtol=0)


def test_auxiliaries_lie_in_the_token_interval_and_invert_pick():
    g = torch.Generator().manual_seed(1)
    probs = torch.softmax(3 * torch.randn(200, 9, generator=g, dtype=torch.float64), -1)
    tokens = torch.multinomial(probs, 1, generator=g)[:, 0]
    lo, hi = token_intervals(probs, tokens)
    torch.testing.assert_close(hi - lo, probs.gather(1, tokens[:, None])[:, 0].double(), atol=1e-7, rtol=0)
    u = sample_auxiliaries(probs, tokens, generator=g)
    assert ((u >= lo) & (u < hi)).all()
    assert torch.equal(pick(u, probs), tokens)
    # the auxiliaries of one token are uniform inside its interval (mean at the midpoint)
    p = torch.tensor([0.3, 0.5, 0.2]).expand(20_000, 3)
    uu = sample_auxiliaries(p, torch.ones(20_000, dtype=torch.long), generator=g)
    assert abs(float(uu.mean()) - 0.55) < 0.005 and float(uu.min()) >= 0.3 and float(uu.max()) < 0.8


def test_training_auxiliaries_follow_beta_inside_the_interval():
    """The official training draw: r ~ Beta(0.3, 0.3) inside each token's interval (edges favoured);
    checked against scipy's Beta distribution by a Kolmogorov-Smirnov test on the rescaled draws."""
    from scipy import stats

    g = torch.Generator().manual_seed(4)
    p = torch.tensor([0.3, 0.5, 0.2], dtype=torch.float64).expand(20_000, 3)
    tokens = torch.ones(20_000, dtype=torch.long)
    u = sample_auxiliaries(p, tokens, generator=g, concentration=0.3)
    assert float(u.min()) >= 0.3 and float(u.max()) < 0.8 and torch.equal(pick(u, p), tokens)
    r = ((u - 0.3) / 0.5).numpy()
    assert stats.kstest(r, stats.beta(0.3, 0.3).cdf).pvalue > 0.01
    assert stats.kstest(r, "uniform").pvalue < 1e-6                      # not the uniform evaluation draw
    # a seeded generator repeats the draw; concentration 1 is the uniform draw of the same uniforms
    g1, g2 = torch.Generator().manual_seed(7), torch.Generator().manual_seed(7)
    torch.testing.assert_close(sample_auxiliaries(p[:50], tokens[:50], generator=g1, concentration=1.0),
                               sample_auxiliaries(p[:50], tokens[:50], generator=g2), atol=1e-12, rtol=0)
    for bad in (0.0, -1.0, float("nan"), float("inf"), True):
        with pytest.raises(ValueError, match="concentration must be a finite number > 0"):
            sample_auxiliaries(p[:5], tokens[:5], concentration=bad)


def test_train_ptp_passes_the_training_draw_through(monkeypatch, teacher):
    import iclr26.decoding.ptp.model as m

    seen = []
    real = m.sample_auxiliaries

    def spy(*a, **kw):
        seen.append(kw.get("concentration"))
        return real(*a, **kw)

    monkeypatch.setattr(m, "sample_auxiliaries", spy)
    s = PTPForCausalLM.from_teacher(teacher)
    seq = _text(teacher, 4, 6, 3)
    train_ptp(s, teacher, seq, 2, k=2, batch_size=2, aux_concentration=0.3)
    train_ptp(s, teacher, seq, 1, k=2, batch_size=2)
    assert seen == [0.3, 0.3, None]


def test_token_intervals_hand_example():
    lo, hi = token_intervals(torch.tensor([[0.2, 0.0, 0.5, 0.3]], dtype=torch.float64), torch.tensor([2]))
    assert abs(float(lo) - 0.2) < 1e-12 and abs(float(hi) - 0.7) < 1e-12
    lo, hi = token_intervals(torch.tensor([[2.0, 2.0]]), torch.tensor([0]))
    assert float(lo) == 0.0 and abs(float(hi) - 0.5) < 1e-12


# ----------------------------------------------------------------------------------- embedding, model
def test_auxiliary_embedding_interpolates_between_anchors():
    emb = AuxiliaryEmbedding(6, num_anchors=3)
    with torch.no_grad():
        emb.anchors.weight.copy_(torch.arange(18.0).view(3, 6))
    A = emb.anchors.weight.detach()
    out = emb(torch.tensor([[0.0, 0.5, 1.0, 0.25, 0.8]]))
    assert out.shape == (1, 5, 6)
    torch.testing.assert_close(out[0, 0], A[0])
    torch.testing.assert_close(out[0, 1], A[1])
    torch.testing.assert_close(out[0, 2], A[2])
    torch.testing.assert_close(out[0, 3], 0.5 * A[0] + 0.5 * A[1])
    torch.testing.assert_close(out[0, 4], 0.4 * A[1] + 0.6 * A[2])
    one = AuxiliaryEmbedding(4, num_anchors=1)
    assert torch.equal(one(torch.tensor([0.3, 0.9])), one.anchors.weight.detach().expand(2, 4))


def test_cos_embedding_is_a_linear_map_of_cosine_features():
    emb = AuxiliaryEmbedding(5, num_anchors=4, kind="cos")
    W = emb.anchors.weight.detach()
    u = torch.tensor([[0.0, 0.3, 1.0]])
    feats = torch.stack([torch.cos(np.pi * f * u) for f in (1, 2, 3, 4)], -1)
    torch.testing.assert_close(emb(u), feats @ W)
    torch.testing.assert_close(emb(torch.tensor([0.0]))[0], W.sum(0))
    torch.testing.assert_close(emb(torch.tensor([1.0]))[0], (W * torch.tensor([-1.0, 1, -1, 1])[:, None]).sum(0))


def test_bins_embedding_looks_up_the_bin_of_u():
    emb = AuxiliaryEmbedding(3, num_anchors=4, kind="bins")
    W = emb.anchors.weight.detach()
    out = emb(torch.tensor([0.0, 0.2499, 0.25, 0.6, 0.99, 1.0]))
    assert torch.equal(out, W[[0, 0, 1, 2, 3, 3]])


def test_cos_student_init_scale(teacher):
    torch.manual_seed(0)
    lin = PTPForCausalLM.from_teacher(teacher)
    cos = PTPForCausalLM.from_teacher(teacher, PTPConfig(embedding="cos", num_anchors=32))
    std = float(teacher.get_input_embeddings().weight.detach().std())
    assert abs(float(lin.aux_embed.anchors.weight.std()) / std - 1) < 0.2
    assert abs(float(cos.aux_embed.anchors.weight.std()) / (std * (2 / 32) ** 0.5) - 1) < 0.2
    out = cos(torch.tensor([[3, 4]]), torch.tensor([[0.2, 0.7]]))
    assert out.shape == (1, 2, V) and cos.aux_embed.kind == "cos"


def test_forward_is_one_call_causal_in_u_and_reads_the_context(teacher, student):
    ids = torch.tensor([[3, 4, 5, 6], [7, 3, 3, 8]])
    u = torch.rand(2, 5, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    out = student(ids, u)
    assert out.shape == (2, 5, V)
    u2 = u.clone()
    u2[:, 3] = (u2[:, 3] + 0.5) % 1.0
    out2 = student(ids, u2)
    torch.testing.assert_close(out2[:, :3], out[:, :3])             # slot j sees u_0..u_j only
    assert (out2[:, 3] - out[:, 3]).abs().max() > 1e-3               # ... and does see u_j
    ids2 = ids.clone()
    ids2[:, 1] = 9
    assert (student(ids2, u) - out).abs().max() > 1e-3               # the context matters


def test_positions_follow_the_official_shift(teacher):
    """Slot j sits at position id T - 1 + j: with the auxiliary embedding replaced by the token
    embedding of the last context token, slot 0 reproduces the base model's last-position logits."""
    s = PTPForCausalLM.from_teacher(teacher, PTPConfig(num_anchors=1))
    ids = torch.tensor([[3, 4, 5, 6]])
    with torch.no_grad():
        s.aux_embed.anchors.weight.copy_(teacher.get_input_embeddings().weight[6])
        base = teacher(input_ids=torch.tensor([[3, 4, 5, 6, 6]])).logits[0, -1]
        # teacher with a repeated last token at a shared position id
        ref = teacher(input_ids=torch.tensor([[3, 4, 5, 6, 6]]), position_ids=torch.tensor([[0, 1, 2, 3, 3]]),
                      attention_mask=torch.ones(1, 5, dtype=torch.long)).logits[0, -1]
        got = s(ids, torch.tensor([[0.5]]))[0, 0]
    torch.testing.assert_close(got, ref, atol=1e-5, rtol=1e-5)
    assert (got - base).abs().max() > 1e-4


def test_independent_control_ignores_u_and_picks_from_its_marginals(teacher):
    torch.manual_seed(2)
    s = PTPForCausalLM.from_teacher(teacher, PTPConfig(independent=True)).eval()
    ids = torch.tensor([[3, 4, 5]])
    ua, ub = torch.tensor([[0.1, 0.2, 0.3]]), torch.tensor([[0.9, 0.7, 0.05]])
    torch.testing.assert_close(s(ids, ua), s(ids, ub))
    toks, _ = s.generate_parallel(ids, 3, u=ub)
    assert torch.equal(toks, pick(ub, torch.softmax(s(ids, ub).float(), -1)))


def test_generate_parallel_is_the_argmax_of_one_call(student):
    ids = torch.tensor([[3, 4, 5, 6]])
    u = torch.tensor([[0.2, 0.9, 0.4]], dtype=torch.float64)
    toks, u_back = student.generate_parallel(ids, 3, u=u)
    assert torch.equal(toks, student(ids, u).argmax(-1)) and torch.equal(u_back, u)
    t1, u1 = student.generate_parallel(torch.tensor([3, 4, 5, 6]), 4, generator=torch.Generator().manual_seed(0))
    assert t1.shape == (1, 4) and u1.shape == (1, 4) and ((u1 >= 0) & (u1 < 1)).all()


def test_state_dict_round_trip(teacher, student):
    sd = student.state_dict()
    assert "aux_embed.anchors.weight" in sd and any(k.startswith("model.") for k in sd)
    fresh = PTPForCausalLM.from_teacher(teacher)
    fresh.load_state_dict(sd)
    ids, u = torch.tensor([[3, 4, 5]]), torch.tensor([[0.3, 0.6]])
    torch.testing.assert_close(fresh.eval()(ids, u), student(ids, u))


def test_bfloat16_model():
    t = _teacher(seed=4).to(torch.bfloat16)
    s = PTPForCausalLM.from_teacher(t)
    assert s.aux_embed.anchors.weight.dtype == torch.float32
    s.to(torch.bfloat16)
    out = s(torch.tensor([[3, 4]]), torch.tensor([[0.3, 0.6]]))
    assert out.dtype == torch.bfloat16 and out.shape == (1, 2, V) and torch.isfinite(out.float()).all()
    toks, _ = s.generate_parallel(torch.tensor([[3, 4]]), 2, u=torch.tensor([[0.3, 0.6]]))
    assert toks.shape == (1, 2)


# ------------------------------------------------------------------------------------------ training
def test_ptp_loss_is_the_cross_entropy_of_the_slots(student):
    seq = torch.tensor([[3, 4, 5, 6, 7, 8], [8, 7, 6, 5, 4, 3]])
    u = torch.rand(2, 6, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    loss = ptp_loss(student, seq, u, 2, 3)
    logits = student(seq[:, :2], u[:, 2:5])
    ref = F.cross_entropy(logits.reshape(-1, V), seq[:, 2:5].reshape(-1))
    torch.testing.assert_close(loss, ref)


def _text(teacher, n, length, seed):
    g = torch.Generator().manual_seed(seed)
    start = torch.randint(3, V, (n, 2), generator=g)
    return torch.cat([start, ar_sample(teacher, start, torch.rand(n, length - 2, generator=g, dtype=torch.float64))], 1)


def test_training_learns_the_teachers_pick_map(teacher):
    data = _text(teacher, 64, 14, 0)
    held = _text(teacher, 32, 14, 1)
    torch.manual_seed(0)
    s = PTPForCausalLM.from_teacher(teacher)
    g = torch.Generator().manual_seed(5)
    from iclr26.decoding.ptp.model import _teacher_probs
    P = _teacher_probs(teacher, held)
    u = torch.zeros(held.shape, dtype=torch.float64)
    u[:, 4:8] = sample_auxiliaries(P[:, 4:8], held[:, 4:8], generator=g)

    def acc():
        with torch.no_grad():
            return float((s(held[:, :4], u[:, 4:8]).argmax(-1) == held[:, 4:8]).float().mean())
    before = acc()
    losses = train_ptp(s, teacher, data, 120, k=4, batch_size=16, lr=3e-3, seed=0)
    assert len(losses) == 120 and np.mean(losses[-10:]) < 0.6 * np.mean(losses[:10])
    assert acc() > before + 0.2 and acc() > 0.6
    assert not s.training


def test_training_is_seeded_and_leaves_the_teacher_alone(teacher):
    data = _text(teacher, 16, 10, 2)
    before = {k: v.clone() for k, v in teacher.state_dict().items()}
    runs = []
    for burn in (1, 5):
        torch.manual_seed(0)
        s = PTPForCausalLM.from_teacher(teacher)
        torch.rand(burn)                       # the global generator must not matter: only `seed` does
        runs.append(train_ptp(s, teacher, data, 5, k=3, batch_size=4, seed=3))
    assert runs[0] == runs[1]
    assert all(torch.equal(before[k], v) for k, v in teacher.state_dict().items())


# ------------------------------------------------------------------------------------------ decoding
def test_ar_sample_is_sequential_pick(teacher):
    ids = torch.tensor([[3, 4, 5], [6, 7, 8]])
    u = torch.rand(2, 5, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    out = ar_sample(teacher, ids, u)
    for b in range(2):
        seq = ids[b].tolist()
        for n in range(5):
            with torch.no_grad():
                p = torch.softmax(teacher(input_ids=torch.tensor([seq])).logits[0, -1], -1)
            seq.append(_pick_reference(float(u[b, n]), p.numpy()))
        assert out[b].tolist() == seq[3:]
    assert torch.equal(ar_sample(teacher, ids[1], u[1]), out[1])


def test_verify_accepts_the_matching_prefix_plus_the_teachers_token():
    P = torch.tensor([[0.5, 0.5, 0.0], [0.1, 0.1, 0.8], [1.0, 0.0, 0.0], [0.0, 0.0, 1.0]])
    u = torch.tensor([0.7, 0.5, 0.3, 0.1])          # teacher tokens 1, 2, 0, 2
    assert verify_ptp(P, torch.tensor([1, 2, 0]), u) == (3, [1, 2, 0, 2])
    assert verify_ptp(P, torch.tensor([1, 0, 0]), u) == (1, [1, 2])
    assert verify_ptp(P, torch.tensor([0, 2, 0]), u) == (0, [1])


@pytest.mark.parametrize("k", [1, 3, 6])
def test_ptp_generate_equals_autoregressive_sampling_with_the_same_u(teacher, student, k):
    """The reduction: whatever the drafter proposes, the output is the teacher's inverse-CDF
    sample for the same auxiliaries, token for token."""
    for seed in range(3):
        prompt = torch.tensor([3 + seed, 4, 5, 9])
        u = torch.rand(20 + k + 1, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
        out, st = ptp_generate(teacher, student, prompt, 20, k=k, u=u)
        assert out == ar_sample(teacher, prompt, u[:20]).tolist()
        assert st.new_tokens == 20 and st.target_calls == st.cycles == st.draft_steps
        assert st.drafted == k * st.cycles
        assert sum(st.accepted) + st.cycles >= 20 and all(0 <= a <= k for a in st.accepted)


def test_a_perfect_drafter_gets_k_plus_one_tokens_per_call(teacher):
    """A drafter that knows the teacher (here: the teacher's own Pick chain) is always accepted."""
    class Oracle(PTPForCausalLM):
        def generate_parallel(self, input_ids, num_tokens=None, u=None, generator=None):
            return ar_sample(teacher, input_ids, u), u
    oracle = Oracle.from_teacher(teacher)
    out, st = ptp_generate(teacher, oracle, torch.tensor([3, 4]), 12, k=3,
                           generator=torch.Generator().manual_seed(0))
    assert st.accepted[:3] == [3, 3, 3] and st.target_calls == 3 and len(out) == 12
    assert st.mean_accepted_length == 4.0


def test_generated_tokens_follow_the_teacher_distribution(teacher, student):
    """Distributional check of the decoding loop: the first two generated tokens over many draws
    against the teacher's exact joint probability of those two tokens."""
    prompt = torch.tensor([3, 4, 5])
    with torch.no_grad():
        p1 = torch.softmax(teacher(input_ids=prompt[None]).logits[0, -1], -1)
    g = torch.Generator().manual_seed(0)
    n = 300
    firsts = [ptp_generate(teacher, student, prompt, 2, k=2, generator=g)[0][0] for _ in range(n)]
    freq = torch.bincount(torch.tensor(firsts), minlength=V).double() / n
    assert float((freq - p1.double()).abs().sum()) / 2 < 0.12


def test_eos_stops_generation(teacher, student):
    prompt = torch.tensor([3, 4, 5])
    u = torch.rand(40, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    full = ar_sample(teacher, prompt, u[:30]).tolist()
    eos = full[4]
    out, st = ptp_generate(teacher, student, prompt, 30, k=4, u=u, eos_token_id=eos)
    assert out == full[: full.index(eos) + 1] and st.new_tokens == len(out)


def test_temperature_reaches_the_teacher(teacher, student):
    prompt = torch.tensor([3, 4, 5])
    u = torch.rand(20, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    out, _ = ptp_generate(teacher, student, prompt, 12, k=3, u=u, temperature=0.5)
    assert out == ar_sample(teacher, prompt, u[:12], temperature=0.5).tolist()
    assert out != ar_sample(teacher, prompt, u[:12]).tolist()


def test_short_u_is_extended(teacher, student):
    out, st = ptp_generate(teacher, student, torch.tensor([3, 4]), 10, k=3, u=torch.tensor([0.5, 0.2]),
                           generator=torch.Generator().manual_seed(0))
    assert len(out) == 10 and out[:1] == ar_sample(teacher, torch.tensor([3, 4]), torch.tensor([0.5])).tolist()


# ---------------------------------------------------------------------------------------- rejections
def test_rejections(teacher, student):
    p = torch.tensor([[0.5, 0.5]])
    with pytest.raises(ValueError, match=r"\[0, 1\)"):
        pick(torch.tensor([1.0]), p)
    with pytest.raises(ValueError, match=r"\[0, 1\)"):
        pick(torch.tensor([-0.1]), p)
    with pytest.raises(ValueError, match=r"\[0, 1\)"):
        pick(torch.tensor([float("nan")]), p)
    with pytest.raises(ValueError, match="floating-point"):
        pick(torch.tensor([0]), p)
    with pytest.raises(ValueError, match="shape"):
        pick(torch.tensor([0.1, 0.2]), p)
    with pytest.raises(ValueError, match="non-negative"):
        pick(torch.tensor([0.1]), torch.tensor([[0.5, -0.5]]))
    with pytest.raises(ValueError, match="finite"):
        pick(torch.tensor([0.1]), torch.tensor([[0.5, float("nan")]]))
    with pytest.raises(ValueError, match="positive sum"):
        pick(torch.tensor([0.1]), torch.tensor([[0.0, 0.0]]))
    with pytest.raises(ValueError, match="probabilities"):
        pick(torch.tensor(0.1), torch.tensor(0.5))
    with pytest.raises(ValueError, match=r"ids in \[0, 2\)"):
        token_intervals(p, torch.tensor([2]))
    with pytest.raises(ValueError, match=r"ids in \[0, 2\)"):
        token_intervals(p, torch.tensor([-1]))
    with pytest.raises(ValueError, match="tokens must have shape"):
        token_intervals(p, torch.tensor([0, 1]))
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        AuxiliaryEmbedding(4)(torch.tensor([1.5]))
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        AuxiliaryEmbedding(4)(torch.tensor([-0.5]))
    with pytest.raises(ValueError, match="floating-point"):
        AuxiliaryEmbedding(4)(torch.tensor([1]))
    with pytest.raises(ValueError, match="num_anchors"):
        AuxiliaryEmbedding(4, num_anchors=0)
    with pytest.raises(ValueError, match="hidden_size"):
        AuxiliaryEmbedding(True)
    with pytest.raises(ValueError, match="num_anchors"):
        PTPConfig(num_anchors=0)
    with pytest.raises(ValueError, match="independent"):
        PTPConfig(independent=1)
    with pytest.raises(ValueError, match="'linear', 'cos' or 'bins'"):
        PTPConfig(embedding="sawtooth")
    with pytest.raises(ValueError, match="'linear', 'cos' or 'bins'"):
        AuxiliaryEmbedding(4, kind="bits")
    with pytest.raises(TypeError, match="causal LM"):
        PTPForCausalLM(torch.nn.Linear(2, 2))
    with pytest.raises(ValueError, match="input_ids"):
        student(torch.tensor([3, 4]), torch.tensor([[0.5]]))
    with pytest.raises(ValueError, match="u must be"):
        student(torch.tensor([[3, 4]]), torch.tensor([0.5]))
    with pytest.raises(ValueError, match="u must be"):
        student(torch.tensor([[3, 4]]), torch.tensor([[0.5], [0.5]]))
    with pytest.raises(ValueError, match="num_tokens"):
        student.generate_parallel(torch.tensor([[3, 4]]), 0)
    with pytest.raises(ValueError, match="num_tokens = 3"):
        student.generate_parallel(torch.tensor([[3, 4]]), 3, u=torch.tensor([[0.1, 0.2]]))
    seq = torch.tensor([[3, 4, 5, 6]])
    with pytest.raises(ValueError, match="shape of sequences"):
        ptp_loss(student, seq, torch.zeros(1, 3), 1, 2)
    with pytest.raises(ValueError, match="start \\+ k <= length"):
        ptp_loss(student, seq, torch.zeros(1, 4), 2, 3)
    with pytest.raises(ValueError, match="start \\+ k <= length"):
        ptp_loss(student, seq, torch.zeros(1, 4), 0, 2)
    with pytest.raises(ValueError, match="steps"):
        train_ptp(student, teacher, seq, 0)
    with pytest.raises(ValueError, match="min_context \\+ k"):
        train_ptp(student, teacher, seq, 1, k=3)
    with pytest.raises(ValueError, match="max_new_tokens"):
        ptp_generate(teacher, student, [3, 4], 0)
    with pytest.raises(ValueError, match="k must"):
        ptp_generate(teacher, student, [3, 4], 5, k=0)
    for bad in (0.0, -1.0, float("nan")):
        with pytest.raises(ValueError, match="temperature"):
            ptp_generate(teacher, student, [3, 4], 5, temperature=bad)
        with pytest.raises(ValueError, match="temperature"):
            ar_sample(teacher, [3, 4], torch.tensor([0.5]), temperature=bad)
    with pytest.raises(ValueError, match="non-empty"):
        ptp_generate(teacher, student, [], 5)
    with pytest.raises(ValueError, match=r"\[0, 1\)"):
        ptp_generate(teacher, student, [3, 4], 2, k=1, u=torch.tensor([0.1, 1.2, 0.3]))
    with pytest.raises(ValueError, match="K\\+1"):
        verify_ptp(torch.ones(3, V) / V, torch.tensor([1, 2, 3]), torch.rand(4))
    with pytest.raises(ValueError, match="K\\+1"):
        verify_ptp(torch.ones(4, V) / V, torch.tensor([1, 2, 3]), torch.rand(3))


@pytest.mark.slow
def test_quick_scale_runs_one_seed():
    from iclr26.decoding.ptp import experiment
    r = experiment.run("quick", 0)
    assert set(r["metrics"]["tokens_per_call"]) == {"ptp", "independent", "speculative", "ar"}
    assert r["info"]["ptp_vs_ar_token_mismatches"] == 0


def test_train_ptp_defaults_and_argument_checks(teacher):
    import inspect
    d = {k: v.default for k, v in inspect.signature(train_ptp).parameters.items() if v.default is not inspect._empty}
    assert d == dict(k=8, batch_size=32, lr=1e-3, min_context=2, seed=0, temperature=1.0, clip_grad=1.0,
                     aux_concentration=None)
    s = PTPForCausalLM.from_teacher(teacher)
    seq = _text(teacher, 4, 5, 3)
    for name, kw in (("steps", dict(steps=True)), ("k", dict(k=0)), ("batch_size", dict(batch_size=0)),
                     ("min_context", dict(min_context=0))):
        args = dict(steps=1, k=2, batch_size=2)
        args.update(kw)
        with pytest.raises(ValueError, match=f"^{name} must be a positive integer"):
            train_ptp(s, teacher, seq, **args)
    with pytest.raises(ValueError, match="min_context \\+ k = 6"):
        train_ptp(s, teacher, seq, 1, k=4, batch_size=2)
    # exactly min_context + k tokens is enough
    assert len(train_ptp(s, teacher, seq, 2, k=3, batch_size=2)) == 2


def test_train_ptp_uses_the_teachers_temperature(teacher):
    data = _text(teacher, 8, 10, 4)
    runs = []
    for temp in (1.0, 0.3):
        torch.manual_seed(0)
        s = PTPForCausalLM.from_teacher(teacher)
        runs.append(train_ptp(s, teacher, data, 3, k=3, batch_size=4, seed=1, temperature=temp))
    assert runs[0] != runs[1]


def test_token_intervals_on_unnormalised_batched_probs():
    probs = torch.tensor([[[2.0, 2.0], [1.0, 3.0]], [[4.0, 0.0], [0.5, 0.5]]], dtype=torch.float64)
    lo, hi = token_intervals(probs, torch.tensor([[1, 1], [0, 0]]))
    torch.testing.assert_close(lo, torch.tensor([[0.5, 0.25], [0.0, 0.0]], dtype=torch.float64))
    torch.testing.assert_close(hi, torch.tensor([[1.0, 1.0], [1.0, 0.5]], dtype=torch.float64))
    with pytest.raises(ValueError, match=r"probs.shape\[:-1\] = \(2, 2\), got \(2,\)"):
        token_intervals(probs, torch.tensor([0, 1]))
    with pytest.raises(ValueError, match=r"ids in \[0, 2\)"):
        token_intervals(torch.ones(1, 3, 2), torch.tensor([[2, 0, 0]]))


def test_constructor_defaults_and_messages(teacher):
    emb = AuxiliaryEmbedding(4)
    assert emb.anchors.num_embeddings == 3 and emb.kind == "linear"
    with pytest.raises(ValueError, match="^hidden_size must be a positive integer"):
        AuxiliaryEmbedding(0)
    with pytest.raises(ValueError, match="^num_anchors must be a positive integer"):
        AuxiliaryEmbedding(4, num_anchors=True)
    with pytest.raises(ValueError, match="num_anchors"):
        PTPConfig(num_anchors=True)
    assert PTPConfig(embedding="bins").embedding == "bins" and PTPConfig(embedding="cos").embedding == "cos"

    class ConfigOnly:
        config = teacher.config
    with pytest.raises(TypeError, match="got ConfigOnly"):
        PTPForCausalLM(ConfigOnly())


def test_anchor_init_is_centred_and_falls_back_for_zero_embeddings():
    t = _teacher(seed=5)
    torch.manual_seed(0)
    s = PTPForCausalLM.from_teacher(t, PTPConfig(num_anchors=64))
    assert abs(float(s.aux_embed.anchors.weight.detach().mean())) < 0.1
    with torch.no_grad():
        t.get_input_embeddings().weight.zero_()
    s0 = PTPForCausalLM.from_teacher(t, PTPConfig(num_anchors=64))
    assert 0.015 < float(s0.aux_embed.anchors.weight.detach().std()) < 0.025


def test_ptp_loss_accepts_the_smallest_context_and_block(student):
    seq = torch.tensor([[3, 4, 5]])
    u = torch.full((1, 3), 0.5, dtype=torch.float64)
    loss = ptp_loss(student, seq, u, 1, 1)
    ref = F.cross_entropy(student(seq[:, :1], u[:, 1:2]).reshape(-1, V), seq[:, 1:2].reshape(-1))
    torch.testing.assert_close(loss, ref)


def test_prompt_shapes(teacher, student):
    u = torch.rand(12, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    out, _ = ptp_generate(teacher, student, [3], 5, k=2, u=u)          # a one-token prompt
    assert out == ar_sample(teacher, torch.tensor([3]), u[:5]).tolist()
    out2, _ = ptp_generate(teacher, student, torch.tensor([[3, 4]]), 5, k=2, u=u)   # (1, T) is fine
    assert out2 == ar_sample(teacher, torch.tensor([3, 4]), u[:5]).tolist()
    with pytest.raises(ValueError, match="non-empty 1-D"):
        ptp_generate(teacher, student, torch.tensor([[3, 4], [5, 6]]), 5)


def test_counts_reject_bools(teacher, student):
    with pytest.raises(ValueError, match="max_new_tokens must be a positive integer, got True"):
        ptp_generate(teacher, student, [3, 4], True)
    with pytest.raises(ValueError, match="k must be a positive integer, got True"):
        ptp_generate(teacher, student, [3, 4], 3, k=True)


# ------------------------------------------------------------------------------ the analytic teacher
from iclr26.decoding.ptp.toy import (  # noqa: E402
    IncreasingSequenceTeacher, closed_form_tokens, increasing_sequences, leading_match_length, marginal_probs,
)
from iclr26.models.speculative import target_forward  # noqa: E402


def _toy_reference_probs(ids, V):
    """P(next | current) by the rule of the official toy teacher, one entry at a time."""
    out = np.zeros((len(ids), V))
    for n, a in enumerate(ids):
        if a == V - 1:
            out[n, a] = 1.0
        else:
            out[n, a] = out[n, a + 1] = 0.5
    return out


def test_toy_teacher_equals_its_closed_form():
    V = 7
    t = IncreasingSequenceTeacher(V)
    ids = torch.tensor([[0, 1, 1, 3, 5, 6, 6, 2]])
    p = torch.softmax(t(ids).logits.float(), -1)[0]
    np.testing.assert_allclose(p.numpy(), _toy_reference_probs(ids[0].tolist(), V), atol=1e-7)
    _, lg = target_forward(t, ids)             # the interface the library's decoding reads
    assert torch.equal(lg, t(ids).logits)
    assert t.config.vocab_size == V and t.config.eos_token_id == V - 1
    assert torch.equal(t.transition_matrix().sum(1), torch.ones(V))
    assert not any(p.requires_grad for p in t.parameters()) and not t.training
    assert IncreasingSequenceTeacher().config.vocab_size == 100     # the official default
    assert t.config.hidden_size == V and t.lm_head.bias is None
    two = IncreasingSequenceTeacher(2)                                # the smallest vocabulary
    assert torch.equal(two.transition_matrix(), torch.tensor([[0.5, 0.5], [0.0, 1.0]]))


def test_toy_closed_form_tokens_are_the_teachers_inverse_cdf_samples():
    V = 12
    t = IncreasingSequenceTeacher(V)
    g = torch.Generator().manual_seed(3)
    prompts = torch.tensor([[0, 0, 1], [4, 5, 5], [9, 10, 10], [0, 1, 11]])
    u = torch.rand(4, 9, generator=g, dtype=torch.float64)
    u[0, :3] = torch.tensor([0.5, 0.4999, 0.0])
    cf = closed_form_tokens(prompts[:, -1], u, V)
    assert torch.equal(cf, ar_sample(t, prompts, u))
    assert cf[0, :3].tolist() == [2, 2, 2]                    # u >= 1/2 steps up, u < 1/2 stays
    assert (cf[3] == V - 1).all() and cf.max() == V - 1       # clamped at the absorbing id
    # hand example: last token 2, u = (.7, .2, .9, .5) -> 3, 3, 4, 5
    assert closed_form_tokens(torch.tensor([2]), torch.tensor([[0.7, 0.2, 0.9, 0.5]]), V).tolist() == [[3, 3, 4, 5]]


def test_toy_marginals_are_clamped_binomials():
    from scipy.stats import binom

    V = 8
    m = marginal_probs(torch.tensor([1, 5]), 4, V)
    assert m.shape == (2, 4, V) and m.dtype == torch.float64
    assert torch.equal(marginal_probs(torch.tensor([1]), 1, V)[0, 0], torch.tensor([0, .5, .5, 0, 0, 0, 0, 0]).double())
    for j in range(1, 5):
        ref = np.zeros(V)
        for s in range(j + 1):
            ref[min(1 + s, V - 1)] += binom.pmf(s, j, 0.5)
        np.testing.assert_allclose(m[0, j - 1].numpy(), ref, atol=1e-12)
        ref = np.zeros(V)
        for s in range(j + 1):
            ref[min(5 + s, V - 1)] += binom.pmf(s, j, 0.5)
        np.testing.assert_allclose(m[1, j - 1].numpy(), ref, atol=1e-12)
    # Monte Carlo agrees with the marginal of the closed-form samples
    g = torch.Generator().manual_seed(0)
    u = torch.rand(20000, 4, generator=g, dtype=torch.float64)
    s = closed_form_tokens(torch.full((20000,), 1), u, V)
    freq = torch.stack([torch.bincount(s[:, j], minlength=V) for j in range(4)]).double() / 20000
    assert (freq - m[0]).abs().max() < 0.02


def test_toy_sequences_follow_the_official_data():
    g = torch.Generator().manual_seed(1)
    s = increasing_sequences(500, 30, 10, g)
    assert s.shape == (500, 30) and s.dtype == torch.long
    assert (s[:, 0] == 0).all()
    d = s.diff(dim=1)
    assert ((d == 0) | (d == 1)).all() and s.max() == 9
    assert abs(float((d[s[:, :-1] < 9] == 1).double().mean()) - 0.5) < 0.02
    assert (increasing_sequences(3, 4, 10, start=9) == 9).all()
    one = increasing_sequences(2, 1, 10, start=4)
    assert one.tolist() == [[4], [4]] and one.dtype == torch.long
    two = increasing_sequences(3, 2, 10, start=4)
    assert two.shape == (3, 2) and two.dtype == torch.long
    # the switches are float64 uniforms of the generator, cut at 1/2 (official make_data)
    u = torch.rand(6, 11, generator=torch.Generator().manual_seed(7), dtype=torch.float64)
    ref = torch.cat([torch.zeros(6, 1, dtype=torch.long), (u >= 0.5).long().cumsum(1).clamp(max=9)], 1)
    assert torch.equal(increasing_sequences(6, 12, 10, torch.Generator().manual_seed(7)), ref)
    assert torch.equal(increasing_sequences(5, 6, 10, torch.Generator().manual_seed(2)),
                       increasing_sequences(5, 6, 10, torch.Generator().manual_seed(2)))


def test_leading_match_length_hand_example():
    a = torch.tensor([[1, 2, 3, 4], [1, 2, 3, 4], [0, 2, 3, 4], [1, 2, 9, 4]])
    b = torch.tensor([[1, 2, 3, 4], [1, 2, 3, 5], [1, 2, 3, 4], [1, 2, 3, 4]])
    assert leading_match_length(a, b).tolist() == [4, 3, 0, 2]


def test_ptp_decoding_on_the_toy_teacher_reproduces_its_samples():
    V, k = 16, 5
    t = IncreasingSequenceTeacher(V)
    torch.manual_seed(0)
    lm = build_tiny_lm(TinyLMConfig(hidden_size=16, num_hidden_layers=1, intermediate_size=32), V,
                       pad_token_id=0, bos_token_id=0, eos_token_id=V - 1)
    s = PTPForCausalLM(lm, PTPConfig(embedding="bins", num_anchors=8)).eval()
    g = torch.Generator().manual_seed(5)
    u = torch.rand(30 + k + 1, generator=g, dtype=torch.float64)
    out, st = ptp_generate(t, s, torch.tensor([0, 1, 1]), 30, k=k, u=u)
    assert out == closed_form_tokens(torch.tensor([1]), u[None, :30], V)[0].tolist()
    assert st.new_tokens == 30 and st.target_calls == len(st.accepted)
    # a student that always proposes the closed form is accepted in full: k + 1 tokens per call
    class Oracle:
        def generate_parallel(self, ids, num_tokens, u):
            return closed_form_tokens(ids[:, -1], u, V), u
    out2, st2 = ptp_generate(t, Oracle(), torch.tensor([0, 1, 1]), 30, k=k, u=u)
    assert out2 == out and st2.accepted == [k] * 5 and st2.target_calls == 5


def test_toy_rejections():
    with pytest.raises(ValueError, match="vocab_size must be an integer >= 2"):
        IncreasingSequenceTeacher(1)
    with pytest.raises(ValueError, match="vocab_size"):
        IncreasingSequenceTeacher(True)
    with pytest.raises(ValueError, match="vocab_size"):
        IncreasingSequenceTeacher(5.0)
    t = IncreasingSequenceTeacher(5)
    with pytest.raises(ValueError, match=r"token ids must lie in \[0, 5\)"):
        t(torch.tensor([[0, 5]]))
    with pytest.raises(ValueError, match=r"token ids must lie in \[0, 5\)"):
        t(torch.tensor([[-1, 2]]))
    with pytest.raises(ValueError, match="integer tensor"):
        t(torch.tensor([[0.0, 1.0]]))
    with pytest.raises(ValueError, match="integer tensor"):
        t(torch.tensor([[True, False]]))
    with pytest.raises(ValueError, match=r"input_ids must be \(batch, length\)"):
        t(torch.tensor([0, 1]))
    with pytest.raises(ValueError, match=r"^u must lie in \[0, 1\)$"):
        closed_form_tokens(torch.tensor([0]), torch.tensor([[1.0]]), 5)
    with pytest.raises(ValueError, match="u must lie in"):
        closed_form_tokens(torch.tensor([0]), torch.tensor([[-0.1]]), 5)
    with pytest.raises(ValueError, match=r"need last \(B,\)"):
        closed_form_tokens(torch.tensor([0, 1]), torch.tensor([[0.1]]), 5)
    with pytest.raises(ValueError, match=r"need last \(B,\)"):
        closed_form_tokens(torch.tensor([0]), torch.tensor([0.1]), 5)
    with pytest.raises(ValueError, match=r"need last \(B,\)"):
        closed_form_tokens(torch.tensor([0]), torch.tensor([[1]]), 5)
    with pytest.raises(ValueError, match="token ids"):
        closed_form_tokens(torch.tensor([5]), torch.tensor([[0.1]]), 5)
    with pytest.raises(ValueError, match="k must be a positive integer"):
        marginal_probs(torch.tensor([0]), 0, 5)
    with pytest.raises(ValueError, match="k must be a positive integer"):
        marginal_probs(torch.tensor([0]), True, 5)
    with pytest.raises(ValueError, match=r"last must be \(B,\)"):
        marginal_probs(torch.tensor([[0]]), 2, 5)
    with pytest.raises(ValueError, match="n must be a positive integer"):
        increasing_sequences(0, 3, 5)
    with pytest.raises(ValueError, match="length must be a positive integer"):
        increasing_sequences(2, True, 5)
    with pytest.raises(ValueError, match=r"start must be a token id in \[0, 5\)"):
        increasing_sequences(2, 3, 5, start=5)
    with pytest.raises(ValueError, match="start"):
        increasing_sequences(2, 3, 5, start=-1)
    with pytest.raises(ValueError, match="start"):
        increasing_sequences(2, 3, 5, start=False)
    with pytest.raises(ValueError, match=r"pred and ref must be \(B, K\)"):
        leading_match_length(torch.zeros(2, 3), torch.zeros(2, 4))
    with pytest.raises(ValueError, match=r"pred and ref must be \(B, K\)"):
        leading_match_length(torch.zeros(3), torch.zeros(3))


@pytest.mark.llm
def test_exact_verification_with_smollm2_equals_the_teachers_own_sampling():
    from iclr26.models import load

    teacher, tok = load("smollm2-135m")
    torch.manual_seed(0)
    s = PTPForCausalLM.from_teacher(teacher).eval()
    ids = torch.tensor(tok("The capital of France is").input_ids)
    g = torch.Generator().manual_seed(0)
    u = torch.rand(6 + 3 + 1, generator=g, dtype=torch.float64)
    out, st = ptp_generate(teacher, s, ids, 6, k=3, u=u, temperature=0.7)
    assert out == ar_sample(teacher, ids, u[:6], temperature=0.7).tolist()
    # near-zero u picks the teacher's most likely token first under a peaked distribution: greedy check
    with torch.no_grad():
        logits = teacher(ids[None]).logits[0, -1].float()
    greedy, p = logits.argmax(), torch.softmax(logits, -1)
    assert int(pick(torch.tensor([float(p[:greedy].sum()) + 1e-9], dtype=torch.float64), p[None])) == int(greedy)
    del teacher, s
