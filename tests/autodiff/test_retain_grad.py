"""``retain_grad`` (Warp 1.19): an array whose gradient the backward pass keeps where a store's adjoint
(or a copy's) would zero it, so an intermediate's gradient can be read after ``tape.backward``."""

import numpy as np
import pytest

import xsim
from xsim.autodiff import gradcheck

F64 = xsim.float64
A = xsim.array(dtype=F64)
AV = xsim.array(dtype=xsim.vec3d)


@xsim.kernel
def cube(x: A, y: A):
    i = xsim.tid()
    y[i] = x[i] * x[i] * x[i]


@xsim.kernel
def sine(y: A, z: A):
    i = xsim.tid()
    z[i] = xsim.sin(y[i])


@xsim.kernel
def scale(x: A, s: F64, y: A):
    i = xsim.tid()
    y[i] = s * x[i]


@xsim.kernel
def scale_through_a_view(x: A, y: A):
    i = xsim.tid()
    rows = y[0:3]
    rows[i] = 2.0 * x[i]


@xsim.kernel
def component_writes(x: A, y: AV):
    i = xsim.tid()
    y[i].x = 2.0 * x[i]
    y[i].z = x[i] * x[i]


@xsim.kernel
def square_plus_one_inplace(a: A):
    i = xsim.tid()
    a[i] = a[i] * a[i] + 1.0


@xsim.struct
class Holder:
    out: A


@xsim.kernel
def cube_into_struct(x: A, h: Holder):
    i = xsim.tid()
    h.out[i] = x[i] * x[i] * x[i]


X = [0.3, -0.7, 1.1]


def x_array():
    return xsim.array(np.array(X), dtype=F64, requires_grad=True)


def cube_then_sine(x, retain):
    """z = sin(x^3) through an intermediate y that retains its gradient or not; returns (y, z)."""
    y = xsim.zeros(len(X), dtype=F64, requires_grad=True, retain_grad=retain)
    z = xsim.zeros(len(X), dtype=F64, requires_grad=True)
    xsim.launch(cube, len(X), inputs=[x], outputs=[y])
    xsim.launch(sine, len(X), inputs=[y], outputs=[z])
    return y, z


def test_a_retained_intermediate_keeps_its_gradient_and_the_input_gradient_is_unchanged():
    x = x_array()
    with xsim.Tape() as tape:
        y, z = cube_then_sine(x, retain=True)
    tape.backward(grads={z: xsim.ones_like(z)})
    xv = np.array(X)
    np.testing.assert_allclose(y.grad.numpy(), np.cos(xv**3), rtol=1e-12)
    np.testing.assert_allclose(x.grad.numpy(), np.cos(xv**3) * 3 * xv**2, rtol=1e-12)
    gradcheck(lambda x: cube_then_sine(x, retain=True)[1], [x_array()], raise_on_failure=True)


def test_without_retain_grad_the_intermediate_gradient_is_consumed():
    x = x_array()
    with xsim.Tape() as tape:
        y, z = cube_then_sine(x, retain=False)
    tape.backward(grads={z: xsim.ones_like(z)})
    np.testing.assert_array_equal(y.grad.numpy(), 0.0)
    xv = np.array(X)
    np.testing.assert_allclose(x.grad.numpy(), np.cos(xv**3) * 3 * xv**2, rtol=1e-12)


@pytest.mark.parametrize("retain, expected_a", [(False, 0.0), (True, 2.0)])
def test_an_element_written_twice_passes_a_retained_gradient_to_both_writes(retain, expected_a):
    # Warp's documented double count: only the last write reaches the loss, yet with retain_grad the
    # earlier write's adjoint still sees the kept gradient
    a, b = xsim.ones(3, dtype=F64, requires_grad=True), xsim.ones(3, dtype=F64, requires_grad=True)
    y = xsim.zeros(3, dtype=F64, requires_grad=True, retain_grad=retain)
    with xsim.Tape() as tape:
        xsim.launch(scale, 3, inputs=[a, 2.0], outputs=[y])
        xsim.launch(scale, 3, inputs=[b, 3.0], outputs=[y])
    tape.backward(grads={y: xsim.ones_like(y)})
    np.testing.assert_array_equal(a.grad.numpy(), expected_a)
    np.testing.assert_array_equal(b.grad.numpy(), 3.0)
    np.testing.assert_array_equal(y.grad.numpy(), 1.0 if retain else 0.0)


def test_a_view_made_in_a_kernel_does_not_retain():
    # as in Warp: the flag belongs to the array given to the launch, not to views taken inside it
    x = xsim.ones(3, dtype=F64, requires_grad=True)
    y = xsim.zeros(3, dtype=F64, requires_grad=True, retain_grad=True)
    with xsim.Tape() as tape:
        xsim.launch(scale_through_a_view, 3, inputs=[x], outputs=[y])
    tape.backward(grads={y: xsim.ones_like(y)})
    np.testing.assert_array_equal(x.grad.numpy(), 2.0)
    np.testing.assert_array_equal(y.grad.numpy(), 0.0)


def test_component_writes_keep_the_retained_components():
    x = x_array()
    y = xsim.zeros(3, dtype=xsim.vec3d, requires_grad=True, retain_grad=True)
    seed = np.array([[1.0, 2.0, 3.0]] * 3)
    with xsim.Tape() as tape:
        xsim.launch(component_writes, 3, inputs=[x], outputs=[y])
    tape.backward(grads={y: xsim.array(seed, dtype=xsim.vec3d)})
    np.testing.assert_array_equal(y.grad.numpy(), seed)
    np.testing.assert_allclose(x.grad.numpy(), 2.0 * 1.0 + 2 * np.array(X) * 3.0, rtol=1e-12)


def test_an_array_in_a_struct_keeps_its_flag():
    x = x_array()
    h = Holder()
    h.out = xsim.zeros(3, dtype=F64, requires_grad=True, retain_grad=True)
    with xsim.Tape() as tape:
        xsim.launch(cube_into_struct, 3, inputs=[x, h])
    tape.backward(grads={h.out: xsim.ones(3, dtype=F64)})
    np.testing.assert_array_equal(h.out.grad.numpy(), 1.0)
    np.testing.assert_allclose(x.grad.numpy(), 3 * np.array(X) ** 2, rtol=1e-12)


def test_an_inplace_kernel_on_a_retained_array_adds_to_the_kept_gradient():
    # a <- a^2 + 1 in place: the tape replays from its copy of a, which must carry the flag; the kept
    # seed (1) plus the read's adjoint (2a) is what Warp's semantics give
    a = x_array()
    a.retain_grad = True
    with xsim.Tape() as tape:
        xsim.launch(square_plus_one_inplace, 3, inputs=[a])
    tape.backward(grads={a: xsim.ones(3, dtype=F64)})
    np.testing.assert_allclose(a.grad.numpy(), 1.0 + 2 * np.array(X), rtol=1e-12)


def test_a_copy_into_a_retained_array_keeps_its_gradient():
    x, s = x_array(), xsim.full(3, 5.0, dtype=F64, requires_grad=True)
    y = xsim.zeros(3, dtype=F64, requires_grad=True, retain_grad=True)
    with xsim.Tape() as tape:
        xsim.launch(scale, 3, inputs=[x, 2.0], outputs=[y])
        xsim.copy(y, s)
    tape.backward(grads={y: xsim.ones_like(y)})
    np.testing.assert_array_equal(s.grad.numpy(), 1.0)
    np.testing.assert_array_equal(x.grad.numpy(), 2.0)  # the dead write still sees the kept gradient
    np.testing.assert_array_equal(y.grad.numpy(), 1.0)


def test_a_retaining_clone_keeps_its_gradient():
    x = x_array()
    with xsim.Tape() as tape:
        c = xsim.clone(x, retain_grad=True)
    tape.backward(grads={c: xsim.full(3, 2.0, dtype=F64)})
    np.testing.assert_array_equal(x.grad.numpy(), 2.0)
    np.testing.assert_array_equal(c.grad.numpy(), 2.0)


@pytest.mark.parametrize("make", [
    lambda: xsim.zeros(3, dtype=F64, retain_grad=True),
    lambda: xsim.full(3, 1.0, dtype=F64, retain_grad=True),
    lambda: xsim.array([1.0, 2.0], dtype=F64, retain_grad=True),
    lambda: xsim.empty_like(xsim.zeros(2, dtype=F64), retain_grad=True),
    lambda: xsim.clone(xsim.zeros(2, dtype=F64), retain_grad=True),
])
def test_retain_grad_without_requires_grad_is_refused(make):
    with pytest.raises(ValueError, match="retain_grad=True requires requires_grad=True"):
        make()


def test_the_flag_follows_requires_grad_and_grad():
    a = xsim.zeros(3, dtype=F64)
    assert a.retain_grad is False
    with pytest.raises(ValueError, match="only an array with a gradient can retain it"):
        a.retain_grad = True
    a.requires_grad = True
    a.retain_grad = True
    assert a.retain_grad and a.desc.flags == 1
    a.requires_grad = False
    assert a.retain_grad is False and a.desc.flags == 0
    b = xsim.ones(2, dtype=F64, requires_grad=True, retain_grad=True)
    b.grad = None
    assert b.retain_grad is False
    assert xsim.zeros_like(b, requires_grad=True).retain_grad is False  # not inherited, as in Warp
    assert b[0:1].retain_grad is False  # nor by a host view


def test_the_view_a_cpu_launch_packs_follows_the_flag():
    """A CPU launch packs each array's native view from bytes kept on the array (``_desc_bytes``): every
    change of the flag must reach them, or a kernel would see the flag the array had when it was made."""
    a = xsim.zeros(3, dtype=F64)
    assert a._desc_bytes == bytes(a.desc)
    a.requires_grad = True
    a.retain_grad = True
    assert a._desc_bytes == bytes(a.desc) and a.desc.flags == 1
    a.requires_grad = False
    assert a._desc_bytes == bytes(a.desc) and a.desc.flags == 0
    b = xsim.ones(2, dtype=F64, requires_grad=True, retain_grad=True)
    assert b._desc_bytes == bytes(b.desc) and b.desc.flags == 1
    b.grad = None
    assert b._desc_bytes == bytes(b.desc) and b.desc.flags == 0
    assert b[0:1]._desc_bytes == bytes(b[0:1].desc)
