"""The rigid broad phase (xsim/collision/broad_phase.py) against all-pairs references in plain numpy,
and the per-step contact pruning against solving every candidate contact."""

import numpy as np
import pytest

import xsim
from xsim.collision.broad_phase import BroadPhase, run_starts
from xsim.sim import ModelBuilder
from xsim.sim.shapes import quat_to_matrix
from xsim.solvers import SolverXPBD


def random_scene(seed, n=40, turned=False):
    """Boxes, spheres and capsules scattered in a 3 m cube with random poses, a few static, two joined."""
    return random_builder(seed, n, turned).finalize(dtype=xsim.float64)


def random_builder(seed, n=40, turned=False):
    """The ModelBuilder of ``random_scene``; ``turned``: each shape off its body's centre and turned on it."""
    rng = np.random.default_rng(seed)
    b = ModelBuilder()
    b.add_ground_plane()
    for k in range(n):
        q = rng.normal(size=4)
        body = b.add_body((rng.uniform(0.0, 3.0, 3), q / np.linalg.norm(q)), lin_vel=rng.normal(size=3),
                          ang_vel=rng.normal(size=3))
        q = rng.normal(size=4)
        xf = {"xform": (rng.uniform(-0.2, 0.2, 3), q / np.linalg.norm(q))} if turned else {}
        kind = k % 3
        if kind == 0:
            b.add_shape_box(body, hx=rng.uniform(0.05, 0.4), hy=rng.uniform(0.05, 0.4), hz=rng.uniform(0.05, 0.4),
                            **xf)
        elif kind == 1:
            b.add_shape_sphere(body, radius=rng.uniform(0.05, 0.4), **xf)
        else:
            b.add_shape_capsule(body, radius=rng.uniform(0.05, 0.2), half_height=rng.uniform(0.05, 0.4), **xf)
    b.add_shape_box(-1, xform=((1.5, 1.5, 1.0), (0.0, 0.0, 0.0, 1.0)), hx=0.3, hy=0.3, hz=0.3)
    b.add_joint_ball(0, 1, parent_xform=((0.0, 0.0, 0.0), (0.0, 0.0, 0.0, 1.0)))
    return b


def reference_pairs(model, dt):
    """All pairs of shapes whose boxes (world corners of each shape, grown by half the margin and the
    motion bound) overlap, or a shape within reach of the plane z = 0; eligible as the builder says."""
    r = model
    body, kind = r.shape_body.numpy(), r.shape_type.numpy()
    size, xf = r.shape_size.numpy(), r.shape_xform.numpy()
    q, qd, inv_mass = model.state().body_q.numpy(), model.state().body_qd.numpy(), r.body_inv_mass.numpy()
    lo, hi, motion = [], [], []
    for s in range(len(body)):
        pose = q[body[s]] if body[s] >= 0 else np.array([0, 0, 0, 0, 0, 0, 1.0])
        rot = quat_to_matrix(pose[3:])
        centre = pose[:3] + rot @ xf[s, :3]
        if kind[s] == 2:  # box: its eight corners
            local = np.array([[x, y, z] for x in (-1, 1) for y in (-1, 1) for z in (-1, 1)]) * size[s]
            pts = centre + local @ (rot @ quat_to_matrix(xf[s, 3:])).T
            lo_s, hi_s = pts.min(0), pts.max(0)
        elif kind[s] == 3:  # capsule: its axis' ends, grown by the radius
            axis = rot @ quat_to_matrix(xf[s, 3:]) @ [0.0, 0.0, size[s, 1]]
            pts = np.array([centre - axis, centre + axis])
            lo_s, hi_s = pts.min(0) - size[s, 0], pts.max(0) + size[s, 0]
        else:  # sphere (the plane is handled apart)
            lo_s, hi_s = centre - size[s, 0], centre + size[s, 0]
        m = 0.0
        if body[s] >= 0:
            v = qd[body[s]]
            arm = rot @ xf[s, :3]
            m = (np.linalg.norm(v[:3]) + np.linalg.norm(v[3:]) * (np.linalg.norm(arm) + r.shape_bound.numpy()[s])) * dt
        grow = 0.5 * r.rigid_contact_margin + m
        lo.append(lo_s - grow)
        hi.append(hi_s + grow)
        motion.append(m)
    out = set()
    for a in range(len(body)):
        for b in range(a + 1, len(body)):
            if body[a] == body[b] or not (inv_mass[body[a]] > 0 if body[a] >= 0 else False) and not (
                    inv_mass[body[b]] > 0 if body[b] >= 0 else False) or {body[a], body[b]} == {0, 1}:
                continue
            if kind[a] == 0 or kind[b] == 0:
                s = b if kind[a] == 0 else a
                if lo[s][2] < 0.5 * r.rigid_contact_margin:
                    out.add((a, b))
            elif np.all(lo[a] <= hi[b]) and np.all(lo[b] <= hi[a]):
                out.add((a, b))
    return out


@pytest.mark.parametrize("seed, turned", [(0, False), (1, True), (2, False), (3, True)])
@pytest.mark.parametrize("few", [0, 1024])  # the sweep, and the test of every pair of a small model
def test_sweep_finds_exactly_the_pairs_of_an_all_pairs_test(seed, turned, few):
    model = random_scene(seed, turned=turned)
    dt = 0.05
    state = model.state()
    broad = BroadPhase(model, few=few)
    assert (broad._fixed is None) == (few == 0)
    r = model
    # the com frames are the body frames here (uniform shapes centred on their bodies)
    pairs, reach, spin = broad.find_pairs(state.body_q.numpy(), state.body_qd.numpy(), r.shape_xform.numpy(),
                                          r.shape_size.numpy(), dt)
    expected = reference_pairs(model, dt)
    assert len(expected) > 20
    assert {(int(a), int(b)) for a, b in pairs[:, :2]} == expected
    assert np.all(reach >= r.rigid_contact_margin) and np.all(spin >= 0.0)


def test_worlds_laid_on_each_other_give_each_world_its_own_pairs():
    # three copies of a random scene in one place: each world's pairs are the one-world scene's, no more
    one = random_scene(0)
    r1 = one
    single, reach1, _ = BroadPhase(r1).find_pairs(one.body_q.numpy(), one.body_qd.numpy(), r1.shape_xform.numpy(),
                                                  r1.shape_size.numpy(), 0.05)
    b = ModelBuilder()
    b.replicate(random_builder(0), 3)
    model = b.finalize(dtype=xsim.float64)
    r = model
    broad = BroadPhase(r)
    assert broad.group is not None  # the sweep keeps the worlds apart
    pairs, reach, _ = broad.find_pairs(model.body_q.numpy(), model.body_qd.numpy(), r.shape_xform.numpy(),
                                       r.shape_size.numpy(), 0.05)
    # world k's shapes, in the one-world scene's order: its own, then the shared ground plane
    world = r.shape_world.numpy()
    where = [np.append(np.flatnonzero(world == k), np.flatnonzero(world < 0)) for k in range(3)]
    assert all(np.array_equal(r.shape_type.numpy()[w], r1.shape_type.numpy()) for w in where)
    expected = np.concatenate([np.column_stack([w[single[:, 0]], w[single[:, 1]], single[:, 2:]]) for w in where])
    order = np.lexsort((expected[:, 1], expected[:, 0]))
    assert np.array_equal(pairs, expected[order])
    assert np.array_equal(reach, np.tile(reach1, 3)[order])


def test_shapes_without_any_eligible_pair_skip_the_broad_phase():
    # pendulums of two joined links, laid on each other in 4 worlds: no pair can collide, the sweep is skipped;
    # a free sphere added to each world makes only the spheres and the links they can reach take part
    def pendulum(sphere):
        b = ModelBuilder()
        links = [b.add_body(((0.2 * k, 0.0, 1.0), (0.0, 0.0, 0.0, 1.0))) for k in range(2)]
        for body in links:
            b.add_shape_box(body, hx=0.15, hy=0.05, hz=0.05)
        b.add_joint_revolute(-1, links[0], parent_xform=((0.0, 0.0, 1.0), (0.0, 0.0, 0.0, 1.0)))
        b.add_joint_revolute(links[0], links[1], parent_xform=((0.2, 0.0, 0.0), (0.0, 0.0, 0.0, 1.0)))
        if sphere:
            b.add_shape_sphere(b.add_body(((0.1, 0.0, 1.0), (0.0, 0.0, 0.0, 1.0))), radius=0.1)
        return b
    for sphere in (False, True):
        b = ModelBuilder()
        b.replicate(pendulum(sphere), 4)
        model = b.finalize(dtype=xsim.float64)
        r = model
        broad = BroadPhase(r)
        pairs, reach, spin = broad.find_pairs(model.body_q.numpy(), model.body_qd.numpy(), r.shape_xform.numpy(),
                                              r.shape_size.numpy(), 0.01)
        if not sphere:
            assert len(broad.active) == 0 and pairs.shape == (0, 4) and len(reach) == len(spin) == 0
        else:
            assert len(broad.active) == 12
            # each world's sphere touches both of its links, and nothing of another world
            assert [tuple(p) for p in pairs[:, :2]] == [(3 * k + j, 3 * k + 2) for k in range(4) for j in (0, 1)]


def test_pairs_grow_with_the_touching_shapes_not_with_all_pairs():
    # 300 spheres in a row, each touching the next: 299 sphere pairs and 300 with the ground, of 45k pairs
    b = ModelBuilder()
    b.add_ground_plane()
    for k in range(300):
        body = b.add_body(((0.2 * k, 0.0, 0.1), (0.0, 0.0, 0.0, 1.0)))
        b.add_shape_sphere(body, radius=0.1)
    model = b.finalize(dtype=xsim.float64)
    r = model
    pairs, _, _ = BroadPhase(r).find_pairs(model.body_q.numpy(), model.body_qd.numpy(), r.shape_xform.numpy(),
                                           r.shape_size.numpy(), 0.01)
    assert len(pairs) == 299 + 300


def mixed_scene():
    """Boxes stacked, turned and dropped on each other, capsules and a sphere: every contact kind."""
    b = ModelBuilder()
    b.add_ground_plane(mu=0.6)
    for k in range(3):
        body = b.add_body(((0.03 * k, 0.0, 0.1 + 0.2 * k), (0.0, 0.0, np.sin(0.1 * k), np.cos(0.1 * k))))
        b.add_shape_box(body, hx=0.2, hy=0.2, hz=0.1, mu=0.6)
    h = np.radians(30) / 2
    top = b.add_body(((0.05, 0.0, 0.72), (0.1, 0.0, np.sin(h), np.cos(h))), lin_vel=(0.0, 0.0, -1.0))
    b.add_shape_box(top, hx=0.2, hy=0.2, hz=0.1, mu=0.6)
    c = b.add_body(((0.6, 0.0, 0.3), (0.3, 0.0, 0.0, 0.95)))
    b.add_shape_capsule(c, radius=0.05, half_height=0.2)
    c2 = b.add_body(((0.65, 0.05, 0.6), (0.0, 0.3, 0.0, 0.95)))
    b.add_shape_capsule(c2, radius=0.05, half_height=0.2)
    s = b.add_body(((0.5, 0.0, 0.9), (0.0, 0.0, 0.0, 1.0)), lin_vel=(0.0, 0.0, -2.0))
    b.add_shape_sphere(s, radius=0.1)
    return b.finalize(dtype=xsim.float64)


def rollout(model, steps=60):
    solver = SolverXPBD(model, substeps=10, iterations=1)
    a, b = model.state(), model.state()
    counts = []
    for _ in range(steps):
        solver.step(a, b, None, 1.0 / 60.0)
        a, b = b, a
        counts.append(solver.rigid.contact_count)
    return np.concatenate([a.body_q.numpy().ravel(), a.body_qd.numpy().ravel()]), counts


@pytest.mark.parametrize("seed", [0, 1])
def test_candidate_contacts_list_each_pairs_points_then_its_near_edge_pairs_in_order(seed):
    # reference in plain Python: per pair, a's points, b's, then the segment contacts (a box pair: the
    # edge pairs 12 i + j whose edges i of a and j of b are both near, in that order)
    model = random_scene(seed)
    broad = BroadPhase(model)
    state = model.state()
    pairs, _, _ = broad.find_pairs(state.body_q.numpy(), state.body_qd.numpy(), model.shape_xform.numpy(),
                                   model.shape_size.numpy(), 1.0 / 60.0)
    kind, count = broad.shape_type, broad.point_count
    box_pairs = np.flatnonzero((kind[pairs[:, 0]] == 2) & (kind[pairs[:, 1]] == 2))
    assert len(box_pairs) >= 3
    near = np.random.default_rng(seed).random((len(box_pairs), 2, 12)) < 0.4
    near[0] = False  # a box pair with no near edge keeps its points
    pair, index = broad.candidate_contacts(pairs, lambda bp: near if np.array_equal(bp, box_pairs) else None)
    expected = []
    for k, (a, b, pa, pb) in enumerate(pairs):
        points = count[a] * pa + count[b] * pb
        expected += [(k, i) for i in range(points)]
        if k in box_pairs:
            m = near[list(box_pairs).index(k)]
            expected += [(k, points + 12 * i + j) for i in range(12) for j in range(12) if m[0, i] and m[1, j]]
        else:
            expected += [(k, points + i) for i in range(broad.segments[kind[a], kind[b]])]
    assert list(zip(pair.tolist(), index.tolist())) == expected


def test_pruned_contacts_give_the_rollout_of_every_candidate_contact(monkeypatch):
    pruned, kept = rollout(mixed_scene())
    # every candidate: all 144 edge pairs of each box pair, none dropped for being out of reach
    every_edge = BroadPhase.candidate_contacts
    monkeypatch.setattr(BroadPhase, "candidate_contacts", lambda self, pairs, edges_near: every_edge(
        self, pairs, lambda box_pairs: np.ones((len(box_pairs), 2, 12), bool)))
    monkeypatch.setattr(BroadPhase, "within_reach", lambda self, pairs, pair, depth, reach: np.ones(len(pair), bool))
    full, every = rollout(mixed_scene())
    assert np.abs(pruned - full).max() < 1e-9
    assert sum(kept) < 0.2 * sum(every)  # most of the 144 edge pairs of each box pair are dropped


def test_body_with_a_free_joint_still_rests_on_the_ground():
    b = ModelBuilder()
    b.add_ground_plane()
    body = b.add_body(((0.0, 0.0, 0.3), (0.0, 0.0, 0.0, 1.0)))
    b.add_shape_box(body, hx=0.1, hy=0.1, hz=0.1)
    b.add_joint_free(body)
    model = b.finalize(dtype=xsim.float64)
    solver = SolverXPBD(model, substeps=10, iterations=1)
    a, c = model.state(), model.state()
    for _ in range(60):
        solver.step(a, c, None, 1.0 / 60.0)
        a, c = c, a
    assert abs(a.body_q.numpy()[0, 2] - 0.1) < 2e-3


def test_run_starts_gives_the_first_index_of_each_run_of_equal_values():
    assert run_starts(np.array([3, 3, 5, 7, 7, 7, 2])).tolist() == [0, 2, 3, 6]
    assert run_starts(np.array([4])).tolist() == [0]
    assert run_starts(np.zeros(0, dtype=np.int64)).tolist() == []
