"""The host reference (tests/reference.py) catches what it exists to catch: a launch whose arrays differ
from the reference names the kernel, the array and the values; a kernel the reference cannot run is
reported by name, and fails a test unless excused."""

import numpy as np
import pytest
import reference

import xsim

F = xsim.array(dtype=xsim.float64)


@xsim.kernel(module="xsim_tests_reference")
def sines(x: F, y: F):
    i = xsim.tid()
    y[i] = xsim.sin(x[i])


def args():
    return [xsim.array([0.5, 1.0, 2.0], dtype=xsim.float64), xsim.zeros(3, dtype=xsim.float64)]


def test_a_launch_that_agrees_passes():
    reference.assert_matches_reference(sines, 3, args())


def test_a_wrong_forward_result_names_the_kernel_array_and_values(monkeypatch):
    monkeypatch.setattr(reference._REFERENCE.shim, "sin", reference.BUILTINS["cos"])
    with pytest.raises(AssertionError, match=r"kernel sines \(dim 3\) disagrees .*\n'y' differs at 3 of 3 "
                                             r"components, e.g. at \[\[0\], \[1\], \[2\]\]: xsim \[0\.479.*"
                                             r"reference \[0\.877"):
        reference.assert_matches_reference(sines, 3, args())


def test_a_kernel_the_reference_cannot_run_is_named(monkeypatch):
    monkeypatch.setattr(xsim, "launch", xsim.kernels.launch.launch)  # not this file's own autouse check
    monkeypatch.delattr(reference._REFERENCE.shim, "sin")
    with pytest.raises(reference.ReferenceUnsupported, match="sines: the reference cannot run it: ReferenceUnsupported: the reference lacks xsim.sin"):
        reference.assert_matches_reference(sines, 3, args())
    gen = reference.every_launch_checked({})
    next(gen)
    xsim.launch(sines, 3, inputs=args())  # collected, not raised, inside the block
    with pytest.raises(AssertionError, match="kernels the host reference cannot run .*\n.*sines"):
        next(gen)
    gen = reference.every_launch_checked({"sines": "uses no sine"})
    next(gen)
    xsim.launch(sines, 3, inputs=args())
    with pytest.raises(StopIteration):
        next(gen)
    np.testing.assert_allclose(args()[0].numpy(), [0.5, 1.0, 2.0])


@xsim.kernel(module="xsim_tests_reference")
def qr_factors(a: xsim.array(dtype=xsim.mat33d), q: xsim.array(dtype=xsim.mat33d), r: xsim.array(dtype=xsim.mat33d)):
    i = xsim.tid()
    Q = xsim.mat33d()
    R = xsim.mat33d()
    xsim.qr3(a[i], Q, R)  # the output-argument form, rewritten by the reference into an assignment
    q[i] = Q
    r[i] = R


def test_qr3_of_the_reference_is_warps_unique_factorisation():
    a = np.random.default_rng(3).normal(size=(16, 3, 3))
    a[0] = -np.eye(3)  # det < 0 with a diagonal R: r22 takes the sign
    q, r = xsim.zeros(16, dtype=xsim.mat33d), xsim.zeros(16, dtype=xsim.mat33d)
    reference.assert_matches_reference(qr_factors, 16, [xsim.array(a, dtype=xsim.mat33d), q, r])
    qn, rn = q.numpy(), r.numpy()
    np.testing.assert_allclose(qn @ rn, a, atol=1e-12)
    np.testing.assert_allclose(np.linalg.det(qn), 1.0, atol=1e-12)
    assert np.all(np.tril(rn, -1) == 0) and np.all(rn[:, [0, 1], [0, 1]] >= 0)
    np.testing.assert_array_equal(np.sign(rn[:, 2, 2]), np.sign(np.linalg.det(a)))


@xsim.func
def overwrite(y: xsim.array(dtype=int), i: int) -> int:
    y[i] = 5
    return 2


@xsim.kernel(module="xsim_tests_reference_update_order")
def updates_after_a_write(y: xsim.array(dtype=int), z: xsim.array(dtype=int), w: xsim.array(dtype=int)):
    i = xsim.tid()
    y[i] += overwrite(y, i)  # an atomic update: the func's write is seen, as in Warp (5 + 2)
    z[i] *= overwrite(z, i)  # a read, then the product: Python's order (100 * 2)
    w[i] = w[i] + overwrite(w, i)  # the read comes first, as in Python (100 + 2)


def test_the_reference_updates_elements_in_xsims_order():
    arrays = [np.full(2, 100, np.int32) for _ in range(3)]
    reference.run(updates_after_a_write, 2, arrays)
    np.testing.assert_array_equal(arrays, [[7, 7], [200, 200], [102, 102]])
    reference.assert_matches_reference(updates_after_a_write, 2, [xsim.array(np.full(2, 100, np.int32)) for _ in range(3)])
