"""The XPBD solver's kernels, written in xsim's kernel language.

Kernels are defined once, generic over the scalar type (``xsim.sim.generic``'s ``Float``, ``Vec3s``...):
launched with float32 arrays (speed) or float64 arrays (gradient checks) they run in that precision;
the solver binds them up front (``generic.specialized``), one compiler call per scalar type. The
``@xsim.func`` helpers are generic too: they are inlined with their arguments' types.

Data flow of one iteration (Jacobi, see ``solver.py``):

1. ``gather_entries`` copies each particle's (position, split inverse mass) into its entries of
   the constraint-major entry array (constraint c of arity k owns entries ``k c .. k c + k - 1`` of
   its kind's block; the layout is ``particle_constraints.py``'s);
2. each constraint kernel reads its own entries and its Lagrange multiplier, writes the new
   multiplier and one position correction per constraint end into ``delta``, whose row p holds
   particle p's corrections (one column per constraint of p);
3. ``apply_corrections`` sums its particle's own ``delta`` row and averages; contacts with shapes
   follow (``particle_contacts.py``).

Every kernel reads only rows indexed by its own thread id where data meet (entry rows, ``delta``
rows), so its generated adjoint adds gradients with plain adds instead of atomics (a CPU atomic
float add costs 5 to 10 ns, and they made the backward pass 3 to 10 times slower); the scattered
writes' adjoints are plain reads. Every kernel writes arrays it does not read, which is what lets
a Tape record a rollout.

Backward pass of one iteration (``ParticleConstraints.backward``; on a Tape the iteration's launches run
off it and this is recorded in their place), written out rather than generated:

1. ``positions_adjoint`` passes x_next's gradient to x and gives each particle's entry and the gradient
   of the corrections added to it (x_next's over the slot count);
2. ``solve_distance_adjoint`` / ``solve_bending_adjoint`` read those per particle (the forward's entries
   are long overwritten) and store each end's gradient into its own entry of a per-entry buffer; area
   constraints take the generated adjoint of ``solve_area_into_positions``;
3. ``gather_entries_adjoint`` sums each particle's entries into x's and the inverse mass's gradients.

They compute what the generated adjoints of ``gather_entries``, ``keep_positions`` and the
``solve_*_into_positions`` stand-ins compute, to the bit (tests/solvers/test_xpbd_kernels.py), in about
40% less time at one thread (bench/README): no entries gathered again, each particle's values read once, no
replay. In a kernel, ``a[i] += v`` is an atomic add (Warp's semantics, a compare-and-swap loop on the CPU): they write
``a[i] = a[i] + v`` into their own rows.
"""


import xsim
from xsim.sim.generic import Float, Floats, Ints, Ints2, Vec3, Vec3s, Vec3s2, Vec4s

from .rigid_kernels import generalized_inv_mass

UNROLLED_SLOTS = 32  # slots a particle gathers in straight-line code (a cloth vertex has 18: 6 + 12)


@xsim.func
def slot_sum(delta, i: int, count: int, zero):
    """The sum of particle ``i``'s first ``count`` corrections ``delta[i, 0 .. count - 1]`` (``zero``:
    a zero of their type). Unrolled: a dynamic loop runs a counted loop per slot."""
    acc = zero
    for k in range(16):
        if k < count:
            acc = acc + delta[i, k]
    for k in range(16, UNROLLED_SLOTS):
        if k < count:
            acc = acc + delta[i, k]
    for k in range(UNROLLED_SLOTS, count):
        acc = acc + delta[i, k]
    return acc


@xsim.func_grad(slot_sum)
def slot_sum_grad(delta, i: int, count: int, zero, adj):
    """Each summed slot receives the sum's adjoint: one loop, where the generated adjoint replayed
    the unrolled sum and reversed each conditional add (4x the forward's time)."""
    for k in range(count):
        xsim.adjoint[delta][i, k] += adj
    xsim.adjoint[zero] += adj

# -------------------------------------------------------------------------------------------------
# contact helpers (generic funcs)


@xsim.func
def worlds_meet(a: int, b: int):
    """Whether entities of worlds ``a`` and ``b`` interact: the same world, or either global (-1)."""
    return a < 0 or b < 0 or a == b


@xsim.func
def apply_friction(x, x0, n, pen, mu):
    """Position-level Coulomb friction (Macklin et al. 2014): cancel the tangential displacement
    since the substep start when it is inside the cone ``mu * pen`` (static), else shorten it by
    ``mu * pen`` (dynamic). ``pen`` is the normal correction just applied, in metres."""
    dx = x - x0
    dt = dx - n * xsim.dot(dx, n)
    lt2 = xsim.dot(dt, dt)
    lim = mu * pen
    if lt2 <= lim * lim:
        return x - dt
    # only here is |dt| > 0, so its derivative is finite
    return x - dt * (lim / xsim.sqrt(lt2))


@xsim.func
def push_out(x, x0, n, pen, mu):
    """Move ``x`` by ``pen`` along the contact normal ``n`` when it penetrates (pen > 0), then
    apply friction."""
    if pen > 0.0:
        return apply_friction(x + n * pen, x0, n, pen, mu)
    return x


@xsim.func
def bounce_impulse(v_rel, v_rel_pre, n, restitution, mu, bounce_speed, wp, q, inv_mass, inv_inertia, arm):
    """Velocity-level contact of a particle (inverse mass ``wp``) with a surface of outward normal
    ``n``, belonging to a body (rotation ``q``, ``inv_mass``, ``inv_inertia``, contact point at
    ``arm`` from its com; zero masses: a static collider): restitution (Macklin et al. 2019) and
    Coulomb friction. When the pre-solve normal velocity ``v_rel_pre`` (relative to the surface)
    approached faster than ``bounce_speed``, a normal impulse brings the relative normal velocity
    up to ``restitution`` times the approach speed, and a tangential impulse of at most ``mu`` times
    it resists the sliding (the position pass already applied mu times its own normal push).
    Returns the impulse on the particle (kg m/s; the body takes the opposite)."""
    impulse = n - n
    vn0 = xsim.dot(v_rel_pre, n)
    if vn0 < -bounce_speed:
        vn = xsim.dot(v_rel, n)
        target = -restitution * vn0
        if vn < target:
            pn = (target - vn) / (wp + generalized_inv_mass(q, inv_mass, inv_inertia, arm, n))
            impulse = n * pn
            vt = v_rel - n * vn
            lt2 = xsim.dot(vt, vt)
            if lt2 > 0.0:
                lt = xsim.sqrt(lt2)
                t = vt / lt
                jt = xsim.min(lt / (wp + generalized_inv_mass(q, inv_mass, inv_inertia, arm, t)), mu * pn)
                impulse = impulse - t * jt
    return impulse


@xsim.func
def reflect(x, x_start, v_start, gravity, h, n, restitution):
    """Where a particle that bounced this substep off a surface of normal ``n`` (it ends on the surface
    at ``x``) is at the end of the substep: the part of its free-flight prediction behind the surface,
    reflected and scaled by ``restitution``, so that the bounce happens at the moment of impact and the
    trajectory does not depend on which substep the impact falls in (a continuous rollout)."""
    x_pred = x_start + v_start * h + gravity * (0.5 * h * h)
    return x + n * (restitution * xsim.max(xsim.dot(x - x_pred, n), 0.0))


@xsim.func
def closest_point_on_triangle(p, a, b, c):
    """The point of triangle (a, b, c) closest to ``p`` (Voronoi regions, Ericson 2004)."""
    ab = b - a
    ac = c - a
    ap = p - a
    d1 = xsim.dot(ab, ap)
    d2 = xsim.dot(ac, ap)
    if d1 <= 0.0 and d2 <= 0.0:
        return a
    bp = p - b
    d3 = xsim.dot(ab, bp)
    d4 = xsim.dot(ac, bp)
    if d3 >= 0.0 and d4 <= d3:
        return b
    vc = d1 * d4 - d3 * d2
    if vc <= 0.0 and d1 >= 0.0 and d3 <= 0.0:
        return a + ab * (d1 / (d1 - d3))
    cp = p - c
    d5 = xsim.dot(ab, cp)
    d6 = xsim.dot(ac, cp)
    if d6 >= 0.0 and d5 <= d6:
        return c
    vb = d5 * d2 - d1 * d6
    if vb <= 0.0 and d2 >= 0.0 and d6 <= 0.0:
        return a + ac * (d2 / (d2 - d6))
    va = d3 * d6 - d5 * d4
    if va <= 0.0 and d4 - d3 >= 0.0 and d5 - d6 >= 0.0:
        return b + (c - b) * ((d4 - d3) / ((d4 - d3) + (d5 - d6)))
    s = 1.0 / (va + vb + vc)
    return a + ab * (vb * s) + ac * (vc * s)


# -------------------------------------------------------------------------------------------------
# kernels (generic over the scalar type; the solver takes them from ``specialized``)


@xsim.kernel
def integrate_particles(x: Vec3s, v: Vec3s, inv_mass: Floats, gravity: Vec3, h: Float, x_pred: Vec3s):
    """Predict positions: x + v h + g h^2 / 2 for dynamic particles (exact free flight),
    x + v h for pinned ones (they move at their own velocity: that is how kinematic
    particles are driven)."""
    i = xsim.tid()
    xp = x[i] + v[i] * h
    if inv_mass[i] > 0.0:
        xp = xp + gravity * (0.5 * h * h)
    x_pred[i] = xp


@xsim.kernel
def kinematic_velocities(x: Vec3s, target: Vec3s, inv_mass: Floats, v: Vec3s, inv_dt: Float, v_out: Vec3s):
    """Pinned particles get the velocity that reaches their target at the end of the step."""
    i = xsim.tid()
    vi = v[i]
    if inv_mass[i] == 0.0:
        vi = (target[i] - x[i]) * inv_dt
    v_out[i] = vi


@xsim.kernel
def gather_entries(x: Vec3s, inv_mass: Floats, split: Floats, slot_count: Ints, entry_index: Ints2, entries: Vec4s):
    """Copy each particle's (position, inverse mass times its constraint count: mass splitting)
    into its entries of the constraint-major entry array, so the constraint kernels read their
    own rows (and their adjoints add gradients without atomics)."""
    i = xsim.tid()
    p = x[i]
    e = entries.dtype(p[0], p[1], p[2], inv_mass[i] * split[i])
    count = slot_count[i]
    for k in range(16):
        if k < count:
            entries[entry_index[i, k]] = e
    for k in range(16, UNROLLED_SLOTS):
        if k < count:
            entries[entry_index[i, k]] = e
    for k in range(UNROLLED_SLOTS, count):
        entries[entry_index[i, k]] = e


@xsim.kernel
def apply_corrections(x: Vec3s, delta: Vec3s2, slot_count: Ints, inv_mass: Floats, x_out: Vec3s):
    """Jacobi step for one particle: x += the mean of its slot corrections (each computed with
    its mass split by the count, so the mean is the full XPBD correction). Contacts follow
    (``particle_contacts.py``). The mean's weight 1 / count comes from the integer count, which has no
    gradient: with a float weight array the adjoint replayed the whole slot sum for the weight's
    gradient (2.4x the forward's time)."""
    i = xsim.tid()
    xi = x[i]
    count = slot_count[i]
    if inv_mass[i] > 0.0 and count > 0:
        xi = xi + slot_sum(delta, i, count, type(xi)()) * (1.0 / inv_mass.dtype(count))
    x_out[i] = xi


@xsim.kernel
def keep_positions(x: Vec3s, x_out: Vec3s):
    """With the constraint kernels' stand-ins (``solve_*_into_positions``, which add the corrections' mean to
    x_out), the function of a Jacobi pass whose generated adjoint is the reference for
    ``ParticleConstraints.backward`` (tests/solvers/test_xpbd_kernels.py): x_out = x. Its adjoint passes x_out's
    gradient on to x."""
    i = xsim.tid()
    x_out[i] = x[i]


@xsim.func
def add_correction(x_next, i: int, d, w, slot_count):
    """A constraint kernel's stand-in's share of ``apply_corrections``: particle ``i`` (split inverse mass
    ``w``) moves by its correction ``d`` over its slot count, a pinned one (w = 0) not at all. Its adjoint
    reads x_next's gradient times that weight 1 / count: the value apply_corrections' adjoint gives the
    slot, without the (n, width) slot gradients it writes and the constraint's adjoint reads and zeroes."""
    if w > 0.0:
        xsim.atomic_add(x_next, i, d * (1.0 / type(w)(slot_count[i])))


@xsim.kernel
def update_velocities(x: Vec3s, x_start: Vec3s, inv_mass: Floats, gravity: Vec3, h: Float, damping: Float,
                      v_out: Vec3s, x_out: Vec3s):
    """End-of-substep velocity of a dynamic particle: (x - x_start) / h, damped implicitly,
    plus g h / 2 (the mean velocity over the substep plus the half substep of gravity left,
    which makes free flight exact); the positions are copied to ``x_out`` (the step's output
    when no contact pass follows; restitution is ``particle_contacts.py``'s)."""
    i = xsim.tid()
    xi = x[i]
    vi = (xi - x_start[i]) * (1.0 / h)
    if inv_mass[i] > 0.0:
        vi = vi * (1.0 / (1.0 + damping * h)) + gravity * (0.5 * h)
    v_out[i] = vi
    x_out[i] = xi


@xsim.func
def distance_active(d, wi, wj, alpha):
    """Whether the distance update acts: the ends apart, and something movable or compliant."""
    return xsim.dot(d, d) > 0.0 and wi + wj + alpha > 0.0


@xsim.func
def distance_terms(d, wi, wj, rest, alpha, gamma, lc, motion, damped: bool):
    """The distance update's forward intermediates (where ``distance_active``), shared by the update
    and its chain rule: (|d|, d / |d|, the multiplier change's numerator and denominator)."""
    length = xsim.sqrt(xsim.dot(d, d))
    n = d / length
    num = rest - length - alpha * lc
    if damped:
        num = num - gamma * xsim.dot(n, motion)
    return length, n, num, (1.0 + gamma) * (wi + wj) + alpha


@xsim.func
def distance_update(d, wi, wj, rest, alpha, gamma, lc, relaxation, motion, damped: bool):
    """One XPBD update of the distance constraint C = |d| - rest between ends i and j (``d = xi - xj``;
    ``wi``, ``wj``: their split inverse masses; ``alpha``, ``gamma``: compliance / h^2 and XPBD's
    damping factor; ``lc``: the multiplier; ``motion``: the ends' relative motion since the substep
    start, read when ``damped``): (multiplier change, correction of i, correction of j)."""
    dl = type(lc)(0.0)
    di = type(d)()
    dj = type(d)()
    if distance_active(d, wi, wj, alpha):
        _length, n, num, den = distance_terms(d, wi, wj, rest, alpha, gamma, lc, motion, damped)
        dl = num * (relaxation / den)
        di = n * (wi * dl)
        dj = n * (-wj * dl)
    return dl, di, dj


@xsim.func
def distance_grads(d, wi, wj, rest, alpha, gamma, lc, relaxation, motion, damped: bool, adj_dl, adj_di, adj_dj):
    """The chain rule of ``distance_update`` by hand: the gradients of (relaxation, wi, wj, alpha, gamma,
    rest, lc, motion, d) given those of its results (zero where it does not act). Two divisions (1 / |d|,
    1 / den) where the update has five: the adjoint runs them in a chain, and their latency was most of its
    time. Shared by ``distance_update_grad`` and ``solve_distance_adjoint``."""
    g_relax = type(lc)(0.0)
    g_wi = type(lc)(0.0)
    g_wj = type(lc)(0.0)
    g_alpha = type(lc)(0.0)
    g_gamma = type(lc)(0.0)
    g_rest = type(lc)(0.0)
    g_lc = type(lc)(0.0)
    g_motion = type(d)()
    g_d = type(d)()
    if distance_active(d, wi, wj, alpha):
        length = xsim.sqrt(xsim.dot(d, d))
        inv_length = 1.0 / length
        n = d * inv_length
        num = rest - length - alpha * lc
        if damped:
            num = num - gamma * xsim.dot(n, motion)
        inv_den = 1.0 / ((1.0 + gamma) * (wi + wj) + alpha)
        s = relaxation * inv_den
        dl = num * s
        gi = xsim.dot(n, adj_di)
        gj = xsim.dot(n, adj_dj)
        a_dl = adj_dl + wi * gi - wj * gj  # dl reaches the multiplier and both corrections
        a_num = a_dl * s
        a_den = -(a_dl * dl) * inv_den
        g_relax = a_dl * num * inv_den
        g_wi = dl * gi + a_den * (1.0 + gamma)
        g_wj = a_den * (1.0 + gamma) - dl * gj
        g_alpha = a_den - a_num * lc
        g_gamma = a_den * (wi + wj)
        g_rest = a_num
        g_lc = -a_num * alpha
        # n = d / |d| gets a_n = dl (wi adj_di - wj adj_dj), whose part along n is dl (wi gi - wj gj);
        # its adjoint reaches d projected off n, over |d|; |d| in num adds -a_num n
        u = adj_di * wi - adj_dj * wj
        along = dl * (wi * gi - wj * gj)
        if damped:
            g_gamma = g_gamma + (-a_num * xsim.dot(n, motion))
            g_motion = n * (-a_num * gamma)
            u = u * dl - motion * (a_num * gamma)
            along = along - xsim.dot(n, motion) * (a_num * gamma)
            g_d = (u - n * along) * inv_length - n * a_num
        else:
            g_d = u * (dl * inv_length) - n * (along * inv_length + a_num)
    return g_relax, g_wi, g_wj, g_alpha, g_gamma, g_rest, g_lc, g_motion, g_d


@xsim.func_grad(distance_update)
def distance_update_grad(d, wi, wj, rest, alpha, gamma, lc, relaxation, motion, damped: bool, adj_dl, adj_di,
                         adj_dj):
    """The chain rule of ``distance_update`` (``distance_grads``): 10% faster than the generated adjoint,
    which replays and reverses every op of the update."""
    if distance_active(d, wi, wj, alpha):
        g_relax, g_wi, g_wj, g_alpha, g_gamma, g_rest, g_lc, g_motion, g_d = distance_grads(
            d, wi, wj, rest, alpha, gamma, lc, relaxation, motion, damped, adj_dl, adj_di, adj_dj)
        xsim.adjoint[relaxation] += g_relax
        xsim.adjoint[wi] += g_wi
        xsim.adjoint[wj] += g_wj
        xsim.adjoint[alpha] += g_alpha
        xsim.adjoint[gamma] += g_gamma
        xsim.adjoint[rest] += g_rest
        xsim.adjoint[lc] += g_lc
        if damped:
            xsim.adjoint[motion] += g_motion
        xsim.adjoint[d] += g_d


@xsim.func
def bending_terms(e0, e1, e2, e3, k, alpha, gamma, lc, cs, damped: bool):
    """The bending update's forward intermediates, shared by the update and its chain rule: (C = sum_m
    k_m x_m, C with the damping term, q = sum_m k_m^2 w_m, the denominator q (1 + gamma) + alpha)."""
    sum4 = e0 * k[0] + e1 * k[1] + e2 * k[2] + e3 * k[3]
    cv = type(lc)(sum4[0], sum4[1], sum4[2])
    cvd = cv
    if damped:
        cvd = cv + (cv - cs) * gamma
    q = k[0] * k[0] * e0[3] + k[1] * k[1] * e1[3] + k[2] * k[2] * e2[3] + k[3] * k[3] * e3[3]
    return cv, cvd, q, q * (1.0 + gamma) + alpha


@xsim.func
def bending_update(e0, e1, e2, e3, k, alpha, gamma, lc, relaxation, cs, damped: bool, weights_grad: bool):
    """One XPBD update of the isometric bending constraint C = sum_m k_m x_m (``e_m``: position and
    split inverse mass of stencil vertex m; ``k``: the cotangent weights; ``alpha``, ``gamma``:
    compliance / h^2 and XPBD's damping factor; ``lc``: the multiplier (vec3); ``cs``: C at the
    substep start, read when ``damped``; ``weights_grad``: whether the chain rule computes ``k``'s
    gradient): (multiplier change, the four vertices' corrections)."""
    _cv, cvd, _q, denom = bending_terms(e0, e1, e2, e3, k, alpha, gamma, lc, cs, damped)
    dl = type(lc)()
    if denom > 0.0:
        dl = (cvd + lc * alpha) * (-relaxation / denom)
    return dl, dl * (k[0] * e0[3]), dl * (k[1] * e1[3]), dl * (k[2] * e2[3]), dl * (k[3] * e3[3])


@xsim.func
def bending_grads(e0, e1, e2, e3, k, alpha, gamma, lc, relaxation, cs, damped: bool, weights_grad: bool,
                  adj_dl, adj_d0, adj_d1, adj_d2, adj_d3):
    """The chain rule of ``bending_update`` by hand (the update is linear in the positions; one division,
    1 / denom, where the generated adjoint chained three): the gradients of (lc, alpha, relaxation, gamma,
    cs, k, e0, e1, e2, e3) given those of its results; ``k``'s only where ``weights_grad``. Shared by
    ``bending_update_grad`` and ``solve_bending_adjoint``."""
    cv, cvd, q, denom = bending_terms(e0, e1, e2, e3, k, alpha, gamma, lc, cs, damped)
    w0 = e0[3]
    w1 = e1[3]
    w2 = e2[3]
    w3 = e3[3]
    g_lc = type(lc)()
    g_alpha = type(alpha)(0.0)
    g_relax = type(alpha)(0.0)
    g_gamma = type(alpha)(0.0)
    g_cs = type(lc)()
    g_k = type(k)()
    g_e0 = type(k)()
    g_e1 = type(k)()
    g_e2 = type(k)()
    g_e3 = type(k)()
    if denom > 0.0:
        inv_den = 1.0 / denom
        t = -relaxation * inv_den
        r = cvd + lc * alpha
        dl = r * t
        # dl reaches the multiplier and each correction dl k_m w_m
        a_dl = adj_dl + adj_d0 * (k[0] * w0) + adj_d1 * (k[1] * w1) + adj_d2 * (k[2] * w2) + adj_d3 * (k[3] * w3)
        g0 = xsim.dot(dl, adj_d0)
        g1 = xsim.dot(dl, adj_d1)
        g2 = xsim.dot(dl, adj_d2)
        g3 = xsim.dot(dl, adj_d3)
        a_r = a_dl * t
        a_t = xsim.dot(a_dl, r)
        a_den = -a_t * t * inv_den
        a_q = a_den * (1.0 + gamma)
        g_lc = a_r * alpha
        g_alpha = xsim.dot(a_r, lc) + a_den
        g_relax = -a_t * inv_den
        g_gamma = a_den * q
        a_cv = a_r
        if damped:
            a_cv = a_r * (1.0 + gamma)
            g_cs = a_r * (-gamma)
            g_gamma = g_gamma + xsim.dot(a_r, cv - cs)
        # C = sum_m k_m x_m and q = sum_m k_m^2 w_m
        if weights_grad:
            g_k[0] = w0 * g0 + a_q * (2.0 * k[0] * w0) + (a_cv[0] * e0[0] + a_cv[1] * e0[1] + a_cv[2] * e0[2])
            g_k[1] = w1 * g1 + a_q * (2.0 * k[1] * w1) + (a_cv[0] * e1[0] + a_cv[1] * e1[1] + a_cv[2] * e1[2])
            g_k[2] = w2 * g2 + a_q * (2.0 * k[2] * w2) + (a_cv[0] * e2[0] + a_cv[1] * e2[1] + a_cv[2] * e2[2])
            g_k[3] = w3 * g3 + a_q * (2.0 * k[3] * w3) + (a_cv[0] * e3[0] + a_cv[1] * e3[1] + a_cv[2] * e3[2])
        g_e0 = type(k)(a_cv[0] * k[0], a_cv[1] * k[0], a_cv[2] * k[0], (g0 + a_q * k[0]) * k[0])
        g_e1 = type(k)(a_cv[0] * k[1], a_cv[1] * k[1], a_cv[2] * k[1], (g1 + a_q * k[1]) * k[1])
        g_e2 = type(k)(a_cv[0] * k[2], a_cv[1] * k[2], a_cv[2] * k[2], (g2 + a_q * k[2]) * k[2])
        g_e3 = type(k)(a_cv[0] * k[3], a_cv[1] * k[3], a_cv[2] * k[3], (g3 + a_q * k[3]) * k[3])
    return g_lc, g_alpha, g_relax, g_gamma, g_cs, g_k, g_e0, g_e1, g_e2, g_e3


@xsim.func_grad(bending_update)
def bending_update_grad(e0, e1, e2, e3, k, alpha, gamma, lc, relaxation, cs, damped: bool, weights_grad: bool,
                        adj_dl, adj_d0, adj_d1, adj_d2, adj_d3):
    """The chain rule of ``bending_update`` (``bending_grads``)."""
    g_lc, g_alpha, g_relax, g_gamma, g_cs, g_k, g_e0, g_e1, g_e2, g_e3 = bending_grads(
        e0, e1, e2, e3, k, alpha, gamma, lc, relaxation, cs, damped, weights_grad, adj_dl, adj_d0, adj_d1, adj_d2,
        adj_d3)
    xsim.adjoint[lc] += g_lc
    xsim.adjoint[alpha] += g_alpha
    xsim.adjoint[relaxation] += g_relax
    xsim.adjoint[gamma] += g_gamma
    if damped:
        xsim.adjoint[cs] += g_cs
    if weights_grad:
        xsim.adjoint[k] += g_k
    xsim.adjoint[e0] += g_e0
    xsim.adjoint[e1] += g_e1
    xsim.adjoint[e2] += g_e2
    xsim.adjoint[e3] += g_e3


# The damping term reads the substep-start positions from ``start``, gathered like ``entries`` once per
# substep (own rows: plain adds in the adjoint, where reading x_start[i] made 6 to 12 atomic float adds
# per constraint and iteration); ``damped`` is False for kinds without damping, and the reads are skipped.


@xsim.func
def distance_inputs(ei, ej, c: int, zero, compliance, damping, lam, start, inv_h, damped: bool):
    """What distance constraint ``c`` with end entries ``ei``, ``ej`` (position, split inverse mass) feeds its update
    (``zero``: a zero vec3 of the precision): (d = xi - xj, alpha, gamma, its multiplier, the ends' relative motion
    since the substep start where ``damped``)."""
    xi = type(zero)(ei[0], ei[1], ei[2])
    xj = type(zero)(ej[0], ej[1], ej[2])
    motion = type(zero)()
    if damped:
        si = start[2 * c]
        sj = start[2 * c + 1]
        motion = xi - type(zero)(si[0], si[1], si[2]) - xj + type(zero)(sj[0], sj[1], sj[2])
    return xi - xj, compliance[c] * inv_h * inv_h, compliance[c] * damping[c] * inv_h, lam[c], motion


@xsim.func
def distance_constraint(entries, c: int, zero, rest, compliance, damping, lam, start, inv_h, relaxation,
                        damped: bool):
    """Distance constraint ``c``'s update (``solve_distance``; ``zero``: a zero vec3 of the precision), shared
    with its Tape stand-in: (multiplier, its change, the corrections of ends 0 and 1, their split inverse
    masses)."""
    ei = entries[2 * c]
    ej = entries[2 * c + 1]
    d, alpha, gamma, lc, motion = distance_inputs(ei, ej, c, zero, compliance, damping, lam, start, inv_h, damped)
    dl, di, dj = distance_update(d, ei[3], ej[3], rest[c], alpha, gamma, lc, relaxation, motion, damped)
    return lc, dl, di, dj, ei[3], ej[3]


@xsim.kernel
def solve_distance(entries: Vec4s, indices: Ints2, slot: Ints2, rest: Floats, compliance: Floats, damping: Floats,
                   lam: Floats, start: Vec4s, inv_h: Float, relaxation: Float, damped: bool, lam_out: Floats,
                   delta: Vec3s2):
    """C = |xi - xj| - rest with compliance and damping (XPBD's gamma = alpha beta / h on the
    constraint's motion since the substep start); one multiplier update per constraint
    (``entries[2c + k]``: position and split inverse mass of end k; ``start``: the same entries at the
    substep start, read when ``damped``)."""
    c = xsim.tid()
    lc, dl, di, dj, _wi, _wj = distance_constraint(entries, c, delta.dtype(), rest, compliance, damping, lam, start,
                                                   inv_h, relaxation, damped)
    lam_out[c] = lc + dl
    delta[indices[c, 0], slot[c, 0]] = di
    delta[indices[c, 1], slot[c, 1]] = dj


@xsim.kernel
def solve_distance_into_positions(entries: Vec4s, indices: Ints2, rest: Floats, compliance: Floats, damping: Floats,
                                  lam: Floats, start: Vec4s, inv_h: Float, relaxation: Float, damped: bool,
                                  slot_count: Ints, lam_out: Floats, x_next: Vec3s):
    """``solve_distance`` followed by its share of ``apply_corrections``: the corrections go straight to the
    positions (``add_correction``). Its generated adjoint is the reference for ``solve_distance_adjoint``."""
    c = xsim.tid()
    lc, dl, di, dj, wi, wj = distance_constraint(entries, c, x_next.dtype(), rest, compliance, damping, lam, start,
                                                 inv_h, relaxation, damped)
    lam_out[c] = lc + dl
    add_correction(x_next, indices[c, 0], di, wi, slot_count)
    add_correction(x_next, indices[c, 1], dj, wj, slot_count)


@xsim.kernel(enable_backward=False)  # a backward pass itself: no adjoint to compile
def positions_adjoint(x: Vec3s, inv_mass: Floats, split: Floats, inv_count: Floats, take_next: bool, x_next_grad: Vec3s,
                      x_grad: Vec3s, entries: Vec4s, corrections_grad: Vec3s):
    """The first kernel of ``ParticleConstraints.backward``, per particle: the adjoint of x_next = x (``keep_positions``:
    x's gradient gets x_next's, which is taken: zeroed where ``take_next``), and what the constraint adjoints read of
    the particle: its entry (position, split inverse mass) as ``gather_entries`` wrote it, and the gradient of each
    correction added to it (``add_correction``: x_next's over the slot count, ``inv_count`` = 1 / count; zero for a
    pinned particle)."""
    i = xsim.tid()
    p = x[i]
    w = inv_mass[i] * split[i]
    g = x_next_grad[i]
    if take_next:
        x_next_grad[i] = type(g)()
    entries[i] = entries.dtype(p[0], p[1], p[2], w)
    gc = type(g)()
    if w > 0.0:
        gc = g * inv_count[i]
    corrections_grad[i] = gc
    x_grad[i] = x_grad[i] + g


@xsim.func
def param_grads(c: int, g_alpha, g_gamma, inv_h, compliance, damping, compliance_grad, damping_grad):
    """Adds the gradients of alpha = compliance inv_h^2 and gamma = compliance damping inv_h to constraint
    ``c``'s compliance and damping gradients (each skipped where it is empty: no gradient)."""
    a_gamma = g_gamma * inv_h
    if damping_grad.shape[0] > 0:
        damping_grad[c] = damping_grad[c] + a_gamma * compliance[c]
    if compliance_grad.shape[0] > 0:
        compliance_grad[c] = compliance_grad[c] + a_gamma * damping[c] + (g_alpha * inv_h) * inv_h


@xsim.kernel(enable_backward=False)  # a backward pass itself: no adjoint to compile
def solve_distance_adjoint(entries: Vec4s, corrections_grad: Vec3s, indices: Ints2, rest: Floats, compliance: Floats,
                           damping: Floats, lam: Floats, start: Vec4s, inv_h: Float, relaxation: Float, damped: bool,
                           lam_out_grad: Floats, take_lam_out: bool, lam_grad: Floats, rest_grad: Floats,
                           compliance_grad: Floats, damping_grad: Floats, start_grad: Vec4s, entries_grad: Vec4s):
    """The backward pass of ``solve_distance`` followed by its share of ``apply_corrections`` (the function
    ``solve_distance_into_positions`` computes), written out: ``ParticleConstraints.backward`` runs it. It
    reads each end's entry and correction gradient per particle (``positions_adjoint``: one entry per particle,
    where the forward's entries, one per constraint end, are long overwritten) and stores each end's gradient
    into its own entry of ``entries_grad`` (for ``gather_entries_adjoint``). Adds to the multiplier's and the
    parameters' gradients (each skipped where it is empty) and takes ``lam_out_grad`` (zeroes it where
    ``take_lam_out``)."""
    c = xsim.tid()
    i = indices[c, 0]
    j = indices[c, 1]
    ei = entries[i]
    ej = entries[j]
    wi = ei[3]
    wj = ej[3]
    d, alpha, gamma, lc, motion = distance_inputs(ei, ej, c, corrections_grad.dtype(), compliance, damping, lam, start,
                                                  inv_h, damped)
    adj_dl = lam_out_grad[c]
    if take_lam_out:
        lam_out_grad[c] = type(adj_dl)(0.0)
    _g_relax, g_wi, g_wj, g_alpha, g_gamma, g_rest, g_lc, g_motion, g_d = distance_grads(
        d, wi, wj, rest[c], alpha, gamma, lc, relaxation, motion, damped, adj_dl, corrections_grad[i],
        corrections_grad[j])
    if lam_grad.shape[0] > 0:
        lam_grad[c] = lam_grad[c] + (adj_dl + g_lc)
    if rest_grad.shape[0] > 0:
        rest_grad[c] = rest_grad[c] + g_rest
    param_grads(c, g_alpha, g_gamma, inv_h, compliance, damping, compliance_grad, damping_grad)
    if damped:
        entries_grad[2 * c] = entries_grad.dtype(g_motion[0] + g_d[0], g_motion[1] + g_d[1], g_motion[2] + g_d[2], g_wi)
        entries_grad[2 * c + 1] = entries_grad.dtype(-g_motion[0] - g_d[0], -g_motion[1] - g_d[1], -g_motion[2] - g_d[2], g_wj)
        start_grad[2 * c] = start_grad[2 * c] + entries_grad.dtype(-g_motion[0], -g_motion[1], -g_motion[2], 0.0)
        start_grad[2 * c + 1] = start_grad[2 * c + 1] + entries_grad.dtype(g_motion[0], g_motion[1], g_motion[2], 0.0)
    else:
        entries_grad[2 * c] = entries_grad.dtype(g_d[0], g_d[1], g_d[2], g_wi)
        entries_grad[2 * c + 1] = entries_grad.dtype(-g_d[0], -g_d[1], -g_d[2], g_wj)


@xsim.kernel(enable_backward=False)  # a backward pass itself: no adjoint to compile
def solve_bending_adjoint(entries: Vec4s, corrections_grad: Vec3s, indices: Ints2, weights: Vec4s, compliance: Floats,
                          damping: Floats, lam: Vec3s, start: Vec4s, inv_h: Float, relaxation: Float, damped: bool,
                          weights_grad: bool, lam_out_grad: Vec3s, take_lam_out: bool, lam_grad: Vec3s,
                          weights_grad_out: Vec4s, compliance_grad: Floats, damping_grad: Floats, start_grad: Vec4s,
                          entries_grad: Vec4s):
    """The backward pass of ``solve_bending`` and its share of ``apply_corrections``, written out as
    ``solve_distance_adjoint`` is (``weights_grad``: whether ``weights_grad_out`` takes the weights' gradient)."""
    c = xsim.tid()
    b = 4 * c  # the constraint's first entry
    k = weights[c]
    i0 = indices[c, 0]
    i1 = indices[c, 1]
    i2 = indices[c, 2]
    i3 = indices[c, 3]
    e0 = entries[i0]
    e1 = entries[i1]
    e2 = entries[i2]
    e3 = entries[i3]
    alpha, gamma, lc, cs = bending_inputs(c, k, compliance, damping, lam, start, inv_h, damped)
    adj_dl = lam_out_grad[c]
    if take_lam_out:
        lam_out_grad[c] = type(lc)()
    g_lc, g_alpha, _g_relax, g_gamma, g_cs, g_k, g_e0, g_e1, g_e2, g_e3 = bending_grads(
        e0, e1, e2, e3, k, alpha, gamma, lc, relaxation, cs, damped, weights_grad, adj_dl,
        corrections_grad[i0], corrections_grad[i1],
        corrections_grad[i2], corrections_grad[i3])
    if lam_grad.shape[0] > 0:
        lam_grad[c] = lam_grad[c] + (adj_dl + g_lc)
    param_grads(c, g_alpha, g_gamma, inv_h, compliance, damping, compliance_grad, damping_grad)
    if damped:
        a_cs4 = type(k)(g_cs[0], g_cs[1], g_cs[2], 0.0)
        if weights_grad:
            g_k = g_k + type(k)(xsim.dot(start[b], a_cs4), xsim.dot(start[b + 1], a_cs4),
                                xsim.dot(start[b + 2], a_cs4), xsim.dot(start[b + 3], a_cs4))
        start_grad[b] = start_grad[b] + a_cs4 * k[0]
        start_grad[b + 1] = start_grad[b + 1] + a_cs4 * k[1]
        start_grad[b + 2] = start_grad[b + 2] + a_cs4 * k[2]
        start_grad[b + 3] = start_grad[b + 3] + a_cs4 * k[3]
    if weights_grad:
        weights_grad_out[c] = weights_grad_out[c] + g_k
    entries_grad[b] = g_e0
    entries_grad[b + 1] = g_e1
    entries_grad[b + 2] = g_e2
    entries_grad[b + 3] = g_e3


@xsim.kernel(enable_backward=False)  # a backward pass itself: no adjoint to compile
def gather_entries_adjoint(entry_index: Ints2, slot_count: Ints, split: Floats, entries_grad: Vec4s, x_grad: Vec3s,
                           inv_mass_grad: Floats):
    """The backward pass of ``gather_entries`` for one particle, the last kernel of ``ParticleConstraints.backward``:
    x's gradient gets the sum of its entries' gradients (last slot first, as the generated adjoint sums them),
    ``inv_mass_grad`` (skipped where empty) the sum of their inverse-mass parts times the split. Every constraint
    adjoint stores all its entries' gradients, so they are not zeroed."""
    i = xsim.tid()
    count = slot_count[i]
    a = entries_grad.dtype()
    for s in range(count - 1, UNROLLED_SLOTS - 1, -1):
        a = a + entries_grad[entry_index[i, s]]
    for s in range(UNROLLED_SLOTS - 1, 15, -1):  # unrolled, as gather_entries' stores
        if s < count:
            a = a + entries_grad[entry_index[i, s]]
    for s in range(15, -1, -1):
        if s < count:
            a = a + entries_grad[entry_index[i, s]]
    x_grad[i] = x_grad[i] + type(x_grad[i])(a[0], a[1], a[2])
    if inv_mass_grad.shape[0] > 0:
        inv_mass_grad[i] = inv_mass_grad[i] + a[3] * split[i]


@xsim.func
def bending_inputs(c: int, k, compliance, damping, lam, start, inv_h, damped: bool):
    """What bending constraint ``c`` (weights ``k``) feeds its update besides its entries: (alpha, gamma, its
    multiplier, C at the substep start where ``damped``). Shared by ``bending_constraint`` and
    ``solve_bending_adjoint``."""
    lc = lam[c]
    cs = type(lc)()
    if damped:
        cs4 = start[4 * c] * k[0] + start[4 * c + 1] * k[1] + start[4 * c + 2] * k[2] + start[4 * c + 3] * k[3]
        cs = type(lc)(cs4[0], cs4[1], cs4[2])
    return compliance[c] * inv_h * inv_h, compliance[c] * damping[c] * inv_h, lc, cs


@xsim.func
def bending_constraint(entries, c: int, weights, compliance, damping, lam, start, inv_h, relaxation, damped: bool,
                       weights_grad: bool):
    """Bending constraint ``c``'s update (``solve_bending``), shared with its Tape stand-in: (multiplier, its
    change, the corrections of the four stencil vertices, their split inverse masses)."""
    k = weights[c]
    e0 = entries[4 * c]
    e1 = entries[4 * c + 1]
    e2 = entries[4 * c + 2]
    e3 = entries[4 * c + 3]
    alpha, gamma, lc, cs = bending_inputs(c, k, compliance, damping, lam, start, inv_h, damped)
    dl, d0, d1, d2, d3 = bending_update(e0, e1, e2, e3, k, alpha, gamma, lc, relaxation, cs, damped,
                                         weights_grad)
    return lc, dl, d0, d1, d2, d3, e0[3], e1[3], e2[3], e3[3]


@xsim.kernel
def solve_bending(entries: Vec4s, indices: Ints2, slot: Ints2, weights: Vec4s, compliance: Floats, damping: Floats,
                  lam: Vec3s, start: Vec4s, inv_h: Float, relaxation: Float, damped: bool, weights_grad: bool,
                  lam_out: Vec3s, delta: Vec3s2):
    """Isometric bending: the vector constraint C = sum_k K_k x_k (K: cotangent weights of the
    edge stencil, zero on the flat rest shape); linear in x, so one update is exact. ``weights_grad``:
    whether ``weights`` requires grad (its gradient is 10% of the adjoint's time)."""
    c = xsim.tid()
    lc, dl, d0, d1, d2, d3, _w0, _w1, _w2, _w3 = bending_constraint(entries, c, weights, compliance, damping, lam,
                                                                    start, inv_h, relaxation, damped, weights_grad)
    lam_out[c] = lc + dl
    delta[indices[c, 0], slot[c, 0]] = d0
    delta[indices[c, 1], slot[c, 1]] = d1
    delta[indices[c, 2], slot[c, 2]] = d2
    delta[indices[c, 3], slot[c, 3]] = d3


@xsim.kernel
def solve_bending_into_positions(entries: Vec4s, indices: Ints2, weights: Vec4s, compliance: Floats,
                                 damping: Floats, lam: Vec3s, start: Vec4s, inv_h: Float, relaxation: Float,
                                 damped: bool, weights_grad: bool, slot_count: Ints, lam_out: Vec3s, x_next: Vec3s):
    """``solve_bending`` followed by its share of ``apply_corrections``; its generated adjoint is the reference
    for ``solve_bending_adjoint``."""
    c = xsim.tid()
    lc, dl, d0, d1, d2, d3, w0, w1, w2, w3 = bending_constraint(entries, c, weights, compliance, damping, lam, start,
                                                                inv_h, relaxation, damped, weights_grad)
    lam_out[c] = lc + dl
    add_correction(x_next, indices[c, 0], d0, w0, slot_count)
    add_correction(x_next, indices[c, 1], d1, w1, slot_count)
    add_correction(x_next, indices[c, 2], d2, w2, slot_count)
    add_correction(x_next, indices[c, 3], d3, w3, slot_count)


@xsim.func
def area_constraint(entries, c: int, zero, rest, compliance, damping, lam, start, inv_h, relaxation, damped: bool):
    """Area constraint ``c``'s update (``solve_area``; ``zero``: a zero vec3 of the precision), shared with its
    Tape stand-in: (multiplier, its change, the corrections of the three corners, their split inverse masses)."""
    e0 = entries[3 * c]
    e1 = entries[3 * c + 1]
    e2 = entries[3 * c + 2]
    w0 = e0[3]
    w1 = e1[3]
    w2 = e2[3]
    p0 = type(zero)(e0[0], e0[1], e0[2])
    p1 = type(zero)(e1[0], e1[1], e1[2])
    p2 = type(zero)(e2[0], e2[1], e2[2])
    u = p1 - p0
    v = p2 - p0
    cr = xsim.cross(u, v)
    alpha = compliance[c] * inv_h * inv_h
    gamma = compliance[c] * damping[c] * inv_h
    lc = lam[c]
    dl = type(lc)(0.0)
    g0 = type(u)()
    g1 = type(u)()
    g2 = type(u)()
    a2 = xsim.dot(cr, cr)
    if a2 > 0.0:
        a = xsim.sqrt(a2)
        n = cr / a
        g1 = xsim.cross(v, n) * 0.5
        g2 = xsim.cross(n, u) * 0.5
        g0 = -(g1 + g2)
        num = rest[c] - 0.5 * a - alpha * lc
        if damped:
            s0 = start[3 * c]
            s1 = start[3 * c + 1]
            s2 = start[3 * c + 2]
            num = num - gamma * (xsim.dot(g0, p0 - type(p0)(s0[0], s0[1], s0[2]))
                                 + xsim.dot(g1, p1 - type(p0)(s1[0], s1[1], s1[2]))
                                 + xsim.dot(g2, p2 - type(p0)(s2[0], s2[1], s2[2])))
        denom = (w0 * xsim.dot(g0, g0) + w1 * xsim.dot(g1, g1) + w2 * xsim.dot(g2, g2)) * (1.0 + gamma) + alpha
        if denom > 0.0:
            dl = num * (relaxation / denom)
    return lc, dl, g0 * (w0 * dl), g1 * (w1 * dl), g2 * (w2 * dl), w0, w1, w2


@xsim.kernel
def solve_area(entries: Vec4s, indices: Ints2, slot: Ints2, rest: Floats, compliance: Floats, damping: Floats,
               lam: Floats, start: Vec4s, inv_h: Float, relaxation: Float, damped: bool, lam_out: Floats,
               delta: Vec3s2):
    """Triangle area: C = |(x1 - x0) x (x2 - x0)| / 2 - rest."""
    c = xsim.tid()
    lc, dl, d0, d1, d2, _w0, _w1, _w2 = area_constraint(entries, c, delta.dtype(), rest, compliance, damping, lam,
                                                        start, inv_h, relaxation, damped)
    lam_out[c] = lc + dl
    delta[indices[c, 0], slot[c, 0]] = d0
    delta[indices[c, 1], slot[c, 1]] = d1
    delta[indices[c, 2], slot[c, 2]] = d2


@xsim.kernel
def solve_area_into_positions(entries: Vec4s, indices: Ints2, rest: Floats, compliance: Floats, damping: Floats,
                              lam: Floats, start: Vec4s, inv_h: Float, relaxation: Float, damped: bool,
                              slot_count: Ints, lam_out: Floats, x_next: Vec3s):
    """``solve_area`` followed by its share of ``apply_corrections``: its generated adjoint is the area constraints'
    backward pass (``ParticleConstraints.backward`` launches it with ``adjoint=True``)."""
    c = xsim.tid()
    lc, dl, d0, d1, d2, w0, w1, w2 = area_constraint(entries, c, x_next.dtype(), rest, compliance, damping, lam,
                                                     start, inv_h, relaxation, damped)
    lam_out[c] = lc + dl
    add_correction(x_next, indices[c, 0], d0, w0, slot_count)
    add_correction(x_next, indices[c, 1], d1, w1, slot_count)
    add_correction(x_next, indices[c, 2], d2, w2, slot_count)
