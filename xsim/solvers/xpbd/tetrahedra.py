"""Tetrahedral elasticity for ``SolverXPBD``: the stable Neo-Hookean material of Macklin and Mueller
(2021, "A Constraint-based Formulation of Stable Neo-Hookean Materials") as two constraints per tet,
solved together in the Jacobi/mass-splitting pass of ``particle_constraints.py``.

Per tet with rest shape matrix Dm (columns x1 - x0, x2 - x0, x3 - x0 at rest), rest volume V and
deformation gradient F = Ds Dm^-1:

- deviatoric ``C_D = sqrt(tr(F^T F))`` with compliance ``1 / (mu V)``: the energy ``V mu/2 tr(F^T F)``;
- hydrostatic ``C_H = det F - g`` with compliance ``1 / (lam V)`` and ``g = 1 + mu / lam``: the energy
  ``V lam/2 (det F - g)^2``.

Their sum is the stable Neo-Hookean energy (without the log term). At F = I its stress vanishes (the
offset g balances the deviatoric pull) and, linearized, its stress is ``mu (H + H^T) + (lam - mu) tr H``
for F = I + H. To give the user's Lame parameters (mu_L, lam_L) in small strain, the kernel uses
``mu = mu_L`` and ``lam = lam_L + mu_L`` (Macklin and Mueller's remark; always > 0 for -1 < nu < 1/2).
The material arrives as Young's modulus E [Pa] and Poisson's ratio nu per tet, so that gradients reach
them directly: ``mu_L = E / (2 (1 + nu))``, ``lam_L = E nu / ((1 + nu)(1 - 2 nu))``.

The two constraints share their particles and at rest have parallel gradients, so they are solved as
one 2x2 system per tet (the element's exact linearized XPBD step): a rest mesh stays at rest in one
iteration, where one-after-the-other updates fight each other until converged. Damping ``k_damp``
[Pa s] is a viscous stress ``k_damp dF/dt``: XPBD's gamma = ``k_damp / (k h)`` for each constraint of
stiffness k (NVIDIA Newton's meaning of ``k_damp``).

Inverted tets (det F <= 0) need nothing special: C_H and its gradient (the cofactor of F) stay smooth
through det F = 0, which is the point of the stable formulation; only a tet collapsed to a point
(C_D = 0) or a singular 2x2 system gives no correction, never a NaN.

The backward pass is the generated adjoint of ``solve_tet_into_positions`` (``ParticleConstraints``).
"""

import xsim
from xsim import types as T
from xsim.sim.generic import Float, Floats, Ints, Ints2, Mat33s, Vec3s, Vec3s2, Vec4s

from .kernels import add_correction

Vec10s = xsim.array(dtype=T.vector(10, Float))


@xsim.func
def tet_constraint(entries, c: int, zero, rest_inv, volume, youngs, poisson, damping, lam, start, inv_h, relaxation,
                   damped: bool):
    """Tet ``c``'s update (``solve_tet``; ``zero``: a zero vec3 of the precision), shared with its Tape stand-in:
    (multipliers (F's 9 row by row, then the hydrostatic one), their change, the corrections of the 4 vertices,
    their split inverse masses)."""
    e0 = entries[4 * c]
    e1 = entries[4 * c + 1]
    e2 = entries[4 * c + 2]
    e3 = entries[4 * c + 3]
    w0 = e0[3]
    w1 = e1[3]
    w2 = e2[3]
    w3 = e3[3]
    p0 = type(zero)(e0[0], e0[1], e0[2])
    p1 = type(zero)(e1[0], e1[1], e1[2])
    p2 = type(zero)(e2[0], e2[1], e2[2])
    p3 = type(zero)(e3[0], e3[1], e3[2])
    B = rest_inv[c]
    # F = sum_k x_k b_k^T with b_1..b_3 the rows of B and b_0 = -(b_1 + b_2 + b_3)
    b1 = type(zero)(B[0, 0], B[0, 1], B[0, 2])
    b2 = type(zero)(B[1, 0], B[1, 1], B[1, 2])
    b3 = type(zero)(B[2, 0], B[2, 1], B[2, 2])
    b0 = -(b1 + b2 + b3)
    F = xsim.outer(p1 - p0, b1) + xsim.outer(p2 - p0, b2) + xsim.outer(p3 - p0, b3)
    K = xsim.outer(b0, b0) * w0 + xsim.outer(b1, b1) * w1 + xsim.outer(b2, b2) * w2 + xsim.outer(b3, b3) * w3
    f0 = type(zero)(F[0, 0], F[1, 0], F[2, 0])
    f1 = type(zero)(F[0, 1], F[1, 1], F[2, 1])
    f2 = type(zero)(F[0, 2], F[1, 2], F[2, 2])
    c0 = xsim.cross(f1, f2)
    c1 = xsim.cross(f2, f0)
    c2 = xsim.cross(f0, f1)
    # the cofactor matrix dJ/dF, columns c0 c1 c2
    cof = type(B)(c0[0], c1[0], c2[0], c0[1], c1[1], c2[1], c0[2], c1[2], c2[2])
    E = youngs[c]
    nu = poisson[c]
    mu = E / (2.0 * (1.0 + nu))
    la = E * nu / ((1.0 + nu) * (1.0 - 2.0 * nu)) + mu
    vol = volume[c]
    alpha_d = inv_h * inv_h / (mu * vol)
    alpha_h = inv_h * inv_h / (la * vol)
    gamma_d = damping[c] * inv_h / mu
    gamma_h = damping[c] * inv_h / la
    lc = lam[c]
    lam_f = type(B)(lc[0], lc[1], lc[2], lc[3], lc[4], lc[5], lc[6], lc[7], lc[8])
    r_f = -(F + lam_f * alpha_d)
    r_h = -(xsim.dot(f0, c0) - (1.0 + mu / la) + alpha_h * lc[9])
    if damped:
        s0 = start[4 * c]
        s1 = start[4 * c + 1]
        s2 = start[4 * c + 2]
        s3 = start[4 * c + 3]
        m0 = p0 - type(zero)(s0[0], s0[1], s0[2])
        m1 = p1 - type(zero)(s1[0], s1[1], s1[2])
        m2 = p2 - type(zero)(s2[0], s2[1], s2[2])
        m3 = p3 - type(zero)(s3[0], s3[1], s3[2])
        # F's change since the substep start, and J's to first order
        dF = xsim.outer(m1 - m0, b1) + xsim.outer(m2 - m0, b2) + xsim.outer(m3 - m0, b3)
        r_f = r_f - dF * gamma_d
        r_h = r_h - gamma_h * xsim.ddot(cof, dF)
    # the coupled linear step of F's 9 constraints and J's: F's block is (1 + gamma_d) I x K + alpha_d, J's
    # couples through A = cof K; the Schur complement on J's multiplier
    P = xsim.inverse(K * (1.0 + gamma_d) + type(B)(alpha_d, 0.0, 0.0, 0.0, alpha_d, 0.0, 0.0, 0.0, alpha_d))
    A = cof * K
    AP = A * P
    s_hh = xsim.ddot(cof, A) * (1.0 + gamma_h) + alpha_h
    schur = s_hh - (1.0 + gamma_h) * (1.0 + gamma_d) * xsim.ddot(A, AP)
    dl_h = type(E)(0.0)
    if schur > 0.0:
        dl_h = (r_h - (1.0 + gamma_h) * xsim.ddot(r_f, AP)) * (relaxation / schur)
    dl_f = (r_f * P - AP * ((1.0 + gamma_d) * dl_h)) * relaxation
    dl = type(lc)(dl_f[0, 0], dl_f[0, 1], dl_f[0, 2], dl_f[1, 0], dl_f[1, 1], dl_f[1, 2], dl_f[2, 0], dl_f[2, 1],
                  dl_f[2, 2], dl_h)
    q0 = (dl_f * b0 + cof * b0 * dl_h) * w0
    q1 = (dl_f * b1 + cof * b1 * dl_h) * w1
    q2 = (dl_f * b2 + cof * b2 * dl_h) * w2
    q3 = (dl_f * b3 + cof * b3 * dl_h) * w3
    return lc, dl, q0, q1, q2, q3, w0, w1, w2, w3


@xsim.kernel
def solve_tet(entries: Vec4s, indices: Ints2, slot: Ints2, rest_inv: Mat33s, volume: Floats, youngs: Floats,
              poisson: Floats, damping: Floats, lam: Vec10s, start: Vec4s, inv_h: Float, relaxation: Float,
              damped: bool, lam_out: Vec10s, delta: Vec3s2):
    """Stable Neo-Hookean tets (the module docstring): one coupled update of both multipliers per tet."""
    c = xsim.tid()
    lc, dl, d0, d1, d2, d3, _w0, _w1, _w2, _w3 = tet_constraint(
        entries, c, delta.dtype(), rest_inv, volume, youngs, poisson, damping, lam, start, inv_h, relaxation, damped)
    lam_out[c] = lc + dl
    delta[indices[c, 0], slot[c, 0]] = d0
    delta[indices[c, 1], slot[c, 1]] = d1
    delta[indices[c, 2], slot[c, 2]] = d2
    delta[indices[c, 3], slot[c, 3]] = d3


@xsim.kernel
def solve_tet_into_positions(entries: Vec4s, indices: Ints2, rest_inv: Mat33s, volume: Floats, youngs: Floats,
                             poisson: Floats, damping: Floats, lam: Vec10s, start: Vec4s, inv_h: Float,
                             relaxation: Float, damped: bool, slot_count: Ints, lam_out: Vec10s, x_next: Vec3s):
    """``solve_tet`` followed by its share of ``apply_corrections``: its generated adjoint is the tets' backward
    pass (``ParticleConstraints.backward`` launches it with ``adjoint=True``)."""
    c = xsim.tid()
    lc, dl, d0, d1, d2, d3, w0, w1, w2, w3 = tet_constraint(
        entries, c, x_next.dtype(), rest_inv, volume, youngs, poisson, damping, lam, start, inv_h, relaxation, damped)
    lam_out[c] = lc + dl
    add_correction(x_next, indices[c, 0], d0, w0, slot_count)
    add_correction(x_next, indices[c, 1], d1, w1, slot_count)
    add_correction(x_next, indices[c, 2], d2, w2, slot_count)
    add_correction(x_next, indices[c, 3], d3, w3, slot_count)
