"""Warp's host API in xsim: dtype conversion, device queries and scopes, Warp's creation forms,
zero-copy array views (reshape, flatten, transpose, view), contiguous(), copy() with Warp's
count/offset semantics (tape-aware, finite-difference checked), and matrix values iterating rows."""

from __future__ import annotations

import importlib.util
import warnings

import numpy as np
import pytest

import xsim
from xsim.autodiff.gradcheck import gradcheck
from xsim.kernels.scope import MAX_UNROLL

# each test runs once per default device (tests/conftest.py: default_device; cpu_only tests on the CPU alone)
pytestmark = pytest.mark.usefixtures("default_device")


@xsim.kernel
def square(x: xsim.array(dtype=xsim.float64), y: xsim.array(dtype=xsim.float64)):
    i = xsim.tid()
    y[i] = x[i] * x[i] + x[i]


@xsim.kernel
def square2d(x: xsim.array(dtype=xsim.float64, ndim=2), y: xsim.array(dtype=xsim.float64, ndim=2)):
    i, j = xsim.tid()
    y[i, j] = x[i, j] * x[i, j] * xsim.float64(i + 1)


def f64(values, requires_grad=True):
    return xsim.array(np.asarray(values, dtype=np.float64), dtype=xsim.float64, requires_grad=requires_grad)


def squared(x):
    y = xsim.zeros(x.shape, dtype=xsim.float64, requires_grad=True)
    xsim.launch(square if x.ndim == 1 else square2d, x.shape, inputs=[x], outputs=[y])
    return y


# -- dtypes and devices ------------------------------------------------------------------------------

def test_dtype_from_and_to_numpy_round_trip_every_scalar_type():
    for t in (xsim.float16, xsim.float32, xsim.float64, xsim.int8, xsim.uint8, xsim.int16, xsim.uint16,
              xsim.int32, xsim.uint32, xsim.int64, xsim.uint64):
        np_dtype = xsim.dtype_to_numpy(t)
        assert np_dtype == np.dtype(t._np)
        assert xsim.dtype_from_numpy(np_dtype) is t
    assert xsim.dtype_to_numpy(float) == np.float32 and xsim.dtype_from_numpy(np.int64) is xsim.int64


def test_dtype_conversion_errors_name_what_was_given():
    with pytest.raises(TypeError, match="complex128 has no xsim scalar type"):
        xsim.dtype_from_numpy(np.complex128)
    with pytest.raises(TypeError, match="dtype_to_numpy: dtype must be an xsim scalar type"):
        xsim.dtype_to_numpy(xsim.vec3)


@pytest.mark.cpu_only
def test_device_queries_list_the_cpu_then_each_gpu():
    count = xsim.get_cuda_device_count()
    assert count == (xsim.get_cuda_device_count() if xsim.is_cuda_available() else 0)
    devices = xsim.get_devices()
    assert [d.name for d in devices] == ["cpu"] + [f"cuda:{i}" for i in range(count)]
    assert xsim.get_cuda_devices() == devices[1:]
    assert xsim.is_cpu_available()
    assert xsim.get_preferred_device().name == ("cuda:0" if count else "cpu")
    assert [d.alias for d in devices] == [d.name for d in devices]
    if count:
        assert xsim.get_cuda_device().name == "cuda:0"
    else:
        with pytest.raises(RuntimeError, match="device 'cuda:0' needs CUDA"):
            xsim.get_cuda_device()
    xsim.init()
    xsim.synchronize_device("cpu")
    xsim.synchronize_device()


@pytest.mark.cpu_only
def test_scoped_device_sets_the_default_and_restores_it_after_an_error():
    before = xsim.get_device()
    with pytest.raises(RuntimeError, match="inside"), xsim.ScopedDevice("cpu") as dev:
        assert dev.name == "cpu" and xsim.get_device().name == "cpu"
        assert xsim.zeros(2).device.name == "cpu"
        raise RuntimeError("inside")
    assert xsim.get_device() == before
    with xsim.ScopedDevice(None) as dev:
        assert dev == before


# -- creation ----------------------------------------------------------------------------------------

def test_creation_takes_warps_n_keyword_and_no_shape():
    assert xsim.zeros(n=3).numpy().tolist() == [0.0, 0.0, 0.0]
    assert xsim.ones(n=2, dtype=xsim.int32).numpy().tolist() == [1, 1]
    assert xsim.empty(n=4, dtype=xsim.vec3).shape == (4,)
    assert xsim.full(n=2, value=2.5).numpy().tolist() == [2.5, 2.5]
    assert xsim.zeros().shape == (0,) and xsim.empty(dtype=xsim.vec3).shape == (0,)
    with pytest.raises(TypeError, match=r"shape or its length n, not both \(shape=3, n=4\)"):
        xsim.zeros(3, n=4)


# -- views -------------------------------------------------------------------------------------------

def test_reshape_and_flatten_are_views_sharing_memory_and_gradient():
    a = f64(np.arange(12.0))
    b = a.reshape((3, -1))
    assert b.shape == (3, 4) and b.numpy().tolist() == np.arange(12.0).reshape(3, 4).tolist()
    b[1, 2] = -1.0
    assert a.numpy()[6] == -1.0
    assert b.grad.shape == (3, 4)
    b.grad[2, 3] = 7.0  # item assignment: numpy() is a copy on a GPU
    assert a.grad.numpy()[11] == 7.0
    assert b.flatten().shape == (12,) and b.flatten().numpy()[6] == -1.0


def test_reshape_errors_name_the_problem():
    a = xsim.zeros((3, 4))
    with pytest.raises(ValueError, match=r"cannot reshape array of shape \(3, 4\) \(size 12\) into shape \(5, 2\)"):
        a.reshape((5, 2))
    with pytest.raises(ValueError, match="one -1"):
        a.reshape((-1, -1))
    with pytest.raises(ValueError, match=r"array.reshape: the array \(shape \(4, 3\).*not contiguous"):
        a.transpose().reshape(12)


def test_transpose_is_a_strided_view_kernels_read_and_write():
    x = np.arange(6.0).reshape(2, 3)
    a = f64(x)
    t = a.transpose()
    assert t.shape == (3, 2) and not t.is_contiguous
    assert t.numpy().tolist() == x.T.tolist()
    y = squared(t)
    assert y.numpy().tolist() == ((x.T ** 2) * np.arange(1, 4)[:, None]).tolist()
    assert a.transpose((0, 1)).numpy().tolist() == x.tolist()
    with pytest.raises(ValueError, match=r"axes \(0, 0\) must be a permutation of 0..1"):
        a.transpose((0, 0))


def test_view_reinterprets_bytes_and_splits_or_joins_components():
    a = xsim.array(np.array([1.0, -2.5, 3.0], dtype=np.float32))
    assert a.view(xsim.uint32).numpy().tolist() == np.array([1.0, -2.5, 3.0], np.float32).view(np.uint32).tolist()
    v = xsim.zeros(4, dtype=xsim.vec3)
    f = v.view(float)
    assert f.shape == (4, 3)
    f[1, 2] = 5.0
    assert v.numpy()[1].tolist() == [0.0, 0.0, 5.0]
    back = f.view(xsim.vec3)
    assert back.shape == (4,) and back.numpy()[1].tolist() == [0.0, 0.0, 5.0]
    assert v.view(xsim.vec3i).dtype is xsim.vec3i
    with pytest.raises(TypeError, match=r"view with dtype float64 from source dtype float32: source dtype has size 4 "
                                        r"bytes, but target dtype has size 8 bytes"):
        a.view(xsim.float64)
    with pytest.raises(TypeError, match=r"from source dtype vec3f: source scalar dtype float32 has size 4 bytes, but "
                                        r"target dtype has size 8 bytes"):
        v.view(xsim.float64)
    with pytest.raises(TypeError, match=r"from source dtype float32: source dtype has size 4 bytes, but target scalar "
                                        r"dtype float64 has size 8 bytes"):
        a.view(xsim.vec2d)
    with pytest.raises(ValueError, match=r"inner dims of shape \(3, 4\)"):
        xsim.zeros((3, 4)).view(xsim.vec3)


def test_contiguous_returns_itself_or_a_packed_copy_the_gradient_flows_through():
    a = f64(np.arange(6.0).reshape(2, 3))
    assert a.contiguous() is a
    c = a.transpose().contiguous()
    assert c.is_contiguous and c.numpy().tolist() == np.arange(6.0).reshape(2, 3).T.tolist()
    x = np.linspace(-1.0, 2.0, 6).reshape(2, 3)
    gradcheck(lambda a: squared(a.transpose().contiguous()), [f64(x)], wrt=[0], raise_on_failure=True)


# -- copy --------------------------------------------------------------------------------------------

def test_copy_with_count_zero_copies_all_of_src_as_in_warp():
    src = f64([1.0, 2.0, 3.0], requires_grad=False)
    dest = xsim.zeros(5, dtype=xsim.float64)
    xsim.copy(dest, src, dest_offset=2)
    assert dest.numpy().tolist() == [0.0, 0.0, 1.0, 2.0, 3.0]
    xsim.copy(dest, src, 0, 1, 2)
    assert dest.numpy().tolist() == [2.0, 3.0, 1.0, 2.0, 3.0]
    with pytest.raises(ValueError, match="src_offset 1 \\+ count 3 exceeds src's 3 elements"):
        xsim.copy(dest, src, src_offset=1)  # count 0 means all of src, which no longer fits


def test_copy_errors_name_the_parameter():
    src, dest = xsim.zeros(3), xsim.zeros(3)
    with pytest.raises(ValueError, match="count must be non-negative, got -1"):
        xsim.copy(dest, src, count=-1)
    with pytest.raises(ValueError, match="dest_offset 2 \\+ count 3 exceeds dest's 3 elements"):
        xsim.copy(dest, src, dest_offset=2)
    with pytest.raises(TypeError, match="src_offset must be an integer, got float"):
        xsim.copy(dest, src, src_offset=1.0)
    with pytest.raises(TypeError, match="xsim.copy: dest must be an xsim array"):
        xsim.copy(np.zeros(3), src)


@pytest.mark.parametrize(("dest_offset", "src_offset", "count"), [(0, 0, 0), (1, 2, 3), (3, 0, 0)])
def test_copy_gradient_matches_finite_differences(dest_offset, src_offset, count):
    x = np.array([0.5, -1.25, 2.0, 3.0, 1.5])
    w = np.array([0.3, 0.7, -0.2, 1.1, 0.9, -0.6, 0.4, 2.0])

    def rollout(x, w):
        y = squared(w)  # y's overwritten values must not pass gradient back to w
        xsim.copy(y, x, dest_offset, src_offset, count)
        return squared(y)

    gradcheck(rollout, [f64(x), f64(w)], wrt=[0, 1], raise_on_failure=True)


def test_copy_ranges_of_strided_1d_arrays_copy_the_slices():
    for src_strided in (False, True):
        for dest_strided in (False, True):
            src = xsim.array(np.arange(1.0, 21.0), dtype=float)[::2] if src_strided else xsim.array(np.arange(1.0, 21.0, 2.0), dtype=float)
            dest = xsim.zeros(20)[::2] if dest_strided else xsim.zeros(10)
            xsim.copy(dest, src, dest_offset=4, src_offset=1, count=3)
            np.testing.assert_array_equal(dest.numpy(), [0, 0, 0, 0, 3.0, 5.0, 7.0, 0, 0, 0])
    dest = xsim.zeros((2, 4))[:, ::2]  # 2-d strided: flat positions count in row-major order of its shape
    xsim.copy(dest, xsim.array(np.array([[1.0, 2.0], [3.0, 4.0]]), dtype=float), dest_offset=1, count=2)
    np.testing.assert_array_equal(dest.numpy(), [[0.0, 1.0], [2.0, 0.0]])


@pytest.mark.parametrize("strided", ["src", "dest"])
def test_copy_gradient_of_a_strided_range_matches_finite_differences(strided):
    x = np.array([0.5, -1.25, 2.0, 3.0, 1.5, 0.25])
    w = np.array([0.3, 0.7, -0.2, 1.1, 0.9, -0.6])

    def rollout(x, w):
        y = squared(w)
        xsim.copy(y[::2] if strided == "dest" else y, x[::2] if strided == "src" else x, 1, 0, 2)
        return squared(y)

    gradcheck(rollout, [f64(x), f64(w)], wrt=[0, 1], raise_on_failure=True)


def test_kernel_gradient_through_a_reshaped_view_reaches_the_base_array():
    x = np.linspace(-1.0, 1.0, 6)
    gradcheck(lambda a: squared(a.reshape((2, 3))), [f64(x)], wrt=[0], raise_on_failure=True)


# -- matrix values -----------------------------------------------------------------------------------

def test_matrix_values_iterate_their_rows_as_vectors():
    m = xsim.mat22(1.0, 2.0, 3.0, 4.0)
    assert tuple(m) == ((1.0, 2.0), (3.0, 4.0))
    rows = list(xsim.matrix((2, 3), xsim.float64)(*range(6)))
    assert [type(r) for r in rows] == [xsim.vec3d, xsim.vec3d] and rows[1] == (3.0, 4.0, 5.0)
    rows[0][0] = 9.0  # rows are copies, as Warp's
    assert m[0, 0] == 1.0


# -- module options ----------------------------------------------------------------------------------

@pytest.mark.cpu_only
def test_module_option_enable_backward_skips_the_adjoint_and_a_kernels_own_setting_wins(tmp_path):
    path = tmp_path / "xsim_test_module_options.py"
    path.write_text('''import xsim


@xsim.kernel
def scale(x: xsim.array(dtype=float), y: xsim.array(dtype=float)):
    i = xsim.tid()
    y[i] = 2.0 * x[i]


@xsim.kernel(enable_backward=True)
def scale_own(x: xsim.array(dtype=float), y: xsim.array(dtype=float)):
    i = xsim.tid()
    y[i] = 2.0 * x[i]
''')
    spec = importlib.util.spec_from_file_location("xsim_test_module_options", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    nd = xsim.DeterministicMode.NOT_GUARANTEED
    unroll = MAX_UNROLL
    assert xsim.get_module_options(mod) == {"enable_backward": True, "max_unroll": unroll, "deterministic": nd,
                                            "default_grid_stride": None, "fuse_fp": False}
    xsim.set_module_options({"enable_backward": False}, mod)
    assert xsim.get_module_options("xsim_test_module_options") == {"enable_backward": False, "max_unroll": unroll,
                                                                   "deterministic": nd, "default_grid_stride": None, "fuse_fp": False}
    grads = {}
    for k in (mod.scale, mod.scale_own):
        x = xsim.array(np.ones(3, np.float32), requires_grad=True)
        y = xsim.zeros(3, requires_grad=True)
        tape = xsim.Tape()
        with tape:
            xsim.launch(k, 3, inputs=[x], outputs=[y])
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            tape.backward(grads={y: xsim.array(np.ones(3, np.float32))})
        grads[k.key] = (x.grad.numpy().tolist(), [str(w.message) for w in caught])
    assert grads["scale"][0] == [0.0] * 3 and "skipped kernel 'scale' (enable_backward=False)" in grads["scale"][1][0]
    assert grads["scale_own"] == ([2.0] * 3, [])
    with pytest.raises(ValueError, match="no module option 'fast_math'"):
        xsim.set_module_options({"fast_math": True}, mod)
    assert xsim.get_module_options()["enable_backward"] is True  # this test module's own


@pytest.mark.cpu_only
def test_a_kernels_module_options_set_its_backward_and_ordered_atomics_are_refused():
    @xsim.kernel(module="unique", module_options={"enable_backward": False,
                                                  "deterministic": xsim.DeterministicMode.NOT_GUARANTEED})
    def doubled(x: xsim.array(dtype=float), y: xsim.array(dtype=float)):
        i = xsim.tid()
        y[i] = 2.0 * x[i]

    assert doubled.enable_backward is False
    x, y = xsim.array(np.arange(3, dtype=np.float32)), xsim.zeros(3)
    xsim.launch(doubled, 3, inputs=[x, y])
    assert y.numpy().tolist() == [0.0, 2.0, 4.0]
    with pytest.raises(NotImplementedError, match="RUN_TO_RUN.*xsim's atomics are not ordered"):
        xsim.kernel(module_options={"deterministic": xsim.DeterministicMode.RUN_TO_RUN})
    with pytest.raises(ValueError, match="kernel\\(module_options=...\\): xsim has no module option 'fast_math'"):
        xsim.kernel(module_options={"fast_math": True})
    with pytest.raises(ValueError, match='module_options=...\\) needs module="unique"'):  # as in Warp: a shared
        xsim.kernel(module_options={"enable_backward": False})  # module's other kernels would change too



@xsim.func
def cubed(x: float):
    return x * x * x


def _backward_of_cubed(kernel, x0: np.ndarray):
    """x.grad and the warnings of one taped launch of ``kernel`` (y = cubed(x)) and its backward."""
    x = xsim.array(x0, dtype=float, requires_grad=True)
    y = xsim.zeros(len(x0), requires_grad=True)
    tape = xsim.Tape()
    with tape:
        xsim.launch(kernel, len(x0), inputs=[x], outputs=[y])
    np.testing.assert_allclose(y.numpy(), x0 ** 3, rtol=1e-6)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        tape.backward(grads={y: xsim.array(np.ones(len(x0), np.float32))})
    return x.grad.numpy(), [str(w.message) for w in caught]


@pytest.mark.cpu_only
def test_a_change_written_to_module_options_applies_to_the_modules_next_build():
    @xsim.kernel(module="unique", module_options={"enable_backward": False})
    def cube(x: xsim.array(dtype=float), y: xsim.array(dtype=float)):
        i = xsim.tid()
        y[i] = cubed(x[i])

    # module_options are the module's, not the kernel's own: writing the module's option changes the kernel
    assert cube.options == {} and cube.module.options["enable_backward"] is False
    x0 = np.array([0.5, -2.0, 3.0], np.float32)
    grad, caught = _backward_of_cubed(cube, x0)
    assert grad.tolist() == [0.0] * 3 and "skipped kernel 'cube' (enable_backward=False)" in caught[0]
    cube.module.options["enable_backward"] = True
    assert cube.enable_backward and xsim.get_module_options(cube.module.name)["enable_backward"] is True
    grad, caught = _backward_of_cubed(cube, x0)
    np.testing.assert_allclose(grad, 3.0 * x0.astype(np.float64) ** 2, rtol=1e-6)  # d(x^3)/dx through the func
    assert caught == []
    cube.module.options.update(enable_backward=False)
    assert _backward_of_cubed(cube, x0)[0].tolist() == [0.0] * 3
    assert dict(cube.module.options) == xsim.get_module_options(cube.module.name) == cube.module.options
    saved = cube.module.options.copy()
    assert type(saved) is dict and saved["enable_backward"] is False
    xsim.set_module_options(cube.module.options, "xsim_test_copied_options")  # one module's options given to another
    assert xsim.get_module_options("xsim_test_copied_options") == saved
    with pytest.raises(ValueError, match="set_module_options: max_unroll must be a non-negative int, got -1"):
        cube.module.options["max_unroll"] = -1
    with pytest.raises(ValueError, match="no module option 'fast_math'"):
        cube.module.options["fast_math"] = True
    cube.module.options["max_unroll"] = 3
    del cube.module.options["max_unroll"]  # back to the default
    assert cube.module.options["max_unroll"] == MAX_UNROLL

# -- Warp's constants and per-kernel options -----------------------------------------------------------

@xsim.kernel
def read_constants(out: xsim.array(dtype=xsim.float64)):
    out[0] = xsim.float64(xsim.HALF_PI)
    out[1] = xsim.float64(xsim.pi * 0.5)
    out[2] = xsim.float64(xsim.TAU)
    out[3] = xsim.float64(xsim.e)
    out[4] = xsim.float64(xsim.inf)
    out[5] = xsim.float64(xsim.LN2)


def test_warps_math_constants_read_on_the_host_and_in_kernels():
    import math
    assert (xsim.pi, xsim.HALF_PI, xsim.TAU, xsim.e, xsim.LOG2E, xsim.PHI) == (
        math.pi, math.pi / 2, math.tau, math.e, math.log2(math.e), (1 + math.sqrt(5)) / 2)
    assert math.isnan(xsim.nan) and xsim.inf == math.inf
    out = xsim.zeros(6, dtype=xsim.float64)
    xsim.launch(read_constants, 1, inputs=[out])
    np.testing.assert_array_equal(out.numpy(), [math.pi / 2, math.pi / 2, math.tau, math.e, math.inf, math.log(2)])


def test_kernel_options_hold_its_own_settings_and_module_options_the_rest():
    own = xsim.Kernel(func=square.pyfunc, key="square_no_backward", options={"enable_backward": False})
    assert own.options == {"enable_backward": False} and not own.enable_backward
    assert square.options == {} and square.module.options == {
        "enable_backward": True, "max_unroll": MAX_UNROLL, "deterministic": xsim.DeterministicMode.NOT_GUARANTEED,
        "default_grid_stride": None, "fuse_fp": False}
