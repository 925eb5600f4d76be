"""Launch shapes are checked in every mode: a ``dim`` larger than an array that every thread indexes
with its ``tid()`` is a ValueError naming the kernel, the parameter, the shape and the dim, before
anything runs; a smaller dim, a guarded access (``if i < n``) and a computed index are legal; a
launch of 0 threads is a no-op and a dim no tid() can count is refused."""

import numpy as np
import pytest

import xsim
from xsim.kernels.module import build_ir, tid_indexed

MODULE = "xsim_tests_reliability_launch_shapes"


@xsim.kernel(module=MODULE)
def scale(a: float, x: xsim.array(dtype=float), y: xsim.array(dtype=float)):
    i = xsim.tid()
    y[i] = a * x[i]


@xsim.kernel(module=MODULE)
def guarded(x: xsim.array(dtype=float), y: xsim.array(dtype=float), n: int):
    i = xsim.tid()
    if i < n:
        y[i] = x[i] + 1.0


@xsim.kernel(module=MODULE)
def early_return(x: xsim.array(dtype=float), n: int):
    i = xsim.tid()
    if i >= n:
        return
    x[i] = 1.0


@xsim.kernel(module=MODULE)
def transpose(src: xsim.array(dtype=float, ndim=2), dst: xsim.array(dtype=float, ndim=2),
              rows: xsim.array(dtype=float)):
    i, j = xsim.tid()
    dst[j, i] = src[i, j]
    xsim.atomic_add(rows, i, src[i, j])


@xsim.kernel(module=MODULE)
def in_a_loop(x: xsim.array(dtype=float), n: int):
    i = xsim.tid()
    for k in range(n):
        x[i] = float(k)


@pytest.mark.parametrize("kernel, expected", [
    (scale, [[1, 0, 0], [2, 0, 0]]),                          # x[i], y[i]
    (guarded, []), (early_return, []), (in_a_loop, []),       # not every thread reaches the access
    (transpose, [[0, 0, 0], [0, 1, 1], [1, 0, 1], [1, 1, 0], [2, 0, 0]]),
])
def test_the_compiler_records_the_unguarded_tid_indexed_arrays(kernel, expected):
    assert tid_indexed(build_ir(kernel)) == expected           # [parameter, axis, tid component]


@pytest.mark.parametrize("mode", ["release", "debug"])
@pytest.mark.parametrize("x_size", [3, 0])
def test_a_dim_larger_than_a_tid_indexed_array_is_refused_before_running(monkeypatch, mode, x_size):
    monkeypatch.setattr(xsim.config, "mode", mode)
    x, y = xsim.ones(x_size, dtype=float), xsim.zeros(8, dtype=float)
    for _ in range(2):  # the first launch takes the general path, the second the fast one
        with pytest.raises(ValueError) as info:
            xsim.launch(scale, 4, inputs=[0.5, x], outputs=[y])
        assert str(info.value).startswith(f"launch of kernel 'scale' with dim 4: parameter 'x' has shape ({x_size},)")
        np.testing.assert_array_equal(y.numpy(), 0.0)                   # nothing ran


@pytest.mark.parametrize("mode", ["release", "debug"])
def test_a_launch_that_runs_is_refused_by_its_entry_point_without_the_python_test(monkeypatch, mode):
    """The CPU fast path leaves the check to the compiled entry point (where it costs nothing): with the
    Python test removed, an oversized launch is still refused and nothing runs, and a refused launch
    under a Tape leaves it empty."""
    monkeypatch.setattr(xsim.config, "mode", mode)
    x, y = xsim.ones(6, dtype=float), xsim.zeros(6, dtype=float)
    xsim.launch(scale, 6, inputs=[0.5, x], outputs=[y])
    prep = scale.launch_cache
    monkeypatch.setattr(prep, "shape_test", None)
    small = xsim.ones(3, dtype=float)
    for _ in range(3):  # serial and timed by the pacer alike: a refusal teaches its estimate nothing
        with pytest.raises(ValueError, match=r"dim 4: parameter 'x' has shape \(3,\)"):
            xsim.launch(scale, 4, inputs=[0.5, small], outputs=[xsim.zeros(4, dtype=float)])
    assert scale.launch_cache is prep and prep.pacers[0].per_thread > 0
    out = xsim.zeros(4, dtype=float, requires_grad=True)
    with xsim.Tape() as tape:
        with pytest.raises(ValueError, match=r"parameter 'x' has shape \(3,\)"):
            xsim.launch(scale, 4, inputs=[0.5, xsim.ones(3, dtype=float, requires_grad=True)], outputs=[out])
    assert len(tape.launches) == 0
    np.testing.assert_array_equal(out.numpy(), 0.0)


def test_the_entry_point_compares_each_tid_component_with_its_axis():
    from xsim.kernels.codegen import _shape_refusal
    kir = build_ir(transpose)
    assert _shape_refusal(kir.params, tid_indexed(kir)) == (
        "D.shape[0] > P.p_src.shape[0] || D.shape[1] > P.p_src.shape[1] || D.shape[1] > P.p_dst.shape[0] || "
        "D.shape[0] > P.p_dst.shape[1] || D.shape[0] > P.p_rows.shape[0]")


def test_a_dim_smaller_than_the_arrays_is_legal_and_zero_threads_is_a_no_op():
    x, y = xsim.array(np.arange(6, dtype=np.float32)), xsim.zeros(6, dtype=float)
    for _ in range(2):
        xsim.launch(scale, 4, inputs=[0.5, x], outputs=[y])
    np.testing.assert_array_equal(y.numpy(), [0.0, 0.5, 1.0, 1.5, 0.0, 0.0])
    xsim.launch(scale, 0, inputs=[0.5, xsim.zeros(0, dtype=float)], outputs=[xsim.zeros(0, dtype=float)])


def test_a_guarded_access_may_launch_past_the_array():
    x, y = xsim.array(np.arange(3, dtype=np.float32)), xsim.zeros(3, dtype=float)
    xsim.launch(guarded, 8, inputs=[x, y, 3])
    np.testing.assert_array_equal(y.numpy(), [1.0, 2.0, 3.0])
    x = xsim.zeros(2, dtype=float)
    xsim.launch(early_return, 5, inputs=[x, 2])
    np.testing.assert_array_equal(x.numpy(), [1.0, 1.0])


def test_each_tid_component_is_checked_against_the_axis_it_indexes():
    src = xsim.array(np.arange(6, dtype=np.float32).reshape(2, 3))
    dst, rows = xsim.zeros((3, 2), dtype=float), xsim.zeros(2, dtype=float)
    xsim.launch(transpose, (2, 3), inputs=[src, dst, rows])
    np.testing.assert_array_equal(dst.numpy(), np.arange(6).reshape(2, 3).T)
    np.testing.assert_array_equal(rows.numpy(), [3.0, 12.0])
    with pytest.raises(ValueError, match=r"launch of kernel 'transpose' with dim \(2, 3\): parameter 'dst' has "
                                         r"shape \(2, 2\).*\(tid component 1 indexes its axis 0\)"):
        xsim.launch(transpose, (2, 3), inputs=[src, xsim.zeros((2, 2), dtype=float), rows])


@pytest.mark.parametrize("dim", [2**31, 2**40, (4, 2**31)])
def test_a_dim_beyond_what_tid_can_count_is_a_value_error(dim):
    with pytest.raises(ValueError, match=r"larger than 2147483647 \(2\*\*31 - 1\) on an axis"):
        xsim.launch(guarded, dim, inputs=[xsim.zeros(1, dtype=float), xsim.zeros(1, dtype=float), 0])
