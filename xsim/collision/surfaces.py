"""Shape surfaces and support points, the geometry every contact of xsim is made of: how deep a point
with a radius lies in a plane, sphere, box, capsule, cylinder, cone or ellipsoid (``surface_contact``:
outward normal and depth, exact), and a shape's support points, its points furthest along a direction
(``support_point``), which turn a curved rim or an ellipsoid into a contact point that moves with what it
touches (``contact_geometry``). All are ``@xsim.func``s generic over the scalar type and differentiated
by the kernel compiler; the solver's kernels and the collision pipeline's share them.

Shape frames: spheres, boxes, ellipsoids at their centre; capsules, cylinders and cones along their
local z (Newton's conventions; a cone's base at z = -half_height, its apex at +half_height); a plane is
z = 0 of its frame with normal +z. ``size``: sphere (r, 0, 0), box half extents, capsule, cylinder and
cone (r, half height, 0), ellipsoid semi-axes.
"""

import xsim
from xsim.sim.shapes import (
    SHAPE_BOX,
    SHAPE_CAPSULE,
    SHAPE_CONE,
    SHAPE_CYLINDER,
    SHAPE_ELLIPSOID,
    SHAPE_PLANE,
    SHAPE_SPHERE,
)


@xsim.func
def shape_rotation(sx):
    """The rotation of shape frame ``sx``: its quaternion normalized. The rotation formulas assume a
    unit quaternion; with a scaled one a push-out along the normal no longer resolves the depth the
    next iteration measures, so the rollout had a kink along the scale (its gradient there disagreed
    with finite differences). Normalized, a frame's scale does nothing and its gradient is zero."""
    return xsim.normalize(sx.q)


@xsim.func
def box_contact(p, half, r):
    """Contact of a sphere of radius ``r`` at local point ``p`` with a box of half extents
    ``half``: (outward normal in box coordinates, penetration depth)."""
    q = p - p  # a zero of p's type
    q[0] = xsim.clamp(p[0], -half[0], half[0])
    q[1] = xsim.clamp(p[1], -half[1], half[1])
    q[2] = xsim.clamp(p[2], -half[2], half[2])
    d = p - q
    dist2 = xsim.dot(d, d)
    n = p - p
    pen = r - r
    if dist2 > 0.0:
        # outside one face only (the usual case): that face's normal, without normalizing d, whose
        # adjoint divides by |d| and cancels catastrophically for a point a rounding error outside
        # (a wrong gradient for a particle landing exactly on a face)
        if d[1] == 0.0 and d[2] == 0.0:
            n[0] = xsim.sign(d[0])
            pen = r - xsim.abs(d[0])
        elif d[0] == 0.0 and d[2] == 0.0:
            n[1] = xsim.sign(d[1])
            pen = r - xsim.abs(d[1])
        elif d[0] == 0.0 and d[1] == 0.0:
            n[2] = xsim.sign(d[2])
            pen = r - xsim.abs(d[2])
        else:  # beyond an edge or a corner
            dist = xsim.sqrt(dist2)
            n = d / dist
            pen = r - dist
    else:
        # inside: leave through the nearest face
        fx = half[0] - xsim.abs(p[0])
        fy = half[1] - xsim.abs(p[1])
        fz = half[2] - xsim.abs(p[2])
        if fx <= fy and fx <= fz:
            n[0] = xsim.sign(p[0])
            pen = r + fx
        elif fy <= fz:
            n[1] = xsim.sign(p[1])
            pen = r + fy
        else:
            n[2] = xsim.sign(p[2])
            pen = r + fz
    return n, pen


ELLIPSOID_ITERATIONS = 12  # Newton steps for the closest point of an ellipsoid (monotone from its start)


@xsim.func
def radial_direction(p):
    """The unit vector from the z axis towards ``p`` in its xy plane (x on the axis), and the distance."""
    d = p - p
    rho2 = p[0] * p[0] + p[1] * p[1]
    rho = rho2 - rho2
    if rho2 > 0.0:
        rho = xsim.sqrt(rho2)
        d[0] = p[0] / rho
        d[1] = p[1] / rho
    else:
        d[0] = 1.0
    return d, rho


@xsim.func
def cylinder_contact(p, size, r):
    """Contact of a sphere of radius ``r`` at local ``p`` with a solid cylinder along z of radius
    ``size[0]`` and half height ``size[1]``: (outward normal, depth; <= 0 apart). Exact: the side,
    a cap, or (outside both) the rim."""
    radial, rho = radial_direction(p)
    axial = p - p
    axial[2] = 1.0
    if p[2] < 0.0:
        axial[2] = -1.0
    dr = rho - size[0]
    dz = xsim.abs(p[2]) - size[1]
    n = axial
    pen = r - dz
    if dr > 0.0 and dz > 0.0:
        dist = xsim.sqrt(dr * dr + dz * dz)
        n = (radial * dr + axial * dz) / dist
        pen = r - dist
    elif dr > dz:
        n = radial
        pen = r - dr
    return n, pen


@xsim.func
def cone_contact(p, size, r):
    """Contact of a sphere of radius ``r`` at local ``p`` with a solid cone along z, its base of
    radius ``size[0]`` at z = -``size[1]`` and its apex at +``size[1]``: (outward normal, depth). In the
    plane through the axis the cone is a triangle: the nearest of its base, its slant side, the
    rim and the apex, exactly."""
    radial, rho = radial_direction(p)
    R = size[0]
    h = size[1]
    zh = p[2] + h  # height above the base
    slant = xsim.sqrt(R * R + 4.0 * h * h)
    mr = 2.0 * h / slant  # the slant side's outward normal (radial, axial) components
    mz = R / slant
    s_slant = mr * (rho - R) + mz * zh  # signed distance to the slant side's line (> 0 outside)
    t = (R - rho) * mz + zh * mr  # position along the slant side from the rim (0) to the apex (slant)
    down = p - p
    down[2] = -1.0
    up = p - p
    up[2] = 1.0
    n = down
    pen = r + zh
    if s_slant <= 0.0 and zh >= 0.0:  # inside: leave through the nearer face
        if s_slant > -zh:
            n = radial * mr + up * mz
            pen = r - s_slant
    elif zh < 0.0 and rho <= R:  # below the base
        n = down
    elif s_slant > 0.0 and t > 0.0 and t < slant:
        n = radial * mr + up * mz
        pen = r - s_slant
    else:  # nearest the rim (t <= 0) or the apex
        c_rho = R
        c_z = -h
        if t > 0.0:
            c_rho = R - R
            c_z = h
        d_rho = rho - c_rho
        d_z = p[2] - c_z
        dist = xsim.sqrt(d_rho * d_rho + d_z * d_z)
        n = (radial * d_rho + up * d_z) / dist
        pen = r - dist
    return n, pen


@xsim.func
def ellipsoid_contact(p, size, r):
    """Contact of a sphere of radius ``r`` at local ``p`` with a solid ellipsoid of semi-axes ``size``:
    (outward normal, depth). The closest surface point is x_i = a_i^2 p_i / (t + a_i^2), t the root of
    sum (a_i p_i / (t + a_i^2))^2 = 1 above -min a_i^2; Newton's method from t0 = max_i (a_i |p_i| -
    a_i^2), where the sum is >= 1, climbs to it monotonically (the sum is convex and decreasing there)."""
    a2 = xsim.cw_mul(size, size)
    t = size[0] * xsim.abs(p[0]) - a2[0]
    for i in range(1, 3):
        t = xsim.max(t, size[i] * xsim.abs(p[i]) - a2[i])
    floor = -0.999999 * xsim.min(a2[0], xsim.min(a2[1], a2[2]))
    t = xsim.max(t, floor)
    step = 0
    while step < ELLIPSOID_ITERATIONS:  # a loop, not 12 unrolled copies (each inlined where this is called)
        f = r - r - 1.0
        df = r - r
        for i in range(3):
            w = a2[i] + t
            u = size[i] * p[i] / w
            f = f + u * u
            df = df - 2.0 * u * u / w
        if df < 0.0:
            t = xsim.max(t - f / df, floor)
        step += 1
    x = p - p
    g = p - p
    level = r - r - 1.0  # > 0 outside
    for i in range(3):
        x[i] = a2[i] * p[i] / (a2[i] + t)
        g[i] = x[i] / a2[i]
        level = level + p[i] * p[i] / a2[i]
    n = p - p
    n[2] = 1.0
    pen = r + size[2]
    if xsim.dot(g, g) > 0.0:
        n = xsim.normalize(g)
        dist = xsim.length(p - x)
        pen = r + dist
        if level > 0.0:
            pen = r - dist
    return n, pen


@xsim.func
def surface_contact(kind: int, p, size, r):
    """Contact of a sphere of radius ``r`` centred at ``p`` (surface shape coordinates) with the
    surface of a plane (z = 0, normal +z), sphere, box, capsule, cylinder, cone or ellipsoid of
    ``size``: (outward unit normal, penetration depth; <= 0 when apart)."""
    n = p - p
    pen = r - r
    if kind == SHAPE_PLANE:
        n[2] = 1.0
        pen = r - p[2]
    elif kind == SHAPE_BOX:
        n, pen = box_contact(p, size, r)
    elif kind == SHAPE_CYLINDER:
        n, pen = cylinder_contact(p, size, r)
    elif kind == SHAPE_CONE:
        n, pen = cone_contact(p, size, r)
    elif kind == SHAPE_ELLIPSOID:
        n, pen = ellipsoid_contact(p, size, r)
    elif kind == SHAPE_SPHERE or kind == SHAPE_CAPSULE:
        axis_point = p - p
        if kind == SHAPE_CAPSULE:
            axis_point[2] = xsim.clamp(p[2], -size[1], size[1])
        d = p - axis_point
        dist2 = xsim.dot(d, d)
        if dist2 > 0.0:
            dist = xsim.sqrt(dist2)
            n = d / dist
            pen = size[0] + r - dist
    return n, pen


SUPPORT_ITERATIONS = 6  # steps of a support contact's search (the first is exact against a plane or a face)


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
    a's point furthest against b's outward normal, searched in ``SUPPORT_ITERATIONS`` steps from a's
    centre: each measures b's normal at the last point and moves to a's support point against the
    mean of the normals seen so far. Against a plane or a box face every normal is the same and the
    first step is exact; against a curved surface the mean damps the search, which converges where
    a's radius of curvature there is not many times b's (an ellipsoid of 0.225 m on a 0.1 m capsule:
    a step's error 2.25 times the last's without the mean, under 1% of it after six with it). Its
    position is a function of both poses, so the gradient flows through it."""
    qs = qb * sxb.q
    ps = xb + xsim.quat_rotate(qb, sxb.p)
    local = point
    searches = 0
    if is_support_slot(kind_a, k):
        local = point - point
        searches = SUPPORT_ITERATIONS
    d = point - point
    pw = xa
    n_local = d
    pen = ra
    # the search's steps and the final measurement in one loop, so that surface_contact (every kind of
    # b's surface) is written out once in the generated code, not twice
    for it in range(searches + 1):
        pw = xa + xsim.quat_rotate(qa, sxa.p + xsim.quat_rotate(sxa.q, local))
        n_local, pen = surface_contact(kind_b, xsim.quat_rotate_inv(qs, pw - ps), size_b, ra)
        if it < searches:
            d = d - xsim.quat_rotate_inv(sxa.q, xsim.quat_rotate_inv(qa, xsim.quat_rotate(qs, n_local)))
            local = support_point(kind_a, size_a, k, d)
    n = xsim.quat_rotate(qs, n_local)
    ca = pw - n * ra
    return n, pen, ca, ca + n * pen
