"""Fixtures shared by the whole suite.

Every launch of a kernel defined in tests/ is also run by the host reference (tests/reference.py) on
the same arguments and must agree with it (xsim's own kernels: tests/solvers/test_kernels_match_reference.py);
a kernel the reference cannot run fails its test unless REFERENCE_EXCLUSIONS names it with the reason.

``default_device``: the kernel/autodiff/array tests run once with ``xsim.set_device("cpu")`` and once
with ``xsim.set_device("cuda:0")`` (skipped where there is no GPU). Tests marked ``cpu_only`` run on
the CPU alone. ``XSIM_TEST_FAKE_CUDA=1`` runs the cuda:0 variants on the stand-in driver of
tests/cuda/fake_driver.py, to check the parametrization and xsim's CUDA paths without a GPU.
"""

import os
import sys
from pathlib import Path

import nvrtc_sweep
import pytest
from reference import every_launch_checked

import xsim

NO_CUDA = "no CUDA GPU/driver on this machine"
FAKE_CUDA = os.environ.get("XSIM_TEST_FAKE_CUDA") == "1"
DEVICES = ["cpu", pytest.param("cuda:0", marks=pytest.mark.cuda)]


# test kernels the host reference cannot run, and why (builtins it lacks: reference.NOT_IMPLEMENTED)
REFERENCE_EXCLUSIONS: dict[str, str] = {
    "once": "counts the evaluations of its static() expressions (the reference would evaluate them again)",
    "reads_box": "counts the reads of the object its static() reads (the reference would read it again)",
    "derivatives": "calls grad(f), which needs autodiff the reference lacks; its test checks float64 differences",
    "counters_under_contention": "its atomic_exch results depend on the threads' order (test_atomics.py checks them "
                                 "as a permutation)",
    "bits_under_contention": "65,536 threads, seconds in the reference; test_atomics.py computes the answer with numpy",
    "native_calls": "calls func_native C++ snippets (the reference runs Python)",
    "native_without_adjoint": "calls a func_native C++ snippet (the reference runs Python)",
    "type_attributes": "reads .length/.dtype of vector types and values, which only kernels have (as in Warp)",
    "dual_polynomial": "its + and * are funcs named add and mul (Warp's operator overloading), which Python's "
                       "operators on host structs do not call",
    "slot_operator_update": "its += is a func named add (Warp's operator overloading), which Python's += does "
                            "not call",
    "literal_operands": "its + is a func named add (Warp's operator overloading), which Python's + does not call",
    "names_from_one_branch": "uses names assigned in one branch only: Python leaves them unbound on the other path, "
                             "xsim gives them zero (test_control_flow_forward.py checks against numpy)",
    "loop_locals_after_the_loop": "reads names that no iteration of a loop that did not run assigned: Python leaves "
                                  "them unbound, xsim gives them zero (test_control_flow_forward.py checks against "
                                  "the body in Python)",
    "slow_sum": "records each index's OpenMP thread with a func_native C++ snippet (test_launch_threads.py checks "
                "its sums with numpy)",
    "through_ptr": "makes arrays from another array's address (xsim.array(ptr=...)), which host numpy data lacks",
    **dict.fromkeys(("weighted_sines", "scatter_squares", "nested_component_write", "doubles_in_place",
                     "reads_past_the_end", "through_a_struct_parameter"),
                    "reads arrays through elements of an array of structs holding arrays, which the reference's numpy "
                    "records cannot refer to; test_struct_array_elements.py checks against numpy"),
    **dict.fromkeys(("bf16_arithmetic", "bf16_atomics", "bf16_loss"),
                    "computes in bfloat16, which numpy lacks; test_bfloat16.py checks float64 references"),
}


@pytest.fixture(autouse=True)
def _every_launch_matches_the_reference():
    yield from every_launch_checked(REFERENCE_EXCLUSIONS)


@pytest.fixture(params=["cpu", pytest.param("cuda:0", marks=pytest.mark.cuda)])
def device(request) -> str:
    """Run a test once per device: "cpu" always, "cuda:0" where a GPU and its driver are present."""
    if request.param != "cpu" and not xsim.is_cuda_available():
        pytest.skip(NO_CUDA)
    return request.param


@pytest.fixture
def default_device(request):
    """Make the parametrized device xsim's default for one test, restoring the previous default after."""
    name = getattr(request, "param", "cpu")  # tests that take ``device`` or are cpu_only are not parametrized
    if name != "cpu" and not xsim.is_cuda_available():
        pytest.skip(NO_CUDA)
    previous = xsim.get_device()
    xsim.set_device(name)
    yield name
    xsim.set_device(previous)


def pytest_generate_tests(metafunc):
    """Parametrize ``default_device`` over DEVICES, except for cpu_only tests and tests taking ``device``."""
    if "default_device" not in metafunc.fixturenames or "device" in metafunc.fixturenames:
        return
    if metafunc.definition.get_closest_marker("cpu_only") is not None:
        return
    metafunc.parametrize("default_device", DEVICES, indirect=True)


@pytest.fixture(scope="session", autouse=True)
def _fake_cuda_driver():
    """With XSIM_TEST_FAKE_CUDA=1, xsim's device layer runs on a FakeDriver (one sm_90 GPU) all session."""
    if not FAKE_CUDA:
        yield None
        return
    sys.path.insert(0, str(Path(__file__).parent / "cuda"))
    from fake_driver import FakeDriver

    from xsim import device as xd
    from xsim.kernels import cuda
    from xsim.kernels.module import _MODULES

    drv = FakeDriver(capability=(9, 0))
    build_cubin = cuda.build_cubin

    def recording_build(module, debug, arch):  # the fake runs a launch by finding its CUBIN's module
        path, metas = build_cubin(module, debug, arch)
        drv.images[path.read_bytes()] = (module, debug)
        drv.built_arch = arch
        return path, metas

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(xd, "_runtime_state", (xd.CudaDriver(drv), ""))
        mp.setattr(xd, "_devices", {"cpu": xd.get_device("cpu")})
        mp.setattr(xd, "_current_streams", {})
        mp.setattr(xd, "_default_streams", {})
        mp.setattr(cuda, "build_cubin", recording_build)
        yield drv
        for module in _MODULES.values():  # never leave fake-backed builds for a real GPU to reuse
            for key in [k for k in module.builds if k[0] != "cpu"]:
                del module.builds[key]


NVRTC_SWEEP_TEST = "cuda/test_nvrtc_compile.py::test_every_module_registered_by_the_end_of_the_session_compiles"
_nvrtc_sweep_selected = pytest.StashKey[bool]()


def pytest_collection_finish(session):
    """Note whether this session runs the NVRTC sweep (each xdist worker collects every test, so each knows)."""
    session.config.stash[_nvrtc_sweep_selected] = any(NVRTC_SWEEP_TEST in item.nodeid for item in session.items)


@pytest.fixture(scope="module", autouse=True)
def _generated_kernels_compile_with_nvrtc(request):
    """When the session runs the NVRTC sweep (tests/cuda/test_nvrtc_compile.py), the kernels a test file
    generates while it runs (a module registered or changed after its import) compile with NVRTC at the end of
    that file, in the process that generated them (release builds: ``nvrtc_sweep.GENERATED_CONFIGS``): the sweep
    sees only its own process's registry, and xdist runs files in separate processes. A failure is an error of
    the file's last test."""
    if not request.config.stash.get(_nvrtc_sweep_selected, False) or request.path.name == "test_nvrtc_compile.py":
        yield
        return
    before = nvrtc_sweep.registered()
    yield
    units = nvrtc_sweep.all_units(exclude=before)
    nvrtc_sweep.warm(units, nvrtc_sweep.GENERATED_CONFIGS)
    for unit in units:
        for arch, debug, fast in nvrtc_sweep.GENERATED_CONFIGS:
            nvrtc_sweep.check_compiles(unit, arch, debug, fast)


def pytest_configure(config):
    config.addinivalue_line("markers", "last: run after every other test of the session")
    config.addinivalue_line("markers", "cpu_only(reason): runs on the CPU default device only (reason says why)")


def pytest_collection_modifyitems(config, items):
    """Move tests marked ``last`` to the end (the NVRTC sweep over every kernel the session registered)."""
    items.sort(key=lambda item: item.get_closest_marker("last") is not None)


def pytest_terminal_summary(terminalreporter):
    """How many launches the host reference (tests/reference.py) checked, when it checked any."""
    reference = sys.modules.get("reference")
    if reference is not None and reference.SESSION.checked:
        s = reference.SESSION
        terminalreporter.write_line(f"host reference: {s.checked} launches of {len(s.kernels)} kernels checked")
