import pytest


@pytest.fixture(scope="session", autouse=True)
def _one_figure_cache_per_test_run(tmp_path_factory):
    """The reports rendered by the tests share one figure cache, in the run's temporary directory (not
    the user's ``~/.cache``): the published site's figures are drawn once per run, not once per test."""
    mp = pytest.MonkeyPatch()
    mp.setenv("ICLR26_PLOT_CACHE", str(tmp_path_factory.mktemp("figures")))
    yield
    mp.undo()
