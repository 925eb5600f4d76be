"""Every test here runs once per default device (cpu, and cuda:0 where a GPU is present), and every
kernel it launches is also run by the host reference (tests/reference.py) on the same arguments."""

import pytest
from reference import checked_launches

# kernels the reference cannot run, and why (a kernel the reference fails on that is not listed here
# fails its test, naming the kernel and the reference's error)
REFERENCE_EXCLUSIONS: dict[str, str] = {}


@pytest.fixture(autouse=True)
def _per_device(default_device):
    """Autouse wrapper: the parametrization lives in tests/conftest.py (``default_device``)."""
    return default_device


@pytest.fixture(autouse=True)
def _every_launch_matches_the_reference():
    with checked_launches() as checker:
        yield checker
    unexcused = {k: v for k, v in checker.unsupported.items() if k not in REFERENCE_EXCLUSIONS}
    assert not unexcused, "kernels the host reference cannot run (fix the reference or list them in " \
        "REFERENCE_EXCLUSIONS with a reason):\n" + "\n".join(unexcused.values())
