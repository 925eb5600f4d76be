"""Particles meet particles and cloth meets itself (xsim/solvers/xpbd/self_contact.py; candidates from
xsim/collision/proximity.py), held to exact answers and to references that are not xsim:

- two free particles colliding head-on conserve momentum and separate at e times their approach speed
  (the one-dimensional impact's closed form), in float64 to rounding and in float32 to 1e-6;
- the gradients of a head-on impact equal its closed form, and those of an oblique impact with friction
  and of a vertex sliding on a triangle equal float64 central differences;
- a vertex resting on a triangle rests exactly ``thickness`` above it;
- a cloth dropped hanging, crumpling on the ground, has no intersecting triangle pair in any frame by an
  exact triangle-triangle test written independently of xsim (tests/solvers/tri_intersect.py, itself
  checked against FCL), while the same cloth without self-collision has thousands;
- the proximity rows equal a brute-force numpy search;
- bad thickness and contact settings are refused naming the call.
"""

import itertools
import math
from pathlib import Path

import numpy as np
import pytest
from tri_intersect import intersecting_pairs

import xsim
from xsim.collision.proximity import CAPACITY, CREASE, REST_EXCLUSION, Proximity, particle_roles
from xsim.sim import ModelBuilder
from xsim.solvers import SolverXPBD

F64 = xsim.float64
DT = 1.0 / 60.0


def head_on(e: float, dtype=F64, v=(1.0, -1.0), masses=(1.0, 2.0), offset=(0.0, 0.0, 0.0), mu=0.5):
    b = ModelBuilder(gravity=(0.0, 0.0, 0.0))
    b.particle_restitution = e
    b.particle_mu = mu
    o = np.asarray(offset)
    b.add_particle(tuple(o + (-0.1, 0.0, 0.0)), vel=(v[0], 0.0, 0.0), mass=masses[0], radius=0.02)
    b.add_particle(tuple(o + (0.1, 0.0, 0.0)), vel=(v[1], 0.0, 0.0), mass=masses[1], radius=0.03)
    return b.finalize(dtype=dtype)


def run(model, frames: int, substeps: int = 4, iterations: int = 4, state=None):
    solver = SolverXPBD(model, substeps=substeps, iterations=iterations)
    a, b = state if state is not None else model.state(), model.state()
    for _ in range(frames):
        solver.step(a, b, None, DT)
        a, b = b, a
    return a


def impact_velocities(e, v1, v2, m1, m2):
    """The one-dimensional impact's closed form."""
    p = m1 * v1 + m2 * v2
    return (p - m2 * e * (v1 - v2)) / (m1 + m2), (p + m1 * e * (v1 - v2)) / (m1 + m2)


@pytest.mark.parametrize("e", [0.0, 0.5, 0.9])
def test_a_head_on_collision_conserves_momentum_and_has_the_restitution_asked_for(e):
    m1, m2 = 1.0, 2.0
    out = run(head_on(e), 30)
    v = out.particle_qd.numpy()
    exact = impact_velocities(e, 1.0, -1.0, m1, m2)
    assert abs(m1 * v[0, 0] + m2 * v[1, 0] - (m1 - m2)) < 1e-12
    assert abs(v[0, 0] - exact[0]) < 1e-12 and abs(v[1, 0] - exact[1]) < 1e-12
    assert np.abs(v[:, 1:]).max() == 0.0
    # they separated and stay apart
    q = out.particle_q.numpy()
    assert q[1, 0] - q[0, 0] >= 0.05 - 1e-12


def test_a_head_on_collision_in_float32_far_from_the_origin():
    """Velocities are position differences over a substep: in float32 at 3 m from the origin their rounding
    is one position ulp (2.4e-7 m) over h = 1/240 s, 5.7e-5 m/s; held to three of those."""
    out = run(head_on(0.5, dtype=xsim.float32, offset=(3.0, -2.0, 1.0)), 30)
    v = out.particle_qd.numpy().astype(np.float64)
    exact = impact_velocities(0.5, 1.0, -1.0, 1.0, 2.0)
    floor = 3.0 * float(np.spacing(np.float32(3.0))) * 4.0 / DT
    assert abs(v[0, 0] + 2.0 * v[1, 0] + 1.0) < floor
    assert abs(v[0, 0] - exact[0]) < floor and abs(v[1, 0] - exact[1]) < floor


def taped_final(model, v0, frames, seed, substeps=4):
    """The gradient of sum(seed * final positions) and sum(seed_v * final velocities) with respect to the
    initial velocities, by the Tape."""
    solver = SolverXPBD(model, substeps=substeps, iterations=4)
    states = [model.state(requires_grad=True) for _ in range(frames + 1)]
    states[0].particle_qd = xsim.array(v0, dtype=xsim.vec3d, requires_grad=True)
    tape = xsim.Tape()
    with tape:
        for k in range(frames):
            solver.step(states[k], states[k + 1], None, DT)
    tape.backward(grads={states[-1].particle_q: seed[0], states[-1].particle_qd: seed[1]})
    return states[0].particle_qd.grad.numpy()


def central_differences(model, v0, frames, seed, substeps=4, eps=1e-6):
    def f(v):
        state = model.state()
        state.particle_qd = xsim.array(v, dtype=xsim.vec3d)
        out = run(model, frames, substeps=substeps, state=state)
        return float((out.particle_q.numpy() * seed[0]).sum() + (out.particle_qd.numpy() * seed[1]).sum())

    g = np.zeros_like(v0)
    for idx in np.ndindex(*v0.shape):
        hi, lo = v0.copy(), v0.copy()
        hi[idx] += eps
        lo[idx] -= eps
        g[idx] = (f(hi) - f(lo)) / (2.0 * eps)
    return g


def test_the_gradient_of_a_head_on_impact_is_its_closed_form():
    """d v1' / d v1 = (m1 - e m2) / (m1 + m2), d v2' / d v1 = m1 (1 + e) / (m1 + m2)."""
    e, m1, m2 = 0.5, 1.0, 2.0
    model = head_on(e)
    v0 = model.particle_qd.numpy()
    zero = np.zeros((2, 3))
    seed_v1 = np.zeros((2, 3))
    seed_v1[0, 0] = 1.0
    seed_v2 = np.zeros((2, 3))
    seed_v2[1, 0] = 1.0
    g1 = taped_final(model, v0, 30, (zero, seed_v1))
    g2 = taped_final(model, v0, 30, (zero, seed_v2))
    assert abs(g1[0, 0] - (m1 - e * m2) / (m1 + m2)) < 1e-12
    assert abs(g2[0, 0] - m1 * (1.0 + e) / (m1 + m2)) < 1e-12
    assert abs(g1[1, 0] - m2 * (1.0 + e) / (m1 + m2)) < 1e-12


def oblique():
    b = ModelBuilder(gravity=(0.0, 0.0, 0.0))
    b.particle_restitution = 0.5
    b.particle_mu = 0.3
    b.add_particle((-0.1, 0.0, 0.0), vel=(1.0, 0.2, 0.0), mass=1.0, radius=0.02)
    b.add_particle((0.1, 0.01, 0.0), vel=(-1.0, 0.0, 0.0), mass=2.0, radius=0.03)
    return b.finalize(dtype=F64)


def test_the_gradient_of_an_oblique_impact_with_friction_equals_central_differences():
    model = oblique()
    v0 = model.particle_qd.numpy()
    seed = (np.array([[0.3, -0.7, 0.2], [1.1, 0.4, -0.5]]), np.array([[0.2, 0.1, 0.0], [-0.3, 0.5, 0.1]]))
    tape = taped_final(model, v0, 30, seed)
    fd = central_differences(model, v0, 30, seed)
    assert np.abs(tape - fd).max() <= 1e-6 * np.abs(fd).max()
    # friction acted: the tangential velocities changed
    out = run(model, 30).particle_qd.numpy()
    assert abs(out[0, 1] - 0.2) > 1e-3


def two_triangles(thickness=0.02, drop=0.01, vel=(0.0, 0.0, 0.0), mu=0.4, gravity=(0.0, 0.0, -9.81)):
    """A large pinned triangle in z = 0 and a small free one a little above it (two self-colliding cloths)."""
    b = ModelBuilder(gravity=gravity)
    b.particle_mu = mu
    big = np.array([[-1.0, -1.0, 0.0], [1.0, -1.0, 0.0], [0.0, 1.0, 0.0]])
    first = b.add_cloth_mesh(big, np.array([[0, 1, 2]]), mass=1.0, self_collision=True, thickness=thickness,
                             bend_compliance=None)
    for i in range(3):
        b.pin_particle(first + i)
    small = np.array([[0.0, 0.0, 0.0], [0.05, 0.0, 0.0], [0.0, 0.05, 0.0]]) + [0.0, 0.0, thickness + drop]
    b.add_cloth_mesh(small, np.array([[0, 1, 2]]), mass=0.01, vel=vel, self_collision=True, thickness=thickness,
                     bend_compliance=None)
    return b.finalize(dtype=F64)


def test_a_vertex_rests_exactly_thickness_above_a_triangle():
    out = run(two_triangles(), 120)
    z = out.particle_q.numpy()[3:, 2]
    assert np.abs(z - 0.02).max() < 1e-9
    # at rest: the velocity of a supported particle is g h / 2 (the solver's convention, solver.py)
    h = DT / 4
    assert np.abs(out.particle_qd.numpy()[3:] - [0.0, 0.0, -9.81 * h / 2]).max() < 1e-9


def test_the_gradient_of_a_vertex_sliding_on_a_triangle_equals_central_differences():
    model = two_triangles(drop=0.0, vel=(0.5, 0.2, 0.0), gravity=(0.0, 0.0, -9.81))
    v0 = model.particle_qd.numpy()
    rng = np.random.default_rng(3)
    seed = (rng.normal(size=v0.shape), np.zeros(v0.shape))
    tape = taped_final(model, v0, 6, seed)
    fd = central_differences(model, v0, 6, seed)
    assert np.abs(tape - fd).max() <= 1e-5 * np.abs(fd).max()
    moved = run(model, 6).particle_q.numpy()[3:]
    assert 0.02 < moved[0, 0] < 0.05  # it slid, slowed by friction (without: 0.05 m)


def hanging_cloth(dim: int, self_collision: bool):
    """A square cloth of side 0.5 m hanging vertically just above the ground, thrown down at 3 m/s: it
    crumples (let go at rest, a coarse one falls over flat)."""
    b = ModelBuilder()
    q = (math.sin(math.pi / 4), 0.0, 0.0, math.cos(math.pi / 4))
    b.add_cloth_grid(pos=(-0.25, 0.0, 0.02), rot=q, vel=(0.0, 0.0, -3.0), dim_x=dim, dim_y=dim, cell_x=0.5 / dim,
                     cell_y=0.5 / dim, mass=0.1 / (dim + 1) ** 2, self_collision=self_collision,
                     thickness=0.01 if self_collision else None)
    b.add_ground_plane()
    return b.finalize()


def test_a_crumpling_cloth_never_intersects_itself_by_an_independent_test():
    model = hanging_cloth(16, True)
    tris = np.asarray(model.tri_indices)
    solver = SolverXPBD(model, substeps=10, iterations=4)
    a, b = model.state(), model.state()
    heights = []
    for frame in range(90):
        solver.step(a, b, None, DT)
        a, b = b, a
        x = a.particle_q.numpy().astype(np.float64)
        assert len(intersecting_pairs(x, tris)) == 0, f"frame {frame}"
        heights.append(x[:, 2].max())
    assert heights[-1] < 0.1  # it did fall and fold onto itself
    assert np.isfinite(heights).all()


def test_the_same_cloth_without_self_collision_intersects_itself():
    model = hanging_cloth(16, False)
    out = run(model, 90, substeps=10)
    assert len(intersecting_pairs(out.particle_q.numpy().astype(np.float64), np.asarray(model.tri_indices))) > 100


def test_steps_with_contacts_repeat_bit_for_bit():
    model = hanging_cloth(8, True)
    first = run(model, 20, substeps=5).particle_q.numpy()
    second = run(model, 20, substeps=5).particle_q.numpy()
    assert np.array_equal(first, second)


def closest_distance(p, a, b, c):
    """Distance from p to triangle (a, b, c) by sampling-free projection (numpy, float64)."""
    ab, ac = b - a, c - a
    n = np.cross(ab, ac)
    n /= np.linalg.norm(n)
    # inside the face: the plane distance; else the nearest edge
    m = np.array([ab, ac]).T
    uv, *_ = np.linalg.lstsq(m, p - a, rcond=None)
    if uv.min() >= 0.0 and uv.sum() <= 1.0:
        return abs(np.dot(p - a, n))

    def segment(p, s, t):
        d = t - s
        k = np.clip(np.dot(p - s, d) / np.dot(d, d), 0.0, 1.0)
        return np.linalg.norm(p - (s + k * d))
    return min(segment(p, a, b), segment(p, b, c), segment(p, c, a))


def test_the_proximity_rows_are_those_of_a_brute_force_search():
    rng = np.random.default_rng(7)
    b = ModelBuilder()
    b.add_cloth_grid(pos=(0.0, 0.0, 0.1), rot=(0.0, 0.0, 0.0, 1.0), vel=(0.0, 0.0, 0.0), dim_x=6, dim_y=6,
                     cell_x=0.05, cell_y=0.05, mass=0.01, self_collision=True, thickness=0.03)
    for _ in range(30):
        b.add_particle(tuple(rng.uniform([0.0, 0.0, 0.0], [0.6, 0.6, 0.3])), radius=0.02)
    model = b.finalize()
    n = model.particle_count
    x0 = model.particle_q.numpy().astype(np.float64)
    # the cloth crumpled at random (its rest shape stays flat), the particles where they were
    pred = x0 + np.where(np.arange(n)[:, None] < 49, rng.normal(scale=0.01, size=(n, 3)), 0.0)
    prox = Proximity(model)
    x = xsim.array(x0.astype(np.float32), dtype=xsim.vec3)
    xp = xsim.array(pred.astype(np.float32), dtype=xsim.vec3)
    rows = prox.find(x, xp, lambda key, shape, dtype: xsim.zeros(shape, dtype=dtype))
    moved = np.linalg.norm(pred - x0, axis=1).max()
    margin = 2.0 * moved + prox._slack
    role, _ = particle_roles(model)
    r = model.particle_radius.numpy()
    p32 = pred.astype(np.float32).astype(np.float64)
    pairs, counts = rows.pairs.numpy(), rows.pair_count.numpy()
    for i in range(n):
        want = {j for j in range(n) if j != i and role[i] + role[j] > 0
                and np.linalg.norm(p32[j] - p32[i]) < r[i] + r[j] + margin}
        assert set(pairs[i, :counts[i]]) == want and counts[i] <= CAPACITY
    tris = np.asarray(model.tri_indices)
    th = model.particle_thickness.numpy()
    vt, vtc = rows.vertex_tris.numpy(), rows.vertex_tri_count.numpy()
    creases = 0
    for v in range(n):
        want = {}
        for t, (ia, ib, ic) in enumerate(tris):
            if v in (ia, ib, ic) or th[v] == 0.0:
                continue
            d = closest_distance(p32[v], p32[ia], p32[ib], p32[ic])
            crease = closest_distance(x0[v], x0[ia], x0[ib], x0[ic]) < REST_EXCLUSION * th[v]
            if d < th[v] * (CREASE if crease else 1.0) + margin - 1e-6:
                want[2 * t + crease] = d
        row = list(vt[v, :vtc[v]])
        assert row == sorted(row)
        nearest = sorted(want, key=want.get)[:CAPACITY]
        if len(want) <= CAPACITY:
            assert set(nearest) <= set(row), (v, set(nearest) - set(row))
        else:  # full: the nearest ones, up to ties at the boundary
            assert len(row) == CAPACITY and len(set(nearest) & set(row)) >= CAPACITY - 2
        for e in row:  # nothing beyond reach
            ia, ib, ic = tris[e // 2]
            assert closest_distance(p32[v], p32[ia], p32[ib], p32[ic]) < th[v] + margin + 1e-6
        creases += sum(e % 2 for e in row)
    assert creases > 0
    # each contact is listed once for each of its triangle's corners, in the corner's sorted segment
    first, corners = rows.corner_first.numpy(), rows.corners.numpy()
    listed = {q: list(corners[first[q]:first[q + 1]]) for q in range(n)}
    assert all(seg == sorted(seg) for seg in listed.values())
    expected = {q: [] for q in range(n)}
    for v in range(n):
        for k in range(vtc[v]):
            for c, q in enumerate(tris[vt[v, k] // 2]):
                expected[q].append(4 * (v * CAPACITY + k) + c + 1)
    assert listed == {q: sorted(e) for q, e in expected.items()}
    assert vtc.sum() > 0


def test_free_particles_pass_through_each_other_when_particle_contact_is_off():
    b = ModelBuilder(gravity=(0.0, 0.0, 0.0))
    b.particle_contact = False
    b.add_particle((-0.1, 0.0, 0.0), vel=(1.0, 0.0, 0.0), radius=0.02)
    b.add_particle((0.1, 0.0, 0.0), vel=(-1.0, 0.0, 0.0), radius=0.03)
    out = run(b.finalize(dtype=F64), 30)
    assert np.allclose(out.particle_qd.numpy()[:, 0], [1.0, -1.0])


@pytest.mark.parametrize("thickness, error", [(0.0, ValueError), (-0.01, ValueError), (float("nan"), ValueError),
                                              (1e39, ValueError), ("thin", TypeError)])
def test_a_bad_thickness_is_refused_naming_the_call(thickness, error):
    b = ModelBuilder()
    with pytest.raises(error, match="add_cloth_grid: thickness"):
        b.add_cloth_grid(pos=(0.0, 0.0, 0.0), rot=(0.0, 0.0, 0.0, 1.0), vel=(0.0, 0.0, 0.0), dim_x=2, dim_y=2,
                         cell_x=0.1, cell_y=0.1, mass=0.1, self_collision=True, thickness=thickness)
    assert b.particle_count == 0


def test_a_thickness_without_self_collision_is_refused():
    with pytest.raises(ValueError, match="add_cloth_mesh: thickness=0.01 is given but self_collision is off"):
        ModelBuilder().add_cloth_mesh(np.eye(3), np.array([[0, 1, 2]]), thickness=0.01)


@pytest.mark.parametrize("name, value", [("particle_restitution", 1.5), ("particle_restitution", -0.1),
                                         ("particle_mu", float("nan"))])
def test_bad_particle_contact_settings_are_refused_at_finalize(name, value):
    b = ModelBuilder()
    b.add_particle((0.0, 0.0, 0.0))
    setattr(b, name, value)
    with pytest.raises(ValueError, match=f"ModelBuilder.{name} must be >= 0"):
        b.finalize()


def test_scene_files_switch_self_collision_on_and_refuse_a_thickness_without_it(tmp_path):
    from xsim.errors import SceneError
    from xsim.io.scene import load_scene

    text = ('[[cloth]]\ngrid = { dim = [2, 2], cell = [0.1, 0.1] }\nself_collision = true\nthickness = 0.02\n'
            '[[cloth]]\ngrid = { dim = [2, 2], cell = [0.1, 0.1] }\nposition = [0.0, 0.0, 0.5]\n')
    path = tmp_path / "two.toml"
    path.write_text(text)
    thickness = load_scene(path).builder().particle_thickness
    assert thickness == [0.02] * 9 + [0.0] * 9
    path.write_text('[[cloth]]\ngrid = { dim = [2, 2], cell = [0.1, 0.1] }\nthickness = 0.02\n')
    with pytest.raises(SceneError, match=r"cloth\[0\]\.thickness.*self_collision = true"):
        load_scene(path)


def test_a_taped_step_finds_the_same_positions_as_a_plain_one_bit_for_bit():
    """Without a Tape each vertex-triangle contact is computed once and gathered; on one, each particle
    computes its own contacts (self_contact.py): the same sums in the same order."""
    model = hanging_cloth(8, True)
    plain = run(model, 12, substeps=5).particle_q.numpy()
    solver = SolverXPBD(model, substeps=5, iterations=4)
    states = [model.state(requires_grad=True) for _ in range(13)]
    with xsim.Tape():
        for k in range(12):
            solver.step(states[k], states[k + 1], None, DT)
    assert np.array_equal(states[-1].particle_q.numpy(), plain)


def folded_and_twisted(dim: int, size: float = 0.5, thickness: float = 0.01):
    """A square cloth folded in half flat onto itself (one thickness between the layers' mid-surfaces plus
    0.4), twisted an eighth of a turn along the fold, 5 cm above the ground; its rest shape flat."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
    from self_contact_newton import folded

    b = ModelBuilder()
    b.add_ground_plane(mu=0.5)
    b.add_cloth_grid(pos=(0.0, 0.0, 0.0), rot=(0.0, 0.0, 0.0, 1.0), vel=(0.0, 0.0, 0.0), dim_x=dim, dim_y=dim,
                     cell_x=size / dim, cell_y=size / dim, mass=0.1 / (dim + 1) ** 2, self_collision=True,
                     thickness=thickness)
    x = folded(np.array(b.particle_q), size, thickness)
    angle = x[:, 1] / size * (math.pi / 4)
    b.particle_q = [tuple(p) for p in np.stack([np.cos(angle) * x[:, 0], np.sin(angle) * x[:, 0] + x[:, 1],
                                                  x[:, 2] + 0.05], axis=1)]
    return b.finalize()


def thrown_at_a_box(dim: int, speed: float = 5.0, size: float = 0.5, thickness: float = 0.01):
    """A flat square cloth thrown horizontally at ``speed`` m/s against a static box standing on the ground."""
    b = ModelBuilder()
    b.add_ground_plane(mu=0.5)
    b.add_cloth_grid(pos=(-0.25, -0.25, 0.3), rot=(0.0, 0.0, 0.0, 1.0), vel=(speed, 0.0, 0.0), dim_x=dim, dim_y=dim,
                     cell_x=size / dim, cell_y=size / dim, mass=0.1 / (dim + 1) ** 2, self_collision=True,
                     thickness=thickness)
    b.add_collider_box((0.6, 0.0, 0.25), (0.1, 0.4, 0.25), mu=0.3)
    return b.finalize()


def frames_without_intersections(model, frames: int, substeps: int, every: int = 1):
    """Steps ``model`` at 60 Hz, checking every ``every``-th frame with the independent test; the final state."""
    tris = np.asarray(model.tri_indices)
    solver = SolverXPBD(model, substeps=substeps, iterations=4)
    a, b = model.state(), model.state()
    assert len(intersecting_pairs(a.particle_q.numpy().astype(np.float64), tris)) == 0
    for frame in range(frames):
        solver.step(a, b, None, DT)
        a, b = b, a
        if frame % every == every - 1:
            x = a.particle_q.numpy().astype(np.float64)
            assert np.isfinite(x).all()
            assert len(intersecting_pairs(x, tris)) == 0, f"frame {frame}"
    return a


def test_a_cloth_thrown_at_a_box_at_5_m_per_s_never_intersects_itself():
    out = frames_without_intersections(thrown_at_a_box(24), 40, substeps=20)
    assert out.particle_q.numpy()[:, 0].max() < 0.5 + 1e-3  # stopped by the box's face at x = 0.5


@pytest.mark.fuzz
@pytest.mark.parametrize("scene, substeps", [(folded_and_twisted, 10), (thrown_at_a_box, 20)])
def test_a_64x64_cloth_stays_free_of_intersections_for_3_s(scene, substeps):
    """The issue's scale: 64 x 64 cells of a 0.5 m cloth, 1 cm thick, 3 s at 60 Hz (70 s of CPU each)."""
    frames_without_intersections(scene(64), 180, substeps=substeps, every=3)


def test_a_flat_cloth_is_not_pushed_apart_by_its_own_mesh_neighbours():
    """In the flat cloth every vertex lies beside triangles closer than the thickness (8 cells of 1 cm, 2 cm
    thick): those are crease pairs (proximity.py), which push nothing apart, so the cloth settles on the
    ground exactly as without self-collision."""
    def settled(self_collision):
        b = ModelBuilder()
        b.add_ground_plane()
        b.add_cloth_grid(pos=(0.0, 0.0, 0.02), rot=(0.0, 0.0, 0.0, 1.0), vel=(0.0, 0.0, 0.0), dim_x=8, dim_y=8,
                         cell_x=0.01, cell_y=0.01, mass=0.001, self_collision=self_collision,
                         thickness=0.02 if self_collision else None)
        return run(b.finalize(dtype=F64), 30, substeps=5).particle_q.numpy()
    assert np.array_equal(settled(True), settled(False))


def test_a_particles_block_in_a_scene_file_is_written_to_usd_as_points(tmp_path):
    from pxr import Usd, UsdGeom

    from xsim.errors import SceneError
    from xsim.io.rollout import simulate, write_rollout
    from xsim.io.scene import load_scene

    path = tmp_path / "pile.toml"
    path.write_text('[sim]\nframes = 3\n[output]\nusd = "' + str(tmp_path / "pile.usda") + '"\npreview = false\n'
                    '[[particles]]\ngrid = { dim = [2, 2, 3], spacing = 0.03 }\nposition = [0.0, 0.0, 0.05]\n'
                    'radius = 0.012\nmu = 0.3\nrestitution = 0.2\n[[collider]]\ntype = "ground"\n')
    scene = load_scene(path)
    b = scene.builder()
    assert b.particle_count == 12 and b.particle_mu == 0.3 and b.particle_restitution == 0.2
    rollout = simulate(scene, device="cpu")
    write_rollout(scene.output.usd, None, scene, rollout.frames, None)
    stage = Usd.Stage.Open(str(tmp_path / "pile.usda"))
    points = UsdGeom.Points(stage.GetPrimAtPath("/World/Particles/particles0"))
    assert len(points.GetPointsAttr().Get(Usd.TimeCode(2))) == 12
    assert np.allclose(points.GetWidthsAttr().Get(), 0.024)
    path.write_text('replicate = 2\nspacing = [1.0, 0.0, 0.0]\n[[particles]]\ngrid = { dim = [2, 1, 1], spacing = 0.03 }\n'
                    'radius = 0.012\n')
    replicated = load_scene(path)
    replicated.builder()
    assert [(p.name, p.first, p.count, p.radius) for p in replicated.parts] == [
        ("particles0_0", 0, 2, 0.012), ("particles0_1", 2, 2, 0.012)]
    path.write_text('[[particles]]\ngrid = { dim = [1, 1, 1], spacing = 0.03 }\nmu = 0.3\n'
                    '[[particles]]\ngrid = { dim = [1, 1, 1], spacing = 0.03 }\nposition = [1.0, 0.0, 0.0]\n')
    with pytest.raises(SceneError, match=r"particles\[1\]\.mu: expected the same mu as particles\[0\]"):
        load_scene(path)


def test_a_nan_in_a_self_colliding_cloth_is_named_in_check_mode(monkeypatch):
    from xsim.errors import NonFiniteError

    monkeypatch.setattr(xsim.config, "mode", "check")
    model = hanging_cloth(3, True)
    a, b = model.state(), model.state()
    a.particle_q.numpy()[4, 2] = np.nan
    with pytest.raises(NonFiniteError, match=r"SolverXPBD step 1: kernel '\w+'.*holds nan at index \(4,\)"):
        SolverXPBD(model).step(a, b, None, DT)


def crossed_edges(thickness=0.02, drop=0.005, vel=(0.0, 0.0, -0.5), mu=0.4):
    """Two thin pinned triangles ("rails", mirror images across y = 0) with edges along x, and a free
    vertical triangle thrown down at them whose lower edge runs along y across the rails' edges: no vertex
    of either is above or below the other's face, so only edges meet (without edge-edge contacts the upper
    triangle passes through). The contacts are symmetric about the upper triangle's centre; no gravity:
    resting on a line, it would tip over."""
    b = ModelBuilder(gravity=(0.0, 0.0, 0.0))
    b.particle_mu = mu
    for side in (1.0, -1.0):
        rail = np.array([[-1.0, 0.15 * side, 0.0], [1.0, 0.15 * side, 0.0], [1.0, 0.2 * side, 0.0]])
        first = b.add_cloth_mesh(rail, np.array([[0, 1, 2]]), mass=1.0, self_collision=True, thickness=thickness,
                                 bend_compliance=None)
        for i in range(3):
            b.pin_particle(first + i)
    up = np.array([[0.0, -0.3, 0.0], [0.0, 0.3, 0.0], [0.0, 0.0, 0.3]]) + [0.0, 0.0, thickness + drop]
    b.add_cloth_mesh(up, np.array([[0, 1, 2]]), mass=0.01, vel=vel, self_collision=True, thickness=thickness,
                     bend_compliance=None)
    return b.finalize(dtype=F64)


def test_crossed_edges_stop_thickness_apart():
    """The upper triangle is stopped by its lower edge alone (its apex held by its edges' constraints): the
    Jacobi passes leave it a rebound of 0.047 m/s at 4 iterations, 1.8e-4 m/s at 30 (measured), so it is
    held at 30 iterations to 1e-3 of its approach speed, and never below the thickness."""
    model = crossed_edges()
    solver = SolverXPBD(model, substeps=4, iterations=30)
    a, b = model.state(), model.state()
    for _ in range(30):
        solver.step(a, b, None, DT)
        a, b = b, a
        assert a.particle_q.numpy()[6:8, 2].min() > 0.02 - 1e-6  # the upper triangle's lower edge
    assert a.particle_q.numpy()[6:8, 2].max() < 0.02 + 2e-4
    assert np.abs(a.particle_qd.numpy()[6:]).max() < 1e-3 * 0.5


def test_only_edge_contacts_hold_the_crossed_edges():
    """No vertex of the scene has a triangle within reach: the vertex-triangle contacts alone would let the
    upper triangle pass through; its lower edge (2 mm beyond the thickness, within the margin) has one
    edge-edge candidate per rail edge it crosses."""
    model = crossed_edges(drop=0.002)
    x = model.particle_q
    rows = Proximity(model).find(x, x, lambda key, shape, dtype: xsim.zeros(shape, dtype=dtype))
    assert rows.vertex_tri_count.numpy().sum() == 0
    assert rows.edge_edge_count.numpy().sum() == 4


def test_the_gradient_of_an_edge_sliding_across_an_edge_equals_central_differences():
    model = crossed_edges(drop=0.002, vel=(0.3, 0.1, -0.5))
    v0 = model.particle_qd.numpy()
    rng = np.random.default_rng(5)
    seed = (rng.normal(size=v0.shape), np.zeros(v0.shape))
    tape = taped_final(model, v0, 6, seed)
    fd = central_differences(model, v0, 6, seed)
    assert np.abs(tape - fd).max() <= 1e-5 * np.abs(fd).max()
    x = run(model, 6).particle_q.numpy()[6:8]
    assert x[:, 2].min() > 0.02 - 1e-6 and 0.0 < x[0, 0] < 0.3 * 0.1  # held up, slowed by friction


def test_a_model_whose_contact_rows_exceed_the_memory_is_refused_before_allocating(monkeypatch):
    from xsim.sim import validate

    monkeypatch.setattr(validate, "memory_bytes", lambda: 10**6)
    model = hanging_cloth(16, True)
    with pytest.raises(MemoryError, match=r"particle contacts of 289 particles and 512 self-colliding triangles "
                                          r"need .* GiB for their candidate rows, more than this machine's"):
        SolverXPBD(model)


def test_a_nan_particle_radius_is_refused_naming_the_call():
    with pytest.raises(ValueError, match="add_particle: radius must be a finite number"):
        ModelBuilder().add_particle((0.0, 0.0, 0.0), radius=float("nan"))


def heap(path_or_scene, frames=None):
    """A particle scene run ``frames`` frames: (positions (n, 3), speeds (n,), radius, mu)."""
    from xsim.io.scene import load_scene

    scene = load_scene(path_or_scene)
    model = scene.builder().finalize()
    solver = SolverXPBD(model, substeps=scene.sim.substeps, iterations=scene.sim.iterations)
    a, b = model.state(), model.state()
    for _ in range(frames or scene.sim.frames):
        solver.step(a, b, None, scene.sim.dt)
        a, b = b, a
    return (a.particle_q.numpy().astype(np.float64), np.linalg.norm(a.particle_qd.numpy(), axis=1),
            float(model.particle_radius.numpy()[0]), model.particle_mu)


def worst_overlap(x, radius):
    from scipy.spatial import cKDTree

    d, _ = cKDTree(x).query(x, 2)
    return float((2.0 * radius - d[:, 1]).max())


def heap_slope(x):
    """The heap's slope (degrees): a line through the highest particle of each ring about the heap's axis
    (8 rings out to the 98th percentile of the radius; the innermost and outermost left out)."""
    r = np.hypot(x[:, 0] - np.median(x[:, 0]), x[:, 1] - np.median(x[:, 1]))
    body = r < np.percentile(r, 98)
    edges = np.linspace(0.0, r[body].max(), 9)
    top = np.array([x[body & (r >= lo) & (r < hi), 2].max() for lo, hi in itertools.pairwise(edges)])
    mid = 0.5 * (edges[1:] + edges[:-1])
    return math.degrees(math.atan(-np.polyfit(mid[1:-1], top[1:-1], 1)[0]))


def test_a_small_pile_of_particles_comes_to_rest_without_overlapping(tmp_path):
    text = (Path(__file__).resolve().parents[2] / "scenes" / "particle_pile.toml").read_text()
    path = tmp_path / "pile.toml"
    path.write_text(text.replace("dim = [10, 10, 10]", "dim = [5, 5, 8]").replace("frames = 300", "frames = 150"))
    x, speed, radius, _ = heap(path)
    assert worst_overlap(x, radius) < 0.01 * radius
    assert np.median(speed) < 0.005 and x[:, 2].min() > radius - 1e-4


@pytest.mark.fuzz
def test_1000_particles_poured_on_the_ground_form_a_heap_within_the_friction_angle():
    """scenes/particle_pile.toml, 5 s (16 s of CPU): at rest no pair overlaps by 1% of a radius (measured
    0.29%) and the heap's slope is within atan(mu) + 5 degrees (measured 20.8 for 26.6 + 5)."""
    x, speed, radius, mu = heap(Path(__file__).resolve().parents[2] / "scenes" / "particle_pile.toml")
    assert len(x) == 1000
    assert worst_overlap(x, radius) < 0.01 * radius
    assert np.median(speed) < 0.005
    assert heap_slope(x) < math.degrees(math.atan(mu)) + 5.0
