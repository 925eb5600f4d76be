"""Tetrahedral elasticity for ``SolverXPBD``: the stable Neo-Hookean material of Macklin and Mueller
(2021, "A Constraint-based Formulation of Stable Neo-Hookean Materials") as two constraints per tet,
solved together in the Jacobi/mass-splitting pass of ``particle_constraints.py``.

Per tet with rest shape matrix Dm (columns x1 - x0, x2 - x0, x3 - x0 at rest), rest volume V and
deformation gradient F = Ds Dm^-1 (linear in the positions), the stable Neo-Hookean energy without its
log term, ``V (mu/2 tr(F^T F) + lam/2 (det F - g)^2)`` with ``g = 1 + mu / lam``, is two constraints:

- deviatoric: the 9 entries of ``F`` with compliance ``1 / (mu V)`` (energy ``V mu/2 |F|^2``, the same
  as Macklin and Mueller's scalar ``sqrt(tr(F^T F))``, whose square it is);
- hydrostatic: ``C_H = det F - g`` with compliance ``1 / (lam V)``.

At F = I the stress vanishes (the offset g balances the deviatoric pull) and, linearized, it is
``mu (H + H^T) + (lam - mu) tr H`` for F = I + H. To give the user's Lame parameters (mu_L, lam_L) in small
strain the kernel uses ``mu = mu_L`` and ``lam = lam_L + mu_L`` (always > 0 for -1 < nu < 1/2). The material
arrives as Young's modulus E [Pa] and Poisson's ratio nu per tet, so that gradients reach them directly:
``mu_L = E / (2 (1 + nu))``, ``lam_L = E nu / ((1 + nu)(1 - 2 nu))``.

Why this form, and the half step. Both constraints are far from zero at rest (their multipliers balance),
so the part of the element's Hessian that XPBD's Gauss-Newton step leaves out, ``multiplier x Hessian of C``,
is as large as the part it keeps. Written as the scalar sqrt(tr(F^T F)), the deviatoric step has no shear
stiffness at all, and the Jacobi iteration diverged from rest (x770 per step on a 2x2x6 block); as the
vector F it is linear (its Gauss-Newton step is exact). The hydrostatic term's left-out part,
``-mu Hessian(det F)`` at rest, still makes the step underestimate the shear stiffness by 2x: full steps
overshoot, and a stiff cantilever (E = 1e8 Pa, h = 1/1200 s) diverged in float64. Each tet therefore takes
``TET_STEP`` = 1/2 of its linearized step (times ``relaxation``), which the shear modes need and which
leaves the fixed point (the XPBD solution) unchanged. The 10 constraints are solved together (F's block is
one 3x3 matrix per row of F, det F's by its Schur complement), so a rest mesh stays exactly at rest.

Stability limit (measured, not cured). The rest multipliers' left-out curvature grows with the squared
Courant number ``(c h / l)^2`` (c = sqrt(mu / rho) the shear wave speed, h the substep, l a tet's edge): once
it passes the split masses, repeated iterations within a substep diverge. A lone 5 cm tet (rho = 1000, nu =
0.3) with 40 iterations per substep: stable at c h / l = 0.33, slowly gaining energy at 0.57, diverging at
0.82 and above (E = 1e8 Pa needs 200 substeps at 60 Hz); with 1 to 3 iterations per substep it stays bounded
at 3.3. So stiff, finely meshed bodies need substeps with c h / l below about 0.4 (or few iterations);
Jacobi's averaging does not change this (a free 2x1x1 block behaves as the lone tet). A formulation without
rest multipliers (co-rotated, C = F - R) would not have the limit, but is not the stable Neo-Hookean energy.

Damping ``k_damp`` [Pa s] is a viscous stress ``k_damp dF/dt``: XPBD's gamma = ``k_damp / (k h)`` for each
constraint of stiffness k (NVIDIA Newton's meaning of ``k_damp``).

Inverted tets (det F <= 0) need nothing special: both constraints and their gradients (F's, and the cofactor
matrix of F) are smooth through det F = 0, which is the point of the stable formulation; a singular system
gives no hydrostatic correction, never a NaN.

The backward pass is the generated adjoint of ``solve_tet_into_positions`` (``ParticleConstraints``).
"""

import xsim
from xsim import types as T
from xsim.sim.generic import Float, Floats, Ints, Ints2, Mat33s, Vec3s, Vec3s2, Vec4s

from .kernels import add_correction

Vec10s = xsim.array(dtype=T.vector(10, Float))
TET_STEP = 0.5
"""The fraction of its linearized step a tet takes (times the solver's ``relaxation``): see the module docstring."""


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
    # the coupled linear step of F's 9 constraints and det F's: F's block is one 3x3 matrix per row of F,
    # M = (1 + gamma_d) K + alpha_d I, det F's couples through cof K; eliminating F's multipliers leaves det F's
    # Schur complement alpha_h + (1 + gamma_h) alpha_d <cof K, cof P> (P = M^-1, since I - (1 + gamma_d) K P
    # = alpha_d P): written so, nothing cancels, where the textbook form lost 4 digits on a stiff beam (float32
    # diverged). The corrections are G b_k with G = dLambda + dl_h cof = (r_f + alpha_d dl_h cof) P.
    P = xsim.inverse(K * (1.0 + gamma_d) + type(B)(alpha_d, 0.0, 0.0, 0.0, alpha_d, 0.0, 0.0, 0.0, alpha_d))
    cofK = cof * K
    schur = alpha_h + (1.0 + gamma_h) * alpha_d * xsim.ddot(cofK, cof * P)
    dl_h = type(E)(0.0)
    if schur > 0.0:
        dl_h = (r_h - (1.0 + gamma_h) * xsim.ddot(cofK, r_f * P)) / schur
    step = relaxation * TET_STEP
    G = (r_f + cof * (alpha_d * dl_h)) * P
    dl_f = (G - cof * dl_h) * step
    G = G * step
    dl_h = dl_h * step
    dl = type(lc)(dl_f[0, 0], dl_f[0, 1], dl_f[0, 2], dl_f[1, 0], dl_f[1, 1], dl_f[1, 2], dl_f[2, 0], dl_f[2, 1],
                  dl_f[2, 2], dl_h)
    q0 = G * b0 * w0
    q1 = G * b1 * w1
    q2 = G * b2 * w2
    q3 = G * b3 * w3
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
