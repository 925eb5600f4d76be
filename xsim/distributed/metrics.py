"""Per-rollout summary numbers: final centre of mass, largest speed reached, final energy."""

from __future__ import annotations

import numpy as np

METRICS = ("com_x", "com_y", "com_z", "max_speed", "energy")
"""Names of the metrics :class:`RolloutMetrics` gives: centre of mass (m) of the final frame, the
largest speed (m/s) of any particle or body centre over all frames, final energy (J)."""


def _rotate(q: np.ndarray, v: np.ndarray) -> np.ndarray:
    """Rotate vectors ``v`` (n, 3) by unit quaternions ``q`` (n, 4) stored (x, y, z, w)."""
    u, w = q[:, :3], q[:, 3:4]
    t = 2.0 * np.cross(u, v)
    return v + w * t + np.cross(u, t)


class RolloutMetrics:
    """Fed each frame's State (``simulate(on_state=...)``), gives :data:`METRICS` in float64 over the
    dynamic particles and bodies (pinned particles and kinematic bodies, mass 0, are left out).
    Energy: kinetic (linear and rotational) plus gravitational potential relative to the origin."""

    def __init__(self, model):
        self.gravity = np.asarray(model.gravity, np.float64)
        self.particle_mass = (model.particle_mass.numpy().astype(np.float64) if model.particle_count
                              else np.zeros(0))
        if model.body_count:
            self.body_mass = model.body_mass.numpy().astype(np.float64)
            self.body_com = model.body_com.numpy().astype(np.float64).reshape(-1, 3)
            self.body_inertia = model.body_inertia.numpy().astype(np.float64).reshape(-1, 3, 3)
        else:
            self.body_mass = np.zeros(0)
        self.max_speed = 0.0
        self.final: dict[str, float] = {}

    def __call__(self, frame: int, state):
        pm, bm = self.particle_mass, self.body_mass
        x = v = np.zeros((0, 3))
        if len(pm):
            x = state.particle_q.numpy().astype(np.float64).reshape(-1, 3)
            v = state.particle_qd.numpy().astype(np.float64).reshape(-1, 3)
        speeds = [np.linalg.norm(v[pm > 0], axis=1)]
        kinetic = 0.5 * np.sum(pm * np.sum(v * v, axis=1))
        masses, centres = [pm], [x]
        if len(bm):
            q = state.body_q.numpy().astype(np.float64).reshape(-1, 7)
            qd = state.body_qd.numpy().astype(np.float64).reshape(-1, 6)
            com = q[:, :3] + _rotate(q[:, 3:], self.body_com)
            lin, ang = qd[:, :3], qd[:, 3:]
            # rotational energy in the body frame, where the inertia is given: w_b = R^T w
            conj = q[:, 3:] * np.array([-1.0, -1.0, -1.0, 1.0])
            ang_body = _rotate(conj, ang)
            kinetic += 0.5 * np.sum(bm * np.sum(lin * lin, axis=1))
            kinetic += 0.5 * np.einsum("ni,nij,nj->", ang_body[bm > 0], self.body_inertia[bm > 0], ang_body[bm > 0])
            speeds.append(np.linalg.norm(lin[bm > 0], axis=1))
            masses.append(bm)
            centres.append(com)
        m, c = np.concatenate(masses), np.concatenate(centres)
        self.max_speed = max(self.max_speed, float(np.max(np.concatenate(speeds), initial=0.0)))
        total = m.sum()
        centre = (m @ c) / total if total > 0 else np.full(3, np.nan)
        potential = -float(m @ (c @ self.gravity))
        self.final = {"com_x": float(centre[0]), "com_y": float(centre[1]), "com_z": float(centre[2]),
                      "max_speed": self.max_speed, "energy": float(kinetic) + potential}

    def values(self) -> dict[str, float]:
        """The metrics after the last State seen."""
        return dict(self.final)
