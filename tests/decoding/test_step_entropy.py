"""Tests of step entropy (arXiv:2508.03346, Sec. 3): H(S_i) = sum_j H(t_ij), prune floor(kappa N)."""
import math

import numpy as np
import pytest
import torch

from iclr26.decoding.step_entropy import (
    compress_cot,
    select_steps,
    split_steps,
    step_entropy,
    token_entropies,
)
from iclr26.models import random_char_lm


@pytest.fixture(scope="module")
def lm():
    return random_char_lm(seed=0)


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
    with pytest.raises(ValueError, match="reduction"):
        step_entropy(model, tok, "q", ["a"], reduction="max")
    with pytest.raises(ValueError, match="sep"):
        split_steps("a", sep="")
