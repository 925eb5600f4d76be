"""Structs holding structs, vectors, matrices, transforms and arrays: in arrays, as parameters, read,
written and accumulated through nested fields, forward against numpy records and gradients against
float64 finite differences (``gradcheck``). The kernels compile in one module."""

import numpy as np
import pytest

import xsim
from xsim.autodiff.gradcheck import gradcheck

F = xsim.float64
N = 5
RNG = np.random.default_rng(3)


@xsim.struct
class Joint:
    stiffness: F
    axis: xsim.vec3d


@xsim.struct
class Body:
    joint: Joint
    inertia: xsim.mat22d
    pose: xsim.transformd
    mass: F


@xsim.struct
class Samples:
    values: xsim.array(dtype=F)


@xsim.struct
class Batch:
    samples: Samples
    gain: F


@xsim.struct
class Keywords:
    """Fields named as C++ keywords (and one starting with the prefix xsim gives those in C++)."""
    new: F
    this: xsim.vec3d
    union: Joint
    f_new: F
    int32_t: xsim.int32


@xsim.struct
class KeywordHolder:
    template: xsim.array(dtype=F)
    double: F


@xsim.kernel(module="xsim_tests_nested_structs")
def keyword_fields(recs: xsim.array(dtype=Keywords), holder: KeywordHolder, out: xsim.array(dtype=F)):
    i = xsim.tid()
    r = recs[i]
    r.this.z = r.new * holder.double
    out[i] = (r.new * r.this[1] + r.union.stiffness * r.f_new + holder.template[i] * r.this.x + r.this.z * r.this.z
              + F(r.int32_t))


@xsim.kernel(module="xsim_tests_nested_structs")
def body_energy(bodies: xsim.array(dtype=Body), out: xsim.array(dtype=F)):
    i = xsim.tid()
    b = bodies[i]
    out[i] = (b.joint.stiffness * b.mass + b.joint.axis[1] * b.inertia[0, 1] + b.pose.p[2] * b.pose.q[3]
              + xsim.dot(b.joint.axis, b.joint.axis))


@xsim.kernel(module="xsim_tests_nested_structs")
def rewrite_bodies(src: xsim.array(dtype=Body), dst: xsim.array(dtype=Body), k: F):
    i = xsim.tid()
    b = src[i]
    b.joint.axis[1] = b.joint.stiffness * k          # a component of a vector in a struct in a struct
    b.joint.stiffness = b.mass * b.inertia[1, 0]
    b.inertia[0, 0] = b.joint.axis[0] + b.mass
    dst[i] = b


@xsim.kernel(module="xsim_tests_nested_structs")
def write_nested_fields(src: xsim.array(dtype=F), dst: xsim.array(dtype=Body)):
    i = xsim.tid()
    s = src[i]
    dst[i].joint.stiffness = s * 2.0
    dst[i].joint.axis = xsim.vec3d(s, s * s, 1.0)
    dst[i].mass += s * 3.0                           # an atomic add into a struct field
    dst[i].inertia[1, 1] = s - 1.0
    dst[i].inertia[0][1] = s * s                     # m[r][c] is m[r, c]
    dst[i].inertia[1][0] += s


@xsim.kernel(module="xsim_tests_nested_structs")
def accumulate_bodies(src: xsim.array(dtype=Body), dst: xsim.array(dtype=Body)):
    i = xsim.tid()
    xsim.atomic_add(dst, i % 2, src[i])                 # a whole struct, nested fields and all
    dst[i % 2].joint.axis += src[i].joint.axis * 2.0     # a vector field of a nested struct


@xsim.kernel(module="xsim_tests_nested_structs")
def gather_through_nested_array(batch: Batch, out: xsim.array(dtype=F)):
    i = xsim.tid()
    out[i] = batch.gain * batch.samples.values[i] * batch.samples.values[i]


def random_bodies(n):
    recs = np.zeros(n, dtype=Body._np)
    recs["joint"]["stiffness"] = RNG.uniform(0.5, 2.0, n)
    recs["joint"]["axis"] = RNG.uniform(-1.0, 1.0, (n, 3))
    recs["inertia"] = RNG.uniform(-1.0, 1.0, (n, 2, 2))
    recs["pose"] = RNG.uniform(-1.0, 1.0, (n, 7))
    recs["mass"] = RNG.uniform(0.5, 2.0, n)
    return recs


def test_nested_fields_read_from_struct_arrays_match_numpy():
    recs = random_bodies(N)
    out = xsim.zeros(N, dtype=F)
    xsim.launch(body_energy, N, inputs=[xsim.array(recs, dtype=Body), out])
    j = recs["joint"]
    expected = (j["stiffness"] * recs["mass"] + j["axis"][:, 1] * recs["inertia"][:, 0, 1]
                + recs["pose"][:, 2] * recs["pose"][:, 6] + (j["axis"] ** 2).sum(1))
    np.testing.assert_allclose(out.numpy(), expected, rtol=1e-12)


def test_nested_fields_written_on_locals_and_whole_struct_stored():
    recs = random_bodies(N)
    dst = xsim.zeros(N, dtype=Body)
    xsim.launch(rewrite_bodies, N, inputs=[xsim.array(recs, dtype=Body), dst, 3.0])
    exp = recs.copy()
    exp["joint"]["axis"][:, 1] = recs["joint"]["stiffness"] * 3.0
    exp["joint"]["stiffness"] = recs["mass"] * recs["inertia"][:, 1, 0]
    exp["inertia"][:, 0, 0] = recs["joint"]["axis"][:, 0] + recs["mass"]
    got = dst.numpy()
    for name in ("inertia", "pose", "mass"):
        np.testing.assert_allclose(got[name], exp[name], rtol=1e-12)
    for name in ("stiffness", "axis"):
        np.testing.assert_allclose(got["joint"][name], exp["joint"][name], rtol=1e-12)


def test_nested_fields_written_in_array_elements():
    s = RNG.uniform(-1.0, 1.0, N)
    recs = random_bodies(N)
    dst = xsim.array(recs, dtype=Body)
    xsim.launch(write_nested_fields, N, inputs=[xsim.array(s, dtype=F), dst])
    got = dst.numpy()
    np.testing.assert_allclose(got["joint"]["stiffness"], 2.0 * s)
    np.testing.assert_allclose(got["joint"]["axis"], np.stack([s, s * s, np.ones(N)], 1))
    np.testing.assert_allclose(got["mass"], recs["mass"] + 3.0 * s)
    np.testing.assert_allclose(got["inertia"][:, 1, 1], s - 1.0)
    np.testing.assert_allclose(got["inertia"][:, 0, 0], recs["inertia"][:, 0, 0])
    np.testing.assert_allclose(got["inertia"][:, 0, 1], s * s)
    np.testing.assert_allclose(got["inertia"][:, 1, 0], recs["inertia"][:, 1, 0] + s)


def test_atomic_adds_of_whole_structs_and_nested_fields_match_numpy():
    recs = random_bodies(N)
    dst = xsim.zeros(2, dtype=Body)
    xsim.launch(accumulate_bodies, N, inputs=[xsim.array(recs, dtype=Body), dst])
    got = dst.numpy()
    for k in range(2):
        part = recs[k::2]
        np.testing.assert_allclose(got["mass"][k], part["mass"].sum(), rtol=1e-12)
        np.testing.assert_allclose(got["pose"][k], part["pose"].sum(0), rtol=1e-12)
        np.testing.assert_allclose(got["inertia"][k], part["inertia"].sum(0), rtol=1e-12)
        np.testing.assert_allclose(got["joint"]["stiffness"][k], part["joint"]["stiffness"].sum(), rtol=1e-12)
        np.testing.assert_allclose(got["joint"]["axis"][k], 3.0 * part["joint"]["axis"].sum(0), rtol=1e-12)


@pytest.mark.parametrize("kernel, make_args", [
    (body_energy, lambda: [xsim.array(random_bodies(N), dtype=Body, requires_grad=True),
                           xsim.zeros(N, dtype=F, requires_grad=True)]),
    (rewrite_bodies, lambda: [xsim.array(random_bodies(N), dtype=Body, requires_grad=True),
                              xsim.zeros(N, dtype=Body, requires_grad=True), 3.0]),
    (write_nested_fields, lambda: [xsim.array(RNG.uniform(-1.0, 1.0, N), dtype=F, requires_grad=True),
                                   xsim.array(random_bodies(N), dtype=Body, requires_grad=True)]),
    (accumulate_bodies, lambda: [xsim.array(random_bodies(N), dtype=Body, requires_grad=True),
                                 xsim.zeros(2, dtype=Body, requires_grad=True)]),
], ids=["read", "local_writes", "element_writes", "atomic_adds"])
def test_gradients_through_nested_struct_fields_match_finite_differences(kernel, make_args):
    report = gradcheck(kernel, make_args(), dim=N, atol=1e-7, rtol=1e-6)
    assert report.passed, str(report)


def test_struct_fields_named_as_cpp_keywords_compile_run_and_differentiate():
    recs = np.zeros(N, dtype=Keywords._np)
    for name in ("new", "f_new"):
        recs[name] = RNG.uniform(-1.0, 1.0, N)
    recs["this"] = RNG.uniform(-1.0, 1.0, (N, 3))
    recs["union"]["stiffness"] = RNG.uniform(0.5, 2.0, N)
    recs["int32_t"] = np.arange(N)
    template = RNG.uniform(-1.0, 1.0, N)
    arr, tmpl = xsim.array(recs, dtype=Keywords, requires_grad=True), xsim.array(template, dtype=F, requires_grad=True)
    holder = KeywordHolder(template=tmpl, double=1.5)
    out = xsim.zeros(N, dtype=F, requires_grad=True)
    tape = xsim.Tape()
    with tape:
        xsim.launch(keyword_fields, N, inputs=[arr, holder, out])
    z = recs["new"] * 1.5
    np.testing.assert_allclose(out.numpy(), recs["new"] * recs["this"][:, 1] + recs["union"]["stiffness"] * recs["f_new"]
                               + template * recs["this"][:, 0] + z * z + np.arange(N), rtol=1e-12)
    tape.backward(grads={out: xsim.ones(N, dtype=F)})
    g = arr.grad.numpy()
    np.testing.assert_allclose(g["new"], recs["this"][:, 1] + 2.0 * z * 1.5, rtol=1e-12)
    np.testing.assert_allclose(g["f_new"], recs["union"]["stiffness"], rtol=1e-12)
    np.testing.assert_allclose(g["this"][:, 0], template, rtol=1e-12)
    np.testing.assert_allclose(g["this"][:, 2], 0.0)  # overwritten before it is read
    np.testing.assert_allclose(tmpl.grad.numpy(), recs["this"][:, 0], rtol=1e-12)
    report = gradcheck(keyword_fields, [xsim.array(recs, dtype=Keywords, requires_grad=True), holder,
                                        xsim.zeros(N, dtype=F, requires_grad=True)], dim=N, wrt=["recs"])
    assert report.passed, str(report)


def test_gradient_reaches_an_array_inside_a_nested_struct_parameter():
    values = RNG.uniform(-1.0, 1.0, N)
    arr = xsim.array(values, dtype=F, requires_grad=True)
    batch = Batch(samples=Samples(values=arr), gain=1.5)
    out = xsim.zeros(N, dtype=F, requires_grad=True)
    tape = xsim.Tape()
    with tape:
        xsim.launch(gather_through_nested_array, N, inputs=[batch, out])
    np.testing.assert_allclose(out.numpy(), 1.5 * values ** 2)
    w = RNG.uniform(0.5, 1.5, N)
    tape.backward(grads={out: xsim.array(w, dtype=F)})
    np.testing.assert_allclose(arr.grad.numpy(), 3.0 * values * w, rtol=1e-12)
