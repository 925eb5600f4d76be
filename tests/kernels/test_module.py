"""Kernel identity and module builds: kernels of one name made by a factory, closures over different
constants or funcs, re-executed notebook cells, and one refused kernel among good ones.

The factory kernels are made at import, so this module compiles once; each test checks numbers
computed with numpy.
"""

import gc
import importlib.util
import linecache
import types

import numpy as np
import pytest

import xsim

X = np.array([0.0, 2.0, 4.0, 6.0])


def make_affine(dtype):
    """A kernel named ``affine`` typed by ``dtype``: y = x / 2 + 1 (Warp's factory pattern)."""
    @xsim.kernel
    def affine(x: xsim.array(dtype=dtype), y: xsim.array(dtype=dtype)):
        i = xsim.tid()
        y[i] = x[i] * dtype(0.5) + dtype(1.0)
    return affine


def make_scaled(c: float):
    """A kernel named ``scaled`` whose func ``times`` captures the constant ``c``."""
    @xsim.func
    def times(v: float):
        return v * c

    @xsim.kernel
    def scaled(x: xsim.array(dtype=float), y: xsim.array(dtype=float)):
        i = xsim.tid()
        y[i] = times(x[i])
    return scaled


def make_applied(f):
    """A kernel named ``applied`` calling the func ``f`` it captures."""
    @xsim.kernel
    def applied(x: xsim.array(dtype=float), y: xsim.array(dtype=float)):
        i = xsim.tid()
        y[i] = f(x[i])
    return applied


@xsim.func
def square(v: float):
    return v * v


@xsim.func
def negate(v: float):
    return -v


AFFINE64 = make_affine(xsim.float64)
AFFINE32 = make_affine(xsim.float32)
AFFINE16 = make_affine(xsim.float16)
AFFINE32_AGAIN = make_affine(xsim.float32)
SCALED = {c: make_scaled(c) for c in (2.0, -3.0, 0.25)}
APPLIED_SQUARE, APPLIED_NEGATE = make_applied(square), make_applied(negate)


def run(kernel, x, dtype=xsim.float32):
    xa = xsim.array(np.asarray(x), dtype=dtype)
    y = xsim.zeros(len(x), dtype=dtype)
    xsim.launch(kernel, len(x), inputs=[xa], outputs=[y])
    return y.numpy()


@pytest.mark.parametrize("kernel,dtype", [(AFFINE64, xsim.float64), (AFFINE32, xsim.float32),
                                          (AFFINE16, xsim.float16), (AFFINE32_AGAIN, xsim.float32)])
def test_factory_kernels_of_one_name_each_run_their_own_dtype(kernel, dtype):
    y = run(kernel, X, dtype)
    assert y.dtype == dtype._np
    np.testing.assert_array_equal(y, X * 0.5 + 1.0)


def test_factory_kernels_are_distinct_and_equal_definitions_share_code():
    assert len({AFFINE64.symbol, AFFINE32.symbol, AFFINE16.symbol}) == 3
    assert AFFINE32_AGAIN.symbol == AFFINE32.symbol
    assert AFFINE32.module is AFFINE64.module


@pytest.mark.parametrize("c", [2.0, -3.0, 0.25])
def test_kernels_capturing_different_constants_through_a_func(c):
    np.testing.assert_allclose(run(SCALED[c], X), X * c)


def test_kernels_capturing_different_funcs():
    np.testing.assert_allclose(run(APPLIED_SQUARE, X), X * X)
    np.testing.assert_allclose(run(APPLIED_NEGATE, X), -X)


def test_func_redefined_in_one_scope_replaces_same_signature_and_adds_other_signatures():
    @xsim.func
    def g(v: float):
        return v + 1.0
    first = g

    @xsim.func
    def g(v: float):  # noqa: F811 (a redefinition is the point)
        return v + 2.0
    assert g is not first and len(g.overloads) == 1 and len(first.overloads) == 1

    @xsim.func
    def g(v: int):  # noqa: F811
        return v + 3
    assert len(g.overloads) == 2


# -- notebook cells: source registered in linecache under a cell name, as IPython does ------------

CELL = '''
import xsim

@xsim.kernel
def cell_kernel(x: xsim.array(dtype=float), y: xsim.array(dtype=float)):
    i = xsim.tid()
    y[i] = x[i] {op}
'''


def exec_cell(ns: dict, filename: str, op: str):
    src = CELL.format(op=op)
    linecache.cache[filename] = (len(src), None, src.splitlines(True), filename)
    exec(compile(src, filename, "exec"), ns)
    return ns["cell_kernel"]


def test_notebook_cell_rerun_with_new_code_gives_a_new_kernel_and_keeps_the_old():
    ns = {"__name__": "xsim_test_notebook_a"}
    k1 = exec_cell(ns, "<cell-1>", "+ 10.0")
    np.testing.assert_allclose(run(k1, X), X + 10.0)
    k2 = exec_cell(ns, "<cell-2>", "* 3.0")
    np.testing.assert_allclose(run(k2, X), X * 3.0)
    np.testing.assert_allclose(run(k1, X), X + 10.0)


def test_cell_reexecuted_under_the_same_file_name_keeps_each_kernels_own_source():
    ns = {"__name__": "xsim_test_notebook_b"}
    k1 = exec_cell(ns, "<cell-same>", "- 1.0")
    k2 = exec_cell(ns, "<cell-same>", "* x[i]")
    np.testing.assert_allclose(run(k2, X), X * X)
    np.testing.assert_allclose(run(k1, X), X - 1.0)


# -- one refused kernel among good ones ----------------------------------------------------------

@xsim.kernel(module="xsim_test_refusal")
def good_before(x: xsim.array(dtype=float), y: xsim.array(dtype=float)):
    i = xsim.tid()
    y[i] = x[i] + 1.0


@xsim.kernel(module="xsim_test_refusal")
def refused(x: xsim.array(dtype=float), y: xsim.array(dtype=float)):
    i = xsim.tid()
    y[i] = no_such_name(x[i])  # noqa: F821 (the compile error under test)


@xsim.kernel(module="xsim_test_refusal")
def good_after(x: xsim.array(dtype=float), y: xsim.array(dtype=float)):
    i = xsim.tid()
    y[i] = x[i] * 2.0


def test_a_refused_kernel_does_not_stop_the_others_of_its_module():
    np.testing.assert_allclose(run(good_before, X), X + 1.0)
    np.testing.assert_allclose(run(good_after, X), X * 2.0)


def test_a_refused_kernel_raises_its_compile_error_at_launch():
    line = refused.pyfunc.__code__.co_firstlineno + 3
    for _ in range(2):  # the same error again on a later launch
        with pytest.raises(xsim.CompileError, match=rf"(?s)test_module\.py:{line}:.*unknown name 'no_such_name'"):
            run(refused, X)


class Settings:
    """An object whose attribute a kernel reads at compile time."""

    def __init__(self, gain):
        self.gain = gain


def make_gained(settings):
    @xsim.kernel(module="xsim_test_settings")
    def gained(x: xsim.array(dtype=float), y: xsim.array(dtype=float)):
        i = xsim.tid()
        y[i] = x[i] * settings.gain
    return gained


GAINED = [make_gained(Settings(g)) for g in (1.5, -4.0)]


def test_kernels_capturing_objects_with_different_attributes():
    np.testing.assert_allclose(run(GAINED[0], X), X * 1.5)
    np.testing.assert_allclose(run(GAINED[1], X), X * -4.0)


def make_summing(name, max_unroll):
    """A kernel summing 0..5 in a constant-bound loop, in a module of its own with ``max_unroll``."""
    @xsim.kernel(module="unique", name=name, module_options={"max_unroll": max_unroll})
    def summing(x: xsim.array(dtype=float), y: xsim.array(dtype=float)):
        i = xsim.tid()
        s = x[i] * 0.0
        for k in range(6):
            s += x[i] * float(k)
        y[i] = s
    return summing


def _loops(kernel) -> int:
    from xsim.kernels.ir import Loop, walk
    from xsim.kernels.module import build_ir
    return sum(isinstance(s, Loop) for s in walk(build_ir(kernel).body))


def test_kernel_name_and_module_options_name_the_kernel_and_set_max_unroll():
    rolled, unrolled = make_summing("summing_rolled", 5), make_summing("summing_unrolled", 6)
    assert (rolled.key, unrolled.key) == ("summing_rolled", "summing_unrolled")
    assert rolled.module.name != unrolled.module.name  # one "unique" module per name
    assert xsim.get_module_options(rolled.module.name)["max_unroll"] == 5
    assert (_loops(rolled), _loops(unrolled)) == (1, 0)  # 6 iterations: above 5, within 6
    for k in (rolled, unrolled):
        np.testing.assert_allclose(run(k, X), X * 15.0)



RANGES_OF_4_5_AND_0 = [(0, 8, 2), (8, 0, -2), (0, 9, 2), (8, -1, -2), (9, 0, 1), (0, 9, -1)]


@xsim.kernel(module="unique", module_options={"max_unroll": 4})
def strided_sums(out: xsim.array(dtype=int)):
    for i in range(0, 8, 2):
        out[0] += i
    for i in range(8, 0, -2):
        out[1] += i
    for i in range(0, 9, 2):
        out[2] += i * 10
    for i in range(8, -1, -2):
        out[3] += i * 10
    for i in range(9, 0, 1):
        out[4] += i
    for i in range(0, 9, -1):
        out[5] += i


def test_max_unroll_compares_the_exact_trip_count_of_a_strided_or_empty_range():
    # 4 trips (unrolled at max_unroll=4), 5 trips (loops), 0 trips (no loop at all)
    assert [len(range(*r)) for r in RANGES_OF_4_5_AND_0] == [4, 4, 5, 5, 0, 0]
    assert _loops(strided_sums) == 2
    out = xsim.zeros(6, dtype=int, device="cpu")
    xsim.launch(strided_sums, 1, inputs=[out], device="cpu")
    assert out.numpy().tolist() == [sum(range(*r)) * (10 if k in (2, 3) else 1)
                                    for k, r in enumerate(RANGES_OF_4_5_AND_0)]

def test_bad_kernel_names_and_max_unroll_values_are_refused():
    with pytest.raises(ValueError, match=r"kernel\(name='1st'\): the name must be a valid C\+\+ identifier"):
        xsim.kernel(name="1st")
    with pytest.raises(ValueError, match="max_unroll must be a non-negative int, got -1"):
        xsim.set_module_options({"max_unroll": -1}, "xsim_test_bad_unroll")


def test_an_entry_point_abi_other_than_warps_grid_launch_is_refused_at_declaration():
    def body(x: xsim.array(dtype=float)):
        x[0] = 1.0

    assert isinstance(xsim.kernel(body, module="unique", entry_point_abi="warp"), xsim.Kernel)
    with pytest.raises(ValueError, match="must be 'warp' or 'external_constant_params'"):
        xsim.kernel(body, module="unique", enable_backward=False, entry_point_abi="external")
    with pytest.raises(ValueError, match="requires enable_backward=False"):
        xsim.kernel(body, module="unique", entry_point_abi="external_constant_params")
    with pytest.raises(NotImplementedError, match="no OptiX backend"):
        xsim.kernel(body, module="unique", enable_backward=False, entry_point_abi="external_constant_params")


def make_doubler(v):
    """A unique-module kernel writing the compile-time constant ``2 v``."""
    @xsim.kernel(module="unique")
    def doubler(x: xsim.array(dtype=float), y: xsim.array(dtype=float)):
        i = xsim.tid()
        y[i] = x[i] * 0.0 + xsim.static(v * 2.0)
    return doubler


def test_redeclaring_a_unique_kernel_with_the_same_content_gives_the_same_kernel():
    one, two = make_doubler(1.0), make_doubler(2.0)
    assert one is not two
    assert make_doubler(1.0) is one
    np.testing.assert_array_equal(run(one, X), np.full(4, 2.0))
    np.testing.assert_array_equal(run(two, X), np.full(4, 4.0))



def make_closure_doubler(v):
    """A unique-module kernel reading ``v`` from its closure (no static)."""
    @xsim.kernel(module="unique")
    def doubler(x: xsim.array(dtype=float), y: xsim.array(dtype=float)):
        i = xsim.tid()
        y[i] = x[i] * 0.0 + v * 2.0
    return doubler


def test_redeclaring_a_kernel_reads_each_declarations_closure_value():
    one, two = make_closure_doubler(1.0), make_closure_doubler(2.0)
    assert one is not two and one.module.name != two.module.name
    assert make_closure_doubler(1.0) is one
    np.testing.assert_array_equal(run(one, X), np.full(4, 2.0))
    np.testing.assert_array_equal(run(two, X), np.full(4, 4.0))

KF_SOURCE = "import xsim\n\n\ndef kf(a: xsim.array(dtype=float)):\n    a[xsim.tid()] = {}\n"


def test_unique_module_is_named_by_content_so_an_edited_definition_never_shares_its_build(tmp_path):
    path = tmp_path / "kf_source.py"

    def define(value):
        path.write_text(KF_SOURCE.format(value))
        ns = {}
        exec(compile(path.read_text(), str(path), "exec"), ns)  # noqa: S102
        return xsim.kernel(ns["kf"], module="unique")

    first, edited, again = define(1.0), define(42.25), define(42.25)
    assert "1.0" in first.adj.source and "42.25" in edited.adj.source
    assert first.module.name != edited.module.name
    assert edited.module.name == again.module.name


REF_SCALE = 3.0
REF_SHADOWED = 5.0


@xsim.struct
class RefPair:
    a: float


@xsim.func
def ref_double(x: float):
    return 2.0 * x


@xsim.func
def ref_square(x: float):
    return x * x


REF_CFG = types.SimpleNamespace(n=4, f=ref_square)


def test_definition_references_list_the_constants_types_and_user_funcs_the_body_takes_from_outside():
    @xsim.kernel(module="unique")
    def refs(out: xsim.array(dtype=float)):
        p = RefPair()
        g = xsim.static(REF_CFG.f)
        REF_SHADOWED = 1.0  # a local: not a reference
        v = xsim.vec3(1.0, 2.0, REF_SHADOWED)
        out[0] = ref_double(REF_SCALE) + float(REF_CFG.n) + xsim.length(v) + g(p.a) + xsim.quat_twist_angle(
            xsim.vec3(0.0, 0.0, 1.0), xsim.quat_identity())

    constants, used_types, funcs = refs.adj.get_references()
    assert constants == {"REF_SCALE": 3.0, "REF_CFG.n": 4}
    assert set(used_types) == {RefPair, xsim.vec3}
    assert set(funcs) == {ref_double, ref_square}  # not the library func quat_twist_angle, nor builtins
    assert xsim._src.context.builtin_functions["length"] is xsim.length


def test_warp_user_modules_is_the_registry_of_modules_by_name():
    registry = xsim._src.context.user_modules
    module = xsim.get_module("xsim_tests_registry")
    assert registry["xsim_tests_registry"] is module
    del registry["xsim_tests_registry"]  # as Warp's tests drop a module that must not load again
    assert "xsim_tests_registry" not in registry
    assert xsim.get_module("xsim_tests_registry") is not module


def make_looped(fn):
    """A unique-module kernel whose static() calls ``fn`` with its loop variable (resolved at the build)."""
    @xsim.kernel(module="unique")
    def looped(x: xsim.array(dtype=float), y: xsim.array(dtype=float)):
        i = xsim.tid()
        s = x[i] * 0.0
        for k in range(3):
            s += xsim.static(fn(k))
        y[i] = s
    return looped


def test_unique_kernels_capturing_different_objects_stay_distinct():
    ones, tens = make_looped(lambda k: 1.0 * k), make_looped(lambda k: 10.0 * k)
    assert ones is not tens
    np.testing.assert_array_equal(run(ones, X), np.full(4, 3.0))
    np.testing.assert_array_equal(run(tens, X), np.full(4, 30.0))


def make_hashed(field_type):
    """A struct and a kernel over arrays of it, both defined anew at each call (Warp's redefinition pattern)."""
    @xsim.struct
    class Record:
        i: field_type

    @xsim.kernel(module="xsim_tests_module_hash")
    def touch(a: xsim.array(dtype=Record)):
        xsim.tid()
    return touch


def test_module_hash_ignores_a_redefined_struct_of_the_same_layout_and_sees_a_changed_one():
    module = xsim.get_module("xsim_tests_module_hash")
    keep = [make_hashed(int)]
    first = module.hash_module()
    keep.append(make_hashed(int))
    assert module.hash_module() == first
    keep.append(make_hashed(float))
    assert module.hash_module() != first


HASHED_SOURCE = """
import xsim

@xsim.func
def f():
    return {value}

@xsim.kernel
def k(out: xsim.array(dtype=float)):
    out[0] = f()
"""


def load_source_as_module(path, name, value):
    """``HASHED_SOURCE`` written to ``path`` and imported as Python module ``name``: (its xsim module, the
    Python module)."""
    import importlib.util
    path.write_text(HASHED_SOURCE.format(value=value))
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return xsim.get_module(name), module


def test_module_hash_is_the_same_for_the_same_source_in_another_file_but_the_cache_key_is_not(tmp_path):
    # the Python modules are dropped and collected: a named module keeps the latest kernel of each name, as
    # Warp's do, so its hash does not depend on when the garbage collector runs
    (one, _), (same, _), (other, _) = (
        load_source_as_module(tmp_path / f"{n}.py", f"xsim_tests_hash_{n}", v)
        for n, v in (("one", 1.5), ("same", 1.5), ("other", 2.5)))
    gc.collect()
    assert len(one.kernels) == len(same.kernels) == len(other.kernels) == 1
    assert one.hash_module() == same.hash_module()
    assert one.hash_module() != other.hash_module()  # a func the kernel calls changed
    assert one.content_hash() != same.content_hash()  # the cached code names its file in its errors


STRUCT_CONSTANT_SOURCE = """
import xsim

@xsim.struct
class Setting:
    x: float

C = Setting()
C.x = {value}

@xsim.kernel
def k(out: xsim.array(dtype=float)):
    out[0] = xsim.static(C).x
"""


def test_a_struct_constant_hashes_by_its_value_not_by_the_python_module_that_defined_it(tmp_path):
    modules = []
    for n, v in (("one", 17.0), ("same", 17.0), ("other", 42.0)):
        path = tmp_path / f"{n}.py"
        path.write_text(STRUCT_CONSTANT_SOURCE.format(value=v))
        spec = importlib.util.spec_from_file_location(f"xsim_tests_struct_const_{n}", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        modules.append(module)
    one, same, other = (xsim.get_module(m.__name__) for m in modules)
    assert one.hash_module() == same.hash_module()
    assert one.hash_module() != other.hash_module()
    for m, v in zip(modules, (17.0, 17.0, 42.0)):
        out = xsim.zeros(1, dtype=float)
        xsim.launch(m.k, 1, outputs=[out])
        assert out.numpy()[0] == v


def make_named_struct(fields):
    """A struct named Pair, defined anew with ``fields`` (name -> type) at each call, as in another module."""
    return xsim.struct(type("Pair", (), {"__annotations__": fields, "__qualname__": "Pair"}))


def test_structs_of_one_name_from_two_places_share_a_c_type_only_when_their_fields_match():
    a, b = make_named_struct({"u": float, "v": int}), make_named_struct({"u": float, "v": int})
    c = make_named_struct({"v": int, "u": float})  # the same names in another order: another layout
    assert a is not b and a._ctype == b._ctype and a._ctype != c._ctype

    @xsim.kernel
    def combine(x: xsim.array(dtype=a), y: xsim.array(dtype=b), z: xsim.array(dtype=c),
                out: xsim.array(dtype=float)):
        i = xsim.tid()
        out[i] = x[i].u + float(y[i].v) * 10.0 + z[i].u * 100.0 + float(z[i].v) * 1000.0

    def filled(t, u, v):
        s = t()
        s.u, s.v = u, v
        return xsim.array([s, s], dtype=t)

    out = xsim.zeros(2, dtype=float)
    xsim.launch(combine, 2, inputs=[filled(a, 1.0, 2), filled(b, 3.0, 4), filled(c, 5.0, 6)], outputs=[out])
    np.testing.assert_array_equal(out.numpy(), [1.0 + 40.0 + 500.0 + 6000.0] * 2)


def test_a_kernels_module_attribute_names_its_python_module_as_in_warp():
    k = make_affine(xsim.float32)
    assert k.__module__ == __name__ and xsim.get_module(k.__module__) is k.module
    assert k.symbol in xsim.get_module(k.__module__).symbols()
