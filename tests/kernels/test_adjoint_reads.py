"""Which read arrays a kernel's adjoint needs the values of (xsim/kernels/adjoint_reads.py), and the tape
refusing an overwrite only where one is needed: a product needs each factor for the other's gradient, a sum
needs no values, a value that picks an index, a branch or a loop count is needed for every gradient, a
nonlinear call needs its own argument. Gradients after a harmless overwrite against the closed form."""

from __future__ import annotations

import numpy as np
import pytest

import xsim as wp
from xsim.kernels.adjoint_reads import adjoint_reads
from xsim.kernels.module import build_ir

F = wp.array(dtype=float)


@wp.kernel
def product(c: F, x: F, y: F):
    i = wp.tid()
    y[i] = x[i] * c[i]


@wp.kernel
def shifted_sum(x: F, b: F, y: F):
    i = wp.tid()
    y[i] = x[i] + 2.0 * b[i] - x[i]


@wp.kernel
def gather(idx: wp.array(dtype=int), x: F, y: F):
    i = wp.tid()
    y[i] = x[idx[i]]


@wp.kernel
def clipped(x: F, c: F, y: F):
    i = wp.tid()
    v = c[i]
    if x[i] > 0.0:
        v = v + x[i]
    y[i] = v


@wp.kernel
def root(x: F, y: F):
    i = wp.tid()
    y[i] = wp.sqrt(x[i])


@wp.kernel
def powers(x: F, c: F, y: F):
    i = wp.tid()
    p = x[i]
    for _ in range(3):
        p = p * c[i]
    y[i] = p


def test_each_read_array_maps_to_the_gradients_that_need_its_values():
    assert adjoint_reads(build_ir(product)) == {"c": ["x"], "x": ["c"]}
    assert adjoint_reads(build_ir(shifted_sum)) == {}
    assert adjoint_reads(build_ir(gather)) == {"idx": ["*"]}
    assert adjoint_reads(build_ir(clipped)) == {"x": ["*"]}
    assert adjoint_reads(build_ir(root)) == {"x": ["x"]}
    # the carried product: x's value is needed for c's gradient, c's for both (p depends on x and c)
    assert adjoint_reads(build_ir(powers)) == {"c": ["c", "x"], "x": ["c"]}


@wp.kernel
def overwrite(x: F):
    i = wp.tid()
    x[i] = 100.0


def _product_then_overwrite(c_grad: bool):
    c = wp.array(np.arange(1, 5, dtype=np.float32), requires_grad=c_grad)
    x = wp.array(np.full(4, 0.5, np.float32), requires_grad=True)
    y = wp.zeros(4, dtype=float, requires_grad=True)
    tape = wp.Tape()
    with tape:
        wp.launch(product, 4, inputs=[c, x], outputs=[y])
    wp.launch(overwrite, 4, inputs=[x])
    return tape, c, x, y


def test_overwriting_a_factor_whose_partner_has_no_gradient_keeps_the_backward_pass():
    tape, c, x, y = _product_then_overwrite(c_grad=False)
    tape.backward(grads={y: wp.ones(4, dtype=float)})
    np.testing.assert_array_equal(x.grad.numpy(), c.numpy())  # dy/dx = c, whatever x holds now


def test_overwriting_a_factor_whose_partner_has_a_gradient_is_refused():
    tape, _, _, y = _product_then_overwrite(c_grad=True)
    with pytest.raises(RuntimeError, match="array 'x' read by kernel 'product' was overwritten afterwards"):
        tape.backward(grads={y: wp.ones(4, dtype=float)})


def test_overwriting_an_index_array_is_refused_whatever_has_gradients():
    idx = wp.array([3, 2, 1, 0], dtype=int)
    x = wp.array(np.arange(4, dtype=np.float32), requires_grad=True)
    y = wp.zeros(4, dtype=float, requires_grad=True)
    tape = wp.Tape()
    with tape:
        wp.launch(gather, 4, inputs=[idx, x], outputs=[y])
    idx.fill_(0)
    with pytest.raises(RuntimeError, match="array 'idx' read by kernel 'gather' was overwritten afterwards"):
        tape.backward(grads={y: wp.ones(4, dtype=float)})
