"""``xsim.static(expr)``: Python evaluated at compile time in the kernel's scope (globals, closure,
constant locals), standing in the kernel as a constant, an unrolled loop bound, a removed branch or a
selected func; its value is part of the kernel's identity. Forward numbers are checked against the
same arithmetic in plain Python, gradients against float64 central differences."""

import ast
from pathlib import Path

import numpy as np
import pytest

import xsim
from xsim.autodiff.gradcheck import gradcheck
from xsim.kernels import ir
from xsim.kernels.module import build_ir

F64 = xsim.float64
A64 = xsim.array(dtype=F64)
HERE = Path(__file__).name

SCALE = 3
WEIGHTS = (0.5, -1.25, 2.0, 0.75)


@xsim.func
def scale_plus_two():
    return xsim.static(SCALE + 2)


@xsim.func
def cubic(x: F64):
    return x * x * x


@xsim.func
def sine(x: F64):
    return xsim.sin(x)


@xsim.kernel
def constants_and_unrolled_loops(x: A64, y: A64):
    i = xsim.tid()
    s = x[i] * F64(scale_plus_two())  # a static inside a func
    # range(static(...)) is unrolled; a static reading the loop variable sees its value there
    for k in range(xsim.static(len(WEIGHTS))):
        s += xsim.static(WEIGHTS[k] * (k + 1)) * x[i] * x[i]
    # a loop longer than the automatic unroll limit is unrolled when a static reads its variable
    for k in range(20):
        s += xsim.static(float(k * k)) * x[i]
    n = 4
    s += xsim.static(float(n * SCALE))  # a constant local
    y[i] = s


def constants_reference(x):
    s = x * (SCALE + 2)
    for k in range(len(WEIGHTS)):
        s += WEIGHTS[k] * (k + 1) * x * x
    for k in range(20):
        s += float(k * k) * x
    return s + 4.0 * SCALE


def test_static_constants_and_unrolled_loops_match_python():
    x = xsim.array(np.array([0.5, -1.5, 2.0]), dtype=F64)
    y = xsim.zeros(3, dtype=F64)
    xsim.launch(constants_and_unrolled_loops, 3, inputs=[x, y])
    np.testing.assert_allclose(y.numpy(), constants_reference(x.numpy()), rtol=1e-14)


def test_a_loop_whose_variable_a_static_reads_is_unrolled_and_other_loops_stay_loops():
    kir = build_ir(constants_and_unrolled_loops)
    assert not any(isinstance(s, ir.Loop) for s in ir.walk(kir.body))
    # the same 20-step loop without a static is a real loop (above the automatic unroll limit)
    kir = build_ir(plain_long_loop)
    assert any(isinstance(s, ir.Loop) for s in ir.walk(kir.body))


@xsim.kernel
def plain_long_loop(x: A64, y: A64):
    i = xsim.tid()
    s = x[i]
    for k in range(20):
        s += F64(k) * x[i]
    y[i] = s


def test_static_constants_gradient_matches_finite_differences():
    x = xsim.array(np.array([0.5, -1.5, 2.0]), dtype=F64, requires_grad=True)
    y = xsim.zeros(3, dtype=F64, requires_grad=True)
    report = gradcheck(constants_and_unrolled_loops, [x, y])
    assert report.passed, report


def make_selected(funcs, k, flag):
    """A kernel that calls ``funcs[k]`` (chosen at compile time) and keeps one branch of ``flag``."""
    @xsim.kernel(module="unique")
    def selected(x: A64, y: A64):
        i = xsim.tid()
        if xsim.static(flag):
            y[i] = xsim.static(funcs[k])(x[i]) * 2.0
        else:
            y[i] = not_defined_anywhere(x[i])  # noqa: F821 - a removed branch is not compiled
    return selected


def test_static_selects_a_func_and_each_selection_is_its_own_kernel():
    funcs = [cubic, sine]
    x = xsim.array(np.array([0.3, -0.7, 1.1]), dtype=F64, requires_grad=True)
    kernels = [make_selected(funcs, k, True) for k in range(2)]
    assert kernels[0].symbol != kernels[1].symbol
    for kern, ref in zip(kernels, (lambda v: v ** 3, np.sin)):
        y = xsim.zeros(3, dtype=F64, requires_grad=True)
        xsim.launch(kern, 3, inputs=[x, y])
        np.testing.assert_allclose(y.numpy(), 2.0 * ref(x.numpy()), rtol=1e-14)
        report = gradcheck(kern, [x, y])
        assert report.passed, report
    # the same selection is the same code
    assert make_selected(funcs, 1, True).symbol == kernels[1].symbol


def test_a_statically_false_branch_is_not_compiled_and_flipping_it_names_the_error():
    kern = make_selected([cubic], 0, False)
    with pytest.raises(xsim.CompileError, match=rf"(?s){HERE}:\d+:\d+:.*unknown name 'not_defined_anywhere'"):
        xsim.launch(kern, 1, inputs=[xsim.zeros(1, dtype=F64), xsim.zeros(1, dtype=F64)])


def make_scaled(value):
    @xsim.kernel(module="unique")
    def scaled(y: A64):
        y[xsim.tid()] = xsim.static(value * 2.0)
    return scaled


def test_kernels_differing_only_in_a_static_value_do_not_share_code():
    a, b, a2 = make_scaled(1.5), make_scaled(-4.0), make_scaled(1.5)
    assert a.symbol != b.symbol and a.symbol == a2.symbol
    for kern, want in ((a, 3.0), (b, -8.0)):
        y = xsim.zeros(2, dtype=F64)
        xsim.launch(kern, 2, inputs=[y])
        np.testing.assert_array_equal(y.numpy(), [want, want])


def make_table_sum(funcs):
    """Sums ``f(x)`` over a Python list of funcs: the static reads the loop variable, so it is
    evaluated at build, and the list's contents still key the kernel."""
    @xsim.kernel(module="unique")
    def table_sum(x: A64, y: A64):
        i = xsim.tid()
        s = F64(0.0)
        for k in range(xsim.static(len(funcs))):
            s += xsim.static(funcs[k])(x[i])
        y[i] = s
    return table_sum


def test_a_static_evaluated_at_build_still_keys_the_kernel_by_the_values_it_reads():
    x = xsim.array(np.array([0.25, 2.0]), dtype=F64)
    k1, k2 = make_table_sum([cubic]), make_table_sum([sine, cubic])
    assert k1.symbol != k2.symbol
    for kern, want in ((k1, x.numpy() ** 3), (k2, np.sin(x.numpy()) + x.numpy() ** 3)):
        y = xsim.zeros(2, dtype=F64)
        xsim.launch(kern, 2, inputs=[x, y])
        np.testing.assert_allclose(y.numpy(), want, rtol=1e-14)


@xsim.struct
class Coeffs:
    a: F64
    v: xsim.vec3d


COEFFS = Coeffs(a=1.5, v=xsim.vec3d(1.0, -2.0, 0.5))


@xsim.kernel
def struct_and_vector_constants(x: xsim.array(dtype=xsim.vec3d), y: A64):
    i = xsim.tid()
    c = xsim.static(COEFFS)
    y[i] = c.a * xsim.dot(c.v, x[i]) + xsim.static(xsim.vec3d(0.0, 1.0, 2.0))[2]


def test_struct_and_vector_results_are_constant_values():
    xs = np.array([[1.0, 2.0, 3.0], [-1.0, 0.5, 4.0]])
    x = xsim.array(xs, dtype=xsim.vec3d, requires_grad=True)
    y = xsim.zeros(2, dtype=F64, requires_grad=True)
    xsim.launch(struct_and_vector_constants, 2, inputs=[x, y])
    np.testing.assert_allclose(y.numpy(), 1.5 * xs @ np.array([1.0, -2.0, 0.5]) + 2.0, rtol=1e-14)
    assert gradcheck(struct_and_vector_constants, [x, y]).passed


def test_a_static_is_evaluated_once_at_declaration_with_nested_statics_once_too():
    calls = []

    def inner():
        calls.append("inner")
        return 3.0

    def outer(v):
        calls.append("outer")
        return v + 1.0

    @xsim.kernel(module="unique")
    def once(y: A64):
        y[xsim.tid()] = xsim.static(outer(xsim.static(inner())))

    assert calls == ["inner", "outer"]
    y = xsim.zeros(1, dtype=F64)
    xsim.launch(once, 1, inputs=[y])
    assert y.numpy()[0] == 4.0 and calls == ["inner", "outer"]


def test_a_func_called_from_python_runs_its_python_body():
    assert scale_plus_two() == SCALE + 2
    assert cubic(F64(2.0)) == 8.0
    with pytest.raises(RuntimeError, match=r"Error calling function 'cubic', no overload found for arguments \(2\.0,\)"):
        cubic(2.0)  # a Python float is a float32, as in a kernel



def _op_kinds(kernel) -> list[str]:
    return [s.kind for s in ir.walk(build_ir(kernel).body) if isinstance(s, ir.Op)]


def test_a_static_behind_unary_minus_or_as_a_range_bound_compiles_as_the_literal_would():
    @xsim.kernel(module="unique")
    def negated_static(y: xsim.array(dtype=xsim.int64)):
        y[0] = xsim.int64(-xsim.static(2**31))  # 2**31 is past int32; its negation is int32's minimum

    @xsim.kernel(module="unique")
    def negated_literal(y: xsim.array(dtype=xsim.int64)):
        y[0] = xsim.int64(-2147483648)

    @xsim.kernel(module="unique")
    def static_bound(y: A64):
        s = F64(0.0)
        for _k in range(xsim.static(1 + 2)):
            s += F64(1.5)
        y[xsim.tid()] = s

    @xsim.kernel(module="unique")
    def literal_bound(y: A64):
        s = F64(0.0)
        for _k in range(3):
            s += F64(1.5)
        y[xsim.tid()] = s

    assert _op_kinds(negated_static) == _op_kinds(negated_literal) == ["store"]  # folded: no negation at run time
    assert _op_kinds(static_bound) == _op_kinds(literal_bound)  # the static leaves nothing behind
    for k in (negated_static, negated_literal):
        y = xsim.zeros(1, dtype=xsim.int64)
        launch_one(k, y)
        assert int(y.numpy()[0]) == -(2**31)
    for k in (static_bound, literal_bound):
        y = xsim.zeros(2, dtype=F64)
        xsim.launch(k, 2, inputs=[y])
        assert y.numpy().tolist() == [4.5, 4.5]


def test_a_static_func_called_in_a_while_loop_after_an_unrolled_loop():
    @xsim.func
    def increment(x: int):
        return x + 1

    @xsim.kernel(module="unique")
    def counts(y: xsim.array(dtype=int)):
        for _k in range(2):
            y[1] += 10
        j = int(0)  # noqa: UP018, RUF046 (a typed local, as Warp kernels write it)
        while j < 3:
            j = xsim.static(increment)(j)
        y[0] = j

    y = xsim.zeros(2, dtype=int)
    launch_one(counts, y)
    assert y.numpy().tolist() == [3, 20]

# -- errors --------------------------------------------------------------------------------------


def launch_one(kern, *args):
    xsim.launch(kern, 1, inputs=list(args))


def test_a_static_reading_a_runtime_value_is_refused_naming_the_line():
    @xsim.kernel(module="unique")
    def reads_param(n: int, y: A64):
        y[0] = xsim.static(n * 2.0)

    with pytest.raises(xsim.CompileError, match=rf"(?s){HERE}:\d+:\d+:.*Error evaluating static expression: name 'n' "
                                                r"is not defined\. Make sure all variables used in the static"):
        launch_one(reads_param, 3, xsim.zeros(1, dtype=F64))


def test_a_loop_with_runtime_bounds_cannot_give_its_variable_to_a_static():
    @xsim.kernel(module="unique")
    def dynamic_bound(n: int, y: A64):
        for k in range(n):
            y[0] += xsim.static(float(k))

    with pytest.raises(xsim.CompileError, match=rf"(?s){HERE}:\d+:\d+:.*xsim.static\(\) reads the loop variable 'k'"):
        launch_one(dynamic_bound, 3, xsim.zeros(1, dtype=F64))


def test_a_failing_static_expression_refuses_its_kernel_at_launch_naming_the_line():
    @xsim.kernel(module="static_failing_at_build")
    def divides_by_zero(y: A64):
        y[0] = xsim.static(1.0 / 0.0)

    with pytest.raises(xsim.CompileError, match=rf"(?s){HERE}:\d+:\d+:.*Error evaluating static expression: "
                                                "float division by zero"):
        launch_one(divides_by_zero, xsim.zeros(1, dtype=F64))


def test_a_unique_kernel_whose_static_fails_is_refused_where_it_is_declared():
    # a unique module is named by its content, static values included, when it is declared: one
    # definition made twice resolves each static on its own, and the one that cannot fails there
    def make(values):
        @xsim.kernel(module="unique")
        def reads_a_key(y: A64):
            y[0] = xsim.static(values["v"])
        return reads_a_key

    y = xsim.zeros(1, dtype=F64)
    launch_one(make({"v": 2.5}), y)
    assert y.numpy()[0] == 2.5
    with pytest.raises(xsim.CompileError, match=rf"(?s){HERE}:\d+:\d+:.*Error evaluating static expression: 'v'"):
        make({})


@xsim.struct
class WithArray:
    a: F64
    data: A64


@pytest.mark.parametrize("make, says", [
    (lambda: xsim.zeros(3), "a Warp array cannot be created inside Warp kernels"),
    (lambda: WithArray(a=1.0), ("the returned Warp struct contains a data type that cannot be constructed inside "
                               "Warp kernels: a Warp array cannot be created inside Warp kernels at WithArray.data")),
    (lambda: None, "None is returned"),
    (lambda: object(), "value of type <class 'object'> cannot be constructed inside kernels"),
])
def test_an_unsupported_static_result_is_refused_naming_the_line(make, says):
    def returns_bad(y: A64):
        xsim.static(make())

    refused = pytest.raises(xsim.CompileError, match=rf"(?s){HERE}:\d+:\d+:.*Static expression returns an "
                                                     f"unsupported value: {says}")
    with refused:  # a kernel of a shared module: at its launch
        launch_one(xsim.kernel(returns_bad, module="static_bad_results"), xsim.zeros(1, dtype=F64))
    with refused:  # a unique module is named by its static values: where it is declared
        xsim.kernel(returns_bad, module="unique")


def test_an_object_read_only_by_a_static_is_read_once():
    class OneShot:
        reads = 0

        @property
        def value(self):
            OneShot.reads += 1
            return 3.0

    box = OneShot()

    @xsim.kernel(module="unique")
    def reads_box(y: A64):
        y[0] = xsim.static(box.value)

    y = xsim.zeros(1, dtype=F64)
    launch_one(reads_box, y)  # hashing and compiling the kernel do not evaluate it again
    assert y.numpy()[0] == 3.0 and OneShot.reads == 1


class Config:
    def __init__(self, gain):
        self.gain = gain


def make_gained(cfg):
    """The static reads a loop variable, so it is evaluated at build; ``cfg.gain`` still keys the kernel."""
    @xsim.kernel(module="unique")
    def gained(y: A64):
        for k in range(2):
            y[k] = xsim.static(cfg.gain * float(k + 1))
    return gained


def test_an_attribute_a_build_time_static_reads_keys_the_kernel():
    a, b = make_gained(Config(2.0)), make_gained(Config(5.0))
    assert a.symbol != b.symbol
    for kern, gain in ((a, 2.0), (b, 5.0)):
        y = xsim.zeros(2, dtype=F64)
        launch_one(kern, y)
        np.testing.assert_array_equal(y.numpy(), [gain, 2.0 * gain])


def test_static_takes_exactly_one_expression():
    @xsim.kernel(module="unique")
    def two_arguments(y: A64):
        y[0] = xsim.static(1.0, 2.0)

    with pytest.raises(xsim.CompileError, match=rf"(?s){HERE}:\d+:\d+:.*xsim.static\(\) takes one expression"):
        launch_one(two_arguments, xsim.zeros(1, dtype=F64))


def test_kernel_adj_shows_the_statics_resolved_at_declaration_and_those_left_for_the_build():
    evals = []

    def inner():
        evals.append(1)
        return 3.0

    @xsim.kernel(module="unique")
    def nested(a: A64):
        i = xsim.tid()
        s = F64(0.0)
        for k in range(2):
            s += F64(xsim.static(float(k) * 10.0))   # reads the loop variable: resolved at the build
        a[i] = s + F64(xsim.static(1.0 + xsim.static(inner())))

    assert evals == [1]  # the nested static ran once, at declaration
    adj = nested.adj
    assert adj.resolved_static_expressions == {"inner()": 3.0, "1.0 + xsim.static(inner())": 4.0}
    assert adj.has_unresolved_static_expressions
    assert (adj.fun_name, Path(adj.filename).name) == ("nested", HERE)
    assert adj.source.lstrip().startswith("@xsim.kernel") and "def nested(a: A64):" in adj.source
    build_ir(nested)
    assert evals == [1]  # the build takes the declaration's value
    a = xsim.zeros(2, dtype=F64)
    xsim.launch(nested, 2, inputs=[a])
    np.testing.assert_array_equal(a.numpy(), [14.0, 14.0])


# code transformers: ``Kernel(func, code_transformers=[...])`` compiles the syntax tree the
# ``ast.NodeTransformer`` objects leave (Warp's option), the function itself staying as written


def sine_times_x(x: A64, y: A64):
    i = xsim.tid()
    y[i] = xsim.sin(x[i]) * x[i]


class SineToCosine(ast.NodeTransformer):
    def visit_Attribute(self, node):
        if node.attr == "sin":
            node.attr = "cos"
        return node


as_written = xsim.Kernel(sine_times_x)
as_transformed = xsim.Kernel(sine_times_x, code_transformers=[SineToCosine()])

bumps = [0.0]


def bump():
    bumps[0] += 1.0
    return bumps[0]


loop_i = 10.0  # a global of the name of the loop variable below


def reused_statics(out: A64):
    for loop_i in range(2):
        out[loop_i] = F64(xsim.static(float(loop_i) + 1.0))
    out[2] = F64(0.0)
    a = xsim.static(bump())
    b = 0.0
    out[3] = F64(10.0 * a + b)


class ReuseStaticCalls(ast.NodeTransformer):
    """Puts the loop's static call (the node itself) in ``out[2] = ...`` and the first ``bump()`` call in ``b = ...``."""

    def visit_FunctionDef(self, node):
        node.body[1].value = node.body[0].body[0].value.args[0]
        node.body[3].value = node.body[2].value
        return node


reused = xsim.Kernel(reused_statics, code_transformers=[ReuseStaticCalls()])
FUNCS = [cubic, sine]


def indexed_callee(x: A64, y: A64):
    i = xsim.tid()
    y[i] = FUNCS[xsim.static(0)](x[i])


class BindSine(ast.NodeTransformer):
    def visit_Call(self, node):
        self.generic_visit(node)
        if isinstance(node.func, ast.Subscript):
            node.func.warp_func = sine  # Warp's node attribute naming the func a call calls
        return node


bound_callee = xsim.Kernel(indexed_callee, code_transformers=[BindSine()])


def test_a_code_transformer_changes_what_compiles_and_not_the_function_as_written():
    x = xsim.array(np.array([0.3, -0.7, 1.1]), dtype=F64, requires_grad=True)
    for kern, ref in ((as_written, np.sin), (as_transformed, np.cos)):
        y = xsim.zeros(3, dtype=F64, requires_grad=True)
        xsim.launch(kern, 3, inputs=[x, y])
        np.testing.assert_allclose(y.numpy(), ref(x.numpy()) * x.numpy(), rtol=1e-14)
        report = gradcheck(kern, [x, y])
        assert report.passed, report
    assert as_written.symbol != as_transformed.symbol


def test_each_place_a_transformer_puts_a_static_call_is_evaluated_on_its_own():
    out = xsim.zeros(4, dtype=F64)
    xsim.launch(reused, 1, inputs=[out])
    # in the loop the static reads the loop variable; moved after it, the global of that name (as in Warp);
    # bump() ran once per place, at declaration: 10 * 1 + 2
    np.testing.assert_array_equal(out.numpy(), [1.0, 2.0, 11.0, 12.0])
    assert bumps == [2.0]


def test_a_callee_a_transformer_binds_is_the_func_called():
    x = xsim.array(np.array([0.3, -0.7, 1.1]), dtype=F64, requires_grad=True)
    y = xsim.zeros(3, dtype=F64, requires_grad=True)
    xsim.launch(bound_callee, 3, inputs=[x, y])
    np.testing.assert_allclose(y.numpy(), np.sin(x.numpy()), rtol=1e-14)  # sine bound over FUNCS[0], cubic
    report = gradcheck(bound_callee, [x, y])
    assert report.passed, report


class DropFunction(ast.NodeTransformer):
    def visit_FunctionDef(self, node):
        return None


@pytest.mark.parametrize("transformer, says", [
    (object(), r"code_transformers of 'sine_times_x': expected ast.NodeTransformer objects, got object"),
    (DropFunction(), r"code_transformers of 'sine_times_x' must leave a function definition, got NoneType"),
])
def test_a_code_transformer_that_is_not_one_or_drops_the_function_is_refused(transformer, says):
    with pytest.raises(TypeError, match=says):
        xsim.Kernel(sine_times_x, code_transformers=[transformer])
