"""Every kernel of the simulation layers computes what its Python source says: small random scenes
(cloth and particles against every collider kind, rigid bodies in contact, a joint chain of every
joint kind, particle-body coupling, kinematics, the optimizers and losses) run in float64 with every
launch also run by the host reference (tests/reference.py) from the same arguments, and every array
must come out the same.

``test_every_kernel_of_the_simulation_layers_is_checked`` walks the kernels of the solver, kinematics
and optimizer modules: each must have been checked, or be listed in EXCLUSIONS with the reason. The
float32 kernel sets are the same sources built with another scalar type (the walk checks float64,
where a branch taken on a rounding difference cannot make a false alarm). ``pytest -m fuzz`` runs
more scenes for more steps.
"""

import os

import numpy as np
import pytest
from reference import checked_launches, excused

import xsim
from xsim.optim import SGD, Adam, losses, updates
from xsim.sim import ModelBuilder, kinematics
from xsim.sim.generic import specialized
from xsim.sim.kinematics import eval_fk, eval_ik
from xsim.solvers import SolverXPBD
from xsim.solvers.xpbd import contacts_rigid, joint_kernels, particle_contacts, rigid_kernels, self_contact
from xsim.solvers.xpbd import kernels as particle_kernels

F64 = xsim.float64
Q0 = (0.0, 0.0, 0.0, 1.0)
STEPS, SEEDS = 2, 1  # CI; the fuzz run below takes more
# a tetrahedron, counter-clockwise seen from outside
TETRA = (np.array([[0.0, 0.0, 0.0], [0.4, 0.0, 0.0], [0.0, 0.4, 0.0], [0.0, 0.0, 0.4]]),
         np.array([[0, 2, 1], [0, 1, 3], [0, 3, 2], [1, 2, 3]]))

# kernels of the walked modules that no scene here launches, and why
_STAND_IN = ("the function of a constraint kernel and apply_corrections whose generated adjoint is the reference for "
             "ParticleConstraints.backward (area's runs there, as an adjoint launch): test_xpbd_kernels.py runs it "
             "against that pair and checks its adjoint against finite differences and against the pair's gradients")
EXCLUSIONS: dict[str, str] = {f"xsim.solvers.xpbd.kernels_float64.{name}": _STAND_IN for name in (
    "keep_positions", "solve_distance_into_positions", "solve_bending_into_positions", "solve_area_into_positions")}
# not yet in a reference scene: it runs for joints with an armature only (MJCF imports, tests/io/test_import_mjcf.py
# and tests/solvers/test_rigid_armature.py check its results against MuJoCo and against extra inertia)
EXCLUSIONS["xsim.solvers.xpbd.joint_kernels_float64.predict_joint_coordinates"] = \
    "armature joints only; no reference scene has one yet (checked against MuJoCo and extra inertia instead)"


def kernel_sets() -> dict[str, xsim.Kernel]:
    """Every kernel of the solver, kinematics and optimizer modules, by module-qualified name."""
    namespaces = [*(specialized(m.__name__, F64) for m in (particle_kernels, particle_contacts, rigid_kernels,
                                                           joint_kernels, contacts_rigid, kinematics, self_contact)),
                  losses, updates]
    return {f"{k.module_name}.{k.key}": k for ns in namespaces for k in vars(ns).values()
            if isinstance(k, xsim.Kernel)}


def jitter(rng, p, scale=0.01):
    return tuple(float(x) for x in np.asarray(p) + rng.uniform(-scale, scale, 3))


def particle_scene(rng, requires_grad: bool = False):
    """A damped cloth with area constraints and a pinned edge on the ground, and particles inside a
    sphere, a box, a capsule and a mesh collider, moving towards them (bounces), three of them a
    damped area triangle."""
    b = ModelBuilder()
    b.add_ground_plane(mu=0.4, restitution=0.5)
    b.add_collider_sphere((1.0, 0.0, 0.3), 0.3, mu=0.5, restitution=0.3)
    b.add_collider_box((2.0, 0.0, 0.3), (0.3, 0.2, 0.3), rot=(0.0, 0.0, 0.0998, 0.995), mu=0.5)
    b.add_collider_capsule((3.0, 0.0, 0.5), 0.2, 0.3, mu=0.5, restitution=0.2)
    b.add_collider_mesh(TETRA, pos=(4.0, 0.0, 0.0), mu=0.3)
    b.add_cloth_grid(pos=jitter(rng, (-0.2, -0.2, 0.02)), rot=Q0, vel=jitter(rng, (0.3, 0.1, -1.0), 0.2),
                     dim_x=2, dim_y=2, cell_x=0.1, cell_y=0.1, mass=0.1, fix_left=True, area_compliance=1e-4,
                     stretch_damping=0.01, bend_damping=0.001, particle_radius=0.03)
    for p in [(1.0, 0.05, 0.58), (2.1, 0.05, 0.58), (3.05, 0.0, 0.75), (4.05, 0.05, 0.12), (0.5, 0.0, 0.01)]:
        b.add_particle(jitter(rng, p), vel=jitter(rng, (0.2, 0.0, -2.0), 0.5), mass=0.1, radius=0.05)
    b.add_triangle(b.particle_count - 3, b.particle_count - 2, b.particle_count - 1, area_compliance=1e-3,
                   area_damping=0.01)
    model = b.finalize(dtype=F64, requires_grad=requires_grad)
    control = model.control()
    target = model.particle_q.numpy() + [0.01, 0.0, 0.02]
    control.particle_target = xsim.array(target, dtype=xsim.vec3d)
    return model, control


def rigid_scene(rng):
    """A box (com off its centre), a sphere and a capsule resting on the ground and on each other, a
    chain of revolute (limits, drive), prismatic (limits, velocity drive), ball (cone and twist limits)
    and fixed joints, two boxes stacked edge across edge, particles on or flying at the bodies and a
    cloth on the box."""
    b = ModelBuilder()
    b.add_ground_plane(mu=0.5, restitution=0.3)
    box = b.add_body((jitter(rng, (0.0, 0.0, 0.19)), (0.0, 0.0, 0.0998, 0.995)), com=(0.01, 0.0, 0.0))
    b.add_shape_box(box, hx=0.2, hy=0.15, hz=0.2, mu=0.6, restitution=0.4)
    sph = b.add_body((jitter(rng, (0.3, 0.05, 0.3)), Q0), lin_vel=jitter(rng, (0.0, 0.0, -0.5), 0.2))
    b.add_shape_sphere(sph, radius=0.15, mu=0.5)
    cap = b.add_body((jitter(rng, (-0.3, 0.0, 0.25)), (0.0, 0.3826834, 0.0, 0.9238795)))
    b.add_shape_capsule(cap, radius=0.1, half_height=0.2, mu=0.5)
    l1 = b.add_body(((2.0, 0.0, 1.5), Q0), ang_vel=jitter(rng, (1.0, 0.0, 0.0), 0.5))
    b.add_shape_box(l1, hx=0.05, hy=0.05, hz=0.2)
    b.add_joint_revolute(-1, l1, parent_xform=((2.0, 0.0, 1.7), Q0), child_xform=((0.0, 0.0, 0.2), Q0),
                         axis=(1.0, 0.0, 0.0), limit_lower=-0.3, limit_upper=0.3, target_q=0.5, target_ke=50.0,
                         target_kd=1.0)
    l2 = b.add_body(((2.0, 0.0, 1.1), Q0))
    b.add_shape_capsule(l2, radius=0.04, half_height=0.15)
    b.add_joint_prismatic(l1, l2, parent_xform=((0.0, 0.0, -0.2), Q0), child_xform=((0.0, 0.0, 0.2), Q0),
                          axis=(0.0, 0.0, 1.0), limit_lower=-0.05, limit_upper=0.05, target_qd=0.1, target_kd=2.0)
    l3 = b.add_body((jitter(rng, (2.0, 0.1, 0.7)), Q0))
    b.add_shape_sphere(l3, radius=0.08)
    b.add_joint_ball(l2, l3, parent_xform=((0.0, 0.0, -0.2), Q0), child_xform=((0.0, 0.1, 0.15), Q0),
                     cone_limit=0.2, twist_lower=-0.1, twist_upper=0.1)
    l4 = b.add_body(((2.2, 0.1, 0.7), Q0))
    b.add_shape_box(l4, hx=0.05, hy=0.05, hz=0.05)
    b.add_joint_fixed(l3, l4, parent_xform=((0.2, 0.0, 0.0), Q0))
    # two boxes stacked apart from the rest, the upper one turned 45 degrees: crossing edges
    lower = b.add_body((jitter(rng, (-1.0, 1.0, 0.1)), Q0))
    b.add_shape_box(lower, hx=0.1, hy=0.1, hz=0.1, mu=0.5)
    upper = b.add_body((jitter(rng, (-1.0, 1.0, 0.3)), (0.0, 0.0, 0.3826834, 0.9238795)))
    b.add_shape_box(upper, hx=0.1, hy=0.1, hz=0.1, mu=0.5)
    for p, v in [((0.0, 0.0, 0.41), (0.0, 0.0, -0.5)), ((0.3, 0.05, 0.46), (0.1, 0.0, -3.0)),
                 ((-0.3, 0.0, 0.45), (0.0, 0.0, 0.0))]:
        b.add_particle(jitter(rng, p, 0.005), vel=v, mass=0.05, radius=0.02)
    # an undamped cloth draped over the box (the undamped constraint kernels)
    b.add_cloth_grid(pos=jitter(rng, (-0.1, -0.1, 0.42), 0.005), rot=Q0, vel=(0.0, 0.0, -0.2), dim_x=2, dim_y=2,
                     cell_x=0.1, cell_y=0.1, mass=0.02, area_compliance=1e-4, particle_radius=0.02)
    return b.finalize(dtype=F64), None


def pendulum_scene(rng):
    """A 2-link revolute pendulum, off its rest and touching nothing: a step without a velocity pass,
    whose last position update writes the body frames (``apply_last_body_deltas``)."""
    b = ModelBuilder()
    for k in range(2):
        link = b.add_body(((0.25 + 0.5 * k, 0.0, 2.0), Q0), ang_vel=jitter(rng, (0.0, 0.5, 0.0), 0.2),
                          com=(0.02, 0.0, 0.0))
        b.add_shape_capsule(link, radius=0.03, half_height=0.2,
                            xform=((0.0, 0.0, 0.0), (0.0, 0.7071068, 0.0, 0.7071068)))
        b.add_joint_revolute(k - 1, link, parent_xform=((0.25 if k else 0.0, 0.0, 0.0 if k else 2.0), Q0),
                             child_xform=((-0.25, 0.0, 0.0), Q0), axis=(0.0, 1.0, 0.0))
    return b.finalize(dtype=F64), None


def self_contact_scene(rng):
    """Two small self-colliding cloths, the upper one falling onto the lower one (pinned at an edge)
    within their thickness, and free particles overlapping and approaching each other and a cloth: the
    particle pairs' position and velocity passes and the vertex-triangle contacts in both roles."""
    b = ModelBuilder()
    b.particle_restitution = 0.5
    b.particle_mu = 0.4
    for k, z in enumerate((0.3, 0.34)):
        b.add_cloth_grid(pos=jitter(rng, (0.0, 0.0, z), 0.003), rot=Q0, vel=(0.0, 0.0, -0.5 * k), dim_x=2, dim_y=2,
                         cell_x=0.1, cell_y=0.1, mass=0.02, fix_left=k == 0, particle_radius=0.01,
                         self_collision=True, thickness=0.05)
    for p, v in [((1.0, 0.0, 0.5), (1.0, 0.0, 0.0)), ((1.035, 0.005, 0.5), (-1.0, 0.2, 0.0)),
                 ((0.1, 0.1, 0.33), (0.0, 0.0, -1.0))]:
        b.add_particle(jitter(rng, p, 0.002), vel=v, mass=0.05, radius=0.02)
    return b.finalize(dtype=F64), None


def rollout(model, control, steps, substeps=1):
    solver = SolverXPBD(model, substeps=substeps, iterations=2, bounce_speed=0.1)
    a, b = model.state(), model.state()
    for _ in range(steps):
        solver.step(a, b, control, 1.0 / 60.0)
        a, b = b, a
    if model.has_rigid:
        eval_ik(model, a)
        eval_fk(model, a.joint_q, a.joint_qd, b)


def taped_rollout(model, control, steps):
    """``rollout`` on a Tape and its backward pass: the kernels of ParticleConstraints.backward."""
    solver = SolverXPBD(model, substeps=1, iterations=2, bounce_speed=0.1)
    states = [model.state(requires_grad=True) for _ in range(steps + 1)]
    tape = xsim.Tape()
    with tape:
        for i in range(steps):
            solver.step(states[i], states[i + 1], control, 1.0 / 60.0)
    seed = np.linspace(-1.0, 1.0, 3 * model.particle_count).reshape(-1, 3)
    tape.backward(grads={states[-1].particle_q: seed})
    assert np.any(states[0].particle_q.grad.numpy() != 0.0)


def optimizer_steps(rng):
    """Adam and SGD (clipped) steps on float32 and float64 parameters, and both losses."""
    for dtype in (xsim.float32, xsim.float64):
        vec = xsim.vec3d if dtype is F64 else xsim.vec3
        for make in (lambda p: Adam([p], lr=0.1, clip_norm=0.5), lambda p: SGD([p], lr=0.05, momentum=0.8)):
            p = xsim.array(rng.normal(size=6), dtype=dtype, requires_grad=True)
            p.grad.assign(xsim.array(rng.normal(size=6), dtype=dtype))
            opt = make(p)
            opt.step()
            opt.step()
        loss = losses.new_loss(xsim.zeros(1, dtype=vec))
        losses.add_squared_distance(loss, xsim.array(rng.normal(size=(4, 3)), dtype=vec), rng.normal(size=(2, 3)),
                                    rows=[3, 1], weight=0.5)
        tf = xsim.transformd if dtype is F64 else xsim.transform
        body_q = xsim.array(np.concatenate([rng.normal(size=(2, 3)), np.tile(Q0, (2, 1))], axis=1), dtype=tf)
        losses.add_body_point_distance(loss, body_q, 1, (0.1, 0.2, 0.3), point=(0.0, 0.1, 0.0))


def run_scenes(seeds, steps):
    with checked_launches() as checker:
        for seed in seeds:
            rng = np.random.default_rng(seed)
            for scene in (particle_scene, rigid_scene, self_contact_scene):
                rollout(*scene(rng), steps)
            # more substeps than one: the later substeps' prediction and velocity updates too
            for scene in (rigid_scene, pendulum_scene):
                rollout(*scene(rng), steps, substeps=2)
            taped_rollout(*particle_scene(rng, requires_grad=True), steps)
            taped_rollout(*self_contact_scene(rng), steps)
            optimizer_steps(rng)
    # the proximity queries read an xsim.HashGrid (tests/solvers/test_self_contact.py checks their rows
    # against numpy); every other kernel must run on the reference
    unsupported = [why for why in checker.unsupported.values() if not excused(why, {})]
    assert not unsupported, "kernels the host reference cannot run:\n" + "\n".join(unsupported)
    return checker


@pytest.fixture(scope="module")
def checked():
    return run_scenes(range(SEEDS), STEPS)


@pytest.mark.cpu_only
def test_every_kernel_of_the_simulation_layers_is_checked(checked):
    kernels = kernel_sets()
    missing = sorted(set(kernels) - checked.kernels - set(EXCLUSIONS))
    assert not missing, f"kernels no scene launched (add a scene, or list them in EXCLUSIONS): {missing}"
    stale = sorted(set(EXCLUSIONS) - set(kernels))
    assert not stale, f"EXCLUSIONS names kernels that no longer exist: {stale}"


@pytest.mark.fuzz
@pytest.mark.cpu_only
def test_more_scenes_match_the_reference():
    checker = run_scenes(range(100, 100 + int(os.environ.get("XSIM_SOLVER_REFERENCE_SEEDS", "10"))), 6)
    assert checker.kernels >= set(kernel_sets()) - set(EXCLUSIONS)
