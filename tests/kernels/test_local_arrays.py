"""Stack arrays: Warp's ``zeros(shape=N, dtype=T)`` inside a kernel or func makes a zeroed per-thread array of
a compile-time shape. It reads, writes, loops, views, len/shape and func arguments like any array (a func
writes into the caller's array); a constant index outside the shape is a compile error naming the line; a
run-time one is bounds-checked in debug mode; and a kernel using one refuses its adjoint, naming the line,
rather than dropping the gradient that would flow through it. Every launch here is also checked against the
host reference (tests/reference.py), which runs the same source as plain Python; the tests check numpy
answers."""

import importlib.util
import inspect
import re

import numpy as np
import pytest

import xsim

MODULE = "xsim_tests_local_arrays"
LENGTH = xsim.constant(5)
ROWS = 3


def line_of(fn, text: str) -> int:
    """The file line of the first line of ``fn`` containing ``text``."""
    lines, first = inspect.getsourcelines(getattr(fn, "pyfunc", fn))
    return first + next(n for n, s in enumerate(lines) if text in s)


@xsim.func
def fill_ramp(a: xsim.array(dtype=float), scale: float):
    for i in range(len(a)):
        a[i] = scale * float(i)


@xsim.func
def sum_of(a: xsim.array(dtype=float)) -> float:
    s = 0.0
    for i in range(a.shape[0]):
        s += a[i]
    return s


@xsim.func
def squares(n: int):
    a = xsim.zeros(shape=4, dtype=int)
    for i in range(n):
        a[i] = i * i
    return a


@xsim.kernel(module=MODULE)
def ramp_with_bumps(x: xsim.array(dtype=float), k: xsim.array(dtype=int), y: xsim.array(dtype=float)):
    t = xsim.tid()
    a = xsim.zeros(shape=LENGTH, dtype=float)
    fill_ramp(a, x[t])                      # a func writes into the caller's stack array
    a[k[t]] += 1.0                          # a run-time index
    a[0] = a[4] * 2.0                       # constant indices
    y[t] = sum_of(a)


@xsim.kernel(module=MODULE)
def grid_of_vectors(x: xsim.array(dtype=float), k: xsim.array(dtype=int), out: xsim.array(dtype=xsim.vec3)):
    t = xsim.tid()
    g = xsim.zeros(shape=(ROWS, xsim.static(ROWS + 1)), dtype=xsim.vec3)
    for i in range(g.shape[0]):
        for j in range(g.shape[1]):
            g[i, j] = xsim.vec3(float(i), float(j), x[t])
    g[k[t], 1].z += 10.0                    # a component write at a run-time index
    row = g[2]                              # a view of one row
    row[3] = row[3] * 2.0
    out[t] = g[k[t]][1] + g[2, 3] + xsim.vec3(float(len(g)), float(len(row)), 0.0)


@xsim.kernel(module=MODULE)
def fresh_each_iteration(n: xsim.array(dtype=int), y: xsim.array(dtype=int)):
    t = xsim.tid()
    total = 0
    for it in range(n[t]):                  # a dynamic loop: each iteration starts from zeros again
        a = xsim.zeros(shape=3, dtype=int)
        for j in range(it % 3 + 1):
            a[j] = a[j] + it + j
        total += a[0] + a[1] + a[2]
    y[t] = total


@xsim.func
def grid_ramp() -> xsim.fixedarray(dtype=float, shape=(2, 3)):
    g = xsim.zeros(shape=(2, 3), dtype=float)
    for i in range(2):
        for j in range(3):
            g[i, j] = float(3 * i + j)
    return g


@xsim.kernel(module=MODULE)
def from_an_annotated_func(y: xsim.array(dtype=float, ndim=2)):
    g = grid_ramp()
    y[0, 0] = g[1, 2] - g[0, 1]
    y[0, 1] = g[1][0]


@xsim.kernel(module=MODULE)
def from_a_func(n: xsim.array(dtype=int), y: xsim.array(dtype=int)):
    t = xsim.tid()
    a = squares(n[t])
    y[t] = a[0] + a[1] + a[2] + a[3]


@xsim.kernel(module=MODULE)
def scaled_by_stack(x: xsim.array(dtype=float), y: xsim.array(dtype=float)):
    t = xsim.tid()
    a = xsim.zeros(shape=2, dtype=float)
    a[t % 2] = x[t]  # E:adjoint_refused
    y[t] = a[0] * 3.0 + a[1]


@xsim.kernel(module=MODULE)
def reads_at(k: int, y: xsim.array(dtype=float)):
    a = xsim.zeros(shape=4, dtype=float)
    y[0] = a[k]


def test_a_stack_array_is_zeroed_written_at_run_time_indices_and_passed_to_funcs():
    x = np.array([0.5, 1.0, -2.0, 3.0], np.float32)
    k = np.array([0, 2, 4, 1], np.int32)
    y = xsim.zeros(4, dtype=float)
    xsim.launch(ramp_with_bumps, 4, inputs=[xsim.array(x), xsim.array(k), y])
    want = []
    for t in range(4):
        a = x[t] * np.arange(5, dtype=np.float32)
        a[k[t]] += 1.0
        a[0] = a[4] * 2.0
        want.append(a.sum(dtype=np.float32))
    np.testing.assert_array_equal(y.numpy(), np.array(want, np.float32))


def test_a_two_dimensional_stack_array_of_vectors_with_views_len_and_shape():
    x = np.array([1.5, -1.0], np.float32)
    k = np.array([2, 0], np.int32)
    out = xsim.zeros(2, dtype=xsim.vec3)
    xsim.launch(grid_of_vectors, 2, inputs=[xsim.array(x), xsim.array(k)], outputs=[out])
    want = []
    for t in range(2):
        g = np.zeros((ROWS, ROWS + 1, 3), np.float32)
        for i in range(ROWS):
            for j in range(ROWS + 1):
                g[i, j] = (i, j, x[t])
        g[k[t], 1, 2] += 10.0
        g[2, 3] *= 2.0
        want.append(g[k[t], 1] + g[2, 3] + np.array([ROWS, ROWS + 1, 0], np.float32))
    np.testing.assert_array_equal(out.numpy(), np.array(want))


def test_a_stack_array_made_in_a_loop_is_zeroed_on_every_iteration():
    n = np.array([0, 1, 4, 7], np.int32)
    y = xsim.zeros(4, dtype=int)
    xsim.launch(fresh_each_iteration, 4, inputs=[xsim.array(n)], outputs=[y])
    want = [sum(sum(it + j for j in range(it % 3 + 1)) for it in range(m)) for m in n]
    np.testing.assert_array_equal(y.numpy(), want)


def test_a_func_returns_the_stack_array_it_made():
    n = np.array([0, 2, 4], np.int32)
    y = xsim.zeros(3, dtype=int)
    xsim.launch(from_a_func, 3, inputs=[xsim.array(n)], outputs=[y])
    np.testing.assert_array_equal(y.numpy(), [sum(i * i for i in range(m)) for m in n])


def test_a_func_annotated_to_return_a_fixedarray_returns_its_stack_array():
    y = xsim.zeros((1, 2), dtype=float)
    xsim.launch(from_an_annotated_func, 1, outputs=[y])
    np.testing.assert_array_equal(y.numpy(), [[5.0 - 1.0, 3.0]])


def test_the_adjoint_of_a_kernel_with_a_stack_array_is_refused_naming_the_line():
    x = xsim.array(np.array([1.0, 2.0], np.float32), requires_grad=True)
    y = xsim.zeros(2, dtype=float, requires_grad=True)
    with xsim.Tape() as tape:
        xsim.launch(scaled_by_stack, 2, inputs=[x], outputs=[y])
    np.testing.assert_array_equal(y.numpy(), [3.0, 2.0])  # the forward runs
    where = f"{__file__}:{line_of(scaled_by_stack, 'xsim.zeros(shape=2')}"
    with pytest.raises(xsim.CompileError, match=re.escape(f"{where}: the stack array 'a' made by zeros() here "
                                                          "has no gradient")):
        tape.backward(grads={y: np.ones(2, np.float32)})


def test_a_run_time_index_out_of_a_stack_array_raises_in_debug_mode(monkeypatch):
    monkeypatch.setattr(xsim.config, "mode", "debug")
    y = xsim.zeros(1, dtype=float)
    xsim.launch(reads_at, 1, inputs=[3, y])
    assert y.numpy()[0] == 0.0
    with pytest.raises(IndexError, match=re.escape(f"({__file__}:{line_of(reads_at, 'a[k]')}): index (4,) is out "
                                                   "of bounds for array 'a' with shape (4,)")):
        xsim.launch(reads_at, 1, inputs=[4, y])


def _compile_error(body: str, tmp_path) -> tuple[xsim.CompileError, str]:
    """The error of launching a kernel ``bad(y)`` with ``body``, written to its own file in ``tmp_path`` with a func
    ``stack_as_array`` that returns a stack array but is annotated to return an array (its return: line 11)."""
    path = tmp_path / "bad_stack_array.py"
    path.write_text("import xsim\n\n\ndef bad(y: xsim.array(dtype=float)):\n" +
                    "".join(f"    {line}\n" for line in body.splitlines()) +
                    "\n\n@xsim.func\ndef stack_as_array() -> xsim.array2d[float]:\n"
                    "    a = xsim.zeros(shape=(2, 2), dtype=float)\n    return a\n")
    name = f"xsim_tests_local_arrays_bad_{abs(hash(body))}"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    kernel = xsim.kernel(module=name)(module.bad)
    with pytest.raises(xsim.CompileError) as info:
        xsim.launch(kernel, 1, inputs=[xsim.zeros(1, dtype=float)])
    return info.value, str(path)


@pytest.mark.parametrize("body, line, message", [
    ("a = xsim.zeros(shape=3, dtype=float)\ny[0] = a[3]", 3,
     "index 3 out of range for dimension 0 of the stack array 'a' of shape (3,)"),
    ("a = xsim.zeros(shape=3, dtype=float)\na[-1] = 1.0", 3,
     "index -1 out of range for dimension 0 of the stack array 'a' of shape (3,)"),
    ("a = xsim.zeros(shape=(2, 3), dtype=float)\na[1, 3] = 1.0", 3,
     "index 3 out of range for dimension 1 of the stack array 'a' of shape (2, 3)"),
    ("a = xsim.zeros(shape=(2, 3), dtype=float)\nr = a[1]\ny[0] = r[5]", 4,
     "index 5 out of range for dimension 0 of the stack array 'a' of shape (3,)"),  # a view goes by its array
    ("n = xsim.tid()\na = xsim.zeros(shape=(n,), dtype=float)", 3,
     "the `shape` argument must be specified as a constant when zero-initializing an array"),
    ("a = xsim.zeros(shape=2.0, dtype=float)", 2,
     "the `shape` argument must be specified as a constant when zero-initializing an array"),
    ("a = xsim.zeros(shape=4)", 2, "zeros() in a kernel needs both shape and dtype"),
    ("a = xsim.zeros(shape=0, dtype=float)", 2, "1 to 4 dimensions of at least 1, got shape (0,)"),
    ("a = xsim.zeros(shape=(100000,), dtype=xsim.vec3)", 2, "takes 1200000 bytes per thread"),
    ("y[0] = stack_as_array()[0, 0]", 8, ("The function `stack_as_array` returns a fixed-size array whereas it "
                                          "has its return type annotated as `Array[float32]`.")),
])
def test_bad_stack_arrays_are_compile_errors_naming_the_line(body, line, message, tmp_path):
    err, path = _compile_error(body, tmp_path)
    assert (err.file, err.line) == (path, line + 3), str(err)
    assert message in err.message, str(err)
