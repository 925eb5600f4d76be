"""The rigid-body half of ``SolverXPBD``: bodies, contacts and joints stepped with XPBD as in
Mueller et al. 2020, "Detailed Rigid Body Simulation with Extended Position Based Dynamics".

Each step: broad phase (``find_contact_pairs``), then per substep of ``h = dt / substeps``:
predict poses (gravity, gyroscopic term), run ``iterations`` position passes (one is the
paper's choice) over contacts and joints, take velocities from the pose change, and run one
velocity pass (restitution, dynamic friction, joint velocity drives).

Parallel solve: Jacobi with averaging, accumulated with ``atomic_add``. Every contact point and
every joint is one thread. A joint solves its own constraints one after the other (Gauss-Seidel
inside the joint, on local copies of its two poses); a contact resolves its depth and then its
static friction. Each thread adds its net correction of each body, plus a count of one, to a
per-body ``vector(8)`` accumulator that is new for every pass; each body then moves by the mean of
its corrections (``relaxation`` scales it). Why: averaging is stable whatever the number of
constraints on a body (no overshoot when four corners of a box push the same way), treats the
contacts of a body symmetrically (a sequential sweep over a box's corners leaves an order bias
that makes a resting box creep), and needs no colouring of a contact graph that changes every
step. A pendulum link gets the exact XPBD update; a resting box's four corners converge over the
substeps (it settles a fraction of a millimetre into the ground). Atomics make float sums
order-dependent in the last bit; that is far below what finite differences in float64 see.
Because every accumulator, multiplier and pose array of a step is new when gradients are
recorded (a Tape, or a model/state that requires grad), a rollout backpropagates to the initial
``body_q``/``body_qd``, masses, inertias, shape poses and sizes, friction, restitution and joint
targets/stiffnesses.

Coupling with particles is one-way: after the bodies' substeps, each particle substep pushes
particles out of the bodies' spheres, boxes and capsules at that substep's poses, with friction
against the body surface's motion (``collide_particles``); particles do not push bodies.
"""

from __future__ import annotations

import numpy as np

import xsim
from xsim import types as T

from .contacts_rigid import contact_kernels
from .joint_kernels import joint_kernels
from .rigid_kernels import rigid_kernels


class RigidStepper:
    """Steps the bodies of ``solver.model`` (see the module docstring); owned by ``SolverXPBD``."""

    def __init__(self, solver):
        m = solver.model
        r = m.rigid
        self.solver = solver
        self.model = m
        self.rigid = r
        s = m.dtype
        self.k, self.kc, self.kj = rigid_kernels(s), contact_kernels(s), joint_kernels(s)
        self.v3, self.v6, self.v8 = T.vector(3, s), T.vector(6, s), T.vector(8, s)
        self.tf = T.transformation(s)
        self._pool: dict = {}
        self._lam_contacts = xsim.zeros(r.contact_point_count, dtype=s, device=m.device)
        self._lam_joints = xsim.zeros(r.joint_count, dtype=s, device=m.device)
        self._contact_pair = r.contact_pair.numpy()
        self._has_com = bool(np.any(r.body_com.numpy() != 0.0)) if r.body_count else False
        self.substep_poses: list = []  # (com frames at the start, at the end) of each substep of the last step

    # -- buffers ---------------------------------------------------------------------------------------

    def _new(self, key: str, shape: int, dtype, grad: bool, zero: bool = False, avoid=()):
        """A fresh array when gradients are recorded (float arrays then require grad); otherwise a
        reusable buffer for ``key`` that is none of ``avoid``."""
        dev = self.model.device
        if grad:
            make = xsim.zeros if zero else xsim.empty
            return make(shape, dtype=dtype, device=dev, requires_grad=dtype is not int)
        pool = self._pool.setdefault(key, [])
        for a in pool:
            if not any(a is b for b in avoid):
                break
        else:
            a = xsim.empty(shape, dtype=dtype, device=dev)
            pool.append(a)
        if zero:
            a._raw_zero()
        return a

    # -- stepping --------------------------------------------------------------------------------------

    def step(self, state_in, state_out, control, dt: float, substeps: int, iterations: int, grad: bool) -> None:
        """Advance the bodies of ``state_in`` by ``dt`` into ``state_out.body_q``/``body_qd``."""
        m, r = self.model, self.rigid
        nb = r.body_count
        self.substep_poses = []
        if nb == 0:
            return
        if state_out.body_q is state_in.body_q or state_out.body_qd is state_in.body_qd:
            raise ValueError("SolverXPBD.step: state_out must not share body arrays with state_in")
        k, kc, kj = self.k, self.kc, self.kj
        h = dt / substeps
        gravity = self.v3(*m.gravity)
        target_q = getattr(control, "joint_target_q", None) if control is not None else None
        target_qd = getattr(control, "joint_target_qd", None) if control is not None else None
        target_q = r.joint_target_q if target_q is None else target_q
        target_qd = r.joint_target_qd if target_qd is None else target_qd
        bounce = self.solver.bounce_speed
        bounce = 2.0 * float(np.linalg.norm(m.gravity)) * h if bounce is None else bounce

        xc = state_in.body_q
        if self._has_com:
            xc = self._new("Xstart", nb, self.tf, grad)
            xsim.launch(k.body_to_com_frame, nb, inputs=[state_in.body_q, r.body_com], outputs=[xc])
        qd = state_in.body_qd
        n_contacts = 0
        if r.pair_count:
            # the broad phase is a discrete choice, a constant of the backward pass: kept off the tape
            active = self._new("active", r.pair_count, int, grad)
            xsim.launch(kc.find_contact_pairs, r.pair_count, inputs=[
                xc, qd, r.shape_body, r.shape_type, r.shape_xform, r.shape_size, r.shape_bound, r.pair_shapes,
                r.rigid_contact_margin, dt], outputs=[active], record_tape=False)
            # the candidate contacts of the active pairs: the kernels run over these only
            ids = np.flatnonzero(active.numpy()[self._contact_pair])
            n_contacts = len(ids)
            contact_ids = xsim.array(ids.astype(np.int32), dtype=int, device=m.device)
        velocity_pass = n_contacts > 0 or r.joint_drive_velocity
        for sub in range(substeps):
            last_sub = sub == substeps - 1
            x_pred = self._new("Xpred", nb, self.tf, grad)
            qd_pre = self._new("qd_pre", nb, self.v6, grad)
            xsim.launch(k.integrate_bodies, nb, inputs=[xc, qd, r.body_inv_mass, r.body_inertia, r.body_inv_inertia,
                                                        gravity, h], outputs=[x_pred, qd_pre])
            lam_c, lam_j = self._lam_contacts, self._lam_joints
            xi = x_pred
            for it in range(iterations):
                last_it = last_sub and it == iterations - 1
                delta = self._new("delta", nb, self.v8, grad, zero=True)
                if n_contacts:
                    lam_out = self._new("lam_c", r.contact_point_count, m.dtype, grad, avoid=(lam_c,))
                    xsim.launch(kc.solve_contact_positions, n_contacts, inputs=[
                        xi, xc, r.body_inv_mass, r.body_inv_inertia, r.shape_body, r.shape_type, r.shape_xform,
                        r.shape_size, r.shape_radius, r.shape_point_start, r.shape_point_count, r.shape_points,
                        r.pair_shapes, r.contact_pair, r.contact_index, r.pair_mu, contact_ids, lam_c],
                        outputs=[lam_out, delta])
                    lam_c = lam_out
                if r.joint_count:
                    lam_out = self._new("lam_j", r.joint_count, m.dtype, grad, avoid=(lam_j,))
                    xsim.launch(kj.solve_joints, r.joint_count, inputs=[
                        xi, r.body_inv_mass, r.body_inv_inertia, r.joint_type, r.joint_parent, r.joint_child,
                        r.joint_X_p, r.joint_X_c, r.joint_axis, r.joint_limit, target_q, r.joint_target_ke,
                        lam_j, 1.0 / (h * h)], outputs=[lam_out, delta])
                    lam_j = lam_out
                if last_it and not self._has_com:
                    x_next = state_out.body_q
                elif it == iterations - 1:
                    x_next = self._new(f"Xsub{sub}", nb, self.tf, grad)
                else:
                    x_next = self._new("Xit", nb, self.tf, grad, avoid=(xi,))
                qd_next = state_out.body_qd if last_it and not velocity_pass else \
                    self._new("qd", nb, self.v6, grad, avoid=(qd,))
                xsim.launch(k.apply_body_deltas, nb, inputs=[
                    xi, delta, xc, self.solver.relaxation, 1.0 / h, r.body_linear_damping, r.body_angular_damping],
                    outputs=[x_next, qd_next])
                xi = x_next
            if velocity_pass:
                dv = self._new("dv", nb, self.v8, grad, zero=True)
                if n_contacts:
                    xsim.launch(kc.solve_contact_velocities, n_contacts, inputs=[
                        xi, qd_next, qd_pre, r.body_inv_mass, r.body_inv_inertia, r.shape_body, r.shape_type,
                        r.shape_xform, r.shape_size, r.shape_radius, r.shape_point_start, r.shape_point_count,
                        r.shape_points, r.pair_shapes, r.contact_pair, r.contact_index, r.pair_mu, r.pair_restitution,
                        contact_ids, lam_c, 1.0 / h, bounce], outputs=[dv])
                if r.joint_drive_velocity:
                    xsim.launch(kj.solve_joint_velocities, r.joint_count, inputs=[
                        xi, qd_next, r.body_inv_mass, r.body_inv_inertia, r.joint_type, r.joint_parent,
                        r.joint_child, r.joint_X_p, r.joint_X_c, r.joint_axis, target_qd, r.joint_target_kd, h],
                        outputs=[dv])
                qd_final = state_out.body_qd if last_sub else self._new("qd", nb, self.v6, grad,
                                                                       avoid=(qd, qd_next))
                xsim.launch(k.apply_velocity_deltas, nb, inputs=[qd_next, dv], outputs=[qd_final])
                qd_next = qd_final
            self.substep_poses.append((xc, xi))
            xc, qd = xi, qd_next
        if self._has_com:
            xsim.launch(k.com_to_body_frame, nb, inputs=[xc, r.body_com], outputs=[state_out.body_q])

    def collide_particles(self, sub: int, x, x_start, x_out) -> None:
        """Push particles ``x`` out of the bodies at substep ``sub``'s poses into ``x_out``."""
        m, r = self.model, self.rigid
        prev, cur = self.substep_poses[sub]
        xsim.launch(self.kc.collide_particles_bodies, m.particle_count, inputs=[
            x, x_start, m.particle_inv_mass, m.particle_radius, cur, prev, r.shape_body, r.shape_type,
            r.shape_xform, r.shape_size, r.shape_mu, r.shape_count], outputs=[x_out])

    def joint_coordinates(self, state) -> np.ndarray:
        """Each joint's coordinate in ``state`` (numpy): revolute angle (rad), prismatic offset (m),
        0 for ball, fixed and free joints."""
        r = self.rigid
        xc = state.body_q
        if self._has_com:
            xc = xsim.empty(r.body_count, dtype=self.tf, device=self.model.device)
            xsim.launch(self.k.body_to_com_frame, r.body_count, inputs=[state.body_q, r.body_com], outputs=[xc])
        out = xsim.empty(r.joint_count, dtype=self.model.dtype, device=self.model.device)
        xsim.launch(self.kj.eval_joint_coordinates, r.joint_count, inputs=[
            xc, r.joint_type, r.joint_parent, r.joint_child, r.joint_X_p, r.joint_X_c, r.joint_axis], outputs=[out])
        return out.numpy()
