"""Check mode (``xsim.config.mode = "check"``, ``XSIM_MODE=check``, ``xsim run --check``): the first NaN
or inf a launch writes (or an adjoint writes into a gradient, or a solver step leaves in its state)
raises ``NonFiniteError`` naming the kernel or step, the array and the index. Unknown modes are errors."""

import os
import subprocess
import sys

import numpy as np
import pytest

import xsim
from xsim.errors import NonFiniteError
from xsim.solvers import SolverXPBD

pytestmark = pytest.mark.cpu_only("the scans are the same on every device; CPU keeps the suite fast")

MODULE = "xsim_tests_reliability_check_mode"
F64 = xsim.float64


@xsim.kernel(module=MODULE)
def divide(a: xsim.array(dtype=float), b: xsim.array(dtype=float), quotient: xsim.array(dtype=float)):
    i = xsim.tid()
    quotient[i] = a[i] / b[i]


@xsim.kernel(module=MODULE)
def unary(x: xsim.array(dtype=float), op: int, result: xsim.array(dtype=float)):
    i = xsim.tid()
    v = x[i]
    if op == 0:
        result[i] = xsim.log(v)
    elif op == 1:
        result[i] = xsim.sqrt(v)
    elif op == 2:
        result[i] = xsim.exp(v)
    else:
        result[i] = xsim.pow(v, 0.5)


@xsim.kernel(module=MODULE)
def to_vec(x: xsim.array(dtype=float), out: xsim.array(dtype=xsim.vec3)):
    i = xsim.tid()
    out[i] = xsim.vec3(1.0, x[i] / x[i], 2.0)


@xsim.kernel(module=MODULE)
def sqrt64(x: xsim.array(dtype=F64), y: xsim.array(dtype=F64)):
    i = xsim.tid()
    y[i] = xsim.sqrt(x[i])


@xsim.kernel(module=MODULE)
def count(n: xsim.array(dtype=int)):
    n[xsim.tid()] = 7


@pytest.fixture
def check(monkeypatch):
    monkeypatch.setattr(xsim.config, "mode", "check")


def f32(*values):
    return xsim.array(np.array(values, dtype=np.float32))


@pytest.mark.parametrize("a, b, bad", [(0.0, 0.0, "nan"), (1.0, 0.0, "inf"), (-1.0, 0.0, "-inf")])
def test_a_division_fault_names_kernel_array_index_and_value(check, a, b, bad):
    q = xsim.zeros(3, dtype=float)
    with pytest.raises(NonFiniteError) as info:
        xsim.launch(divide, 3, inputs=[f32(1.0, 1.0, a), f32(2.0, 2.0, b)], outputs=[q])
    assert str(info.value) == f"kernel 'divide' wrote a non-finite value: 'quotient' holds {bad} at index (2,)"


@pytest.mark.parametrize("op, x, bad", [(0, 0.0, "-inf"), (0, -1.0, "nan"), (1, -4.0, "nan"), (2, 1000.0, "inf"),
                                        (3, -4.0, "nan")], ids=["log0", "log-1", "sqrt-4", "exp-overflow", "pow-4"])
def test_math_faults_are_caught_where_they_appear(check, op, x, bad):
    with pytest.raises(NonFiniteError, match=f"kernel 'unary' wrote a non-finite value: 'result' holds {bad} at "
                                             r"index \(1,\)"):
        xsim.launch(unary, 2, inputs=[f32(1.0, x), op], outputs=[xsim.zeros(2, dtype=float)])


def test_a_vector_component_is_named_by_its_element_index(check):
    with pytest.raises(NonFiniteError, match=r"'out' holds nan at index \(1,\)"):
        xsim.launch(to_vec, 3, inputs=[f32(1.0, 0.0, 2.0)], outputs=[xsim.zeros(3, dtype=xsim.vec3)])


def test_a_non_finite_input_is_blamed_upstream(check):
    with pytest.raises(NonFiniteError) as info:
        xsim.launch(divide, 2, inputs=[f32(1.0, np.nan), f32(1.0, 1.0)], outputs=[xsim.zeros(2, dtype=float)])
    assert str(info.value).endswith("its input 'a' holds nan at index (1,) already (the fault is upstream)")


@pytest.mark.parametrize("warm", [False, True], ids=["first-launch", "repeat-launch"])
def test_check_mode_catches_on_the_fast_launch_path_too(check, warm):
    q = xsim.zeros(2, dtype=float)
    ones = f32(1.0, 1.0)
    if warm:
        for _ in range(3):
            xsim.launch(divide, 2, inputs=[ones, ones], outputs=[q])
    with pytest.raises(NonFiniteError):
        xsim.launch(divide, 2, inputs=[ones, f32(1.0, 0.0)], outputs=[q])


@pytest.mark.parametrize("mode", ["release", "debug"])
def test_other_modes_do_not_scan(monkeypatch, mode):
    monkeypatch.setattr(xsim.config, "mode", mode)
    q = xsim.zeros(1, dtype=float)
    xsim.launch(divide, 1, inputs=[f32(1.0), f32(0.0)], outputs=[q])
    assert np.isinf(q.numpy()[0])


def test_finite_results_and_integer_outputs_pass(check):
    q = xsim.zeros(2, dtype=float)
    xsim.launch(divide, 2, inputs=[f32(3.0, 1.0), f32(2.0, 4.0)], outputs=[q])
    np.testing.assert_array_equal(q.numpy(), [1.5, 0.25])
    n = xsim.zeros(3, dtype=int)
    xsim.launch(count, 3, outputs=[n])
    np.testing.assert_array_equal(n.numpy(), 7)


def test_a_non_finite_gradient_names_the_adjoint_and_the_array(check):
    x = xsim.array(np.array([1.0, 0.0]), dtype=F64, requires_grad=True)
    y = xsim.zeros(2, dtype=F64, requires_grad=True)
    with xsim.Tape() as tape:
        xsim.launch(sqrt64, 2, inputs=[x], outputs=[y])
    with pytest.raises(NonFiniteError, match=r"the adjoint of kernel 'sqrt64' wrote a non-finite gradient: gradient "
                                             r"of 'x' holds inf at index \(1,\)"):
        tape.backward(grads={y: np.ones(2)})


@pytest.mark.parametrize("bad", ["chekc", "Release", "DEBUG", "", "fast", "check "])
def test_an_unknown_mode_is_an_error_not_release(monkeypatch, bad):
    monkeypatch.setattr(xsim.config, "mode", bad)
    q = xsim.zeros(1, dtype=float)
    with pytest.raises(ValueError) as info:
        xsim.launch(divide, 1, inputs=[f32(1.0), f32(1.0)], outputs=[q])
    assert str(info.value) == (f"xsim.config.mode is {bad!r}, which is not a mode; use one of 'release', 'debug', "
                               "'check'")
    assert q.numpy()[0] == 0  # nothing ran


PROBE = """
import numpy as np, xsim
@xsim.kernel(module="xsim_tests_reliability_check_probe")
def inv(x: xsim.array(dtype=float), y: xsim.array(dtype=float)):
    y[xsim.tid()] = 1.0 / x[xsim.tid()]
y = xsim.zeros(1)
xsim.launch(inv, 1, inputs=[xsim.zeros(1)], outputs=[y])
print("ran", y.numpy()[0])
"""


@pytest.mark.parametrize("env, expect", [
    ("check", "kernel 'inv' wrote a non-finite value: 'y' holds inf at index (0,)"),
    ("chekc", "ValueError: the XSIM_MODE environment variable is 'chekc', which is not a mode"),
    ("release", "ran inf"),
])
def test_xsim_mode_environment_variable(tmp_path, env, expect):
    probe = tmp_path / "probe.py"  # a file: the kernel compiler reads the kernel's source
    probe.write_text(PROBE)
    proc = subprocess.run([sys.executable, str(probe)], env=dict(os.environ, XSIM_MODE=env, PYTHONPATH=os.getcwd()),
                          capture_output=True, text=True, timeout=180, check=False)
    assert expect in proc.stdout + proc.stderr
    assert (proc.returncode == 0) == (env == "release")


# -- the solver -----------------------------------------------------------------------------------


def falling_particles():
    b = xsim.sim.ModelBuilder()
    for i in range(3):
        b.add_particle((float(i), 0.0, 1.0))
    model = b.finalize(device="cpu")
    return model, SolverXPBD(model, substeps=2, iterations=2)


def run_steps(model, solver, n, poison_at=None):
    state = model.state()
    for step in range(n):
        if step == poison_at:
            q = state.particle_q.numpy()
            q[1, 2] = np.nan
        out = model.state()
        solver.step(state, out, None, 1.0 / 60.0)
        state = out
    return state


def test_a_clean_rollout_passes_check_mode(check):
    model, solver = falling_particles()
    state = run_steps(model, solver, 4)
    assert np.isfinite(state.particle_q.numpy()).all()
    assert solver.steps_taken == 4


@pytest.mark.parametrize("poison_at", [0, 2])
def test_a_nan_in_a_rollout_names_the_step_the_kernel_and_the_array(check, poison_at):
    model, solver = falling_particles()
    with pytest.raises(NonFiniteError) as info:
        run_steps(model, solver, 4, poison_at=poison_at)
    msg = str(info.value)
    assert msg.startswith(f"SolverXPBD step {poison_at + 1}: kernel '"), msg
    assert "holds nan at index (1,)" in msg and "(the fault is upstream)" in msg


def test_a_state_left_non_finite_by_a_step_names_the_state_array(check, monkeypatch):
    model, solver = falling_particles()
    step = solver._step

    def step_then_corrupt(state_in, state_out, control, dt, contacts=None):
        step(state_in, state_out, control, dt, contacts)
        state_out.particle_qd.numpy()[2, 0] = np.inf  # as a faulty step might leave it

    monkeypatch.setattr(solver, "_step", step_then_corrupt)
    with pytest.raises(NonFiniteError, match=r"^SolverXPBD step 1: 'state_out.particle_qd' holds inf at index \(2,\)$"):
        run_steps(model, solver, 2)


def test_xsim_run_check_sets_check_mode(monkeypatch):
    from xsim import cli
    monkeypatch.setattr(xsim.config, "mode", "release")
    seen = []
    monkeypatch.setattr(cli, "cmd_run", lambda args: seen.append(xsim.config.mode) or 0)
    args = cli.parser().parse_args(["run", "--check", "scene.toml"])
    assert args.check
    cli.main(["run", "--check", "scene.toml"])
    assert seen == ["check"]
