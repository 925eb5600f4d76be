"""A first kernel: saxpy on the CPU, and its gradient through a Tape."""

import numpy as np

import xsim


@xsim.kernel
def saxpy(a: float, x: xsim.array(dtype=float), y: xsim.array(dtype=float), out: xsim.array(dtype=float)):
    i = xsim.tid()
    out[i] = a * x[i] + y[i]


@xsim.kernel
def sum_of_squares(v: xsim.array(dtype=float), loss: xsim.array(dtype=float)):
    i = xsim.tid()
    xsim.atomic_add(loss, 0, v[i] * v[i])


if __name__ == "__main__":
    n = 8
    x = xsim.array(np.linspace(0.0, 1.0, n, dtype=np.float32), requires_grad=True)
    y = xsim.ones(n, dtype=float, requires_grad=True)
    out = xsim.zeros(n, dtype=float, requires_grad=True)
    loss = xsim.zeros(1, dtype=float, requires_grad=True)
    with xsim.Tape() as tape:
        xsim.launch(saxpy, n, inputs=[2.0, x, y], outputs=[out])
        xsim.launch(sum_of_squares, n, inputs=[out], outputs=[loss])
    tape.backward(loss)
    print("out       =", out.numpy())
    print("loss      =", loss.numpy()[0])
    print("dloss/dx  =", x.grad.numpy(), "(expected 4 * out)")
