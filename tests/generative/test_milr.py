"""Tests of MILR test-time latent reasoning (src/iclr26/generative/milr)."""

import numpy as np
import pytest
import torch

from iclr26.generative.milr import (LatentReasoner, SceneSpec, TinyUnifiedTransformer, best_of_n, check_scenes,
                                    n_optimised, prefix_log_prob, reinforce_step, scene_reward, train_scene_model)
from iclr26.generative.milr.reasoner import DECODINGS, OPTIMIZERS, RowAdam, check_rewards
from iclr26.generative.milr.scenes import (MAX_COUNT, DetectorCritic, all_prompts, object_token, relation_holds,
                                           relation_matrix, sample_layouts)

SPEC = SceneSpec(4)


class ToyModel:
    """A unified model with a known structure: the latent of every token is a fixed vector (plus an
    optional per-prompt offset); the text/image heads are linear maps; tokens after a prefix repeat
    the prefix's first token (or are sampled from the head at the base latent, or its argmax for
    greedy text, when there is no prefix)."""

    def __init__(self, n_text=5, n_image=50, d=4, vocab=4, seed=0, z0=(3.0, 0.5, 0.0, -0.5), offsets=None):
        g = torch.Generator().manual_seed(seed)
        self.n_text, self.n_image, self.d = n_text, n_image, d
        self.Wt = torch.eye(vocab, d) * 2.0 + 0.3 * torch.randn(vocab, d, generator=g)
        self.Wv = torch.eye(vocab, d) * 2.0 + 0.3 * torch.randn(vocab, d, generator=g)
        self.z0 = torch.tensor(z0[:d])                               # token 0 is the model's favourite
        self.offsets = offsets                                       # (n_prompts, d) or None
        self.calls = []
        self.greedy = []

    def base(self, prompts):
        z = self.z0.expand(len(prompts), self.d)
        if self.offsets is not None:
            z = z + self.offsets[torch.as_tensor(list(prompts)).long()]
        return z

    def head(self, modality, z):
        return z @ (self.Wt if modality == "text" else self.Wv).T

    def continue_sequences(self, prompts, text_prefix, image_prefix, generator=None, temperature=1.0,
                           greedy_text=False):
        B = len(prompts)
        self.calls.append((text_prefix.shape[1], image_prefix.shape[1]))
        self.greedy.append(greedy_text)
        tp, vp = torch.as_tensor(text_prefix).long(), torch.as_tensor(image_prefix).long()
        zb = self.base(prompts)
        if tp.shape[1] == 0:
            logits = self.head("text", zb) / temperature
            tp = logits.argmax(-1, keepdim=True) if greedy_text else torch.multinomial(
                torch.softmax(logits, -1), 1, generator=generator)
        if vp.shape[1] == 0:
            probs = torch.softmax(self.head("image", zb) / temperature, -1)
            vp = torch.multinomial(probs, 1, generator=generator)
        text = torch.cat([tp, tp[:, :1].expand(B, self.n_text - tp.shape[1])], 1)
        image = torch.cat([vp, vp[:, :1].expand(B, self.n_image - vp.shape[1])], 1)
        z = zb.unsqueeze(1)
        return text, image, z.expand(B, self.n_text, self.d).clone(), z.expand(B, self.n_image, self.d).clone()


SGD = dict(optimizer="sgd", decoding="sample")      # the plain REINFORCE step on sampled tokens


def toy_reward(target_text=3, target_image=None):
    def r(prompts, text, image):
        ok = text[:, 0] == target_text
        if target_image is not None:
            ok = ok & (image[:, 0] == target_image)
        return ok.float() - 1.0
    return r


# ---------------------------------------------------------------- equations

def test_n_optimised_is_floor_of_the_ratio_with_at_least_one_token():
    assert n_optimised(0.02, 576) == 11          # Janus-Pro: 576 image tokens, lambda_v = 0.02
    assert n_optimised(0.2, 100) == 20
    assert n_optimised(0.2, 4) == 1              # rounds to 0: one token kept
    assert n_optimised(0.02, 16) == 1
    assert n_optimised(0.5, 5) == 2
    assert n_optimised(0.3, 10) == 3             # floor(3.0000000000000004 - ...) is 3, not 2
    assert n_optimised(1.0, 7) == 7
    for bad in (0.0, -0.1, 1.5):
        with pytest.raises(ValueError, match="ratio must lie in"):
            n_optimised(bad, 10)
    with pytest.raises(ValueError, match="length must be a positive"):
        n_optimised(0.2, 0)


def test_prefix_log_prob_against_numpy():
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(3, 2, 5, generator=g, dtype=torch.float64)
    tok = torch.tensor([[1, 4], [0, 0], [3, 2]])
    for T in (1.0, 0.5):
        out = prefix_log_prob(logits, tok, T)
        L = logits.numpy() / T
        ref = [sum(L[b, i, tok[b, i]] - np.log(np.exp(L[b, i]).sum()) for i in range(2)) for b in range(3)]
        np.testing.assert_allclose(out.numpy(), ref, rtol=1e-12)


def test_reinforce_step_matches_the_analytic_softmax_gradient():
    # grad_z log softmax(W z)[x] = W[x] - sum_k p_k W[k]
    g = torch.Generator().manual_seed(1)
    W = torch.randn(6, 3, generator=g, dtype=torch.float64)
    z = torch.randn(4, 1, 3, generator=g, dtype=torch.float64)
    x = torch.tensor([[0], [5], [2], [2]])
    R = torch.tensor([-1.0, -0.5, 0.0, 2.0], dtype=torch.float64)
    out = reinforce_step(z, R, lambda zz: prefix_log_prob(zz @ W.T, x), lr=0.7)
    for b in range(4):
        p = torch.softmax(W @ z[b, 0], 0)
        grad = W[x[b, 0]] - p @ W
        torch.testing.assert_close(out[b, 0], z[b, 0] + 0.7 * R[b] * grad)
    torch.testing.assert_close(out[2], z[2])                                    # zero reward: no move
    torch.testing.assert_close(reinforce_step(z, R, lambda zz: prefix_log_prob(zz @ W.T, x), 0.0), z)
    assert not out.requires_grad


def test_a_negative_reward_lowers_the_sampled_token_probability():
    W = torch.eye(3)
    z = torch.tensor([[[2.0, 0.0, 0.0]]])
    x = torch.tensor([[0]])
    z2 = reinforce_step(z, torch.tensor([-1.0]), lambda zz: prefix_log_prob(zz @ W.T, x), lr=1.0)
    assert torch.softmax(z2[0, 0], 0)[0] < torch.softmax(z[0, 0], 0)[0]
    z3 = reinforce_step(z, torch.tensor([1.0]), lambda zz: prefix_log_prob(zz @ W.T, x), lr=1.0)
    assert torch.softmax(z3[0, 0], 0)[0] > torch.softmax(z[0, 0], 0)[0]


# ---------------------------------------------------------------- the reasoner on a known model

def test_optimised_token_counts_follow_the_mode():
    m = ToyModel(n_text=10, n_image=100)
    r = toy_reward()
    assert (LatentReasoner(m, r, mode="both").kt, LatentReasoner(m, r, mode="both").kv) == (2, 2)
    assert (LatentReasoner(m, r, mode="text").kt, LatentReasoner(m, r, mode="text").kv) == (2, 0)
    assert (LatentReasoner(m, r, mode="image").kt, LatentReasoner(m, r, mode="image").kv) == (0, 2)
    lr = LatentReasoner(m, r)
    assert (lr.text_ratio, lr.image_ratio, lr.lr, lr.max_steps, lr.mode) == (0.2, 0.02, 0.03, 30, "both")
    assert (lr.reward_threshold, lr.temperature, lr.optimizer, lr.decoding) == (0.0, 1.0, "adam", "argmax")


def test_policy_gradient_moves_away_from_failing_tokens_and_finds_the_rare_one():
    # two tokens: pushing the latent away from the failing token 0 can only raise token 1
    prompts = list(range(300))
    m = ToyModel(d=2, vocab=2, z0=(0.8, 0.0))
    p_target = float(torch.softmax(m.head("text", m.z0), -1)[1])
    assert 0.05 < p_target < 0.15                            # rare under the model
    solved = {}
    for lr in (0.0, 3.0):
        res = LatentReasoner(m, toy_reward(1), lr=lr, max_steps=7, mode="text", **SGD).generate(
            prompts, torch.Generator().manual_seed(0))
        solved[lr] = res.solved.float().mean().item()
        assert (res.solved == (res.text[:, 0] == 1)).all()
        assert (res.reward[res.solved] == 0).all()
        assert res.calls.max() <= 8 and res.calls.min() >= 1
        assert all(len(h) == c for h, c in zip(res.rewards, res.calls.tolist()))
        # solved prompts stop at their first success
        assert all(h[-1] == 0.0 and min(h[:-1], default=-1) < 0 for h, s in zip(res.rewards, res.solved) if s and len(h) > 1)
    iid = 1 - (1 - p_target) ** 8
    assert abs(solved[0.0] - iid) < 0.1                      # lr = 0: independent resampling
    assert solved[3.0] > solved[0.0] + 0.2                   # the latent update helps


def test_image_mode_keeps_the_first_text_and_decodes_from_image_prefixes():
    m = ToyModel(n_text=5, n_image=50)
    res = LatentReasoner(m, toy_reward(3), lr=3.0, max_steps=4, mode="image").generate(
        list(range(20)), torch.Generator().manual_seed(0))
    assert m.calls[0] == (0, 0)
    assert all(c == (5, 1) for c in m.calls[1:])             # whole text fixed, one image token optimised
    # the reward depends on the text only and image mode never changes it: no prompt improves
    assert (res.solved == (res.text[:, 0] == 3)).all()
    m2 = ToyModel(n_text=5, n_image=50)
    LatentReasoner(m2, toy_reward(3), lr=3.0, max_steps=2, mode="both").generate(list(range(20)),
                                                                                 torch.Generator().manual_seed(0))
    assert all(c == (1, 1) for c in m2.calls[1:])


def test_joint_mode_solves_a_task_needing_both_modalities():
    prompts = list(range(300))
    out = {}
    for mode in MODES_ALL:
        m = ToyModel(n_text=5, n_image=50, d=2, vocab=2, z0=(0.8, 0.0))
        res = LatentReasoner(m, toy_reward(1, 1), lr=3.0, max_steps=10, mode=mode, **SGD).generate(
            prompts, torch.Generator().manual_seed(1))
        out[mode] = res.solved.float().mean().item()
        assert (res.solved == ((res.text[:, 0] == 1) & (res.image[:, 0] == 1))).all()
    assert out["both"] > max(out["text"], out["image"]) + 0.1


MODES_ALL = ("text", "image", "both")


def test_best_sample_is_returned_when_unsolved():
    m = ToyModel()

    def graded(prompts, text, image):                      # never solved; best when text[0] == 1
        return torch.where(text[:, 0] == 1, -0.5, -1.0)

    res = LatentReasoner(m, graded, lr=0.5, max_steps=10, mode="text", **SGD).generate(list(range(50)),
                                                                              torch.Generator().manual_seed(0))
    assert not res.solved.any() and (res.calls == 11).all()
    for h, r, t in zip(res.rewards, res.reward, res.text[:, 0]):
        assert r == max(h)
        assert (t == 1) == (r == -0.5)


def test_reasoner_rejects_bad_arguments():
    m, r = ToyModel(), toy_reward()
    with pytest.raises(ValueError, match="mode must be one of"):
        LatentReasoner(m, r, mode="audio")
    with pytest.raises(ValueError, match="max_steps must be a non-negative integer"):
        LatentReasoner(m, r, max_steps=-1)
    with pytest.raises(ValueError, match="max_steps must be a non-negative integer"):
        LatentReasoner(m, r, max_steps=2.5)
    with pytest.raises(ValueError, match="lr must be a finite number"):
        LatentReasoner(m, r, lr=-0.1)
    with pytest.raises(ValueError, match="lr must be a finite number"):
        LatentReasoner(m, r, lr=float("inf"))
    with pytest.raises(ValueError, match="temperature must be > 0"):
        LatentReasoner(m, r, temperature=0.0)
    with pytest.raises(ValueError, match="ratio must lie in"):
        LatentReasoner(m, r, text_ratio=0.0)
    assert LatentReasoner(m, r, lr=0.0, max_steps=0).max_steps == 0
    with pytest.raises(ValueError, match="n must be a positive integer"):
        best_of_n(m, r, [0], 0)


def test_max_steps_zero_is_one_sample():
    m = ToyModel()
    res = LatentReasoner(m, toy_reward(), max_steps=0).generate(list(range(30)), torch.Generator().manual_seed(0))
    assert (res.calls == 1).all() and len(m.calls) == 1


def test_best_of_n_counts_calls_and_keeps_the_best():
    m = ToyModel()
    prompts = list(range(300))
    res = best_of_n(m, toy_reward(3), prompts, 8, generator=torch.Generator().manual_seed(0))
    p = float(torch.softmax(m.head("text", m.z0), -1)[3])
    assert abs(res.solved.float().mean().item() - (1 - (1 - p) ** 8)) < 0.08
    assert (res.solved == (res.text[:, 0] == 3)).all()
    assert (res.calls[~res.solved] == 8).all() and (res.calls[res.solved] <= 8).all()
    assert all(len(h) == c for h, c in zip(res.rewards, res.calls.tolist()))
    assert all(h[-1] == 0.0 for h, s in zip(res.rewards, res.solved) if s)
    # a higher temperature finds the rare token more often
    hot = best_of_n(m, toy_reward(3), prompts, 8, temperature=3.0, generator=torch.Generator().manual_seed(0))
    assert hot.solved.float().mean() > res.solved.float().mean() + 0.2

    def graded(prompts, text, image):
        return torch.where(text[:, 0] == 1, -0.5, -1.0)
    res = best_of_n(m, graded, prompts[:50], 6, generator=torch.Generator().manual_seed(2))
    for h, r, t in zip(res.rewards, res.reward, res.text[:, 0]):
        assert len(h) == 6 and r == max(h) and (t == 1) == (r == -0.5)


# ---------------------------------------------------------------- scenes and checker

def _scene(cells):
    img = np.zeros(16, dtype=np.int64)
    for c, tok in cells.items():
        img[c] = tok
    return img


def test_checker_sub_checks_one_at_a_time():
    red_sq, blue_ci, green_tr = object_token(0, 0), object_token(2, 1), object_token(1, 2)
    p = np.array([2, 0, 0, 0, 2, 1])                          # 2 red squares left of a blue circle
    good = _scene({0: red_sq, 4: red_sq, 5: blue_ci})
    cases = [(good, [1, 1, 1]),
             (_scene({0: red_sq, 4: red_sq, 5: blue_ci, 15: green_tr}), [0, 1, 1]),  # extra wrong object
             (_scene({0: red_sq, 5: blue_ci}), [1, 0, 1]),                           # one a only
             (_scene({0: red_sq, 8: red_sq, 4: red_sq, 5: blue_ci}), [1, 0, 1]),     # three a's
             (_scene({0: red_sq, 6: red_sq, 5: blue_ci}), [1, 1, 0]),                # one a right of b
             (_scene({0: red_sq, 4: red_sq, 5: blue_ci, 7: blue_ci}), [1, 0, 0]),    # two b's
             (_scene({0: red_sq, 4: red_sq}), [1, 0, 0]),                            # no b
             (_scene({5: blue_ci}), [1, 0, 0])]                                      # no a
    for img, want in cases:
        np.testing.assert_array_equal(check_scenes(p[None], img[None], SPEC)[0], np.array(want, bool))
    r = scene_reward(p[None].repeat(2, 0), None, torch.as_tensor(np.stack([good, cases[4][0]])), SPEC)
    torch.testing.assert_close(r, torch.tensor([0.0, -1 / 3]))
    with pytest.raises(ValueError, match="image must have shape"):
        check_scenes(p[None], good[None, :15], SPEC)
    with pytest.raises(ValueError, match="image must have shape"):
        check_scenes(p[None].repeat(2, 0), good[None], SPEC)


def test_relations_and_sampled_layouts():
    # (row, col) of a vs b: left / right / above / below
    assert relation_holds(0, 1, 0, 1, 2) and not relation_holds(0, 1, 2, 1, 2)
    assert relation_holds(1, 0, 3, 2, 2) and not relation_holds(1, 0, 1, 2, 2)
    assert relation_holds(2, 0, 3, 1, 0) and not relation_holds(2, 1, 3, 1, 0)
    assert relation_holds(3, 3, 0, 1, 0) and not relation_holds(3, 0, 0, 1, 0)
    R = relation_matrix(SPEC)
    assert R.shape == (4, 16, 16) and R[0, 0, 1] and not R[0, 1, 0] and R[3, 4, 0]
    P = all_prompts()
    assert len(P) == 3 * 12 * 4 * 11 and (P[:, 0] >= 1).all() and (P[:, 0] <= MAX_COUNT).all()
    text, image = sample_layouts(P, SPEC, np.random.default_rng(0))
    assert check_scenes(P, image, SPEC).all()
    assert ((text[:, 1:] != SPEC.none_token).sum(1) == P[:, 0]).all()
    assert (image[np.arange(len(P)), text[:, 0]] == object_token(P[:, 4], P[:, 5])).all()
    assert len(np.unique(text[:, 0])) == 16                    # b goes everywhere it can
    with pytest.raises(ValueError, match="side must be an integer >= 2"):
        SceneSpec(1)


def test_spec_sizes():
    s = SceneSpec(3)
    assert (s.n_cells, s.n_text, s.n_image, s.text_vocab, s.image_vocab, s.none_token) == (9, 4, 9, 10, 13, 9)


# ---------------------------------------------------------------- the tiny unified model

@pytest.fixture(scope="module")
def trained():
    return train_scene_model(all_prompts(), SPEC, steps=60, seed=0, d_model=32)


def test_tiny_model_learns_and_exposes_the_interface(trained):
    m = trained
    P = all_prompts()[::40]
    t, v = sample_layouts(P, SPEC, np.random.default_rng(1))
    fresh = TinyUnifiedTransformer(SPEC, d_model=32)
    assert m.loss(P, t, v) < 0.6 * fresh.loss(P, t, v)
    g = torch.Generator().manual_seed(0)
    text, image, zt, zv = m.continue_sequences(P, torch.zeros(len(P), 0), torch.zeros(len(P), 0), generator=g)
    assert text.shape == (len(P), 4) and image.shape == (len(P), 16)
    assert zt.shape == (len(P), 4, 32) and zv.shape == (len(P), 16, 32)
    h = m.hidden(P, text, image)
    torch.testing.assert_close(zt, h[:, 5:9])
    torch.testing.assert_close(zv, h[:, 9:25])
    # the latents are what the heads read: recomputed teacher-forced loss equals the head's CE
    ce = torch.nn.functional.cross_entropy(m.head("text", zt).flatten(0, 1), text.flatten()) + \
        torch.nn.functional.cross_entropy(m.head("image", zv).flatten(0, 1), image.flatten())
    torch.testing.assert_close(ce, m.loss(P, text, image))
    # prefixes are kept; causality: the text latents do not depend on the image
    t2, v2, zt2, _ = m.continue_sequences(P, text[:, :2], image[:, :3], generator=g)
    assert (t2[:, :2] == text[:, :2]).all() and (v2[:, :3] == image[:, :3]).all()
    h2 = m.hidden(P, text, torch.zeros_like(image))
    torch.testing.assert_close(h2[:, :9], h[:, :9])
    # even briefly trained, it has learned that most cells are empty (chance: 1 / 13)
    assert (image == 0).float().mean() > 0.5
    with pytest.raises(ValueError, match="modality must be 'text' or 'image'"):
        m.head("audio", zt)
    with pytest.raises(ValueError, match="prefixes may hold at most 4 text and 16 image"):
        m.continue_sequences(P, torch.zeros(len(P), 5), torch.zeros(len(P), 0))


def test_cached_decoding_at_low_temperature_matches_greedy_full_recompute(trained):
    # reference: greedy decoding recomputing the whole sequence (no key/value cache) at every step
    P = all_prompts()[::60]
    text, image = torch.zeros(len(P), 0, dtype=torch.long), torch.zeros(len(P), 0, dtype=torch.long)
    for mod, n in (("text", 4), ("image", 16)):
        for _ in range(n):
            h = trained.hidden(P, text, image)
            tok = trained.head(mod, h[:, -1]).argmax(-1, keepdim=True)
            text, image = (torch.cat([text, tok], 1), image) if mod == "text" else (text, torch.cat([image, tok], 1))
    a = trained.continue_sequences(P, torch.zeros(len(P), 0), torch.zeros(len(P), 0), torch.Generator().manual_seed(0), 1e-4)
    assert (a[0] == text).all(1).float().mean() > 0.95 and (a[1] == image).all(1).float().mean() > 0.9
    # forced prefixes go through the cache too
    b = trained.continue_sequences(P, text[:, :2], image[:, :5], torch.Generator().manual_seed(1), 1e-4)
    assert (b[0] == text).all(1).float().mean() > 0.95 and (b[1] == image).all(1).float().mean() > 0.9


def test_state_dict_round_trip_and_milr_runs_on_the_tiny_model(trained):
    clone = TinyUnifiedTransformer(SPEC, d_model=32)
    clone.load_state_dict(trained.state_dict())
    P = all_prompts()[::50]
    z = torch.zeros(len(P), 0)
    a = trained.continue_sequences(P, z, z, torch.Generator().manual_seed(3))
    b = clone.continue_sequences(P, z, z, torch.Generator().manual_seed(3))
    assert all(torch.equal(x, y) for x, y in zip(a[:2], b[:2]))

    def rw(p, t, v):
        return scene_reward(p, t, v, SPEC)
    before = {k: v.clone() for k, v in trained.state_dict().items()}
    res = LatentReasoner(trained, rw, max_steps=3, lr=0.3).generate(P, torch.Generator().manual_seed(0))
    ok = check_scenes(P, res.image.numpy(), SPEC).all(1)
    assert (ok == res.solved.numpy()).all()
    torch.testing.assert_close(res.reward, rw(P, res.text, res.image))
    assert all(torch.equal(v, trained.state_dict()[k]) for k, v in before.items())   # frozen weights


# ---------------------------------------------------------------- further reference and contract checks

def test_block_against_an_explicit_reference_and_the_cache():
    from iclr26.generative.milr.scenes import _Block
    torch.manual_seed(0)
    blk = _Block(8, 2).double()
    x = torch.randn(3, 5, 8, dtype=torch.float64)
    out, (k, v) = blk(x)
    # reference: pre-LN causal multi-head attention, then a GELU MLP, both residual
    h = blk.ln1(x)
    q, kk, vv = blk.qkv(h).split(8, -1)
    heads = []
    for i in range(2):
        sl = slice(4 * i, 4 * i + 4)
        s = q[..., sl] @ kk[..., sl].transpose(1, 2) / 2.0
        s = s.masked_fill(torch.triu(torch.ones(5, 5, dtype=torch.bool), 1), float("-inf"))
        heads.append(torch.softmax(s, -1) @ vv[..., sl])
    y = x + blk.proj(torch.cat(heads, -1))
    ref = y + blk.mlp[2](torch.nn.functional.gelu(blk.mlp[0](blk.ln2(y))))
    torch.testing.assert_close(out, ref)
    assert isinstance(blk.mlp[1], torch.nn.GELU)
    # chunks with a cache (one token, then three, then one) equal the full pass
    o1, c = blk(x[:, :1])
    o2, c = blk(x[:, 1:4], c)
    o3, c = blk(x[:, 4:], c)
    torch.testing.assert_close(torch.cat([o1, o2, o3], 1), out)
    torch.testing.assert_close(c[0], k)
    torch.testing.assert_close(c[1], v)


def test_model_forward_in_chunks_equals_the_full_forward():
    m = TinyUnifiedTransformer(SPEC, d_model=16).double()
    P = all_prompts()[::300]
    t, v = sample_layouts(P, SPEC, np.random.default_rng(0))
    full = m.hidden(P, t, v)
    ids = m._ids(P, t, v)
    h1, c = m._forward(ids[:, :7])
    h2, c = m._forward(ids[:, 7:12], c)
    h3, c = m._forward(ids[:, 12:], c)
    torch.testing.assert_close(torch.cat([h1, h2, h3], 1), full)


def test_token_ids_of_the_unified_vocabulary_are_disjoint():
    m = TinyUnifiedTransformer(SPEC, d_model=16)
    assert m.spec == SPEC and (m.text_offset, m.image_offset) == (22, 39) and m.embed.num_embeddings == 52
    P = all_prompts()
    ids = m._ids(P, np.zeros((len(P), 0)), np.zeros((len(P), 0))).numpy()
    sets = [set(ids[:, j]) for j in range(6)]
    assert all(max(s) < m.text_offset for s in sets)
    assert all(not (sets[i] & sets[j]) for i in range(6) for j in range(i + 1, 6))
    assert sorted(sets[0]) == [1, 2, 3] and sorted(sets[1]) == [4, 5, 6, 7]
    assert abs(float(m.pos.detach().std()) - 0.02) < 0.005


def test_training_loop_matches_a_reference_loop():
    from iclr26.generative.milr.scenes import TinyUnifiedTransformer as TUT
    P, spec = all_prompts()[::7], SceneSpec(3)
    m = train_scene_model(P, spec, steps=3, seed=4, batch_size=16, lr=1e-2, d_model=16)
    assert (m.n_image, m.pos.shape[1], len(m.blocks)) == (9, 16, 2)
    assert not any(p.requires_grad for p in m.parameters()) and not m.training
    torch.manual_seed(4)
    rng = np.random.default_rng(4)
    ref = TUT(spec, d_model=16, n_layers=2)
    opt = torch.optim.AdamW(ref.parameters(), lr=1e-2, weight_decay=0.01)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, 1e-2, total_steps=3, pct_start=0.1)
    for _ in range(3):
        p = P[rng.integers(0, len(P), 16)]
        loss = ref.loss(p, *sample_layouts(p, spec, rng))
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
    for (k, a), b in zip(m.state_dict().items(), ref.state_dict().values()):
        torch.testing.assert_close(a, b, msg=k)
    d = train_scene_model(P, spec, steps=1, seed=0)
    assert d.pos.shape[1] == 64


def test_layouts_use_every_cell_with_room_and_vary_the_a_cells():
    spec = SceneSpec(3)
    P = np.array([[3, 0, 0, 0, 2, 1]] * 400)                  # 3 a's left of b on a 3x3 grid
    t, v = sample_layouts(P, spec, np.random.default_rng(0))
    assert check_scenes(P, v, spec).all()
    assert set(t[:, 0] % 3) == {1, 2}                          # column 1 has room for exactly 3
    assert len({tuple(r) for r in t[t[:, 0] == 5, 1:]}) > 1     # a-cells are drawn, not fixed
    assert SceneSpec(2).n_cells == 4
    assert relation_holds(4, 0, 0, 1, 1) == False and np.asarray(relation_holds(4, 0, 0, 1, 1)).dtype == bool  # noqa: E712


def test_checker_is_per_scene_in_a_batch_and_reward_takes_arrays():
    p = np.array([[2, 0, 0, 0, 2, 1], [1, 0, 0, 0, 2, 1]])
    imgs = np.stack([_scene({0: object_token(0, 0), 4: object_token(0, 0), 5: object_token(2, 1)}),
                     _scene({5: object_token(2, 1)})])
    np.testing.assert_array_equal(check_scenes(p, imgs, SPEC), [[1, 1, 1], [1, 0, 0]])
    torch.testing.assert_close(scene_reward(p, None, imgs, SPEC), torch.tensor([0.0, -2 / 3]))


def test_reasoner_temperature_seeding_and_multi_token_prefixes():
    m = ToyModel(d=2, vocab=2, z0=(0.8, 0.0))
    prompts = list(range(400))
    hot = LatentReasoner(m, toy_reward(1), lr=0.0, max_steps=3, mode="text", temperature=4.0, **SGD)
    res = hot.generate(prompts, torch.Generator().manual_seed(0))
    p_hot = float(torch.softmax(m.head("text", m.z0) / 4.0, -1)[1])
    assert abs(res.solved.float().mean().item() - (1 - (1 - p_hot) ** 4)) < 0.08
    # the log-probability uses the temperature
    zt, tt = torch.randn(3, 1, 2), torch.tensor([[0], [1], [1]])
    torch.testing.assert_close(hot._log_prob(zt, None, tt, None), prefix_log_prob(m.head("text", zt), tt, 4.0))
    # results depend on the generator only, not on the global random state
    runs = []
    for glob in (1, 2):
        torch.manual_seed(glob)
        r = LatentReasoner(m, toy_reward(1), lr=1.0, max_steps=5, mode="both", **SGD).generate(
            prompts[:50], torch.Generator().manual_seed(3))
        runs.append(r)
    assert torch.equal(runs[0].text, runs[1].text) and torch.equal(runs[0].calls, runs[1].calls)
    # several optimised tokens per modality
    m2 = ToyModel(n_text=10, n_image=100)
    res = LatentReasoner(m2, toy_reward(3), lr=1.0, max_steps=3, mode="both").generate(
        list(range(20)), torch.Generator().manual_seed(0))
    assert all(c == (2, 2) for c in m2.calls[1:]) and res.text.shape == (20, 10)
    assert n_optimised(1.0, 1) == 1


def test_defaults_and_pass_through_arguments():
    m = TinyUnifiedTransformer()
    assert (m.pos.shape, len(m.blocks), m.blocks[0].n_heads, m.n_image) == ((26, 64), 2, 4, 16)
    P, spec = all_prompts()[::5], SceneSpec(3)
    one = train_scene_model(P, spec, steps=2, seed=1, d_model=16, n_layers=1)
    assert len(one.blocks) == 1
    # the default batch size (128), against the reference loop
    m = train_scene_model(P, spec, steps=3, seed=2, lr=1e-2, d_model=16)
    torch.manual_seed(2)
    rng = np.random.default_rng(2)
    ref = TinyUnifiedTransformer(spec, d_model=16)
    opt = torch.optim.AdamW(ref.parameters(), lr=1e-2, weight_decay=0.01)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, 1e-2, total_steps=3, pct_start=0.1)
    for _ in range(3):                      # Adam's first step is nearly sign-only: take three
        p = P[rng.integers(0, len(P), 128)]
        opt.zero_grad()
        ref.loss(p, *sample_layouts(p, spec, rng)).backward()
        opt.step()
        sched.step()
    for a, b in zip(m.state_dict().values(), ref.state_dict().values()):
        torch.testing.assert_close(a, b)


def test_hidden_is_the_final_norm_of_the_blocks_on_embeddings_plus_positions():
    m = TinyUnifiedTransformer(SPEC, d_model=16).double()
    with torch.no_grad():
        m.pos.normal_(0.0, 1.0)
    P = all_prompts()[::200]
    t, v = sample_layouts(P, SPEC, np.random.default_rng(0))
    ids = m._ids(P, t, v)
    h = m.embed(ids) + m.pos
    for blk in m.blocks:
        h, _ = blk(h)
    torch.testing.assert_close(m.hidden(P, t, v), m.norm(h))


def test_image_log_prob_uses_the_temperature():
    m = ToyModel(d=2, vocab=2, z0=(0.8, 0.0))
    r = LatentReasoner(m, toy_reward(1), mode="image", temperature=0.5)
    zv, tv = torch.randn(3, 1, 2), torch.tensor([[0], [1], [1]])
    torch.testing.assert_close(r._log_prob(None, zv, None, tv), prefix_log_prob(m.head("image", zv), tv, 0.5))


# ---------------------------------------------------------------- Adam and the argmax mode (official code)

def test_row_adam_matches_torch_adam_row_by_row():
    g = torch.Generator().manual_seed(5)
    B, D, lr = 3, 4, 0.07
    z0 = torch.randn(B, D, generator=g, dtype=torch.float64)
    adam = RowAdam((B, D), lr, dtype=torch.float64)
    refs = [torch.nn.Parameter(z0[b].clone()) for b in range(B)]
    opts = [torch.optim.Adam([p], lr=lr) for p in refs]            # PyTorch defaults, as the official code
    z = z0.clone()
    active = [[0, 1, 2], [0, 2], [0], [0, 2], [2], [0, 1, 2]]        # rows stop and resume: own step counts
    for rows in active:
        asc = torch.randn(len(rows), D, generator=g, dtype=torch.float64)
        z[rows] = adam.step(z[rows], asc, torch.tensor(rows))
        for j, b in enumerate(rows):
            opts[b].zero_grad()
            (-(asc[j] * refs[b]).sum()).backward()                  # loss -R log pi: its gradient is -ascent
            opts[b].step()
    for b in range(B):
        torch.testing.assert_close(z[b], refs[b].detach())
    assert adam.t.tolist() == [5, 2, 5]
    assert (adam.betas, adam.eps) == ((0.9, 0.999), 1e-8)


def _toy_text_reward(target=2):
    def r(prompts, text, image):                                  # graded: never 0 unless the target appears
        tok = text[:, 0]
        return torch.where(tok == target, 0.0, -1.0 + 0.1 * tok.float())
    return r


def test_adam_argmax_text_mode_matches_an_independent_reference_loop():
    n, d, lr, steps = 12, 4, 0.4, 12
    offsets = 0.8 * torch.randn(n, d, generator=torch.Generator().manual_seed(9))
    m = ToyModel(n_text=5, n_image=20, d=d, vocab=4, offsets=offsets.double())
    m.Wt, m.Wv, m.z0 = m.Wt.double(), m.Wv.double(), m.z0.double()      # float64: a tight comparison
    rw = _toy_text_reward()
    res = LatentReasoner(m, rw, lr=lr, max_steps=steps, mode="text").generate(list(range(n)),
                                                                             torch.Generator().manual_seed(0))
    assert all(m.greedy)                                       # greedy text in every decode
    for i in range(n):
        z = torch.nn.Parameter(m.base([i]).clone())            # (1, d): the one optimised text latent
        opt = torch.optim.Adam([z], lr=lr)
        tok = int(m.head("text", z.detach()).argmax())
        r = float(rw(None, torch.tensor([[tok]]), None)[0])
        hist, tvs = [r], []
        for _ in range(steps):
            if r >= 0:
                break
            opt.zero_grad()
            logp = torch.log_softmax(m.head("text", z), -1)[0]
            p_before = logp.exp().detach()
            (-r * logp[logp.argmax()]).backward()
            opt.step()
            with torch.no_grad():
                p_after = torch.softmax(m.head("text", z), -1)[0]
            tvs.append(0.5 * float((p_after - p_before).abs().sum()))
            tok = int(p_after.argmax())
            r = float(rw(None, torch.tensor([[tok]]), None)[0])
            hist.append(r)
        np.testing.assert_allclose(res.rewards[i], hist, rtol=0, atol=1e-6)
        np.testing.assert_allclose(res.moves[i], tvs, rtol=1e-9, atol=1e-12)
    assert res.solved.float().mean() > 0.5 and (res.calls > 1).any()


def test_argmax_mode_scores_the_argmax_token_and_samples_the_image_prefix():
    # constant failing reward, one plain step: in argmax mode every row takes the same step (the
    # argmax token's gradient) whatever it sampled; with sampled REINFORCE rows that drew different
    # tokens move differently
    m = ToyModel(n_text=5, n_image=50, d=2, vocab=2, z0=(0.3, 0.0))
    lr = 0.5

    def fail(p, t, v):
        return -torch.ones(len(p))
    res = LatentReasoner(m, fail, lr=lr, max_steps=1, mode="image", optimizer="sgd").generate(
        list(range(400)), torch.Generator().manual_seed(0))
    z = m.z0
    p = torch.softmax(m.head("image", z), -1)
    a = int(p.argmax())
    z1 = z + lr * (-1.0) * (m.Wv[a] - p @ m.Wv)
    tv = 0.5 * float((torch.softmax(m.head("image", z1), -1) - p).abs().sum())
    np.testing.assert_allclose([mv[0] for mv in res.moves], tv, rtol=1e-5)
    # the image prefix after the step is sampled (not the argmax) from the updated latents
    p1 = float(torch.softmax(m.head("image", z1), -1)[1])
    second = torch.tensor([0 if len(h) < 2 else 1 for h in res.rewards])
    assert (second == 1).all()
    m2 = ToyModel(n_text=5, n_image=50, d=2, vocab=2, z0=(0.3, 0.0))
    LatentReasoner(m2, fail, lr=lr, max_steps=1, mode="image", optimizer="sgd").generate(
        list(range(2000)), torch.Generator().manual_seed(1))
    assert m2.calls[1] == (5, 1)
    sampled = LatentReasoner(m, fail, lr=lr, max_steps=1, mode="image", optimizer="sgd", decoding="sample")
    res_s = sampled.generate(list(range(400)), torch.Generator().manual_seed(0))
    assert len({round(mv[0], 6) for mv in res_s.moves}) == 2        # two sampled tokens, two different steps
    assert 0.05 < p1 < 0.95


def test_argmax_image_prefix_frequencies_follow_the_updated_softmax():
    m = ToyModel(n_text=5, n_image=50, d=2, vocab=2, z0=(0.3, 0.0))

    class Rec:
        images = []

        def __call__(self, p, t, v):
            self.images.append(v[:, 0].clone())
            return -torch.ones(len(p))
    rec = Rec()
    LatentReasoner(m, rec, lr=0.0, max_steps=2, mode="image").generate(list(range(3000)),
                                                                       torch.Generator().manual_seed(2))
    p1 = float(torch.softmax(m.head("image", m.z0), -1)[1])
    for v in rec.images:                                          # lr = 0: the frozen latents' softmax
        assert abs(v.float().mean().item() - p1) < 0.03


def test_the_plain_step_at_the_papers_eta_barely_moves_the_prefix_and_adam_does(trained):
    P = all_prompts()[::40]

    def rw(p, t, v):
        return scene_reward(p, t, v, SPEC)
    tv = {}
    for opt in OPTIMIZERS:
        res = LatentReasoner(trained, rw, lr=0.03, max_steps=1, text_ratio=0.5, image_ratio=0.125,
                             optimizer=opt).generate(P, torch.Generator().manual_seed(0))
        tv[opt] = float(np.mean([mv[0] for mv in res.moves if mv]))
    assert tv["sgd"] < 0.01 and tv["adam"] > 3 * tv["sgd"]


def test_rejects_nan_rewards_and_empty_prompts():
    m = ToyModel()

    def nan_at_start(p, t, v):
        return torch.full((len(p),), float("nan"))

    def nan_later(p, t, v):                                       # finite for the first (greedy) text only
        return torch.where(t[:, 0] == 0, -1.0, float("nan"))

    for opt, dec in (("adam", "argmax"), ("sgd", "sample")):
        with pytest.raises(ValueError, match="non-finite rewards"):
            LatentReasoner(m, nan_at_start, optimizer=opt, decoding=dec).generate([0, 1], torch.Generator().manual_seed(0))
    with pytest.raises(ValueError, match="non-finite rewards"):
        LatentReasoner(m, nan_later, lr=5.0, max_steps=30, mode="text").generate(list(range(8)),
                                                                                torch.Generator().manual_seed(0))
    with pytest.raises(ValueError, match="non-finite rewards"):
        best_of_n(m, lambda p, t, v: torch.tensor([0.0, float("inf")]), [0, 1], 3)
    with pytest.raises(ValueError, match="one reward per prompt"):
        LatentReasoner(m, lambda p, t, v: torch.zeros(3)).generate([0, 1])
    for empty in ([], np.zeros((0, 6), dtype=np.int64)):
        with pytest.raises(ValueError, match="non-empty batch"):
            LatentReasoner(m, toy_reward()).generate(empty)
        with pytest.raises(ValueError, match="non-empty batch"):
            best_of_n(m, toy_reward(), empty, 2)
    with pytest.raises(ValueError, match="non-empty sequence"):
        LatentReasoner(m, toy_reward()).generate(None)
    with pytest.raises(ValueError, match="optimizer must be one of"):
        LatentReasoner(m, toy_reward(), optimizer="rmsprop")
    with pytest.raises(ValueError, match="decoding must be one of"):
        LatentReasoner(m, toy_reward(), decoding="greedy")
    with pytest.raises(ValueError, match="reward_threshold must be finite"):
        LatentReasoner(m, toy_reward(), reward_threshold=float("nan"))
    with pytest.raises(ValueError, match="temperature must be > 0"):
        best_of_n(m, toy_reward(), [0], 2, temperature=0.0)
    assert (OPTIMIZERS, DECODINGS) == (("adam", "sgd"), ("argmax", "sample"))


def test_check_rewards_converts_and_keeps_finite_values():
    torch.testing.assert_close(check_rewards(np.array([[-1.0], [0.0]]), 2), torch.tensor([-1.0, 0.0]))
    with pytest.raises(ValueError, match="non-finite rewards"):
        check_rewards([0.0, float("-inf")], 2)


def test_best_of_n_greedy_text_keeps_the_text_and_samples_the_image():
    m = ToyModel()
    res = best_of_n(m, toy_reward(3), list(range(100)), 4, greedy_text=True, generator=torch.Generator().manual_seed(0))
    assert all(m.greedy) and (res.text[:, 0] == int(m.head("text", m.z0).argmax())).all()
    assert len(torch.unique(res.image[:, 0])) > 1


# ---------------------------------------------------------------- the held-out evaluator

def test_detector_critic_is_exact_without_noise_and_deterministic_with_it():
    spec = SceneSpec(5)
    P = all_prompts()
    t, v = sample_layouts(P, spec, np.random.default_rng(0))
    v_bad = v.copy()
    v_bad[:, -1] = object_token(3, 2)
    for img in (v, v_bad):
        torch.testing.assert_close(DetectorCritic(spec, 0.0, 0.0)(P, t, img), scene_reward(P, t, img, spec))
    c = DetectorCritic(spec, miss=0.2, confuse=0.1, seed=3)
    seen = c.perceive(v)
    np.testing.assert_array_equal(seen, c.perceive(torch.as_tensor(v)))          # the same image, same view
    assert not np.array_equal(seen, DetectorCritic(spec, 0.2, 0.1, seed=4).perceive(v))
    obj = v > 0
    assert (seen[~obj] == 0).all()                                               # nothing is invented
    missed = obj & (seen == 0)
    changed = obj & (seen != 0) & (seen != v)
    assert abs(missed.sum() / obj.sum() - 0.2) < 0.02
    assert abs(changed.sum() / (obj & (seen != 0)).sum() - 0.1) < 0.02
    col, shp = np.divmod(v[changed] - 1, 3)
    np.testing.assert_array_equal(seen[changed], object_token((col + 1) % 4, shp))   # next colour, same shape
    ok_true = check_scenes(P, v, spec).all(1)
    passed = (c(P, t, v) == 0).numpy()
    assert ok_true.all() and 0.3 < passed.mean() < 0.8                           # correct scenes rejected at times
    with pytest.raises(ValueError, match="miss must lie in"):
        DetectorCritic(spec, miss=1.0)
    with pytest.raises(ValueError, match="confuse must lie in"):
        DetectorCritic(spec, confuse=-0.1)
    with pytest.raises(ValueError, match="image must have shape"):
        c.perceive(v[:, :10])


def test_tiny_model_greedy_text_is_the_argmax_of_its_own_latents(trained):
    P = all_prompts()[::30]
    z = torch.zeros(len(P), 0)
    a = trained.continue_sequences(P, z, z, torch.Generator().manual_seed(0), greedy_text=True)
    b = trained.continue_sequences(P, z, z, torch.Generator().manual_seed(1), greedy_text=True)
    assert torch.equal(a[0], b[0]) and not torch.equal(a[1], b[1])               # text fixed, image sampled
    text, image, zt, _ = a
    assert torch.equal(text, trained.head("text", zt).argmax(-1))
    c = trained.continue_sequences(P, text[:, :2], z, torch.Generator().manual_seed(2), greedy_text=True)
    assert torch.equal(c[0], text)
