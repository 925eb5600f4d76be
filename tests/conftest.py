"""Fixtures shared by the whole suite."""

import pytest

import xsim

NO_CUDA = "no CUDA GPU/driver on this machine"


@pytest.fixture(params=["cpu", pytest.param("cuda:0", marks=pytest.mark.cuda)])
def device(request) -> str:
    """Run a test once per device: "cpu" always, "cuda:0" where a GPU and its driver are present."""
    if request.param != "cpu" and not xsim.is_cuda_available():
        pytest.skip(NO_CUDA)
    return request.param


def pytest_configure(config):
    config.addinivalue_line("markers", "last: run after every other test of the session")


def pytest_collection_modifyitems(config, items):
    """Move tests marked ``last`` to the end (the NVRTC sweep over every kernel the session registered)."""
    items.sort(key=lambda item: item.get_closest_marker("last") is not None)
