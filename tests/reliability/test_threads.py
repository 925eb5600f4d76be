"""Tapes are per thread: many threads each recording their own rollout get the gradients a sequential
run gets (checked against the closed form), and a tape records nothing another thread launches."""

import threading

import numpy as np
import pytest

import xsim
from xsim.kernels import recording

pytestmark = pytest.mark.cpu_only("threads share the CPU device")

F64 = xsim.float64
A = xsim.array(dtype=F64)
STEPS = 6


@xsim.kernel(module="xsim_tests_reliability_threads")
def damp_step(x: A, k: F64, y: A):
    i = xsim.tid()
    y[i] = x[i] * k + xsim.sin(x[i]) * 0.1


@xsim.kernel(module="xsim_tests_reliability_threads")
def sum_squares(x: A, loss: A):
    i = xsim.tid()
    xsim.atomic_add(loss, 0, x[i] * x[i])


def rollout_grad(x0: np.ndarray, k: float) -> np.ndarray:
    """d loss / d x0 of STEPS steps of damp_step and a sum of squares, recorded on a fresh tape."""
    x = xsim.array(x0, dtype=F64, requires_grad=True)
    loss = xsim.zeros(1, dtype=F64, requires_grad=True)
    with xsim.Tape() as tape:
        cur = x
        for _ in range(STEPS):
            nxt = xsim.empty(len(x0), dtype=F64, requires_grad=True)
            xsim.launch(damp_step, len(x0), inputs=[cur, k], outputs=[nxt])
            cur = nxt
        xsim.launch(sum_squares, len(x0), inputs=[cur], outputs=[loss])
    tape.backward(loss=loss)
    return x.grad.numpy().copy()


def closed_form_grad(x0: np.ndarray, k: float) -> np.ndarray:
    """The same derivative in numpy: chain rule through each step, elementwise."""
    x, d = x0.copy(), np.ones_like(x0)
    for _ in range(STEPS):
        d = d * (k + 0.1 * np.cos(x))
        x = x * k + 0.1 * np.sin(x)
    return 2 * x * d


def inputs(n: int):
    rng = np.random.default_rng(7)
    return [(rng.uniform(-1, 1, 64), 0.5 + 0.05 * i) for i in range(n)]


def run_threads(fn, n: int) -> list:
    results, errors = [None] * n, []
    start = threading.Barrier(n)

    def work(i):
        try:
            start.wait()
            results[i] = fn(i)
        except BaseException as e:  # noqa: BLE001 - reported by the main thread
            errors.append(e)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not errors, errors
    return results


@pytest.mark.parametrize("threads", [2, 4, 8])
@pytest.mark.parametrize("rounds", [1, 5])
def test_threads_recording_their_own_rollouts_get_the_sequential_gradients(threads, rounds):
    data = inputs(threads)
    sequential = [rollout_grad(x0, k) for x0, k in data]
    for (x0, k), g in zip(data, sequential):
        np.testing.assert_allclose(g, closed_form_grad(x0, k), rtol=1e-12)
    got = run_threads(lambda i: [rollout_grad(*data[i]) for _ in range(rounds)], threads)
    for i in range(threads):
        for g in got[i]:
            np.testing.assert_array_equal(g, sequential[i])


def other_thread_launch(x, y):
    xsim.launch(damp_step, 4, inputs=[x, 0.5], outputs=[y])


@pytest.mark.parametrize("action", [
    other_thread_launch,
    lambda x, y: xsim.clone(x),
    lambda x, y: xsim.copy(y, x),
    lambda x, y: y.assign(x),
    lambda x, y: y.fill_(2.0),
    lambda x, y: y.zero_(),
], ids=["launch", "clone", "copy", "assign", "fill_", "zero_"])
def test_a_tape_in_the_main_thread_records_nothing_from_another_thread(action):
    x = xsim.ones(4, dtype=F64, requires_grad=True)
    y = xsim.zeros(4, dtype=F64, requires_grad=True)
    with xsim.Tape() as tape:
        run_threads(lambda i: [action(x, y) for _ in range(20)], 1)
        assert recording.current() is tape
    assert tape.records == []


def test_each_thread_sees_only_its_own_recorders():
    seen = []
    with xsim.Tape() as main_tape:
        def probe(i):
            assert not recording.is_recording()
            with xsim.Tape() as t:
                seen.append(recording.current() is t)
                assert recording.stack() == [t]
        run_threads(probe, 4)
        assert recording.stack() == [main_tape]
    assert seen == [True] * 4


def test_a_tape_recording_in_one_thread_cannot_be_entered_in_another():
    tape = xsim.Tape()

    def enter(i):
        with pytest.raises(RuntimeError, match="already recording in thread 'MainThread'.*give each thread its own"):
            tape.__enter__()
        return recording.stack()

    with tape:
        assert run_threads(enter, 1) == [[]]
    with tape:  # after the block it records again, in any thread
        pass


def test_suspending_recording_in_one_thread_leaves_another_threads_tape_recording():
    x = xsim.ones(4, dtype=F64, requires_grad=True)
    y = xsim.zeros(4, dtype=F64, requires_grad=True)
    paused, resume = threading.Event(), threading.Event()

    def suspended_worker(i):
        with recording.suspended():
            paused.set()
            resume.wait(30)

    t = threading.Thread(target=suspended_worker, args=(0,))
    t.start()
    paused.wait(30)
    with xsim.Tape() as tape:
        other_thread_launch(x, y)
    resume.set()
    t.join(30)
    assert len(tape.records) == 1


def test_a_worker_thread_gradient_matches_the_closed_form_while_main_records_too():
    x0, k = inputs(1)[0]
    main_x = xsim.ones(4, dtype=F64, requires_grad=True)
    main_y = xsim.zeros(4, dtype=F64, requires_grad=True)
    with xsim.Tape() as tape:
        other_thread_launch(main_x, main_y)
        (g,) = run_threads(lambda i: rollout_grad(x0, k), 1)
    np.testing.assert_allclose(g, closed_form_grad(x0, k), rtol=1e-12)
    assert len(tape.records) == 1


# -- one solver shared by threads ---------------------------------------------------------------------


@xsim.kernel(module="xsim_tests_reliability_threads")
def weighted_positions(body_q: xsim.array(dtype=xsim.transform), particle_q: xsim.array(dtype=xsim.vec3),
                       loss: xsim.array(dtype=float)):
    i = xsim.tid()
    if i < body_q.shape[0]:
        xsim.atomic_add(loss, 0, xsim.dot(xsim.transform_get_translation(body_q[i]), xsim.vec3(1.0, 2.0, 3.0)))
    if i < particle_q.shape[0]:
        xsim.atomic_add(loss, 0, xsim.dot(particle_q[i], xsim.vec3(0.5, -1.0, 0.25)))


def shared_scene():
    """A box on the ground, a pendulum and a pinned cloth: contacts, a joint and particle constraints."""
    from xsim.sim import ModelBuilder
    b = ModelBuilder()
    box = b.add_body(((0.0, 0.0, 0.12), (0.0, 0.0, 0.0, 1.0)))
    b.add_shape_box(box, hx=0.1, hy=0.1, hz=0.1)
    bob = b.add_body(((0.5, 0.0, 1.0), (0.0, 0.0, 0.0, 1.0)))
    b.add_shape_sphere(bob, radius=0.1)
    b.add_joint_revolute(-1, bob, parent_xform=((0.5, 0.0, 2.0), (0.0, 0.0, 0.0, 1.0)),
                         child_xform=((0.0, 0.0, 1.0), (0.0, 0.0, 0.0, 1.0)), axis=(0.0, 1.0, 0.0))
    b.add_cloth_grid(pos=(-1.0, 0.0, 1.0), rot=(0.0, 0.0, 0.0, 1.0), vel=(0.0, 0.0, 0.0), dim_x=3, dim_y=3,
                     cell_x=0.1, cell_y=0.1, mass=0.1, fix_top=True)
    b.add_ground_plane(mu=0.5)
    return b.finalize(requires_grad=True)


def shared_rollout(model, solver, i: int):
    """Loss and d loss / d body_qd0 of 10 steps from a launch that differs per thread ``i``."""
    s = model.state()
    qd = s.body_qd.numpy()
    qd[0, 0], qd[1, 0] = 0.5 + 0.1 * i, 0.3 * i
    s.body_qd = xsim.array(qd, dtype=xsim.spatial_vector, requires_grad=True)
    with xsim.Tape() as tape:
        states = [s]
        for _ in range(10):
            states.append(model.state())
            solver.step(states[-2], states[-1], None, 1.0 / 60.0)
        loss = xsim.zeros(1, dtype=float, requires_grad=True)
        xsim.launch(weighted_positions, max(model.body_count, model.particle_count),
                    inputs=[states[-1].body_q, states[-1].particle_q], outputs=[loss])
    tape.backward(loss)
    return loss.numpy()[0], s.body_qd.grad.numpy().copy()


@pytest.mark.parametrize("threads", [2, 4, 8])
def test_threads_stepping_and_backpropagating_through_one_solver_get_the_sequential_results(threads):
    """Each thread steps and backpropagates through the same model and SolverXPBD at once: its loss and
    gradient are bit for bit those of the same rollout run alone (the solver's buffers, contact lists
    and uploads are per thread; shared, they gave other threads' contacts and wrong losses)."""
    from xsim.solvers import SolverXPBD
    model = shared_scene()
    solver = SolverXPBD(model, substeps=2, iterations=2)
    sequential = [shared_rollout(model, solver, i) for i in range(threads)]
    assert len({loss for loss, _ in sequential}) == threads  # the threads' rollouts differ
    for _ in range(2):
        got = run_threads(lambda i: shared_rollout(model, solver, i), threads)
        for i in range(threads):
            assert got[i][0] == sequential[i][0]
            np.testing.assert_array_equal(got[i][1], sequential[i][1])
