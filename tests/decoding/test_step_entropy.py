"""Tests of step entropy (arXiv:2508.03346, Sec. 3): H(S_i) = sum_j H(t_ij), prune floor(kappa N)."""
import math

import numpy as np
import pytest
import torch

from iclr26.models.testing import widen_
from iclr26.decoding.step_entropy import (
    compress_cot,
    random_steps_matching_tokens,
    select_steps,
    skip_steps,
    split_steps,
    step_entropy,
    token_entropies,
)
from iclr26.models import random_char_lm


def wide_char_lm(seed: int = 0, std: float = 0.4):
    """The tiny Llama with its weight matrices redrawn at std 0.4 (20x the usual 0.02): next-token
    entropies of about 3.5 of 5.75 bits that vary from position to position, so an off-by-one in
    the position bookkeeping changes the result (the default init is near-uniform, 5.74 bits)."""
    model, tok = random_char_lm(seed=seed)
    widen_(model, std, seed)
    return model, tok


@pytest.fixture(scope="module")
def lm():
    return wide_char_lm(seed=0)


def test_fixture_is_far_from_uniform(lm):
    model, tok = lm
    ids = torch.tensor([tok("q: 2+3?\n2+3=5\n\nso 5", add_special_tokens=False)["input_ids"]])
    with torch.no_grad():
        h = token_entropies(model(ids).logits[0])
    assert float(h.mean()) < 0.8 * math.log2(len(tok))
    assert float(h.max() - h.min()) > 1.0


def test_entropy_is_read_at_the_predicting_position(lm):
    """Token k's entropy comes from the distribution at position k - 1 (the one that produced it):
    reading one position later or earlier gives a different step entropy."""
    model, tok = lm
    prompt, steps = "q: 2+3?\n", ["2+3=5", "so 5", "answer 5."]
    got = np.array(step_entropy(model, tok, prompt, steps))
    ids = tok(prompt + steps[0] + "\n\n" + steps[1] + "\n\n" + steps[2], add_special_tokens=False)["input_ids"]
    n_p = len(tok(prompt, add_special_tokens=False)["input_ids"])
    lens = [len(tok(x, add_special_tokens=False)["input_ids"]) for x in (steps[0] + "\n\n", steps[1] + "\n\n", steps[2])]
    with torch.no_grad():
        h = token_entropies(model(torch.tensor([ids])).logits[0]).numpy()
    bounds = np.cumsum([0] + lens)

    def read(offset):
        return np.array([h[n_p - 1 + offset + a:n_p - 1 + offset + b].sum() for a, b in zip(bounds[:-1], bounds[1:])])

    np.testing.assert_allclose(got, read(0), rtol=1e-5)
    assert np.abs(got - read(1)).max() > 0.5
    assert np.abs(got - read(-1)).max() > 0.5


def test_token_entropy_hand_values():
    """H(uniform over 4) = 2 bits; H(one-hot) = 0; H(p=(.5,.25,.25)) = 1.5 bits."""
    logits = torch.tensor([[0.0, 0.0, 0.0, 0.0],
                           [0.0, -1e4, -1e4, -1e4],
                           [math.log(0.5), math.log(0.25), math.log(0.25), -1e4]])
    torch.testing.assert_close(token_entropies(logits), torch.tensor([2.0, 0.0, 1.5]))
    torch.testing.assert_close(token_entropies(logits[:1], base=math.e), torch.tensor([math.log(4)]))


def test_step_entropy_is_sum_of_token_entropies(lm):
    """Step entropy = sum over the step's tokens (separator included) of the teacher-forced
    token entropies, computed here independently token by token."""
    model, tok = lm
    prompt, steps = "q: 2+3?\n", ["2+3=5", "so 5", "answer 5."]
    got = step_entropy(model, tok, prompt, steps)
    text_pieces = [steps[0] + "\n\n", steps[1] + "\n\n", steps[2]]
    ids = tok(prompt, add_special_tokens=False)["input_ids"]
    ref = []
    for piece in text_pieces:
        total = 0.0
        for t in tok(piece, add_special_tokens=False)["input_ids"]:
            with torch.no_grad():
                p = torch.softmax(model(torch.tensor([ids])).logits[0, -1].double(), -1)
            total += float(-(p * torch.log2(p)).sum())
            ids = ids + [t]
        ref.append(total)
    np.testing.assert_allclose(got, ref, rtol=1e-4)
    mean = step_entropy(model, tok, prompt, steps, reduction="mean")
    lens = [len(tok(p, add_special_tokens=False)["input_ids"]) for p in text_pieces]
    np.testing.assert_allclose(mean, np.array(ref) / lens, rtol=1e-4)


def test_split_and_select():
    assert split_steps("a\n\nb\n\n\n\nc") == ["a", "b", "c"]
    e = [5.0, 1.0, 3.0, 0.5, 4.0]
    assert select_steps(e, 0.8, "low") == [1, 2, 3, 4]      # floor(0.8 * 5) = 4 lowest
    assert select_steps(e, 0.4, "low") == [1, 3]
    assert select_steps(e, 0.4, "high") == [0, 4]
    r = select_steps(e, 0.4, "random", rng=np.random.default_rng(0))
    assert len(r) == 2 and r == select_steps(e, 0.4, "random", rng=np.random.default_rng(0))
    assert select_steps([1.0, 2.0], 0.4, "low") == []       # floor(0.8) = 0


def test_compress_cot_and_kappa_zero_reduction():
    steps, e = ["s1", "s2", "s3"], [2.0, 1.0, 3.0]
    assert compress_cot(steps, e, kappa=0.5) == "s1\n\n[SKIP]\n\ns3"
    assert compress_cot(steps, e, kappa=0.0) == "s1\n\ns2\n\ns3"     # no pruning = original CoT
    assert compress_cot(steps, e, kappa=0.5, sep="\n", skip_token="<s>") == "s1\n<s>\ns3"
    assert compress_cot(steps, e, kappa=1.0, mode="high") == "[SKIP]\n\n[SKIP]\n\n[SKIP]"


def test_rejections(lm):
    model, tok = lm
    with pytest.raises(ValueError, match="kappa"):
        select_steps([1.0], 1.5)
    with pytest.raises(ValueError, match="mode"):
        select_steps([1.0], 0.5, mode="middle")
    with pytest.raises(ValueError, match="rng"):
        select_steps([1.0, 2.0], 0.5, mode="random")
    with pytest.raises(ValueError, match="2 steps but 1 entropies"):
        compress_cot(["a", "b"], [1.0])
    with pytest.raises(TypeError, match="split_steps"):
        step_entropy(model, tok, "q", "a\n\nb")
    with pytest.raises(ValueError, match=r"reduction must be one of \('sum', 'mean', 'none'\)"):
        step_entropy(model, tok, "q", ["a"], reduction="max")
    with pytest.raises(ValueError, match="sep"):
        split_steps("a", sep="")
    with pytest.raises(ValueError, match="prompt must contain at least one token"):
        step_entropy(model, tok, "", ["a"])
    with pytest.raises(ValueError, match="base must be > 1"):
        token_entropies(torch.zeros(1, 3), base=float("nan"))
    with pytest.raises(ValueError, match="entropies must be a 1-D sequence of finite numbers"):
        select_steps([1.0, float("nan")], 0.5)
    with pytest.raises(TypeError, match="cot must be a string"):
        split_steps(["a"])


def test_edge_cases_of_selection_splitting_and_entropy():
    # batched logits (3-D): entropy along the vocabulary axis only
    logits = torch.randn(2, 3, 5)
    ref = -(torch.softmax(logits, -1) * torch.log_softmax(logits, -1)).sum(-1) / math.log(2)
    torch.testing.assert_close(token_entropies(logits), ref)
    with pytest.raises(ValueError, match="base must be > 1, got 1"):
        token_entropies(logits, base=1.0)
    # splitting is at the separator only, not at other whitespace
    assert split_steps("a b\n\nc d") == ["a b", "c d"]
    assert split_steps("a|b||c", sep="|") == ["a", "b", "c"]
    for bad in (None, 3):
        with pytest.raises(ValueError, match=r"^sep must be a non-empty string \(the paper splits steps at '\\n\\n'\)$"):
            split_steps("a", sep=bad)
    with pytest.raises(TypeError, match="^cot must be a string, got list$"):
        split_steps(["a"])
    with pytest.raises(TypeError, match=r"^kappa must be a number in \[0, 1\], got 'x'$"):
        select_steps([1.0], "x")
    with pytest.raises(ValueError, match="^entropies must be a 1-D sequence of finite numbers$"):
        select_steps([[1.0, 2.0]], 0.5)
    with pytest.raises(ValueError, match=r"^mode='random' needs rng \(a numpy Generator\) for reproducibility$"):
        select_steps([1.0, 2.0], 0.5, mode="random")
    # ties keep the earlier step first (stable), also on long chains
    e = [1.0] * 40 + [0.5] * 40
    assert select_steps(e, 0.75, "low") == list(range(0, 20)) + list(range(40, 80))
    assert select_steps(e, 0.25, "high") == list(range(0, 20))
    # random pruning drops distinct steps, and compress_cot passes its rng on
    for seed in range(5):
        r = select_steps(list(range(10)), 0.9, "random", rng=np.random.default_rng(seed))
        assert len(r) == len(set(r)) == 9
    out = compress_cot(["s1", "s2", "s3", "s4"], [1, 2, 3, 4], kappa=0.5, mode="random",
                       rng=np.random.default_rng(0))
    drop = select_steps([1, 2, 3, 4], 0.5, "random", rng=np.random.default_rng(0))
    assert out == "\n\n".join("[SKIP]" if i in drop else s for i, s in enumerate(["s1", "s2", "s3", "s4"]))


def test_reduction_none_gives_the_token_entropies_of_each_step(lm):
    """reduction="none": one array per step (its token entropies); their sums and means are the
    "sum" (paper) and "mean" (official code) step entropies of the same pass."""
    model, tok = lm
    prompt, steps = "q: 2+3?\n", ["2+3=5", "so 5", "answer 5."]
    h = step_entropy(model, tok, prompt, steps, sep="\n", reduction="none")
    lens = [len(tok(x, add_special_tokens=False)["input_ids"]) for x in ("2+3=5\n", "so 5\n", "answer 5.")]
    assert [len(x) for x in h] == lens
    np.testing.assert_allclose([x.sum() for x in h], step_entropy(model, tok, prompt, steps, sep="\n"), rtol=1e-6)
    np.testing.assert_allclose([x.mean() for x in h],
                               step_entropy(model, tok, prompt, steps, sep="\n", reduction="mean"), rtol=1e-6)
    # the separator changes the tokens of each step, hence the entropies
    h2 = step_entropy(model, tok, prompt, steps, reduction="none")
    assert [len(x) for x in h2] != lens
    # mean and sum rank steps differently when lengths differ: the mean is not the sum
    assert not np.allclose([x.mean() for x in h], [x.sum() for x in h])


def test_skip_steps_replaces_exactly_the_given_steps():
    assert skip_steps(["a", "b", "c"], [2, 0], sep="\n") == "[SKIP]\nb\n[SKIP]"
    assert skip_steps(["a", "b"], [], skip_token="<s>") == "a\n\nb"
    assert skip_steps(["a", "b"], [1], skip_token="<s>") == "a\n\n<s>"
    with pytest.raises(ValueError, match=r"^step indices \[-1, 2\] are out of range for 2 steps$"):
        skip_steps(["a", "b"], [2, -1])


def _matching_reference(lengths, target, seed):
    """Brute force: the prefix of the same random order with the closest token total."""
    order = np.random.default_rng(seed).permutation(len(lengths))
    best, best_d = [], abs(0 - target)
    total = 0
    for k, i in enumerate(order, start=1):
        total += lengths[i]
        if abs(total - target) < best_d:
            best, best_d = sorted(order[:k].tolist()), abs(total - target)
    return best


def test_random_steps_matching_tokens_against_brute_force():
    lengths = [7, 1, 3, 12, 2, 5, 9, 4]
    for seed in range(30):
        for target in (0, 4, 10.5, 20, 43, 100):
            got = random_steps_matching_tokens(lengths, target, np.random.default_rng(seed))
            assert got == _matching_reference(lengths, target, seed), (seed, target)
    assert random_steps_matching_tokens(lengths, 0, np.random.default_rng(0)) == []
    assert random_steps_matching_tokens(lengths, 43, np.random.default_rng(0)) == list(range(8))
    assert random_steps_matching_tokens(lengths, 1e6, np.random.default_rng(3)) == list(range(8))
    # a tie keeps the smaller prefix: totals 0 and 2 are both 1 away from 1
    assert random_steps_matching_tokens([2, 2], 1, np.random.default_rng(0)) == []
    # different draws differ
    draws = {tuple(random_steps_matching_tokens(lengths, 20, np.random.default_rng(s))) for s in range(10)}
    assert len(draws) > 3


def test_random_steps_matching_tokens_rejections():
    rng = np.random.default_rng(0)
    with pytest.raises(ValueError, match="^lengths must be a 1-D sequence of non-negative token counts$"):
        random_steps_matching_tokens([1, -2], 1, rng)
    with pytest.raises(ValueError, match="^lengths must be a 1-D sequence of non-negative token counts$"):
        random_steps_matching_tokens([[1, 2]], 1, rng)
    with pytest.raises(ValueError, match="^lengths must be a 1-D sequence of non-negative token counts$"):
        random_steps_matching_tokens([1, float("nan")], 1, rng)
    for bad in (float("nan"), -1, float("inf")):
        with pytest.raises(ValueError, match="n_tokens must be a finite number >= 0"):
            random_steps_matching_tokens([1, 2], bad, rng)
    with pytest.raises(ValueError, match=r"^random_steps_matching_tokens needs rng \(a numpy Generator\) for reproducibility$"):
        random_steps_matching_tokens([1, 2], 1, None)
    # zero-token steps are allowed (an empty line tokenizes to nothing)
    assert random_steps_matching_tokens([0, 0, 3], 3, np.random.default_rng(0)) == \
        _matching_reference([0, 0, 3], 3, 0)


def test_answer_statement_is_cut_from_the_reasoning():
    """The experiment keeps the answer statement out of every arm (and out of the prunable region)."""
    from iclr26.decoding.step_entropy.experiment import reasoning_part

    cot = "First, 7 x 55:\n\\[ 7 \\times 55 = 385 \\]\n\nThus, the number is:\n\\[ \\boxed{385} \\]"
    assert reasoning_part(cot) == ("First, 7 x 55:\n\\[ 7 \\times 55 = 385 \\]", True)
    # a paragraph that computes and then states: only the statement line goes
    cot = "Step 1\n\nSo 3 + 4 = 7\nThe answer is 7."
    assert reasoning_part(cot) == ("Step 1\n\nSo 3 + 4 = 7", True)
    cot = "Step 1\n\nFinal Answer: 7"
    assert reasoning_part(cot) == ("Step 1", True)
    assert reasoning_part("no statement yet\n\n3 + 4 = 7\n") == ("no statement yet\n\n3 + 4 = 7", False)
    assert reasoning_part("\\boxed{7}") == ("", True)


@pytest.mark.slow
def test_smoke_run_is_well_formed():
    from iclr26.decoding.step_entropy.experiment import ARMS, run

    out = run("smoke", 0)
    corr = out["metrics"]["correct"]
    assert set(corr) == set(ARMS) and len({len(v) for v in corr.values()}) == 1
    assert out["info"]["token_fraction_kept"]["full"] == 1.0
