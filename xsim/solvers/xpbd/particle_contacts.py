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

import xsim
from xsim.collision.narrow_phase import ShapeArrays
from xsim.collision.surfaces import shape_rotation, surface_contact
from xsim.sim.generic import Float, Floats, Ints, Transforms, Vec3, Vec3s, Vec8s
from xsim.sim.shapes import (
    SHAPE_BOX,
    SHAPE_CAPSULE,
    SHAPE_CONE,
    SHAPE_CONVEX_MESH,
    SHAPE_CYLINDER,
    SHAPE_ELLIPSOID,
    SHAPE_MESH,
    SHAPE_PLANE,
    SHAPE_SPHERE,
)

from .bundles import BodyArrays, BodyMotion, MeshArrays, ParticleArrays, ParticleSubstep
from .kernels import (
    bounce_impulse,
    closest_point_on_triangle,
    push_out,
    reflect,
    worlds_meet,
)
from .rigid_kernels import (
    apply_impulse,
    apply_positional,
    generalized_inv_mass,
    split_mass,
    split_qd,
    world_pose,
)

STATIC_SHAPES, BODY_SHAPES = 1, 2  # the ``passes`` of the contact kernels (3: both)


@xsim.func
def shape_contact(kind: int, xi, sx, size, r):
    """Contact of a particle of radius ``r`` at ``xi`` with a plane, sphere, box or capsule of world
    frame ``sx`` (a body's shape: its pose times the shape's frame): (world outward normal, depth).
    The frame's rotation is its quaternion normalized (``shape_rotation``)."""
    q = shape_rotation(sx)
    n, pen = surface_contact(kind, xsim.quat_rotate_inv(q, xi - sx.p), size, r)
    return xsim.quat_rotate(q, n), pen


@xsim.func
def has_surface(kind: int):
    """Whether a shape of this kind has a surface that ``surface_contact`` measures (meshes and convex
    hulls offer points only)."""
    return kind != SHAPE_MESH and kind != SHAPE_CONVEX_MESH


@xsim.func
def meets_body(kind: int, b: int):
    """Whether particles meet a shape of this kind on body ``b`` (its primitives: not meshes or hulls)."""
    return b >= 0 and (kind == SHAPE_SPHERE or kind == SHAPE_BOX or kind == SHAPE_CAPSULE or kind == SHAPE_CYLINDER
                       or kind == SHAPE_CONE or kind == SHAPE_ELLIPSOID)


@xsim.func
def mesh_contact(xi, r, tri: int, mesh: MeshArrays, shape_xform: Transforms):
    """Contact of a particle of radius ``r`` at ``xi`` with static mesh triangle ``tri``: (world normal
    out of the front of the face, penetration depth, shape index). Behind the face counts as inside."""
    m = mesh.shape[tri]
    sx = shape_xform[m]
    q = shape_rotation(sx)
    a = xsim.quat_rotate(q, mesh.vertices[mesh.indices[tri, 0]]) + sx.p
    b = xsim.quat_rotate(q, mesh.vertices[mesh.indices[tri, 1]]) + sx.p
    cc = xsim.quat_rotate(q, mesh.vertices[mesh.indices[tri, 2]]) + sx.p
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
def find_mesh_contacts(x: Vec3s, x_pred: Vec3s, particles: ParticleArrays, shapes: ShapeArrays, mesh: MeshArrays,
                       mesh_tri: Ints):
    """Contact detection for static meshes (once per substep, not differentiated): the triangle of the
    particle's world closest to each predicted position within its reach, or -1."""
    i = xsim.tid()
    p = x_pred[i]
    reach = particles.radius[i] * 2.0 + xsim.length(p - x[i])
    best = reach * reach
    found = -1
    for tri in range(mesh.indices.shape[0]):
        m = mesh.shape[tri]
        if not worlds_meet(particles.world[i], shapes.world[m]):
            continue
        sx = shapes.xform[m]
        q = shape_rotation(sx)
        a = xsim.quat_rotate(q, mesh.vertices[mesh.indices[tri, 0]]) + sx.p
        b = xsim.quat_rotate(q, mesh.vertices[mesh.indices[tri, 1]]) + sx.p
        c = xsim.quat_rotate(q, mesh.vertices[mesh.indices[tri, 2]]) + sx.p
        d = p - closest_point_on_triangle(p, a, b, c)
        dist2 = xsim.dot(d, d)
        if dist2 < best:
            best = dist2
            found = tri
    mesh_tri[i] = found


@xsim.kernel(enable_backward=False)
def count_particle_contacts(x: Vec3s, particles: ParticleArrays, Xc: Transforms, X0: Transforms, bodies: BodyArrays,
                            shapes: ShapeArrays, slack: Float, split: Floats):
    """Add one to ``split`` of each dynamic body per particle ``x[tid]`` that touches one of its
    spheres, boxes or capsules at the poses ``Xc`` (displacements from ``X0``, ``world_pose``; depth above ``-slack`` times its radius): the
    body's number of particle constraints (mass splitting) in ``collide_particle_shapes`` (slack 0)
    or ``bounce_particle_shapes`` (slack 0.001), found with their test."""
    i = xsim.tid()
    xi = x[i]
    r = particles.radius[i]
    if particles.inv_mass[i] > 0.0:
        for s in range(shapes.type.shape[0]):
            b = shapes.body[s]
            kind = shapes.type[s]
            wb = slack - slack
            if b >= 0:
                wb = bodies.inv_mass[b]
            if wb > 0.0 and meets_body(kind, b) and worlds_meet(particles.world[i], shapes.world[s]):
                n, pen = shape_contact(kind, xi, world_pose(b, Xc, X0) * shapes.xform[s], shapes.size[s], r)
                if pen > -slack * r and xsim.dot(n, n) > 0.0:
                    xsim.atomic_add(split, b, 1.0)


@xsim.kernel
def collide_particle_shapes(x: Vec3s, particles: ParticleArrays, shapes: ShapeArrays, mesh: MeshArrays,
                            substep: ParticleSubstep, motion: BodyMotion, bodies: BodyArrays, passes: int,
                            x_out: Vec3s, delta: Vec8s):
    """Project each dynamic particle out of the shapes of its world (see the module docstring for the
    order), with friction since the substep start ``substep.x``. Static shapes take the whole correction.
    A body shape at the body's current pose ``motion.pose`` shares the depth between the particle's inverse
    mass and the body's generalized inverse mass at the contact point (the body's mass split by
    ``motion.split``, ``count_particle_contacts``), then friction acts against the motion of the body's
    surface since the substep start (``motion.pose_start``: cancel the relative tangential displacement inside the cone
    mu * depth, else shorten it by mu * depth); the body's correction goes to ``delta`` with a count of
    one, so the mean of its corrections applies every contact's impulse in full. ``passes``: which shapes
    (``STATIC_SHAPES``, ``BODY_SHAPES`` or both)."""
    i = xsim.tid()
    xi = x[i]
    wp = particles.inv_mass[i]
    if wp > 0.0 and passes % 2 == STATIC_SHAPES:
        x0 = substep.x[i]
        r = particles.radius[i]
        pw = particles.world[i]
        for s in range(shapes.type.shape[0]):
            if shapes.body[s] < 0 and shapes.type[s] == SHAPE_PLANE and worlds_meet(pw, shapes.world[s]):
                n, pen = shape_contact(SHAPE_PLANE, xi, shapes.xform[s], shapes.size[s], r)
                xi = push_out(xi, x0, n, pen, shapes.mu[s])
        for s in range(shapes.type.shape[0]):
            kind = shapes.type[s]
            if shapes.body[s] < 0 and has_surface(kind) and kind != SHAPE_PLANE and worlds_meet(pw, shapes.world[s]):
                n, pen = shape_contact(kind, xi, shapes.xform[s], shapes.size[s], r)
                xi = push_out(xi, x0, n, pen, shapes.mu[s])
        tri = substep.mesh_tri[i]
        if tri >= 0:
            n, pen, m = mesh_contact(xi, r, tri, mesh, shapes.xform)
            xi = push_out(xi, x0, n, pen, shapes.mu[m])
    if wp > 0.0 and passes >= BODY_SHAPES:
        x0 = substep.x[i]
        r = particles.radius[i]
        pw = particles.world[i]
        for s in range(shapes.type.shape[0]):
            b = shapes.body[s]
            kind = shapes.type[s]
            if meets_body(kind, b) and worlds_meet(pw, shapes.world[s]):
                pose = world_pose(b, motion.pose, motion.start)
                n, pen = shape_contact(kind, xi, pose * shapes.xform[s], shapes.size[s], r)
                if pen > 0.0:
                    imb, iib = split_mass(b, bodies.inv_mass[b], bodies.inv_inertia[b], motion.split)
                    arm = xi - n * (r - pen) - pose.p  # the body's surface point under the particle
                    wb = generalized_inv_mass(pose.q, imb, iib, arm, n)
                    dlam = pen / (wp + wb)
                    xi = xi + n * (wp * dlam)
                    xb, qb = apply_positional(pose.p, pose.q, imb, iib, arm, n * (-dlam))
                    # friction: the particle's motion since the substep start relative to the body's
                    # surface point (carried from its start pose)
                    local = xsim.quat_rotate_inv(pose.q, arm)
                    prev = motion.pose_start[b]
                    moved = (motion.pose[b].p - prev.p) + arm - xsim.quat_rotate(prev.q, local)
                    d = xi - x0 - moved
                    dt = d - n * xsim.dot(d, n)
                    lt2 = xsim.dot(dt, dt)
                    if lt2 > 0.0:
                        lt = xsim.sqrt(lt2)
                        t = dt / lt
                        c = xsim.min(lt, shapes.mu[s] * pen)
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
def bounce_particle_shapes(x: Vec3s, v: Vec3s, particles: ParticleArrays, shapes: ShapeArrays, mesh: MeshArrays,
                           substep: ParticleSubstep, motion: BodyMotion, bodies: BodyArrays, gravity: Vec3,
                           passes: int, v_out: Vec3s, x_out: Vec3s, delta: Vec8s):
    """Velocity pass of the particles' contacts at the end of a substep (``bounce_impulse``): each shape
    of its world the particle touches at its final position ``x`` (within 0.1% of its radius), with the
    pre-solve velocity v_start + g h (``substep.v``, ``substep.h``), in the order of the module docstring; a
    particle that bounces off a static shape ends where ``reflect`` puts it (shapes after a plane see it
    there). A body shape's velocity is that of its surface point at ``motion.pose`` and ``motion.qd``
    (pre-solve: ``motion.qd_pre``), the body's mass split by ``motion.split``
    (its number of touching particles), its velocity change into ``delta`` (dv 0..2, dw 3..5) with a
    count of one per touching contact, whether it bounces or not, as in the position pass. ``passes``:
    which shapes (``STATIC_SHAPES``, ``BODY_SHAPES`` or both)."""
    i = xsim.tid()
    vi = v[i]
    wp = particles.inv_mass[i]
    xi = x[i]
    x_end = xi
    r = particles.radius[i]
    pw = particles.world[i]
    h = substep.h
    bounce_speed = substep.bounce_speed
    v_pre = substep.v[i] + gravity * h
    if wp > 0.0 and passes % 2 == STATIC_SHAPES:
        tol = r * 0.001
        for s in range(shapes.type.shape[0]):
            if shapes.body[s] < 0 and shapes.type[s] == SHAPE_PLANE and worlds_meet(pw, shapes.world[s]):
                sx = shapes.xform[s]
                n, pen = shape_contact(SHAPE_PLANE, xi, sx, shapes.size[s], r)
                vi, xi = bounce_static(vi, xi, xi, n, pen, tol, v_pre, wp, shapes.restitution[s], shapes.mu[s],
                                       bounce_speed, sx.q, substep.x[i], substep.v[i], gravity, h)
        x_end = xi
        for s in range(shapes.type.shape[0]):
            kind = shapes.type[s]
            if shapes.body[s] < 0 and has_surface(kind) and kind != SHAPE_PLANE and worlds_meet(pw, shapes.world[s]):
                sx = shapes.xform[s]
                n, pen = shape_contact(kind, xi, sx, shapes.size[s], r)
                vi, x_end = bounce_static(vi, x_end, xi, n, pen, tol, v_pre, wp, shapes.restitution[s], shapes.mu[s],
                                          bounce_speed, sx.q, substep.x[i], substep.v[i], gravity, h)
        tri = substep.mesh_tri[i]
        if tri >= 0:
            n, pen, m = mesh_contact(xi, r, tri, mesh, shapes.xform)
            vi, x_end = bounce_static(vi, x_end, xi, n, pen, tol, v_pre, wp, shapes.restitution[m], shapes.mu[m],
                                      bounce_speed, shapes.xform[m].q, substep.x[i], substep.v[i], gravity, h)
    if wp > 0.0 and passes >= BODY_SHAPES:
        for s in range(shapes.type.shape[0]):
            b = shapes.body[s]
            kind = shapes.type[s]
            if meets_body(kind, b) and worlds_meet(pw, shapes.world[s]):
                pose = world_pose(b, motion.pose, motion.start)
                n, pen = shape_contact(kind, x_end, pose * shapes.xform[s], shapes.size[s], r)
                if pen > -0.001 * r and xsim.dot(n, n) > 0.0:
                    imb, iib = split_mass(b, bodies.inv_mass[b], bodies.inv_inertia[b], motion.split)
                    arm = x_end - n * (r - pen) - pose.p
                    vb, wb = split_qd(motion.qd[b], x_end)
                    vb0, wb0 = split_qd(motion.qd_pre[b], x_end)
                    p = bounce_impulse(vi - vb - xsim.cross(wb, arm), v_pre - vb0 - xsim.cross(wb0, arm), n,
                                       shapes.restitution[s], shapes.mu[s], bounce_speed, wp, pose.q, imb, iib, arm)
                    vi = vi + p * wp
                    vb1, wb1 = apply_impulse(vb, wb, pose.q, imb, iib, arm, -p)
                    if imb > 0.0:
                        dv = vb1 - vb
                        dw = wb1 - wb
                        xsim.atomic_add(delta, b, xsim.vector(dv[0], dv[1], dv[2], dw[0], dw[1], dw[2], 0.0, 1.0))
    v_out[i] = vi
    x_out[i] = x_end
