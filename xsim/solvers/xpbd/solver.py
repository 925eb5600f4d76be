"""``SolverXPBD``: extended position-based dynamics for particles and cloth, differentiable
through whole rollouts.

Method
------
XPBD (Macklin, Mueller, Chentanez 2016) with small steps (Macklin et al. 2019): each step of ``dt``
runs ``substeps`` substeps of ``h = dt / substeps``; each substep predicts positions
(``x + v h + g h^2 / 2``), resets every Lagrange multiplier to zero, runs ``iterations``
constraint iterations, and takes the velocity as ``(x - x_start) / h + g h / 2``. Gravity thus
enters exactly (free flight matches ``x0 + v0 t + g t^2 / 2``), and the constraint corrections
act at the end of the substep, as in XPBD's implicit Euler. Positions evolve exactly as with the
usual ``x + h (v + g h)`` form once the velocity is read as taken half a substep later (so a
particle resting on the ground reports ``v = g h / 2``, the gravity of the next half substep,
which its support cancels). A constraint C with compliance
alpha updates its multiplier by ``dl = -(C + alpha/h^2 * l) / (sum_k w_k |grad_k C|^2 + alpha/h^2)``.

Constraints: distance (stretch, shear; ``spring_*``), isometric bending (a linear vector
constraint, see ``xsim.sim.cloth``; it is exact in one update and smooth everywhere, which is why
it was chosen over the dihedral angle), triangle area, and per-particle contacts with the ground
plane and static sphere/box/capsule/mesh colliders with position-level static and dynamic
friction; ground restitution is applied to velocities after the substep (Macklin et al. 2019).

Parallel convergence: Jacobi with averaging. Each constraint kernel writes its corrections into
its own slots; each particle then moves by ``relaxation`` times the mean of its slots. Why not
graph-coloured Gauss-Seidel: a cloth grid with bending needs about 20 colours (a vertex sits in 6
edges and 12 bending stencils), i.e. 20 launches per iteration, each over few constraints, against
4 here (5 to 7 us of launch overhead each on the CPU, and under a Tape one new array per launch);
a colour pass also leaves most particles untouched but must still carry them into its new output
array. The gather is deterministic (no atomics, a fixed summation order), so results repeat bit
for bit and finite differences of a rollout are clean. Averaging (dividing by the
particle's constraint count) keeps Jacobi stable for any stiffness; it converges more slowly than
Gauss-Seidel, which ``relaxation`` in (1, 2) or more iterations/substeps compensate. A particle
in a single constraint gets the exact XPBD update.

Gradients
---------
A step never overwrites an array a Tape recorded: with gradients on (a recording Tape, or a
state/model that requires grad) every intermediate position, multiplier and correction array is
new, and the last kernels write ``state_out``; without them the solver reuses scratch buffers. A
rollout on a Tape therefore backpropagates to the initial state, the model's arrays (masses via
``particle_inv_mass``, rest lengths, compliances, radii, friction, collider poses and mesh
vertices) and ``Control.particle_target``.

What is not differentiable, and what the gradient means there:

- contact activation: whether a particle touches the ground or a collider is a switch; the
  gradient is that of the branch taken (a contact that is active stays active under an
  infinitesimal change, an inactive one contributes nothing), so it is exact wherever the set of
  contacts does not change, and one-sided at the switch;
- static versus dynamic friction is a switch of the same kind;
- mesh contact detection (which triangle is closest) is not differentiated; the distance to the
  chosen triangle and the triangle's pose are;
- restitution's activation test (approach speed above ``bounce_speed``) is a switch;
- degenerate configurations (coincident particles, a particle exactly on a collider's surface or
  axis) give no correction and a zero gradient instead of NaN.
"""

from __future__ import annotations

import xsim
from xsim import types as T
from xsim.kernels import launch as _launch

from ...sim import validate
from ...sim.model import Control, Model, State
from .kernels import collider_kernels, xpbd_kernels
from .rigid_solver import RigidStepper


class SolverXPBD:
    """XPBD for particles and cloth (see the module docstring) and for rigid bodies, contacts and
    joints (``rigid_solver.py``; one position iteration per substep is Mueller et al. 2020's choice).

    ``substeps``: substeps per ``step``; ``iterations``: Jacobi iterations per substep;
    ``relaxation``: scale of the averaged corrections (1 is plain averaging, up to 2 converges
    faster); ``bounce_speed``: m/s, the approach speed below which ground contacts do not bounce
    (default ``2 |g| h``)."""

    def __init__(self, model: Model, substeps: int = 1, iterations: int = 10, relaxation: float = 1.0,
                 bounce_speed: float | None = None):
        if substeps < 1 or iterations < 1:
            raise ValueError(f"SolverXPBD: substeps and iterations must be >= 1, got {substeps}, {iterations}")
        self.model = model
        self.substeps = int(substeps)
        self.iterations = int(iterations)
        self.relaxation = float(relaxation)
        self.bounce_speed = bounce_speed
        self.kernels = xpbd_kernels(model.dtype)
        self._gravity = model.vec3()(*model.gravity)
        self._scratch: dict = {}
        self._entry_views: dict = {}
        m = model
        self._zero_lambda = {
            "spring": xsim.zeros(m.spring_count, dtype=m.dtype, device=m.device),
            "bending": xsim.zeros(m.bending_count, dtype=m.vec3(), device=m.device),
            "area": xsim.zeros(m.area_count, dtype=m.dtype, device=m.device),
        }
        self.collider_kernels = collider_kernels(model.dtype) if m.collider_count else None
        self._mesh_tri_none = xsim.full(m.particle_count, -1, dtype=int, device=m.device)
        self._has_mesh = m.mesh_indices.shape[0] > 0
        # rigid bodies, contacts and joints: see rigid_solver.py
        self.rigid = RigidStepper(self) if m.rigid is not None else None
        self._body_collide = self.rigid is not None and m.particle_count > 0 and m.rigid.body_count > 0

    # -- buffers ---------------------------------------------------------------------------------------

    def _new(self, key: str, shape: int, dtype, grad: bool, avoid=()):
        """A fresh array when gradients are recorded; otherwise a scratch buffer for ``key``
        that is none of the arrays in ``avoid`` (still in use)."""
        if grad:
            return xsim.empty(shape, dtype=dtype, device=self.model.device, requires_grad=dtype is not int)
        pool = self._scratch.setdefault(key, [])
        for a in pool:
            if not any(a is b for b in avoid):
                return a
        a = xsim.empty(shape, dtype=dtype, device=self.model.device)
        pool.append(a)
        return a

    def _grad_mode(self, state_in: State) -> bool:
        return bool(_launch._recorders) or state_in.requires_grad or self.model.requires_grad

    # -- stepping --------------------------------------------------------------------------------------

    def step(self, state_in: State, state_out: State, control: Control | None, dt: float) -> None:
        """Advance ``state_in`` by ``dt`` seconds into ``state_out`` (which must be a different
        State). ``control.particle_target`` drives pinned particles; ``control.joint_target_q``/
        ``joint_target_qd`` the joints' drives. Bodies and particles advance together, substep by
        substep and iteration by iteration, so particles and bodies push each other."""
        if state_out.particle_q is state_in.particle_q or state_out.particle_qd is state_in.particle_qd:
            raise ValueError("SolverXPBD.step: state_out must not share arrays with state_in")
        m, k = self.model, self.kernels
        validate.time_step("SolverXPBD.step", dt, self.substeps, m.dtype._np)
        n = m.particle_count
        grad = self._grad_mode(state_in)
        rigid = self.rigid
        bodies = rigid.begin(state_in, state_out, control, dt, self.substeps, self.iterations, grad) \
            if rigid is not None else None
        if n == 0 and bodies is None:
            return
        v3 = m.vec3()
        h = dt / self.substeps
        inv_h2 = 1.0 / (h * h)
        gravity = self._gravity
        x, v = state_in.particle_q, state_in.particle_qd
        if n and control is not None and control.particle_target is not None:
            v_kin = self._new("v", n, v3, grad, avoid=(v,))
            xsim.launch(k.kinematic_velocities, n, inputs=[x, control.particle_target, m.particle_inv_mass, v,
                                                           1.0 / dt], outputs=[v_kin])
            v = v_kin
        body_collide = self._body_collide and bodies is not None
        for sub in range(self.substeps):
            last_sub = sub == self.substeps - 1
            if bodies is not None:
                rigid.begin_substep(bodies, sub)
            if n:
                x_pred = self._new("x", n, v3, grad, avoid=(x,))
                xsim.launch(k.integrate_particles, n, inputs=[x, v, m.particle_inv_mass, gravity, h],
                            outputs=[x_pred])
                mesh_tri = self._mesh_tri_none
                if self._has_mesh:
                    # detection only chooses a triangle (no gradient): kept off the tape, but a new
                    # array in grad mode, since this substep's contact kernels record reading it
                    mesh_tri = self._new("mesh_tri", n, int, grad)
                    xsim.launch(self.collider_kernels.find_mesh_contacts, n, inputs=[
                        x, x_pred, m.particle_radius, m.mesh_indices, m.mesh_vertices, m.mesh_collider,
                        m.collider_pos, m.collider_rot], outputs=[mesh_tri], record_tape=False)
                lam = dict(self._zero_lambda)
                xi = x_pred
            for it in range(self.iterations):
                if bodies is not None:
                    rigid.solve(bodies)
                if n:
                    xi = self._particle_iteration(x, xi, lam, inv_h2, mesh_tri, grad, bodies if body_collide else None,
                                                  state_out.particle_q if last_sub and it == self.iterations - 1
                                                  else None)
                if bodies is not None:
                    rigid.apply(bodies, it)
            if bodies is not None:
                rigid.end_substep(bodies)
            if n:
                v_next = state_out.particle_qd if last_sub else self._new("v", n, v3, grad, avoid=(v,))
                bounce = self.bounce_speed if self.bounce_speed is not None else 2.0 * _norm(m.gravity) * h
                xsim.launch(k.update_velocities, n, inputs=[
                    xi, x, v, m.particle_inv_mass, m.particle_radius, gravity, h, m.particle_damping,
                    int(m.ground), m.ground_height, m.ground_restitution, bounce], outputs=[v_next])
                x, v = xi, v_next
        if bodies is not None:
            rigid.end(bodies)

    def _particle_iteration(self, x, xi, lam: dict, inv_h2: float, mesh_tri, grad: bool, bodies, final):
        """One Jacobi iteration of the particles from ``xi`` (``x``: the substep start): constraints,
        ground, static colliders, then the bodies (``bodies``: the rigid step's working state, None
        without coupling). Updates ``lam`` in place; returns the new positions (``final`` if given)."""
        m, k = self.model, self.kernels
        n, v3 = m.particle_count, m.vec3()
        delta = self._new("delta", (n, m.slot_width), v3, grad)
        lam.update(self._project_constraints(xi, lam, inv_h2, delta, grad))
        x_next = final if final is not None and not (m.collider_count or bodies is not None) else self._new(
            "x", n, v3, grad, avoid=(x, xi))
        xsim.launch(k.apply_corrections, n, inputs=[
            xi, x, delta, m.particle_slot_count, m.particle_inv_constraint_count, m.particle_inv_mass,
            m.particle_radius, self.relaxation, int(m.ground), m.ground_height, m.ground_mu], outputs=[x_next])
        if m.collider_count:
            x_coll = final if final is not None and bodies is None else self._new("x", n, v3, grad,
                                                                                   avoid=(x, xi, x_next))
            xsim.launch(self.collider_kernels.collide_static, n, inputs=[
                x_next, x, m.particle_inv_mass, m.particle_radius, m.collider_count, m.collider_type,
                m.collider_pos, m.collider_rot, m.collider_size, m.collider_mu, mesh_tri, m.mesh_indices,
                m.mesh_vertices, m.mesh_collider], outputs=[x_coll])
            x_next = x_coll
        if bodies is not None:  # particles against the moving bodies, both ways (rigid_solver.py)
            x_body = final if final is not None else self._new("x", n, v3, grad, avoid=(x, xi, x_next))
            self.rigid.collide_particles(bodies, x_next, x, x_body)
            x_next = x_body
        return x_next

    def _project_constraints(self, x, lam: dict, inv_h2: float, delta, grad: bool) -> dict:
        """One Jacobi pass of every constraint kind: new multipliers, corrections into ``delta``."""
        m, k = self.model, self.kernels
        v4 = T.vector(4, m.dtype)
        pairs = self._new("pairs", (max(1, m.spring_count), 2), v4, grad)
        quads = self._new("quads", (max(1, m.bending_count + m.area_count), 4), v4, grad)
        xsim.launch(k.gather_entries, m.particle_count, inputs=[x, m.particle_inv_mass, m.particle_slot_count,
                                                                m.particle_entry_row, m.particle_entry_col],
                    outputs=[pairs, quads])
        entries = self._entry_views.get(id(quads)) if not grad else None
        if entries is None or entries["quads"] is not quads:
            entries = {"quads": quads, "bending": quads[:m.bending_count],
                       "area": quads[m.bending_count:m.bending_count + m.area_count]}
            if not grad:  # scratch buffers come back: keep their views
                self._entry_views[id(quads)] = entries
        entries["spring"] = pairs
        out = {}
        for kind, kernel, count, indices, slot, rest, compliance in (
                ("spring", k.solve_distance, m.spring_count, m.spring_indices, m.spring_slot, m.spring_rest_length,
                 m.spring_compliance),
                ("bending", k.solve_bending, m.bending_count, m.bending_indices, m.bending_slot, m.bending_weights,
                 m.bending_compliance),
                ("area", k.solve_area, m.area_count, m.area_indices, m.area_slot, m.area_rest, m.area_compliance)):
            if count == 0:
                out[kind] = lam[kind]
                continue
            lam_out = self._new("lam_" + kind, count, lam[kind].dtype, grad, avoid=(lam[kind],))
            xsim.launch(kernel, count, inputs=[entries[kind], indices, slot, rest, compliance, lam[kind], inv_h2],
                        outputs=[lam_out, delta])
            out[kind] = lam_out
        return out


def _norm(g) -> float:
    return float(sum(c * c for c in g)) ** 0.5
