"""Every test here runs once per default device (cpu, and cuda:0 where a GPU is present)."""

import pytest


@pytest.fixture(autouse=True)
def _per_device(default_device):
    """Autouse wrapper: the parametrization lives in tests/conftest.py (``default_device``)."""
    return default_device
