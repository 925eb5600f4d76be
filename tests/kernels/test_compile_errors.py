"""Bad kernels: each raises ``xsim.CompileError`` at its first launch, naming this file, the line
marked ``# E:<case>`` and the column, showing that line with a caret under the offending code,
and saying what was expected.

Each bad kernel lives in its own module so that one failure does not hide another.
"""

import re
from pathlib import Path

import numpy as np
import pytest

import xsim

CASES: dict = {}  # name -> (kernel, phrase the message must contain, code the caret points at)


def bad(expected: str, caret: str):
    """Register a bad kernel, compiled alone in its own module."""
    def wrap(f):
        k = xsim.kernel(module=f"xsim_tests_bad_kernel_{f.__name__}")(f)
        CASES[f.__name__] = (k, expected, caret)
        return k
    return wrap


def plain_python(a):
    return a * 2.0


@xsim.func
def helper(a: float, b: float):
    return a + b


@xsim.func
def helper_with_bad_body(a: float):
    return a + missing_global  # E:error_inside_func  # noqa: F821


@xsim.kernel(module="xsim_tests_bad_kernel_callee")
def some_kernel(x: xsim.array(dtype=float)):
    x[0] = 1.0


@xsim.struct
class Body:
    mass: float


@bad("unknown name 'undefined_thing'", "undefined_thing")
def unknown_name(x: xsim.array(dtype=float)):
    i = xsim.tid()
    x[i] = undefined_thing + 1.0  # E:unknown_name  # noqa: F821


@bad("no overload of 'add' takes (float32, vec3f)", "x[i] + xsim.vec3")
def type_mismatch_in_operator(x: xsim.array(dtype=float)):
    i = xsim.tid()
    x[i] = x[i] + xsim.vec3(1.0, 2.0, 3.0)  # E:type_mismatch_in_operator


@bad("cannot store vec3f into 'x' element of type float32", "x[i] = xsim.vec3")
def type_mismatch_in_store(x: xsim.array(dtype=float)):
    i = xsim.tid()
    x[i] = xsim.vec3(1.0, 2.0, 3.0)  # E:type_mismatch_in_store


@bad("lambdas are not supported in kernels", "lambda")
def uses_lambda(x: xsim.array(dtype=float)):
    f = lambda a: a  # E:uses_lambda  # noqa: F841


@bad("list comprehensions are not supported in kernels", "[k for k")
def uses_list_comprehension(x: xsim.array(dtype=float)):
    s = [k for k in range(3)]  # E:uses_list_comprehension  # noqa: F841


@bad("try/except are not supported in kernels", "try:")
def uses_try(x: xsim.array(dtype=float)):
    try:  # E:uses_try
        x[0] = 1.0
    except IndexError:
        pass


@bad("no overload of func 'helper' takes (float32, float32, float32); expected helper(a: float, b: float)",
     "helper(")
def func_wrong_arity(x: xsim.array(dtype=float)):
    x[0] = helper(x[0], x[1], x[2])  # E:func_wrong_arity


@bad("no overload of func 'helper' takes (vec3f, float32)", "helper(")
def func_wrong_argument_type(x: xsim.array(dtype=float)):
    x[0] = helper(xsim.vec3(1.0, 2.0, 3.0), x[1])  # E:func_wrong_argument_type


@bad("no overload of 'sin' takes (float32, float32); expected one of: sin(Float)", "xsim.sin(")
def builtin_wrong_arity(x: xsim.array(dtype=float)):
    x[0] = xsim.sin(x[0], x[1])  # E:builtin_wrong_arity


@bad("no overload of 'cross' takes (vec2f, vec2f); expected one of: cross(Vec3, Vec3)", "xsim.cross(")
def builtin_wrong_argument_type(x: xsim.array(dtype=float)):
    c = xsim.cross(xsim.vec2(1.0, 0.0), xsim.vec2(0.0, 1.0))  # E:builtin_wrong_argument_type  # noqa: F841


@bad("cannot assign to the loop variable 'k'", "k = 2")
def assigns_static_loop_variable(x: xsim.array(dtype=float)):
    for k in range(3):
        k = 2  # E:assigns_static_loop_variable
        x[k] = 1.0


@bad("cannot assign to the loop variable 'k'", "k +=")
def assigns_dynamic_loop_variable(x: xsim.array(dtype=float), n: int):
    for k in range(n):
        k += 1  # E:assigns_dynamic_loop_variable
        x[k] = 1.0


@bad("'a' has type float32 in one branch and vec3f in the other", "if x[0]")
def mismatched_branch_types(x: xsim.array(dtype=float)):
    if x[0] > 0.0:  # E:mismatched_branch_types
        a = 1.0 * x[0]
    else:
        a = xsim.vec3(1.0, 2.0, 3.0)
    x[1] = a


@bad("cannot call the Python function 'plain_python' in a kernel; decorate it with @xsim.func", "plain_python(")
def calls_plain_python(x: xsim.array(dtype=float)):
    x[0] = plain_python(x[0])  # E:calls_plain_python


@bad("cannot call the Python function 'sqrt' in a kernel", "np.sqrt(")
def calls_numpy(x: xsim.array(dtype=float)):
    x[0] = np.sqrt(x[0])  # E:calls_numpy


@bad("print() is not supported in kernels", "print(")
def calls_print(x: xsim.array(dtype=float)):
    print(x[0])  # E:calls_print


@bad("Warp kernels cannot return values. Write results to output arguments, and omit the return annotation or "
     "use `-> None`.", "return x[0]")
def kernel_returns_value(x: xsim.array(dtype=float)):
    return x[0]  # E:kernel_returns_value


@bad("only <, <=, >, >=, == and != comparisons are supported", "x[0] is")
def unsupported_comparison_operator(x: xsim.array(dtype=float)):
    if x[0] is x[1]:  # E:unsupported_comparison_operator
        x[2] = 1.0


@bad("no overload of 'bit_and' takes (float32, float32)", "x[0] & x[1]")
def unsupported_operator_on_floats(x: xsim.array(dtype=float)):
    x[2] = x[0] & x[1]  # E:unsupported_operator_on_floats


@bad("Incorrect number of indices specified for array indexing: array 'x' has 1 dimension(s) but is indexed with 2",
     "x[0, 1]")
def wrong_number_of_indices(x: xsim.array(dtype=float)):
    x[0] = x[0, 1]  # E:wrong_number_of_indices


@bad("array 'x' has 1 dimension(s) but is indexed with 2", "x[0:2, 0]")
def slice_with_more_subscripts_than_dims(x: xsim.array(dtype=float)):
    x[0] = x[0:2, 0]  # E:slice_with_more_subscripts_than_dims


@bad("an array slice in a kernel is a view: read it whole (v = a[lo:hi, j])", "x[0:2]")
def store_into_an_array_slice(x: xsim.array(dtype=float)):
    x[0:2] = 1.0  # E:store_into_an_array_slice


@bad("array(ptr=...) takes an address (uint64), got float32", "x[0]")
def array_from_a_float_address(x: xsim.array(dtype=float)):
    y = xsim.array(ptr=x[0], shape=(2,), dtype=float)  # E:array_from_a_float_address
    x[0] = y[0]


@bad("an array in a kernel is made as array(ptr=address, shape=(n, ...), dtype=T), all by keyword", "xsim.array(")
def array_from_positional_data(x: xsim.array(dtype=float)):
    y = xsim.array(x.ptr, shape=(2,))  # E:array_from_positional_data
    x[0] = y[0]


@bad("Slice step cannot be zero (an array slice in a kernel)", "x[::0]")
def zero_step_array_slice(x: xsim.array(dtype=float)):
    y = x[::0]  # E:zero_step_array_slice
    x[0] = y[0]


@bad("an index must be an integer, got float32", "x[x[0]]")
def float_index(x: xsim.array(dtype=float)):
    x[1] = x[x[0]]  # E:float_index


@bad("cannot use the float literal 1.5 where int32 is expected", "x[1.5]")
def float_literal_index(x: xsim.array(dtype=float)):
    x[1] = x[1.5]  # E:float_literal_index


@bad("unknown name 'missing_global'", "missing_global")
def error_inside_func(x: xsim.array(dtype=float)):
    x[0] = helper_with_bad_body(x[0])


@bad("List constructs are not supported in kernels. Use vectors like `wp.vec3()` for small fixed-size "
     "collections, or `wp.zeros(shape=N, dtype=...)` for stack-allocated arrays.", "[1.0")
def uses_list(x: xsim.array(dtype=float)):
    s = [1.0, 2.0, 3.0]  # E:uses_list  # noqa: F841


@bad("Construct `ast.Dict` not supported in kernels.", "{}")
def uses_dict(x: xsim.array(dtype=float)):
    d = {}  # E:uses_dict  # noqa: F841


@bad("kernels loop only over range(...)", "x:")
def loops_over_array(x: xsim.array(dtype=float)):
    for v in x:  # E:loops_over_array
        pass


@bad("range() needs integers, got float32", "2.5")
def float_range(x: xsim.array(dtype=float)):
    for k in range(2.5):  # E:float_range
        x[0] = 1.0


@bad("vec3f has no component 'w'", "v.w")
def bad_vector_component(x: xsim.array(dtype=float)):
    v = xsim.vec3(1.0, 2.0, 3.0)
    x[0] = v.w  # E:bad_vector_component


@bad("`velocity` is not an attribute of 'b' (", "b.velocity")
def bad_struct_field(x: xsim.array(dtype=float)):
    b = Body()
    x[0] = b.velocity  # E:bad_struct_field


@bad("cannot call the kernel 'some_kernel' from a kernel; make it an @xsim.func", "some_kernel(")
def calls_a_kernel(x: xsim.array(dtype=float)):
    some_kernel(x)  # E:calls_a_kernel


@bad("unsupported constant 'text' (only numbers and booleans)", "'text'")
def uses_string(x: xsim.array(dtype=float)):
    s = 'text'  # E:uses_string  # noqa: F841


@bad("a matrix takes m[i, j] (or m[i] for a row), got 3 indices", "m[0, 1, 2]")
def matrix_three_indices(x: xsim.array(dtype=float)):
    m = xsim.mat33()
    x[0] = m[0, 1, 2]  # E:matrix_three_indices


@bad("'a' is float32 before the loop but vec3f inside it; give it one type", "for k")
def loop_changes_type(x: xsim.array(dtype=float), n: int):
    a = 1.0 * x[0]
    for k in range(n):  # E:loop_changes_type
        a = xsim.vec3(1.0, 2.0, 3.0)  # noqa: F841
    x[1] = 0.0


@bad("cannot unpack 3 value(s) into 2 names", "a, b = ")
def unpack_count_mismatch(x: xsim.array(dtype=float)):
    a, b = 1.0, 2.0, 3.0  # E:unpack_count_mismatch  # noqa: F841


@bad("tid() is unpacked into 1 indices here but 2 elsewhere", "xsim.tid()")
def inconsistent_tid(x: xsim.array(dtype=float)):
    i, j = xsim.tid()
    k = xsim.tid()  # E:inconsistent_tid
    x[i + j + k] = 1.0


@bad("matrix() needs shape=(rows, cols)", "xsim.matrix(")
def matrix_without_shape(x: xsim.array(dtype=float)):
    m = xsim.matrix(1.0, 2.0, 3.0, 4.0)  # E:matrix_without_shape  # noqa: F841


@bad("vector() takes the keywords length= and dtype=, not 'size'", "size=3")
def vector_bad_keyword(x: xsim.array(dtype=float)):
    v = xsim.vector(1.0, size=3)  # E:vector_bad_keyword  # noqa: F841


@xsim.func
def returns_two_types(a: float):
    if a > 0.0:
        return a
    return xsim.vec3(a, a, a)  # E:func_returns_two_types


@bad("this return gives vec3f but an earlier return gave float32", "return xsim.vec3")
def func_returns_two_types(x: xsim.array(dtype=float)):
    x[0] = returns_two_types(x[0])


@bad("argmin() takes positional arguments only", "xsim.argmin(")
def builtin_keyword_argument(x: xsim.array(dtype=float)):
    x[0] = float(xsim.argmin(a=xsim.vec3(x[0])))  # E:builtin_keyword_argument


@bad("kernel parameter 'n' needs a type annotation", "n")
def unannotated_parameter(x: xsim.array(dtype=float), n):  # E:unannotated_parameter
    x[0] = 1.0


@bad("the integer 1180591620717411303424 does not fit in int32", "xsim.int32(2**70)")
def literal_does_not_fit(x: xsim.array(dtype=float)):
    x[0] = float(xsim.int32(2**70))  # E:literal_does_not_fit


@bad("the integer 2147483648 does not fit in int32", "k + 2147483648")
def literal_does_not_fit_its_operand(x: xsim.array(dtype=float), k: int):
    x[0] = float(k + 2147483648)  # E:literal_does_not_fit_its_operand


@xsim.func
def sign_without_zero_case(a: float) -> float:
    if a > 0.0:
        return 1.0
    elif a < 0.0:  # E:func_falls_off_its_end
        return -1.0


@xsim.func
def half_unless_big(a: float):
    if a > 10.0:
        return a
    a = a * 0.5  # E:func_falls_off_its_end_inferred


@bad("func 'sign_without_zero_case' can reach its end without returning a value (it declares a return type)",
     "elif a < 0.0")
def func_falls_off_its_end(x: xsim.array(dtype=float)):
    x[0] = sign_without_zero_case(x[1])


@bad("func 'half_unless_big' can reach its end without returning a value (it returns a value elsewhere)",
     "a = a * 0.5")
def func_falls_off_its_end_inferred(x: xsim.array(dtype=float)):
    x[0] = half_unless_big(x[1])


@bad("Cannot reassign local 'f', which holds helper: rebinding function-valued local 'f' to another function is "
     "not supported", "f = half_unless_big")
def rebinds_func_local(x: xsim.array(dtype=float)):
    f = helper
    f = half_unless_big  # E:rebinds_func_local
    x[0] = f(x[1])


@bad("rebinding function-valued local 'f' to a non-function value is not supported", "f = 1.0")
def rebinds_func_local_to_value(x: xsim.array(dtype=float)):
    f = helper
    f = 1.0  # E:rebinds_func_local_to_value
    x[0] = f


@bad("Cannot reassign local 'g', which holds xsim.grad(helper): rebinding function-valued local 'g' to a "
     "non-function value", "g += 1.0")
def rebinds_grad_local(x: xsim.array(dtype=float)):
    g = xsim.grad(helper)
    g += 1.0  # E:rebinds_grad_local


@bad("xsim.grad(helper) in a kernel needs enable_backward=False on the kernel", "xsim.grad(helper)(")
def grad_in_differentiable_kernel(x: xsim.array(dtype=float)):
    x[0] = xsim.grad(helper)(x[1], x[2])[0]  # E:grad_in_differentiable_kernel


@xsim.func
def looping(a: float):
    s = a
    for _ in range(int(a)):
        s = s * a
    return s


@xsim.kernel(module="xsim_tests_bad_kernel_grad_of_looping_func", enable_backward=False)
def grad_of_looping_func(x: xsim.array(dtype=float)):
    x[0] = xsim.grad(looping)(x[1])  # E:grad_of_looping_func


CASES["grad_of_looping_func"] = (grad_of_looping_func, ("xsim.grad(looping): xsim differentiates funcs of plain "
                                                       "values here (no loops, array accesses or funcs with custom "
                                                       "gradients)"), "xsim.grad(looping)(")


@xsim.func
def narrows(a: xsim.int32) -> xsim.int16:
    return xsim.int8(a)  # E:func_returns_other_type


@xsim.func
def pair_for_one(a: int) -> int:
    return (a, a)  # E:func_returns_tuple_for_one


@xsim.func
def two_for_three(a: int) -> tuple[int, int, int]:
    return (a, a)  # E:func_returns_too_few


@xsim.func
def float_in_int_pair(a: int) -> tuple[int, int]:
    return (a, 1.5)  # E:func_returns_wrong_tuple_types


@bad("The function `narrows` has its return type annotated as `int16` but the code returns a value of type `int8`.",
     "return")
def func_returns_other_type(x: xsim.array(dtype=float)):
    x[0] = float(narrows(3))


@bad("The function `pair_for_one` has its return type annotated as `int` but the code returns 2 values.", "return")
def func_returns_tuple_for_one(x: xsim.array(dtype=float)):
    x[0] = float(pair_for_one(3))


@bad("The function `two_for_three` has its return type annotated as a tuple of 3 elements but the code returns 2 "
     "values.", "return")
def func_returns_too_few(x: xsim.array(dtype=float)):
    _a, _b, _c = two_for_three(3)


@bad("The function `float_in_int_pair` has its return type annotated as `tuple[int, int]` but the code returns a "
     "tuple with types `(int32, float32)`.", "return")
def func_returns_wrong_tuple_types(x: xsim.array(dtype=float)):
    _a, _b = float_in_int_pair(3)


@bad("Warp kernels cannot return values. Write results to output arguments", "float:")
def kernel_annotated_to_return(x: xsim.array(dtype=float)) -> float:  # E:kernel_annotated_to_return
    return


@bad("Could not find function xsim.nonexistent_func: module 'xsim' has no attribute 'nonexistent_func'",
     "xsim.nonexistent_func(")
def calls_missing_function(x: xsim.array(dtype=float)):
    x[0] = xsim.nonexistent_func(x[1])  # E:calls_missing_function


@bad("`foo` is not an attribute of module 'xsim'", "xsim.foo.bar")
def calls_through_missing_namespace(x: xsim.array(dtype=float)):
    x[0] = xsim.foo.bar.sin(x[1])  # E:calls_through_missing_namespace


@bad("pow() has no parameter 'z' (it takes x, y)", "z=")
def builtin_unknown_keyword(x: xsim.array(dtype=float)):
    x[0] = xsim.pow(x=x[1], z=2.0)  # E:builtin_unknown_keyword


THIS_FILE = Path(__file__).resolve()
SOURCE = THIS_FILE.read_text().splitlines()


def marked_line(name: str) -> int:
    """The 1-based line of this file carrying the marker ``# E:<name>``."""
    hits = [n for n, text in enumerate(SOURCE, 1) if re.search(rf"# E:{name}\b", text)]
    assert len(hits) == 1, name
    return hits[0]


def test_there_are_at_least_twenty_distinct_bad_kernels():
    assert len(CASES) >= 20
    assert len({expected for _, expected, _ in CASES.values()}) >= 20


@pytest.mark.parametrize("name", sorted(CASES))
def test_bad_kernel_raises_compile_error_with_location_caret_and_expectation(name):
    kernel, expected, caret_at = CASES[name]
    args = [xsim.zeros(4, dtype=float)] + [3] * (len(kernel.params) - 1)
    with pytest.raises(xsim.CompileError) as info:
        xsim.launch(kernel, 1, inputs=args)
    err = info.value
    text = str(err)
    line = marked_line(name)
    # file:line:col, the source line, the caret, then the message last (as Warp and Python's SyntaxError)
    head, src_line, caret_line, *message = text.splitlines()
    assert head == f"{THIS_FILE}:{line}:{err.col + 1}:", text
    assert (err.file, err.line) == (str(THIS_FILE), line)
    assert expected in "\n".join(message) and text.endswith(err.message), text
    assert src_line.strip() == SOURCE[line - 1].strip(), text
    # the caret sits under the offending code
    assert caret_line.strip() == "^", text
    caret_col = caret_line.index("^")
    assert src_line[caret_col:].startswith(caret_at), f"caret at {src_line[caret_col:]!r}\n{text}"
    assert src_line[:caret_col].strip() == SOURCE[line - 1][:err.col].strip()


def test_a_bad_kernel_keeps_failing_on_every_launch():
    kernel = CASES["unknown_name"][0]
    for _ in range(2):
        with pytest.raises(xsim.CompileError, match="unknown name 'undefined_thing'"):
            xsim.launch(kernel, 1, inputs=[xsim.zeros(4, dtype=float)])


@xsim.kernel(module="xsim_tests_bad_kernel_straddled_indices")
def straddled_indices(m: xsim.array(dtype=xsim.mat44, ndim=2)):
    m[0][2, 2] = 6.0  # one array index and two matrix indices for a 2-d array


@xsim.kernel(module="xsim_tests_bad_kernel_component_store_mismatch")
def component_store_mismatch(y: xsim.array(dtype=xsim.vec3), src: xsim.array(dtype=xsim.vec3)):
    y[0].y = src[0]


def test_indices_straddling_an_array_and_its_matrix_elements_are_refused_as_in_warp():
    with pytest.raises(xsim.WarpCodegenError, match="Incorrect number of indices specified for array indexing: "
                       r"array 'm' has 2 dimension\(s\) but is indexed with 3"):
        xsim.launch(straddled_indices, 1, inputs=[xsim.zeros((1, 1), dtype=xsim.mat44)])


def test_a_vector_stored_into_a_vector_component_is_a_type_error():
    with pytest.raises(TypeError, match="Composite slot assignment expects value of type float32: cannot store vec3f "
                       "into an 'y' element component"):
        xsim.launch(component_store_mismatch, 1, inputs=[xsim.zeros(1, dtype=xsim.vec3)] * 2)


@xsim.kernel(module="xsim_tests_bad_kernel_float_write_index")
def float_write_index(y: xsim.array(dtype=xsim.vec3), at: xsim.array(dtype=float)):
    y[at[0]].x += 1.0


@xsim.kernel(module="xsim_tests_bad_kernel_float_literal_write_index")
def float_literal_write_index(y: xsim.array(dtype=xsim.vec3)):
    y[0.0].x = 1.0


def test_module_load_raises_the_error_of_a_refused_kernel_and_a_float_write_index_is_a_type_error():
    with pytest.raises(TypeError, match="Array slot write indices must be integers, got float32"):
        float_write_index.module.load(device="cpu")
    with pytest.raises(TypeError, match="Array slot write indices must be integers, got a float literal"):
        xsim.launch(float_literal_write_index, 1, inputs=[xsim.zeros(1, dtype=xsim.vec3)])
    assert component_store_mismatch.module is not float_write_index.module
    assert xsim.get_module("xsim_tests_bad_kernel_nothing_refused").load() is True  # no kernels: nothing to raise
