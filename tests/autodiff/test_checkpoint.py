"""Checkpointed rollouts give the plain tape's gradients, in less memory; ``Tape.memory`` counts
the bytes a tape keeps alive.

Two rollouts, both in float64: a chain of particles joined by springs, stepped with
semi-implicit Euler by the kernels below (its spring stiffness and gravity are one-element arrays
that every step reads, so their gradients must accumulate across all segments), and a pinned XPBD
cloth (``SolverXPBD``), whose compliances and inverse masses every step reads.
"""

import numpy as np
import pytest

import xsim
from xsim.autodiff.checkpoint import array_attributes, checkpointed_rollout
from xsim.sim import ModelBuilder
from xsim.solvers import SolverXPBD

F64 = xsim.float64
N = 6             # particles
STEPS = 20
DT = 0.01


@xsim.kernel
def spring_forces(q: xsim.array(dtype=xsim.vec3d), springs: xsim.array(dtype=int, ndim=2),
                  rest: xsim.array(dtype=F64), stiffness: xsim.array(dtype=F64), f: xsim.array(dtype=xsim.vec3d)):
    s = xsim.tid()
    i = springs[s, 0]
    j = springs[s, 1]
    d = q[j] - q[i]
    dist = xsim.length(d)
    fs = d * (stiffness[0] * (dist - rest[s]) / dist)
    xsim.atomic_add(f, i, fs)
    xsim.atomic_sub(f, j, fs)


@xsim.kernel
def integrate(q: xsim.array(dtype=xsim.vec3d), qd: xsim.array(dtype=xsim.vec3d), f: xsim.array(dtype=xsim.vec3d),
              inv_mass: xsim.array(dtype=F64), gravity: xsim.array(dtype=xsim.vec3d), dt: F64,
              q_out: xsim.array(dtype=xsim.vec3d), qd_out: xsim.array(dtype=xsim.vec3d)):
    i = xsim.tid()
    v = qd[i] + (f[i] * inv_mass[i] + gravity[0]) * dt
    qd_out[i] = v
    q_out[i] = q[i] + v * dt


@xsim.kernel
def distance_loss(q: xsim.array(dtype=xsim.vec3d), qd: xsim.array(dtype=xsim.vec3d),
                  target: xsim.array(dtype=xsim.vec3d), loss: xsim.array(dtype=F64)):
    i = xsim.tid()
    d = q[i] - target[i]
    xsim.atomic_add(loss, 0, xsim.dot(d, d) + F64(0.1) * xsim.dot(qd[i], qd[i]))


@xsim.kernel
def squared_norm_loss(q: xsim.array(dtype=xsim.vec3d), loss: xsim.array(dtype=F64)):
    i = xsim.tid()
    xsim.atomic_add(loss, 0, xsim.dot(q[i], q[i]))


@xsim.kernel
def body_position_loss(body_q: xsim.array(dtype=xsim.transformd), loss: xsim.array(dtype=F64)):
    i = xsim.tid()
    p = xsim.transform_get_translation(body_q[i])
    xsim.atomic_add(loss, 0, xsim.dot(p, p))


@xsim.kernel
def halve_in_place(qd: xsim.array(dtype=xsim.vec3d)):
    i = xsim.tid()
    qd[i] = qd[i] * F64(0.5)


@xsim.kernel
def scale_values(x: xsim.array(dtype=F64), s: F64, y: xsim.array(dtype=F64)):
    i = xsim.tid()
    y[i] = x[i] * s


class ParticleState:
    """A State in the solver's shape: array attributes, one per quantity."""

    def __init__(self, q, qd):
        self.particle_q = q
        self.particle_qd = qd


class Chain:
    """Springs, masses and the two parameters every step reads."""

    def __init__(self, stiffness=40.0):
        rng = np.random.default_rng(3)
        self.springs = xsim.array(np.array([[i, i + 1] for i in range(N - 1)], dtype=np.int32), dtype=int)
        self.rest = xsim.array(np.full(N - 1, 0.2), dtype=F64)
        self.inv_mass = xsim.array(rng.uniform(0.5, 2.0, N), dtype=F64)
        self.stiffness = xsim.array([stiffness], dtype=F64, requires_grad=True)
        self.gravity = xsim.array(np.array([[0.0, -9.8, 0.0]]), dtype=xsim.vec3d, requires_grad=True)
        self.target = xsim.array(rng.uniform(-0.5, 0.5, (N, 3)), dtype=xsim.vec3d)
        self.q0 = np.stack([np.arange(N) * 0.25, np.zeros(N), rng.uniform(-0.05, 0.05, N)], axis=1)
        self.qd0 = rng.uniform(-1.0, 1.0, (N, 3))

    def state0(self) -> ParticleState:
        return ParticleState(xsim.array(self.q0, dtype=xsim.vec3d, requires_grad=True),
                             xsim.array(self.qd0, dtype=xsim.vec3d, requires_grad=True))

    def new_state(self) -> ParticleState:
        return ParticleState(xsim.zeros(N, dtype=xsim.vec3d, requires_grad=True),
                             xsim.zeros(N, dtype=xsim.vec3d, requires_grad=True))

    def step(self, s_in: ParticleState, s_out: ParticleState, step: int) -> None:
        f = xsim.zeros(N, dtype=xsim.vec3d, requires_grad=True)
        xsim.launch(spring_forces, N - 1, inputs=[s_in.particle_q, self.springs, self.rest, self.stiffness], outputs=[f])
        xsim.launch(integrate, N, inputs=[s_in.particle_q, s_in.particle_qd, f, self.inv_mass, self.gravity, DT],
                    outputs=[s_out.particle_q, s_out.particle_qd])

    def loss(self, s: ParticleState) -> xsim.array:
        loss = xsim.zeros(1, dtype=F64, requires_grad=True)
        xsim.launch(distance_loss, N, inputs=[s.particle_q, s.particle_qd, self.target], outputs=[loss])
        return loss

    def plain_tape_rollout(self, state0: ParticleState, steps: int = STEPS):
        """The reference: every step on one tape, each into a new state."""
        tape = xsim.Tape()
        with tape:
            s = state0
            for i in range(steps):
                out = self.new_state()
                self.step(s, out, i)
                s = out
            loss = self.loss(s)
        tape.backward(loss)
        return tape, loss, s


def grads(chain: Chain, state0: ParticleState) -> dict:
    return {"q0": state0.particle_q.grad.numpy().copy(), "qd0": state0.particle_qd.grad.numpy().copy(),
            "stiffness": chain.stiffness.grad.numpy().copy(), "gravity": chain.gravity.grad.numpy().copy()}


def plain_reference(steps: int = STEPS):
    chain = Chain()
    s0 = chain.state0()
    _, loss, final = chain.plain_tape_rollout(s0, steps)
    return float(loss.numpy()[0]), final.particle_q.numpy().copy(), grads(chain, s0)


@pytest.mark.parametrize("segment", [1, 3, 4, 7, STEPS, None])
def test_checkpointed_gradients_equal_plain_tape_for_every_segment_length(segment):
    ref_loss, ref_q, ref = plain_reference()
    chain = Chain()
    s0 = chain.state0()
    result = checkpointed_rollout(chain.step, s0, STEPS, chain.loss, segment=segment, state_factory=chain.new_state)
    got = grads(chain, s0)
    assert result.loss == pytest.approx(ref_loss, rel=1e-12)
    np.testing.assert_allclose(result.final_state.particle_q.numpy(), ref_q, rtol=1e-12)
    for name in ref:
        assert np.abs(ref[name]).max() > 1e-5, name   # every gradient is really exercised
        np.testing.assert_allclose(got[name], ref[name], rtol=1e-6, atol=1e-12 * np.abs(ref[name]).max(),
                                   err_msg=name)


def test_parameter_gradient_matches_central_finite_differences():
    # The reference itself is checked: d loss / d stiffness from the plain tape against central differences.
    _, _, ref = plain_reference()

    def loss_at(k):
        chain = Chain(stiffness=k)
        s = chain.state0()
        for i in range(STEPS):
            out = chain.new_state()
            chain.step(s, out, i)
            s = out
        return float(chain.loss(s).numpy()[0])

    h = 1e-5
    fd = (loss_at(40.0 + h) - loss_at(40.0 - h)) / (2 * h)
    assert ref["stiffness"][0] == pytest.approx(fd, rel=1e-6)


def test_default_segment_is_rounded_square_root_of_steps():
    chain = Chain()
    result = checkpointed_rollout(chain.step, chain.state0(), 16, chain.loss, state_factory=chain.new_state)
    assert (result.segment, result.num_segments) == (4, 4)
    result = checkpointed_rollout(chain.step, chain.state0(), 10, chain.loss, state_factory=chain.new_state)
    assert (result.segment, result.num_segments) == (3, 4)   # 3 + 3 + 3 + 1
    result = checkpointed_rollout(chain.step, chain.state0(), 5, chain.loss, segment=50, state_factory=chain.new_state)
    assert (result.segment, result.num_segments) == (5, 1)   # longer than the rollout: one plain tape


def test_default_state_factory_copies_state0_with_fresh_arrays():
    ref_loss, _, ref = plain_reference()
    chain = Chain()
    s0 = chain.state0()
    result = checkpointed_rollout(chain.step, s0, STEPS, chain.loss, segment=5)
    assert result.loss == pytest.approx(ref_loss, rel=1e-12)
    np.testing.assert_allclose(grads(chain, s0)["q0"], ref["q0"], rtol=1e-6)
    assert result.final_state.particle_q is not s0.particle_q


def test_default_checkpoint_attributes_are_the_states_xsim_arrays():
    s = Chain().state0()
    s.label, s.host_copy = "chain", np.zeros(3)
    assert array_attributes(s) == ["particle_q", "particle_qd"]


def test_gradients_accumulate_across_calls_like_tape_backward():
    _, _, ref = plain_reference()
    chain = Chain()
    s0 = chain.state0()
    for _ in range(2):
        checkpointed_rollout(chain.step, s0, STEPS, chain.loss, segment=6, state_factory=chain.new_state)
    np.testing.assert_allclose(chain.stiffness.grad.numpy(), 2 * ref["stiffness"], rtol=1e-6)
    np.testing.assert_allclose(s0.particle_qd.grad.numpy(), 2 * ref["qd0"], rtol=1e-6)


def test_step_that_writes_its_input_state_is_recomputed_from_the_original_values():
    # A step that also damps its input state in place (as a solver clearing forces would): the
    # forward pass changes state0, so the backward pass must restart segment 0 from state0's old values.
    def damped_step(chain, s_in, s_out, i):
        xsim.launch(halve_in_place, N, inputs=[s_in.particle_qd])
        chain.step(s_in, s_out, i)

    ref_chain = Chain()
    ref_s0 = ref_chain.state0()
    tape = xsim.Tape()
    with tape:
        s = ref_s0
        for i in range(STEPS):
            out = ref_chain.new_state()
            damped_step(ref_chain, s, out, i)
            s = out
        ref_loss = ref_chain.loss(s)
    tape.backward(ref_loss)

    chain = Chain()
    s0 = chain.state0()
    result = checkpointed_rollout(lambda a, b, i: damped_step(chain, a, b, i), s0, STEPS, chain.loss, segment=4,
                                  state_factory=chain.new_state)
    assert result.loss == pytest.approx(float(ref_loss.numpy()[0]), rel=1e-12)
    np.testing.assert_allclose(s0.particle_qd.grad.numpy(), ref_s0.particle_qd.grad.numpy(), rtol=1e-6)
    np.testing.assert_allclose(chain.gravity.grad.numpy(), ref_chain.gravity.grad.numpy(), rtol=1e-6)


def test_rollout_records_nothing_on_an_enclosing_tape():
    chain = Chain()
    with xsim.Tape() as outer:
        checkpointed_rollout(chain.step, chain.state0(), 8, chain.loss, segment=2, state_factory=chain.new_state)
    assert outer.records == []


def test_checkpointed_peak_tape_memory_is_one_segment_of_the_plain_tape():
    steps = 100
    chain = Chain()
    plain_tape, _, _ = chain.plain_tape_rollout(chain.state0(), steps)
    result = checkpointed_rollout(chain.step, chain.state0(), steps, chain.loss, segment=10,
                                  state_factory=chain.new_state)
    # Per step the plain tape holds a new state (q, qd) and the force array, each with its grad:
    # 3 arrays x 2 x N x 24 bytes; plus the parameters, the fixed model arrays and the loss.
    per_step = 3 * 2 * N * 24
    assert plain_tape.memory() >= steps * per_step
    assert result.peak_tape_bytes < plain_tape.memory() / 5
    assert result.checkpoint_bytes == 10 * 2 * N * 24    # 10 detached states, no grads


def test_bad_step_counts_and_segments_are_refused():
    chain = Chain()
    with pytest.raises(ValueError, match="num_steps"):
        checkpointed_rollout(chain.step, chain.state0(), 0, chain.loss)
    with pytest.raises(ValueError, match="segment"):
        checkpointed_rollout(chain.step, chain.state0(), 4, chain.loss, segment=0)


# -- XPBD cloth ------------------------------------------------------------------------------------

CLOTH_STEPS = 12


def cloth_rollout_setup():
    """A 4x4-particle cloth pinned along one edge, thrown sideways, 3 Jacobi iterations per step."""
    b = ModelBuilder()
    b.add_cloth_grid(pos=(0.0, 0.0, 1.0), rot=(0.0, 0.0, 0.0, 1.0), vel=(0.1, 0.0, 0.3), dim_x=3, dim_y=3,
                     cell_x=0.1, cell_y=0.1, mass=0.1, fix_top=True, stretch_compliance=1e-4,
                     shear_compliance=1e-3)
    model = b.finalize(device=xsim.get_device(), requires_grad=True, dtype=xsim.float64)
    solver = SolverXPBD(model, iterations=3)
    control = model.control()
    return model, lambda s_in, s_out, i: solver.step(s_in, s_out, control, 1.0 / 60.0)


def cloth_loss(state):
    loss = xsim.zeros(1, dtype=F64, requires_grad=True)
    xsim.launch(squared_norm_loss, state.particle_q.shape[0], inputs=[state.particle_q], outputs=[loss])
    return loss


def cloth_grads(model, state0) -> dict:
    return {"qd0": state0.particle_qd.grad.numpy().copy(), "q0": state0.particle_q.grad.numpy().copy(),
            "spring_compliance": model.spring_compliance.grad.numpy().copy(),
            "particle_inv_mass": model.particle_inv_mass.grad.numpy().copy()}


# -- XPBD rigid bodies ------------------------------------------------------------------------------

RIGID_STEPS = 12


def rigid_rollout_setup():
    """A revolute pendulum set swinging and a box thrown onto the ground (contacts and a joint)."""
    b = ModelBuilder()
    bob = b.add_body(((0.0, 0.0, 1.0), (0.0, 0.0, 0.0, 1.0)), lin_vel=(0.5, 0.0, 0.0), ang_vel=(0.0, 0.5, 0.0))
    b.add_shape_sphere(bob, radius=0.1)
    b.add_joint_revolute(-1, bob, parent_xform=((0.0, 0.0, 2.0), (0.0, 0.0, 0.0, 1.0)),
                         child_xform=((0.0, 0.0, 1.0), (0.0, 0.0, 0.0, 1.0)), axis=(0.0, 1.0, 0.0))
    box = b.add_body(((1.0, 0.0, 0.12), (0.0, 0.0, 0.0, 1.0)), lin_vel=(1.0, 0.0, -0.5))
    b.add_shape_box(box, hx=0.1, hy=0.1, hz=0.1)
    b.add_ground_plane(mu=0.5)
    model = b.finalize(device=xsim.get_device(), requires_grad=True, dtype=xsim.float64)
    solver = SolverXPBD(model, substeps=2, iterations=1)
    control = model.control()
    return model, lambda s_in, s_out, i: solver.step(s_in, s_out, control, 1.0 / 60.0)


def rigid_loss(state):
    loss = xsim.zeros(1, dtype=F64, requires_grad=True)
    xsim.launch(body_position_loss, state.body_q.shape[0], inputs=[state.body_q], outputs=[loss])
    return loss


def rigid_grads(model, state0) -> dict:
    return {"body_q0": state0.body_q.grad.numpy().copy(), "body_qd0": state0.body_qd.grad.numpy().copy()}


ROLLOUTS = {  # name: (setup, loss, gradients to compare, steps)
    "cloth": (cloth_rollout_setup, cloth_loss, cloth_grads, CLOTH_STEPS),
    "rigid": (rigid_rollout_setup, rigid_loss, rigid_grads, RIGID_STEPS),
}


@pytest.fixture(scope="module", params=list(ROLLOUTS))
def reference(request):
    """The plain-tape loss and gradients of one solver rollout."""
    setup, loss_fn, grads, steps = ROLLOUTS[request.param]
    model, step = setup()
    s0 = model.state()
    with xsim.Tape() as tape:
        s = s0
        for i in range(steps):
            out = model.state()
            step(s, out, i)
            s = out
        loss = loss_fn(s)
    tape.backward(loss)
    return request.param, float(loss.numpy()[0]), grads(model, s0)


@pytest.mark.parametrize("segment", [1, 5, None])  # None: the whole rollout in one segment
def test_checkpointed_solver_gradients_equal_plain_tape(reference, segment):
    name, ref_loss, ref = reference
    setup, loss_fn, grads, steps = ROLLOUTS[name]
    model, step = setup()
    s0 = model.state()
    result = checkpointed_rollout(step, s0, steps, loss_fn, segment=segment or steps, state_factory=model.state)
    got = grads(model, s0)
    assert result.loss == pytest.approx(ref_loss, rel=1e-12)
    for key in ref:
        assert np.abs(ref[key]).max() > 1e-4, key
        np.testing.assert_allclose(got[key], ref[key], rtol=1e-6, atol=1e-12 * np.abs(ref[key]).max(), err_msg=key)


# -- Tape.memory ----------------------------------------------------------------------------------


def test_tape_memory_counts_every_array_a_launch_holds_and_its_grad():
    x = xsim.zeros(100, dtype=F64, requires_grad=True)
    y = xsim.zeros(100, dtype=F64)
    with xsim.Tape() as tape:
        xsim.launch(scale_values, 100, inputs=[x, 2.0], outputs=[y])
    assert tape.memory() == 100 * 8 * 3      # x, x.grad, y


def test_tape_memory_counts_a_buffer_once_however_often_it_is_recorded():
    x = xsim.zeros(100, dtype=F64, requires_grad=True)
    y = xsim.zeros(100, dtype=F64, requires_grad=True)
    z = xsim.zeros(100, dtype=F64, requires_grad=True)
    with xsim.Tape() as tape:
        xsim.launch(scale_values, 100, inputs=[x, 2.0], outputs=[y])
        xsim.launch(scale_values, 100, inputs=[y, 3.0], outputs=[z])
    assert tape.memory() == 100 * 8 * 6      # x, y, z and their grads, y counted once


def test_tape_memory_counts_the_whole_buffer_behind_a_view():
    big = xsim.zeros(1000, dtype=F64)
    y = xsim.zeros(10, dtype=F64)
    with xsim.Tape() as tape:
        xsim.launch(scale_values, 10, inputs=[big[0:10], 2.0], outputs=[y])
    assert tape.memory() == 1000 * 8 + 10 * 8


def test_tape_memory_counts_snapshots_of_in_place_arrays():
    qd = xsim.zeros(10, dtype=xsim.vec3d, requires_grad=True)
    with xsim.Tape() as tape:
        xsim.launch(halve_in_place, 10, inputs=[qd])
    # qd and its grad, plus the snapshot (which shares qd's grad)
    assert tape.memory() == 3 * 10 * 24


def test_tape_memory_counts_the_arrays_of_recorded_array_ops():
    x = xsim.zeros(100, dtype=F64, requires_grad=True)
    with xsim.Tape() as tape:
        xsim.clone(x)
    assert tape.memory() == 4 * 100 * 8      # x, its clone, and both grads
