"""On the CPU a module's adjoints are a library of their own, compiled at its first backward launch: a run
that never differentiates never waits for g++ on them (they are about three quarters of the C++). The forward
and backward libraries are cached apart, the adjoints are those of the code whose forward ran (or refused
when that code changed since), their debug-mode reports reach the host, and ``Module.load`` and
``build_modules(backward=True)`` build both ahead of time."""

import numpy as np
import pytest

import xsim
from xsim.errors import CompileError
from xsim.kernels import cpu
from xsim.kernels.module import build_modules, pending_modules

pytestmark = pytest.mark.cpu_only("the split into two libraries is the CPU backend's")

MODULE = "xsim_tests_backward_library"
FACTOR = 2.0  # read by ``scaled``: changed by one test to change the kernel's code


@xsim.kernel(module=MODULE)
def scaled(x: xsim.array(dtype=float), y: xsim.array(dtype=float)):
    i = xsim.tid()
    y[i] = FACTOR * x[i] * x[i]


@xsim.kernel(module=MODULE)
def gather(x: xsim.array(dtype=float), idx: xsim.array(dtype=int), y: xsim.array(dtype=float)):
    i = xsim.tid()
    y[i] = x[idx[i]] * 3.0


@xsim.kernel(module=MODULE, enable_backward=False)
def doubled(x: xsim.array(dtype=float), y: xsim.array(dtype=float)):
    i = xsim.tid()
    y[i] = 2.0 * x[i]


@pytest.fixture
def builds(tmp_path, monkeypatch):
    """An empty kernel cache; yields the translation units each compile got, as text."""
    monkeypatch.setenv("XSIM_CACHE_DIR", str(tmp_path))
    units: list[list[str]] = []
    real = cpu.compile_source

    def recording(sources, out_dir, fuse_fp):
        units.append(list(sources))
        return real(sources, out_dir, fuse_fp)

    monkeypatch.setattr(cpu, "compile_source", recording)
    scaled.module.builds.clear()
    yield units
    scaled.module.invalidate()


def forward(x: np.ndarray, tape: xsim.Tape | None = None):
    xa = xsim.array(x, dtype=float, requires_grad=True)
    ya = xsim.zeros(len(x), dtype=float, requires_grad=True)
    if tape is None:
        xsim.launch(scaled, len(x), inputs=[xa], outputs=[ya])
    else:
        with tape:
            xsim.launch(scaled, len(x), inputs=[xa], outputs=[ya])
    return xa, ya


def gradient(tape: xsim.Tape, xa, ya) -> np.ndarray:
    ya.grad = xsim.ones(ya.shape[0], dtype=float)
    tape.backward()
    return xa.grad.numpy()


def holds(units: list[str], entry: str) -> bool:
    return any(entry in u for u in units)


def test_a_forward_run_compiles_no_adjoint_and_the_first_backward_compiles_them_once(builds):
    x = np.linspace(-1.0, 2.0, 9)
    _, ya = forward(x)
    np.testing.assert_allclose(ya.numpy(), 2 * x * x, rtol=1e-6)
    assert len(builds) == 1
    assert holds(builds[0], "_cpu_forward") and not holds(builds[0], "_cpu_backward")

    tape = xsim.Tape()
    xa, ya = forward(x, tape)
    assert len(builds) == 1  # recording a forward compiles nothing more
    np.testing.assert_allclose(gradient(tape, xa, ya), 4 * x, rtol=1e-6)
    assert len(builds) == 2
    assert holds(builds[1], "_cpu_backward") and not holds(builds[1], "_cpu_forward")

    tape = xsim.Tape()
    xa, ya = forward(x, tape)
    np.testing.assert_allclose(gradient(tape, xa, ya), 4 * x, rtol=1e-6)
    assert len(builds) == 2  # loaded once per module


def test_adjoints_built_after_a_forward_from_the_cache_are_cached_too(builds, monkeypatch):
    x = np.linspace(-1.0, 2.0, 9)
    forward(x)
    scaled.module.builds.clear()  # as a new process: the forward library comes from the cache
    tape = xsim.Tape()
    xa, ya = forward(x, tape)
    assert len(builds) == 1
    np.testing.assert_allclose(gradient(tape, xa, ya), 4 * x, rtol=1e-6)
    assert len(builds) == 2 and holds(builds[1], "_cpu_backward")

    scaled.module.builds.clear()
    monkeypatch.setattr(cpu, "compile_source", lambda *a: pytest.fail("a cached library was compiled again"))
    tape = xsim.Tape()
    xa, ya = forward(x, tape)
    np.testing.assert_allclose(gradient(tape, xa, ya), 4 * x, rtol=1e-6)


def test_adjoints_of_code_that_changed_since_its_forward_from_the_cache_are_refused(builds, monkeypatch):
    x = np.linspace(-1.0, 2.0, 9)
    forward(x)
    scaled.module.builds.clear()
    tape = xsim.Tape()
    _, ya = forward(x, tape)  # FACTOR = 2, from the cache
    monkeypatch.setitem(globals(), "FACTOR", 3.0)
    scaled.module.invalidate()  # as xsim does when a func or constant a kernel uses is redefined
    ya.grad = xsim.ones(len(x), dtype=float)
    with pytest.raises(CompileError, match=rf"module '{MODULE}'.*changed after their forward"):
        tape.backward()
    monkeypatch.setitem(globals(), "FACTOR", 2.0)


def test_adjoints_generated_with_their_forward_are_those_of_the_code_that_ran(builds, monkeypatch):
    x = np.linspace(-1.0, 2.0, 9)
    tape = xsim.Tape()
    xa, ya = forward(x, tape)  # compiled now, FACTOR = 2: the adjoints' C++ is generated with it
    monkeypatch.setitem(globals(), "FACTOR", 3.0)
    scaled.module.invalidate()
    np.testing.assert_allclose(gradient(tape, xa, ya), 4 * x, rtol=1e-6)
    monkeypatch.setitem(globals(), "FACTOR", 2.0)


def test_an_out_of_bounds_read_in_a_debug_adjoint_is_reported(builds, monkeypatch):
    """The adjoint's library has its own error record: a launch of the adjoint alone (Warp's
    ``adjoint=True``) whose replay reads out of bounds raises, and the next adjoint runs."""
    monkeypatch.setattr(xsim.config, "mode", "debug")
    x = xsim.array(np.arange(4.0), dtype=float)
    y = xsim.zeros(4, dtype=float)
    adj_x = xsim.zeros(4, dtype=float)

    def adjoint(idx):
        adj_y = xsim.ones(4, dtype=float)  # the adjoint of the store to y consumes it
        xsim.launch(gather, 4, inputs=[x, xsim.array(idx, dtype=int), y], adj_inputs=[adj_x, None, adj_y],
                    adjoint=True)

    with pytest.raises(IndexError, match=r"'gather'.*index \(7,\).*with shape \(4,\)"):
        adjoint([0, 1, 7, 2])
    assert holds(builds[-1], "_cpu_backward")
    adj_x.zero_()
    adjoint([0, 1, 3, 3])  # the record was cleared: the next adjoint runs
    np.testing.assert_array_equal(adj_x.numpy(), [3.0, 3.0, 0.0, 6.0])


def test_module_load_and_build_modules_build_the_adjoints_ahead(builds, monkeypatch):
    from xsim.device import get_device
    cpu_device = get_device("cpu")
    assert pending_modules(MODULE, cpu_device, False, backward=True) == [scaled.module]
    build_modules([scaled.module], cpu_device, False)
    assert pending_modules(MODULE, cpu_device, False) == []
    assert pending_modules(MODULE, cpu_device, False, backward=True) == [scaled.module]
    scaled.module.builds.clear()
    assert pending_modules(MODULE, cpu_device, False, backward=True) == [scaled.module]  # the cache's view
    build_modules([scaled.module], cpu_device, False, backward=True)
    assert len(builds) == 2 and pending_modules(MODULE, cpu_device, False, backward=True) == []

    scaled.module.builds.clear()
    scaled.module.load("cpu")  # both from the cache now; a launch and its backward compile nothing
    monkeypatch.setattr(cpu, "compile_source", lambda *a: pytest.fail("load left a library to compile"))
    tape = xsim.Tape()
    xa, ya = forward(np.arange(3.0), tape)
    np.testing.assert_allclose(gradient(tape, xa, ya), [0.0, 4.0, 8.0], rtol=1e-6)


def test_module_load_compiles_the_adjoints_too(builds):
    scaled.module.load("cpu")
    assert len(builds) == 2
    assert holds(builds[0], "_cpu_forward") and holds(builds[1], "_cpu_backward")


def test_a_kernel_with_backward_off_has_no_adjoint_and_its_adjoint_launch_is_refused(builds):
    """Its module's adjoints' library holds the others' adjoints alone; a tape skips it, as without the split."""
    x = xsim.array(np.arange(3.0), dtype=float)
    with pytest.raises(CompileError, match="kernel 'doubled' cannot be differentiated: kernel 'doubled' has "
                                           r"enable_backward=False \(its own or its module's option\)"):
        xsim.launch(doubled, 3, inputs=[x], outputs=[xsim.zeros(3, dtype=float)],
                    adj_inputs=[xsim.zeros(3, dtype=float)], adj_outputs=[xsim.ones(3, dtype=float)], adjoint=True)
    assert len(builds) == 1  # refused before the adjoints' library is built

    tape = xsim.Tape()
    xa, ya = forward(np.arange(3.0), tape)
    with tape:
        xsim.launch(doubled, 3, inputs=[ya], outputs=[xsim.zeros(3, dtype=float, requires_grad=True)])
    with pytest.warns(UserWarning, match="skipped kernel 'doubled'"):
        np.testing.assert_allclose(gradient(tape, xa, ya), [0.0, 4.0, 8.0], rtol=1e-6)
    assert len(builds) == 2 and holds(builds[1], f"{scaled.symbol}_cpu_backward")
    assert not holds(builds[1], f"{doubled.symbol}_cpu_backward")
