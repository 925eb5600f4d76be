"""The distance and bending updates' hand-written chain rules (``func_grad`` in
``xsim/solvers/xpbd/kernels.py``) against the generated adjoint of the same updates written as plain
kernel code (the solver's kernels before the hand-written adjoints), to 1e-12 in float64: every
input's gradient, with and without damping, on random constraints."""

import numpy as np
import pytest

import xsim
from xsim.sim.generic import specialized
from xsim.solvers.xpbd import kernels as particle_kernels

V3, V4 = xsim.vec3d, xsim.vec4d
Scalars, Vec3s, Vec4s = xsim.array(dtype=xsim.float64), xsim.array(dtype=V3), xsim.array(dtype=V4)
Ints2, Vec3s2 = xsim.array(dtype=int, ndim=2), xsim.array(dtype=V3, ndim=2)


def reference_kernels(damped: bool):
    """The updates as plain kernel code, differentiated by the compiler."""
    DAMPED = damped
    module = f"tests.solvers.reference_constraints{'_damped' if damped else ''}"

    @xsim.kernel(module=module)
    def distance(entries: Vec4s, indices: Ints2, slot: Ints2, rest: Scalars, compliance: Scalars,
                 damping: Scalars, lam: Scalars, start: Vec4s, inv_h: xsim.float64, relaxation: xsim.float64,
                 lam_out: Scalars, delta: Vec3s2):
        c = xsim.tid()
        i = indices[c, 0]
        j = indices[c, 1]
        ei = entries[2 * c]
        ej = entries[2 * c + 1]
        wi = ei[3]
        wj = ej[3]
        d = V3(ei[0] - ej[0], ei[1] - ej[1], ei[2] - ej[2])
        alpha = compliance[c] * inv_h * inv_h
        gamma = compliance[c] * damping[c] * inv_h
        lc = lam[c]
        dl = lc - lc
        di = d - d
        dj = d - d
        len2 = xsim.dot(d, d)
        if len2 > 0.0 and wi + wj + alpha > 0.0:
            length = xsim.sqrt(len2)
            n = d / length
            num = rest[c] - length - alpha * lc
            if DAMPED:
                xi = V3(ei[0], ei[1], ei[2])
                xj = V3(ej[0], ej[1], ej[2])
                si = start[2 * c]
                sj = start[2 * c + 1]
                num = num - gamma * xsim.dot(n, xi - V3(si[0], si[1], si[2]) - xj + V3(sj[0], sj[1], sj[2]))
            dl = num * (relaxation / ((1.0 + gamma) * (wi + wj) + alpha))
            di = n * (wi * dl)
            dj = n * (-wj * dl)
        lam_out[c] = lc + dl
        delta[i, slot[c, 0]] = di
        delta[j, slot[c, 1]] = dj

    @xsim.kernel(module=module)
    def bending(entries: Vec4s, indices: Ints2, slot: Ints2, weights: Vec4s, compliance: Scalars,
                damping: Scalars, lam: Vec3s, start: Vec4s, inv_h: xsim.float64, relaxation: xsim.float64,
                lam_out: Vec3s, delta: Vec3s2):
        c = xsim.tid()
        i0 = indices[c, 0]
        i1 = indices[c, 1]
        i2 = indices[c, 2]
        i3 = indices[c, 3]
        k = weights[c]
        e0 = entries[4 * c]
        e1 = entries[4 * c + 1]
        e2 = entries[4 * c + 2]
        e3 = entries[4 * c + 3]
        w0 = e0[3]
        w1 = e1[3]
        w2 = e2[3]
        w3 = e3[3]
        sum4 = e0 * k[0] + e1 * k[1] + e2 * k[2] + e3 * k[3]
        cv = V3(sum4[0], sum4[1], sum4[2])
        alpha = compliance[c] * inv_h * inv_h
        gamma = compliance[c] * damping[c] * inv_h
        lc = lam[c]
        if DAMPED:
            s4 = start[4 * c] * k[0] + start[4 * c + 1] * k[1] + start[4 * c + 2] * k[2] + start[4 * c + 3] * k[3]
            cv = cv + (cv - V3(s4[0], s4[1], s4[2])) * gamma
        denom = (k[0] * k[0] * w0 + k[1] * k[1] * w1 + k[2] * k[2] * w2 + k[3] * k[3] * w3) * (1.0 + gamma) + alpha
        dl = lc - lc
        if denom > 0.0:
            dl = (cv + lc * alpha) * (-relaxation / denom)
        lam_out[c] = lc + dl
        delta[i0, slot[c, 0]] = dl * (k[0] * w0)
        delta[i1, slot[c, 1]] = dl * (k[1] * w1)
        delta[i2, slot[c, 2]] = dl * (k[2] * w2)
        delta[i3, slot[c, 3]] = dl * (k[3] * w3)

    return distance, bending


REFERENCE = {damped: reference_kernels(damped) for damped in (False, True)}
SOLVER = specialized(particle_kernels.__name__, xsim.float64)
N_PARTICLES, COUNT = 12, 40


def problem(rng, arity: int):
    """Random constraints of ``arity`` over a few particles: each end its own slot of its particle's row.
    Some inverse masses are zero (pinned) and one constraint is degenerate (coincident ends)."""
    idx = np.array([rng.choice(N_PARTICLES, arity, replace=False) for _ in range(COUNT)])
    slot = np.zeros_like(idx)
    fill = np.zeros(N_PARTICLES, dtype=int)
    for c in range(COUNT):
        for m in range(arity):
            slot[c, m] = fill[idx[c, m]]
            fill[idx[c, m]] += 1
    x = rng.normal(size=(N_PARTICLES, 3))
    w = np.where(rng.random(N_PARTICLES) < 0.2, 0.0, rng.uniform(0.5, 3.0, N_PARTICLES))
    e = np.concatenate([x[idx], w[idx][..., None]], axis=-1).reshape(-1, 4)
    e[1, :3] = e[0, :3]  # constraint 0's first two ends coincide: the degenerate branch
    # the entries at the substep start: positions moved a little, the same inverse masses
    start = e.copy()
    start[:, :3] += rng.normal(size=(len(e), 3)) * 1e-2
    return idx, slot, e, start, fill.max()


def gradients(kernel, args, seeds, dim):
    """Each argument's gradient (None for those without one) after one taped launch seeded with ``seeds``."""
    tape = xsim.Tape()
    with tape:
        xsim.launch(kernel, dim, inputs=args[:-2], outputs=args[-2:])
    tape.backward(grads=dict(zip(args[-2:], seeds)))
    return [a.grad.numpy().copy() if isinstance(a, xsim.array) and a.grad is not None else None for a in args]


def compare(kernel, reference, make_args, seeds, dim, damped: bool, flags=()):
    """``flags``: the solver kernel's bools after ``damped``, which the reference does not take."""
    args = make_args()
    got = gradients(kernel, args[:-2] + [damped, *flags] + args[-2:], seeds, dim)
    del got[-3 - len(flags):-2]  # the solver kernel's ``damped`` flag, which the reference compiles in
    want = gradients(reference, make_args(), seeds, dim)
    for g, w in zip(got, want):
        if w is not None:
            np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-12 * max(1.0, np.abs(w).max()))
    return got


@pytest.mark.parametrize("damped", [False, True])
def test_the_distance_update_s_chain_rule_matches_the_generated_adjoint(damped):
    rng = np.random.default_rng(11)
    idx, slot, e, start, width = problem(rng, 2)
    rest, comp, damp = rng.uniform(0.1, 2.0, COUNT), rng.uniform(0.0, 1e-2, COUNT), rng.uniform(0.0, 50.0, COUNT)
    lam = rng.normal(size=COUNT) * 1e-2
    seeds = [rng.normal(size=COUNT), rng.normal(size=(N_PARTICLES, width, 3))]

    def make_args():
        f = lambda a, t=xsim.float64: xsim.array(a, dtype=t, requires_grad=True)
        return [f(e, V4), xsim.array(idx.astype(np.int32), dtype=int), xsim.array(slot.astype(np.int32), dtype=int),
                f(rest), f(comp), f(damp if damped else np.zeros(COUNT)), f(lam), f(start, V4), 60.0, 1.3,
                f(np.zeros(COUNT)), xsim.zeros((N_PARTICLES, width), dtype=V3, requires_grad=True)]

    compare(SOLVER.solve_distance, REFERENCE[damped][0], make_args, seeds, COUNT, damped)


@pytest.mark.parametrize("damped", [False, True])
def test_the_bending_update_s_chain_rule_matches_the_generated_adjoint(damped):
    """With ``weights_grad`` every gradient matches; without it the update's part of the weights' gradient
    is left out (the solver passes False only when the weights do not require grad) and the others match."""
    rng = np.random.default_rng(12)
    idx, slot, e, start, width = problem(rng, 4)
    weights, comp, damp = rng.normal(size=(COUNT, 4)), rng.uniform(0.0, 1.0, COUNT), rng.uniform(0.0, 5.0, COUNT)
    comp[3] = 0.0
    weights[3] = 0.0  # denominator 0: no update
    lam = rng.normal(size=(COUNT, 3)) * 1e-2
    seeds = [rng.normal(size=(COUNT, 3)), rng.normal(size=(N_PARTICLES, width, 3))]

    def make_args():
        f = lambda a, t=xsim.float64: xsim.array(a, dtype=t, requires_grad=True)
        return [f(e, V4), xsim.array(idx.astype(np.int32), dtype=int), xsim.array(slot.astype(np.int32), dtype=int),
                f(weights, V4), f(comp), f(damp if damped else np.zeros(COUNT)), f(lam, V3), f(start, V4), 60.0, 1.3,
                f(np.zeros((COUNT, 3)), V3), xsim.zeros((N_PARTICLES, width), dtype=V3, requires_grad=True)]

    compare(SOLVER.solve_bending, REFERENCE[damped][1], make_args, seeds, COUNT, damped, flags=(True,))
    args = make_args()
    got = gradients(SOLVER.solve_bending, args[:-2] + [damped, False] + args[-2:], seeds, COUNT)
    want = gradients(REFERENCE[damped][1], make_args(), seeds, COUNT)
    assert not np.allclose(got[3], want[3])  # the weights' gradient: the update's part not computed
    for g, w in zip(got[:3] + got[4:-4] + got[-2:], want[:3] + want[4:-2] + want[-2:]):
        if w is not None:
            np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-12 * max(1.0, np.abs(w).max()))
