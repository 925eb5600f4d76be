"""The Tape's Warp names: ``gradients``, ``launches``, ``record_scope_begin/end``, and
``backward(grads=...)`` seeding an array that has no grad buffer yet. Gradients are checked against
the analytic derivative of y = x * x (dy/dx = 2x) and of a struct's product z = a * b."""

import warnings

import numpy as np
import pytest

import xsim
from xsim.array import intermediate

A = xsim.array(dtype=xsim.float64)


@xsim.struct
class Pair:
    a: xsim.array(dtype=xsim.float64)
    b: xsim.array(dtype=xsim.float64)


@xsim.kernel
def square(x: A, y: A):
    i = xsim.tid()
    y[i] = x[i] * x[i]


@xsim.kernel
def product(p: Pair, z: A):
    i = xsim.tid()
    z[i] = p.a[i] * p.b[i]


X = np.array([1.0, -2.0, 0.5])


def test_gradients_maps_each_argument_to_its_grad_and_survives_reset():
    x = xsim.array(X, dtype=xsim.float64, requires_grad=True)
    y = xsim.zeros(3, dtype=xsim.float64, requires_grad=True)
    with xsim.Tape() as tape:
        xsim.launch(square, 3, inputs=[x], outputs=[y])
    tape.backward(grads={y: np.ones(3)})
    assert tape.gradients[x] is x.grad and tape.gradients[y] is y.grad
    np.testing.assert_array_equal(tape.gradients[x].numpy(), 2 * X)
    assert tape.launches is tape.records and len(tape.launches) == 1
    tape.reset()
    assert not tape.launches
    np.testing.assert_array_equal(tape.gradients[x].numpy(), np.zeros(3))
    with pytest.raises(KeyError, match="no gradient on this tape for this value"):
        tape.gradients[xsim.zeros(3, dtype=xsim.float64)]


def test_gradients_of_a_struct_argument_holds_its_fields_grads():
    b_vals = np.array([3.0, 4.0, -1.0])
    p = Pair()
    p.a = xsim.array(X, dtype=xsim.float64, requires_grad=True)
    p.b = xsim.array(b_vals, dtype=xsim.float64, requires_grad=True)
    z = xsim.zeros(3, dtype=xsim.float64, requires_grad=True)
    with xsim.Tape() as tape:
        xsim.launch(product, 3, inputs=[p], outputs=[z])
    tape.backward(grads={z: np.ones(3)})
    g = tape.gradients[p]
    np.testing.assert_array_equal(g.a.numpy(), b_vals)
    np.testing.assert_array_equal(g.b.numpy(), X)
    assert p in tape.gradients and g.a is p.a.grad
    # an array reached through the struct is a key too (Warp's diffray reads tape.gradients[mesh.rot])
    assert tape.gradients[p.b] is p.b.grad
    np.testing.assert_array_equal(tape.gradients[p.a].numpy(), b_vals)


def test_backward_seeds_an_array_without_a_grad_buffer():
    x = xsim.array(X, dtype=xsim.float64, requires_grad=True)
    y = xsim.zeros(3, dtype=xsim.float64)  # no grad
    with xsim.Tape() as tape:
        xsim.launch(square, 3, inputs=[x], outputs=[y])
    seed = xsim.array([1.0, 2.0, 3.0], dtype=xsim.float64)
    tape.backward(grads={y: seed})
    assert y.grad is seed  # the seed array becomes the grad, as in Warp
    np.testing.assert_array_equal(x.grad.numpy(), 2 * X * [1.0, 2.0, 3.0])
    y2 = xsim.zeros(3, dtype=xsim.float64)
    with xsim.Tape() as tape2:
        xsim.launch(square, 3, inputs=[x], outputs=[y2])
    x.grad.zero_()
    tape2.backward(grads={y2: np.array([0.5, 0.5, 0.5])})  # a numpy seed: a new buffer holding it
    np.testing.assert_array_equal(x.grad.numpy(), X)


def test_backward_refuses_a_seed_array_that_does_not_fit():
    x = xsim.array(X, dtype=xsim.float64, requires_grad=True)
    y = xsim.zeros(3, dtype=xsim.float64)
    with xsim.Tape() as tape:
        xsim.launch(square, 3, inputs=[x], outputs=[y])
    with pytest.raises(ValueError, match=r"gradient must match its array: expected shape \(3,\)"):
        tape.backward(grads={y: xsim.zeros(4, dtype=xsim.float64)})


def test_record_scopes_label_launches_and_drop_empty_ones():
    x = xsim.array(X, dtype=xsim.float64, requires_grad=True)
    y = xsim.zeros(3, dtype=xsim.float64, requires_grad=True)
    with xsim.Tape() as tape:
        tape.record_scope_begin("empty")
        tape.record_scope_end()
        tape.record_scope_begin("step", {"k": 1})
        xsim.launch(square, 3, inputs=[x], outputs=[y])
        tape.record_scope_end()
    assert tape.scopes == [(0, "step", {"k": 1}), (1, None, None)]
    with pytest.raises(RuntimeError, match="ended tape scope, but scope not present"):
        tape.record_scope_end()
    tape.backward(grads={y: np.ones(3)})  # scopes do not change the backward pass
    np.testing.assert_array_equal(x.grad.numpy(), 2 * X)


@xsim.kernel
def triple(x: A, y: A):
    i = xsim.tid()
    y[i] = 3.0 * x[i]


@xsim.kernel
def add_triple_of(g: A, xg: A):
    i = xsim.tid()
    xg[i] += 3.0 * g[i]


def test_record_func_runs_a_hand_written_adjoint_in_its_place_and_zero_clears_its_arrays():
    # y = 3x runs off the tape; record_func supplies its adjoint; z = y * y is recorded: dz/dx = 18 x
    x = xsim.array(X, dtype=xsim.float64, requires_grad=True)
    y = xsim.zeros(3, dtype=xsim.float64, requires_grad=True)
    z = xsim.zeros(3, dtype=xsim.float64, requires_grad=True)
    w = np.array([1.0, -0.5, 2.0])
    with xsim.Tape() as tape:
        xsim.launch(triple, 3, inputs=[x], outputs=[y], record_tape=False)
        tape.record_func(lambda: xsim.launch(add_triple_of, 3, inputs=[y.grad, x.grad]), arrays=[x, y])
        xsim.launch(square, 3, inputs=[y], outputs=[z])
    tape.backward(grads={z: w})
    h = 1e-6  # float64 central differences of L = sum(w * (3x)^2)
    fd = [(np.sum(w * (3 * (X + h * e)) ** 2) - np.sum(w * (3 * (X - h * e)) ** 2)) / (2 * h) for e in np.eye(3)]
    np.testing.assert_allclose(x.grad.numpy(), fd, rtol=1e-8)
    tape.zero()
    assert not x.grad.numpy().any() and not y.grad.numpy().any()
    with pytest.raises(RuntimeError, match="record_func: .* is not an xsim array with a gradient"):
        tape.record_func(lambda: None, arrays=[xsim.zeros(3)])


def test_record_func_outputs_count_as_computed_and_intermediates_get_their_gradient_when_needed():
    # y = 3x off the tape, seeded directly: named in outputs, the tape counts it as computed (no warning)
    x = xsim.array(X, dtype=xsim.float64, requires_grad=True)
    y = intermediate(3, xsim.float64)
    assert y._grad is None
    with xsim.Tape() as tape:
        xsim.launch(triple, 3, inputs=[x], outputs=[y], record_tape=False)
        tape.record_func(lambda: xsim.launch(add_triple_of, 3, inputs=[y.grad, x.grad]), arrays=[x], outputs=[y])
    assert y._grad is None  # recording allocates no gradient for an intermediate
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        tape.backward(grads={y: np.array([1.0, 2.0, -1.0])})
    np.testing.assert_array_equal(x.grad.numpy(), [3.0, 6.0, -3.0])
    with pytest.raises(RuntimeError, match="record_func: .* is not an xsim array with a gradient"):
        tape.record_func(lambda: None, arrays=[x], outputs=[xsim.zeros(3)])


def test_visualize_draws_arrays_records_scopes_and_collapses_repeats(tmp_path):
    x = xsim.array(X, dtype=xsim.float64, requires_grad=True)
    y = xsim.zeros(3, dtype=xsim.float64, requires_grad=True)
    z = xsim.zeros(3, dtype=xsim.float64, requires_grad=True)
    tape = xsim.Tape()
    with tape:
        tape.record_scope_begin("my loop")
        for _ in range(4):
            xsim.launch(square, 3, inputs=[x], outputs=[y])
        tape.record_scope_end()
        xsim.copy(z, y)
    path = tmp_path / "tape.dot"
    code = tape.visualize(str(path), array_labels={x: "positions"})
    assert path.read_text() == code and code.startswith('digraph "tape" {') and code.rstrip().endswith("}")
    assert code.count("{") == code.count("}")  # the scope's cluster is closed
    assert 'label="my loop"' in code and code.count("square") == 1 and "square (repeated 4x)" in code
    assert 'label="positions", tooltip="array: dtype=float64, shape=(3,)"' in code
    assert code.count("-> r") == 2 and "r1 [shape=box, label=\"copy\"]" in code  # x -> square, y -> copy
    full = tape.visualize(simplify_graph=False)
    assert full.count("square") == 4
