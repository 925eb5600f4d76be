"""Rigid contacts of the XPBD solver: pair detection, the position pass (non-penetration and
friction within the cone) and the velocity pass (dynamic friction and restitution) of Mueller et al. 2020, sec. 3.5
and 3.6. Particles meet the bodies' shapes in ``particle_contacts.py``.

A contact is a *point with a radius* of one shape against the *surface* of another: sphere centres
(radius r), the two ends of capsule axes (r), slightly rounded box corners and mesh (hull)
vertices (radius 0) against a plane, sphere, box or capsule (``xsim.sim.rigid.point_roles``
decides which side offers points). Pairs of segments add *segment contacts* at the closest points
of the two lines, where those lie inside both segments (``segment_contact``; elsewhere the
segments' end points are nearest, and their point contacts hold): box-box pairs one per pair of
edges (12 x 12, ``edge_contact_geometry``: two equal boxes stacked with one turned about z have no
corner over the other's face, and only the crossings of their edges hold them), box-capsule pairs
one per box edge against the capsule's axis, capsule pairs one between their axes
(``capsule_segment_geometry``). So capsules collide exactly with planes, spheres, capsules and boxes (boxes up
to their corner rounding). Each contact is one thread (Jacobi, see ``rigid_solver.py``). Known
gaps: primitives against a mesh's faces (only mesh vertices collide; mesh against mesh does not).
A shape frame's rotation is its quaternion normalized (``particle_contacts.shape_rotation``), once per
step (``unit_shape_frames``): the kernels here read frames whose quaternions are unit.

Contact generation runs every step: the broad phase (``broad_phase.py``, on the host) lists the
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
from xsim.sim.generic import Float, Floats, Ints, Ints2, Transforms, Vec3s, Vec6s, Vec8s
from xsim.sim.shapes import SHAPE_BOX, SHAPE_CAPSULE, SHAPE_CONE, SHAPE_CYLINDER, SHAPE_ELLIPSOID

from .bundles import BodyArrays, ContactArms, ContactArrays, ContactGeometry, Multipliers, ShapeArrays
from .kernels import surface_contact
from .particle_contacts import shape_rotation
from .rigid_kernels import (
    body_inv_mass_along,
    body_velocity,
    impulse_along,
    inv_mass_along,
    load_body,
    load_split_body,
    pair_origin,
    point_inv_mass,
    push_along,
    relative_point_velocity,
    rotate_by,
    world_inv_inertia,
)

# -------------------------------------------------------------------------------------------------
# geometry


SUPPORT_ITERATIONS = 3  # fixed-point steps of a support contact (one is exact against a plane)


@xsim.func
def is_support_slot(kind: int, k: int):
    """Whether contact point ``k`` of a shape of this kind is a support point (``SUPPORT_SLOTS``)."""
    return (kind == SHAPE_CYLINDER and k < 2) or ((kind == SHAPE_CONE or kind == SHAPE_ELLIPSOID) and k < 1)


@xsim.func
def support_point(kind: int, size, k: int, d):
    """The point of support slot ``k`` furthest along the local direction ``d``: an ellipsoid's
    (a^2 d / |a d|, componentwise), or that of a cylinder's rim ``k`` (0: z = -h, 1: z = +h) or a
    cone's base rim. A direction along the axis leaves the rim's point undefined (every one is
    furthest): it is then the rim's point on x, a constant, not a normalized rounding error."""
    p = d - d
    if kind == SHAPE_ELLIPSOID:
        ad = xsim.cw_mul(size, d)
        length = xsim.length(ad)
        p[2] = -size[2]
        if length > 0.0:
            p = xsim.cw_mul(size, ad) / length
    else:
        p[2] = -size[1]
        if k == 1:
            p[2] = size[1]
        l2 = d[0] * d[0] + d[1] * d[1]
        if l2 > 1.0e-6 * xsim.dot(d, d):
            length = xsim.sqrt(l2)
            p[0] = size[0] * d[0] / length
            p[1] = size[0] * d[1] / length
        else:
            p[0] = size[0]
    return p


@xsim.func
def contact_geometry(xa, qa, sxa, kind_a: int, size_a, k: int, point, ra, xb, qb, sxb, kind_b: int, size_b):
    """Contact point ``k`` of shape a (``point`` in its frame ``sxa``, in body a's com frame (xa, qa))
    against the surface of shape b: (world normal pointing from b to a, depth, world contact point
    on a's surface, world contact point on b's surface). A support slot (``is_support_slot``) is
    a's point furthest against b's normal there, found by ``SUPPORT_ITERATIONS`` steps from a's
    centre: each takes b's normal at the last point and a's support point against it (against a
    plane the first step is exact; against a curved surface the steps converge to the deepest
    point). Its position is a function of both poses, so the gradient flows through it."""
    qs = qb * sxb.q
    ps = xb + xsim.quat_rotate(qb, sxb.p)
    local = point
    if is_support_slot(kind_a, k):
        local = point - point
        for _it in range(SUPPORT_ITERATIONS):
            pi = xa + xsim.quat_rotate(qa, sxa.p + xsim.quat_rotate(sxa.q, local))
            nb, _pen = surface_contact(kind_b, xsim.quat_rotate_inv(qs, pi - ps), size_b, ra)
            d = xsim.quat_rotate_inv(sxa.q, xsim.quat_rotate_inv(qa, xsim.quat_rotate(qs, -nb)))
            local = support_point(kind_a, size_a, k, d)
    pw = xa + xsim.quat_rotate(qa, sxa.p + xsim.quat_rotate(sxa.q, local))
    n_local, pen = surface_contact(kind_b, xsim.quat_rotate_inv(qs, pw - ps), size_b, ra)
    n = xsim.quat_rotate(qs, n_local)
    ca = pw - n * ra
    return n, pen, ca, ca + n * pen


@xsim.func
def box_edge(e: int, half):
    """Edge ``e`` (0..11) of a box of half extents ``half``, in box coordinates: (start point, end
    minus start, outward normals of its two faces). Edges 4k..4k+3 run along axis k."""
    k = e // 4
    start = half - half
    d = half - half
    f1 = half - half
    f2 = half - half
    for j in range(3):
        if j == k:
            start[j] = -half[j]
            d[j] = 2.0 * half[j]
        elif j == (k + 1) % 3:
            f1[j] = 1.0
            if e % 2 == 1:
                f1[j] = -1.0
            start[j] = f1[j] * half[j]
        else:
            f2[j] = 1.0
            if (e // 2) % 2 == 1:
                f2[j] = -1.0
            start[j] = f2[j] * half[j]
    return start, d, f1, f2


@xsim.func
def box_axis_overlap(u, qa, ha, qb, hb, gap):
    """Overlap (m) of the projections on the unit axis ``u`` of two boxes with rotations ``qa``,
    ``qb``, half extents ``ha``, ``hb`` and centres ``gap`` apart (b to a); < 0 when ``u`` separates."""
    ua = xsim.quat_rotate_inv(qa, u)
    ub = xsim.quat_rotate_inv(qb, u)
    overlap = -xsim.abs(xsim.dot(gap, u))
    for k in range(3):
        overlap = overlap + ha[k] * xsim.abs(ua[k]) + hb[k] * xsim.abs(ub[k])
    return overlap


@xsim.func
def line_closest_parameters(a0, da, b0, db):
    """Parameters (s, t) of the closest points a0 + s da, b0 + t db of two lines, and whether the
    lines cross: below about half a degree between them their closest points are ill-conditioned,
    and for segments (capsule axes, box edges) the contacts of the segments' end points are the ones
    that hold; (s, t) are then (0, 0)."""
    aa = xsim.dot(da, da)
    bb = xsim.dot(db, db)
    ab = xsim.dot(da, db)
    nn = aa * bb - ab * ab  # |da x db|^2
    s = ab - ab
    t = s
    crossing = nn > 1.0e-4 * aa * bb
    if crossing:
        ar = xsim.dot(da, a0 - b0)
        br = xsim.dot(db, a0 - b0)
        s = (ab * br - bb * ar) / nn
        t = (aa * br - ab * ar) / nn
    return s, t, crossing


@xsim.func
def segment_contact(a0, da, ra, b0, db, rb):
    """Contact of segment a (start ``a0``, end minus start ``da``) swept by radius ``ra`` with segment
    b swept by ``rb`` (0 for a box edge) at the closest points of their lines: (unit normal from b's
    point to a's, depth ra + rb - distance, contact point on a's surface, on b's surface, whether it
    is one). It is one where the lines cross (``line_closest_parameters``), both closest points lie
    strictly inside their segments and apart; the minimum distance of two segments is either this or
    at an end point of one of them, which the end points' own contacts cover. Otherwise the normal
    and depth are zero."""
    s, t, crossing = line_closest_parameters(a0, da, b0, db)
    pa = a0 + da * s
    pb = b0 + db * t
    d = pa - pb
    dist2 = xsim.dot(d, d)
    n = d - d
    pen = ra - ra
    ok = crossing and s > 0.0 and s < 1.0 and t > 0.0 and t < 1.0 and dist2 > 0.0
    if ok:
        dist = xsim.sqrt(dist2)
        n = d / dist
        pen = ra + rb - dist
    return n, pen, pa - n * ra, pb + n * rb, ok


@xsim.func
def capsule_axis(x, q, sx, size):
    """World start point and end minus start of the axis of a capsule of ``size`` (radius, half
    height) with frame ``sx`` in the body's com frame (x, q)."""
    half = size - size
    half[2] = size[1]
    half = xsim.quat_rotate(q * sx.q, half)
    return x + xsim.quat_rotate(q, sx.p) - half, half * 2.0


@xsim.func
def capsule_segment_geometry(xc, qc, sxc, size_c, xo, qo, sxo, kind_o: int, size_o, e: int):
    """Segment contact of the axis of a capsule (``size_c``: radius, half height; frame ``sxc`` in
    the com frame (xc, qc)) with the other shape's segment: the axis of a capsule (``kind_o`` =
    SHAPE_CAPSULE) or edge ``e`` of a box (half extents ``size_o``): (world normal from the other
    shape to the capsule, depth, contact point on the capsule's surface, on the other shape's); the
    normal is zero where it does not count.

    Two capsules: ``segment_contact``. A box edge counts only where it is the box's feature nearest
    the axis: the closest points lie inside both segments, and the normal lies in the cone of the
    outward normals of the edge's two faces (up to 0.05, as for box edges), so the axis point is
    outside the box, nearest this edge. Then it is the exact capsule-box contact: a capsule across
    the box's top edge pivots on it, and one lying across the top face rests on the two edges it
    crosses (whose normal is the face's, on the cone's rim). Elsewhere a face or a corner is nearest,
    and the capsule's end points against the box and the box's corners against the capsule hold it."""
    a0, da = capsule_axis(xc, qc, sxc, size_c)
    qs = qo * sxo.q
    b0, db, f1, f2 = box_edge(e, size_o)
    rb = size_o[0]
    if kind_o == SHAPE_CAPSULE:
        b0, db = capsule_axis(xo, qo, sxo, size_o)
    else:
        b0 = xo + xsim.quat_rotate(qo, sxo.p) + xsim.quat_rotate(qs, b0)
        db = xsim.quat_rotate(qs, db)
        rb = rb - rb
    n, pen, ca, cb, ok = segment_contact(a0, da, size_c[0], b0, db, rb)
    if ok and kind_o == SHAPE_BOX:
        nl = xsim.quat_rotate_inv(qs, n)
        if xsim.dot(nl, f1) < -0.05 or xsim.dot(nl, f2) < -0.05:
            n = n - n
            pen = pen - pen
    return n, pen, ca, cb


@xsim.func
def edge_contact_geometry(xa, qa, sxa, ha, ea: int, xb, qb, sxb, hb, eb: int, tol):
    """Contact of edge ``ea`` of box a (half extents ``ha``, frame ``sxa`` in body a's com frame
    (xa, qa)) with edge ``eb`` of box b: (world normal from b to a, depth, closest point on a's edge,
    closest point on b's edge), as ``contact_geometry`` gives them; the normal is zero for parallel
    edges.

    The normal is the cross product of the edges, turned out of b. The pair counts (depth > 0) only
    when it is a real edge-edge contact of the separating-axis test: the closest points of the two
    lines lie inside both edges (a crossing beyond an edge's end is a corner's, which the corner
    points hold), the normal lies in the cone of b's two face normals at its edge and its opposite
    in a's (up to 0.05, for slightly tilted faces), each closest point is inside the other box (up to
    ``tol``, m) and the boxes overlap along the normal no more than along any face normal (+ ``tol``):
    otherwise a face is the axis of least penetration and the corner contacts resolve it. These are
    the discrete choices; the geometry they select is differentiated."""
    qsa = qa * sxa.q
    psa = xa + xsim.quat_rotate(qa, sxa.p)
    qsb = qb * sxb.q
    psb = xb + xsim.quat_rotate(qb, sxb.p)
    a0, da, fa1, fa2 = box_edge(ea, ha)
    b0, db, fb1, fb2 = box_edge(eb, hb)
    a0 = psa + xsim.quat_rotate(qsa, a0)
    da = xsim.quat_rotate(qsa, da)
    b0 = psb + xsim.quat_rotate(qsb, b0)
    db = xsim.quat_rotate(qsb, db)
    n = xsim.cross(da, db)
    pen = tol - tol
    ca = a0
    cb = b0
    # nearly aligned edges do not cross: the corner points hold such boxes
    s, t, crossing = line_closest_parameters(a0, da, b0, db)
    if crossing:
        ca = a0 + da * s
        cb = b0 + db * t
        n = n / xsim.length(n)
        if xsim.dot(n, cb - psb) < 0.0:
            n = -n
        depth = xsim.dot(cb - ca, n)
        # within the corner rounding of an end the corner's point contact holds (a box's corner resting
        # on another's edge is not also an edge-edge contact, that flickered on and off with the jitter)
        end_a = tol / xsim.length(da)
        end_b = tol / xsim.length(db)
        if depth > 0.0 and s > end_a and s < 1.0 - end_a and t > end_b and t < 1.0 - end_b:
            nb = xsim.quat_rotate_inv(qsb, n)
            na = xsim.quat_rotate_inv(qsa, n)
            ok = xsim.dot(nb, fb1) > -0.05 and xsim.dot(nb, fb2) > -0.05
            ok = ok and xsim.dot(na, fa1) < 0.05 and xsim.dot(na, fa2) < 0.05
            in_b = xsim.quat_rotate_inv(qsb, ca - psb)
            in_a = xsim.quat_rotate_inv(qsa, cb - psa)
            gap = psa - psb
            overlap = box_axis_overlap(n, qsa, ha, qsb, hb, gap)
            face = overlap
            for k in range(3):
                ok = ok and xsim.abs(in_b[k]) <= hb[k] + tol and xsim.abs(in_a[k]) <= ha[k] + tol
                axis = n - n
                axis[k] = 1.0
                face = xsim.min(face, box_axis_overlap(xsim.quat_rotate(qsa, axis), qsa, ha, qsb, hb, gap))
                face = xsim.min(face, box_axis_overlap(xsim.quat_rotate(qsb, axis), qsa, ha, qsb, hb, gap))
            if ok and overlap <= face + tol:
                pen = depth
    else:
        n = n - n
    return n, pen, ca, cb


@xsim.func
def segment_sine_squared(da, db):
    """The squared sine of the angle between the directions ``da`` and ``db`` (0 where one is zero)."""
    aa = xsim.dot(da, da)
    bb = xsim.dot(db, db)
    ab = xsim.dot(da, db)
    sin2 = aa - aa
    if aa > 0.0 and bb > 0.0:
        sin2 = (aa * bb - ab * ab) / (aa * bb)
    return sin2


@xsim.func
def segment_distance(a0, da, b0, db):
    """Distance (m) between the segments a0 + s da and b0 + t db (s, t in [0, 1])."""
    r = a0 - b0
    aa = xsim.dot(da, da)
    bb = xsim.dot(db, db)
    ab = xsim.dot(da, db)
    ar = xsim.dot(da, r)
    br = xsim.dot(db, r)
    nn = aa * bb - ab * ab
    s = ab - ab
    t = s
    if aa > 0.0 and bb > 0.0:
        if nn > 1.0e-12 * aa * bb:
            s = xsim.clamp((ab * br - bb * ar) / nn, 0.0, 1.0)
        t = (ab * s + br) / bb
        if t < 0.0:
            t = t - t
            s = xsim.clamp(-ar / aa, 0.0, 1.0)
        elif t > 1.0:
            t = t - t + 1.0
            s = xsim.clamp((ab - ar) / aa, 0.0, 1.0)
    elif aa > 0.0:
        s = xsim.clamp(-ar / aa, 0.0, 1.0)
    elif bb > 0.0:
        t = xsim.clamp(br / bb, 0.0, 1.0)
    return xsim.length(r + da * s - db * t)


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
def contact_roles(c: int, k: int, pairs: Ints2, shape_body: Ints, shape_point_count: Ints):
    """(point shape, surface shape, their bodies, point index in its shape, segment contact) of
    contact ``k`` of pair ``c``: the first points are a's against b's surface, the next b's against
    a's, then the pair's segment contacts (``SEGMENT_CONTACTS``; a as the "point" shape, -1 for
    point contacts): a box-box pair's 12 x 12 edge pairs (12 i + j is a's edge i with b's edge
    j), a box-capsule pair's 12 box edges against the capsule's axis, a capsule pair's one."""
    sp = pairs[c, 0]
    ss = pairs[c, 1]
    kp = k
    edge = -1
    na = shape_point_count[sp] * pairs[c, 2]
    nb = shape_point_count[ss] * pairs[c, 3]
    if k >= na + nb:
        edge = k - na - nb
    elif k >= na:
        sp = pairs[c, 1]
        ss = pairs[c, 0]
        kp = k - na
    return sp, ss, shape_body[sp], shape_body[ss], kp, edge


@xsim.func
def pair_contact_geometry(xp, qp, xs, qs, sp: int, ss: int, kp: int, edge: int,
                          shape_type: Ints, shape_xform: Transforms, shape_size: Vec3s, shape_radius: Floats,
                          shape_point_start: Ints, shape_points: Vec3s):
    """Geometry (normal from s to p, depth, contact point on p, on s) of a point contact or, for
    ``edge`` >= 0, of a segment contact: a box-box edge pair (corner roundings as the
    tolerance), a box's edge against a capsule's axis (either shape first), or two capsules' axes."""
    n = shape_size.dtype()
    pen = shape_radius.dtype(0.0)
    ca = shape_size.dtype()
    cb = shape_size.dtype()
    if edge >= 0:
        tp = shape_type[sp]
        ts = shape_type[ss]
        if tp == SHAPE_BOX and ts == SHAPE_BOX:
            n, pen, ca, cb = edge_contact_geometry(
                xp, qp, shape_xform[sp], shape_size[sp], edge // 12, xs, qs, shape_xform[ss], shape_size[ss],
                edge % 12, shape_radius[sp] + shape_radius[ss])
        else:
            # a capsule and a capsule or a box, in either order: solve with the capsule first (one
            # inlined copy of the geometry), then turn the result round
            flip = tp != SHAPE_CAPSULE
            xc = xp
            qc = qp
            sc = sp
            xo = xs
            qo = qs
            so = ss
            if flip:
                xc = xs
                qc = qs
                sc = ss
                xo = xp
                qo = qp
                so = sp
            n, pen, ca, cb = capsule_segment_geometry(xc, qc, shape_xform[sc], shape_size[sc], xo, qo,
                                                      shape_xform[so], shape_type[so], shape_size[so], edge)
            if flip:
                n = -n
                c = ca
                ca = cb
                cb = c
    else:
        n, pen, ca, cb = contact_geometry(
            xp, qp, shape_xform[sp], shape_type[sp], shape_size[sp], kp, shape_points[shape_point_start[sp] + kp],
            shape_radius[sp], xs, qs, shape_xform[ss], shape_type[ss], shape_size[ss])
    return n, pen, ca, cb


@xsim.func
def contact_segments(xp, qp, xs, qs, sp: int, ss: int, edge: int, shape_type: Ints,
                     shape_xform: Transforms, shape_size: Vec3s, shape_radius: Floats):
    """The two world segments of segment contact ``edge`` (as ``pair_contact_geometry`` reads it):
    (start, end minus start, radius) of p's, then of s's; a box edge's radius is its corner rounding."""
    a0 = shape_size.dtype()
    da = shape_size.dtype()
    b0 = shape_size.dtype()
    db = shape_size.dtype()
    ra = shape_radius.dtype(0.0)
    rb = shape_radius.dtype(0.0)
    for side in range(2):
        sh = sp
        x = xp
        q = qp
        e = edge // 12
        if side == 1:
            sh = ss
            x = xs
            q = qs
            e = edge % 12
        sx = shape_xform[sh]
        size = shape_size[sh]
        c0 = shape_size.dtype()
        dc = shape_size.dtype()
        rc = shape_radius[sh]
        if shape_type[sh] == SHAPE_CAPSULE:
            c0, dc = capsule_axis(x, q, sx, size)
        else:
            if shape_type[sp] != SHAPE_BOX or shape_type[ss] != SHAPE_BOX:
                e = edge  # a box's edge against a capsule's axis
            c0, dc, _f1, _f2 = box_edge(e, size)
            qsh = q * sx.q
            c0 = x + xsim.quat_rotate(q, sx.p) + xsim.quat_rotate(qsh, c0)
            dc = xsim.quat_rotate(qsh, dc)
        if side == 0:
            a0 = c0
            da = dc
            ra = rc
        else:
            b0 = c0
            db = dc
            rb = rc
    return a0, da, ra, b0, db, rb


@xsim.kernel(enable_backward=False)
def box_edges_near(Xc: Transforms, X0: Transforms, bodies: BodyArrays, shapes: ShapeArrays, pairs: Ints2, reach: Floats,
                   near: Ints):
    """Once per step (not differentiated), for box-box pair ``tid // 24``: whether edge ``tid % 12``
    of its box ``(tid // 12) % 2`` (a, then b) can come within the other box grown by both corner
    roundings (an edge contact's closest point must lie inside it, ``edge_contact_geometry``) and
    twice the pair's ``reach`` (m): its ends' box in the other box's frame overlaps that box."""
    k = xsim.tid()
    p = k // 24
    side = (k // 12) % 2
    s = pairs[p, side]
    o = pairs[p, 1 - side]
    origin = pair_origin(shapes.body[pairs[p, 0]], shapes.body[pairs[p, 1]], X0)
    xs, qs, _ims, _iis = load_body(shapes.body[s], Xc, X0, origin, bodies.inv_mass, bodies.inv_inertia)
    xo, qo, _imo, _iio = load_body(shapes.body[o], Xc, X0, origin, bodies.inv_mass, bodies.inv_inertia)
    sx = shapes.xform[s]
    ox = shapes.xform[o]
    c0, d, _f1, _f2 = box_edge(k % 12, shapes.size[s])
    qw = qs * sx.q
    qow = qo * ox.q
    po = xo + xsim.quat_rotate(qo, ox.p)
    e0 = xsim.quat_rotate_inv(qow, xs + xsim.quat_rotate(qs, sx.p) + xsim.quat_rotate(qw, c0) - po)
    e1 = e0 + xsim.quat_rotate_inv(qow, xsim.quat_rotate(qw, d))
    half = shapes.size[o]
    g = shapes.radius[s] + shapes.radius[o] + 2.0 * reach[p]
    ok = 1
    for j in range(3):
        if xsim.min(e0[j], e1[j]) > half[j] + g or xsim.max(e0[j], e1[j]) < -half[j] - g:
            ok = 0
    near[k] = ok


@xsim.kernel(enable_backward=False)
def contact_depths(Xc: Transforms, X0: Transforms, bodies: BodyArrays, shapes: ShapeArrays, pairs: Ints2, contact_pair: Ints,
                   contact_index: Ints, reach: Floats, spin: Floats, depth: Floats):
    """Narrow phase, once per step (not differentiated): the depth (m, < 0: apart) of candidate
    contact ``tid`` at the poses ``Xc`` of the step start, from which the solver keeps those that
    can touch during the step. A point: its depth below the other shape's surface. Segments (box
    edges, capsule axes): their radii minus their distance, or, where they are within twice the
    pair's ``reach`` (m) of that, the contact's own depth if larger (edges that crossed lie close
    however deep they went); -1e30 for parallel ones that the pair cannot turn (``spin``, rad in
    the step) out of parallel (segment contacts need lines 0.01 rad apart,
    ``line_closest_parameters``). Two boxes offer 144 edge pairs; one resting on the other keeps
    a few."""
    t = xsim.tid()
    c = contact_pair[t]
    sp, ss, bp, bs, kp, edge = contact_roles(c, contact_index[t], pairs, shapes.body, shapes.point_count)
    origin = pair_origin(shapes.body[pairs[c, 0]], shapes.body[pairs[c, 1]], X0)
    xp, qp, _imp, _iip = load_body(bp, Xc, X0, origin, bodies.inv_mass, bodies.inv_inertia)
    xs, qs, _ims, _iis = load_body(bs, Xc, X0, origin, bodies.inv_mass, bodies.inv_inertia)
    pen = depth.dtype(-1.0e30)
    if edge >= 0:
        a0, da, ra, b0, db, rb = contact_segments(xp, qp, xs, qs, sp, ss, edge, shapes.type, shapes.xform,
                                                  shapes.size, shapes.radius)
        sin_ab = xsim.sqrt(segment_sine_squared(da, db))
        # parallel segments that the pair cannot turn out of parallel in the step have none (tested first:
        # a third of two boxes' edge pairs)
        if sin_ab + spin[c] > 0.009:
            # the lines' closest points must come inside both segments: moving the lines by ``reach``
            # moves them along the lines by up to reach / sin(angle)
            u, v, _crossing = line_closest_parameters(a0, da, b0, db)
            ext = reach[c] / xsim.max(sin_ab, 0.009)
            la = xsim.length(da)
            lb = xsim.length(db)
            end = ra + rb  # box edges: no contact within the corner rounding of an end
            if shapes.type[sp] != SHAPE_BOX or shapes.type[ss] != SHAPE_BOX:
                end = end - end
            inside = u * la > end - ext and u * la < la - end + ext and v * lb > end - ext and v * lb < lb - end + ext
            if inside or sin_ab < 0.05:
                pen = ra + rb - segment_distance(a0, da, b0, db)
                if pen > -2.0 * reach[c]:
                    _n, seg_pen, _ca, _cb = pair_contact_geometry(
                        xp, qp, xs, qs, sp, ss, kp, edge, shapes.type, shapes.xform, shapes.size, shapes.radius,
                        shapes.point_start, shapes.points)
                    pen = xsim.max(pen, seg_pen)
    else:
        _n, pen, _ca, _cb = contact_geometry(
            xp, qp, shapes.xform[sp], shapes.type[sp], shapes.size[sp], kp, shapes.points[shapes.point_start[sp] + kp],
            shapes.radius[sp], xs, qs, shapes.xform[ss], shapes.type[ss], shapes.size[ss])
    depth[t] = pen


@xsim.kernel
def unit_shape_frames(shape_xform: Transforms, frames: Transforms):
    """Shape frames with their quaternions normalized (``shape_rotation``), once per step for the contact
    kernels and the broad phase; on the tape, so the gradient reaches ``shape_xform`` through the norm."""
    i = xsim.tid()
    sx = shape_xform[i]
    frames[i] = xsim.transformation(sx.p, shape_rotation(sx))


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
