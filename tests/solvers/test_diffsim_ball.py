"""Newton's ``diffsim_ball`` task on xsim's XPBD solver: a ball (a particle) launched at a wall must,
after bouncing off the ground and the wall, end on a target; its initial velocity is optimized by
gradient descent through the rollout on a Tape. Newton's layout, timing, loss and restitution 1;
frictionless, as Newton's contacts are there (its friction gain kf = 0 turns mu off). The step is
0.2 instead of Newton's 0.02: with xsim's gradients 0.02 halves the loss in 30 iterations, 0.2
divides it by 1000."""

import numpy as np

import xsim
from xsim.sim import ModelBuilder
from xsim.solvers import SolverXPBD

TARGET = (0.0, -2.0, 1.5)
FRAMES, FPS, SUBSTEPS = 36, 60.0, 8
RATE = 0.2


@xsim.kernel
def distance_to_target(q: xsim.array(dtype=xsim.vec3d), target: xsim.vec3d,
                       loss: xsim.array(dtype=xsim.float64)):
    d = q[0] - target
    loss[0] = xsim.dot(d, d)


def ball_model():
    b = ModelBuilder()
    b.add_particle((0.0, -0.5, 1.0), (0.0, 5.0, -5.0), mass=1.0, radius=0.1)
    b.add_collider_box((0.0, 2.0, 1.0), (1.0, 0.25, 1.0), mu=0.0, restitution=1.0)
    b.add_ground_plane(mu=0.0, restitution=1.0)
    return b.finalize(dtype=xsim.float64, requires_grad=True)


def rollout(model, solver, v0, tape):
    """Loss (squared distance of the ball to TARGET after FRAMES frames) from the initial velocity ``v0``."""
    s = model.state()
    s.particle_qd = v0
    loss = xsim.zeros(1, dtype=xsim.float64, requires_grad=True)
    with tape:
        states = [s]
        for _ in range(FRAMES):
            nxt = model.state()
            solver.step(states[-1], nxt, None, 1.0 / FPS)
            states.append(nxt)
        xsim.launch(distance_to_target, 1, inputs=[states[-1].particle_q, xsim.vec3d(*TARGET)],
                    outputs=[loss])
    return loss, states


def test_the_ball_learns_to_bounce_onto_the_target():
    model = ball_model()
    solver = SolverXPBD(model, substeps=SUBSTEPS, iterations=1)
    v = np.array([[0.0, 5.0, -5.0]])
    history = []
    for _ in range(30):
        v0 = xsim.array(v, dtype=xsim.vec3d, requires_grad=True)
        tape = xsim.Tape()
        loss, states = rollout(model, solver, v0, tape)
        history.append(loss.numpy()[0])
        if history[-1] < history[0] / 10.0:
            break
        tape.backward(loss)
        v = v - RATE * v0.grad.numpy()
    assert history[-1] < history[0] / 10.0, history
    assert np.all(np.diff(history) < 0.0), history  # every step improves
    # the ball did bounce off the wall: it ends on the near side, moving away from the wall
    assert states[-1].particle_qd.numpy()[0][1] < 0.0


def test_the_bouncing_rollout_gradient_matches_finite_differences():
    # through two bounces (ground, then wall) with restitution 1: the reflected impacts keep it smooth
    model = ball_model()
    solver = SolverXPBD(model, substeps=SUBSTEPS, iterations=1)
    v = np.array([[0.0, 5.0, -5.0]])
    v0 = xsim.array(v, dtype=xsim.vec3d, requires_grad=True)
    tape = xsim.Tape()
    loss, _ = rollout(model, solver, v0, tape)
    tape.backward(loss)

    def f(w):
        return rollout(model, solver, xsim.array(w, dtype=xsim.vec3d), xsim.Tape())[0].numpy()[0]
    eps = 1e-6
    numeric = [(f(v + eps * d) - f(v - eps * d)) / (2 * eps) for d in np.eye(3)[:, None, :]]
    np.testing.assert_allclose(v0.grad.numpy()[0], numeric, rtol=1e-5, atol=1e-6)
