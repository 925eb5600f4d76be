"""Many worlds in one model (``xsim.sim.worlds``): ``add_builder``, ``replicate`` and world contexts
put every entity in a world; a batch of worlds steps exactly like separate models, states and
gradients alike, and worlds never touch each other (contacts filtered by world)."""

import numpy as np
import pytest

import xsim
from xsim.sim import ModelBuilder
from xsim.sim.shapes import SHAPE_PLANE
from xsim.sim.worlds import world_offsets
from xsim.solvers import SolverXPBD

WORLDS = 8
STEPS = 24
DT = 1.0 / 60.0
Y90 = (0.0, np.sin(np.pi / 4), 0.0, np.cos(np.pi / 4))  # a quarter turn about y: a capsule's axis along x


@xsim.kernel
def weighted_particles(x: xsim.array(dtype=xsim.vec3d), w: xsim.array(dtype=xsim.vec3d),
                       loss: xsim.array(dtype=xsim.float64)):
    i = xsim.tid()
    xsim.atomic_add(loss, 0, xsim.dot(x[i], w[i]))


@xsim.kernel
def weighted_bodies(q: xsim.array(dtype=xsim.transformd), w: xsim.array(dtype=xsim.vec3d),
                    loss: xsim.array(dtype=xsim.float64)):
    i = xsim.tid()
    xsim.atomic_add(loss, 0, xsim.dot(xsim.transform_get_translation(q[i]), w[i]))


def one_world(cloth: bool = True) -> ModelBuilder:
    """A 2-link arm (capsules along x, hinged about y at the world point (0, 0, 1)), a 4 x 4 cloth
    dropped onto its first link (unless not ``cloth``), a static sphere and a static mesh square
    under the cloth's corners, and the ground."""
    b = ModelBuilder()
    link1 = b.add_body(((0.25, 0.0, 1.0), (0.0, 0.0, 0.0, 1.0)))
    b.add_shape_capsule(link1, xform=((0.0, 0.0, 0.0), Y90), radius=0.05, half_height=0.2)
    link2 = b.add_body(((0.75, 0.0, 1.0), (0.0, 0.0, 0.0, 1.0)))
    b.add_shape_capsule(link2, xform=((0.0, 0.0, 0.0), Y90), radius=0.05, half_height=0.2)
    b.add_joint_revolute(-1, link1, parent_xform=((0.0, 0.0, 1.0), (0.0, 0.0, 0.0, 1.0)),
                         child_xform=((-0.25, 0.0, 0.0), (0.0, 0.0, 0.0, 1.0)), axis=(0.0, 1.0, 0.0))
    b.add_joint_revolute(link1, link2, parent_xform=((0.25, 0.0, 0.0), (0.0, 0.0, 0.0, 1.0)),
                         child_xform=((-0.25, 0.0, 0.0), (0.0, 0.0, 0.0, 1.0)), axis=(0.0, 1.0, 0.0))
    if cloth:
        b.add_cloth_grid(pos=(0.1, -0.2, 1.07), rot=(0.0, 0.0, 0.0, 1.0), vel=(0.0, 0.0, -0.5), dim_x=4, dim_y=4,
                         cell_x=0.1, cell_y=0.1, mass=0.01, stretch_compliance=1e-5, particle_radius=0.01)
    b.add_collider_sphere((0.1, -0.2, 0.9), radius=0.1, mu=0.3)
    square = (np.array([[0.3, 0.0, 0.0], [0.6, 0.0, 0.0], [0.6, 0.3, 0.0], [0.3, 0.3, 0.0]]),
              np.array([[0, 1, 2], [0, 2, 3]]))
    b.add_collider_mesh(square, pos=(0.0, 0.0, 0.95))
    b.add_ground_plane()
    return b


def xsim_cloth_only() -> ModelBuilder:
    b = ModelBuilder()
    b.add_cloth_grid(pos=(0.0, 0.0, 1.0), rot=(0.0, 0.0, 0.0, 1.0), vel=(0.0, 0.0, 0.0), dim_x=2, dim_y=2,
                     cell_x=0.1, cell_y=0.1, mass=0.01)
    return b


def world_values(k: int, n_particles: int) -> dict:
    """World ``k``'s own initial velocities and collider placements: each world differs."""
    return {"particle_qd": np.tile([0.3 * np.cos(k), 0.2 * np.sin(k), -0.5 - 0.1 * k], (n_particles, 1)),
            "body_qd": np.array([[0.0, 0.0, 0.1 * k, 0.0, 0.4 - 0.15 * k, 0.0],
                                 [0.0, 0.0, -0.05 * k, 0.0, 0.3 * k - 0.5, 0.0]]),
            "collider_pos": np.array([[0.1, -0.2 + 0.04 * k, 0.9 + 0.01 * k], [0.0, -0.02 * k, 0.93 + 0.005 * k]])}


def collider_rows(model) -> np.ndarray:
    """The shapes of the static colliders (body -1, not the ground plane), in the order added."""
    return np.flatnonzero((model.shape_body.numpy() < 0) & (model.shape_type.numpy() != SHAPE_PLANE))


def rollout(model, values: list[dict], weights: tuple[np.ndarray, np.ndarray]):
    """Set each world's ``values`` (stacked in world order), run STEPS steps on a Tape; returns the
    final state as numpy and the loss's gradients with respect to the initial velocities, the
    spring compliances and the collider positions."""
    state = model.state(requires_grad=True)
    for name in ("particle_qd", "body_qd"):
        setattr(state, name, xsim.array(np.concatenate([v[name] for v in values]), dtype=getattr(state, name).dtype,
                                        requires_grad=True))
    xform = model.shape_xform.numpy()
    xform[collider_rows(model), :3] = np.concatenate([v["collider_pos"] for v in values])
    model.shape_xform.assign(xsim.array(xform, dtype=xsim.transformd))
    solver = SolverXPBD(model, substeps=4, iterations=2)
    tape = xsim.Tape()
    start = state
    with tape:
        for _ in range(STEPS):
            nxt = model.state(requires_grad=True)
            solver.step(state, nxt, None, DT)
            state = nxt
        loss = xsim.zeros(1, dtype=xsim.float64, requires_grad=True)
        xsim.launch(weighted_particles, model.particle_count, inputs=[state.particle_q,
                                                                      xsim.array(weights[0], dtype=xsim.vec3d)],
                    outputs=[loss])
        xsim.launch(weighted_bodies, model.body_count, inputs=[state.body_q, xsim.array(weights[1], dtype=xsim.vec3d)],
                    outputs=[loss])
    tape.backward(loss)
    return {"particle_q": state.particle_q.numpy(), "particle_qd": state.particle_qd.numpy(),
            "body_q": state.body_q.numpy(), "body_qd": state.body_qd.numpy(),
            "d_particle_qd": start.particle_qd.grad.numpy(), "d_body_qd": start.body_qd.grad.numpy(),
            "d_spring_compliance": model.spring_compliance.grad.numpy(),
            "d_collider_pos": model.shape_xform.grad.numpy()[collider_rows(model), :3]}


def test_a_batch_of_worlds_steps_and_differentiates_like_separate_rollouts():
    """8 overlapping copies (spacing 0) of a cloth on a 2-link arm, each with its own initial
    velocities and collider placements: every state and gradient equals that of the same world run
    alone, to 1e-12 in float64, so no contact crosses worlds (particle-body, particle-collider,
    body-body) while the global ground is shared."""
    base = one_world()
    batch = ModelBuilder()
    batch.replicate(base, WORLDS)
    model = batch.finalize(dtype=xsim.float64, requires_grad=True)
    n, nb = base.particle_count, base.body_count
    assert model.world_count == WORLDS
    np.testing.assert_array_equal(model.particle_world.numpy(), np.repeat(np.arange(WORLDS), n))
    np.testing.assert_array_equal(model.body_world.numpy(), np.repeat(np.arange(WORLDS), nb))
    # per world two capsules and two colliders (static shapes), then the global ground
    np.testing.assert_array_equal(model.shape_world.numpy(), np.append(np.repeat(np.arange(WORLDS), 4), -1))
    np.testing.assert_array_equal(model.joint_world.numpy(), np.repeat(np.arange(WORLDS), 2))

    rng = np.random.default_rng(5)
    wp, wb = rng.normal(size=(WORLDS, n, 3)), rng.normal(size=(WORLDS, nb, 3))
    values = [world_values(k, n) for k in range(WORLDS)]
    together = rollout(model, values, (wp.reshape(-1, 3), wb.reshape(-1, 3)))
    for k in range(WORLDS):
        alone = rollout(base.finalize(dtype=xsim.float64, requires_grad=True), [values[k]], (wp[k], wb[k]))
        for name, a in alone.items():
            rows = len(a)
            np.testing.assert_allclose(together[name][k * rows:(k + 1) * rows], a, rtol=1e-12, atol=1e-12,
                                       err_msg=f"world {k}: {name}")
    # the scene exercises every contact kind: in every world the cloth meets the sphere and the mesh...
    assert np.all(np.abs(together["d_collider_pos"]).max(axis=1) > 0.0)
    # ...and the arm, which moves otherwise without it
    arm = final_state(one_world(cloth=False).finalize(dtype=xsim.float64),
                      [dict(values[0], particle_qd=np.zeros((0, 3)))], STEPS)
    assert np.abs(arm.body_q.numpy() - together["body_q"][:nb]).max() > 1e-3


def final_state(model, values: list[dict], steps: int = 12):
    """``rollout``'s initial values, stepped without a Tape: the final State."""
    state = model.state()
    for name in ("particle_qd", "body_qd"):
        getattr(state, name).assign(xsim.array(np.concatenate([v[name] for v in values]),
                                               dtype=getattr(state, name).dtype))
    xform = model.shape_xform.numpy()
    xform[collider_rows(model), :3] = np.concatenate([v["collider_pos"] for v in values])
    model.shape_xform.assign(xsim.array(xform, dtype=xsim.transformd))
    solver = SolverXPBD(model, substeps=4, iterations=2)
    for _ in range(steps):
        nxt = model.state()
        solver.step(state, nxt, None, DT)
        state = nxt
    return state


def test_copies_in_one_world_do_meet():
    """Two copies added to one (the global) world push each other's cloth and arms: what the world
    filter prevents."""
    base = one_world()
    n = base.particle_count
    batch = ModelBuilder()
    batch.add_builder(base)
    batch.add_builder(base)
    model = batch.finalize(dtype=xsim.float64)
    assert model.world_count == 1 and set(model.particle_world.numpy()) == {-1}
    values = [world_values(0, n), world_values(5, n)]
    shared = final_state(model, values)
    alone = final_state(base.finalize(dtype=xsim.float64), values[:1])
    assert np.abs(shared.particle_q.numpy()[:n] - alone.particle_q.numpy()).max() > 1e-3
    assert np.abs(shared.body_q.numpy()[:2] - alone.body_q.numpy()).max() > 1e-3


def test_replicate_places_copies_on_newtons_grid_and_add_builder_moves_a_copy_rigidly():
    np.testing.assert_allclose(world_offsets(4, (1.0, 2.0, 0.0)),
                               [[-0.5, -1.0, 0.0], [0.5, -1.0, 0.0], [-0.5, 1.0, 0.0], [0.5, 1.0, 0.0]])
    np.testing.assert_allclose(world_offsets(3, (0.0, 0.0, 2.0)), [[0.0, 0.0, 0.0], [0.0, 0.0, 2.0], [0.0, 0.0, 4.0]])
    np.testing.assert_allclose(world_offsets(27, (1.0, 1.0, 1.0))[26], [1.0, 1.0, 2.0])  # a 3 x 3 x 3 cube
    base = one_world()
    b = ModelBuilder()
    b.replicate(base, 2, spacing=(2.0, 0.0, 0.0))
    m = b.finalize(dtype=xsim.float64)
    n = base.particle_count
    x = m.particle_q.numpy()
    np.testing.assert_allclose(x[n:] - x[:n], np.tile([2.0, 0.0, 0.0], (n, 1)), atol=1e-15)
    np.testing.assert_allclose(m.body_q.numpy()[2:, :3] - m.body_q.numpy()[:2, :3], [[2.0, 0.0, 0.0]] * 2)
    colliders = m.shape_xform.numpy()[collider_rows(m), :3]
    np.testing.assert_allclose(colliders[2:] - colliders[:2], [[2.0, 0.0, 0.0]] * 2)
    assert m.ground and m.shape_count == 9  # 4 capsules, 4 colliders and one shared ground
    cloth_only = ModelBuilder()
    cloth_only.add_world(xsim_cloth_only())
    m = cloth_only.finalize()
    assert m.world_count == 1 and set(m.particle_world.numpy()) == {0} and m.body_world.shape == (0,)

    # a quarter turn about z at (1, 2, 3): positions, velocities, body and world-anchored joint frames
    turn = ((1.0, 2.0, 3.0), (0.0, 0.0, np.sin(np.pi / 4), np.cos(np.pi / 4)))
    b = ModelBuilder()
    b.add_builder(base, xform=turn)
    m = b.finalize(dtype=xsim.float64)

    def moved(p):
        return np.array([1.0 - p[1], 2.0 + p[0], 3.0 + p[2]])
    np.testing.assert_allclose(m.particle_q.numpy()[0], moved(base.particle_q[0]), atol=1e-15)
    np.testing.assert_allclose(m.particle_qd.numpy()[0], [0.0, 0.0, -0.5], atol=1e-15)
    np.testing.assert_allclose(m.body_q.numpy()[1, :3], moved((0.75, 0.0, 1.0)), atol=1e-15)
    np.testing.assert_allclose(m.joint_X_p.numpy()[0, :3], moved((0.0, 0.0, 1.0)), atol=1e-15)
    np.testing.assert_allclose(m.shape_xform.numpy()[collider_rows(m)[0], :3], moved((0.1, -0.2, 0.9)), atol=1e-15)
    # the joints still hold: the initial joint coordinates are those of the unmoved arm
    np.testing.assert_allclose(m.joint_q.numpy(), base.finalize(dtype=xsim.float64).joint_q.numpy(), atol=1e-12)


def test_worlds_are_refused_where_they_would_meet():
    b = ModelBuilder()
    b.begin_world()
    p0 = b.add_particle((0.0, 0.0, 0.0))
    body0 = b.add_body()
    with pytest.raises(RuntimeError, match="world 0 is still open"):
        b.begin_world()
    b.end_world()
    with pytest.raises(RuntimeError, match="no world is open"):
        b.end_world()
    b.begin_world()
    p1 = b.add_particle((1.0, 0.0, 0.0))
    body1 = b.add_body()
    with pytest.raises(ValueError, match=r"add_distance_constraint: joins entities of worlds \[0, 1\]"):
        b.add_distance_constraint(p0, p1)
    with pytest.raises(ValueError, match=r"add_joint: joins entities of worlds \[0, 1\]"):
        b.add_joint_revolute(body0, body1)
    with pytest.raises(RuntimeError, match="replicate: world 1 is open"):
        b.replicate(one_world(), 2)
    b.end_world()
    g = ModelBuilder()
    g.add_ground_plane(mu=0.1)
    with pytest.raises(ValueError, match="the ground plane is shared by all worlds"):
        g.add_builder(one_world())
    with pytest.raises(ValueError, match="gravity is one per model"):
        b.add_builder(ModelBuilder(gravity=(0.0, 0.0, -1.0)))
    with pytest.raises(ValueError, match="copy_count must be an integer >= 0"):
        ModelBuilder().replicate(one_world(), -1)
