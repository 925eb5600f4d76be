"""Launch inputs that cannot be honoured are refused, naming the kernel and the parameter: read-only
or broadcast (stride 0) outputs from numpy, torch or xsim, a dim beyond int64, torch tensors of the
wrong dtype; debug mode stops a huge launch at its first bad index; a 3,000-term expression is a
CompileError, not a RecursionError."""

import importlib
import sys
import time

import numpy as np
import pytest
import torch

import xsim

pytestmark = pytest.mark.cpu_only("host memory (numpy, CPU torch) is what these cases are about")

MODULE = "xsim_tests_reliability_launch_inputs"


@xsim.kernel(module=MODULE)
def double(x: xsim.array(dtype=float), y: xsim.array(dtype=float)):
    i = xsim.tid()
    y[i] = x[i] * 2.0


@xsim.kernel(module=MODULE)
def write_first(y: xsim.array(dtype=float)):
    y[xsim.tid()] = 1.0


@xsim.kernel(module=MODULE)
def write_grid(y: xsim.array(dtype=float, ndim=2)):
    i, j = xsim.tid()
    y[i, j] = 1.0


@xsim.kernel(module=MODULE)
def write_next(y: xsim.array(dtype=float)):
    y[xsim.tid() + 1] = 1.0  # an index computed from tid: launch cannot check it, debug mode does


@xsim.kernel(module=MODULE)
def write_grid_next(y: xsim.array(dtype=float, ndim=2)):
    i, j = xsim.tid()
    y[i + 1, j] = 1.0


@xsim.kernel(module=MODULE)
def read_next(x: xsim.array(dtype=float), y: xsim.array(dtype=float)):
    i = xsim.tid()
    y[0] = x[i + 1]


def ones4():
    return np.ones(4, np.float32)


def launch_double(out, x=None, dim=4):
    xsim.launch(double, dim, inputs=[ones4() if x is None else x], outputs=[out])


def readonly(a):
    a.setflags(write=False)
    return a


# -- unwritable outputs -----------------------------------------------------------------------------


def read_only_zeros():
    return readonly(np.zeros(4, np.float32))


def frombuffer():
    return np.frombuffer(bytes(16), np.float32)  # memory of an immutable bytes object


def broadcast():
    return np.broadcast_to(np.zeros(1, np.float32), (4,))


def writable_stride0():
    return np.lib.stride_tricks.as_strided(np.zeros(1, np.float32), (4,), (0,))


NUMPY_OUTPUTS = {"setflags": read_only_zeros, "frombuffer": frombuffer, "broadcast_to": broadcast,
                 "as_strided-0": writable_stride0}


@pytest.mark.parametrize("make", NUMPY_OUTPUTS.values(), ids=NUMPY_OUTPUTS.keys())
@pytest.mark.parametrize("wrap", ["numpy", "from_numpy"])
@pytest.mark.parametrize("warm", [False, True], ids=["cold", "warm"])
def test_an_unwritable_output_is_refused_naming_the_parameter(make, wrap, warm):
    if warm:  # the fast path of a kernel that launched before must refuse it too
        launch_double(xsim.zeros(4, dtype=float))
    out = make()
    before = out.copy()
    arg = out if wrap == "numpy" else xsim.from_numpy(out, dtype=float)
    with pytest.raises(ValueError) as info:
        launch_double(arg)
    msg = str(info.value)
    assert msg.startswith("kernel 'double' parameter 'y': the kernel writes this array, but it is "), msg
    assert "read-only" in msg or "stride of 0" in msg
    np.testing.assert_array_equal(out, before)


@pytest.mark.parametrize("make", NUMPY_OUTPUTS.values(), ids=NUMPY_OUTPUTS.keys())
def test_the_same_arrays_are_fine_as_inputs(make):
    y = xsim.zeros(4, dtype=float)
    launch_double(y, x=make())
    np.testing.assert_array_equal(y.numpy(), 0.0)


def test_a_grid_with_one_broadcast_dimension_is_refused():
    out = np.lib.stride_tricks.as_strided(np.zeros(3, np.float32), (4, 3), (0, 4))
    with pytest.raises(ValueError, match="kernel 'write_grid' parameter 'y': .*stride of 0"):
        xsim.launch(write_grid, (4, 3), outputs=[out])


def test_a_strided_but_non_overlapping_output_is_written():
    backing = np.zeros(8, np.float32)
    launch_double(backing[::2])
    np.testing.assert_array_equal(backing, [2, 0, 2, 0, 2, 0, 2, 0])



@pytest.mark.parametrize("make", [lambda: torch.zeros(1).expand(4), lambda: torch.zeros(1, 1).expand(4, 1)[:, 0]],
                         ids=["expand", "expand-column"])
def test_an_expanded_torch_tensor_is_refused_as_output(make):
    out = make()
    with pytest.raises(ValueError, match="kernel 'double' parameter 'y': .*stride of 0.*tensor.clone"):
        launch_double(out)
    assert out.sum().item() == 0


def test_an_expanded_torch_tensor_is_fine_as_input():
    y = np.zeros(4, np.float32)
    launch_double(y, x=torch.ones(1).expand(4))
    np.testing.assert_array_equal(y, 2.0)


@pytest.mark.parametrize("dtype, name", [(torch.float64, "torch.float64"), (torch.int32, "torch.int32"),
                                         (torch.float16, "torch.float16"), (torch.int64, "torch.int64")])
@pytest.mark.parametrize("role", ["input", "output"])
def test_a_torch_tensor_of_the_wrong_dtype_names_kernel_and_parameter(dtype, name, role):
    t = torch.zeros(4, dtype=dtype)
    with pytest.raises(TypeError) as info:
        launch_double(xsim.zeros(4), x=t) if role == "input" else launch_double(t)
    param = "x" if role == "input" else "y"
    assert str(info.value) == (f"kernel 'double' parameter '{param}': got a torch tensor of dtype {name} for "
                               "elements of float32; converting it would copy it and the kernel's writes would not "
                               "reach it, so convert it first (e.g. t.to(torch.float32))")


def test_a_torch_tensor_on_an_unsupported_device_names_the_parameter():
    with pytest.raises(NotImplementedError, match="kernel 'double' parameter 'x': from_torch: the tensor is on 'meta'"):
        launch_double(xsim.zeros(4), x=torch.zeros(4, device="meta"))


# -- dim ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("dim", [2**63, 2**64, (2**32, 2**32), (2**62, 2, 2), (2**31,) * 3])
def test_a_dim_beyond_int64_is_a_value_error_naming_dim(dim):
    out = xsim.zeros(4, dtype=float)
    with pytest.raises(ValueError) as info:
        xsim.launch(write_first, dim, outputs=[out])
    assert str(info.value).startswith(f"launch of kernel 'write_first': dim {dim!r} asks for ")
    assert "2**63 - 1" in str(info.value)
    np.testing.assert_array_equal(out.numpy(), 0)


@pytest.mark.parametrize("dim", [-1, -(2**63), (4, -1), True, (2, False), 4.0, None, "4"])
def test_a_negative_or_non_integer_dim_is_refused(dim):
    with pytest.raises(ValueError, match="launch of kernel 'write_first': dim must be a non-negative int"):
        xsim.launch(write_first, dim, outputs=[xsim.zeros(4, dtype=float)])


@pytest.mark.parametrize("kernel, dim, shape, written", [(write_first, 0, 4, 0), (write_first, np.int64(3), 4, 3),
                                                          (write_first, [2], 4, 2), (write_grid, (2, 3), (2, 3), 6)])
def test_valid_dims_run(kernel, dim, shape, written):
    out = xsim.zeros(shape, dtype=float)
    xsim.launch(kernel, dim, outputs=[out])
    assert out.numpy().sum() == written


# -- debug mode stops at the first bad index --------------------------------------------------------


@pytest.mark.parametrize("kernel, dim", [(write_next, 2**31 - 2), (read_next, 2**31 - 2),
                                         (write_grid_next, (2**30, 4))], ids=["write-1d", "read-1d", "write-2d"])
def test_debug_mode_stops_a_huge_launch_at_the_first_bad_index(monkeypatch, kernel, dim):
    monkeypatch.setattr(xsim.config, "mode", "debug")
    small = xsim.zeros((4, 4) if kernel is write_grid_next else 4, dtype=float)
    args = {"inputs": [small], "outputs": [xsim.zeros(1, dtype=float)]} if kernel is read_next else {
        "outputs": [small]}
    t0 = time.perf_counter()
    with pytest.raises(IndexError, match=f"kernel '{kernel.key}' .*is out of bounds for array"):
        xsim.launch(kernel, dim, **args)
    assert time.perf_counter() - t0 < 20  # a 2**31-thread launch run to the end takes minutes


# -- a 3,000-term expression --------------------------------------------------------------------------


@pytest.mark.parametrize("terms", [2000, 3000])
def test_a_huge_expression_is_a_compile_error_not_a_recursion_error(tmp_path, monkeypatch, terms):
    src = (f"import xsim\n\n\n@xsim.kernel(module='xsim_tests_reliability_huge_{terms}')\n"
           "def huge(x: xsim.array(dtype=float), y: xsim.array(dtype=float)):\n"
           f"    y[0] = {' + '.join(f'x[{i}]' for i in range(terms))}\n")
    (tmp_path / f"huge_{terms}.py").write_text(src)
    monkeypatch.syspath_prepend(str(tmp_path))
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(4 * terms)  # Python itself needs this much to import the file
    try:
        mod = importlib.import_module(f"huge_{terms}")
    finally:
        sys.setrecursionlimit(limit)
    with pytest.raises(xsim.CompileError) as info:
        xsim.launch(mod.huge, 1, inputs=[xsim.ones(terms, dtype=float)], outputs=[xsim.zeros(1, dtype=float)])
    msg = str(info.value)
    assert msg.startswith(f"{tmp_path / f'huge_{terms}.py'}:"), msg
    assert "nests too deeply for the compiler" in msg and "split it into several statements" in msg


def test_a_long_but_shallow_kernel_compiles_and_sums_correctly(tmp_path, monkeypatch):
    lines = "\n".join(f"    s = s + x[{i}]" for i in range(400))
    src = ("import xsim\n\n\n@xsim.kernel(module='xsim_tests_reliability_long_sum')\n"
           "def long_sum(x: xsim.array(dtype=xsim.float64), y: xsim.array(dtype=xsim.float64)):\n"
           f"    s = xsim.float64(0.0)\n{lines}\n    y[0] = s\n")
    (tmp_path / "long_sum.py").write_text(src)
    monkeypatch.syspath_prepend(str(tmp_path))
    mod = importlib.import_module("long_sum")
    x = np.random.default_rng(1).uniform(size=400)
    y = xsim.zeros(1, dtype=xsim.float64)
    xsim.launch(mod.long_sum, 1, inputs=[xsim.array(x, dtype=xsim.float64)], outputs=[y])
    assert y.numpy()[0] == pytest.approx(sum(x.tolist()), rel=1e-14)
