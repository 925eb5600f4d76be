"""The rigid-body half of ``SolverXPBD``: bodies, contacts and joints stepped with XPBD as in
Mueller et al. 2020, "Detailed Rigid Body Simulation with Extended Position Based Dynamics".

Each step: broad phase and contact pruning (``xsim/collision/broad_phase.py``), then per substep of ``h = dt / substeps``:
predict poses (gravity, gyroscopic term), run ``iterations`` position passes (one is the
paper's choice) over contacts and joints, take velocities from the pose change, and run one
velocity pass (restitution, dynamic friction, joint velocity drives), one thread per touching
shape pair (restitution once at the pair's centre of pressure, see ``solve_pair_velocities``) and
per joint.

Parallel solve: Jacobi with averaging, accumulated with ``atomic_add``. In the position passes
every touching shape pair and every joint is one thread. A joint solves its own constraints one after the other (Gauss-Seidel
inside the joint, on local copies of its two poses); a pair's contacts are each a Jacobi constraint on the poses the
pass started from: a contact resolves its depth and then its
friction (static, or sliding at mu times its even share of its pair's normal multipliers, ``contact_position_update``).
Each thread adds its net correction of each body, plus a count of one per constraint, to a
per-body ``vector(8)`` accumulator that is new for every pass (a pair sums its contacts' first: one atomic per body); each
body then moves by the mean of its corrections (``relaxation`` scales it). Why: averaging is stable whatever the number of
constraints on a body (no overshoot when four corners of a box push the same way), treats the
contacts of a body symmetrically (a sequential sweep over a box's corners leaves an order bias
that makes a resting box creep), and needs no colouring of a contact graph that changes every
step. A pendulum link gets the exact XPBD update; a resting box's four corners converge over the
substeps (it settles a fraction of a millimetre into the ground). Each constraint sees its bodies
with their masses split (Tonge et al. 2012, ``rigid_kernels.split_mass``): inverse mass and inertia
times the body's number of constraints in the pass (its joints, plus its penetrating contacts,
counted by ``measure_contacts`` just before, which also measures each contact's geometry once for the pass), which is the number the mean divides by; so every
constraint's impulse reaches both of its bodies in full and momentum is conserved between bodies
with different numbers of constraints (without it a double pendulum gained energy and a free chain
lost momentum). Atomics make float sums order-dependent in the last bit; that is far below what finite differences in float64 see.
Because no accumulator, multiplier or pose array of a step is one that a tape holds when gradients
are recorded (a Tape, or a model/state that requires grad; ``buffers.py``), a rollout backpropagates to the initial
``body_q``/``body_qd``, masses, inertias, shape poses and sizes, friction, restitution and joint
targets/stiffnesses.

Coupling with particles is two-way. ``SolverXPBD.step`` runs the bodies' stages (``begin``,
``begin_substep``, ``solve``, ``apply``, ``end_substep``, ``end``) interleaved with the particles':
in every iteration, after the particles' own constraints, each particle is pushed out of the
bodies' spheres, boxes and capsules at the bodies' current poses (``particle_contacts.py``, with the
static shapes), as a
contact between the particle's inverse mass and the body's generalized inverse mass at the contact
point, with position-level static/dynamic friction against the body surface's motion. These
contacts split the body's mass too: each sees the body's inverse mass and inertia times its number
of particle contacts (``particle_split``, with the contacts' own test, just before) and
adds its correction, with a count of one, to a second accumulator, ``pdelta``. A body then moves
by the mean of its rigid corrections plus the mean of its particle corrections, so every
particle's impulse reaches the body in full and momentum is conserved (n particles of mass m
pressing evenly on a translating body of mass M resolve the depth in one iteration, the body
taking n m / (M + n m) of it). Averaging the particle
pushes together with the rigid constraints, or splitting the body's mass by a weighted count that
differs from the divisor, gave the body a smaller impulse than the particles took: a resting
cloth was pushed off its body every substep, and a damped sprung body under cloth kept a limit
cycle (tests/solvers/test_coupling.py). Kinematic bodies (mass 0) are not pushed. After the substep
the particles' velocity pass against the bodies (restitution and friction)
splits the body's mass by its number of touching particles in the same way, into ``pdv``, which
``apply_velocity_deltas`` averages likewise.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace

import numpy as np

import xsim
from xsim import types as T
from xsim.collision.contacts import Contacts
from xsim.collision.narrow_phase import ShapeArrays
from xsim.collision.pipeline import CollisionPipeline
from xsim.sim.generic import specialized
from xsim.sim.kinematics import eval_ik
from xsim.sim.model import State
from xsim.sim.rigid import JOINT_FREE, JOINT_PRISMATIC, JOINT_REVOLUTE
from xsim.sim.uploads import Uploads

from . import contacts_rigid, joint_kernels, rigid_kernels
from .bundles import (
    BodyArrays,
    ContactArms,
    ContactArrays,
    ContactGeometry,
    JointArrays,
    Multipliers,
    model_arrays,
)


@dataclass(eq=False, slots=True)
class RigidStep:
    """The working state of one step of the bodies: ``RigidStepper.begin`` makes it, the stages that
    ``SolverXPBD.step`` drives update it. Arrays hold one row per body (``[body_count]``), per joint or
    per kept contact (``[n_contacts]``, the first rows of a pooled buffer); poses are com frames."""

    state_out: State  # where the step ends
    h: float  # s, the substep
    grad: bool  # gradients recorded: no array the step writes is one a tape holds (``BufferPool.get``)
    substeps: int
    iterations: int  # position passes per substep
    target_q: xsim.array  # joint drive targets (rad or m), [joint_count]
    target_qd: xsim.array  # joint velocity drive targets (rad/s or m/s), [joint_count]
    bounce: float  # m/s, the approach speed below which contacts do not bounce
    x0: xsim.array  # com frames at the step start (world), transform [body_count]
    xc: xsim.array  # com displacements since x0 and rotations at the substep start (``rigid_kernels``), [body_count]
    qd: xsim.array  # velocities at the substep start (linear, angular; m/s, rad/s), spatial vector [body_count]
    bodies: BodyArrays  # the model's body and joint arrays (``bundles.py``)
    joints: JointArrays
    sub: int = 0  # the current substep
    velocity_pass: bool = False  # whether substeps run the velocity pass (contacts, velocity drives, particles)
    # the step's contacts (``_find_contacts``): kept candidates grouped by shape pair
    shapes: ShapeArrays | None = None  # the model's shape arrays, frames with unit quaternions (shape_xform)
    n_contacts: int = 0
    n_pairs: int = 0
    pairs: xsim.array | None = None  # the pairs with kept contacts: (shape a, shape b, a's points, b's), int [n_pairs, 4]
    contact_pair: xsim.array | None = None  # each contact's row in ``pairs``, int [n_contacts]
    contact_index: xsim.array | None = None  # each contact's index in its pair (``contact_roles``), int [n_contacts]
    pair_first: xsim.array | None = None  # each pair's first contact, then n_contacts: int [n_pairs + 1]
    contacts: ContactArrays | None = None  # the four above, as the contact kernels take them
    keys: np.ndarray | None = None  # each contact's (shape a, shape b, index) key, host int64 [n_contacts]
    slip: xsim.array | None = None  # each contact's slip carried into the substep (m, pair order), vec3 [n_contacts]
    held: xsim.array | None = None  # 1 where static friction held (``solve_pair_positions``), int [n_contacts]
    shape_xform: xsim.array | None = None  # shape frames, quaternions normalized (``unit_shape_frames``), [shape_count]
    # the current substep
    x_pred: xsim.array | None = None  # predicted com displacements and rotations, transform [body_count]
    qd_pre: xsim.array | None = None  # predicted velocities (restitution's pre-solve ones), [body_count]
    xi: xsim.array | None = None  # com displacements and rotations of the current position pass, [body_count]
    qd_next: xsim.array | None = None  # velocities from the last pose change, [body_count]
    lam_c: xsim.array | None = None  # contacts' normal multipliers of the substep so far, [n_contacts]
    lam_t: xsim.array | None = None  # and tangential ones
    lam_j: xsim.array | None = None  # joints' drive multipliers, [joint_count]
    lam_a: xsim.array | None = None  # joints' armature multipliers, [joint_count]
    q_pred: xsim.array | None = None  # joint coordinates the armatures carry on to (``predict_joint_coordinates``)
    delta: xsim.array | None = None  # this pass's accumulated rigid corrections, vector(8) [body_count]
    pdelta: xsim.array | None = None  # and the particles' (None without particle coupling)
    pdv: xsim.array | None = None  # the particles' velocity-pass corrections, vector(8) [body_count]
    geom: list = field(default_factory=list)  # contact normals, arms on a, on b (velocity pass), vec3 [n_contacts]
    pass_arrays: tuple | None = None  # without gradients, the position passes' per-contact arrays (_pass_geometry)


class RigidStepper:
    """Steps the bodies of ``solver.model`` (see the module docstring); owned by ``SolverXPBD``."""

    def __init__(self, solver):
        m = solver.model
        r = m  # the model's body, shape and joint arrays
        self.solver = solver
        self.model = m
        self.rigid = r
        s = m.dtype
        self.k, self.kc, self.kj = (specialized(f.__name__, s) for f in (rigid_kernels, contacts_rigid, joint_kernels))
        self.v3, self.v6, self.v8 = T.vector(3, s), T.vector(6, s), T.vector(8, s)
        self.tf = T.transformation(s)
        self._gravity = self.v3(*m.gravity)  # built once per solver, not per substep
        self._g_norm = float(np.linalg.norm(m.gravity))
        self.buffers = solver.buffers  # shared with the particles' stepping
        self.bundles = solver.bundles  # this step's struct arguments, kept from step to step without gradients
        self._lam_contacts = xsim.zeros(0, dtype=s, device=m.device)  # grown to the most contacts of a step
        self._lam_joints = xsim.zeros(r.joint_count, dtype=s, device=m.device)
        self.pipeline = CollisionPipeline(m)  # finds the contacts of a step given none
        self._contacts = self.pipeline.contacts()
        self.kn = self.pipeline.kernels
        self._armature = bool(r.joint_count) and bool(np.any(r.joint_armature.numpy() > 0.0))
        # the model's arrays as the kernels take them (``model_arrays``)
        self._bodies = self._joints = self._shapes = None  # (shapes: with the step's unit frames, _find_contacts)
        self._uploads = Uploads(m.device)  # reused host-written buffers of the step's contacts
        self.contact_count = 0  # contacts the last step solved (after the broad phase and pruning)
        self._no_slip = xsim.empty(1, dtype=self.v3, device=m.device)
        self._no_residual = xsim.zeros(r.body_count, dtype=self.v3, device=m.device)  # a State without one
        self._has_com = bool(np.any(r.body_com.numpy() != 0.0)) if r.body_count else False
        # each body's number of joints in the position pass and in the velocity pass (mass splitting,
        # rigid_kernels.split_mass); contacts add theirs each pass
        kinds, parents, children = r.joint_type.numpy(), r.joint_parent.numpy(), r.joint_child.numpy()
        kd = r.joint_target_kd.numpy()
        counts = np.zeros((2, r.body_count))
        for j in range(r.joint_count):
            for b in (parents[j], children[j]):
                if b >= 0 and kinds[j] != JOINT_FREE:
                    counts[0, b] += 1.0
                    counts[1, b] += float(kd[j] > 0.0 and kinds[j] in (JOINT_REVOLUTE, JOINT_PRISMATIC))
        self._joint_split = xsim.array(counts[0], dtype=s, device=m.device)
        self._joint_vsplit = xsim.array(counts[1], dtype=s, device=m.device)

    # -- stepping: SolverXPBD.step drives these stages, interleaved with the particles' ----------------

    def begin(self, state_in, state_out, control, dt: float, substeps: int, iterations: int,
              grad: bool, contacts: Contacts | None = None) -> RigidStep | None:
        """Start a step of ``dt``: com frames, joint targets, the step's contacts (``contacts``, else the
        solver's own collision pipeline finds them). Returns the step's working state (None without bodies)."""
        r = self.rigid
        nb = r.body_count
        if nb == 0:
            return None
        if state_out.body_q is state_in.body_q or state_out.body_qd is state_in.body_qd:
            raise ValueError("SolverXPBD.step: state_out must not share body arrays with state_in")
        residual_in, residual_out = (getattr(s, "body_q_residual", None) for s in (state_in, state_out))
        if residual_in is not None and residual_in is residual_out:
            raise ValueError("SolverXPBD.step: state_out must not share body_q_residual with state_in")
        h = dt / substeps
        target_q = getattr(control, "joint_target_q", None) if control is not None else None
        target_qd = getattr(control, "joint_target_qd", None) if control is not None else None
        bounce = self.solver.bounce_speed
        self._bodies = model_arrays(BodyArrays, r, "body_", self._bodies)
        self._joints = model_arrays(JointArrays, r, "joint_", self._joints)
        st = RigidStep(
            state_out=state_out, h=h, grad=grad, substeps=substeps, iterations=iterations,
            target_q=r.joint_target_q if target_q is None else target_q,
            target_qd=r.joint_target_qd if target_qd is None else target_qd,
            bounce=2.0 * self._g_norm * h if bounce is None else bounce,
            x0=state_in.body_q, xc=state_in.body_q, qd=state_in.body_qd, bodies=self._bodies, joints=self._joints)
        if self._has_com:
            st.x0 = self.buffers.get("Xstart", nb, self.tf, grad)
            xsim.launch(self.k.body_to_com_frame, nb, inputs=[state_in.body_q, r.body_com], outputs=[st.x0])
        # the step's first poses and the first substep's prediction (``begin_substep``'s, in the same launch)
        st.xc = self.buffers.get("Xdisp", nb, self.tf, grad)
        st.x_pred = self.buffers.get("Xpred", nb, self.tf, grad)
        st.qd_pre = self.buffers.get("qd_pre", nb, self.v6, grad)
        residual = getattr(state_in, "body_q_residual", None)
        xsim.launch(self.k.start_step, nb, inputs=[
            st.x0, state_in.body_q, r.body_com, self._no_residual if residual is None else residual, st.qd, st.bodies,
            self._gravity, h], outputs=[st.xc, st.x_pred, st.qd_pre])
        self._find_contacts(st, state_in, dt, contacts)
        self.contact_count = st.n_contacts
        st.velocity_pass = st.n_contacts > 0 or r.joint_drive_velocity or self.solver._body_collide
        return st

    def _find_contacts(self, st: RigidStep, state_in, dt: float, contacts: Contacts | None) -> None:
        """The step's contacts into ``st``: ``contacts`` (a ``CollisionPipeline.collide`` of ``state_in``)
        or, without them, the solver's own pipeline's search at the step's frames (``CollisionPipeline.find``),
        grouped by shape pair (the velocity pass runs over pairs), and the slips they carry
        (``_carry_slips``). Not on the tape: which contacts exist is a constant of the backward pass."""
        r = self.rigid
        if not len(self.pipeline.broad.active):
            return
        # shape frames with unit quaternions, once per step: every contact evaluation reads them (on the tape)
        st.shape_xform = self.buffers.get("shape_frames", r.shape_count, self.tf, st.grad)
        xsim.launch(self.kn.unit_shape_frames, r.shape_count, inputs=[r.shape_xform], outputs=[st.shape_xform])
        st.shapes = self._shapes = model_arrays(ShapeArrays, r, "shape_", self._shapes, xform=st.shape_xform)
        if contacts is None:
            contacts = self.pipeline.find(st.x0, st.xc, st.qd, st.shape_xform, st.shapes, dt, self._contacts)
        last = getattr(state_in, "body_contacts", None)
        if not contacts.count:
            return
        n = contacts.count
        taped, put = st.grad, self._uploads.put
        # the solve kernels on a tape read these in the backward pass, so they are new arrays then
        st.n_contacts, st.n_pairs = n, len(contacts.pairs)
        st.pairs = put("used_pairs", contacts.pairs, int, taped)
        st.contact_pair = put("contact_pair", contacts.pair, int, taped)
        st.contact_index = put("contact_index", contacts.index, int, taped)
        st.pair_first = put("pair_first", np.append(contacts.first, n), int, taped)
        st.contacts = ContactArrays(pairs=st.pairs, pair=st.contact_pair, index=st.contact_index,
                                    pair_first=st.pair_first)
        if self._lam_contacts.shape[0] < n:
            self._lam_contacts = xsim.zeros(2 * n, dtype=self.model.dtype, device=self.model.device)
        st.keys = contacts.keys
        self._carry_slips(st, state_in, contacts.body_q if state_in.body_q is st.x0 else None, last)

    def _carry_slips(self, st: RigidStep, state_in, body_q, last) -> None:
        """Each contact's slip carried into the step (``contacts_rigid.contact_slip``): a contact that held at
        the end of the step that wrote ``state_in`` (``last``, its ``body_contacts``) keeps what static
        friction had not yet cancelled of its slip, any other starts at zero (``carried_slips``). The carry
        rides on the state, not the solver, so a step from a copy of a state (a checkpointed segment
        recomputed) is the step from the state itself. ``body_q``: ``state_in.body_q`` on the host, if at hand."""
        n, taped = st.n_contacts, st.grad
        carry = np.full(n, -1, dtype=np.int64)
        if last is not None:
            if body_q is None:
                body_q = state_in.body_q.numpy()
            if np.array_equal(body_q, last.body_q):  # not changed in place since that step
                pos = np.minimum(np.searchsorted(last.keys, st.keys), len(last.keys) - 1)
                carry = np.where((last.keys[pos] == st.keys) & (last.held[pos] != 0), pos, -1)
        prev = self._no_slip if last is None else last.slip
        st.slip = self.buffers.get("c:slip", n, self.v3, taped, avoid=(prev,))
        xsim.launch(self.kc.carried_slips, n, inputs=[self._uploads.put("carry", carry, int, taped), prev],
                    outputs=[st.slip])
        st.held = self.buffers.get("c:held", n, int, taped, zero=True)

    def begin_substep(self, st: RigidStep, sub: int) -> None:
        """Predict the bodies' poses for substep ``sub`` (gravity, gyroscopic term; the first substep's
        ``begin`` predicted)."""
        r = self.rigid
        nb = r.body_count
        st.sub = sub
        if sub:
            st.x_pred = self.buffers.get("Xpred", nb, self.tf, st.grad)
            st.qd_pre = self.buffers.get("qd_pre", nb, self.v6, st.grad)
            xsim.launch(self.k.integrate_bodies, nb, inputs=[st.xc, st.qd, st.bodies, self._gravity, st.h],
                        outputs=[st.x_pred, st.qd_pre])
        st.lam_c, st.lam_t, st.lam_j = self._lam_contacts, self._lam_contacts, self._lam_joints
        st.lam_a = st.q_pred = self._lam_joints
        if self._armature:
            st.q_pred = self.buffers.get("q_pred", r.joint_count, self.model.dtype, st.grad)
            xsim.launch(self.kj.predict_joint_coordinates, r.joint_count, inputs=[st.xc, st.x0, st.qd, st.bodies,
                                                                                  st.joints, st.target_qd, st.h], outputs=[st.q_pred])
        st.xi = st.x_pred

    def solve(self, st: RigidStep) -> None:
        """One position pass of the contacts and joints at the current poses ``st.xi``: their
        corrections go to a new accumulator ``st.delta`` (and particles' to ``st.pdelta``)."""
        m, r = self.model, self.rigid
        nb, grad, xi = r.body_count, st.grad, st.xi
        st.delta = self.buffers.get("body_delta", nb, self.v8, grad, zero=True)
        st.pdelta = self.buffers.get("pdelta", nb, self.v8, grad, zero=True) if self.solver._body_collide else None
        split = self._joint_split
        if st.n_contacts:
            # mass splitting: each body's constraints in this pass, the penetrating contacts counted first,
            # with the contacts' geometry at these poses
            split = self._counts("split", self._joint_split, grad, taped=True)
            geom, st.geom = self._pass_geometry(st)
            keep = not grad
            geometry = self.bundles.get("geometry", ContactGeometry, keep, n=geom[0], pen=geom[1], ca=geom[2],
                                        cb=geom[3])
            xsim.launch(self.kc.measure_contacts, st.n_contacts, inputs=[xi, st.x0, st.bodies, st.shapes, st.contacts],
                        outputs=[geometry, split])
            lam_out = self.buffers.get("c:lam", st.n_contacts, m.dtype, grad, avoid=(st.lam_c, st.lam_t))
            lam_t_out = self.buffers.get("c:lam_t", st.n_contacts, m.dtype, grad, avoid=(st.lam_c, st.lam_t, lam_out))
            held = self.buffers.get("c:held", st.n_contacts, int, grad, avoid=(st.held,))
            xsim.launch(self.kc.solve_pair_positions, st.n_pairs, inputs=[
                xi, st.x0, st.xc, st.slip, st.bodies, st.shapes, st.contacts, geometry, self._multipliers(st),
                split], outputs=[self.bundles.get("lam_out", Multipliers, keep, normal=lam_out, tangent=lam_t_out,
                                                  held=held), st.delta, self._arms(st)])
            st.lam_c, st.lam_t, st.held = lam_out, lam_t_out, held
        if r.joint_count:
            lam_out = self.buffers.get("lam_j", r.joint_count, m.dtype, grad, avoid=(st.lam_j,))
            lam_a_out = self.buffers.get("lam_a", r.joint_count, m.dtype, grad, avoid=(st.lam_a,))
            xsim.launch(self.kj.solve_joints, r.joint_count, inputs=[
                xi, st.x0, st.xc, st.bodies, st.joints, st.target_q, st.lam_j, st.q_pred, st.lam_a,
                1.0 / (st.h * st.h), split], outputs=[lam_out, lam_a_out, st.delta])
            st.lam_j, st.lam_a = lam_out, lam_a_out

    def _pass_geometry(self, st: RigidStep) -> tuple[list, list]:
        """A position pass's per-contact arrays: the geometry ``measure_contacts`` writes (normal, depth,
        contact points) and the one ``solve_pair_positions`` leaves for the velocity pass (normal, arms). New
        per pass with gradients (the tape keeps them); else the same arrays all step (``st.pass_arrays``)."""
        if st.pass_arrays is not None:
            return st.pass_arrays
        n, v3, grad, get = st.n_contacts, self.v3, st.grad, self.buffers.get
        arrays = ([get("c:pass_n", n, v3, grad), get("c:pass_pen", n, self.model.dtype, grad),
                   get("c:pass_ca", n, v3, grad), get("c:pass_cb", n, v3, grad)],
                  [get(f"c:geom{k}", n, v3, grad) for k in range(3)])
        if not grad:
            st.pass_arrays = arrays
        return arrays

    def _multipliers(self, st: RigidStep):
        """The contacts' multipliers of the substep so far as the contact kernels take them."""
        return self.bundles.get("lam", Multipliers, not st.grad, normal=st.lam_c, tangent=st.lam_t, held=st.held)

    def _arms(self, st: RigidStep):
        """The contacts' geometry of the last position pass (``st.geom``) as the contact kernels take it."""
        n, ra, rb = st.geom
        return self.bundles.get("arms", ContactArms, not st.grad, n=n, ra=ra, rb=rb)

    def _counts(self, key: str, base, grad: bool, taped: bool = False):
        """A copy of the per-body counts ``base`` for a count kernel to add to: new when gradients are
        recorded (the solve kernels that read it are on the tape), else a reused buffer. A count is
        piecewise constant: its gradient is zero, but one that a kernel on the tape adds to (``taped``)
        carries a grad buffer so that the tape sees the chain whole."""
        n = base.shape[0]
        a = xsim.empty(n, dtype=base.dtype, device=self.model.device, requires_grad=taped) if grad else \
            self.buffers.get(key, n, base.dtype, False)
        a.copy_from_untracked(base)
        return a

    def particle_split(self, st: RigidStep, x, slack: float):
        """Mass splitting of the particle-body contacts (``particle_contacts.py``): each body's number of
        particles ``x`` touching it (depth above ``-slack`` times the particle's radius), counted with the
        contacts' own test; new when gradients are recorded (the contact kernels that read it are on the
        tape). The bodies' accumulators of this pass are ``st.pdelta`` and ``st.pdv``."""
        m, r, s = self.model, self.rigid, self.solver
        ws = s._workspace()
        split = xsim.zeros(r.body_count, dtype=m.dtype, device=m.device) if st.grad else \
            self.buffers.get("psplit", r.body_count, m.dtype, False, zero=True)
        xsim.launch(s.contact_kernels.count_particle_contacts, m.particle_count, inputs=[
            x, ws.particle_arrays, st.xi, st.x0, ws.body_arrays, ws.shape_arrays, slack], outputs=[split],
            record_tape=False)
        return split

    def begin_particle_bounce(self, st: RigidStep):
        """A new accumulator ``st.pdv`` for the particles' velocity pass against the bodies (after the last
        ``apply`` of the substep, before ``end_substep``)."""
        st.pdv = self.buffers.get("pdv", self.rigid.body_count, self.v8, st.grad, zero=True)

    def apply(self, st: RigidStep, it: int) -> None:
        """Move the bodies by their averaged corrections and take velocities from the pose change."""
        r = self.rigid
        nb, grad = r.body_count, st.grad
        last_it = st.sub == st.substeps - 1 and it == st.iterations - 1
        x_next = self.buffers.get("X", nb, self.tf, grad, avoid=(st.xi, st.xc))
        ends_step = last_it and not st.velocity_pass  # no velocity pass follows: the step ends here
        st.qd_next = st.state_out.body_qd if ends_step else \
            self.buffers.get("qd", nb, self.v6, grad, avoid=(st.qd,))
        coupled = st.pdelta is not None
        inputs = [st.xi, st.delta, st.pdelta if coupled else st.delta, int(coupled), st.xc, st.x_pred, st.qd_pre,
                  st.bodies.inv_mass, self.solver.relaxation, 1.0 / st.h, r.body_linear_damping,
                  r.body_angular_damping]
        if ends_step:  # the body frames too
            xsim.launch(self.k.apply_last_body_deltas, nb, inputs=[*inputs, st.x0, r.body_com],
                        outputs=[x_next, st.qd_next, *self._end_frames(st)])
        else:
            xsim.launch(self.k.apply_body_deltas, nb, inputs=inputs, outputs=[x_next, st.qd_next])
        st.xi = x_next

    def end_substep(self, st: RigidStep) -> None:
        """The velocity pass (restitution, dynamic friction, joint velocity drives); the substep's
        end state becomes the next one's start."""
        r = self.rigid
        nb, grad, xi, h = r.body_count, st.grad, st.xi, st.h
        if st.velocity_pass:
            dv = self.buffers.get("dv", nb, self.v8, grad, zero=True)
            vsplit = self._joint_vsplit
            if st.n_contacts:
                vsplit = self._counts("vsplit", self._joint_vsplit, grad)
                xsim.launch(self.kc.count_velocity_pairs, st.n_pairs, inputs=[st.shapes, st.contacts, st.lam_c],
                            outputs=[vsplit], record_tape=False)
                # the last substep's slips stay with the state (``end``): a new array, not a reused buffer
                slip = xsim.empty(st.n_contacts, dtype=self.v3, device=self.model.device, requires_grad=grad) \
                    if st.sub == st.substeps - 1 else self.buffers.get("c:slip", st.n_contacts, self.v3, grad,
                                                                       avoid=(st.slip,))
                xsim.launch(self.kc.solve_pair_velocities, st.n_pairs, inputs=[
                    xi, st.x0, st.xc, st.qd_next, st.qd_pre, st.bodies, st.shapes, st.contacts, self._multipliers(st),
                    self._arms(st), st.slip, 1.0 / h, st.bounce, vsplit], outputs=[dv, slip])
                st.slip = slip
            if r.joint_drive_velocity:
                xsim.launch(self.kj.solve_joint_velocities, r.joint_count, inputs=[
                    xi, st.x0, st.qd_next, st.bodies, st.joints, st.target_qd, h, vsplit], outputs=[dv])
            last_sub = st.sub == st.substeps - 1
            qd_final = st.state_out.body_qd if last_sub else self.buffers.get("qd", nb, self.v6, grad,
                                                                       avoid=(st.qd, st.qd_next))
            coupled = st.pdv is not None
            inputs = [st.qd_next, dv, st.pdv if coupled else dv, int(coupled)]
            if last_sub:  # the step ends here: the body frames too
                xsim.launch(self.k.apply_last_velocity_deltas, nb, inputs=[*inputs, xi, st.x0, r.body_com],
                            outputs=[qd_final, *self._end_frames(st)])
            else:
                xsim.launch(self.k.apply_velocity_deltas, nb, inputs=inputs, outputs=[qd_final])
            st.qd_next = qd_final
        st.xc, st.qd = xi, st.qd_next

    def _end_frames(self, st: RigidStep) -> tuple:
        """Where the step's last update writes the body frames and their rounding (``body_frame_at_end``):
        ``state_out.body_q`` and its ``body_q_residual`` (made on the first step into that state)."""
        out = st.state_out
        if getattr(out, "body_q_residual", None) is None:
            out.body_q_residual = xsim.zeros(self.rigid.body_count, dtype=self.v3, device=self.model.device,
                                             requires_grad=st.grad)
        return out.body_q, out.body_q_residual

    def end(self, st: RigidStep) -> None:
        """Joint coordinates into ``state_out`` (its body frames came with the last update: ``apply`` or
        ``end_substep``) and what the next step needs to carry the contacts' slips."""
        m, r = self.model, self.rigid
        out = st.state_out
        if r.joint_count and out.joint_q is not None:
            eval_ik(m, out)
        # what the next step from ``out`` needs to carry the slips of the contacts that held (``_carry_slips``)
        out.body_contacts = SimpleNamespace(
            body_q=out.body_q.numpy().copy(), keys=st.keys, held=st.held.numpy()[:st.n_contacts].copy(),
            slip=st.slip) if st.n_contacts else None
