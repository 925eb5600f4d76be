"""Cloth benchmark (issue 6): xsim's SolverXPBD against Newton 1.8's SolverXPBD on the CPU.

Scene: a 64 x 64-particle cloth grid (63 x 63 cells of 0.1 m, 0.1 kg per particle) with its left
edge pinned, distance constraints on the grid edges and the cell diagonals plus bending, no ground,
no self-collision (as Newton's ``add_cloth_grid(add_springs=True)`` builds it, which also puts a
spring across every interior edge, between its two opposite vertices); dt = 1/600 s, one substep, 10 solver iterations per step. Measured: forward
steps/s over 50 steps after warm-up, a 20-step rollout on a tape (forward and backward), and the
cold compile time of xsim's solver kernels (a fresh cache in a subprocess).

Bending differs in kind: xsim uses isometric bending (a linear vector constraint per interior
edge), Newton the dihedral angle; both have one bending constraint per interior edge.

Goals (issues 6 and 17): xsim >= 4x Newton's steps/s; on a tape, the 20-step forward <= 1.3x and
the backward <= 2x the plain 20-step forward; cold compile <= 10 s; and with one other CPU-bound
process running (``--busy`` starts ``python -c "while True: pass"`` for a second round of forward
steps, Newton's included), xsim >= 2x Newton and not below xsim on one thread.
Run: ``python bench/cloth.py [--repeat N] [--no-newton] [--busy] [--clock cpu]``. Newton's CPU kernels run on one thread.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import subprocess
import sys
import tempfile
import time

import numpy as np
from common import fmt_time, have_newton, print_table, ratio, time_stepping, time_taped_rollout

DIM = 63              # cells per side: 64 x 64 particles
CELL = 0.1            # m
MASS = 0.1            # kg per particle
DT = 1.0 / 600.0
ITERATIONS = 10
STEPS = 50
WARMUP = 10
TAPE_STEPS = 20
STRETCH_COMPLIANCE = 1e-6   # m/N: nearly inextensible
BEND_COMPLIANCE = 1e2       # 1/(N m)
NEWTON_SPRING_KE = 1e6      # N/m, the stiffness matching STRETCH_COMPLIANCE
NEWTON_EDGE_KE = 1e-2


def xsim_cloth(dim: int = DIM):
    """An xsim ModelBuilder holding the cloth with ``dim`` x ``dim`` cells (also ``worlds.py``'s world)."""
    from xsim.sim import ModelBuilder
    b = ModelBuilder()
    b.add_cloth_grid(pos=(0.0, 0.0, 4.0), rot=(0.0, 0.0, 0.0, 1.0), vel=(0.0, 0.0, 0.0), dim_x=dim, dim_y=dim,
                     cell_x=CELL, cell_y=CELL, mass=MASS, fix_left=True, stretch_compliance=STRETCH_COMPLIANCE,
                     shear_compliance=STRETCH_COMPLIANCE, bend_compliance=BEND_COMPLIANCE)
    # Newton's add_springs also ties the two opposite vertices of every interior edge: same here
    for _, _, o0, o1 in b.bending_indices:
        b.add_spring(o0, o1, compliance=STRETCH_COMPLIANCE)
    return b


def newton_cloth(dim: int = DIM):
    """The same cloth in a Newton ModelBuilder."""
    import newton
    import warp as wp
    b = newton.ModelBuilder(gravity=(0.0, 0.0, -9.81))
    b.add_cloth_grid(pos=wp.vec3(0.0, 0.0, 4.0), rot=wp.quat_identity(), vel=wp.vec3(0.0, 0.0, 0.0), dim_x=dim,
                     dim_y=dim, cell_x=CELL, cell_y=CELL, mass=MASS, fix_left=True, add_springs=True,
                     spring_ke=NEWTON_SPRING_KE, spring_kd=0.0, edge_ke=NEWTON_EDGE_KE, edge_kd=0.0)
    return b


def without_self_collision(model):
    """A finalized Newton cloth model without particle self-collision: otherwise Newton rebuilds a
    hash grid every step and solves particle-particle contacts every iteration (xsim has none)."""
    model.particle_grid = None
    model.particle_max_radius = 0.0
    return model


def xsim_model(requires_grad: bool = False):
    import xsim
    return xsim_cloth().finalize(device="cpu", requires_grad=requires_grad, dtype=xsim.float32)


def newton_model(requires_grad: bool = False):
    return without_self_collision(newton_cloth().finalize(device="cpu", requires_grad=requires_grad))


# -------------------------------------------------------------------------------------------------
# xsim


def bench_xsim(repeat: int, clock=time.perf_counter) -> dict:
    import xsim
    from xsim.solvers import SolverXPBD
    model = xsim_model()
    solver = SolverXPBD(model, iterations=ITERATIONS)
    out = time_stepping(lambda a, b: solver.step(a, b, None, DT), model.state(), model.state(), STEPS, repeat,
                        WARMUP)

    gmodel = xsim_model(requires_grad=True)
    gsolver = SolverXPBD(gmodel, iterations=ITERATIONS)

    def forward(states):
        tape = xsim.Tape()
        with tape:
            for i in range(TAPE_STEPS):
                gsolver.step(states[i], states[i + 1], None, DT)
        return tape

    def backward(states, tape):
        seed = np.ones((gmodel.particle_count, 3), dtype=np.float32)
        tape.backward(grads={states[-1].particle_q: seed})
        assert np.isfinite(states[0].particle_qd.grad.numpy()).all()

    out.update(time_taped_rollout(lambda: [gmodel.state(requires_grad=True) for _ in range(TAPE_STEPS + 1)],
                                  forward, backward, max(2, repeat // 2), clock=clock))
    out.update(particles=model.particle_count, springs=model.spring_count, bending=model.bending_count)
    return out


def cold_compile_seconds() -> tuple[float, float]:
    """(wall, CPU) seconds to build the solver's kernels with an empty cache, in a subprocess."""
    code = ("import time, resource, xsim, xsim.solvers.xpbd.kernels\n"
            "from xsim.sim.generic import specialized\n"
            "k = specialized('xsim.solvers.xpbd.kernels', xsim.float32)\n"
            "t = time.perf_counter()\n"
            "k.integrate_particles.module.load('cpu')\n"  # forwards and adjoints (the taped runs need both)
            "ru = resource.getrusage(resource.RUSAGE_CHILDREN)\n"
            "print(time.perf_counter() - t, ru.ru_utime + ru.ru_stime)\n")
    with tempfile.TemporaryDirectory() as cache:
        env = dict(os.environ, XSIM_CACHE_DIR=cache)
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    wall, cpu = out.stdout.split()
    return float(wall), float(cpu)


@contextlib.contextmanager
def busy_process():
    """One other CPU-bound process running for the duration of the block."""
    proc = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        time.sleep(0.3)  # let the scheduler see it
        yield
    finally:
        proc.kill()
        proc.wait()


def xsim_busy_forward(repeat: int) -> dict:
    """Forward step times (median of ``repeat`` 50-step runs) with all threads and with one."""
    from xsim.kernels import threads
    from xsim.solvers import SolverXPBD
    model = xsim_model()
    solver = SolverXPBD(model, iterations=ITERATIONS)
    out = {}
    default = threads.max_threads()
    for key, n in (("busy_step", default), ("busy_step_1", 1)):
        threads.set_max_threads(n)
        out[key] = time_stepping(lambda a, b: solver.step(a, b, None, DT), model.state(), model.state(), STEPS,
                                 repeat, WARMUP)["step"]
    threads.set_max_threads(default)
    return out


def newton_busy_forward(repeat: int) -> dict:
    import newton
    import warp as wp
    model = newton_model()
    solver = newton.solvers.SolverXPBD(model, iterations=ITERATIONS)
    control = model.control()
    return {"busy_step": time_stepping(lambda a, b: solver.step(a, b, control, None, DT), model.state(),
                                       model.state(), STEPS, repeat, WARMUP, sync=wp.synchronize)["step"]}


# -------------------------------------------------------------------------------------------------
# Newton


def bench_newton(repeat: int, clock=time.perf_counter) -> dict:
    import warp as wp
    wp.config.quiet = True
    import newton
    model = newton_model()
    solver = newton.solvers.SolverXPBD(model, iterations=ITERATIONS)
    s0, s1 = model.state(), model.state()
    control = model.control()
    t0 = time.perf_counter()
    solver.step(s0, s1, control, None, DT)
    wp.synchronize()
    first = time.perf_counter() - t0
    out = time_stepping(lambda a, b: solver.step(a, b, control, None, DT), s0, s1, STEPS, repeat, WARMUP,
                        sync=wp.synchronize)

    gmodel = newton_model(requires_grad=True)
    gsolver = newton.solvers.SolverXPBD(gmodel, iterations=ITERATIONS)
    gcontrol = gmodel.control()

    def forward(states):
        tape = wp.Tape()
        with tape:
            for i in range(TAPE_STEPS):
                gsolver.step(states[i], states[i + 1], gcontrol, None, DT)
        return tape

    def backward(states, tape):
        seed = wp.array(np.ones((gmodel.particle_count, 3), dtype=np.float32), dtype=wp.vec3, device="cpu")
        tape.backward(grads={states[-1].particle_q: seed})

    out.update(time_taped_rollout(lambda: [gmodel.state(requires_grad=True) for _ in range(TAPE_STEPS + 1)],
                                  forward, backward, max(2, repeat // 2), sync=wp.synchronize, clock=clock))
    out.update(first_step=first, particles=model.particle_count, springs=model.spring_count,
               bending=model.edge_count)
    return out


# -------------------------------------------------------------------------------------------------


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5, help="timed runs of 50 steps (median)")
    parser.add_argument("--no-newton", action="store_true", help="skip Newton")
    parser.add_argument("--busy", action="store_true", help="also time forward steps beside a busy process")
    parser.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                        help="cpu: the taped rollout in process CPU time, against the plain step's CPU time "
                             "(steadier on a shared machine; with XSIM_NUM_THREADS=1 it compares work)")
    args = parser.parse_args()
    clock = time.process_time if args.clock == "cpu" else time.perf_counter
    plain = "step_cpu" if args.clock == "cpu" else "step"
    wall, cpu = cold_compile_seconds()
    xs = bench_xsim(args.repeat, clock)
    nw = None
    if not args.no_newton and have_newton():
        nw = bench_newton(args.repeat, clock)
    if args.busy:
        with busy_process():
            xs.update(xsim_busy_forward(args.repeat))
            if nw:
                nw.update(newton_busy_forward(args.repeat))

    def row(name, key, fmt=fmt_time):
        a = xs[key]
        b = nw[key] if nw else None
        return [name, fmt(a), fmt(b) if b is not None else "-", ratio(b, a)]

    rows = [
        ["particles / springs / bending", f"{xs['particles']} / {xs['springs']} / {xs['bending']}",
         f"{nw['particles']} / {nw['springs']} / {nw['bending']}" if nw else "-", "-"],
        row("forward step (median of 50-step runs)", "step"),
        row("forward step, process CPU time (best run)", "step_cpu"),
        ["forward steps/s", f"{1.0 / xs['step']:.1f}", f"{1.0 / nw['step']:.1f}" if nw else "-",
         ratio(nw["step"], xs["step"]) if nw else "-"],
        row(f"{TAPE_STEPS}-step forward on a tape ({args.clock} time)", "tape_forward"),
        row(f"{TAPE_STEPS}-step tape backward ({args.clock} time)", "tape_backward"),
        ["taped forward / plain forward (20 steps)", f"{xs['tape_forward'] / (TAPE_STEPS * xs[plain]):.2f}x",
         f"{nw['tape_forward'] / (TAPE_STEPS * nw[plain]):.2f}x" if nw else "-", "-"],
        ["backward / plain forward (20 steps)", f"{xs['tape_backward'] / (TAPE_STEPS * xs[plain]):.2f}x",
         f"{nw['tape_backward'] / (TAPE_STEPS * nw[plain]):.2f}x" if nw else "-", "-"],
    ]
    if args.busy:
        rows += [row("forward step beside a busy process", "busy_step"),
                 ["forward step beside a busy process, xsim on 1 thread", fmt_time(xs["busy_step_1"]),
                  fmt_time(nw["busy_step"]) if nw else "-", ratio(nw["busy_step"], xs["busy_step_1"]) if nw else "-"]]
    rows += [
        ["cold compile of the solver kernels", f"{wall:.2f} s wall ({cpu:.2f} s CPU)",
         f"first step {nw['first_step']:.2f} s (warp cache)" if nw else "-", "-"],
    ]
    print_table("Cloth 64x64, dt = 1/600 s, 10 iterations (CPU)", ["", "xsim", "Newton 1.8", "Newton / xsim"],
                rows, notes=[f"threads: XSIM_NUM_THREADS={os.environ.get('XSIM_NUM_THREADS', 'all')}, cores: "
                             + str(os.cpu_count())])


if __name__ == "__main__":
    main()
