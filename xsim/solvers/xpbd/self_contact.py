"""Particle-particle contact and cloth self-collision: the contacts between particles that
``xsim.collision.proximity`` lists once per substep (or step), resolved in every iteration after the
constraints and before the shapes. Module-level kernels, generic over the scalar type.

Particle pairs. Two particles closer than the sum of their radii are pushed apart along the line between
them, each by its share of the depth by inverse mass, with position-level Coulomb friction against their
relative motion since the substep start (static inside the cone ``mu * depth``, else shortened by it;
``mu``: ``model.particle_mu``). Pairs where one is free (in no constraint; ``particle_roles``) meet: free
particles meet each other and every cloth, soft body or chain particle; those meet each other through
their own constraints and self-collision only. After the substep a velocity pass gives each pair that
approached faster than the bounce speed (pre-solve velocities) the restitution ``model.particle_restitution``
of its approach speed, with friction up to mu times that impulse, as the shapes' velocity pass does.

Cloth self-collision. A vertex v of a self-colliding cloth is kept ``(thickness_v + thickness_t) / 2``
(its mesh neighbours: ``CREASE`` of that, so that a sharp fold does not pass through itself) from each listed
triangle t (of its cloth or of another self-colliding one) as one constraint on four
particles, ``C = (x_v - (u a + v b + w c)) . n - thickness >= 0`` with the closest point's barycentrics
(u, v, w) and the inverse masses weighted by them (the generalized inverse mass ``w_v + u^2 w_a + v^2 w_b
+ w^2 w_c``). Where the closest point is inside the face, ``n`` is the face normal on the side the vertex
was at the substep start: a vertex that crossed the face during the substep is pushed back to that side,
not out through the far side, which is the guarantee that nothing tunnels as long as no vertex crosses a
face and leaves its candidate box within one substep (the candidates cover the substep's motion, and the
test scenes check every frame with an independent triangle-triangle test). Near an edge or a corner
``n`` points from the closest point to the vertex (so a vertex can pass round the cloth's border).
Friction between the layers acts on the vertex's motion relative to the triangle's point, as for pairs.

Edges. Two edges of self-colliding cloths whose closest points lie inside both segments are kept the same
distance apart (a constraint on four particles, the inverse masses weighted by the closest points'
parameters), along the direction between the closest points at the substep start: two edges that cross
during a substep are pushed back. With vertex-triangle contacts alone a cloth whose thickness is under half
its edges could let two edges pass through each other.

Jacobi. Each particle moves by the mean correction of the contacts it takes part in (as a particle of a
pair, as a vertex, as a triangle's corner and as an edge's end), summed in a fixed order; no atomics, so a
step repeats bit for bit. Without a Tape each vertex-triangle and edge-edge contact is computed once into
scratch slots and gathered; on a Tape each particle computes its contacts itself (the same values), so that
no slot array per iteration has to be kept for the backward pass. The Jacobi mean over many contacts
converges slowly (a heap of particles, a free triangle stopped by one edge): more iterations close the gap.
The generated adjoints differentiate every contact that is active (which contacts are candidates is a constant of the
backward pass, and an active contact stays active under an infinitesimal change), exactly where the
forward is smooth, including friction's branches.
"""

import xsim
from xsim.collision.proximity import CREASE, closest_weights, edge_pair_particles, segment_closest
from xsim.sim.generic import Float, Floats, Ints, Ints2, Vec3, Vec3s

Vec3s3 = xsim.array(dtype=Vec3, ndim=3)


@xsim.func
def pair_thickness(thickness_v, thickness_t, entry: int):
    """The distance a vertex-triangle pair keeps: the mean of its thicknesses, ``CREASE`` of it for a crease
    pair (``entry``: the row's ``2 t + crease``, ``xsim.collision.proximity``)."""
    th = (thickness_v + thickness_t) * 0.5
    if entry % 2 == 1:
        th = th * CREASE
    return th


@xsim.func
def friction_share(d_rel, n, pen, mu, inv_w):
    """The tangential part of a contact's correction per unit inverse mass: the relative tangential
    displacement ``d_rel`` cancelled inside the cone ``mu * pen`` (static), else shortened by it
    (dynamic), over the generalized inverse mass (``inv_w``: its reciprocal)."""
    dt = d_rel - n * xsim.dot(d_rel, n)
    lt2 = xsim.dot(dt, dt)
    lim = mu * pen
    if lt2 > lim * lim:
        # only here is |dt| > 0
        return dt * (-lim * inv_w / xsim.sqrt(lt2))
    return dt * (-inv_w)


@xsim.func
def pair_contact(xi, xj, xi0, xj0, wi, wj, r, mu):
    """Particle i's correction from its contact with particle j (radii summing to ``r``), and whether it
    acts (module docstring)."""
    d = xi - xj
    dist2 = xsim.dot(d, d)
    if dist2 < r * r and dist2 > 0.0 and wi + wj > 0.0:
        dist = xsim.sqrt(dist2)
        n = d / dist
        pen = r - dist
        inv_w = 1.0 / (wi + wj)
        g = n * (pen * inv_w) + friction_share((xi - xi0) - (xj - xj0), n, pen, mu, inv_w)
        return g * wi, True
    return d - d, False


@xsim.func
def vertex_triangle_contact(xp, xa, xb, xc, xp0, xa0, xb0, xc0, wp, wa, wb, wc, th, mu):
    """The corrections of a vertex and the three corners of a triangle from the vertex's contact with the
    triangle at distance ``th``, and whether it acts (module docstring)."""
    k = closest_weights(xp, xa, xb, xc)
    u = k[0]
    v = k[1]
    w = k[2]
    d = xp - (xa * u + xb * v + xc * w)
    zero = xp - xp
    n = zero
    pen = th - th
    face = xsim.cross(xb - xa, xc - xa)
    if u > 0.0 and v > 0.0 and w > 0.0 and xsim.dot(face, face) > 0.0:
        side = xsim.sign(xsim.dot(xp0 - xa0, xsim.cross(xb0 - xa0, xc0 - xa0)))
        if side == 0.0:
            side = side + 1.0
        n = xsim.normalize(face) * side
        pen = th - xsim.dot(d, n)
    else:
        dist2 = xsim.dot(d, d)
        if dist2 > 0.0:
            dist = xsim.sqrt(dist2)
            n = d / dist
            pen = th - dist
    weight = wp + u * u * wa + v * v * wb + w * w * wc
    if pen > 0.0 and weight > 0.0 and xsim.dot(n, n) > 0.0:
        inv_w = 1.0 / weight
        moved = (xp - xp0) - ((xa - xa0) * u + (xb - xb0) * v + (xc - xc0) * w)
        g = n * (pen * inv_w) + friction_share(moved, n, pen, mu, inv_w)
        return g * wp, g * (-u * wa), g * (-v * wb), g * (-w * wc), True
    return zero, zero, zero, zero, False


@xsim.func
def edge_edge_contact(xa, xb, xc, xd, xa0, xb0, xc0, xd0, wa, wb, wc, wd, th, mu):
    """The corrections of the ends of edges ab and cd from their contact at distance ``th``, and whether it
    acts: only where the closest points are inside both segments (at an end it is a vertex-triangle or
    vertex-edge contact, which the triangles' contacts take). The normal is the direction between the
    closest points at the substep start (with the current parameters), so edges that crossed during the
    substep are pushed back, not through."""
    zero = xa - xa
    s, t = segment_closest(xa, xb, xc, xd)
    if s > 0.0 and s < 1.0 and t > 0.0 and t < 1.0:
        d = xa + (xb - xa) * s - (xc + (xd - xc) * t)
        d0 = xa0 + (xb0 - xa0) * s - (xc0 + (xd0 - xc0) * t)
        weight = (1.0 - s) * (1.0 - s) * wa + s * s * wb + (1.0 - t) * (1.0 - t) * wc + t * t * wd
        if xsim.dot(d0, d0) > 0.0 and weight > 0.0:
            n = xsim.normalize(d0)
            pen = th - xsim.dot(d, n)
            if pen > 0.0:
                inv_w = 1.0 / weight
                g = n * (pen * inv_w) + friction_share(d - d0, n, pen, mu, inv_w)
                return g * ((1.0 - s) * wa), g * (s * wb), g * (-(1.0 - t) * wc), g * (-t * wd), True
    return zero, zero, zero, zero, False


@xsim.func
def edge_contact_of(x, x0, inv_mass, thickness, edges, e: int, entry: int, mu):
    """``edge_edge_contact`` of edge ``e`` and the edge of its row's ``entry`` (``2 f + crease``)."""
    pa, pb, pc, pd = edge_pair_particles(edges, e, entry)
    th = pair_thickness(thickness[pa], thickness[pc], entry)
    return edge_edge_contact(x[pa], x[pb], x[pc], x[pd], x0[pa], x0[pb], x0[pc], x0[pd], inv_mass[pa],
                             inv_mass[pb], inv_mass[pc], inv_mass[pd], th, mu)


@xsim.func
def vertex_contact_of(x, x0, inv_mass, thickness, tris, v: int, entry: int, mu):
    """``vertex_triangle_contact`` of vertex ``v`` and the triangle of its row's ``entry`` (``2 t + crease``)."""
    t = entry // 2
    a = tris[t, 0]
    b = tris[t, 1]
    c = tris[t, 2]
    th = pair_thickness(thickness[v], thickness[a], entry)
    return vertex_triangle_contact(x[v], x[a], x[b], x[c], x0[v], x0[a], x0[b], x0[c], inv_mass[v], inv_mass[a],
                                   inv_mass[b], inv_mass[c], th, mu)


@xsim.func
def share(role: int, c0, c1, c2, c3):
    """The correction of a contact's particle ``role`` (0..3) of its four."""
    out = c3
    if role == 0:
        out = c0
    elif role == 1:
        out = c1
    elif role == 2:
        out = c2
    return out


@xsim.func
def pair_corrections(x, x0, inv_mass, radius, mu, pairs, pair_count, i: int):
    """The sum of particle i's corrections from its active particle pairs, and their number."""
    xi = x[i]
    acc = xi - xi
    active = 0
    for k in range(pair_count[i]):
        j = pairs[i, k]
        dp, hit = pair_contact(xi, x[j], x0[i], x0[j], inv_mass[i], inv_mass[j], radius[i] + radius[j], mu)
        if hit:
            acc = acc + dp
            active += 1
    return acc, active


@xsim.kernel
def collide_particles(x: Vec3s, x0: Vec3s, inv_mass: Floats, radius: Floats, thickness: Floats, mu: Float,
                      pairs: Ints2, pair_count: Ints, vertex_tris: Ints2, vertex_tri_count: Ints, corners: Ints,
                      corner_first: Ints, tris: Ints2, edge_edges: Ints2, edge_corners: Ints, edge_corner_first: Ints,
                      edges: Ints2, x_out: Vec3s):
    """One Jacobi pass of the particle contacts at ``x`` (``x0``: the substep start) into ``x_out``: each
    dynamic particle moves by the mean correction of its active contacts, as a particle of a pair
    (``pairs``), as a vertex (``vertex_tris`` into ``tris``) and as a triangle's corner (its segment of ``corners``
    from ``corner_first``: ``xsim.collision.proximity``'s encoding). Each contact is computed here by each of its particles;
    ``measure_vertex_triangles`` and ``gather_particle_contacts`` compute each once, with the same results bit
    for bit, where no Tape needs their scratch rows kept."""
    i = xsim.tid()
    xi = x[i]
    wi = inv_mass[i]
    if wi > 0.0:
        acc, active = pair_corrections(x, x0, inv_mass, radius, mu, pairs, pair_count, i)
        for k in range(vertex_tri_count[i]):
            cp, ca, cb, cc, hit = vertex_contact_of(x, x0, inv_mass, thickness, tris, i, vertex_tris[i, k], mu)
            if hit:
                acc = acc + cp
                active += 1
        width = vertex_tris.shape[1]
        for k in range(corner_first[i], corner_first[i + 1]):
            e = corners[k]
            corner = e % 4
            slot = e // 4
            p = slot // width
            cp, ca, cb, cc, hit = vertex_contact_of(x, x0, inv_mass, thickness, tris, p, vertex_tris[p, slot % width],
                                                    mu)
            if hit:
                acc = acc + share(corner, cp, ca, cb, cc)
                active += 1
        edge_width = edge_edges.shape[1]
        for k in range(edge_corner_first[i], edge_corner_first[i + 1]):
            code = edge_corners[k]
            role = code % 4
            slot = code // 4
            e = slot // edge_width
            da, db, dc, dd, hit = edge_contact_of(x, x0, inv_mass, thickness, edges, e, edge_edges[e, slot % edge_width],
                                                  mu)
            if hit:
                acc = acc + share(role, da, db, dc, dd)
                active += 1
        if active > 0:
            xi = xi + acc * (1.0 / inv_mass.dtype(active))
    x_out[i] = xi


@xsim.kernel
def measure_vertex_triangles(x: Vec3s, x0: Vec3s, inv_mass: Floats, thickness: Floats, mu: Float,
                             vertex_tris: Ints2, vertex_tri_count: Ints, tris: Ints2, slots: Vec3s3, hits: Ints2):
    """Each vertex's contacts with the triangles of its row, computed once (``vertex_triangle_contact``):
    the corrections of the vertex and of the triangle's three corners in ``slots[v, k, 0..3]``, 1 in
    ``hits[v, k]`` where the contact acts (else 0). ``gather_particle_contacts`` adds them up."""
    i = xsim.tid()
    for k in range(vertex_tri_count[i]):
        cp, ca, cb, cc, hit = vertex_contact_of(x, x0, inv_mass, thickness, tris, i, vertex_tris[i, k], mu)
        slots[i, k, 0] = cp
        slots[i, k, 1] = ca
        slots[i, k, 2] = cb
        slots[i, k, 3] = cc
        hits[i, k] = xsim.where(hit, 1, 0)


@xsim.kernel
def measure_edge_edges(x: Vec3s, x0: Vec3s, inv_mass: Floats, thickness: Floats, mu: Float, edge_edges: Ints2,
                       edge_edge_count: Ints, edges: Ints2, slots: Vec3s3, hits: Ints2):
    """Each edge's contacts with the edges of its row, computed once (``edge_edge_contact``): the corrections
    of the four ends in ``slots[e, k, 0..3]`` (e's ends, then the other's), 1 in ``hits[e, k]`` where it acts."""
    e = xsim.tid()
    for k in range(edge_edge_count[e]):
        da, db, dc, dd, hit = edge_contact_of(x, x0, inv_mass, thickness, edges, e, edge_edges[e, k], mu)
        slots[e, k, 0] = da
        slots[e, k, 1] = db
        slots[e, k, 2] = dc
        slots[e, k, 3] = dd
        hits[e, k] = xsim.where(hit, 1, 0)


@xsim.kernel
def gather_particle_contacts(x: Vec3s, x0: Vec3s, inv_mass: Floats, radius: Floats, mu: Float, pairs: Ints2,
                             pair_count: Ints, slots: Vec3s3, hits: Ints2, vertex_tri_count: Ints, corners: Ints,
                             corner_first: Ints, edge_slots: Vec3s3, edge_hits: Ints2, edge_corners: Ints,
                             edge_corner_first: Ints, x_out: Vec3s):
    """``collide_particles`` with the vertex-triangle contacts read from ``measure_vertex_triangles``'s
    ``slots`` instead of computed again: the same sums in the same order, so the same positions bit for bit."""
    i = xsim.tid()
    xi = x[i]
    wi = inv_mass[i]
    if wi > 0.0:
        acc, active = pair_corrections(x, x0, inv_mass, radius, mu, pairs, pair_count, i)
        for k in range(vertex_tri_count[i]):
            if hits[i, k] != 0:
                acc = acc + slots[i, k, 0]
                active += 1
        width = hits.shape[1]
        for k in range(corner_first[i], corner_first[i + 1]):
            e = corners[k]
            slot = e // 4
            p = slot // width
            s = slot % width
            if hits[p, s] != 0:
                acc = acc + slots[p, s, e % 4]
                active += 1
        edge_width = edge_hits.shape[1]
        for k in range(edge_corner_first[i], edge_corner_first[i + 1]):
            code = edge_corners[k]
            slot = code // 4
            e = slot // edge_width
            s = slot % edge_width
            if edge_hits[e, s] != 0:
                acc = acc + edge_slots[e, s, code % 4]
                active += 1
        if active > 0:
            xi = xi + acc * (1.0 / inv_mass.dtype(active))
    x_out[i] = xi


@xsim.kernel
def bounce_particle_pairs(x: Vec3s, v: Vec3s, v_start: Vec3s, gravity: Vec3, h: Float, inv_mass: Floats,
                          radius: Floats, restitution: Float, mu: Float, bounce_speed: Float, pairs: Ints2,
                          pair_count: Ints, v_out: Vec3s):
    """The particle pairs' velocity pass at the end of a substep: each pair touching at ``x`` (within 0.1%
    of its radii) whose pre-solve relative velocity (``v_start + g h``) approached faster than
    ``bounce_speed`` gets the normal impulse that makes it separate at ``restitution`` times that speed,
    and friction up to mu times it; each particle takes its share by inverse mass, the mean over its
    bouncing pairs."""
    i = xsim.tid()
    vi = v[i]
    wi = inv_mass[i]
    if wi > 0.0:
        acc = vi - vi
        active = 0
        pre_i = v_start[i] + gravity * h
        for k in range(pair_count[i]):
            j = pairs[i, k]
            d = x[i] - x[j]
            r = (radius[i] + radius[j]) * 1.001
            dist2 = xsim.dot(d, d)
            wsum = wi + inv_mass[j]
            if dist2 < r * r and dist2 > 0.0:
                n = d / xsim.sqrt(dist2)
                vn0 = xsim.dot(pre_i - (v_start[j] + gravity * h), n)
                if vn0 < -bounce_speed:
                    rel = vi - v[j]
                    vn = xsim.dot(rel, n)
                    target = -restitution * vn0
                    if vn < target:
                        pn = (target - vn) / wsum
                        dv = n * pn
                        vt = rel - n * vn
                        lt2 = xsim.dot(vt, vt)
                        if lt2 > 0.0:
                            lt = xsim.sqrt(lt2)
                            dv = dv - vt * (xsim.min(lt / wsum, mu * pn) / lt)
                        acc = acc + dv * wi
                        active += 1
        if active > 0:
            vi = vi + acc * (1.0 / inv_mass.dtype(active))
    v_out[i] = vi
