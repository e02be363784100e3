import os

import pytest


@pytest.fixture(scope="session", autouse=True)
def _one_figure_cache_per_test_run(tmp_path_factory):
    """The reports rendered by the tests share one figure cache, in the run's temporary directory (not
    the user's ``~/.cache``): the published site's figures are drawn once per run, not once per test.
    Under pytest-xdist (``-n 2``) the workers share it too (writes into it are atomic)."""
    base = tmp_path_factory.getbasetemp()
    root = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "figures"
    root.mkdir(parents=True, exist_ok=True)
    mp = pytest.MonkeyPatch()
    mp.setenv("ICLR26_PLOT_CACHE", str(root))
    yield
    mp.undo()


@pytest.fixture(scope="session")
def nan_grad():
    """``nan_grad(x)``: the identity forward whose backward returns NaN everywhere, for tests that a
    training loop stops on a non-finite gradient."""
    import torch

    class _NaNGrad(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x.clone()

        @staticmethod
        def backward(ctx, g):
            return torch.full_like(g, float("nan"))

    return _NaNGrad.apply
