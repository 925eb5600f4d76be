"""One local Ray with 2 CPUs for the whole folder (started once: it takes seconds), and the test
modules' own functions sent to the workers by value (the workers cannot import test files)."""

import pytest

ray = pytest.importorskip("ray", reason="xsim.distributed needs Ray: pip install 'xsim[distributed]'")


@pytest.fixture(scope="session")
def local_ray():
    """``ray`` connected to a local Ray of 2 CPUs started here, shut down after the session."""
    from xsim.distributed import connect

    if ray.is_initialized():
        ray.shutdown()
    connect(workers=2)
    yield ray
    ray.shutdown()


@pytest.fixture(autouse=True)
def _send_test_functions_by_value(request):
    ray.cloudpickle.register_pickle_by_value(request.module)
    yield
    ray.cloudpickle.unregister_pickle_by_value(request.module)
