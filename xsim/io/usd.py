"""USD export (usd-core's ``pxr``): cloth as time-sampled meshes, colliders as static prims.

Layout of a written stage (z up, metres, one time code per frame, frame 0 = initial state)::

    /World                      Xform, the default prim
    /World/Cloth/<name>         Mesh: topology once, points and extent time-sampled per frame
    /World/Colliders/<name>     Sphere / Cube / Capsule / Mesh, static, placed with xform ops
    /World/Bodies/<name>        Xform: translate and orient ops time-sampled per frame (body frame)
    /World/Bodies/<name>/<shape>  Sphere / Cube / Capsule / Mesh, placed in the body frame

The stage is built in memory and exported to a temporary file beside the target, which is then
renamed over it: an interrupted run never leaves a truncated file at the target path.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
from pxr import Gf, Usd, UsdGeom, Vt

from .files import write_atomically

GROUND_SIZE = 20.0
"""Side of the square drawn for the infinite ground plane, metres."""

DEFAULT_TIME = Usd.TimeCode.Default()
"""USD's time for values that hold at every time (not time-sampled)."""


def gf_quat(rotation: Sequence[float], double: bool = False) -> Gf.Quatf | Gf.Quatd:
    """USD's quaternion (real part first) for ``rotation`` given (x, y, z, w), the order xsim and Warp use."""
    x, y, z, w = map(float, rotation)
    return Gf.Quatd(w, x, y, z) if double else Gf.Quatf(w, x, y, z)


def add_pose_ops(xformable: UsdGeom.Xformable, rotation: bool = True, scale: bool = False,
                 precision: UsdGeom.XformOp.Precision = UsdGeom.XformOp.PrecisionFloat) -> None:
    """Make ``xformable``'s op order translate (double), then orient (``precision``) and scale
    (float) where asked: the ops :func:`set_pose` writes."""
    xformable.ClearXformOpOrder()
    xformable.AddTranslateOp()
    if rotation:
        xformable.AddOrientOp(precision)
    if scale:
        xformable.AddScaleOp()


def set_pose(xformable: UsdGeom.Xformable, position: Sequence[float] | None = None,
             rotation: Sequence[float] | None = None, scale: Sequence[float] | None = None,
             time: Usd.TimeCode = DEFAULT_TIME) -> None:
    """Write ``position`` (3), ``rotation`` (x, y, z, w) and ``scale`` (3) into the ops of
    :func:`add_pose_ops` at ``time``; a component given as None is left as it is."""
    for op in xformable.GetOrderedXformOps():
        kind = op.GetOpType()
        if kind == UsdGeom.XformOp.TypeTranslate and position is not None:
            op.Set(Gf.Vec3d(*map(float, position)), time)
        elif kind == UsdGeom.XformOp.TypeOrient and rotation is not None:
            op.Set(gf_quat(rotation, op.GetPrecision() == UsdGeom.XformOp.PrecisionDouble), time)
        elif kind == UsdGeom.XformOp.TypeScale and scale is not None:
            op.Set(Gf.Vec3f(*map(float, scale)), time)


def set_triangles(mesh: UsdGeom.Mesh, triangles: np.ndarray, time: Usd.TimeCode = DEFAULT_TIME) -> None:
    """The topology of ``mesh`` at ``time``: ``triangles`` (m, 3) indices into its points."""
    tris = np.ascontiguousarray(triangles, dtype=np.int32).reshape(-1, 3)
    mesh.GetFaceVertexCountsAttr().Set(Vt.IntArray.FromNumpy(np.full(len(tris), 3, dtype=np.int32)), time)
    mesh.GetFaceVertexIndicesAttr().Set(Vt.IntArray.FromNumpy(tris.reshape(-1)), time)


def set_extent(boundable: UsdGeom.Boundable, time: Usd.TimeCode = DEFAULT_TIME) -> None:
    """Author ``boundable``'s extent at ``time`` as USD computes it from the prim's own attributes
    (points, radius, size, widths, an instancer's prototypes)."""
    boundable.GetExtentAttr().Set(UsdGeom.Boundable.ComputeExtentFromPlugins(boundable, time), time)


class UsdWriter:
    """Collects prims and time samples for one stage; :meth:`save` writes it atomically.

    ``fps``: frames per second (both ``timeCodesPerSecond`` and ``framesPerSecond``); time code
    ``k`` is frame ``k``."""

    def __init__(self, fps: float, root: str = "World"):
        self.stage = Usd.Stage.CreateInMemory()
        self.fps = float(fps)
        self.last_frame = 0
        UsdGeom.SetStageUpAxis(self.stage, UsdGeom.Tokens.z)
        UsdGeom.SetStageMetersPerUnit(self.stage, 1.0)
        self.stage.SetTimeCodesPerSecond(self.fps)
        self.stage.SetFramesPerSecond(self.fps)
        world = UsdGeom.Xform.Define(self.stage, f"/{root}")
        self.stage.SetDefaultPrim(world.GetPrim())
        self.root = f"/{root}"
        self._meshes: dict[str, object] = {}
        self._bodies: dict[str, object] = {}

    def _path(self, group: str, name: str) -> str:
        parent = f"{self.root}/{group}"
        if not self.stage.GetPrimAtPath(parent):
            UsdGeom.Scope.Define(self.stage, parent)
        return f"{parent}/{name}"

    def add_mesh(self, name: str, points: np.ndarray, triangles: np.ndarray, group: str = "Cloth",
                 animated: bool = True, color: Sequence[float] = (0.8, 0.35, 0.25)):
        """A triangle mesh: ``points`` (n, 3) metres, ``triangles`` (m, 3) indices into them.
        Animated meshes get their points per frame from :meth:`set_points` (``points`` is frame 0)."""
        mesh = UsdGeom.Mesh.Define(self.stage, self._path(group, name))
        set_triangles(mesh, triangles)
        mesh.CreateSubdivisionSchemeAttr(UsdGeom.Tokens.none)
        mesh.CreateDoubleSidedAttr(True)
        mesh.CreateDisplayColorAttr([Gf.Vec3f(*color)])
        self._meshes[name] = mesh
        self.set_points(name, 0, points, animated=animated)
        return mesh

    def add_points(self, name: str, points: np.ndarray, radius: float, group: str = "Particles",
                   color: Sequence[float] = (0.85, 0.6, 0.3)):
        """Particles as a Points prim: positions (n, 3) metres (frame 0; later frames from
        :meth:`set_points`), each drawn with the width of its contact diameter ``2 radius``."""
        prim = UsdGeom.Points.Define(self.stage, self._path(group, name))
        prim.CreateWidthsAttr(Vt.FloatArray([2.0 * float(radius)] * len(points)))
        prim.SetWidthsInterpolation(UsdGeom.Tokens.vertex)
        prim.CreateDisplayColorAttr([Gf.Vec3f(*color)])
        self._meshes[name] = prim
        self.set_points(name, 0, points)
        return prim

    def set_points(self, name: str, frame: int, points: np.ndarray, animated: bool = True):
        """Positions (n, 3) of mesh or points ``name`` at ``frame`` (a time sample when ``animated``)."""
        mesh = self._meshes[name]
        pts = np.ascontiguousarray(points, dtype=np.float32).reshape(-1, 3)
        time = Usd.TimeCode(frame) if animated else Usd.TimeCode.Default()
        mesh.GetPointsAttr().Set(Vt.Vec3fArray.FromNumpy(pts), time)
        set_extent(mesh, time)
        if animated:
            self.last_frame = max(self.last_frame, frame)

    def _geometry(self, path: str, spec: dict, color: Sequence[float]):
        """A Sphere, Cube (size 2, scaled by the half extents), Capsule (axis z) or Mesh at ``path``,
        sized by ``spec`` (``type`` and its keys, as in a scene file), with no placement yet."""
        kind = spec["type"]
        if kind in ("mesh", "convex_hull"):  # a hull's spec holds its hull's triangles
            prim = UsdGeom.Mesh.Define(self.stage, path)
            set_triangles(prim, spec["indices"])
            prim.CreateSubdivisionSchemeAttr(UsdGeom.Tokens.none)
            prim.CreateDoubleSidedAttr(True)
            prim.CreatePointsAttr(Vt.Vec3fArray.FromNumpy(
                np.ascontiguousarray(spec["vertices"], dtype=np.float32).reshape(-1, 3)))
        elif kind == "sphere":
            prim = UsdGeom.Sphere.Define(self.stage, path)
            r = float(spec["radius"])
            prim.CreateRadiusAttr(r)
        elif kind == "box":
            # A Cube of size 2 scaled by the half extents is exactly the box.
            prim = UsdGeom.Cube.Define(self.stage, path)
            prim.CreateSizeAttr(2.0)
        elif kind == "capsule":
            # xsim capsules lie along their local z axis; USD's height is the cylinder part.
            prim = UsdGeom.Capsule.Define(self.stage, path)
            r, hh = float(spec["radius"]), float(spec["half_height"])
            prim.CreateRadiusAttr(r)
            prim.CreateHeightAttr(2.0 * hh)
            prim.CreateAxisAttr(UsdGeom.Tokens.z)
        elif kind in ("cylinder", "cone"):
            # along local z like USD's with axis z; USD's cone points its apex to +z, as xsim's (Newton's)
            prim = (UsdGeom.Cylinder if kind == "cylinder" else UsdGeom.Cone).Define(self.stage, path)
            r, hh = float(spec["radius"]), float(spec["half_height"])
            prim.CreateRadiusAttr(r)
            prim.CreateHeightAttr(2.0 * hh)
            prim.CreateAxisAttr(UsdGeom.Tokens.z)
        elif kind == "ellipsoid":
            # a unit sphere scaled by the semi-axes (``_place``) is exactly the ellipsoid
            prim = UsdGeom.Sphere.Define(self.stage, path)
            prim.CreateRadiusAttr(1.0)
        else:
            raise ValueError(f"unknown shape type {kind!r}: expected sphere, box, capsule, cylinder, cone, "
                             "ellipsoid, convex_hull or mesh")
        prim.CreateDisplayColorAttr([Gf.Vec3f(*color)])
        set_extent(prim)
        return prim

    @staticmethod
    def _place(prim, spec: dict, position, rotation):
        kind = spec["type"]
        scale = (spec["half_extents"] if kind == "box" else
                 (spec["rx"], spec["ry"], spec["rz"]) if kind == "ellipsoid" else None)
        xf = UsdGeom.Xformable(prim)
        add_pose_ops(xf, rotation=rotation is not None, scale=scale is not None)
        set_pose(xf, position, rotation, scale)

    def add_collider(self, spec: dict):
        """A static collider described as in a scene file: ``type`` ground, sphere, box, capsule
        or mesh, with that type's keys (``center``, ``radius``, ``half_extents``, ``rotation``
        (x, y, z, w), ``half_height``, ``vertices``/``indices``, ``position``...)."""
        kind, name = spec["type"], spec.get("name") or spec["type"]
        if kind == "ground":
            h = GROUND_SIZE / 2.0
            z = float(spec.get("height", 0.0))
            square = np.array([[-h, -h, z], [h, -h, z], [h, h, z], [-h, h, z]])
            self.add_mesh(name, square, [[0, 1, 2], [0, 2, 3]], group="Colliders", animated=False,
                          color=(0.7, 0.7, 0.7))
            return
        prim = self._geometry(self._path("Colliders", name), spec, (0.55, 0.6, 0.65))
        if kind == "mesh":
            self._place(prim, spec, spec.get("position", (0, 0, 0)), spec.get("rotation"))
        else:
            self._place(prim, spec, spec["center"], spec.get("rotation") if kind != "sphere" else None)

    def add_body(self, name: str, shapes: Sequence[dict], color: Sequence[float] = (0.3, 0.5, 0.8)):
        """A rigid body: an Xform whose pose :meth:`set_body_pose` samples per frame, holding one
        geometry prim per shape (scene-file shape descriptions: ``type``, ``name``, sizes,
        ``position``/``rotation`` in the body frame)."""
        path = self._path("Bodies", name)
        body = UsdGeom.Xform.Define(self.stage, path)
        add_pose_ops(body, precision=UsdGeom.XformOp.PrecisionDouble)
        self._bodies[name] = body
        for i, shape in enumerate(shapes):
            prim = self._geometry(f"{path}/{shape.get('name') or shape['type'] + str(i)}", shape, color)
            self._place(prim, shape, shape.get("position", (0, 0, 0)), shape.get("rotation"))
        return body

    def set_body_pose(self, name: str, frame: int, pose: Sequence[float]):
        """Pose of body ``name`` at ``frame``: 7 numbers, position (m) then quaternion (x, y, z, w)."""
        set_pose(self._bodies[name], pose[:3], pose[3:7], time=Usd.TimeCode(frame))
        self.last_frame = max(self.last_frame, frame)

    def save(self, path: str | Path) -> Path:
        """Write the stage to ``path`` (.usda text, .usdc/.usd binary): to a temporary name first,
        renamed over ``path`` once complete. Creates the parent folder."""
        self.stage.SetStartTimeCode(0)
        self.stage.SetEndTimeCode(self.last_frame)

        def export(tmp: Path):
            if not self.stage.GetRootLayer().Export(str(tmp)):
                raise OSError("USD's exporter failed")
        return write_atomically(path, export)


def write_usd(path: str | Path, frames: np.ndarray, parts=None, colliders: Sequence[dict] | None = None,
              fps: float = 60.0, model=None, bodies=(), body_q: np.ndarray | None = None) -> Path:
    """Write a rollout to ``path``. ``frames``: particle positions (F, n, 3) metres, frame 0
    first; ``parts``: the cloths (``ClothPart``: name, first particle, count, local triangles);
    ``colliders``: static collider descriptions (see :meth:`UsdWriter.add_collider`). Given a
    ``model`` instead, its triangles become one mesh "cloth", each soft body's surface a mesh "softK", and its
    colliders are written.
    ``bodies``: rigid bodies (``BodyPart``: name, body index, shapes) posed per frame by ``body_q``
    (F, bodies, 7): position, then quaternion (x, y, z, w)."""
    frames = np.asarray(frames)
    if parts is None:
        from .scene import ClothPart

        parts = [ClothPart("cloth", 0, model.particle_count, np.asarray(model.tri_indices).reshape(-1, 3))]
        parts += [ClothPart(f"soft{k}", body["first"], body["count"], np.asarray(body["triangles"]))
                  for k, body in enumerate(getattr(model, "soft_bodies", []))]
    if colliders is None:
        colliders = colliders_of(model) if model is not None else []
    writer = UsdWriter(fps)
    for c in colliders:
        writer.add_collider(c)
    for part in parts:
        sl = slice(part.first, part.first + part.count)
        if len(part.triangles):
            writer.add_mesh(part.name, frames[0, sl], part.triangles)
        else:  # free particles
            writer.add_points(part.name, frames[0, sl], part.radius)
        for k in range(1, len(frames)):
            writer.set_points(part.name, k, frames[k, sl])
    for body in bodies:
        writer.add_body(body.name, body.shapes)
        for k in range(len(body_q)):
            writer.set_body_pose(body.name, k, body_q[k, body.index])
    writer.last_frame = len(frames) - 1
    return writer.save(path)


def colliders_of(model) -> list[dict]:
    """A model's ground and colliders as the descriptions :meth:`UsdWriter.add_collider` takes."""
    out = [{"type": "ground", "name": "ground", "height": model.ground_height}] if model.ground else []
    for i, c in enumerate(model.colliders):
        out.append({"type": c.type, "name": f"{c.type}{i}", "center": c.pos, "position": c.pos,
                    "rotation": c.rot, "radius": c.radius, "half_extents": c.half_extents,
                    "half_height": c.half_height, "vertices": c.vertices, "indices": c.indices})
    return out


def check_usd(path: str | Path) -> list[str]:
    """The problems USD's own validators (``UsdValidation``, what ``usdchecker`` runs; it replaced
    ``UsdUtils.ComplianceChecker``) report for the file at ``path``: an empty list when none."""
    from pxr import UsdValidation

    stage = Usd.Stage.Open(str(path))
    context = UsdValidation.ValidationContext(UsdValidation.ValidationRegistry().GetOrLoadAllValidators())
    return [f"{e.GetName()}: {e.GetMessage()}" for e in context.Validate(stage)]
