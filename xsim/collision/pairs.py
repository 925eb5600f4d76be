"""The geometry of a pair of shapes' contacts: which shape offers the point and which the surface for
each contact of a pair (``contact_roles``), and segment contacts between box edges and capsule axes at
the closest points of the two lines (``pair_contact_geometry``, ``contact_segments``). See
``xsim.sim.rigid.point_roles`` and ``SEGMENT_CONTACTS`` for which pairs offer which contacts.
"""

import xsim
from xsim.sim.generic import Floats, Ints, Ints2, Transforms, Vec3s
from xsim.sim.shapes import SHAPE_BOX, SHAPE_CAPSULE

from .surfaces import contact_geometry


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
