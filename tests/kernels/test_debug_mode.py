"""Debug mode (``xsim.config.mode = "debug"``): every array access is bounds-checked, and an
out-of-bounds index raises ``IndexError`` naming the kernel, the array parameter, the index and
the shape, instead of reading or writing past the buffer."""

import inspect
import re

import numpy as np
import pytest

import xsim

MODULE = "xsim_tests_debug_mode"


@xsim.kernel(module=MODULE)
def shift_read(x: xsim.array(dtype=float), offset: int, y: xsim.array(dtype=float)):
    i = xsim.tid()
    y[i] = x[i + offset]


@xsim.kernel(module=MODULE)
def shift_write(x: xsim.array(dtype=float), offset: int, y: xsim.array(dtype=float)):
    i = xsim.tid()
    y[i + offset] = x[i]


@xsim.kernel(module=MODULE)
def grid_read(g: xsim.array(dtype=xsim.vec3, ndim=2), col: int, out: xsim.array(dtype=float)):
    i = xsim.tid()
    out[i] = g[i, col].y


@xsim.kernel(module=MODULE)
def component_write(y: xsim.array(dtype=xsim.vec3), offset: int):
    i = xsim.tid()
    y[i + offset].x = 1.0


@xsim.kernel(module=MODULE)
def atomic_out_of_range(y: xsim.array(dtype=float), offset: int):
    i = xsim.tid()
    xsim.atomic_add(y, i + offset, 1.0)


@pytest.fixture
def debug(monkeypatch):
    monkeypatch.setattr(xsim.config, "mode", "debug")


def line_of(kernel, text: str) -> int:
    """The file line of the first line of ``kernel`` containing ``text``."""
    lines, first = inspect.getsourcelines(kernel.pyfunc)
    return first + next(n for n, s in enumerate(lines) if text in s)


def test_in_bounds_launches_give_the_same_result_as_release(debug):
    x = xsim.array(np.arange(6, dtype=np.float32))
    y = xsim.zeros(4, dtype=float)
    xsim.launch(shift_read, 4, inputs=[x, 2], outputs=[y])
    np.testing.assert_array_equal(y.numpy(), [2, 3, 4, 5])


def test_out_of_bounds_read_raises_index_error_naming_kernel_array_index_and_shape(debug):
    x = xsim.array(np.arange(4, dtype=np.float32))
    y = xsim.zeros(4, dtype=float)
    with pytest.raises(IndexError) as info:
        xsim.launch(shift_read, 4, inputs=[x, 1], outputs=[y])
    msg = str(info.value)
    assert msg == (f"kernel 'shift_read' ({__file__}:{line_of(shift_read, 'x[i + offset]')}): index (4,) is out of "
                   "bounds for array 'x' with shape (4,)")


def test_out_of_bounds_write_raises_and_leaves_memory_past_the_array_alone(debug):
    backing = xsim.zeros(8, dtype=float)
    y = backing[:4]  # a view: the memory past it belongs to backing
    x = xsim.array(np.arange(4, dtype=np.float32) + 1)
    with pytest.raises(IndexError) as info:
        xsim.launch(shift_write, 4, inputs=[x, 3], outputs=[y])
    msg = str(info.value)
    assert msg.startswith(f"kernel 'shift_write' ({__file__}:{line_of(shift_write, 'y[i + offset] =')}): index (")
    # which out-of-bounds thread reports first depends on scheduling: any of them is right
    index = int(re.search(r"index \((\d+),\)", msg).group(1))
    assert 4 <= index <= 6
    assert msg.endswith("is out of bounds for array 'y' with shape (4,)")
    assert y.numpy()[3] == 1.0  # the in-bounds thread still wrote
    np.testing.assert_array_equal(backing.numpy()[4:], 0)


def test_negative_index_is_out_of_bounds(debug):
    x = xsim.array(np.arange(4, dtype=np.float32))
    y = xsim.zeros(1, dtype=float)
    with pytest.raises(IndexError, match=re.escape("index (-2,) is out of bounds for array 'x' with shape (4,)")):
        xsim.launch(shift_read, 1, inputs=[x, -2], outputs=[y])


def test_out_of_bounds_in_a_2d_array_names_both_indices_and_the_shape(debug):
    g = xsim.zeros((3, 2), dtype=xsim.vec3)
    out = xsim.zeros(3, dtype=float)
    with pytest.raises(IndexError, match=re.escape("kernel 'grid_read' (") + ".*" + re.escape(
            "index (0, 2) is out of bounds for array 'g' with shape (3, 2)")):
        xsim.launch(grid_read, 1, inputs=[g, 2], outputs=[out])


def test_out_of_bounds_component_write_into_an_element(debug):
    y = xsim.zeros(2, dtype=xsim.vec3)
    with pytest.raises(IndexError, match=re.escape("index (5,) is out of bounds for array 'y' with shape (2,)")):
        xsim.launch(component_write, 1, inputs=[y, 5])


def test_out_of_bounds_atomic(debug):
    y = xsim.zeros(2, dtype=float)
    with pytest.raises(IndexError, match=re.escape("kernel 'atomic_out_of_range' (") + ".*" + re.escape(
            "index (9,) is out of bounds for array 'y' with shape (2,)")):
        xsim.launch(atomic_out_of_range, 1, inputs=[y, 9])


def test_the_error_is_cleared_after_it_is_raised(debug):
    x = xsim.array(np.arange(4, dtype=np.float32))
    y = xsim.zeros(4, dtype=float)
    with pytest.raises(IndexError):
        xsim.launch(shift_read, 4, inputs=[x, 1], outputs=[y])
    xsim.launch(shift_read, 3, inputs=[x, 1], outputs=[y])
    np.testing.assert_array_equal(y.numpy()[:3], [1, 2, 3])
