"""Tests of iclr26.common.seeding."""
import random

import numpy as np
import pytest
import torch

from iclr26.common.seeding import seed_everything


def _draws():
    return random.random(), np.random.rand(), torch.rand(1).item()


def test_same_seed_same_draws_everywhere():
    g1 = seed_everything(7)
    a = _draws() + (g1.random(),)
    g2 = seed_everything(7)
    b = _draws() + (g2.random(),)
    assert a == b
    seed_everything(8)
    c = _draws()
    assert all(u != v for u, v in zip(a, c))
    assert isinstance(g1, np.random.Generator)
    assert g1.random() == g2.random()
    assert seed_everything(7).random() == np.random.default_rng(7).random()


def test_seeds_match_the_libraries_own_seeding():
    seed_everything(123)
    a = _draws()
    random.seed(123)
    np.random.seed(123)
    torch.manual_seed(123)
    assert a == _draws()
    seed_everything(2**32 + 5)              # numpy's legacy seed is taken modulo 2^32
    x = np.random.rand()
    np.random.seed(5)
    assert x == np.random.rand()
    seed_everything(np.int64(3))


def test_torch_threads():
    before = torch.get_num_threads()
    try:
        seed_everything(0)
        assert torch.get_num_threads() == 1
        seed_everything(0, torch_threads=2)
        assert torch.get_num_threads() == 2
        seed_everything(0, torch_threads=None)
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)


@pytest.mark.parametrize("bad", [-1, 1.5, "3", None])
def test_rejects_bad_seeds(bad):
    with pytest.raises(ValueError, match=r"^seed must be a non-negative integer, got "):
        seed_everything(bad)
    seed_everything(0)
