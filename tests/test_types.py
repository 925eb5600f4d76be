"""Specification of the Python side of xsim's value types (xsim/types.py)."""

import ctypes
import gc
import re
import warnings
import weakref

import numpy as np
import pytest

import xsim
from xsim import types as T

# -- scalars -------------------------------------------------------------------------------------


@pytest.mark.parametrize("t, np_dtype", [
    (T.float16, np.float16), (T.float32, np.float32), (T.float64, np.float64),
    (T.int8, np.int8), (T.int16, np.int16), (T.int32, np.int32), (T.int64, np.int64),
    (T.uint8, np.uint8), (T.uint16, np.uint16), (T.uint32, np.uint32), (T.uint64, np.uint64),
    (T.bool_, np.bool_),
])
def test_scalar_call_converts_to_numpy_scalar_and_round_trips_numpy_dtype(t, np_dtype):
    v = t(1)
    assert isinstance(v, np_dtype) and np.asarray(v).dtype == np_dtype and type(v + v) is np_dtype
    assert v == 1
    assert T.scalar_from_numpy(np_dtype) is t
    assert t._np.itemsize == ctypes.sizeof(t._ctypes)


def test_a_scalar_value_is_an_instance_of_its_own_scalar_type_only():
    assert isinstance(T.uint8(1), T.uint8) and isinstance(np.float32(1.5), T.float32)
    assert not isinstance(T.uint8(1), T.int8) and not isinstance(1.5, T.float32) and not isinstance(1, T.int32)


def test_scalar_conversion_truncates_like_numpy():
    assert T.int32(3.7) == 3
    assert T.float32(0.1) == np.float32(0.1)


def test_integer_scalars_wrap_64_bit_python_ints_like_c_casts():
    assert T.uint32(-1) == 2**32 - 1 and T.int8(200) == -56 and T.int64(2**63) == -2**63 and T.uint8(256) == 0
    assert isinstance(T.uint32(-1), np.uint32)
    with pytest.raises(OverflowError):
        T.int32(2**70)  # past 64 bits: no C cast to mimic


def test_scalar_predicates_split_float_int_and_bool():
    assert all(T.is_float(t) for t in (T.float16, T.float32, T.float64))
    assert T.is_int(T.uint64) and not T.is_int(T.float32) and not T.is_float(T.bool_)
    assert T.is_scalar(T.int8) and not T.is_scalar(T.vec3) and not T.is_scalar(3)


def test_python_builtins_resolve_to_float32_int32_bool():
    assert T.resolve(float) is T.float32
    assert T.resolve(int) is T.int32
    assert T.resolve(bool) is T.bool_
    assert T.resolve(T.vec3) is T.vec3


def test_scalar_from_numpy_rejects_types_without_xsim_scalar():
    with pytest.raises(TypeError, match="complex128"):
        T.scalar_from_numpy(np.complex128)


# -- vectors ---------------------------------------------------------------------------------------


def test_vector_types_are_cached_and_named_like_warp():
    assert T.vector(3, T.float32) is T.vec3
    assert T.vector(3, float) is T.vec3
    assert T.vector(length=3, dtype=T.float32) is T.vec3
    assert T.matrix([3, 3], float) is T.mat33
    assert T.quaternion(float) is T.quat and T.transformation(float) is T.transform
    assert T.vec3f is T.vec3
    assert T.vector(3, T.float64) is T.vec3d
    assert T.vec3._shape == (3,) and T.vec3._scalar is T.float32 and T.vec3._length == 3
    assert T.vec4i._scalar is T.int32
    assert T.vec3._ctype == "xs::vec_t<3, float>"
    assert ctypes.sizeof(T.vec3d._ctypes) == 24


def test_vector_constructors_from_components_fill_and_sequence():
    assert T.vec3(1, 2, 3) == [1.0, 2.0, 3.0]
    assert T.vec3() == [0.0, 0.0, 0.0]
    assert T.vec3(2.5) == [2.5, 2.5, 2.5]
    assert T.vec3([4, 5, 6]) == [4.0, 5.0, 6.0]
    assert T.vec3(np.array([7.0, 8.0, 9.0])) == [7.0, 8.0, 9.0]


def test_vector_with_wrong_component_count_raises():
    with pytest.raises(ValueError, match="vec3f needs 3 components, got 2"):
        T.vec3(1.0, 2.0)


def test_vector_components_read_and_write_by_name_and_index():
    v = T.vec4(1, 2, 3, 4)
    assert (v.x, v.y, v.z, v.w) == (1.0, 2.0, 3.0, 4.0)
    assert v[2] == 3.0
    v.y = 20.0
    v[3] = 40.0
    assert v == [1.0, 20.0, 3.0, 40.0]
    assert len(v) == 4
    assert list(v) == [1.0, 20.0, 3.0, 40.0]


def test_components_past_a_vectors_length_and_swizzles_are_no_attributes():
    v = T.vec2(1, 2)
    for name in ("z", "w"):
        with pytest.raises(AttributeError, match=f"no attribute '{name}'$"):
            getattr(v, name)
        with pytest.raises(AttributeError, match=f"no attribute '{name}'$"):
            setattr(v, name, 9.0)
    assert not hasattr(v, "w") and list(v) == [1.0, 2.0]
    v3 = T.vec3(1, 2, 3)
    with pytest.raises(AttributeError, match="no attribute 'xy'$"):
        v3.xy = 9.0
    with pytest.raises(AttributeError, match="no attribute 'xyz'$"):
        v3.xyz
    assert list(v3) == [1.0, 2.0, 3.0] and T.quat(0, 0, 0, 1).w == 1.0


def test_vector_arithmetic_keeps_the_type():
    a, b = T.vec3(1, 2, 3), T.vec3(4, 5, 6)
    for r, expected in ((a + b, [5, 7, 9]), (b - a, [3, 3, 3]), (-a, [-1, -2, -3]), (2 * a, [2, 4, 6]),
                        (a * 2, [2, 4, 6]), (b / 2, [2, 2.5, 3]), ([1, 1, 1] - a, [0, -1, -2])):
        assert type(r) is T.vec3
        assert r == expected


def test_numpy_scalar_on_the_left_keeps_the_type_and_arrays_stay_numpy():
    q, m = T.quath(1, -2, 3, -4), T.mat22(1, 2, 3, 4)
    for r, expected in ((np.float16(2) * q, [2, -4, 6, -8]), (np.float64(1) - q, [0, 3, -2, 5]),
                        (np.float16(1) + q, [2, -1, 4, -3]), (np.float16(12) / q, [12, -6, 4, -3])):
        assert type(r) is T.quath and r == expected
    assert type(np.float32(2) * m) is T.mat22 and np.float32(2) * m == [[2, 4], [6, 8]]
    # arrays and ufuncs still compute on the components and give numpy arrays, as before
    rows = np.ones((2, 4)) - q
    assert type(rows) is np.ndarray and rows.tolist() == [[0, 3, -2, 5]] * 2
    assert (np.ones(4) == q).tolist() == [True, False, False, False]
    assert type(np.abs(q)) is np.ndarray and np.abs(q).tolist() == [1, 2, 3, 4]


def test_row_vector_times_matrix_on_the_host():
    m, v = T.mat33d((-1, 2, 3), (4, -5, 6), (7, 8, -9)), T.vec3d(5, 5, 5)
    for r in (v * m, v @ m):
        assert type(r) is T.vec3d and r == [50, 25, 0]
    assert m * v == [20, 25, 30] and m @ v == [20, 25, 30]
    with pytest.raises(RuntimeError, match="Couldn't find a function 'mul' compatible with the arguments 'vec3f, mat33d'"):
        T.vec3(1, 2, 3) @ m


def test_a_host_scalar_on_the_left_keeps_the_composite_type_and_numpy_arrays_stay_numpy():
    v, m = T.vec3(1, 2, 4), T.mat22(1, 2, 3, 4)
    i8 = T.vector(3, T.int8)(1, 2, 3)
    for r, expected in ((T.float32(2) * v, [2, 4, 8]), (T.float32(2) - v, [1, 0, -2]),
                        (T.float32(2) + v, [3, 4, 6]), (T.float32(2) / v, [2, 1, 0.5]),
                        (T.float32(-5) % v, np.fmod(-5, [1, 2, 4])), (T.int8(3) * i8, [3, 6, 9]),
                        (T.float32(2) * m, [[2, 4], [6, 8]])):
        assert isinstance(r, T._Composite)
        np.testing.assert_array_equal(np.asarray(r), expected)
    assert type(T.int8(3) * i8) is type(i8) and type(T.float32(2) * m) is T.mat22
    for r, expected in ((np.ones(3) * v, [1, 2, 4]), (np.sin(v), np.sin(np.float32([1, 2, 4]))),
                        (np.ones(3) == v, [True, False, False])):
        assert type(r) is np.ndarray
        np.testing.assert_array_equal(r, expected)


def test_vector_compares_as_a_whole_value():
    assert T.vec3(1, 2, 3) == T.vec3(1, 2, 3)
    assert T.vec3(1, 2, 3) != T.vec3(1, 2, 4)
    assert T.vec3(1, 2, 3) != T.vec4(1, 2, 3, 0)
    assert T.vec3(1, 2, 3) != "abc"


def test_vector_converts_with_numpy_asarray_as_a_copy():
    v = T.vec3(1, 2, 3)
    a = np.asarray(v)
    assert a.dtype == np.float32 and a.tolist() == [1.0, 2.0, 3.0]
    a[0] = 100.0
    assert v.x == 1.0
    assert np.asarray(T.vec3d(1, 2, 3)).dtype == np.float64
    assert np.asarray(v, dtype=np.int64).dtype == np.int64


def test_integer_vectors_store_integers():
    v = T.vec3i(1.9, 2, 3)
    assert np.asarray(v).dtype == np.int32
    assert v == [1, 2, 3]


def test_vector_repr_names_the_type_and_components():
    assert repr(T.vec2(1.5, 2)) == "vec2f(1.5, 2.0)"


def test_vectors_are_unhashable_mutable_values():
    with pytest.raises(TypeError):
        hash(T.vec3())


# -- matrices --------------------------------------------------------------------------------------


def test_matrix_types_are_row_major_and_named_like_warp():
    assert T.matrix((3, 3), T.float32) is T.mat33
    assert T.matrix((2, 2), T.float64) is T.mat22d
    assert T.mat33._shape == (3, 3) and T.mat44._ctype == "xs::mat_t<4, 4, float>"
    assert T.matrix((2, 3))._shape == (2, 3)
    m = T.mat22(1, 2, 3, 4)
    assert m[0, 1] == 2.0 and m[1, 0] == 3.0


def test_matrix_constructors_from_rows_nested_lists_and_fill():
    rows = T.mat33(T.vec3(1, 2, 3), T.vec3(4, 5, 6), T.vec3(7, 8, 9))
    assert rows == np.arange(1, 10).reshape(3, 3)
    assert T.mat22([[1, 2], [3, 4]]) == [[1, 2], [3, 4]]
    assert T.mat22() == np.zeros((2, 2))
    assert T.mat22(5.0) == [[5.0, 5.0], [5.0, 5.0]]


def test_matrix_times_vector_and_matrix():
    m = T.mat22(1, 2, 3, 4)
    v = T.vec2(1, 1)
    mv = m @ v
    assert type(mv) is T.vec2 and mv == [3.0, 7.0]
    assert m * v == [3.0, 7.0]
    mm = m @ T.mat22(0, 1, 1, 0)
    assert type(mm) is T.mat22 and mm == [[2, 1], [4, 3]]
    assert m * 2 == [[2, 4], [6, 8]]


def test_a_product_of_matrices_of_two_scalar_types_is_refused_in_warps_words():
    with pytest.raises(RuntimeError, match=r"^Couldn't find a function 'mul' compatible with the arguments "
                                           r"'mat22f, mat22d'$"):
        T.mat22f(1, 2, 3, 4) * T.mat22d(1, 2, 3, 4)


def test_non_square_matrix_product_has_the_right_shape():
    a = T.matrix((2, 3), T.float32)(1, 2, 3, 4, 5, 6)
    b = T.matrix((3, 2), T.float32)(1, 0, 0, 1, 1, 1)
    c = a @ b
    assert c._shape == (2, 2) and c == [[4, 5], [10, 11]]


def test_matrix_element_write():
    m = T.mat33()
    m[1, 2] = 7.0
    assert np.asarray(m)[1, 2] == 7.0 and np.asarray(m).sum() == 7.0


# -- quaternions and transforms ----------------------------------------------------------------------


def test_quaternion_is_xyzw_with_four_components():
    q = T.quat(0, 0, 0, 1)
    assert T.quat._kind == "quat" and T.quat._shape == (4,)
    assert (q.x, q.y, q.z, q.w) == (0.0, 0.0, 0.0, 1.0)
    assert T.quaternion(T.float64) is T.quatd


def test_transform_defaults_to_identity_and_splits_into_p_and_q():
    t = T.transform()
    assert t == [0, 0, 0, 0, 0, 0, 1]
    t = T.transform(T.vec3(1, 2, 3), T.quat(0, 0, 1, 0))
    assert t == [1, 2, 3, 0, 0, 1, 0]
    assert type(t.p) is T.vec3 and t.p == [1, 2, 3]
    assert type(t.q) is T.quat and t.q == [0, 0, 1, 0]
    assert T.transform._shape == (7,) and T.transformd._scalar is T.float64


def _hamilton(a, b):
    """The quaternion product written out component by component (x, y, z, w)."""
    (x1, y1, z1, w1), (x2, y2, z2, w2) = a, b
    return [w1 * x2 + x1 * w2 + y1 * z2 - z1 * y2, w1 * y2 - x1 * z2 + y1 * w2 + z1 * x2,
            w1 * z2 + x1 * y2 - y1 * x2 + z1 * w2, w1 * w2 - x1 * x2 - y1 * y2 - z1 * z2]


def test_quaternion_and_transform_products_on_the_host():
    a, b = [0.5, -1.0, 2.0, 0.25], [1.5, 0.5, -0.75, 2.0]
    np.testing.assert_allclose(np.asarray(T.quatd(*a) * T.quatd(*b)), _hamilton(a, b), rtol=1e-15)
    # a unit rotation: t * u maps a point as t(u(x)), checked against rotation matrices
    rng = np.random.default_rng(3)
    q1, q2 = (q / np.linalg.norm(q) for q in rng.normal(size=(2, 4)))
    p1, p2, x = rng.normal(size=(3, 3))

    def rot(q):
        (i, j, k), w = q[:3], q[3]
        return np.array([[1 - 2 * (j * j + k * k), 2 * (i * j - k * w), 2 * (i * k + j * w)],
                         [2 * (i * j + k * w), 1 - 2 * (i * i + k * k), 2 * (j * k - i * w)],
                         [2 * (i * k - j * w), 2 * (j * k + i * w), 1 - 2 * (i * i + j * j)]])
    tu = np.asarray(T.transformd(p1, q1) * T.transformd(p2, q2))
    np.testing.assert_allclose(rot(tu[3:]) @ x + tu[:3], rot(q1) @ (rot(q2) @ x + p2) + p1, rtol=1e-12)
    np.testing.assert_allclose(tu[3:], _hamilton(q1, q2), rtol=1e-12)


def test_transform_keywords_p_and_q_each_default_to_the_identity():
    assert T.transform(p=(1, 2, 3)) == [1, 2, 3, 0, 0, 0, 1]
    assert T.transform(q=(4, 5, 6, 7)) == [0, 0, 0, 4, 5, 6, 7]
    assert T.transform((1, 2, 3), q=(4, 5, 6, 7)) == T.transform(q=(4, 5, 6, 7), p=(1, 2, 3))
    with pytest.raises(TypeError, match="^got an unexpected keyword argument 'pos'$"):
        T.transform(pos=T.vec3())
    with pytest.raises(TypeError, match="^multiple values for argument 'q'$"):  # Warp's wording
        T.transform((1, 2, 3), (0, 0, 0, 1), q=(0, 0, 0, 1))
    with pytest.raises(TypeError, match="^multiple values for argument 'q'$"):
        T.transform(1, 2, 3, 0, 0, 0, 1, q=(0, 0, 0, 1))


def test_transform_from_seven_components_one_fill_value_or_its_translation():
    assert T.transform(1, 2, 3, 0, 0, 0, 1).p == [1, 2, 3]
    assert T.transformh(np.float32(1.5)) == [1.5] * 7 and T.transformd(True) == [1.0] * 7
    assert T.transform((1, 2, 3)) == [1, 2, 3, 0, 0, 0, 1]


@pytest.mark.parametrize("args, kwargs, message", [
    ((object(),), {}, "Invalid argument in transformation constructor: expected a scalar value, got object"),
    ((1.5, 2.5), {}, "Invalid argument 'p' in transformation constructor: expected a sequence, got float"),
    (((1, 2, 3), 1.0), {}, "Invalid argument 'q' in transformation constructor: expected a sequence, got float"),
    ((), {"q": 1.0}, "Invalid argument 'q' in transformation constructor: expected a sequence, got float"),
])
def test_transform_constructor_refuses_what_cannot_fill_it_with_warps_wording(args, kwargs, message):
    with pytest.raises(TypeError, match=f"^{re.escape(message)}$"):
        T.transformf(*args, **kwargs)


def test_transform_parts_can_be_assigned():
    t = T.transformd()
    t.p = T.vec3d(1, 2, 3)
    t.q = (0.0, 0.0, 1.0, 0.0)
    assert t == [1, 2, 3, 0, 0, 1, 0] and type(t.p) is T.vec3d


def test_composite_predicates_and_component_counts():
    assert T.is_vector(T.vec3) and not T.is_vector(T.mat33)
    assert T.is_matrix(T.mat33)
    assert all(T.is_composite(t) for t in (T.vec3, T.mat33, T.quat, T.transform))
    assert [T.num_components(t) for t in (T.float32, T.vec3, T.mat33, T.quat, T.transform)] == [1, 3, 9, 4, 7]
    assert T.type_name(T.mat44d) == "mat44d" and T.type_name(None) == "None"


def test_vector_of_non_scalar_components_is_refused():
    with pytest.raises(TypeError, match="components must be a scalar type"):
        T.vector(3, T.vec3)


# -- structs ---------------------------------------------------------------------------------------------


@T.struct
class Particle:
    mass: float
    pos: T.vec3
    flags: T.int32


@T.struct
class Body:
    part: Particle
    xform: T.transform
    inertia: T.mat33


@T.struct
class WithArray:
    values: T.ArrayType(T.float32)
    scale: float


def test_struct_fields_default_to_zero_and_identity():
    p = Particle()
    assert p.mass == 0.0 and p.pos == [0, 0, 0] and p.flags == 0
    b = Body()
    assert b.part == Particle() and b.xform == [0, 0, 0, 0, 0, 0, 1] and b.inertia == np.zeros((3, 3))


def test_struct_fields_keep_python_numbers_and_convert_other_values():
    p = Particle(mass=2, pos=[1, 2, 3], flags=7.0)
    assert type(p.mass) is int and p.mass == 2          # a Python number stays one, as in Warp
    assert type(p.pos) is T.vec3 and p.pos == [1, 2, 3]
    assert isinstance(p.flags, T.int32) and type(p.flags) is not int and p.flags == 7  # a float would lose its kind
    p.mass, p.flags = np.float64(1.5), 300
    assert isinstance(p.mass, np.float32) and isinstance(p.mass, T.float32) and p.mass == 1.5
    assert isinstance(p.flags, int) and p.flags == 300


def test_struct_field_of_a_small_int_type_keeps_a_python_int_only_when_it_fits():
    @T.struct
    class Small:
        u8: T.uint8

    s = Small(u8=300)
    assert isinstance(s.u8, T.uint8) and s.u8 == 44    # wrapped, as the kernel sees it
    s.u8 = 7
    assert type(s.u8) is int and s.u8 == 7


def test_struct_composite_field_refuses_a_single_number():
    for value in (123, 1.5, T.float32(1.5), T.int32(2), T.uint8(3)):
        with pytest.raises(TypeError, match="Struct field 'pos' expects vec3f but got a single value of type"):
            Particle(pos=value)


@pytest.mark.parametrize("value, fill", [(True, 1.0), (np.bool_(False), 0.0), (xsim.bool(True), 1.0),
                                         (np.float32(1.5), 1.5), (np.float64(-2.25), -2.25), (np.int64(3), 3.0),
                                         (np.uint8(7), 7.0)])
def test_struct_composite_field_fills_from_a_bool_or_numpy_number_with_a_deprecation_on_stderr(value, fill, capfd):
    # Warp still promotes these (a bool, numpy's numbers) and says it is deprecated on stderr, where a
    # warning recorder does not swallow it; xsim's own scalar values (above) are refused
    with warnings.catch_warnings():
        warnings.simplefilter("always", DeprecationWarning)
        p = Particle(pos=value)
    name = type(value).__name__
    assert re.search(rf"type `{name}`.*`vec3f`.*struct field 'pos'.*deprecated", capfd.readouterr().err)
    assert p.pos == [fill] * 3

    @T.struct
    class Frame:
        m: T.mat22
        t: T.transform

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        f = Frame(m=value, t=value)
    assert np.asarray(f.m).tolist() == [[fill, fill], [fill, fill]] and list(f.t) == [fill] * 7
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        with pytest.raises(DeprecationWarning):
            Frame(m=value)


def test_struct_composite_field_bool_fill_and_none_reset():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        p = Particle(pos=True)
    assert p.pos == [1, 1, 1]
    p.pos = None
    assert p.pos == [0, 0, 0]


def test_struct_deriving_from_a_struct_is_refused():
    with pytest.raises(RuntimeError, match="Warp structs must be defined as base classes"):
        @T.struct
        class Heavier(Particle):
            extra: float


def test_struct_cls_is_the_class_of_its_instances():
    assert Particle.cls is Particle and isinstance(Particle(), Particle.cls)


def test_struct_rejects_unknown_fields():
    with pytest.raises(AttributeError, match="struct Particle has no field 'velocity'"):
        Particle(velocity=1.0)


def test_struct_equality_compares_every_field():
    assert Particle(mass=1.0, pos=[1, 2, 3]) == Particle(mass=1.0, pos=[1, 2, 3])
    assert Particle(mass=1.0) != Particle(mass=2.0)
    assert Body(part=Particle(mass=1.0)) != Body()


def test_struct_numpy_record_layout_matches_its_ctypes_layout():
    assert Particle._np.names == ("mass", "pos", "flags")
    assert Particle._np.itemsize == ctypes.sizeof(Particle._ctypes) == 20
    assert Body._np.itemsize == ctypes.sizeof(Body._ctypes)
    assert Body._np["inertia"].shape == (3, 3)


def test_struct_with_array_field_records_the_native_array_view():
    assert WithArray._has_arrays and WithArray._ctypes._fields_[0][1] is T.ArrayDesc
    assert WithArray._np.itemsize == ctypes.sizeof(WithArray._ctypes)
    assert WithArray._np.fields["scale"][1] == WithArray._ctypes.scale.offset


def test_struct_containing_a_struct_with_arrays_also_has_arrays():
    @T.struct
    class Outer:
        inner: WithArray
        k: int

    assert Outer._has_arrays and Outer._np.itemsize == ctypes.sizeof(Outer._ctypes)


def test_struct_array_field_checks_dtype_and_ndim():
    class FakeArray:
        dtype, ndim = T.float32, 1

    s = WithArray(values=FakeArray(), scale=2.0)
    assert isinstance(s.values, FakeArray)
    FakeArray.ndim = 2
    with pytest.raises(TypeError, match=r"Struct field 'values' expects an array with 1 dimension\(s\), got 2"):
        WithArray(values=FakeArray())
    FakeArray.ndim, FakeArray.dtype = 1, T.int32
    with pytest.raises(TypeError, match="Struct field 'values' expects dtype float32, got int32"):
        WithArray(values=FakeArray())
    with pytest.raises(TypeError, match="Struct field 'values' expects a Warp array, got list"):
        WithArray(values=[1.0, 2.0])


def test_struct_keeps_its_array_fields_grad_alive_until_the_field_is_replaced():
    a = xsim.array([1.0, 2.0, 3.0], dtype=T.float32, requires_grad=True)
    grad = weakref.ref(a.grad)
    s = WithArray(values=a)
    assert s._values_grad is a.grad
    del a
    gc.collect()
    assert grad() is not None and s.values.grad is grad()
    for replacement in (None, xsim.zeros(3, dtype=T.float32), xsim.zeros(3, dtype=T.float32, requires_grad=True)):
        s.values = replacement
        assert s._values_grad is (replacement.grad if replacement is not None else None)
    gc.collect()
    assert grad() is None   # released once no field refers to it
    data = xsim.zeros(4, dtype=T.float32, requires_grad=True)

    @T.struct
    class WithIndexed:
        view: xsim.indexedarray(dtype=T.float32)

    w = WithIndexed(view=xsim.indexedarray(data, [xsim.array([0, 2], dtype=T.int32)]))
    assert w._view_grad is data.grad


def test_struct_accepts_string_annotations_from_postponed_evaluation():
    class Postponed:
        __annotations__ = {"mass": "float", "pos": "T.vec3"}

    S = T.struct(Postponed)
    assert S._fields == {"mass": T.float32, "pos": T.vec3}
    assert S(pos=[1, 2, 3]).pos == [1, 2, 3]


def test_struct_field_of_unsupported_type_is_refused():
    with pytest.raises(TypeError, match="field 'name' has unsupported type"):
        @T.struct
        class Bad:
            name: str


def test_struct_repr_lists_fields():
    assert repr(Particle(mass=1.0)).startswith("Particle(mass=")


# -- array types ----------------------------------------------------------------------------------------


def test_array_type_compares_by_dtype_and_ndim():
    assert T.ArrayType(float, 2) == T.ArrayType(T.float32, 2)
    assert T.ArrayType(T.vec3) != T.ArrayType(T.vec3, 2)
    assert hash(T.ArrayType(T.vec3)) == hash(T.ArrayType(T.vec3, 1))
    assert repr(T.ArrayType(T.vec3, 2)) == "array(dtype=vec3f, ndim=2)"


def test_array_type_rejects_bad_dtype_and_ndim():
    with pytest.raises(TypeError, match="array dtype must be an xsim value type"):
        T.ArrayType(str)
    with pytest.raises(ValueError, match="ndim must be 1 to 4, got 5"):
        T.ArrayType(T.float32, 5)


def test_array_desc_is_data_pointer_four_shapes_and_strides_and_flags():
    assert ctypes.sizeof(T.ArrayDesc) == 8 + 4 * 8 + 4 * 8 + 8
    assert [f for f, _ in T.ArrayDesc._fields_] == ["data", "shape", "strides", "flags"]


def test_struct_native_name_is_the_same_in_every_process(tmp_path):
    # the kernel cache key includes it: a per-process name would recompile struct kernels every run
    import subprocess
    import sys

    src = tmp_path / "structs_mod.py"
    src.write_text("import xsim\n\n@xsim.struct\nclass Params:\n    a: float\n    v: xsim.vec3\n\nprint(Params._ctype)\n")
    names = {subprocess.run([sys.executable, str(src)], check=True, capture_output=True, text=True).stdout
             for _ in range(2)}
    assert len(names) == 1 and names.pop().startswith("Params_")


def test_vector_values_take_other_attributes_but_unknown_reads_are_attribute_errors():
    # as Warp's: `v.bar = 123` is allowed (a plain attribute), `v.foo` and swizzles raise AttributeError
    v = xsim.vec3(1.0, 2.0, 3.0)
    v.bar = 123
    assert v.bar == 123 and v == xsim.vec3(1.0, 2.0, 3.0)
    for name in ("foo", "xy", "xyz"):
        with pytest.raises(AttributeError, match=rf"'vec3f' object has no attribute '{name}'$"):
            getattr(v, name)


def test_host_integer_constructors_wrap_out_of_range_ints_as_warp_does():
    assert xsim.uint32(-1) == np.uint32(4294967295) and xsim.int8(200) == np.int8(-56)
    assert xsim.int64(2**64 - 1) == -1 and xsim.uint64(-1) == np.uint64(2**64 - 1)
    np.testing.assert_array_equal(np.asarray(xsim.vec3ub(-1, 256, 3)), [255, 0, 3])
    with pytest.raises(OverflowError, match="does not fit in 64 bits"):
        xsim.uint32(2**70)


def test_a_struct_declared_with_warp_is_a_field_type_of_the_same_layout():
    wp = pytest.importorskip("warp")

    @wp.struct
    class Body:
        pose: wp.transform
        inertia: wp.mat33d
        count: int
        axes: wp.array(dtype=wp.vec3, ndim=2)

    @xsim.struct
    class Holder:
        body: Body
        weight: wp.float16

    body = Holder._fields["body"]
    assert body._fields == {"pose": xsim.transform, "inertia": xsim.mat33d, "count": xsim.int32,
                            "axes": xsim.array2d(dtype=xsim.vec3)}
    assert Holder._fields["weight"] is xsim.float16

    @wp.struct
    class Plain:
        a: wp.vec2i
        b: float
        c: wp.quat

    @xsim.struct
    class Twice:
        first: Plain
        second: Plain

    mirror = Twice._fields["first"]
    assert Twice._fields["second"] is mirror  # one Warp struct, one mirror
    ours, warps = mirror._ctypes, Plain.ctype
    assert ctypes.sizeof(ours) == ctypes.sizeof(warps)
    assert [getattr(ours, f).offset for f, _ in ours._fields_] == [getattr(warps, f).offset for f, _ in warps._fields_]


def test_warps_type_size_and_types_equal():
    assert [T.type_size(t) for t in (float, xsim.vec3, xsim.mat33, xsim.transform, xsim.quatd)] == [1, 3, 9, 7, 4]
    assert T.types_equal(float, xsim.float32) and T.types_equal(T.vector(3, xsim.float32), xsim.vec3)
    assert not T.types_equal(xsim.vec3, xsim.vec3d) and not T.types_equal(int, xsim.int64)


def test_values_print_as_warps_lists_and_a_matrix_index_gives_its_row_vector():
    assert str(xsim.vec3(1.0, 2.0, 3.5)) == "[1.0, 2.0, 3.5]"
    assert str(xsim.transform_identity()) == "[0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0]"
    assert str(xsim.mat22(1.0, 2.0, 3.0, 4.0)) == "[[1.0, 2.0],\n [3.0, 4.0]]"
    assert repr(xsim.vec2(1.0, 2.0)) == "vec2f(1.0, 2.0)"
    m = xsim.mat33(*range(9))
    row = m[1]
    assert type(row) is xsim.vec3 and row == [3.0, 4.0, 5.0] and m[1, 2] == 5.0
    row[0] = 9.0  # a copy, as Warp's
    assert m[1, 0] == 3.0


def test_vector_remainder_and_reflected_division_follow_c_as_kernels_do():
    v = xsim.vec3i(7, -7, 6)
    assert v % xsim.vec3i(3, 3, 4) == xsim.vec3i(1, -1, 2)  # the dividend's sign, as C's %
    assert 24 / xsim.vec3i(2, 4, -5) == xsim.vec3i(12, 6, -4)  # truncated toward zero
    h = xsim.vec3h(1.0, 2.0, 4.0)
    np.testing.assert_array_equal(np.asarray(2.0 / h), np.array([2.0, 1.0, 0.5], np.float16))
    np.testing.assert_array_equal(np.asarray(h % xsim.float16(1.5)), np.fmod([1.0, 2.0, 4.0], 1.5).astype(np.float16))


def test_warp_type_groups_scalar_types_without_bool_and_vector_types_of_every_named_family():
    assert xsim.bool not in xsim.types.scalar_types and xsim.bool in xsim.types.scalar_and_bool_types
    assert set(xsim.types.scalar_types) == set(xsim.types.int_types) | set(xsim.types.float_types)
    assert all(t._length_ == 1 for t in xsim.types.scalar_and_bool_types)
    groups = xsim.types.vector_types
    assert len(groups) == len(set(groups)) == 54
    for t in (xsim.vec2ub, xsim.vec3f, xsim.vec4d, xsim.mat33h, xsim.quatd, xsim.transformf, xsim.spatial_matrixd):
        assert t in groups
    assert [t._length_ for t in (xsim.vec3f, xsim.mat33f, xsim.transformf, xsim.spatial_matrixd)] == [3, 9, 7, 36]
    assert [t._wp_generic_type_str_ for t in (xsim.vec2ub, xsim.mat22d, xsim.quath, xsim.transformf)] == \
        ["vec_t", "mat_t", "quat_t", "transform_t"]
    # each named type's class name is the name it is reached by, as in Warp (tests build source from it)
    for t in groups:
        assert getattr(xsim, t.__name__) is t, t.__name__
    assert [t.__name__ for t in (xsim.vec2b, xsim.vec3s, xsim.spatial_vectorh, xsim.spatial_matrixf)] == \
        ["vec2b", "vec3s", "spatial_vectorh", "spatial_matrixf"]
    assert T.vector(3, xsim.bool).__name__ == "vec3bool"  # Warp names no bool vector; it is not vec3b (int8)


def test_warp_src_types_tables_map_numpy_dtypes_and_give_contiguous_byte_strides():
    src = xsim._src.types
    assert src.np_dtype_to_warp_type[np.float16] is xsim.float16
    assert src.np_dtype_to_warp_type[np.dtype(np.uint8)] is xsim.uint8
    assert src.np_dtype_to_warp_type[np.bool_] is xsim.bool
    assert all(np.dtype(k) == src.warp_type_to_np_dtype[t] for k, t in src.np_dtype_to_warp_type.items())
    assert src.strides_from_shape((2, 3, 5), xsim.vec3d) == np.zeros((2, 3, 5, 3)).strides[:3]
    assert src.strides_from_shape((4,), xsim.int16) == (2,)
    assert src.vec3 is xsim.vec3  # everything else is xsim.types
