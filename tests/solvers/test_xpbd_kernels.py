"""Each XPBD kernel's generated adjoint against central finite differences (float64), on inputs
away from contact and friction switches; plus the exactness of single constraint updates."""

import numpy as np
import pytest

import xsim
from xsim.autodiff import gradcheck
from xsim.collision.narrow_phase import ShapeArrays
from xsim.kernels import launch
from xsim.sim.generic import specialized
from xsim.sim.shapes import SHAPE_BOX, SHAPE_CAPSULE, SHAPE_MESH, SHAPE_PLANE, SHAPE_SPHERE
from xsim.solvers.xpbd import kernels as particle_kernels
from xsim.solvers.xpbd import particle_contacts
from xsim.solvers.xpbd.bundles import (
    BodyArrays,
    BodyMotion,
    MeshArrays,
    ParticleArrays,
    ParticleSubstep,
)
from xsim.solvers.xpbd.kernels import UNROLLED_SLOTS
from xsim.solvers.xpbd.particle_constraints import slot_layout
from xsim.solvers.xpbd.particle_contacts import STATIC_SHAPES

K = specialized(particle_kernels.__name__, xsim.float64)  # the solver's float64 kernels
PC = specialized(particle_contacts.__name__, xsim.float64)  # and its float64 particle contact kernels
V = xsim.vec3d
F = xsim.float64
EPS = 1e-7


def vecs(a, grad=True):
    return xsim.array(np.asarray(a, dtype=np.float64).reshape(-1, 3), dtype=V, requires_grad=grad)


def rows(n, width, grad=True):
    """A (n, width) array(vec3d) of zeros: the particle-major correction slots."""
    return xsim.zeros((n, width), dtype=V, requires_grad=grad)


def scalars(a, grad=True):
    return xsim.array(np.asarray(a, dtype=np.float64), dtype=F, requires_grad=grad)


def ints(a, width=None):
    a = np.asarray(a, dtype=np.int32)
    return xsim.array(a if width is None else a.reshape(-1, width), dtype=int)


def check(kernel, args, dim):
    report = gradcheck(kernel, args, dim=dim, eps=EPS, atol=1e-7, rtol=1e-6)
    assert report.passed, str(report)


RNG = np.random.default_rng(3)
X = vecs(RNG.normal(size=(5, 3)) * 0.3)
W = np.array([1.0, 0.5, 2.0, 0.0, 1.5])


X_START = vecs(X.numpy() + RNG.normal(size=(5, 3)) * 0.01)


def entries(rows, x=X):
    """The constraint-major entries (position, inverse mass) of particles ``rows`` (m, k), flattened
    (``x``: the positions; X_START for the substep start's entries)."""
    rows = np.asarray(rows)
    e = np.concatenate([x.numpy()[rows], W[rows][..., None]], axis=-1).reshape(-1, 4)
    return xsim.array(e, dtype=xsim.vec4d, requires_grad=True)


@pytest.mark.parametrize("damping", [0.0, 40.0])
def test_distance_constraint_adjoint(damping):
    lam = scalars([0.01, -0.02, 0.0])
    pairs = [[0, 1], [1, 2], [3, 4]]
    args = [entries(pairs), ints(pairs, 2), ints([[0, 0], [1, 0], [0, 0]], 2), scalars([0.2, 0.5, 0.3]),
            scalars([1e-3, 0.0, 2e-2]), scalars([damping, damping, 0.5 * damping]), lam, entries(pairs, X_START), 60.0, 1.0,
            damping > 0, scalars(np.zeros(3)), rows(5, 2)]
    check(K.solve_distance, args, 3)


@pytest.mark.parametrize("damping", [0.0, 3.0])
def test_bending_constraint_adjoint(damping):
    w = xsim.array(RNG.normal(size=(2, 4)), dtype=xsim.vec4d, requires_grad=True)
    quads = [[0, 1, 2, 3], [1, 2, 3, 4]]
    args = [entries(quads), ints(quads, 4), ints([[0, 0, 0, 0], [1, 1, 1, 0]], 4), w, scalars([0.5, 0.01]),
            scalars([damping, 2.0 * damping]), vecs(RNG.normal(size=(2, 3)) * 1e-3), entries(quads, X_START), 60.0, 1.0,
            damping > 0, True, vecs(np.zeros((2, 3))), rows(5, 2)]
    check(K.solve_bending, args, 2)


@pytest.mark.parametrize("damping", [0.0, 20.0])
def test_area_constraint_adjoint(damping):
    tris = [[0, 1, 2], [2, 3, 4]]
    args = [entries(tris), ints(tris, 3), ints([[0, 0, 0], [1, 0, 0]], 3), scalars([0.05, 0.1]),
            scalars([1e-2, 0.0]), scalars([damping, damping]), scalars([0.0, 1e-3]), entries(tris, X_START), 60.0, 1.3,
            damping > 0, scalars(np.zeros(2)), rows(5, 2)]
    check(K.solve_area, args, 2)


def test_apply_corrections_adjoint():
    x = vecs([[0.0, 0.0, 0.004], [1.0, 0.0, 0.009], [2.0, 0.0, 0.5]])
    delta = xsim.array(RNG.normal(size=(3, 2, 3)) * 1e-3, dtype=V, requires_grad=True)
    args = [x, delta, ints([2, 1, 1]), scalars([1.0, 1.0, 1.0]), vecs(np.zeros((3, 3)))]
    check(K.apply_corrections, args, 3)


# The Tape stand-ins of the constraint kernels and apply_corrections (ParticleConstraints.project), on
# constraints over the 5 particles (particle 3 pinned: W = 0): each kind's ends
STAND_INS = {
    "distance": [[0, 1], [1, 2], [3, 4], [2, 4]],
    "bending": [[0, 1, 2, 3], [1, 2, 3, 4], [4, 2, 0, 1]],
    "area": [[0, 1, 2], [2, 3, 4], [1, 4, 0]],
}


def constraint_args(kind, damping, seed, pinned=True):
    """(entries and indices, the arguments after ``slot`` up to the outputs, the multipliers) of kind's kernel,
    drawn from ``seed``; without ``pinned`` particle 3 is free too (finite differences of its inverse mass
    would step across the pinned test w > 0)."""
    rng = np.random.default_rng(seed)
    ends = STAND_INS[kind]
    ends_entries = entries(ends)
    if not pinned:
        e = ends_entries.numpy()
        e[:, 3] = np.where(e[:, 3] == 0.0, 0.8, e[:, 3])
        ends_entries.assign(e)
    m = len(ends)
    if kind == "bending":
        lam = vecs(rng.normal(size=(m, 3)) * 1e-3)
        first = xsim.array(rng.normal(size=(m, 4)), dtype=xsim.vec4d, requires_grad=True)
    else:
        lam = scalars(rng.normal(size=m) * 1e-3)
        first = scalars(rng.uniform(0.2, 0.5, m))
    rest = [first, scalars(rng.uniform(1e-3, 2e-2, m)), scalars(np.full(m, damping)), lam, entries(ends, X_START),
            60.0, 1.0, damping > 0, *((True,) if kind == "bending" else ())]
    return [ends_entries, ints(ends, len(ends[0]))], rest, lam


def slot_counts(kind):
    return np.bincount(np.ravel(STAND_INS[kind]), minlength=5)


@pytest.mark.parametrize("kind", ["distance", "bending", "area"])
@pytest.mark.parametrize("damping", [0.0, 30.0])
def test_constraint_stand_in_adjoint(kind, damping):
    """solve_*_into_positions (recorded on a Tape by the solver, never run there) against finite differences."""
    head, rest, lam = constraint_args(kind, damping, 5, pinned=False)
    args = [*head, *rest, ints(slot_counts(kind)), xsim.zeros_like(lam, requires_grad=True), vecs(np.zeros((5, 3)))]
    check(getattr(K, f"solve_{kind}_into_positions"), args, len(STAND_INS[kind]))


@pytest.mark.parametrize("kind", ["distance", "bending", "area"])
@pytest.mark.parametrize("damping", [0.0, 30.0])
def test_stand_ins_give_the_gradients_of_the_constraint_kernel_and_apply_corrections(kind, damping):
    """The Tape's stand-ins (keep_positions, then solve_*_into_positions adding each correction over its
    particle's count) in place of the kernel pair that ran: run, the same positions and multipliers; recorded,
    the same gradients to the last bit (each slot's gradient is x_next's times 1 / count either way)."""
    ends = STAND_INS[kind]
    counts, (slots,), _ = slot_layout(5, [np.array(ends)])
    seeds = RNG.normal(size=(5, 3)), RNG.normal(size=(len(ends), 3) if kind == "bending" else len(ends))
    got = []
    for stand_in in (False, True):
        head, rest, lam = constraint_args(kind, damping, 11)
        solve = [*head, ints(slots, len(ends[0])), *rest]
        xi = vecs(X.numpy())
        apply = [xi, rows(5, int(counts.max())), ints(counts), scalars(W, grad=False)]
        lam_out, x_next = xsim.zeros_like(lam, requires_grad=True), vecs(np.zeros((5, 3)))
        tape = xsim.Tape()
        with tape:
            xsim.launch(getattr(K, f"solve_{kind}"), len(ends), inputs=solve, outputs=[lam_out, apply[1]],
                        record_tape=not stand_in)
            xsim.launch(K.apply_corrections, 5, inputs=apply, outputs=[x_next], record_tape=not stand_in)
            if stand_in:
                launch.record(K.keep_positions, 5, inputs=[xi], outputs=[x_next])
                launch.record(getattr(K, f"solve_{kind}_into_positions"), len(ends),
                              inputs=[*head, *rest, ints(counts)], outputs=[lam_out, x_next])
        if stand_in:  # run, the stand-ins compute the pair's function (the corrections summed in another order)
            x_run, lam_run = vecs(np.zeros((5, 3)), grad=False), xsim.zeros_like(lam)
            xsim.launch(K.keep_positions, 5, inputs=[xi], outputs=[x_run])
            xsim.launch(getattr(K, f"solve_{kind}_into_positions"), len(ends), inputs=[*head, *rest, ints(counts)],
                        outputs=[lam_run, x_run])
            np.testing.assert_allclose(x_run.numpy(), x_next.numpy(), rtol=0, atol=1e-15)
            np.testing.assert_array_equal(lam_run.numpy(), lam_out.numpy())
            assert np.any(x_run.numpy() != X.numpy())
        tape.backward(grads={x_next: seeds[0], lam_out: seeds[1]})
        got.append([x_next.numpy(), lam_out.numpy(), xi.grad.numpy()]
                   + [a.grad.numpy() for a in [*head, *rest] if isinstance(a, xsim.array) and a.requires_grad])
    assert len(got[0]) == len(got[1]) == 9
    for old, new in zip(*got):
        np.testing.assert_array_equal(new, old)
    assert np.any(got[0][3] != 0.0)  # the entries' gradient: through the corrections and the multipliers


def test_ground_plane_contact_adjoint_with_friction():
    # particle 0 sinks into the ground and slides (dynamic friction), 1 sticks (static), 2 is free
    x = vecs([[0.0, 0.0, 0.004], [1.0, 0.0, 0.009], [2.0, 0.0, 0.5]])
    x0 = vecs([[-0.2, 0.1, 0.02], [1.0005, 0.0, 0.02], [2.0, 0.0, 0.6]])
    check(PC.collide_particle_shapes, static_shape_args(x, x0, SHAPE_PLANE, xforms((0.0, 0.0, 0.0)), np.zeros(3), 0.4,
                                                     radius=0.01), 3)


def test_apply_corrections_sums_every_slot_and_gives_each_the_mean_s_gradient():
    # slot counts on both sides of the unrolled part (16 and UNROLLED_SLOTS) and past it
    counts = np.array([0, 1, 16, 17, UNROLLED_SLOTS, UNROLLED_SLOTS + 5])
    n, width = len(counts), UNROLLED_SLOTS + 5
    x = vecs(RNG.normal(size=(n, 3)))
    delta_np = RNG.normal(size=(n, width, 3))
    delta = xsim.array(delta_np, dtype=V, requires_grad=True)
    inv_count = np.divide(1.0, counts, out=np.zeros(n), where=counts > 0)
    out = vecs(np.zeros((n, 3)))
    tape = xsim.Tape()
    with tape:
        xsim.launch(K.apply_corrections, n, inputs=[x, delta, ints(counts), scalars(np.ones(n))],
                    outputs=[out])
    seed = RNG.normal(size=(n, 3))
    tape.backward(grads={out: seed})
    used = np.arange(width)[None, :] < counts[:, None]
    np.testing.assert_allclose(out.numpy(), x.numpy() + (delta_np * used[..., None]).sum(1) * inv_count[:, None],
                               rtol=1e-14, atol=1e-14)
    np.testing.assert_array_equal(delta.grad.numpy(), used[..., None] * (seed * inv_count[:, None])[:, None, :])
    np.testing.assert_allclose(x.grad.numpy(), seed, rtol=1e-15, atol=1e-15)  # x - x: the zero adds and takes back


def test_gather_entries_writes_split_inverse_masses_and_its_adjoint():
    # particle 0 has two entries (0 and 3: its mass is split in two), particle 1 one (entry 1); the others none
    out = xsim.zeros(4, dtype=xsim.vec4d, requires_grad=True)
    args = [X, scalars(W), scalars([2.0, 1.0, 1.0, 1.0, 1.0]), ints([2, 1, 0, 0, 0]),
            ints([[0, 3], [1, 0], [0, 0], [0, 0], [0, 0]], 2), out]
    xsim.launch(K.gather_entries, 5, inputs=args[:-1], outputs=args[-1:])
    np.testing.assert_array_equal(out.numpy()[0], np.r_[X.numpy()[0], 2.0 * W[0]])
    np.testing.assert_array_equal(out.numpy()[3], np.r_[X.numpy()[0], 2.0 * W[0]])
    np.testing.assert_array_equal(out.numpy()[1], np.r_[X.numpy()[1], W[1]])
    check(K.gather_entries, args, 5)


def xforms(pos, rot=(0.0, 0.0, 0.0, 1.0), grad=True):
    """A (1,) array(transformd): one static shape's world frame."""
    return xsim.array(np.array([np.r_[pos, rot]]), dtype=xsim.transformd, requires_grad=grad)


def no_bodies():
    """The body arguments of the particle contact kernels for a model without bodies: (motion, bodies)."""
    poses, velocities = xsim.empty(0, dtype=xsim.transformd), xsim.empty(0, dtype=xsim.types.vector(6, F))
    return (BodyMotion(pose=poses, pose_start=poses, start=poses, qd=velocities, qd_pre=velocities,
                       split=scalars([], False)),
            BodyArrays(inv_mass=scalars([], False), inertia=xsim.empty(0, dtype=xsim.mat33d),
                       inv_inertia=xsim.empty(0, dtype=xsim.mat33d)))


def one_static_shape(kind, xform, size, mu, restitution=0.0):
    """The ShapeArrays of one static shape (world -1) of frame ``xform`` (a (1,) array)."""
    return ShapeArrays(body=ints([-1]), type=ints([kind]), xform=xform, size=vecs(size), radius=scalars([0.0], False),
                       point_start=ints([0]), point_count=ints([0]), points=vecs(np.zeros((0, 3)), False),
                       mu=scalars([mu]), restitution=scalars([restitution]), world=ints([-1]))


def static_shape_args(x, x_start, kind, xform, size, mu, mesh_tri=-1, mesh=((), (), ()), radius=0.08):
    """``collide_particle_shapes`` arguments for particles ``x`` of ``radius`` and one static shape (world -1);
    ``mesh``: (triangles, vertices, their shape), vertices an array or rows."""
    n = x.shape[0]
    tris, verts, owner = mesh
    verts = verts if isinstance(verts, xsim.array) else vecs(np.reshape(verts, (-1, 3)))
    particles = ParticleArrays(inv_mass=scalars(np.ones(n)), radius=scalars(np.full(n, radius)),
                               world=ints(np.full(n, -1)))
    substep = ParticleSubstep(x=x_start, v=vecs(np.zeros((n, 3)), False), mesh_tri=ints(np.full(n, mesh_tri)),
                              h=0.0, bounce_speed=0.0)
    return [x, particles, one_static_shape(kind, xform, size, mu),
            MeshArrays(indices=ints(np.reshape(tris, (-1, 3)), 3), vertices=verts, shape=ints(owner)), substep,
            *no_bodies(), STATIC_SHAPES, vecs(np.zeros((n, 3))), xsim.empty(0, dtype=xsim.types.vector(8, F))]


def test_plane_velocity_pass_adjoint_with_restitution():
    """The velocity pass off a tilted plane with restitution: one particle bouncing, one in the air."""
    normal = np.array([0.0, -0.3, 1.0]) / np.linalg.norm([0.0, -0.3, 1.0])
    q = np.r_[np.cross([0.0, 0.0, 1.0], normal), 1.0 + normal[2]]
    x = vecs([normal * 0.01, [1.0, 0.0, 0.5]])
    particles = ParticleArrays(inv_mass=scalars([1.0, 1.0]), radius=scalars([0.01, 0.01]), world=ints([-1, -1]))
    shapes = one_static_shape(SHAPE_PLANE, xforms((0.0, 0.0, 0.0), q / np.linalg.norm(q)), [0.0, 0.0, 0.0], 0.3, 0.5)
    mesh = MeshArrays(indices=ints(np.zeros((0, 3)), 3), vertices=vecs(np.zeros((0, 3))), shape=ints([]))
    substep = ParticleSubstep(x=vecs([[0.0, 0.0, 0.02], [1.0, 0.0, 0.6]]),
                              v=vecs([[0.0, 0.0, -3.0], [0.0, 0.0, -1.0]]), mesh_tri=ints([-1, -1]), h=0.01,
                              bounce_speed=0.1)
    args = [x, vecs([[0.0, 0.1, 0.02], [1.0, 0.1, 0.6]]), particles, shapes, mesh, substep, *no_bodies(),
            V(0.0, 0.0, -9.81), STATIC_SHAPES, vecs(np.zeros((2, 3))), vecs(np.zeros((2, 3))),
            xsim.empty(0, dtype=xsim.types.vector(8, F))]
    xsim.launch(PC.bounce_particle_shapes, 2, inputs=args[:-3], outputs=args[-3:])
    assert np.dot(args[-3].numpy()[0], normal) > 0.0  # particle 0 bounced off the plane
    check(PC.bounce_particle_shapes, args, 2)


@pytest.mark.parametrize("kind, size, pos", [
    (SHAPE_SPHERE, (0.3, 0.0, 0.0), (0.05, 0.02, 0.0)),
    (SHAPE_BOX, (0.2, 0.3, 0.1), (0.02, -0.03, 0.05)),   # particle near the +z face (outside)
    (SHAPE_BOX, (0.2, 0.3, 0.1), (0.02, -0.03, 0.03)),   # particle inside
    (SHAPE_CAPSULE, (0.1, 0.4, 0.0), (0.03, 0.0, 0.3)),  # particle beside the axis
])
def test_static_collider_adjoint(kind, size, pos):
    rot = np.array([0.1, -0.2, 0.3, 0.9])
    rot /= np.linalg.norm(rot)
    centre = np.array([0.1, 0.2, -0.1])
    world = centre + _rotate(rot, np.array(pos, dtype=float))
    x = vecs(world)
    args = static_shape_args(x, vecs(world + [0.004, -0.003, 0.02]), kind, xforms(centre, rot), size, 0.3)
    xsim.launch(PC.collide_particle_shapes, 1, inputs=args[:-2], outputs=args[-2:])
    assert not np.allclose(args[-2].numpy(), x.numpy())  # the particle was in contact and moved
    check(PC.collide_particle_shapes, args, 1)


def test_mesh_collider_adjoint():
    verts = vecs([[-1.0, -1.0, 0.0], [1.0, -1.0, 0.0], [0.0, 1.0, 0.0]])
    x = vecs([[0.1, 0.05, 0.01]])
    args = static_shape_args(x, vecs([[0.12, 0.04, 0.03]]), SHAPE_MESH,
                             xforms((0.0, 0.0, -0.005), np.array([0.05, 0.0, 0.0, 1.0]) / np.sqrt(1.0025)),
                             np.zeros(3), 0.5, mesh_tri=0, mesh=([[0, 1, 2]], verts, [0]), radius=0.02)
    check(PC.collide_particle_shapes, args, 1)


def _rotate(q, v):
    u, w = q[:3], q[3]
    t = 2.0 * np.cross(u, v)
    return v + w * t + np.cross(u, t)


@pytest.mark.parametrize("scalar, vec4, vec3", [(xsim.float32, xsim.vec4, xsim.vec3), (xsim.float64, xsim.vec4d, V)])
def test_one_distance_update_is_exact_for_a_single_free_particle_in_either_precision(scalar, vec4, vec3):
    """The module-level generic kernel itself, launched with float32 or float64 arrays and scalars."""
    ends = xsim.array(np.array([[0.0, 0.0, 0.0, 0.0], [0.0, 0.0, -1.3, 2.0]]), dtype=vec4)

    def zeros(*shape, dtype=scalar):
        return xsim.zeros(shape, dtype=dtype)
    lam_out, delta = zeros(1), zeros(2, 1, dtype=vec3)
    rest = xsim.array([1.0], dtype=scalar)
    xsim.launch(particle_kernels.solve_distance, 1, inputs=[
        ends, ints([[0, 1]], 2), ints([[0, 0]], 2), rest, zeros(1), zeros(1), zeros(1), zeros(2, dtype=vec4),
        scalar(60.0), scalar(1.0), False], outputs=[lam_out, delta])
    assert delta.dtype is vec3 and lam_out.dtype is scalar
    np.testing.assert_allclose(delta.numpy()[:, 0], [[0.0, 0.0, 0.0], [0.0, 0.0, 0.3]],
                               atol=1e-15 if scalar is F else 1e-6)
    assert lam_out.numpy()[0] == pytest.approx(-0.3 / 2.0, rel=1e-15 if scalar is F else 1e-6)


def test_box_contact_gradient_is_exact_for_a_particle_a_rounding_error_outside_a_face():
    """A particle centre one ulp outside a box face (a particle that lands exactly on it): the
    normal must not come from normalizing the ~1e-17 gap, whose adjoint divides by it and cancels
    catastrophically; the gradient equals the one a micrometre further out."""

    def tape_grad(px):
        x = vecs([[px, 0.05, 0.03]])
        args = static_shape_args(x, vecs([[px - 0.01, 0.04, 0.03]]), SHAPE_BOX, xforms((0.0, 0.0, 0.0), grad=False),
                                 (0.2, 0.2, 0.2), 0.3)
        tape = xsim.Tape()
        with tape:
            xsim.launch(PC.collide_particle_shapes, 1, inputs=args[:-2], outputs=args[-2:])
        args[-2].grad.numpy()[0] = [1.0, 0.7, 0.3]
        tape.backward()
        return x.grad.numpy()[0]

    edge = np.nextafter(0.2, 1.0)
    np.testing.assert_allclose(tape_grad(edge), tape_grad(0.2 + 1e-6), atol=1e-9)


def _cloth_model(damping: float):
    """A 3 x 3-cell cloth, left edge pinned, with stretch, shear, bending and area constraints (float64), every
    array requiring grad, the bending weights included."""
    from xsim.sim import ModelBuilder
    b = ModelBuilder()
    b.add_cloth_grid(pos=(0.0, 0.0, 1.0), rot=(0.0, 0.0, 0.0, 1.0), vel=(0.0, 0.0, 0.0), dim_x=3, dim_y=3, cell_x=0.1,
                     cell_y=0.1, mass=0.1, fix_left=True, stretch_compliance=1e-4, shear_compliance=1e-4,
                     bend_compliance=1.0, area_compliance=1e-3, stretch_damping=damping * 1e-3,
                     bend_damping=damping * 1e-4)
    m = b.finalize(dtype=F, requires_grad=True)
    m.bending_weights.requires_grad = True
    return m


def _generated_project(pc, x, start, lam, entries, delta, x_next):
    """The Jacobi pass as the Tape recorded it before ParticleConstraints.backward: the gather on the tape, the
    constraint kernels and apply_corrections off it, and in their place keep_positions and each kind's
    solve_*_into_positions, whose generated adjoints run."""
    m = pc.model
    pc.gather(x, entries)
    out, stand_ins = {}, []
    for kind in pc.kinds:
        count = getattr(m, f"{kind.name}_count")
        out[kind.name] = lam_out = xsim.zeros_like(lam[kind.name], requires_grad=True)
        head = [pc._view(entries, kind.name), getattr(m, f"{kind.name}_indices")]
        tail = pc._tail(kind, lam[kind.name], start, 60.0, 1.0)
        xsim.launch(getattr(K, kind.kernel), count, inputs=[*head, pc.slots[kind.name], *tail],
                    outputs=[lam_out, delta], record_tape=False)
        stand_ins.append((getattr(K, kind.kernel + "_into_positions"), count, [*head, *tail, pc.slot_count],
                          [lam_out, x_next]))
    xsim.launch(K.apply_corrections, m.particle_count, inputs=[x, delta, pc.slot_count, m.particle_inv_mass],
                outputs=[x_next], record_tape=False)
    # keep_positions first on the tape: its adjoint (which takes x_next's gradient) runs after the stand-ins'
    launch.record(K.keep_positions, m.particle_count, inputs=[x], outputs=[x_next])
    for kernel, count, inputs, outputs in stand_ins:
        launch.record(kernel, count, inputs=inputs, outputs=outputs)
    return out


def _project_gradients(written_out: bool, damping: float, retain: bool):
    from xsim.solvers.xpbd.particle_constraints import ParticleConstraints
    m = _cloth_model(damping)
    pc = ParticleConstraints(m, K)
    n = m.particle_count
    rng = np.random.default_rng(17)
    x_start = vecs(m.particle_q.numpy() + rng.normal(size=(n, 3)) * 0.01)
    x = vecs(x_start.numpy() + rng.normal(size=(n, 3)) * 0.02)
    lam = {kind.name: xsim.array(rng.normal(size=(getattr(m, f"{kind.name}_count"), kind.lam_size)).squeeze(-1)
                                 * 1e-3 if kind.lam_size == 1 else
                                 rng.normal(size=(getattr(m, f"{kind.name}_count"), 3)) * 1e-3,
                                 dtype=F if kind.lam_size == 1 else V, requires_grad=True) for kind in pc.kinds}
    entries = xsim.zeros(pc.entry_count, dtype=xsim.vec4d, requires_grad=True)
    delta = xsim.zeros((n, pc.width), dtype=V)
    x_next = vecs(np.zeros((n, 3)))
    x_next.retain_grad = retain
    tape = xsim.Tape()
    with tape:
        start = pc.substep_start(lambda key, shape, dtype, avoid=(): xsim.zeros(shape, dtype=dtype, requires_grad=True),
                                 x_start)
        if written_out:
            out = pc.project(lambda key, shape, dtype, avoid=(): xsim.zeros(shape, dtype=dtype, requires_grad=True),
                             x, start, lam, 60.0, 1.0, entries, delta, x_next)
        else:
            out = _generated_project(pc, x, start, lam, entries, delta, x_next)
    seeds = {x_next: rng.normal(size=(n, 3))}
    seeds.update({out[name]: rng.normal(size=out[name].numpy().shape) for name in out})
    tape.backward(grads=seeds)
    got = {"x_next": x_next.numpy(), "x": x.grad.numpy(), "x_start": x_start.grad.numpy(),
           "x_next.grad": x_next.grad.numpy()}
    got.update({f"lam_out {k}": v.numpy() for k, v in out.items()})
    got.update({f"lam {k}": v.grad.numpy() for k, v in lam.items()})
    got.update({f"lam_out {k}.grad": v.grad.numpy() for k, v in out.items()})
    got.update({name: a.grad.numpy() for name, a in vars(m).items() if isinstance(a, xsim.array) and a.requires_grad})
    return got


@pytest.mark.parametrize("damping", [0.0, 30.0])
@pytest.mark.parametrize("retain", [False, True])
def test_written_out_backward_equals_the_stand_ins_generated_adjoints(damping, retain):
    """ParticleConstraints.backward (what a Tape runs for one Jacobi pass: positions_adjoint, the written-out
    solve_distance/solve_bending adjoints, area's generated stand-in adjoint, gather_entries_adjoint) against the
    generated adjoints of the pass as the Tape recorded it before (gather_entries, keep_positions and the
    solve_*_into_positions stand-ins), on a cloth with every kind, damping and the bending weights' gradient:
    the same values, gradients and taken gradients (zeroed unless retained), to the last bit."""
    old = _project_gradients(False, damping, retain)
    new = _project_gradients(True, damping, retain)
    assert old.keys() == new.keys()
    for key in old:
        np.testing.assert_array_equal(new[key], old[key], err_msg=key)
    for key in ("x", "x_start" if damping else "x", "lam spring", "lam bending", "lam area", "spring_rest_length",
                "bending_weights", "area_rest", "particle_inv_mass", "spring_compliance"):
        assert np.any(new[key] != 0.0), key
    assert np.any(new["x_next.grad"] != 0.0) == retain
