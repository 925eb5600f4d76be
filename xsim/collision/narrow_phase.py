"""The narrow phase's kernels, once per step and off the tape: which of a pair's candidate contacts can
touch during the step (``contact_depths``, ``box_edges_near``), the shapes' frames with unit
quaternions (``unit_shape_frames``, on the tape: the solver's contacts read them), and the poses they
measure from. Bodies are seen as the rigid solver keeps them within a step: a com frame at the step start
(``X0``, world) and a displacement from it with a rotation (``Xc``), every pair measured relative to one
of its bodies' step-start positions (``pair_origin``), so that float32 positions far from the origin keep
their digits (docs/rigid.md, "Far from the origin in float32")."""

import xsim
from xsim.sim.generic import Floats, Ints, Ints2, Transforms, Vec3s
from xsim.sim.shapes import SHAPE_BOX

from .pairs import (
    box_edge,
    contact_roles,
    contact_segments,
    line_closest_parameters,
    pair_contact_geometry,
    segment_distance,
    segment_sine_squared,
)
from .surfaces import contact_geometry, shape_rotation


@xsim.struct
class ShapeArrays:
    """The shapes' arrays, [shape_count] (points: [shape point total]); each field is the Model's array
    ``shape_`` + its name."""

    body: Ints  # owning body, -1 for static shapes
    type: Ints  # SHAPE_* code of xsim.sim.shapes
    xform: Transforms  # m, xyzw: shape frame in its body's com frame (static shapes: in the world)
    size: Vec3s  # m: sphere (r, 0, 0), box half extents, capsule, cylinder, cone (r, half height, 0), ellipsoid radii
    radius: Floats  # m, radius of the shape's contact points
    point_start: Ints  # first contact point of a shape in ``points``
    point_count: Ints  # its number of contact points
    points: Vec3s  # m, contact points in shape frames
    mu: Floats  # friction coefficient
    restitution: Floats  # fraction of the approach speed a contact leaves with
    world: Ints  # world index (-1: meets every world)


@xsim.func
def body_frame(b: int, Xc: Transforms, X0: Transforms, origin):
    """(com position relative to ``origin``, rotation) of body ``b``, whose pose is its displacement
    ``Xc[b].p`` since the step-start com frame ``X0[b]`` (world) and its rotation ``Xc[b].q``; the world
    (-1) sits at the world's origin."""
    x = -origin
    q = xsim.transform_identity(dtype=X0.dtype.dtype).q
    if b >= 0:
        pose = Xc[b]
        x = (X0[b].p - origin) + pose.p
        q = pose.q
    return x, q


@xsim.func
def pair_origin(ba: int, bb: int, X0: Transforms):
    """The point (world) that a constraint between bodies ``ba`` and ``bb`` measures its geometry from:
    the step-start com of ``ba``, else of ``bb`` (-1: the world), else the world's origin. Positions
    relative to it are small where the two are close, so their float32 differences keep their digits."""
    o = xsim.transform_identity(dtype=X0.dtype.dtype).p
    if ba >= 0:
        o = X0[ba].p
    elif bb >= 0:
        o = X0[bb].p
    return o



@xsim.kernel(enable_backward=False)
def box_edges_near(Xc: Transforms, X0: Transforms, shapes: ShapeArrays, pairs: Ints2, reach: Floats,
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
    xs, qs = body_frame(shapes.body[s], Xc, X0, origin)
    xo, qo = body_frame(shapes.body[o], Xc, X0, origin)
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
def contact_depths(Xc: Transforms, X0: Transforms, shapes: ShapeArrays, pairs: Ints2, contact_pair: Ints,
                   contact_index: Ints, reach: Floats, spin: Floats, depth: Floats):
    """Narrow phase, once per step (not differentiated): the depth (m, < 0: apart) of candidate
    contact ``tid`` at the poses ``Xc`` of the step start, from which the pipeline keeps those that
    can touch during the step (``CollisionPipeline``). A point: its depth below the other shape's surface. Segments (box
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
    xp, qp = body_frame(bp, Xc, X0, origin)
    xs, qs = body_frame(bs, Xc, X0, origin)
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


@xsim.kernel(enable_backward=False)
def state_frames(body_q: Transforms, com: Vec3s, residual: Vec3s, X0: Transforms, Xc: Transforms):
    """A state's bodies as the narrow phase sees them: com frames (world) ``X0`` and, from them, what the
    stored positions lost to rounding (``residual``, m) with the rotations, ``Xc``."""
    i = xsim.tid()
    pose = body_q[i]
    X0[i] = xsim.transformation(pose.p + xsim.quat_rotate(pose.q, com[i]), pose.q)
    Xc[i] = xsim.transformation(residual[i], pose.q)


@xsim.kernel(enable_backward=False)
def contact_fields(Xc: Transforms, X0: Transforms, com: Vec3s, shapes: ShapeArrays, pairs: Ints2, contact_pair: Ints,
                   contact_index: Ints, shape0: Ints, shape1: Ints, point0: Vec3s, point1: Vec3s, normal: Vec3s,
                   depth: Floats):
    """Newton's fields of kept contact ``tid`` at the poses ``Xc``: the point shape and the surface shape,
    the contact points in their bodies' frames (static shapes: world), the normal from shape 0 towards
    shape 1 and the depth (m)."""
    t = xsim.tid()
    c = contact_pair[t]
    sp, ss, bp, bs, kp, edge = contact_roles(c, contact_index[t], pairs, shapes.body, shapes.point_count)
    origin = pair_origin(shapes.body[pairs[c, 0]], shapes.body[pairs[c, 1]], X0)
    xp, qp = body_frame(bp, Xc, X0, origin)
    xs, qs = body_frame(bs, Xc, X0, origin)
    n, pen, ca, cb = pair_contact_geometry(xp, qp, xs, qs, sp, ss, kp, edge, shapes.type, shapes.xform, shapes.size,
                                           shapes.radius, shapes.point_start, shapes.points)
    p0 = ca + origin
    p1 = cb + origin
    if bp >= 0:
        p0 = xsim.quat_rotate_inv(qp, ca - xp) + com[bp]
    if bs >= 0:
        p1 = xsim.quat_rotate_inv(qs, cb - xs) + com[bs]
    shape0[t] = sp
    shape1[t] = ss
    point0[t] = p0
    point1[t] = p1
    normal[t] = -n
    depth[t] = pen
