"""Rigid contacts of the XPBD solver: pair detection, the position pass (non-penetration and
friction within the cone) and the velocity pass (dynamic friction and restitution) of Mueller et al. 2020, sec. 3.5
and 3.6. Particles meet the bodies' shapes in ``particle_contacts.py``.

A contact is a *point with a radius* of one shape against the *surface* of another: sphere centres
(radius r), the two ends of capsule axes (r), slightly rounded box corners, cylinder and cone rim
points, cone apexes and mesh (hull) vertices (radius 0), and the support points of cylinder rims, cone
bases and ellipsoids (points that move with the surface they meet), against a plane, sphere, box,
capsule, cylinder, cone or ellipsoid (``xsim.sim.rigid.point_roles`` decides which side offers points;
the geometry is ``xsim.collision.surfaces``). Pairs of segments add *segment contacts* at the closest points
of the two lines, where those lie inside both segments (``xsim.collision.pairs``; elsewhere the
segments' end points are nearest, and their point contacts hold): box-box pairs one per pair of
edges (12 x 12, ``edge_contact_geometry``: two equal boxes stacked with one turned about z have no
corner over the other's face, and only the crossings of their edges hold them), box-capsule pairs
one per box edge against the capsule's axis, capsule pairs one between their axes
(``capsule_segment_geometry``). So capsules collide exactly with planes, spheres, capsules and boxes (boxes up
to their corner rounding). Each contact is one thread (Jacobi, see ``rigid_solver.py``). Known
gaps: primitives against a mesh's faces (only mesh vertices collide; mesh against mesh does not),
anything against a convex hull's faces (hulls offer their vertices only; hull against hull or mesh does
not collide), and edges of cylinders and cones crossing box edges or capsule axes (no segment contacts).
A shape frame's rotation is its quaternion normalized (``xsim.collision.surfaces.shape_rotation``), once per
step (``unit_shape_frames``): the kernels here read frames whose quaternions are unit.

Contact generation runs every step: the broad phase (``xsim/collision/broad_phase.py``, on the host) lists the
shape pairs that can touch during the step and every contact they offer, ``contact_depths`` measures
them and the solver keeps those within reach (a box on a box keeps a few of its 144 edge pairs), and the contact kernels run
over that list only (one small device-to-host copy per step). Then
every solve recomputes each
contact's geometry (normal, depth, contact points) from the current poses, so the gradient flows
through the geometry; the discrete choices -- which pairs are candidates, whether a point
penetrates, which box face is nearest, whether a segment contact counts, static versus dynamic
friction, whether restitution applies -- are branches whose outcome is a constant of the backward pass: the gradient is that of
the branch taken (exact while the contact set does not change, one-sided where it switches).
"""

import xsim
from xsim.collision.narrow_phase import ShapeArrays, pair_origin
from xsim.collision.pairs import (
    contact_roles,
    pair_contact_geometry,
)
from xsim.sim.generic import Float, Floats, Ints, Ints2, Transforms, Vec3s, Vec6s, Vec8s

from .bundles import BodyArrays, ContactArms, ContactArrays, ContactGeometry, Multipliers
from .rigid_kernels import (
    body_inv_mass_along,
    body_velocity,
    impulse_along,
    inv_mass_along,
    load_body,
    load_split_body,
    point_inv_mass,
    push_along,
    relative_point_velocity,
    rotate_by,
    world_inv_inertia,
)

# -------------------------------------------------------------------------------------------------
# geometry


@xsim.func
def contact_position_update(xa, qa, xa0, qa0, ima, iia, wia, la, xb, qb, xb0, qb0, imb, iib, wib, lb, n, pen, ca, cb,
                            slip, mu, lam, lam_t, lam_share):
    """One contact's position-pass update (Mueller et al. 2020, sec. 3.5) from its geometry (normal
    ``n`` from b to a, depth ``pen``, contact points ``ca`` on a and ``cb`` on b, which are ``la`` and ``lb``
    in the bodies' frames; inverse inertias ``ii*`` in the bodies' frames, ``wi*`` in world axes at the
    rotations ``q*``, ``world_inv_inertia``): resolve the depth with the generalized inverse masses, then
    static friction against the contact's tangential slip: the motion of its contact points, as points fixed
    in their bodies, since the substep start (poses ``*0``), measured at the current poses, plus ``slip``, what
    earlier substeps left of it (``contact_slip``). Coulomb's law on the substep's tangential multiplier
    (``lam_t`` of its earlier iterations plus this one): it cancels the slip while that needs at most mu
    times ``lam_share``, the contact's even share of its pair's normal multipliers after this pass
    (``solve_pair_positions``: under Jacobi every contact of a pair cancels the same motion, so each takes
    the same share of the pair's cone, and the pair's friction stays within mu times its normal load);
    where it needs more, the contact slides with that bound as its friction (kinetic friction, which the
    velocity pass then leaves out). Returns (xa, qa, xb, qb, normal multiplier increment, tangential
    multiplier increment, 1 where it touched and static friction held, else 0)."""
    dlam = pen - pen
    dlam_f = dlam
    held = 0
    if pen > 0.0:
        wa, ua = inv_mass_along(ima, wia, ca - xa, n)
        wb, ub = inv_mass_along(imb, wib, cb - xb, n)
        wsum = wa + wb
        if wsum > 0.0:
            dlam = pen / wsum
            # the contact points' motion since the substep start, as body-fixed points, at the current poses
            dp = (ca - xa0 - xsim.quat_rotate(qa0, la)) - (cb - xb0 - xsim.quat_rotate(qb0, lb)) + slip
            xa, qa = push_along(xa, qa, ima, n, ua, dlam)
            xb, qb = push_along(xb, qb, imb, n, ub, -dlam)
            dt = dp - n * xsim.dot(dp, n)
            lt2 = xsim.dot(dt, dt)
            held = 1
            if lt2 > 0.0:
                lt = xsim.sqrt(lt2)
                t = dt / lt
                # at the moved rotations, used once each: in the bodies' frames
                wta, uta = body_inv_mass_along(ima, iia, qa, la, t)
                wtb, utb = body_inv_mass_along(imb, iib, qb, lb, t)
                dlam_f = lt / (wta + wtb)
                bound = mu * lam_share - lam_t
                if dlam_f > bound:
                    dlam_f = xsim.max(bound, dlam_f - dlam_f)
                    held = 0
                xa, qa = push_along(xa, qa, ima, t, uta, -dlam_f)
                xb, qb = push_along(xb, qb, imb, t, utb, dlam_f)
            else:
                # no slip at all (a body set down at rest): no correction, but the one a slip would get is
                # linear in it, the tangent-plane solve with both points' 3x3 inverse masses, which the
                # gradient follows (along t / |t| it would be undefined here)
                ra = ca - xa
                rb = cb - xb
                k = point_inv_mass(ima, wia, ra) + point_inv_mass(imb, wib, rb)
                plane = xsim.diag(type(n)(1.0, 1.0, 1.0)) - xsim.outer(n, n)
                kt = plane * k * plane + xsim.outer(n, n)
                if xsim.determinant(kt) > 0.0:
                    p = xsim.inverse(kt) * dt
                    xa = xa - p * ima
                    qa = rotate_by(qa, wia * xsim.cross(ra, -p))
                    xb = xb + p * imb
                    qb = rotate_by(qb, wib * xsim.cross(rb, p))
    return xa, qa, xb, qb, dlam, dlam_f, held


@xsim.func
def contact_slip(xa, qa, xa0, qa0, ra, xb, qb, xb0, qb0, rb, n, slip, stuck: bool):
    """A contact's tangential slip at the end of a substep (m, from b to a, in the pair's order): the motion
    since the substep start (poses ``*0``) of its contact points as points fixed in their bodies (arms ``ra``,
    ``rb`` in the bodies' frames, normal ``n`` from b to a, from the last position pass), plus the ``slip``
    carried into the substep; zero where it did not touch in the substep. The next substep starts from it,
    and the next step where static friction held at the end of this one (``carried_slips``): static
    friction cancels the slip since the contact began to stick, so what Jacobi leaves uncancelled in one
    substep is cancelled in the next (a resting pyramid does not spread), and it is summed per substep
    about the points at the contact then, so a rolling sphere, whose contact point is a new point of it
    every instant, does not slip."""
    d = (xa + xsim.quat_rotate(qa, ra) - xa0 - xsim.quat_rotate(qa0, ra)) - \
        (xb + xsim.quat_rotate(qb, rb) - xb0 - xsim.quat_rotate(qb0, rb)) + slip
    out = n - n
    if stuck:
        out = d - n * xsim.dot(d, n)
    return out


@xsim.func
def restitution_update(xa, va, wa, va0, wa0, ima, wia, xb, vb, wb, vb0, wb0, imb, wib, n, ca, cb, restitution,
                       bounce_speed):
    """Restitution (sec. 3.6) at the contact point pair (``ca`` on a, ``cb`` on b, normal ``n`` from b
    to a; zero: none; inverse inertias ``wi*`` in world axes, ``world_inv_inertia``): an impulse along ``n``
    that brings the normal speed to -e times the pre-solve
    one (velocities ``*0``; no bounce below ``bounce_speed``, target 0). Separation faster than
    that target and than the pre-solve speed is taken back too: it is what pushing out the rest of
    a penetration added to the velocity (Jacobi resolves a box landing flat over a few substeps, and
    each push-out would otherwise bounce it higher; a resting body would jitter). Returns
    (va, wa, vb, wb, the impulse along n, kg m/s)."""
    r_a = ca - xa
    r_b = cb - xb
    wna, ua = inv_mass_along(ima, wia, r_a, n)
    wnb, ub = inv_mass_along(imb, wib, r_b, n)
    wn = wna + wnb
    pn = wn - wn
    if wn > 0.0 and xsim.dot(n, n) > 0.0:
        vn0 = xsim.dot(relative_point_velocity(va0, wa0, r_a, vb0, wb0, r_b), n)
        target = vn0 - vn0
        if vn0 < -bounce_speed:
            target = -restitution * vn0
        vn = xsim.dot(relative_point_velocity(va, wa, r_a, vb, wb, r_b), n)
        cap = xsim.max(vn0, target)
        if vn < target:
            pn = (target - vn) / wn
        elif vn > cap:
            pn = (cap - vn) / wn
        va, wa = impulse_along(va, wa, ima, n, ua, pn)
        vb, wb = impulse_along(vb, wb, imb, n, ub, -pn)
    return va, wa, vb, wb, pn


@xsim.func
def friction_update(xa, va, wa, ima, wia, xb, vb, wb, imb, wib, n, ca, cb, limit):
    """Dynamic friction (sec. 3.6) of one contact: an impulse of at most ``limit`` (kg m/s: mu times
    the contact's normal impulse) against the tangential velocity of the contact points (inverse
    inertias ``wi*`` in world axes, ``world_inv_inertia``). Returns (va, wa, vb, wb)."""
    r_a = ca - xa
    r_b = cb - xb
    vrel = relative_point_velocity(va, wa, r_a, vb, wb, r_b)
    vt = vrel - n * xsim.dot(vrel, n)
    lt2 = xsim.dot(vt, vt)
    if lt2 > 0.0:
        lt = xsim.sqrt(lt2)
        t = vt / lt
        wta, ua = inv_mass_along(ima, wia, r_a, t)
        wtb, ub = inv_mass_along(imb, wib, r_b, t)
        wt = wta + wtb
        if wt > 0.0:
            j = xsim.min(lt / wt, limit)
            va, wa = impulse_along(va, wa, ima, t, ua, -j)
            vb, wb = impulse_along(vb, wb, imb, t, ub, j)
    return va, wa, vb, wb


# -------------------------------------------------------------------------------------------------
# kernels (generic over the scalar type; the solver takes them from ``generic.specialized``)


@xsim.func
def pair_mean(values: Floats, pairs: Ints2, c: int):
    """A pair's material value (friction, restitution): the mean of its two shapes'."""
    return (values[pairs[c, 0]] + values[pairs[c, 1]]) * 0.5


@xsim.func
def add_delta(delta: Vec8s, b: int, d0, d1, d2, d3, d4, d5, d6):
    if b >= 0:
        xsim.atomic_add(delta, b, delta.dtype(d0, d1, d2, d3, d4, d5, d6, 1.0))


@xsim.kernel
def measure_contacts(Xc: Transforms, X0: Transforms, bodies: BodyArrays, shapes: ShapeArrays, contacts: ContactArrays,
                     geometry: ContactGeometry, split: Floats):
    """Geometry of candidate contact ``tid`` at the current poses (``pair_contact_geometry``: normal,
    depth, contact points) into ``geometry``, for ``solve_pair_positions`` to read (once per contact
    and pass; the gradient reaches the poses through this kernel), and one added to ``split`` of both
    bodies where it penetrates: the contacts that pass will apply (a count, not differentiated)."""
    t = xsim.tid()
    c = contacts.pair[t]
    sp, ss, bp, bs, kp, edge = contact_roles(c, contacts.index[t], contacts.pairs, shapes.body, shapes.point_count)
    origin = pair_origin(shapes.body[contacts.pairs[c, 0]], shapes.body[contacts.pairs[c, 1]], X0)
    xp, qp, _imp, _iip = load_body(bp, Xc, X0, origin, bodies.inv_mass, bodies.inv_inertia)
    xs, qs, _ims, _iis = load_body(bs, Xc, X0, origin, bodies.inv_mass, bodies.inv_inertia)
    n, pen, ca, cb = pair_contact_geometry(xp, qp, xs, qs, sp, ss, kp, edge, shapes.type, shapes.xform,
                                           shapes.size, shapes.radius, shapes.point_start, shapes.points)
    geometry.n[t] = n
    geometry.pen[t] = pen
    geometry.ca[t] = ca
    geometry.cb[t] = cb
    if pen > 0.0:
        if bp >= 0:
            xsim.atomic_add(split, bp, 1.0)
        if bs >= 0:
            xsim.atomic_add(split, bs, 1.0)


@xsim.kernel
def carried_slips(carry: Ints, prev: Vec3s, slip: Vec3s):
    """A step's first slips (``contact_slip``): a contact that held by static friction at the end of the last
    step keeps that step's slip (``carry[tid]``: its row in ``prev``; -1: none); any other starts at zero."""
    t = xsim.tid()
    k = carry[t]
    s = slip.dtype()
    if k >= 0:
        s = prev[k]
    slip[t] = s


@xsim.func
def pair_order(p_is_a: bool, n, cp, cs):
    """A contact's geometry (normal from its surface shape to its point shape, contact points on the point
    shape and on the surface shape) in its pair's order: (normal from shape b to a, point on a, on b).
    A contact's update is symmetric in its two bodies (up to rounding), so a pair solves every contact as a
    against b instead of swapping its two bodies' poses and inertias per contact."""
    if p_is_a:
        return n, cp, cs
    return -n, cs, cp


@xsim.kernel
def solve_pair_positions(Xc: Transforms, X0: Transforms, Xs: Transforms, slip: Vec3s, bodies: BodyArrays,
                         shapes: ShapeArrays, contacts: ContactArrays, geometry: ContactGeometry, lam: Multipliers,
                         split: Floats, lam_out: Multipliers, delta: Vec8s, arms: ContactArms):
    """Position pass of pair ``tid``'s contacts ``contacts.pair_first[tid]`` up to
    ``contacts.pair_first[tid + 1]``
    (non-penetration, then static friction against the slip since the substep start poses ``Xs`` plus the
    carried ``slip``, ``contact_position_update``) from the current poses and their geometry at them (``geometry``,
    ``measure_contacts``), with the bodies' masses split by ``split`` (their numbers of constraints
    in this pass, ``measure_contacts``). First the pair's mean normal multiplier after this pass over
    its touching contacts (``lam.normal`` of the earlier iterations plus each depth over the split generalized
    inverse masses, as ``contact_position_update`` adds it), which bounds each one's friction; then each
    contact as a Jacobi constraint on the poses the pass started from. The pair adds its contacts'
    corrections of each body, with a count of one per contact, to ``delta`` once (one atomic per body
    and pair, not per contact); each contact's multipliers (normal, tangential) of the substep so far
    go to ``lam_out``, its geometry to ``arms`` for the velocity pass: the normal
    (from the pair's shape b to a) and the contact points as arms in the bodies' frames (a's, b's).
    ``lam_out.held``: 1 where the contact touched in this pass and static friction held, or did not touch
    but had earlier in the substep (``lam.normal`` > 0) and held then (``lam.held``); else 0."""
    k = xsim.tid()
    # the written fields as arrays of their own: a store through the struct in a loop of run-time length makes
    # the struct a value the loop carries, which the adjoint cannot trace back to the parameter
    arm_n = arms.n
    arm_a = arms.ra
    arm_b = arms.rb
    lam_n_out = lam_out.normal
    lam_t_out = lam_out.tangent
    held_out = lam_out.held
    first = contacts.pair_first[k]
    last = contacts.pair_first[k + 1]
    sa = contacts.pairs[k, 0]
    ba = shapes.body[sa]
    bb = shapes.body[contacts.pairs[k, 1]]
    origin = pair_origin(ba, bb, X0)
    xa, qa, ima, iia = load_split_body(ba, Xc, X0, origin, bodies.inv_mass, bodies.inv_inertia, split)
    xb, qb, imb, iib = load_split_body(bb, Xc, X0, origin, bodies.inv_mass, bodies.inv_inertia, split)
    xa0, qa0, _ima0, _iia0 = load_body(ba, Xs, X0, origin, bodies.inv_mass, bodies.inv_inertia)
    xb0, qb0, _imb0, _iib0 = load_body(bb, Xs, X0, origin, bodies.inv_mass, bodies.inv_inertia)
    wia = world_inv_inertia(qa, iia)
    wib = world_inv_inertia(qb, iib)
    total = lam.normal.dtype(0.0)
    count = lam.normal.dtype(0.0)
    for t in range(first, last):
        sp, _ss, _bp, _bs, _kp, _edge = contact_roles(k, contacts.index[t], contacts.pairs, shapes.body,
                                                      shapes.point_count)
        l = lam.normal[t]
        pen = geometry.pen[t]
        if pen > 0.0:
            n, ca, cb = pair_order(sp == sa, geometry.n[t], geometry.ca[t], geometry.cb[t])
            wa, _ua = inv_mass_along(ima, wia, ca - xa, n)
            wb, _ub = inv_mass_along(imb, wib, cb - xb, n)
            w = wa + wb
            if w > 0.0:
                l = l + pen / w
        if l > 0.0:
            total = total + l
            count = count + 1.0
    share = total
    if count > 0.0:
        share = total / count
    mu = pair_mean(shapes.mu, contacts.pairs, k)
    sum_a = delta.dtype()
    sum_b = delta.dtype()
    for t in range(first, last):
        sp, _ss, _bp, _bs, _kp, _edge = contact_roles(k, contacts.index[t], contacts.pairs, shapes.body,
                                                      shapes.point_count)
        n, ca, cb = pair_order(sp == sa, geometry.n[t], geometry.ca[t], geometry.cb[t])
        pen = geometry.pen[t]
        ra = xsim.quat_rotate_inv(qa, ca - xa)
        rb = xsim.quat_rotate_inv(qb, cb - xb)
        arm_n[t] = n
        arm_a[t] = ra
        arm_b[t] = rb
        xa1, qa1, xb1, qb1, dl, dlt, held = contact_position_update(
            xa, qa, xa0, qa0, ima, iia, wia, ra, xb, qb, xb0, qb0, imb, iib, wib, rb, n, pen, ca, cb, slip[t], mu,
            lam.normal[t], lam.tangent[t], share)
        if pen <= 0.0 and lam.normal[t] > 0.0:
            held = lam.held[t]
        held_out[t] = held
        if dl > 0.0:
            dxa = xa1 - xa
            dqa = qa1 - qa
            dxb = xb1 - xb
            dqb = qb1 - qb
            sum_a = sum_a + delta.dtype(dxa[0], dxa[1], dxa[2], dqa[0], dqa[1], dqa[2], dqa[3], 1.0)
            sum_b = sum_b + delta.dtype(dxb[0], dxb[1], dxb[2], dqb[0], dqb[1], dqb[2], dqb[3], 1.0)
        lam_n_out[t] = lam.normal[t] + dl
        lam_t_out[t] = lam.tangent[t] + dlt
    if sum_a[7] > 0.0:
        if ba >= 0:
            xsim.atomic_add(delta, ba, sum_a)
        if bb >= 0:
            xsim.atomic_add(delta, bb, sum_b)


@xsim.kernel(enable_backward=False)
def count_velocity_pairs(shapes: ShapeArrays, contacts: ContactArrays, lam: Floats, split: Floats):
    """Add one to ``split`` of both bodies of each pair that ``solve_pair_velocities`` applies (a
    contact with multiplier > 0)."""
    k = xsim.tid()
    first = contacts.pair_first[k]
    active = 0
    for t in range(first, contacts.pair_first[k + 1]):
        if lam[t] > 0.0:
            active = 1
    if active != 0:
        c = contacts.pair[first]
        for side in range(2):
            b = shapes.body[contacts.pairs[c, side]]
            if b >= 0:
                xsim.atomic_add(split, b, 1.0)


@xsim.kernel
def solve_pair_velocities(Xc: Transforms, X0: Transforms, Xs: Transforms, qd: Vec6s, qd_pre: Vec6s, bodies: BodyArrays,
                          shapes: ShapeArrays, contacts: ContactArrays, lam: Multipliers, arms: ContactArms,
                          slip: Vec3s, inv_h: Float, bounce_speed: Float, split: Floats, delta: Vec8s,
                          slip_out: Vec3s):
    """Velocity pass of active pair ``tid`` (its candidate contacts are ``contacts.pair_first[tid]`` up to
    ``contacts.pair_first[tid + 1]``; those with multiplier ``lam.normal`` > 0 were active in the position pass,
    whose last iteration left their normals and arms in ``arms``), masses split by ``split``: restitution
    once for the pair, at its centre of pressure (contact points and normals weighted by their
    multipliers), so that a box landing flat on four corners bounces straight (four restitution
    impulses, each turning the box, mostly cancel in the mean: it did not bounce at all); then
    dynamic friction contact by contact (each resists the sliding of its own point, so a spinning
    box slows; up to what the position pass left of its cone, ``lam.tangent``), one after the other on
    the pair's local velocities. Velocity changes go to ``delta`` (dv 0..2, dw 3..5, count 7), each contact's
    slip at the end of the substep to ``slip_out`` (``contact_slip``, from the substep-start poses ``Xs`` and
    the carried ``slip``)."""
    k = xsim.tid()
    first = contacts.pair_first[k]
    last = contacts.pair_first[k + 1]
    c = contacts.pair[first]
    ba = shapes.body[contacts.pairs[c, 0]]
    bb = shapes.body[contacts.pairs[c, 1]]
    origin = pair_origin(ba, bb, X0)
    xa, qa, ima, iia = load_split_body(ba, Xc, X0, origin, bodies.inv_mass, bodies.inv_inertia, split)
    xb, qb, imb, iib = load_split_body(bb, Xc, X0, origin, bodies.inv_mass, bodies.inv_inertia, split)
    wia = world_inv_inertia(qa, iia)
    wib = world_inv_inertia(qb, iib)
    xa0, qa0, _ima0, _iia0 = load_body(ba, Xs, X0, origin, bodies.inv_mass, bodies.inv_inertia)
    xb0, qb0, _imb0, _iib0 = load_body(bb, Xs, X0, origin, bodies.inv_mass, bodies.inv_inertia)
    va, wa = body_velocity(ba, qd, xa)
    va0, wa0 = body_velocity(ba, qd_pre, xa)
    vb, wb = body_velocity(bb, qd, xb)
    vb0, wb0 = body_velocity(bb, qd_pre, xb)
    va_in = va
    wa_in = wa
    vb_in = vb
    wb_in = wb
    # the centre of pressure: contact points and normals weighted by their multipliers
    total = bodies.inv_mass.dtype(0.0)
    active = total
    pa = shapes.size.dtype()
    pb = shapes.size.dtype()
    nsum = shapes.size.dtype()
    # the pair sticks while any of its touching contacts held (each cancels the same motion within an even share
    # of the pair's cone, ``contact_position_update``): then its contacts keep their slips, else they slid
    stuck = 0
    for t in range(first, last):
        if lam.normal[t] > 0.0 and lam.held[t] != 0:
            stuck = 1
    for t in range(first, last):
        lk = lam.normal[t]
        slip_out[t] = contact_slip(xa, qa, xa0, qa0, arms.ra[t], xb, qb, xb0, qb0, arms.rb[t], arms.n[t], slip[t],
                                   lk > 0.0 and stuck != 0)
        if lk > 0.0:
            n = arms.n[t]
            cp = xa + xsim.quat_rotate(qa, arms.ra[t])
            cs = xb + xsim.quat_rotate(qb, arms.rb[t])
            total = total + lk
            active = active + 1.0
            pa = pa + cp * lk
            pb = pb + cs * lk
            nsum = nsum + n * lk
    if total > 0.0:
        pn = total - total
        mu = pair_mean(shapes.mu, contacts.pairs, c)
        if xsim.dot(nsum, nsum) > 0.0:
            va, wa, vb, wb, pn = restitution_update(xa, va, wa, va0, wa0, ima, wia, xb, vb, wb, vb0, wb0, imb, wib,
                                                    xsim.normalize(nsum), pa / total, pb / total,
                                                    pair_mean(shapes.restitution, contacts.pairs, c), bounce_speed)
        for t in range(first, last):
            lk = lam.normal[t]
            if lk > 0.0:
                cp = xa + xsim.quat_rotate(qa, arms.ra[t])
                cs = xb + xsim.quat_rotate(qb, arms.rb[t])
                # Coulomb against the contact's share of the pair's whole normal impulse (an even share,
                # as in the position pass, ``contact_position_update``): the multipliers (position pass)
                # and the restitution impulse (which carries the load while a landing box's penetration
                # is still being resolved), less the friction the position pass gave
                limit = xsim.max(mu * (total * inv_h + xsim.max(pn, 0.0)) / active - lam.tangent[t] * inv_h, 0.0)
                va, wa, vb, wb = friction_update(xa, va, wa, ima, wia, xb, vb, wb, imb, wib, arms.n[t], cp, cs, limit)
        dv = va - va_in
        dw = wa - wa_in
        add_delta(delta, ba, dv[0], dv[1], dv[2], dw[0], dw[1], dw[2], 0.0)
        dv = vb - vb_in
        dw = wb - wb_in
        add_delta(delta, bb, dv[0], dv[1], dv[2], dw[0], dw[1], dw[2], 0.0)
