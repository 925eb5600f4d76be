"""Contacts of particles with shapes: one path for every shape, static (body -1: the ground and other
planes, colliders, static meshes) and on bodies (``xsim.sim.rigid``). Module-level kernels, generic
over the scalar type (float32 or float64, bound at launch).

A particle is a sphere of its radius; a shape's surface gives the contact normal and depth
(``kernels.surface_contact``, a plane's normal being its frame's z). Each substep, per iteration,
``collide_particle_shapes`` projects every dynamic particle out of the shapes of its world, with
position-level Coulomb friction, in a fixed order: static planes, the other static primitives,
the static mesh triangle found for it this substep (``find_mesh_contacts``), then the bodies'
spheres, boxes and capsules. A static shape takes the whole correction (``push_out``); a body
shares it with the particle by their (generalized, mass-split) inverse masses and receives its part
in an accumulator, as described in ``rigid_solver.py``. With bodies the kernels run twice, static
shapes then body shapes (``passes``), since a body's mass split counts the particles touching it
after the static contacts (``count_particle_contacts``). After the substep ``bounce_particle_shapes``
runs the velocity pass (restitution and friction, ``bounce_impulse``) over the same shapes in the
same order, for every shape whatever its restitution (a particle landing with restitution 0 leaves
the substep with zero normal velocity and Coulomb's tangential one, on a plane as on a box). A shape
frame's rotation is its quaternion normalized (``shape_rotation``). Body meshes and planes on bodies
do not meet particles.
"""

from typing import Any

import xsim
from xsim.sim.generic import Ints, Ints2
from xsim.sim.shapes import SHAPE_BOX, SHAPE_CAPSULE, SHAPE_MESH, SHAPE_PLANE, SHAPE_SPHERE

from .kernels import (
    bounce_impulse,
    closest_point_on_triangle,
    push_out,
    reflect,
    surface_contact,
    worlds_meet,
)
from .rigid_kernels import apply_impulse, apply_positional, generalized_inv_mass, split_mass, split_qd

STATIC_SHAPES, BODY_SHAPES = 1, 2  # the ``passes`` of the contact kernels (3: both)
Arr = xsim.array(dtype=Any)


@xsim.func
def shape_rotation(sx):
    """The rotation of shape frame ``sx``: its quaternion normalized. The rotation formulas assume a
    unit quaternion; with a scaled one a push-out along the normal no longer resolves the depth the
    next iteration measures, so the rollout had a kink along the scale (its gradient there disagreed
    with finite differences). Normalized, a frame's scale does nothing and its gradient is zero."""
    return xsim.normalize(sx.q)


@xsim.func
def shape_contact(kind: int, xi, sx, size, r):
    """Contact of a particle of radius ``r`` at ``xi`` with a plane, sphere, box or capsule of world
    frame ``sx`` (a body's shape: its pose times the shape's frame): (world outward normal, depth).
    The frame's rotation is its quaternion normalized (``shape_rotation``)."""
    q = shape_rotation(sx)
    n, pen = surface_contact(kind, xsim.quat_rotate_inv(q, xi - sx.p), size, r)
    return xsim.quat_rotate(q, n), pen


@xsim.func
def meets_body(kind: int, b: int):
    """Whether particles meet a shape of this kind on body ``b`` (its spheres, boxes and capsules)."""
    return b >= 0 and (kind == SHAPE_SPHERE or kind == SHAPE_BOX or kind == SHAPE_CAPSULE)


@xsim.func
def mesh_contact(xi, r, tri: int, mesh_indices, mesh_vertices, mesh_shape, shape_xform):
    """Contact of a particle of radius ``r`` at ``xi`` with static mesh triangle ``tri``: (world normal
    out of the front of the face, penetration depth, shape index). Behind the face counts as inside."""
    m = mesh_shape[tri]
    sx = shape_xform[m]
    q = shape_rotation(sx)
    a = xsim.quat_rotate(q, mesh_vertices[mesh_indices[tri, 0]]) + sx.p
    b = xsim.quat_rotate(q, mesh_vertices[mesh_indices[tri, 1]]) + sx.p
    cc = xsim.quat_rotate(q, mesh_vertices[mesh_indices[tri, 2]]) + sx.p
    face = xsim.cross(b - a, cc - a)
    d = xi - closest_point_on_triangle(xi, a, b, cc)
    dist2 = xsim.dot(d, d)
    n = xsim.normalize(face)
    pen = r
    if dist2 > 0.0:
        dist = xsim.sqrt(dist2)
        side = xsim.sign(xsim.dot(d, face))
        if side == 0.0:
            side = 1.0
        n = d * (side / dist)
        pen = r - side * dist
    return n, pen, m


@xsim.kernel(enable_backward=False)
def find_mesh_contacts(x: Arr, x_pred: Arr, radius: Arr, mesh_indices: Ints2, mesh_vertices: Arr, mesh_shape: Ints,
                       shape_xform: Arr, particle_world: Ints, shape_world: Ints, mesh_tri: Ints):
    """Contact detection for static meshes (once per substep, not differentiated): the triangle of the
    particle's world closest to each predicted position within its reach, or -1."""
    i = xsim.tid()
    p = x_pred[i]
    reach = radius[i] * 2.0 + xsim.length(p - x[i])
    best = reach * reach
    found = -1
    for tri in range(mesh_indices.shape[0]):
        m = mesh_shape[tri]
        if not worlds_meet(particle_world[i], shape_world[m]):
            continue
        sx = shape_xform[m]
        q = shape_rotation(sx)
        a = xsim.quat_rotate(q, mesh_vertices[mesh_indices[tri, 0]]) + sx.p
        b = xsim.quat_rotate(q, mesh_vertices[mesh_indices[tri, 1]]) + sx.p
        c = xsim.quat_rotate(q, mesh_vertices[mesh_indices[tri, 2]]) + sx.p
        d = p - closest_point_on_triangle(p, a, b, c)
        dist2 = xsim.dot(d, d)
        if dist2 < best:
            best = dist2
            found = tri
    mesh_tri[i] = found


@xsim.kernel(enable_backward=False)
def count_particle_contacts(x: Arr, inv_mass: Arr, radius: Arr, Xc: Arr, body_inv_mass: Arr, shape_body: Ints,
                            shape_type: Ints, shape_xform: Arr, shape_size: Arr, particle_world: Ints,
                            shape_world: Ints, num_shapes: int, slack: xsim.Float, split: Arr):
    """Add one to ``split`` of each dynamic body per particle ``x[tid]`` that touches one of its
    spheres, boxes or capsules at the poses ``Xc`` (depth above ``-slack`` times its radius): the
    body's number of particle constraints (mass splitting) in ``collide_particle_shapes`` (slack 0)
    or ``bounce_particle_shapes`` (slack 0.001), found with their test."""
    i = xsim.tid()
    xi = x[i]
    if inv_mass[i] > 0.0:
        for s in range(num_shapes):
            b = shape_body[s]
            kind = shape_type[s]
            wb = slack - slack
            if b >= 0:
                wb = body_inv_mass[b]
            if wb > 0.0 and meets_body(kind, b) and worlds_meet(particle_world[i], shape_world[s]):
                n, pen = shape_contact(kind, xi, Xc[b] * shape_xform[s], shape_size[s], radius[i])
                if pen > -slack * radius[i] and xsim.dot(n, n) > 0.0:
                    xsim.atomic_add(split, b, 1.0)


@xsim.kernel
def collide_particle_shapes(x: Arr, x_start: Arr, inv_mass: Arr, radius: Arr, particle_world: Ints, num_shapes: int,
                            shape_body: Ints, shape_type: Ints, shape_xform: Arr, shape_size: Arr, shape_mu: Arr,
                            shape_world: Ints, mesh_tri: Ints, mesh_indices: Ints2, mesh_vertices: Arr,
                            mesh_shape: Ints, Xc: Arr, Xc_prev: Arr, body_inv_mass: Arr, body_inv_inertia: Arr,
                            split: Arr, passes: int, x_out: Arr, delta: Arr):
    """Project each dynamic particle out of the shapes of its world (see the module docstring for the
    order), with friction since the substep start ``x_start``. Static shapes take the whole correction.
    A body shape at the body's current pose ``Xc`` shares the depth between the particle's inverse mass
    and the body's generalized inverse mass at the contact point (the body's mass split by ``split``,
    ``count_particle_contacts``), then friction acts against the motion of the body's surface since
    the substep start (``Xc_prev``: cancel the relative tangential displacement inside the cone
    mu * depth, else shorten it by mu * depth); the body's correction goes to ``delta`` with a count of
    one, so the mean of its corrections applies every contact's impulse in full. ``passes``: which shapes
    (``STATIC_SHAPES``, ``BODY_SHAPES`` or both)."""
    i = xsim.tid()
    xi = x[i]
    wp = inv_mass[i]
    if wp > 0.0 and passes % 2 == STATIC_SHAPES:
        x0 = x_start[i]
        r = radius[i]
        pw = particle_world[i]
        for s in range(num_shapes):
            if shape_body[s] < 0 and shape_type[s] == SHAPE_PLANE and worlds_meet(pw, shape_world[s]):
                n, pen = shape_contact(SHAPE_PLANE, xi, shape_xform[s], shape_size[s], r)
                xi = push_out(xi, x0, n, pen, shape_mu[s])
        for s in range(num_shapes):
            kind = shape_type[s]
            if shape_body[s] < 0 and kind != SHAPE_PLANE and kind != SHAPE_MESH and worlds_meet(pw, shape_world[s]):
                n, pen = shape_contact(kind, xi, shape_xform[s], shape_size[s], r)
                xi = push_out(xi, x0, n, pen, shape_mu[s])
        tri = mesh_tri[i]
        if tri >= 0:
            n, pen, m = mesh_contact(xi, r, tri, mesh_indices, mesh_vertices, mesh_shape, shape_xform)
            xi = push_out(xi, x0, n, pen, shape_mu[m])
    if wp > 0.0 and passes >= BODY_SHAPES:
        x0 = x_start[i]
        r = radius[i]
        pw = particle_world[i]
        for s in range(num_shapes):
            b = shape_body[s]
            kind = shape_type[s]
            if meets_body(kind, b) and worlds_meet(pw, shape_world[s]):
                pose = Xc[b]
                n, pen = shape_contact(kind, xi, pose * shape_xform[s], shape_size[s], r)
                if pen > 0.0:
                    imb, iib = split_mass(b, body_inv_mass[b], body_inv_inertia[b], split)
                    arm = xi - n * (r - pen) - pose.p  # the body's surface point under the particle
                    wb = generalized_inv_mass(pose.q, imb, iib, arm, n)
                    dlam = pen / (wp + wb)
                    xi = xi + n * (wp * dlam)
                    xb, qb = apply_positional(pose.p, pose.q, imb, iib, arm, n * (-dlam))
                    # friction: the particle's motion since the substep start relative to the body's
                    # surface point (carried from its start pose)
                    local = xsim.quat_rotate_inv(pose.q, arm)
                    prev = Xc_prev[b]
                    moved = (pose.p + arm) - (prev.p + xsim.quat_rotate(prev.q, local))
                    d = xi - x0 - moved
                    dt = d - n * xsim.dot(d, n)
                    lt2 = xsim.dot(dt, dt)
                    if lt2 > 0.0:
                        lt = xsim.sqrt(lt2)
                        t = dt / lt
                        c = xsim.min(lt, shape_mu[s] * pen)
                        wtb = generalized_inv_mass(pose.q, imb, iib, arm, t)
                        dlam_t = c / (wp + wtb)
                        xi = xi - t * (wp * dlam_t)
                        xb, qb = apply_positional(xb, qb, imb, iib, arm, t * dlam_t)
                    if wb > 0.0:
                        dx = xb - pose.p
                        dq = qb - pose.q
                        xsim.atomic_add(delta, b, xsim.vector(dx[0], dx[1], dx[2], dq[0], dq[1], dq[2], dq[3], 1.0))
    x_out[i] = xi


@xsim.func
def bounce_static(vi, x_end, xi, n, pen, tol, v_pre, wp, e, mu, bounce_speed, q, x_start, v_start, gravity, h):
    """The velocity pass of one static contact (normal ``n``, depth ``pen`` at ``xi``): (velocity,
    end position) after ``bounce_impulse`` and, if it bounced, ``reflect`` of ``x_end``. A static
    shape opposes no inverse mass (zero mass and inertia; ``q`` is any rotation)."""
    if pen > -tol and xsim.dot(n, n) > 0.0:
        w0 = wp - wp
        p = bounce_impulse(vi, v_pre, n, e, mu, bounce_speed, wp, q, w0, xsim.outer(n, n) * w0, n)
        if xsim.dot(p, p) > 0.0:
            return vi + p * wp, reflect(x_end, x_start, v_start, gravity, h, n, e)
    return vi, x_end


@xsim.kernel
def bounce_particle_shapes(x: Arr, v: Arr, v_start: Arr, inv_mass: Arr, radius: Arr, gravity: Any, h: xsim.Float,
                           bounce_speed: xsim.Float, particle_world: Ints, num_shapes: int, shape_body: Ints,
                           shape_type: Ints, shape_xform: Arr, shape_size: Arr, shape_mu: Arr, shape_restitution: Arr,
                           shape_world: Ints, mesh_tri: Ints, mesh_indices: Ints2, mesh_vertices: Arr, mesh_shape: Ints,
                           x_start: Arr, Xc: Arr, qd: Arr, qd_pre: Arr, body_inv_mass: Arr, body_inv_inertia: Arr,
                           split: Arr, passes: int, v_out: Arr, x_out: Arr, delta: Arr):
    """Velocity pass of the particles' contacts at the end of a substep (``bounce_impulse``): each shape
    of its world the particle touches at its final position ``x`` (within 0.1% of its radius), with the
    pre-solve velocity v_start + g h, in the order of the module docstring; a particle that bounces off a
    static shape ends where ``reflect`` puts it (shapes after a plane see it there). A body shape's
    velocity is that of its surface point (pre-solve: ``qd_pre``), the body's mass split by ``split``
    (its number of touching particles), its velocity change into ``delta`` (dv 0..2, dw 3..5) with a
    count of one per touching contact, whether it bounces or not, as in the position pass. ``passes``:
    which shapes (``STATIC_SHAPES``, ``BODY_SHAPES`` or both)."""
    i = xsim.tid()
    vi = v[i]
    wp = inv_mass[i]
    xi = x[i]
    x_end = xi
    r = radius[i]
    pw = particle_world[i]
    v_pre = v_start[i] + gravity * h
    if wp > 0.0 and passes % 2 == STATIC_SHAPES:
        tol = r * 0.001
        for s in range(num_shapes):
            if shape_body[s] < 0 and shape_type[s] == SHAPE_PLANE and worlds_meet(pw, shape_world[s]):
                sx = shape_xform[s]
                n, pen = shape_contact(SHAPE_PLANE, xi, sx, shape_size[s], r)
                vi, xi = bounce_static(vi, xi, xi, n, pen, tol, v_pre, wp, shape_restitution[s], shape_mu[s],
                                       bounce_speed, sx.q, x_start[i], v_start[i], gravity, h)
        x_end = xi
        for s in range(num_shapes):
            kind = shape_type[s]
            if shape_body[s] < 0 and kind != SHAPE_PLANE and kind != SHAPE_MESH and worlds_meet(pw, shape_world[s]):
                sx = shape_xform[s]
                n, pen = shape_contact(kind, xi, sx, shape_size[s], r)
                vi, x_end = bounce_static(vi, x_end, xi, n, pen, tol, v_pre, wp, shape_restitution[s], shape_mu[s],
                                          bounce_speed, sx.q, x_start[i], v_start[i], gravity, h)
        tri = mesh_tri[i]
        if tri >= 0:
            n, pen, m = mesh_contact(xi, r, tri, mesh_indices, mesh_vertices, mesh_shape, shape_xform)
            vi, x_end = bounce_static(vi, x_end, xi, n, pen, tol, v_pre, wp, shape_restitution[m], shape_mu[m],
                                      bounce_speed, shape_xform[m].q, x_start[i], v_start[i], gravity, h)
    if wp > 0.0 and passes >= BODY_SHAPES:
        for s in range(num_shapes):
            b = shape_body[s]
            kind = shape_type[s]
            if meets_body(kind, b) and worlds_meet(pw, shape_world[s]):
                pose = Xc[b]
                n, pen = shape_contact(kind, x_end, pose * shape_xform[s], shape_size[s], r)
                if pen > -0.001 * r and xsim.dot(n, n) > 0.0:
                    imb, iib = split_mass(b, body_inv_mass[b], body_inv_inertia[b], split)
                    arm = x_end - n * (r - pen) - pose.p
                    vb, wb = split_qd(qd[b], x_end)
                    vb0, wb0 = split_qd(qd_pre[b], x_end)
                    p = bounce_impulse(vi - vb - xsim.cross(wb, arm), v_pre - vb0 - xsim.cross(wb0, arm), n,
                                       shape_restitution[s], shape_mu[s], bounce_speed, wp, pose.q, imb, iib, arm)
                    vi = vi + p * wp
                    vb1, wb1 = apply_impulse(vb, wb, pose.q, imb, iib, arm, -p)
                    if imb > 0.0:
                        dv = vb1 - vb
                        dw = wb1 - wb
                        xsim.atomic_add(delta, b, xsim.vector(dv[0], dv[1], dv[2], dw[0], dw[1], dw[2], 0.0, 1.0))
    v_out[i] = vi
    x_out[i] = x_end
