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
alpha and damping beta updates its multiplier by ``dl = -(C + alpha/h^2 l + gamma grad C (x - x_start)) /
((1 + gamma) sum_k w_k |grad_k C|^2 + alpha/h^2)`` with ``gamma = alpha beta / h`` (XPBD's damping:
the force ``-beta dC/dt``; ``x_start``: the substep start).

Constraints: distance (stretch, shear; ``spring_*``), isometric bending (a linear vector
constraint, see ``xsim.sim.cloth``; it is exact in one update and smooth everywhere, which is why
it was chosen over the dihedral angle), triangle area, stable Neo-Hookean tetrahedra (soft bodies:
``tetrahedra.py``, with its stability limit), and per-particle contacts with the ground
plane and static sphere/box/capsule/mesh colliders with position-level static and dynamic
friction. Particles also meet each other (free particles meet every particle) and self-colliding cloths meet
themselves, in a pass after the constraints of each iteration (``self_contact.py``; candidates found once per
substep by ``xsim.collision.proximity``).
Restitution is applied to velocities after the substep (Macklin et al. 2019): the ground's
in ``update_velocities``; the colliders' and the body shapes' in a velocity pass (``bounce_impulse``)
that also lets friction take up to mu times the bounce's impulse, so an oblique hit follows Coulomb.

Parallel convergence: Jacobi with averaging and mass splitting (Tonge et al. 2012; the layout and
counts are ``particle_constraints.py``'s). Each constraint kernel sees every particle's inverse
mass times its number of constraints and writes its corrections into its own slots; each particle
then moves by the mean of its slots, i.e. by the full correction of every constraint, so the
iteration's fixed point is the XPBD solution and a compliance means the same whatever else touches
its particles (without splitting, a particle in n constraints made each n times softer).
``relaxation`` scales each multiplier update and its correction together. Why not
graph-coloured Gauss-Seidel: a cloth grid with bending needs about 20 colours (a vertex sits in 6
edges and 12 bending stencils), i.e. 20 launches per iteration, each over few constraints, against
4 here (5 to 7 us of launch overhead each on the CPU, and under a Tape one new array per launch);
a colour pass also leaves most particles untouched but must still carry them into its new output
array. The gather is deterministic (no atomics, a fixed summation order), so results repeat bit
for bit and finite differences of a rollout are clean. Averaging (dividing by the
particle's constraint count) keeps Jacobi stable for any stiffness; it converges more slowly than
Gauss-Seidel, which ``relaxation`` in (1, 2) or more iterations/substeps compensate. A particle
in a single constraint gets the exact XPBD update. With too few iterations a stiff cloth is not
converged within a substep and rests lower than its static equilibrium (its low-frequency modes
converge slowest; more iterations or substeps close the gap: tests/solvers/test_xpbd_compliance.py).

Gradients
---------
A step never overwrites an array a Tape recorded: with gradients on (a recording Tape, or a
state/model that requires grad) every intermediate position and multiplier array is new, and the last
kernels write ``state_out``; without them the solver reuses scratch buffers. The constraint passes'
gathered entries and corrections are scratch either way: on a Tape each pass records its own backward
(``ParticleConstraints.backward``), which reads neither. A rollout on a Tape therefore backpropagates
to the initial state, the model's arrays (masses via ``particle_inv_mass``, rest lengths, compliances,
damping, radii, friction, collider poses and mesh vertices) and ``Control.particle_target``.

What is not differentiable, and what the gradient means there:

- contact activation: whether a particle touches the ground or a collider is a switch; the
  gradient is that of the branch taken (a contact that is active stays active under an
  infinitesimal change, an inactive one contributes nothing), so it is exact wherever the set of
  contacts does not change, and one-sided at the switch;
- static versus dynamic friction is a switch of the same kind;
- mesh contact detection (which triangle is closest) is not differentiated; the distance to the
  chosen triangle and the triangle's pose are;
- restitution's activation test (approach speed above ``bounce_speed``, the particle within 0.1% of
  its radius of the surface at the end of the substep) is a switch;
- degenerate configurations (coincident particles, a particle exactly on a collider's surface or
  axis) give no correction and a zero gradient instead of NaN.

Threads
-------
One solver may be stepped, and its tapes backpropagated, by several threads at once: each thread steps
with its own ``Workspace`` (buffers, constraint passes, contact lists), made at its first step, and gets
the results it would get alone, bit for bit (tests/reliability/test_threads.py). The model is shared
and must not be edited while they run.
"""

from __future__ import annotations

import threading

import xsim
from xsim import types as T
from xsim.errors import NonFiniteError
from xsim.kernels import recording
from xsim.kernels.finite import check_arrays
from xsim.sim.generic import specialized

from ...collision.contacts import Contacts
from ...collision.narrow_phase import ShapeArrays
from ...collision.proximity import Proximity
from ...sim import validate
from ...sim.model import Control, Model, State
from . import kernels as particle_kernels
from . import particle_contacts as pc
from . import self_contact
from .buffers import BufferPool
from .bundles import (
    BodyArrays,
    BodyMotion,
    BundleCache,
    MeshArrays,
    ParticleArrays,
    ParticleSubstep,
    model_arrays,
)
from .particle_constraints import ParticleConstraints
from .rigid_solver import RigidStepper


class SolverXPBD:
    """XPBD for particles and cloth (see the module docstring) and for rigid bodies, contacts and
    joints (``rigid_solver.py``; one position iteration per substep is Mueller et al. 2020's choice).

    ``substeps``: substeps per ``step``; ``iterations``: Jacobi iterations per substep;
    ``relaxation``: scale of each constraint update (1 is plain mass-split Jacobi, up to 2 converges
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
        self.kernels = specialized(particle_kernels.__name__, model.dtype)
        self.contact_kernels = specialized(pc.__name__, model.dtype)
        self._gravity = model.vec3()(*model.gravity)
        self.steps_taken = 0  # step() calls, named by check mode's errors
        # called as on_substep(done, substeps) after each substep of a step: how a long step reports progress
        # (``xsim run`` with millions of substeps per frame); None: nothing is called
        self.on_substep = None
        m = model
        self._mesh_tri_none = xsim.full(m.particle_count, -1, dtype=int, device=m.device)
        self._has_mesh = m.mesh_indices.shape[0] > 0
        # particles meet every shape, static and on bodies, in particle_contacts.py
        self._shapes = m.particle_count > 0 and m.shape_count > 0
        self._static_shapes = bool((m.shape_body.numpy() < 0).any())
        # the contact kernels' static pass reads no body: the model's body arrays (maybe empty) stand in
        self._no_motion = BodyMotion(pose=m.body_q, pose_start=m.body_q, start=m.body_q, qd=m.body_qd,
                                     qd_pre=m.body_qd, split=m.body_inv_mass)
        self._no_delta = xsim.empty(0, dtype=T.vector(8, m.dtype), device=m.device)
        self._body_collide = m.has_rigid and m.particle_count > 0
        self._local = threading.local()  # each thread's Workspace
        self._workspace()  # the constructing thread's, now: its arrays and uploads are made here
        # particles meeting particles (self_contact.py): its kernels only where the model has such contacts, so
        # a run without them neither compiles nor builds ahead their module
        self.self_kernels = specialized(self_contact.__name__, model.dtype) \
            if self._workspace().proximity is not None else None

    def _workspace(self) -> Workspace:
        """This thread's Workspace, made at its first step."""
        ws = getattr(self._local, "workspace", None)
        if ws is None:
            ws = self._local.workspace = Workspace(self)
            ws.rigid = RigidStepper(self) if self.model.has_rigid else None  # takes this thread's pools
        return ws

    @property
    def buffers(self) -> BufferPool:
        """The arrays this thread's steps write, particles' and bodies' (``buffers.py``)."""
        return self._workspace().buffers

    @property
    def constraints(self) -> ParticleConstraints:
        """This thread's particle constraint passes (their gathered entries and backward buffers)."""
        return self._workspace().constraints

    @property
    def bundles(self) -> BundleCache:
        """This thread's struct arguments, kept from step to step without gradients (``bundles.py``)."""
        return self._workspace().bundles

    @property
    def rigid(self) -> RigidStepper | None:
        """This thread's stepper of rigid bodies, contacts and joints (``rigid_solver.py``), or None."""
        return self._workspace().rigid

    def _allocator(self, grad: bool):
        """The pool for ``grad`` as ``new(key, shape, dtype, avoid=())``, the form ``ParticleConstraints`` takes."""
        return lambda key, shape, dtype, avoid=(): self.buffers.get(key, shape, dtype, grad, avoid=avoid)

    def _scratch(self, key: str, shape, dtype):
        """A per-iteration scratch buffer, with gradients too: the constraint corrections ``delta`` (n, width)
        and the gathered ``entries`` are not on the tape at all (``ParticleConstraints.project`` records its
        own backward pass, which reads neither). A fresh array per iteration (0.9 + 2 MB for a 64x64 cloth)
        made a taped rollout stream hundreds of MB through memory, where the plain one stays in cache."""
        return self.buffers.get(key, shape, dtype, False)

    def _grad_mode(self, state_in: State) -> bool:
        return recording.is_recording() or state_in.requires_grad or self.model.requires_grad

    # -- stepping --------------------------------------------------------------------------------------

    def step(self, state_in: State, state_out: State, control: Control | None, contacts=None,
             dt: float | None = None) -> None:
        """Advance ``state_in`` by ``dt`` seconds into ``state_out`` (which must be a different
        State); Newton's signature, ``step(state_in, state_out, control, contacts, dt)``. ``contacts``: the
        rigid contacts of ``state_in`` from ``xsim.collision.CollisionPipeline(model).collide`` (found for a
        step of at least ``dt``); None, or the older call ``step(state_in, state_out, control, dt)``, has
        the solver's own pipeline find them. ``control.particle_target`` drives pinned particles;
        ``control.joint_target_q``/``joint_target_qd`` the joints' drives. Bodies and particles advance
        together, substep by substep and iteration by iteration, so particles and bodies push each other.
        In debug and check mode (``xsim.config``) a NaN/inf in ``state_out`` after the step raises
        ``NonFiniteError`` naming the step (counted from 1 per solver) and the first such array (check
        mode: the first kernel too)."""
        if dt is None and not isinstance(contacts, Contacts):
            contacts, dt = None, contacts  # step(state_in, state_out, control, dt)
        if dt is None:
            raise TypeError("SolverXPBD.step: dt (s) is missing: step(state_in, state_out, control, contacts, dt)")
        if contacts is not None and not isinstance(contacts, Contacts):
            raise TypeError(f"SolverXPBD.step: contacts must be xsim.collision.Contacts or None, got "
                            f"{type(contacts).__name__}")
        self.steps_taken += 1
        if xsim.config.mode == "release":
            self._step(state_in, state_out, control, dt, contacts)
            return
        where = f"SolverXPBD step {self.steps_taken}"
        try:
            self._step(state_in, state_out, control, dt, contacts)
        except NonFiniteError as e:
            raise NonFiniteError(f"{where}: {e}") from None
        check_arrays({f"state_out.{name}": a for name, a in vars(state_out).items() if isinstance(a, xsim.array)},
                     where)

    def _step(self, state_in: State, state_out: State, control: Control | None, dt: float,
              contacts: Contacts | None) -> None:
        if state_out.particle_q is state_in.particle_q or state_out.particle_qd is state_in.particle_qd:
            raise ValueError("SolverXPBD.step: state_out must not share arrays with state_in")
        m, k = self.model, self.kernels
        validate.time_step("SolverXPBD.step", dt, self.substeps, m.dtype._np)
        n = m.particle_count
        grad = self._grad_mode(state_in)
        rigid = self.rigid
        bodies = rigid.begin(state_in, state_out, control, dt, self.substeps, self.iterations, grad, contacts) \
            if rigid is not None else None
        if n == 0 and bodies is None:
            return
        v3 = m.vec3()
        h = dt / self.substeps
        gravity = self._gravity
        x, v = state_in.particle_q, state_in.particle_qd
        if n and control is not None and control.particle_target is not None:
            v_kin = self.buffers.get("v", n, v3, grad, avoid=(v,))
            xsim.launch(k.kinematic_velocities, n, inputs=[x, control.particle_target, m.particle_inv_mass, v,
                                                           1.0 / dt], outputs=[v_kin])
            v = v_kin
        body_collide = self._body_collide and bodies is not None
        step_rows = self._proximity_step_rows(x, v, dt, grad) if n else None
        for sub in range(self.substeps):
            last_sub = sub == self.substeps - 1
            if bodies is not None:
                rigid.begin_substep(bodies, sub)
            if n:
                x_pred = self.buffers.get("x", n, v3, grad, avoid=(x,))
                xsim.launch(k.integrate_particles, n, inputs=[x, v, m.particle_inv_mass, gravity, h],
                            outputs=[x_pred])
                substep = self._substep(x, x_pred, v, h, grad) if self._shapes else None
                rows = step_rows if step_rows is not None else self._proximity_rows(x, x_pred, grad)
                lam = dict(self.constraints.zero_lambda)
                start = self.constraints.substep_start(self._allocator(grad), x)
                xi = x_pred
            for it in range(self.iterations):
                if bodies is not None:
                    rigid.solve(bodies)
                if n:
                    xi = self._particle_iteration(x, start, xi, lam, 1.0 / h, substep, grad,
                                                  bodies if body_collide else None, rows)
                if bodies is not None:
                    rigid.apply(bodies, it)
            if n:
                x, v = self._particle_velocities(xi, x, v, h, substep, grad,
                                                 bodies if body_collide else None,
                                                 state_out if last_sub else None, rows)
            if bodies is not None:
                rigid.end_substep(bodies)
            if self.on_substep is not None:
                self.on_substep(sub + 1, self.substeps)
        if bodies is not None:
            rigid.end(bodies)

    def _substep(self, x, x_pred, v, h: float, grad: bool):
        """What the contact kernels read of a substep from ``x``, ``v`` (predicted positions ``x_pred``,
        ``particle_contacts.py``): its start, its mesh contacts and its restitution threshold. Also brings
        the model's arrays as the contact kernels take them (``bundles.py``) up to date."""
        m, n = self.model, self.model.particle_count
        ws = self._workspace()
        ws.particle_arrays = model_arrays(ParticleArrays, m, "particle_", ws.particle_arrays)
        ws.shape_arrays = model_arrays(ShapeArrays, m, "shape_", ws.shape_arrays)
        ws.mesh_arrays = model_arrays(MeshArrays, m, "mesh_", ws.mesh_arrays)
        ws.body_arrays = model_arrays(BodyArrays, m, "body_", ws.body_arrays)
        mesh_tri = self._mesh_tri_none
        if self._has_mesh:
            # detection only chooses a triangle (no gradient): kept off the tape, but a new
            # array in grad mode, since this substep's contact kernels record reading it
            mesh_tri = self.buffers.get("mesh_tri", n, int, grad)
            xsim.launch(self.contact_kernels.find_mesh_contacts, n, inputs=[
                x, x_pred, ws.particle_arrays, ws.shape_arrays, ws.mesh_arrays], outputs=[mesh_tri],
                record_tape=False)
        return self.bundles.get("substep", ParticleSubstep, not grad, x=x, v=v, mesh_tri=mesh_tri, h=h,
                                bounce_speed=self._bounce_speed(h))

    def _proximity_rows(self, x, x_pred, grad: bool):
        """This substep's particle-particle and cloth self-contact candidates (``xsim.collision.proximity``),
        or None where the model has neither."""
        proximity = self._workspace().proximity
        if proximity is None:
            return None
        return proximity.find(x, x_pred, self._allocator(grad))

    def _self_contacts(self, xi, x, rows, grad: bool, avoid):
        """One pass of the particles' contacts with each other (``self_contact.py``) from ``xi`` (``x``: the
        substep start); returns the new positions. Without gradients each vertex-triangle and edge-edge contact
        is computed once into scratch slots and gathered; on a Tape one kernel computes each contact in each of its
        particles' threads (no (n, 32, 4) slot array per iteration kept for the backward pass): the same
        positions, bit for bit."""
        m, sk = self.model, self.self_kernels
        n = m.particle_count
        x_out = self.buffers.get("x", n, m.vec3(), grad, avoid=avoid)
        if not grad and rows.corners.shape[0]:
            width, edge_width = rows.vertex_tris.shape[1], rows.edge_edges.shape[1]
            slots = self._scratch("self:slots", (n, width, 4), m.vec3())
            hits = self._scratch("self:hits", (n, width), int)
            edge_slots = self._scratch("self:edge_slots", (rows.edges.shape[0], edge_width, 4), m.vec3())
            edge_hits = self._scratch("self:edge_hits", (rows.edges.shape[0], edge_width), int)
            xsim.launch(sk.measure_vertex_triangles, n, inputs=[
                xi, x, m.particle_inv_mass, m.particle_thickness, m.particle_mu, rows.vertex_tris,
                rows.vertex_tri_count, rows.tris], outputs=[slots, hits])
            xsim.launch(sk.measure_edge_edges, rows.edges.shape[0], inputs=[
                xi, x, m.particle_inv_mass, m.particle_thickness, m.particle_mu, rows.edge_edges,
                rows.edge_edge_count, rows.edges], outputs=[edge_slots, edge_hits])
            xsim.launch(sk.gather_particle_contacts, n, inputs=[
                xi, x, m.particle_inv_mass, m.particle_radius, m.particle_mu, rows.pairs, rows.pair_count, slots,
                hits, rows.vertex_tri_count, rows.corners, rows.corner_first, edge_slots, edge_hits,
                rows.edge_corners, rows.edge_corner_first], outputs=[x_out])
            return x_out
        xsim.launch(sk.collide_particles, n, inputs=[
            xi, x, m.particle_inv_mass, m.particle_radius, m.particle_thickness, m.particle_mu, rows.pairs,
            rows.pair_count, rows.vertex_tris, rows.vertex_tri_count, rows.corners, rows.corner_first, rows.tris,
            rows.edge_edges, rows.edge_corners, rows.edge_corner_first, rows.edges], outputs=[x_out])
        return x_out

    def _proximity_step_rows(self, x, v, dt: float, grad: bool):
        """The candidates of a whole step where the particles move slowly (``Proximity.find_for_step``), else
        None: then each substep finds its own."""
        proximity = self._workspace().proximity
        if proximity is None:
            return None
        return proximity.find_for_step(x, v, dt, self._allocator(grad))

    def _bounce_speed(self, h: float) -> float:
        return self.bounce_speed if self.bounce_speed is not None else 2.0 * _norm(self.model.gravity) * h

    def _passes(self, bodies) -> tuple[int, ...]:
        """The contact kernels' launches (``particle_contacts.py``): the static shapes, then (with bodies)
        the bodies' shapes, whose mass split counts the particles after the static contacts."""
        if bodies is None:
            return (pc.STATIC_SHAPES,)
        return (pc.STATIC_SHAPES, pc.BODY_SHAPES) if self._static_shapes else (pc.BODY_SHAPES,)

    def _particle_iteration(self, x, start, xi, lam: dict, inv_h: float, substep, grad: bool, bodies, rows):
        """One Jacobi iteration of the particles from ``xi`` (``x``: the substep start, ``start`` its
        entries, ``ParticleConstraints.substep_start``): constraints, then the particles' contacts with
        each other (``self_contact.py``; ``rows``: this substep's candidates, None: none), then
        the contacts with every shape (``particle_contacts.py``, ``substep``: ``_substep``'s; ``bodies``: the
        rigid step's working state, None without bodies). Updates ``lam`` in place; returns the new positions."""
        m = self.model
        n, v3 = m.particle_count, m.vec3()
        ws = self._workspace()
        c = ws.constraints
        delta = self._scratch("delta", (n, c.width), v3)
        entries = self._scratch("entries", c.entry_count, T.vector(4, m.dtype))
        x_next = self.buffers.get("x", n, v3, grad, avoid=(x, xi))
        lam.update(c.project(self._allocator(grad), xi, start, lam, inv_h, self.relaxation, entries, delta, x_next))
        if rows is not None:
            x_next = self._self_contacts(x_next, x, rows, grad, avoid=(x, xi, x_next))
        if self._shapes:
            for passes in self._passes(bodies):
                motion, delta = self._no_motion, self._no_delta
                if passes == pc.BODY_SHAPES:
                    motion = self.bundles.get("motion", BodyMotion, not grad, pose=bodies.xi, pose_start=bodies.xc,
                                              start=bodies.x0, split=self.rigid.particle_split(bodies, x_next, 0.0))
                    delta = bodies.pdelta
                x_shapes = self.buffers.get("x", n, v3, grad, avoid=(x, xi, x_next))
                xsim.launch(self.contact_kernels.collide_particle_shapes, n, inputs=[
                    x_next, ws.particle_arrays, ws.shape_arrays, ws.mesh_arrays, substep, motion,
                    ws.body_arrays, passes], outputs=[x_shapes, delta])
                x_next = x_shapes
        return x_next

    def _particle_velocities(self, x, x_start, v_start, h: float, substep, grad: bool, bodies, final, rows):
        """End-of-substep particle positions and velocities from the solved positions ``x``
        (``x_start``, ``v_start``: at the substep start): the velocity update, the particle pairs' velocity
        pass (``self_contact.py``, ``rows``: this substep's candidates), then the velocity pass of
        the shapes (restitution and friction, ``particle_contacts.py``, ``substep``: ``_substep``'s;
        ``bodies``: None without bodies). Bounces move the positions too (``reflect``). Returns (positions,
        velocities), into the State ``final`` if given."""
        m, k = self.model, self.kernels
        n, v3 = m.particle_count, m.vec3()
        ws = self._workspace()
        shapes, last = self._shapes, final is not None
        bounce_pairs = rows is not None and rows.pairs.shape[1] > 0  # the rows of a model without pairs are empty
        v = final.particle_qd if last and not shapes and not bounce_pairs else \
            self.buffers.get("v", n, v3, grad, avoid=(v_start,))
        xo = final.particle_q if last and not shapes else self.buffers.get("x", n, v3, grad, avoid=(x, x_start))
        xsim.launch(k.update_velocities, n, inputs=[x, x_start, m.particle_inv_mass, self._gravity, h,
                                                    m.particle_damping], outputs=[v, xo])
        if bounce_pairs:
            v_pairs = final.particle_qd if last and not shapes else \
                self.buffers.get("v", n, v3, grad, avoid=(v_start, v))
            xsim.launch(self.self_kernels.bounce_particle_pairs, n, inputs=[
                xo, v, v_start, self._gravity, h, m.particle_inv_mass, m.particle_radius, m.particle_restitution,
                m.particle_mu, self._bounce_speed(h), rows.pairs, rows.pair_count], outputs=[v_pairs])
            v = v_pairs
        if shapes:
            passes = self._passes(bodies)
            for j, p in enumerate(passes):
                motion, delta = self._no_motion, self._no_delta
                if p == pc.BODY_SHAPES:
                    self.rigid.begin_particle_bounce(bodies)
                    motion = self.bundles.get("bounce_motion", BodyMotion, not grad, pose=bodies.xi,
                                              start=bodies.x0, qd=bodies.qd_next, qd_pre=bodies.qd_pre,
                                              split=self.rigid.particle_split(bodies, xo, 0.001))
                    delta = bodies.pdv
                final_pass = last and j == len(passes) - 1
                v_out = final.particle_qd if final_pass else self.buffers.get("v", n, v3, grad, avoid=(v_start, v))
                x_out = final.particle_q if final_pass else self.buffers.get("x", n, v3, grad, avoid=(x, x_start, xo))
                xsim.launch(self.contact_kernels.bounce_particle_shapes, n, inputs=[
                    xo, v, ws.particle_arrays, ws.shape_arrays, ws.mesh_arrays, substep, motion,
                    ws.body_arrays, self._gravity, p], outputs=[v_out, x_out, delta])
                v, xo = v_out, x_out
        return xo, v


class Workspace:
    """What one thread's steps of a solver write between launches: its buffer pool, its particle constraint
    passes (gathered entries, backward buffers), its struct arguments, the model's arrays as the kernels take
    them and its rigid stepper (contact lists, multipliers, uploads). Each thread has its own
    (``SolverXPBD._workspace``), so threads stepping and backpropagating through one shared solver get
    their sequential results; one thread's steps reuse its buffers as a single thread's do."""

    def __init__(self, solver: SolverXPBD):
        self.buffers = BufferPool(solver.model.device)
        self.constraints = ParticleConstraints(solver.model, solver.kernels)
        self.bundles = BundleCache()
        self.particle_arrays = self.shape_arrays = self.mesh_arrays = self.body_arrays = None
        proximity = Proximity(solver.model) if solver.model.particle_count > 1 else None
        self.proximity = proximity if proximity is not None and proximity.on else None  # self_contact.py's rows
        self.rigid: RigidStepper | None = None  # set by SolverXPBD._workspace, once the pools above exist


def _norm(g) -> float:
    return float(sum(c * c for c in g)) ** 0.5
