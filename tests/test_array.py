"""Specification of xsim arrays (xsim/array.py) and devices (xsim/device.py) on the CPU."""

import ctypes
import gc
import importlib
import os

import numpy as np
import pytest

import xsim
from xsim import device as xd
from xsim import types as T
from xsim.array import array

xa = importlib.import_module("xsim.array")  # the module (xsim.array the attribute is the class)

# each test runs once per default device (tests/conftest.py: default_device; cpu_only tests on the CPU alone)
pytestmark = pytest.mark.usefixtures("default_device")

SCALARS = [T.float16, T.float32, T.float64, T.int8, T.int16, T.int32, T.int64,
           T.uint8, T.uint16, T.uint32, T.uint64, T.bool_]
COMPOSITES = [T.vec2, T.vec3, T.vec4, T.vec3d, T.vec3i, T.mat22, T.mat33, T.mat44d, T.quat, T.transform,
              T.transformd]


@T.struct
class Particle:
    mass: float
    pos: T.vec3
    flags: T.int32


@T.struct
class Holder:
    values: T.ArrayType(T.float32)


# -- devices --------------------------------------------------------------------------------------


@pytest.mark.cpu_only("checks the default device itself")
def test_default_device_is_the_cpu():
    dev = xd.get_device()
    assert dev.name == "cpu" and dev.is_cpu and not dev.is_cuda and dev.ordinal == -1
    assert xd.get_device("cpu") is dev
    assert xd.get_device(dev) is dev
    assert dev == "cpu" and str(dev) == "cpu"


def test_set_device_changes_the_default_for_new_arrays():
    xd.set_device("cpu")
    assert xa.zeros(2).device is xd.get_device("cpu")


def test_unknown_device_string_names_it_and_the_valid_forms():
    for bad in ("gpu", "cuda:x", "cpu:0", ""):
        with pytest.raises(ValueError, match=f"unknown device '{bad}'.*\"cpu\", \"cuda\" or \"cuda:N\""):
            xd.get_device(bad)


@pytest.mark.cpu_only("checks the error on a machine without CUDA")
@pytest.mark.skipif(os.environ.get("XSIM_TEST_FAKE_CUDA") == "1", reason="the stand-in CUDA driver is installed")
def test_cuda_without_runtime_is_unavailable_and_says_how_to_get_it():
    assert not xd.is_cuda_available()
    with pytest.raises(RuntimeError, match="'cuda:0' needs CUDA.*no NVIDIA driver.*cuda-python"):
        xd.get_device("cuda:0")
    with pytest.raises(RuntimeError, match="'cuda:0' needs CUDA"):
        xd.get_device("cuda")
    with pytest.raises(RuntimeError, match="needs CUDA"):
        xa.zeros(3, device="cuda:1")


def test_cuda_runtime_seam_makes_cuda_devices(monkeypatch):
    synced = []

    class FakeRuntime:
        def device_count(self):
            return 1

        def synchronize(self, ordinal):
            synced.append(ordinal)

    monkeypatch.setattr(xd, "_cuda_runtime", lambda: FakeRuntime())
    monkeypatch.setattr(xd, "_devices", {"cpu": xd.get_device("cpu")})
    assert xd.is_cuda_available()
    dev = xd.get_device("cuda")
    assert dev.name == "cuda:0" and dev.is_cuda and dev.ordinal == 0 and xd.get_device("cuda:0") is dev
    xd.synchronize(dev)
    assert synced == [0]
    with pytest.raises(RuntimeError, match="'cuda:1' does not exist: this machine has 1 CUDA GPU"):
        xd.get_device("cuda:1")


def test_synchronize_on_cpu_returns_immediately():
    assert xd.synchronize() is None
    assert xd.synchronize("cpu") is None


# -- annotation form ----------------------------------------------------------------------------------


def test_array_without_data_or_shape_is_an_annotation():
    assert array(dtype=T.vec3) == T.ArrayType(T.vec3, 1)
    assert array(dtype=float, ndim=2) == T.ArrayType(T.float32, 2)
    assert array(dtype=np.float64, ndim=3) == T.ArrayType(T.float64, 3)
    assert array() == T.ArrayType(T.float32, 1)
    assert isinstance(array(dtype=int), T.ArrayType)


def test_arraynd_helpers_make_annotations_of_that_ndim():
    assert xa.array1d(dtype=T.mat33) == T.ArrayType(T.mat33, 1)
    assert xa.array2d(dtype=float) == T.ArrayType(T.float32, 2)
    assert xa.array3d(dtype=T.quat) == T.ArrayType(T.quat, 3)
    assert xa.array4d(dtype=int) == T.ArrayType(T.int32, 4)


def test_an_array_of_structs_holding_arrays_hands_back_the_arrays_its_elements_refer_to():
    # kernels on such arrays: tests/kernels/test_struct_array_elements.py
    assert array(dtype=Holder) == T.ArrayType(Holder, 1)
    inner = array([1.0, 2.0], dtype=T.float32)
    a = array([Holder(values=inner), Holder()], dtype=Holder)
    assert a[0].values is inner and a[1].values is None and a.list()[0].values is inner
    rec = a.numpy()["values"]
    assert rec["data"].tolist() == [inner.ptr, 0] and rec["shape"][0].tolist() == [2, 1, 1, 1]
    assert rec["strides"][0, 0] == 4


# -- construction -------------------------------------------------------------------------------------


@pytest.mark.parametrize("t", SCALARS, ids=lambda t: t.__name__)
def test_arrays_of_every_scalar_dtype_store_that_numpy_dtype(t):
    a = array([1, 0, 1], dtype=t)
    assert a.dtype is t and a.shape == (3,) and a.numpy().dtype == t._np
    assert a.numpy().tolist() == [1, 0, 1]
    assert a.strides == (t._np.itemsize,)


@pytest.mark.parametrize("t", COMPOSITES, ids=lambda t: t.__name__)
def test_arrays_of_composite_dtypes_append_the_component_shape(t):
    a = xa.zeros((2, 5), dtype=t)
    assert a.shape == (2, 5) and a.ndim == 2 and a.size == 10
    assert a.numpy().shape == (2, 5) + t._shape
    elem_bytes = T.num_components(t) * t._np.itemsize
    assert a.strides == (5 * elem_bytes, elem_bytes)
    assert a.is_contiguous


@pytest.mark.parametrize("ndim", [1, 2, 3, 4])
def test_arrays_have_one_to_four_dims_with_c_order_strides(ndim):
    shape = (2, 3, 4, 5)[:ndim]
    a = xa.zeros(shape, dtype=T.vec3)
    assert a.shape == shape and a.ndim == ndim and a.size == int(np.prod(shape))
    expected = tuple(int(np.prod(shape[i + 1:])) * 12 for i in range(ndim))
    assert a.strides == expected


def test_zero_or_five_dims_are_refused():
    with pytest.raises(ValueError, match=r"1 to 4 dimensions, got shape \(\) \(0 dims\)"):
        xa.zeros(())
    with pytest.raises(ValueError, match=r"1 to 4 dimensions, got shape \(1, 1, 1, 1, 1\) \(5 dims\)"):
        xa.zeros((1, 1, 1, 1, 1))
    with pytest.raises(ValueError, match="1 to 4 dimensions"):
        array(np.zeros((1, 1, 1, 1, 1)))
    with pytest.raises(ValueError, match=r"Array shapes must be non-negative, got \(2, -1\)"):
        xa.zeros((2, -1))


def test_shape_may_be_an_int_or_a_tuple():
    assert xa.zeros(4).shape == (4,)
    assert xa.zeros((4,)).shape == (4,)
    assert xa.zeros(np.int64(3)).shape == (3,)
    assert array(shape=(2, 3), dtype=T.vec2).numpy().shape == (2, 3, 2)


def test_python_floats_default_to_float32_and_ints_to_int32():
    assert array([1.0, 2.0]).dtype is T.float32
    assert array([1, 2]).dtype is T.int32
    assert array([True, False]).dtype is T.bool_
    assert array([[1.0, 2.0], [3.0, 4.0]]).shape == (2, 2)


def test_numpy_data_without_dtype_keeps_numpy_dtype_and_shape():
    a = array(np.arange(6, dtype=np.float64).reshape(2, 3))
    assert a.dtype is T.float64 and a.shape == (2, 3)
    assert array(np.arange(3, dtype=np.int64)).dtype is T.int64


def test_python_dtype_names_map_to_xsim_scalars():
    assert xa.zeros(2, dtype=float).dtype is T.float32
    assert xa.zeros(2, dtype=int).dtype is T.int32
    assert xa.zeros(2, dtype=bool).dtype is T.bool_
    assert xa.zeros(2, dtype=np.float64).dtype is T.float64
    assert xa.zeros(2, dtype=np.dtype("uint8")).dtype is T.uint8


def test_unsupported_dtype_is_refused():
    with pytest.raises(TypeError, match="array dtype must be an xsim value type.*got <class 'str'>"):
        xa.zeros(2, dtype=str)


def test_vectors_from_n_by_3_data_and_from_vector_lists():
    a = array([[1, 2, 3], [4, 5, 6]], dtype=T.vec3)
    assert a.shape == (2,) and a.numpy().dtype == np.float32
    b = array([T.vec3(1, 2, 3), T.vec3(4, 5, 6)])
    assert b.dtype is T.vec3 and b.shape == (2,)
    assert b.numpy().tolist() == [[1, 2, 3], [4, 5, 6]]


def test_flat_data_is_split_into_whole_elements():
    a = array(np.arange(6.0), dtype=T.vec3)
    assert a.shape == (2,) and a[1] == [3, 4, 5]
    m = array(np.arange(18.0), dtype=T.mat33)
    assert m.shape == (2,) and m[1][0, 0] == 9.0


def test_single_value_makes_one_element_array():
    assert array(T.vec3(1, 2, 3), dtype=T.vec3).shape == (1,)
    assert array([1.0, 2.0, 3.0], dtype=T.vec3).shape == (1,)
    assert array(5.0).shape == (1,) and array(5.0)[0] == 5.0


def test_shape_argument_reshapes_or_broadcasts_data():
    a = array(np.arange(12.0), dtype=T.vec3, shape=(2, 2))
    assert a.shape == (2, 2) and a[1, 1] == [9, 10, 11]
    assert array(2.0, shape=(2, 3)).numpy().tolist() == [[2, 2, 2], [2, 2, 2]]
    assert array(T.vec2(1, 2), dtype=T.vec2, shape=3).numpy().tolist() == [[1, 2]] * 3


def test_data_not_matching_the_component_shape_is_refused():
    with pytest.raises(ValueError, match=r"data of shape \(4, 2\) does not fit dtype vec3f: expected shape "
                                         r"\(\.\.\., 3\) or a flat length divisible by 3"):
        array(np.zeros((4, 2)), dtype=T.vec3)
    with pytest.raises(ValueError, match=r"data of shape \(5,\) does not fit dtype mat22f"):
        array(np.zeros(5), dtype=T.mat22)
    with pytest.raises(ValueError, match=r"expected 12 components, got 10"):
        array(np.zeros(10), dtype=T.vec3, shape=4)


def test_ndim_argument_must_agree_with_the_data():
    with pytest.raises(ValueError, match="array data has 2 dims but ndim=1"):
        array(np.zeros((2, 2)), ndim=1)
    assert array(np.zeros((2, 2)), ndim=2).ndim == 2


def test_construction_copies_by_default():
    src = np.zeros(3, np.float32)
    a = array(src)
    a.numpy()[0] = 1.0
    assert src[0] == 0.0


@pytest.mark.cpu_only("numpy zero-copy views exist for host memory only")
def test_copy_false_shares_numpy_memory_and_keeps_it_alive():
    a = array(np.arange(6, dtype=np.float32).reshape(2, 3), dtype=T.vec3, copy=False)
    src = a._owner
    assert isinstance(src, np.ndarray) and a.ptr == src.ctypes.data
    src[1, 2] = 50.0
    assert a[1].z == 50.0
    del src
    gc.collect()
    assert a.numpy().tolist() == [[0, 1, 2], [3, 4, 50]]


@pytest.mark.cpu_only("numpy zero-copy views exist for host memory only")
def test_copy_false_with_a_different_dtype_copies():
    src = np.zeros(3, np.float64)
    a = array(src, dtype=T.float32, copy=False)
    assert a._owner is None and not np.shares_memory(a.numpy(), src)


@pytest.mark.cpu_only("numpy zero-copy views exist for host memory only")
def test_copy_false_shares_non_contiguous_numpy_views():
    base = np.arange(24, dtype=np.float32).reshape(4, 6)
    view = base[::2, :3]
    a = array(view, dtype=T.vec3, copy=False)
    assert a.shape == (2,) and a.strides == (48,) and not a.is_contiguous
    base[2, 1] = -1.0
    assert a[1] == [12, -1, 14]


def test_views_with_scattered_components_are_copied_to_packed_elements():
    base = np.arange(12, dtype=np.float32).reshape(2, 6)
    a = array(base[:, ::2], dtype=T.vec3, copy=False)
    assert a.is_contiguous and a[1] == [6, 8, 10]
    assert not np.shares_memory(a.numpy(), base)


def test_array_from_another_array_copies_its_values():
    a = array([1.0, 2.0])
    b = array(a)
    b.numpy()[0] = 10.0
    assert a[0] == 1.0 and b.dtype is T.float32


@pytest.mark.cpu_only("checks writes through a numpy zero-copy view")
def test_arrays_of_structs_use_the_struct_record_dtype():
    a = array([Particle(mass=1.0, pos=T.vec3(1, 2, 3), flags=4), Particle(mass=2.0)])
    assert a.dtype is Particle and a.shape == (2,)
    rec = a.numpy()
    assert rec.dtype == Particle._np and rec["mass"].tolist() == [1.0, 2.0]
    assert rec["pos"].tolist() == [[1, 2, 3], [0, 0, 0]]
    p = a[0]
    assert isinstance(p, Particle) and p == Particle(mass=1.0, pos=[1, 2, 3], flags=4)
    a[1] = Particle(flags=9)
    assert rec["flags"].tolist() == [4, 9]
    assert a.strides == (Particle._np.itemsize,)


def test_zeros_of_a_struct_holding_arrays_has_null_array_fields():
    assert [h.values for h in xa.zeros(3, dtype=Holder).list()] == [None] * 3


# -- creation functions -----------------------------------------------------------------------------


def test_zeros_ones_full_and_empty():
    assert xa.zeros(3).numpy().tolist() == [0, 0, 0]
    assert xa.ones((2,), dtype=T.vec2).numpy().tolist() == [[1, 1], [1, 1]]
    assert xa.full(2, 7, dtype=float).numpy().tolist() == [7.0, 7.0]
    assert xa.empty((2, 2), dtype=T.mat22).numpy().shape == (2, 2, 2, 2)
    assert xa.zeros(2, dtype=T.float64, requires_grad=True).grad.numpy().tolist() == [0, 0]


def test_full_infers_dtype_from_the_value():
    assert xa.full(2, 1.5).dtype is T.float32
    assert xa.full(2, 3).dtype is T.int32
    assert xa.full(2, np.float64(1)).dtype is T.float64
    v = xa.full(2, T.vec3(1, 2, 3))
    assert v.dtype is T.vec3 and v.numpy().tolist() == [[1, 2, 3]] * 2
    assert xa.full(2, [1.0, 2.0]).dtype is T.vec2
    assert xa.full(1, np.eye(3)).dtype is T.mat33d
    assert xa.full(2, np.ones(5, np.float16)).dtype is T.vector(5, T.float16)  # any length, as in Warp
    assert xa.full(2, [[1, 2, 3], [4, 5, 6]]).dtype is T.matrix((2, 3), T.int32)
    assert xa.full(2, Particle(mass=3.0)).numpy()["mass"].tolist() == [3.0, 3.0]
    with pytest.raises(TypeError, match="cannot infer an array dtype"):
        xa.full(2, "x")


def test_like_functions_copy_shape_dtype_device_and_requires_grad():
    src = xa.zeros((2, 3), dtype=T.vec3, requires_grad=True)
    for make, value in ((xa.zeros_like, 0.0), (xa.ones_like, 1.0)):
        a = make(src)
        assert a.shape == (2, 3) and a.dtype is T.vec3 and a.device is src.device and a.requires_grad
        assert np.all(a.numpy() == value)
    assert xa.empty_like(src, requires_grad=False).grad is None
    f = xa.full_like(src, T.vec3(1, 2, 3))
    assert f[1, 2] == [1, 2, 3]


def test_from_numpy_infers_vectors_and_matrices_from_trailing_dims():
    assert xa.from_numpy(np.zeros((5, 3), np.float32)).dtype is T.vec3
    assert xa.from_numpy(np.zeros((5, 3))).dtype is T.vec3d
    assert xa.from_numpy(np.zeros((5, 3, 3), np.float32)).dtype is T.mat33
    assert xa.from_numpy(np.zeros((4, 5, 2, 2), np.float32)).dtype is T.mat22
    assert xa.from_numpy(np.zeros((5, 4), np.int32)).dtype is T.vec4i
    assert xa.from_numpy(np.zeros((3, 3), np.float32)).dtype is T.vec3
    assert xa.from_numpy(np.zeros((5,), np.float32)).dtype is T.float32
    assert xa.from_numpy(np.zeros((5, 7), np.float32)).dtype is T.float32
    m = xa.from_numpy(np.zeros((5, 3, 3), np.float32))
    assert m.shape == (5,)


@pytest.mark.cpu_only("numpy zero-copy views exist for host memory only")
def test_from_numpy_is_zero_copy_and_writes_through_both_ways():
    src = np.zeros((4, 3), np.float32)
    a = xa.from_numpy(src)
    a.numpy()[2, 1] = 5.0
    assert src[2, 1] == 5.0
    src[3] = [7, 8, 9]
    assert a[3] == [7, 8, 9]
    assert a.ptr == src.ctypes.data


def test_from_numpy_with_explicit_dtype_and_shape():
    a = xa.from_numpy(np.arange(12, dtype=np.float32), dtype=T.vec3, shape=(2, 2))
    assert a.shape == (2, 2) and a[1, 0] == [6, 7, 8]
    b = xa.from_numpy(np.zeros((4, 3), np.float32), dtype=float)
    assert b.dtype is T.float32 and b.shape == (4, 3)


def test_is_array_recognises_arrays_only():
    assert xa.is_array(xa.zeros(1))
    assert not xa.is_array(np.zeros(1)) and not xa.is_array(array(dtype=float))


# -- numpy views, element access, views ---------------------------------------------------------------------


@pytest.mark.cpu_only("numpy zero-copy views exist for host memory only")
def test_numpy_is_a_zero_copy_view():
    a = xa.zeros(3, dtype=T.vec3)
    v1, v2 = a.numpy(), np.asarray(a)
    v1[1, 2] = 4.0
    assert v2[1, 2] == 4.0 and a[1].z == 4.0
    assert v1.ctypes.data == a.ptr


def test_array_protocol_converts_dtype_on_request():
    a = array([1.0, 2.0])
    assert np.asarray(a, dtype=np.float64).dtype == np.float64
    assert np.array(a).ctypes.data != a.ptr


def test_integer_index_of_1d_array_returns_the_element_value():
    s = array([1.5, 2.5])
    assert s[1] == 2.5 and isinstance(s[1], np.float32)
    assert s[-1] == 2.5
    v = array([[1, 2, 3], [4, 5, 6]], dtype=T.vec3)
    e = v[1]
    assert type(e) is T.vec3 and e == [4, 5, 6]
    e.x = 100.0
    assert v[1].x == 4.0
    m = xa.zeros(2, dtype=T.mat22)
    assert type(m[0]) is T.mat22
    t = xa.full(1, T.transform(T.vec3(1, 2, 3), T.quat(0, 0, 0, 1)))
    assert type(t[0]) is T.transform and t[0].p == [1, 2, 3]


def test_full_integer_index_of_nd_array_returns_the_element_value():
    a = array(np.arange(6, dtype=np.int32).reshape(2, 3))
    assert a[1, 2] == 5


def test_index_assignment_writes_through():
    a = xa.zeros(3, dtype=T.vec3)
    a[1] = T.vec3(1, 2, 3)
    a[2] = [4, 5, 6]
    assert a.numpy().tolist() == [[0, 0, 0], [1, 2, 3], [4, 5, 6]]
    b = xa.zeros((2, 2))
    b[1, 0] = 3.0
    b[0] = [1.0, 2.0]
    assert b.numpy().tolist() == [[1, 2], [3, 0]]


def test_row_index_of_nd_array_is_a_view_sharing_memory():
    a = xa.zeros((3, 4), dtype=T.vec2)
    row = a[1]
    assert xa.is_array(row) and row.shape == (4,) and row.dtype is T.vec2
    assert row.ptr == a.ptr + a.strides[0]
    row[2] = [5, 6]
    assert a[1, 2] == [5, 6]
    assert row._owner is a


def test_slices_are_views_with_outer_strides():
    a = array(np.arange(10, dtype=np.float32))
    s = a[2:8:2]
    assert s.shape == (3,) and s.strides == (8,) and not s.is_contiguous
    assert s.numpy().tolist() == [2, 4, 6]
    s[0] = -2.0
    assert a[2] == -2.0
    m = array(np.arange(12, dtype=np.float32).reshape(3, 4))
    col = m[:, 1]
    assert col.shape == (3,) and col.strides == (16,) and col.numpy().tolist() == [1, 5, 9]
    assert m[1:, 2:].shape == (2, 2)


def test_views_keep_their_memory_alive():
    view = xa.zeros((100, 3))[50]
    gc.collect()
    view[0] = 1.0
    assert view.numpy().tolist() == [1, 0, 0]


def test_bad_indices_are_refused():
    a = xa.zeros((2, 2))
    with pytest.raises(IndexError, match="too many indices for a 2-d array: got 3"):
        a[0, 0, 0]
    with pytest.raises(TypeError, match="integers or slices"):
        a[[0, 1]]
    with pytest.raises(IndexError):
        a[5]


def test_len_iteration_and_list():
    a = array([[1, 2], [3, 4], [5, 6]], dtype=T.vec2)
    assert len(a) == 3
    assert [v.y for v in a] == [2, 4, 6]
    assert a.list() == [T.vec2(1, 2), T.vec2(3, 4), T.vec2(5, 6)]
    assert array(np.arange(4.0).reshape(2, 2)).list() == [0, 1, 2, 3]


@pytest.mark.cpu_only("the expected text names the cpu")
def test_repr_shows_values_shape_dtype_and_device():
    r = repr(array([1.0, 2.0]))
    assert r == "array([1., 2.], shape=(2,), dtype=float32, device=cpu)"


def test_str_shows_the_values_as_numpy_and_warp_print_them():
    assert str(array([1.5, 2.0])) == "[1.5 2. ]" and f"{array([0.25])}" == "[0.25]"


# -- descriptor ---------------------------------------------------------------------------------------------


def test_desc_is_built_once_with_padded_shape_and_strides():
    a = xa.zeros((2, 3), dtype=T.vec3)
    d = a.desc
    assert a.desc is d and a._desc is d and isinstance(d, T.ArrayDesc)
    assert d.data == a.ptr
    assert list(d.shape) == [2, 3, 1, 1]
    assert list(d.strides) == [36, 12, 0, 0]


def test_desc_reads_the_data_through_the_pointer():
    a = array([1.5, 2.5, 3.5], dtype=T.float64)
    d = a.desc
    p = ctypes.cast(d.data + 2 * d.strides[0], ctypes.POINTER(ctypes.c_double))
    assert p[0] == 3.5


def test_desc_of_a_view_points_at_its_first_element():
    a = array(np.arange(12, dtype=np.float32).reshape(3, 4))
    col = a[:, 2]
    d = col.desc
    assert list(d.shape) == [3, 1, 1, 1] and list(d.strides) == [16, 0, 0, 0]
    assert ctypes.cast(d.data, ctypes.POINTER(ctypes.c_float))[0] == 2.0


@pytest.mark.parametrize("key", [slice(1, 3), slice(None, None, -1), slice(4, 0, -2), 2, -1, slice(-3, None),
                                 (slice(1, 4), slice(2, 5)), (-2, slice(None, None, 2)), (slice(3, 1, -1), -3)])
def test_a_views_address_is_that_of_its_first_element(key):
    data = np.arange(5 * 6 * 4, dtype=np.float32).reshape(5, 6, 4)
    for a in (array(data, dtype=T.vec4), array(data[:, :, 0].T.copy().T, dtype=T.float32)):
        view = a[key]
        assert view.ptr == view.numpy().__array_interface__["data"][0] == view.desc.data
        np.testing.assert_array_equal(view.numpy(), a.numpy()[key])


# -- gradients ----------------------------------------------------------------------------------------------


def test_requires_grad_allocates_zero_grad_of_same_shape_dtype_and_device():
    a = xa.ones((2, 3), dtype=T.vec3)
    assert not a.requires_grad and a.grad is None
    a.requires_grad = True
    g = a.grad
    assert a.requires_grad and g.shape == (2, 3) and g.dtype is T.vec3 and g.device is a.device
    assert np.all(g.numpy() == 0)
    a.requires_grad = True
    assert a.grad is g
    a.requires_grad = False
    assert a.grad is None


def test_grad_can_be_set_to_a_matching_array():
    a = xa.zeros(3)
    g = xa.ones(3)
    a.grad = g
    assert a.grad is g and a.requires_grad
    a.grad = None
    assert a.grad is None and not a.requires_grad


@pytest.mark.cpu_only("the expected message names the cpu")
def test_grad_of_wrong_shape_or_dtype_is_refused():
    a = xa.zeros(3)
    with pytest.raises(ValueError, match=r"expected shape \(3,\), dtype float32, device cpu; got shape \(4,\)"):
        a.grad = xa.zeros(4)
    with pytest.raises(ValueError, match="got shape \\(3,\\), dtype float64"):
        a.grad = xa.zeros(3, dtype=T.float64)
    with pytest.raises(TypeError, match="must be an xsim array or None, got ndarray"):
        a.grad = np.zeros(3)


def test_view_of_array_with_grad_views_the_grad_too():
    a = xa.zeros((3, 2), requires_grad=True)
    row = a[1]
    assert row.requires_grad
    row.grad[0] = 4.0
    assert a.grad.numpy()[1, 0] == 4.0


# -- raw operations --------------------------------------------------------------------------------------------


def test_fill_untracked_sets_every_element():
    a = xa.zeros(3, dtype=T.vec3)
    a.fill_untracked(T.vec3(1, 2, 3))
    assert a.numpy().tolist() == [[1, 2, 3]] * 3
    a.fill_untracked(0.5)
    assert np.all(a.numpy() == 0.5)
    s = xa.zeros(2, dtype=Particle)
    s.fill_untracked(Particle(mass=2.0, flags=3))
    assert s[1] == Particle(mass=2.0, flags=3)


def test_zero_untracked_clears_scalars_composites_structs_and_views():
    for a in (xa.ones(3), xa.ones((2, 2), dtype=T.mat33), xa.full(2, Particle(mass=1.0, flags=2))):
        a.zero_untracked()
        assert not np.any(a.numpy().view(np.uint8))
    m = xa.ones((3, 3))
    m[:, 1].zero_untracked()
    assert m.numpy().tolist() == [[1, 0, 1]] * 3


def test_copy_from_untracked_copies_flat_element_ranges():
    dst = xa.zeros(5, dtype=T.vec2)
    src = array(np.arange(8, dtype=np.float32), dtype=T.vec2)
    dst.copy_from_untracked(src, dst_offset=1, src_offset=2, count=2)
    assert dst.numpy().tolist() == [[0, 0], [4, 5], [6, 7], [0, 0], [0, 0]]
    dst.copy_from_untracked(src, dst_offset=1)
    assert dst.numpy()[1:].tolist() == [[0, 1], [2, 3], [4, 5], [6, 7]]


def test_copy_from_untracked_treats_nd_arrays_as_flat():
    dst = xa.zeros((2, 3))
    dst.copy_from_untracked(array(np.arange(6, dtype=np.float32)), dst_offset=0)
    assert dst.numpy().tolist() == [[0, 1, 2], [3, 4, 5]]


def test_untracked_copy_between_equal_shaped_strided_views():
    a = array(np.arange(12, dtype=np.float32).reshape(3, 4))
    b = xa.zeros((3, 4))
    b[:, 3].copy_from_untracked(a[:, 0])
    assert b.numpy()[:, 3].tolist() == [0, 4, 8]


def test_copy_from_untracked_numpy_data():
    a = xa.zeros(2, dtype=T.vec3)
    a.copy_from_untracked(np.ones((2, 3)))
    assert np.all(a.numpy() == 1)


def test_untracked_copy_refuses_mismatched_dtypes_and_out_of_range():
    dst = xa.zeros(3)
    with pytest.raises(TypeError, match="cannot copy an array of float64 into an array of float32"):
        dst.copy_from_untracked(xa.zeros(3, dtype=T.float64))
    with pytest.raises(ValueError, match="copy range out of bounds: 3 elements from offset 0 of 3 into offset 1"):
        dst.copy_from_untracked(xa.zeros(3), dst_offset=1)
    src = xa.array(np.arange(6.0), dtype=float)[::2]  # [0, 2, 4], strided: offsets count its elements
    dst.copy_from_untracked(src, dst_offset=1, src_offset=1, count=2)
    assert dst.numpy().tolist() == [0.0, 2.0, 4.0]


def test_zeros_and_empty_with_strides_lay_elements_out_at_those_byte_offsets():
    a = xsim.zeros((3, 4), dtype=xsim.vec3, strides=(12, 36))  # column-major vec3s
    assert a.shape == (3, 4) and a.strides == (12, 36) and not a.is_contiguous
    assert a.capacity == 12 + 2 * 12 + 3 * 36 == xsim.zeros((4, 3), dtype=xsim.vec3).capacity
    a.fill_(xsim.vec3(1.0, 2.0, 3.0))
    np.testing.assert_array_equal(a.numpy(), np.tile([1.0, 2.0, 3.0], (3, 4, 1)))
    gapped = xsim.empty((3, 3), dtype=xsim.int32, strides=(16, 12))
    assert gapped.capacity == 4 + 2 * 16 + 2 * 12
    assert xsim.empty((0, 3), dtype=xsim.int32, strides=(4, 16)).capacity == 0
    with pytest.raises(ValueError, match=r"expected 2 strides, got 1 \(array strides \(4,\) for shape"):
        xsim.zeros((2, 2), strides=(4,))
    with pytest.raises(NotImplementedError, match=r"Negative strides \(16, -4\)"):
        xsim.empty((3, 3), dtype=xsim.int32, strides=(16, -4))


def test_list_of_a_scalar_array_gives_python_ints_floats_and_bools():
    for dtype, value, kind in ((xsim.int32, 42, int), (xsim.uint64, 7, int), (xsim.float32, 0.5, float),
                               (xsim.float16, 1.5, float), (xsim.bool, True, bool)):
        got = xsim.full((2, 2), value, dtype=dtype).list()
        assert got == [value] * 4 and all(type(v) is kind for v in got), (dtype, got)


# -- Warp's host API for external memory, empty arrays and shapes (issue 15) --------------------------


@pytest.mark.cpu_only("wraps numpy (host) memory by address")
def test_array_from_ptr_views_that_memory_with_the_given_shape_and_strides():
    src = np.arange(12, dtype=np.int32).reshape(3, 4)
    t = array(ptr=src.ctypes.data, dtype=T.int32, shape=(4, 3), strides=(4, 16), device="cpu")
    assert t.ptr == src.ctypes.data and not t.is_contiguous and t.strides == (4, 16)
    np.testing.assert_array_equal(t.numpy(), src.T)
    t.numpy()[1, 2] = -1  # writes reach the wrapped memory
    assert src[2, 1] == -1
    flat = array(ptr=src.ctypes.data, dtype=T.vec4i, shape=3, device="cpu", capacity=48)
    assert flat.is_contiguous and flat.capacity == 48 and list(flat[2]) == [8, -1, 10, 11]
    # numpy int32 strides and a far address: views keep exact Python-int pointer arithmetic (no memory is read)
    far = 140138692739072
    big = array(ptr=far, dtype=T.uint8, shape=(1024, 1024, 4), strides=tuple(np.int32(s) for s in (4096, 4, 1)),
                device="cpu")
    sub = big[512, 100:200, 2:]
    assert sub.ptr == far + 512 * 4096 + 100 * 4 + 2 and sub.shape == (100, 2)


@pytest.mark.cpu_only("wraps numpy (host) memory by address")
def test_array_from_ptr_calls_its_deleter_once_it_and_its_views_are_gone():
    src = np.zeros(16, np.float32)
    freed = []
    a = array(ptr=src.ctypes.data, dtype=float, shape=(16,), device="cpu", deleter=lambda p, n: freed.append((p, n)))
    view = a[4:8]
    del a
    gc.collect()
    assert freed == []  # the view still uses the memory
    del view
    gc.collect()
    assert freed == [(src.ctypes.data, 64)]
    array(ptr=src.ctypes.data, dtype=float, shape=(16,), device="cpu")  # no deleter: the memory stays the caller's
    gc.collect()
    assert len(freed) == 1 and src.sum() == 0


def test_array_from_ptr_refuses_data_too_a_missing_shape_and_a_short_capacity():
    with pytest.raises(RuntimeError, match="construct an array from either data or ptr, not both"):
        array([1.0, 2.0], ptr=1234)
    with pytest.raises(TypeError, match=r"xsim.array\(ptr=...\) needs the shape of the memory it wraps"):
        array(ptr=1234, dtype=float)
    with pytest.raises(ValueError, match=r"capacity 8 bytes is less than the 16 bytes that shape \(4,\)"):
        array(ptr=1234, dtype=float, shape=4, capacity=8)
    with pytest.raises(ValueError, match="Invalid number of strides, expected 2 strides, got 1"):
        array(ptr=1234, dtype=float, shape=(2, 2), strides=(4,))
    with pytest.raises(ValueError, match=r"address 0 holds no memory for shape \(3,\)"):
        array(ptr=0, dtype=float, shape=3)
    assert array(ptr=0, dtype=float, shape=0).ptr is None  # nothing to address


def test_array_with_strides_and_no_data_is_a_new_zeroed_strided_array():
    a = array(dtype=T.int32, shape=(3, 3), strides=(16, 4))
    assert a.strides == (16, 4) and a.capacity == 4 + 2 * 16 + 2 * 4 and not a.is_contiguous
    assert a.numpy().tolist() == [[0] * 3] * 3


def test_empty_arrays_address_no_memory():
    a = xsim.empty((0, 3), dtype=T.vec3, requires_grad=True)
    assert a.ptr is None and a.grad.ptr is None and a.desc.data is None
    b = xsim.empty((0, 3), dtype=T.int32, strides=(4, 16))
    assert b.ptr is None and b.capacity == 0
    a.zero_()
    a.fill_(T.vec3(1.0, 2.0, 3.0))
    xsim.copy(a, xsim.clone(a))
    assert a.numpy().shape == (0, 3, 3) and a.list() == [] and a.flatten().ptr is None
    assert xsim.zeros(5)[2:2].ptr is None


@pytest.mark.cpu_only("numpy's array interface is the host memory's")
def test_numpy_sees_cpu_arrays_through_the_array_interface_without_copies():
    a = xsim.zeros((2, 3), dtype=T.float32)
    assert np.shares_memory(np.asarray(a), a.numpy()) and np.shares_memory(np.array(a, copy=False), a.numpy())
    assert np.array(a, dtype=np.float32, copy=False).ctypes.data == a.ptr
    assert not np.shares_memory(np.asarray(a, dtype=np.float64), a.numpy())
    e = xsim.zeros((1, 0), dtype=T.vec2)
    assert e.__array_interface__["data"][0] != 0  # numpy needs an address even for no elements
    assert np.asarray(e).shape == (1, 0, 2) and np.asarray(e).strides == (0, 8, 4)


def test_dtype_any_infers_the_element_type_from_the_data():
    import typing
    src = np.ones(8, dtype=np.int16)
    a = array(src, dtype=typing.Any, copy=False)
    assert a.dtype is T.int16
    if a.device.is_cpu:
        assert a.ptr == src.ctypes.data and a._ref is src


def test_vector_and_matrix_data_split_the_last_dim_as_warp_does():
    assert array(np.zeros((4, 6)), dtype=T.vec3).shape == (4, 2)  # last dim a multiple of the length
    assert array(np.zeros((3, 4)), dtype=T.mat22).shape == (3,)   # last dim the matrix's component count
    assert array(np.zeros((4, 8)), dtype=T.mat22).shape == (4, 2)
    assert array(np.zeros((5, 3, 1)), dtype=T.vec3).shape == (5,)  # inner dims of length 1 dropped
    m = array(np.arange(12.0).reshape(3, 4), dtype=T.mat22)
    np.testing.assert_array_equal(m.numpy(), np.arange(12.0).reshape(3, 2, 2))


def test_fill_takes_a_matrix_as_its_flat_components():
    a = xsim.zeros(3, dtype=T.mat22)
    a.fill_(np.arange(4.0))
    np.testing.assert_array_equal(a.numpy(), np.tile(np.arange(4.0).reshape(2, 2), (3, 1, 1)))
    f = xsim.full(2, [1, 2, 3, 4], dtype=T.mat22)
    assert f.numpy()[1].tolist() == [[1, 2], [3, 4]]


def test_reshape_to_another_size_is_a_runtime_error_as_in_warp():
    with pytest.raises(RuntimeError, match=r"cannot reshape array of shape \(6,\) \(size 6\) into shape \(4, 2\)"):
        xsim.zeros(6).reshape((4, 2))


def test_struct_numpy_dtype_is_the_record_dtype_of_its_arrays():
    dt = Particle.numpy_dtype()
    na = np.zeros(3, dtype=dt)
    na["mass"] = 2.0
    a = array(na, dtype=Particle)
    assert a.numpy().dtype == dt and a.list()[1].mass == 2.0

    @T.struct
    class WithArray:
        a: xsim.array(dtype=float)
    # an array field is laid out as the native array view a kernel reads (pointer, shape, byte strides, flags)
    assert WithArray.numpy_dtype().itemsize == ctypes.sizeof(T.ArrayDesc)
    assert WithArray.numpy_dtype()["a"].names == ("data", "shape", "strides", "flags")


def test_array_of_a_foreign_buffer_copies_it_as_it_copies_a_numpy_array():
    pytest.importorskip("pxr")
    from pxr import Gf, Vt
    vt = Vt.Vec3fArray([Gf.Vec3f(1, 2, 3), Gf.Vec3f(4, 5, 6)]) * 10.0  # numpy reads it read-only
    a = array(vt, dtype=T.vec3)
    np.testing.assert_array_equal(a.numpy(), [[10, 20, 30], [40, 50, 60]])
    a.fill_(1.0)  # a private, writable copy (Warp's example_mesh deforms such an array)
    assert list(vt[0]) == [10.0, 20.0, 30.0]
    raw = bytearray(8)
    b = array(memoryview(raw).cast("f"), dtype=T.float32)
    b.fill_(2.0)
    assert bytes(raw) == bytes(8)
    shared = array(memoryview(raw).cast("f"), dtype=T.float32, copy=False)
    shared.fill_(2.0)  # copy=False keeps sharing, as for numpy arrays
    np.testing.assert_array_equal(np.frombuffer(raw, np.float32), [2.0, 2.0])
