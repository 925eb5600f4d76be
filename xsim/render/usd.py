"""``UsdRenderer``: Warp's USD exporter (``warp.render.UsdRenderer``), same constructor and methods.

Layout of a written stage (Warp's)::

    /root                          Xform, the default prim, holding the ``scaling`` scale op
    /root/<name>                   one prim per rendered name: Sphere, Cube, Capsule, Mesh,
                                   PointInstancer, Points, Xform (refs, bodies, arrows)
    /root/<body>/<name>            a shape given a ``parent_body``
    /root/_template_shapes/<name>  an instanceable class holding a template shape
    /dome_light, /distant_light    Warp's two lights

Each ``render_*`` call writes its values as time samples at the time code of the last
:meth:`UsdRenderer.begin_frame`; poses are translate (double), orient (quaternion, x y z w given)
and scale ops. A stage made from a path lives in memory until :meth:`UsdRenderer.save` exports it
to a temporary file beside the path and renames it over the path.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
from pxr import Gf, Sdf, Usd, UsdGeom, UsdLux, Vt

from ..errors import warn_to_stderr
from ..io.files import USD_SUFFIXES, write_atomically
from ..io.usd import add_pose_ops, set_extent, set_pose, set_triangles

AXES = ("X", "Y", "Z")
STAGE_AXES = ("Y", "Z")  # the only up axes a USD stage can declare
IDENTITY = (0.0, 0.0, 0.0, 1.0)
TEMPLATES = "_template_shapes"


def _host(value, name: str) -> np.ndarray:
    """``value`` as a float64 numpy array: arrays with ``.numpy()`` (xsim, Warp, torch) through it,
    lists, tuples and vector values as they are."""
    if hasattr(value, "numpy"):
        value = value.numpy()
    try:
        return np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError):
        raise TypeError(f"{name}: expected numbers, got {type(value).__name__} {value!r:.80}") from None


def _vector(value, name: str, size: int = 3) -> tuple[float, ...]:
    a = _host(value, name)
    if a.shape != (size,):
        raise ValueError(f"{name}: expected {size} numbers, got an array of shape {a.shape}")
    return tuple(a.tolist())


def _points(value, name: str) -> np.ndarray:
    """``value`` as float32 (n, 3)."""
    a = _host(value, name)
    if a.size == 0:
        return np.zeros((0, 3), np.float32)
    if a.ndim != 2 or a.shape[1] != 3:
        raise ValueError(f"{name}: expected an (n, 3) array of points, got an array of shape {a.shape}")
    return np.ascontiguousarray(a, dtype=np.float32)


def _length(value, name: str) -> float:
    a = _host(value, name)
    if a.shape != () or not np.isfinite(a) or a < 0:
        raise ValueError(f"{name}: expected a length >= 0, got {value!r:.80}")
    return float(a)


def _colors(value, count: int, name: str) -> Vt.Vec3fArray:
    """One color (3 numbers) or ``count`` of them (count, 3), as USD's displayColor array."""
    a = _host(value, name)
    if a.shape != (3,) and a.shape != (count, 3):
        raise ValueError(f"{name}: expected one RGB color (3 numbers) or one per point ({count}, 3), "
                         f"got an array of shape {a.shape}")
    return Vt.Vec3fArray.FromNumpy(np.ascontiguousarray(a.reshape(-1, 3), dtype=np.float32))


def _color(value) -> Vt.Vec3fArray | None:
    """An optional single ``color`` (3 numbers) as a displayColor array."""
    return None if value is None else _colors(value, 1, "color")


def _indices(value, per: int, count: int, element: str, of: str) -> np.ndarray:
    """Integer ``indices`` as (m, per), ``per`` to an ``element`` ("triangle"), each naming one of
    ``count`` ``of`` ("points")."""
    a = np.asarray(value.numpy() if hasattr(value, "numpy") else value)
    if a.size % per or (a.size and not np.issubdtype(a.dtype, np.integer)):
        raise ValueError(f"indices: expected integers, {per} per {element}, got {a.size} values of type {a.dtype}")
    a = a.reshape(-1, per)
    if a.size and (a.min() < 0 or a.max() >= count):
        raise ValueError(f"indices: expected indices into the {count} {of}, got values from {a.min()} to {a.max()}")
    return a


def _axis(value, name: str = "up_axis") -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or not 0 <= value <= 2:
        raise ValueError(f"{name}: expected 0 (X), 1 (Y) or 2 (Z), got {value!r}")
    return int(value)


def _prim_name(value, name: str) -> str:
    if not isinstance(value, str) or not Sdf.Path.IsValidIdentifier(value):
        raise ValueError(f"{name}: expected a USD prim name (letters, digits and _, not starting with a "
                         f"digit), got {value!r}")
    return value


def _rotation_between(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Quaternions (n, 4) x y z w of the shortest rotations taking unit vectors ``a`` (3) to ``b``
    (n, 3); opposite vectors get a half turn about an axis normal to ``a``."""
    q = np.concatenate([np.cross(a, b), 1.0 + b @ a[:, None]], axis=1)
    opposite = q[:, 3] < 1e-9
    if opposite.any():
        normal = np.cross(a, (0.0, 1.0, 0.0) if abs(a[1]) < 0.9 else (1.0, 0.0, 0.0))
        q[opposite] = [*(normal / np.linalg.norm(normal)), 0.0]
    return q / np.linalg.norm(q, axis=1, keepdims=True)


def _rotate(q: np.ndarray, v: np.ndarray) -> np.ndarray:
    """Vectors ``v`` (n, 3) rotated by the unit quaternion ``q`` (x, y, z, w)."""
    u, w = q[:3], q[3]
    t = 2.0 * np.cross(u, v)
    return v + w * t + np.cross(u, t)


def _visibility(visible: bool) -> str:
    return UsdGeom.Tokens.inherited if visible else UsdGeom.Tokens.invisible


class UsdRenderer:
    """Writes shapes, meshes, points and lines to a USD stage, one time code per frame.

    ``stage``: a file path (.usd, .usda, .usdc; a new stage, written by :meth:`save`) or an open
    ``Usd.Stage``; ``up_axis``: "Y" or "Z"; ``fps``: frames per second (time code = frame);
    ``scaling``: uniform scale of everything under ``/root``."""

    def __init__(self, stage: str | os.PathLike | Usd.Stage, up_axis: str = "Y", fps: float = 60,
                 scaling: float = 1.0):
        if not isinstance(up_axis, str) or up_axis.upper() not in STAGE_AXES:
            raise ValueError(f"up_axis: expected 'Y' or 'Z' (the up axes USD stages can have), got {up_axis!r}")
        if not isinstance(fps, (int, float, np.number)) or not fps > 0:
            raise ValueError(f"fps: expected a number of frames per second > 0, got {fps!r}")
        scaling = _length(scaling, "scaling")
        self.path: Path | None = None
        if isinstance(stage, Usd.Stage):
            self.stage = stage
        elif isinstance(stage, (str, os.PathLike)):
            self.path = Path(stage).absolute()
            self.stage = Usd.Stage.Open(self._new_layer(self.path))
        else:
            raise TypeError(f"stage: expected a file path or a Usd.Stage, got {type(stage).__name__}")
        self.up_axis = up_axis.upper()
        self.fps = float(fps)
        self.time = 0
        # template name -> the scale its instances multiply theirs by (a box's extents, a mesh's scale)
        self._template_scales: dict[str, tuple[float, ...]] = {}
        self._instance_counts: dict[Sdf.Path, int] = {}
        self._triangles: dict[Sdf.Path, np.ndarray] = {}

        self.root = UsdGeom.Xform.Define(self.stage, "/root")
        self.root.ClearXformOpOrder()
        self.root.AddScaleOp().Set(Gf.Vec3f(scaling, scaling, scaling))
        self.stage.SetDefaultPrim(self.root.GetPrim())
        self.stage.SetStartTimeCode(0)
        self.stage.SetEndTimeCode(0)
        self.stage.SetTimeCodesPerSecond(self.fps)
        self.stage.SetFramesPerSecond(self.fps)
        UsdGeom.SetStageUpAxis(self.stage, getattr(UsdGeom.Tokens, self.up_axis.lower()))
        self._add_lights()

    @staticmethod
    def _new_layer(path: Path) -> Sdf.Layer:
        """An empty layer named after ``path`` (so relative references resolve from its folder)
        that touches no file until :meth:`save`."""
        if path.suffix not in USD_SUFFIXES:
            raise ValueError(f"stage: expected a path ending in {', '.join(USD_SUFFIXES)}, got '{path}'")
        if Sdf.Layer.Find(str(path)):
            raise ValueError(f"stage: a USD layer for '{path}' is already open in this process (another "
                             "UsdRenderer or Usd.Stage on that file); release it or choose another path")
        return Sdf.Layer.New(Sdf.FileFormat.FindByExtension(path.suffix.lstrip(".")), str(path))

    def _add_lights(self):
        # Warp's lighting: a dome for ambient light, a distant light for shadows
        dome = UsdLux.DomeLight.Define(self.stage, "/dome_light")
        dome.AddRotateXYZOp().Set(Gf.Vec3f(-90.0, -30.0, 0.0))
        dome.CreateEnableColorTemperatureAttr(True)
        dome.CreateColorTemperatureAttr(6150.0)
        dome.CreateIntensityAttr(1.0)
        dome.CreateExposureAttr(9.0)
        dome.GetPrim().CreateAttribute("visibleInPrimaryRay", Sdf.ValueTypeNames.Bool).Set(False)
        sun = UsdLux.DistantLight.Define(self.stage, "/distant_light")
        sun.AddRotateXYZOp().Set(Gf.Vec3f(-35.0, 45.0, 0.0))
        sun.CreateEnableColorTemperatureAttr(True)
        sun.CreateColorTemperatureAttr(7250.0)
        sun.CreateIntensityAttr(1.0)
        sun.CreateExposureAttr(10.0)

    # frames

    def begin_frame(self, time: float):
        """Write what follows at time code ``round(time * fps)`` (``time`` in seconds); the stage's
        time range grows to hold it."""
        self.time = round(float(time) * self.fps)
        self.stage.SetStartTimeCode(min(self.stage.GetStartTimeCode(), self.time))
        self.stage.SetEndTimeCode(max(self.stage.GetEndTimeCode(), self.time))

    def end_frame(self):
        """End the frame (nothing to do for USD: samples are written as they come)."""

    def save(self) -> bool:
        """Write the stage: a path-made one to a temporary file renamed over its path (an existing
        file survives a failure), an opened one with ``Usd.Stage.Save``. False, with the reason on
        stderr, when it could not be written."""
        try:
            if self.path is None:
                self.stage.Save()
            else:
                def export(tmp: Path):
                    if not self.stage.GetRootLayer().Export(str(tmp)):
                        raise OSError("USD's exporter failed")
                write_atomically(self.path, export)
        except (OSError, RuntimeError) as e:  # USD's errors are RuntimeErrors (Tf.ErrorException)
            warn_to_stderr(f"UsdRenderer.save: {e}", RuntimeWarning)
            return False
        return True

    # paths and shared pieces

    @property
    def _code(self) -> Usd.TimeCode:
        return Usd.TimeCode(self.time)

    def _resolve_path(self, name: str, parent_body: str | None = None, is_template: bool = False) -> Sdf.Path:
        """``/root/name``, ``/root/parent_body/name`` or ``/root/_template_shapes/name``."""
        base = self.root.GetPath()
        if is_template:
            base = base.AppendChild(TEMPLATES)
        elif parent_body is not None:
            base = base.AppendChild(_prim_name(parent_body, "parent_body"))
        return base.AppendChild(_prim_name(name, "name"))

    def _shape_path(self, name: str, parent_body: str | None, is_template: bool, child: str):
        """The path a render call returns (for a template, the class holding the shape) and the shape's."""
        path = self._resolve_path(name, parent_body, is_template)
        return path, path.AppendChild(child) if is_template else path

    def _shape(self, schema, name: str, parent_body: str | None, is_template: bool, child: str):
        """The ``schema`` prim for ``name`` (defined with pose ops on first use), the path the
        render call returns (the prim's own, or for a template the instanceable class above it)
        and whether it was defined now."""
        path, shape_path = self._shape_path(name, parent_body, is_template, child)
        if is_template and not self.stage.GetPrimAtPath(path):
            scope = UsdGeom.Scope.Define(self.stage, path).GetPrim()
            scope.SetInstanceable(True)
            scope.SetSpecifier(Sdf.SpecifierClass)
        prim = schema.Get(self.stage, shape_path)
        created = not prim
        if created:
            prim = schema.Define(self.stage, shape_path)
            add_pose_ops(prim, scale=True)
        return prim, path, created

    @staticmethod
    def _pose(pos, rot, scale=(1.0, 1.0, 1.0), is_template: bool = False):
        """Checked (position, rotation, scale), or None for a template (its instances place it)."""
        if is_template:
            return None
        return _vector(pos, "pos"), _vector(rot, "rot", 4), _vector(scale, "scale")

    def _color_and_extent(self, gprim, color: Vt.Vec3fArray | None):
        if color is not None:
            gprim.GetDisplayColorAttr().Set(color, self._code)
        set_extent(gprim, self._code)

    def _finish(self, prim, pose, color: Vt.Vec3fArray | None, visible: bool):
        """Color and extent (of geometry), ``pose`` (from :meth:`_pose`) and visibility."""
        if prim.GetPrim().IsA(UsdGeom.Gprim):
            self._color_and_extent(prim, color)
        if pose is not None:
            set_pose(prim, *pose, time=self._code)
        prim.GetVisibilityAttr().Set(_visibility(visible), self._code)

    # shapes

    def render_sphere(self, name: str, pos, rot, radius: float, parent_body: str | None = None,
                      is_template: bool = False, color=None, visible: bool = True) -> Sdf.Path:
        """A sphere of ``radius`` at ``pos`` rotated by ``rot`` (x, y, z, w)."""
        radius, pose, color = _length(radius, "radius"), self._pose(pos, rot, is_template=is_template), _color(color)
        sphere, path, _ = self._shape(UsdGeom.Sphere, name, parent_body, is_template, "sphere")
        sphere.GetRadiusAttr().Set(radius, self._code)
        self._finish(sphere, pose, color, visible)
        return path

    def render_box(self, name: str, pos, rot, extents, parent_body: str | None = None, is_template: bool = False,
                   color=None, visible: bool = True) -> Sdf.Path:
        """A box of half sizes ``extents`` (3): USD's cube of side 2 scaled by them."""
        extents = _vector(extents, "extents")
        pose, color = self._pose(pos, rot, extents, is_template), _color(color)
        cube, path, _ = self._shape(UsdGeom.Cube, name, parent_body, is_template, "cube")
        self._template_scales[name] = extents
        self._finish(cube, pose, color, visible)
        return path

    def _round_shape(self, schema, child: str, name: str, pos, rot, radius, half_height, parent_body,
                     is_template: bool, up_axis: int, color, visible: bool) -> Sdf.Path:
        radius, height, axis = _length(radius, "radius"), 2.0 * _length(half_height, "half_height"), _axis(up_axis)
        pose, color = self._pose(pos, rot, is_template=is_template), _color(color)
        prim, path, _ = self._shape(schema, name, parent_body, is_template, child)
        prim.GetRadiusAttr().Set(radius, self._code)
        prim.GetHeightAttr().Set(height, self._code)
        prim.GetAxisAttr().Set(AXES[axis])
        self._finish(prim, pose, color, visible)
        return path

    def render_capsule(self, name: str, pos, rot, radius: float, half_height: float, parent_body: str | None = None,
                       is_template: bool = False, up_axis: int = 1, color=None, visible: bool = True) -> Sdf.Path:
        """A capsule along local axis ``up_axis`` (0, 1, 2): cylinder part ``2 * half_height`` long."""
        return self._round_shape(UsdGeom.Capsule, "capsule", name, pos, rot, radius, half_height, parent_body,
                                 is_template, up_axis, color, visible)

    def render_cylinder(self, name: str, pos, rot, radius: float, half_height: float, parent_body: str | None = None,
                        is_template: bool = False, up_axis: int = 1, color=None, visible: bool = True) -> Sdf.Path:
        """A cylinder along local axis ``up_axis``, ``2 * half_height`` long."""
        return self._round_shape(UsdGeom.Cylinder, "cylinder", name, pos, rot, radius, half_height, parent_body,
                                 is_template, up_axis, color, visible)

    def render_cone(self, name: str, pos, rot, radius: float, half_height: float, parent_body: str | None = None,
                    is_template: bool = False, up_axis: int = 1, color=None, visible: bool = True) -> Sdf.Path:
        """A cone along local axis ``up_axis``, apex towards +axis, ``2 * half_height`` tall."""
        return self._round_shape(UsdGeom.Cone, "cone", name, pos, rot, radius, half_height, parent_body,
                                 is_template, up_axis, color, visible)

    def render_arrow(self, name: str, pos, rot, base_radius: float, base_height: float,
                     cap_radius: float | None = None, cap_height: float | None = None, parent_body: str | None = None,
                     is_template: bool = False, up_axis: int = 1, color=None, visible: bool = True) -> Sdf.Path:
        """An arrow from ``pos`` along local axis ``up_axis``: a cylinder shaft, then a cone head
        (``cap_radius`` 1.8 x ``base_radius`` and ``cap_height`` 0.18 x ``base_height`` unless given,
        as Warp's OpenGL renderer draws it)."""
        axis = _axis(up_axis)
        base_radius, base_height = _length(base_radius, "base_radius"), _length(base_height, "base_height")
        cap_radius = 1.8 * base_radius if cap_radius is None else _length(cap_radius, "cap_radius")
        cap_height = 0.18 * base_height if cap_height is None else _length(cap_height, "cap_height")
        pose, color = self._pose(pos, rot, is_template=is_template), _color(color)
        arrow, path, _ = self._shape(UsdGeom.Xform, name, parent_body, is_template, "arrow")
        unit = np.eye(3)[axis]
        for schema, child, radius, height, centre in (
                (UsdGeom.Cylinder, "base", base_radius, base_height, 0.5 * base_height),
                (UsdGeom.Cone, "cap", cap_radius, cap_height, base_height + 0.5 * cap_height)):
            part = schema.Get(self.stage, arrow.GetPath().AppendChild(child))
            if not part:
                part = schema.Define(self.stage, arrow.GetPath().AppendChild(child))
                add_pose_ops(part, rotation=False)
                part.GetAxisAttr().Set(AXES[axis])
            part.GetRadiusAttr().Set(radius, self._code)
            part.GetHeightAttr().Set(height, self._code)
            set_pose(part, centre * unit, time=self._code)
            self._color_and_extent(part, color)
        self._finish(arrow, pose, None, visible)
        return path

    def render_plane(self, name: str, pos, rot, width: float, length: float, color=(1.0, 1.0, 1.0), color2=None,
                     parent_body: str | None = None, is_template: bool = False, u_scaling: float = 1.0,
                     v_scaling: float = 1.0, visible: bool = True) -> Sdf.Path:
        """A rectangle in its local x-z plane (normal +y), half sizes ``width`` along x and ``length``
        along z (100 where given as 0). ``color2``, ``u_scaling``, ``v_scaling`` (the checker pattern
        of Warp's OpenGL renderer) are not drawn in USD."""
        w = _length(width, "width") or 100.0
        half_length = _length(length, "length") or 100.0
        pose, color = self._pose(pos, rot, is_template=is_template), _color(color)
        plane, path, created = self._shape(UsdGeom.Mesh, name, parent_body, is_template, "plane")
        if created:
            plane.CreateDoubleSidedAttr(True)
            plane.CreateSubdivisionSchemeAttr(UsdGeom.Tokens.none)
            plane.GetFaceVertexCountsAttr().Set(Vt.IntArray([4]))
            plane.GetFaceVertexIndicesAttr().Set(Vt.IntArray([0, 1, 2, 3]))
            plane.GetNormalsAttr().Set(Vt.Vec3fArray([Gf.Vec3f(0.0, 1.0, 0.0)] * 4))
        # counter-clockwise seen from +y, as its normals face
        corners = [(-w, 0.0, -half_length), (-w, 0.0, half_length), (w, 0.0, half_length), (w, 0.0, -half_length)]
        plane.GetPointsAttr().Set(Vt.Vec3fArray([Gf.Vec3f(*c) for c in corners]), self._code)
        self._finish(plane, pose, color, visible)
        return path

    def render_ground(self, size: float = 100.0, plane=None) -> Sdf.Path:
        """A square of half size ``size`` at ``/root/ground`` normal to the up axis; given ``plane``
        (nx, ny, nz, d), turned to face (nx, ny, nz) and moved to ``d`` times that unit normal."""
        size = _length(size, "size")
        k = AXES.index(self.up_axis)
        up = np.eye(3)[k]
        a, b = np.eye(3)[(k + 1) % 3], np.eye(3)[(k + 2) % 3]  # a x b = up: corners counter-clockwise about up
        points = size * np.array([-a - b, a - b, a + b, -a + b])
        normal = up
        if plane is not None:
            plane = _vector(plane, "plane", 4)
            normal = np.array(plane[:3])
            if not np.linalg.norm(normal) > 0:
                raise ValueError(f"plane: expected a nonzero normal (nx, ny, nz, d), got {plane}")
            normal = normal / np.linalg.norm(normal)
            q = _rotation_between(up, normal[None])[0]
            points = _rotate(q, points) + plane[3] * normal
        mesh = UsdGeom.Mesh.Define(self.stage, self.root.GetPath().AppendChild("ground"))
        mesh.CreateDoubleSidedAttr(True)
        mesh.CreateSubdivisionSchemeAttr(UsdGeom.Tokens.none)
        mesh.GetPointsAttr().Set(Vt.Vec3fArray.FromNumpy(points.astype(np.float32)))
        mesh.GetNormalsAttr().Set(Vt.Vec3fArray.FromNumpy(np.tile(normal, (4, 1)).astype(np.float32)))
        mesh.GetFaceVertexCountsAttr().Set(Vt.IntArray([4]))
        mesh.GetFaceVertexIndicesAttr().Set(Vt.IntArray([0, 1, 2, 3]))
        set_extent(mesh)
        return mesh.GetPath()

    def render_ref(self, name: str, path: str | os.PathLike, pos, rot, scale, color=None) -> Sdf.Path:
        """An Xform at ``/root/name`` referencing the USD file ``path`` (relative to the stage's
        folder), posed and scaled; ``color`` becomes the displayColor of its outermost geometry."""
        if not isinstance(path, (str, os.PathLike)):
            raise TypeError(f"path: expected the path of a USD file, got {type(path).__name__}")
        prim_path, pose, color = self._resolve_path(name), self._pose(pos, rot, scale), _color(color)
        ref = UsdGeom.Xform.Get(self.stage, prim_path)
        if not ref:
            ref = UsdGeom.Xform.Define(self.stage, prim_path)
            ref.GetPrim().GetReferences().AddReference(os.fspath(path))
            add_pose_ops(ref, scale=True)
        set_pose(ref, *pose, time=self._code)
        if color is not None:
            prims = iter(Usd.PrimRange(ref.GetPrim()))
            for prim in prims:
                if prim.IsA(UsdGeom.Gprim):
                    UsdGeom.Gprim(prim).GetDisplayColorAttr().Set(color, self._code)
                    prims.PruneChildren()
        return prim_path

    def render_mesh(self, name: str, points, indices, colors=None, pos=(0.0, 0.0, 0.0), rot=IDENTITY,
                    scale=(1.0, 1.0, 1.0), update_topology: bool = False, parent_body: str | None = None,
                    is_template: bool = False, smooth_shading: bool = True, visible: bool = True) -> Sdf.Path:
        """A triangle mesh: ``points`` (n, 3), ``indices`` (3m,) or (m, 3) into them, written on the
        first call and when ``update_topology``; ``colors`` one RGB or one per point. Without
        ``smooth_shading`` each triangle gets its own (face-varying) normal."""
        points = _points(points, "points")
        scale = _vector(scale, "scale")
        pose = self._pose(pos, rot, scale, is_template)
        colors = None if colors is None else _colors(colors, len(points), "colors")
        shape_path = self._shape_path(name, parent_body, is_template, "mesh")[1]
        tris = None
        if update_topology or shape_path not in self._triangles:
            tris = _indices(indices, 3, len(points), "triangle", "points")
        mesh, path, created = self._shape(UsdGeom.Mesh, name, parent_body, is_template, "mesh")
        if created:
            mesh.CreateSubdivisionSchemeAttr(UsdGeom.Tokens.none)
            if colors is not None:
                UsdGeom.Primvar(mesh.GetDisplayColorAttr()).SetInterpolation(
                    UsdGeom.Tokens.constant if len(colors) == 1 else UsdGeom.Tokens.vertex)
        mesh.GetPointsAttr().Set(Vt.Vec3fArray.FromNumpy(points), self._code)
        if tris is not None:
            set_triangles(mesh, tris, self._code)
            self._triangles[shape_path] = tris
        if colors is not None:
            mesh.GetDisplayColorAttr().Set(colors, self._code)
        if not smooth_shading:
            tris = self._triangles[shape_path]
            p = points.astype(np.float64)
            n = np.cross(p[tris[:, 1]] - p[tris[:, 0]], p[tris[:, 2]] - p[tris[:, 0]])
            n /= np.maximum(np.linalg.norm(n, axis=1, keepdims=True), 1e-30)
            mesh.GetNormalsAttr().Set(Vt.Vec3fArray.FromNumpy(np.repeat(n, 3, axis=0).astype(np.float32)),
                                      self._code)
            mesh.SetNormalsInterpolation(UsdGeom.Tokens.faceVarying)
        self._template_scales[name] = scale
        self._finish(mesh, pose, None, visible)
        return path

    def render_points(self, name: str, points, radius, colors=None, as_spheres: bool = True,
                      visible: bool = True) -> Sdf.Path:
        """Points (n, 3) of ``radius`` (one, or one per point): a PointInstancer of a unit sphere
        scaled by the radius, or with ``as_spheres=False`` a Points prim of widths 2 x radius.
        ``colors``: one RGB or one per point."""
        points = _points(points, "points")
        n = len(points)
        r = _host(radius, "radius")
        if r.shape not in ((), (n,)):
            raise ValueError(f"radius: expected one radius or one per point ({n},), got an array of shape {r.shape}")
        if not np.all(np.isfinite(r) & (r >= 0)):
            raise ValueError(f"radius: expected radii >= 0, got {radius!r:.80}")
        colors = None if colors is None else _colors(colors, n, "colors")
        color_interp = UsdGeom.Tokens.constant if colors is None or len(colors) == 1 else UsdGeom.Tokens.vertex
        path = self._resolve_path(name)
        if as_spheres:
            prim = UsdGeom.PointInstancer.Get(self.stage, path)
            if not prim:
                prim = UsdGeom.PointInstancer.Define(self.stage, path)
                sphere = UsdGeom.Sphere.Define(self.stage, path.AppendChild("sphere"))
                prim.CreatePrototypesRel().SetTargets([sphere.GetPath()])
                if colors is not None:
                    UsdGeom.PrimvarsAPI(prim).CreatePrimvar("displayColor", Sdf.ValueTypeNames.Color3fArray,
                                                            color_interp, 1)
            self._set_instances(prim, n)
            prim.GetPositionsAttr().Set(Vt.Vec3fArray.FromNumpy(points), self._code)
            scales = np.ascontiguousarray(np.broadcast_to(r[..., None], (n, 3)), dtype=np.float32)
            prim.GetScalesAttr().Set(Vt.Vec3fArray.FromNumpy(scales), self._code)
            if colors is not None:
                UsdGeom.PrimvarsAPI(prim).GetPrimvar("displayColor").Set(colors, self._code)
            set_extent(prim, self._code)
        else:
            prim = UsdGeom.Points.Get(self.stage, path)
            if not prim:
                prim = UsdGeom.Points.Define(self.stage, path)
                UsdGeom.Primvar(prim.GetWidthsAttr()).SetInterpolation(
                    UsdGeom.Tokens.constant if r.shape == () else UsdGeom.Tokens.vertex)
                UsdGeom.Primvar(prim.GetDisplayColorAttr()).SetInterpolation(color_interp)
            widths = np.ascontiguousarray(2.0 * r.reshape(-1), dtype=np.float32)
            prim.GetPointsAttr().Set(Vt.Vec3fArray.FromNumpy(points), self._code)
            prim.GetWidthsAttr().Set(Vt.FloatArray.FromNumpy(widths), self._code)
            if colors is not None:
                prim.GetDisplayColorAttr().Set(colors, self._code)
            # USD's extent of points takes a width per point
            extent = UsdGeom.Points.ComputeExtent(prim.GetPointsAttr().Get(self._code),
                                                  Vt.FloatArray.FromNumpy(np.broadcast_to(widths, n).copy()))
            prim.GetExtentAttr().Set(extent, self._code)
        prim.GetVisibilityAttr().Set(_visibility(visible), self._code)
        return path

    def _set_instances(self, instancer: UsdGeom.PointInstancer, count: int):
        """Prototype 0 for each of ``count`` instances, sampled again only when the count changes."""
        path = instancer.GetPath()
        if self._instance_counts.get(path) != count:
            instancer.GetProtoIndicesAttr().Set(Vt.IntArray.FromNumpy(np.zeros(count, np.int32)), self._code)
            self._instance_counts[path] = count

    def render_line_list(self, name: str, vertices, indices, color=None, radius: float = 0.01,
                         visible: bool = True) -> Sdf.Path:
        """Segments between ``vertices[indices[2k]]`` and ``vertices[indices[2k + 1]]``, drawn as
        capsules of ``radius`` (a PointInstancer of one capsule stretched along each segment)."""
        vertices = _points(vertices, "vertices")
        pairs = _indices(indices, 2, len(vertices), "segment", "vertices")
        return self._segments(name, vertices[pairs[:, 0]], vertices[pairs[:, 1]], color, radius, visible)

    def render_line_strip(self, name: str, vertices, color=None, radius: float = 0.01,
                          visible: bool = True) -> Sdf.Path:
        """The polyline through ``vertices`` (n, 3), drawn as capsules as :meth:`render_line_list`."""
        vertices = _points(vertices, "vertices")
        return self._segments(name, vertices[:-1], vertices[1:], color, radius, visible)

    def _segments(self, name: str, starts: np.ndarray, ends: np.ndarray, color, radius, visible: bool) -> Sdf.Path:
        path, radius, color = self._resolve_path(name), _length(radius, "radius"), _color(color)
        instancer = UsdGeom.PointInstancer.Get(self.stage, path)
        if not instancer:
            instancer = UsdGeom.PointInstancer.Define(self.stage, path)
            # a capsule of height 1 along z, scaled along z to each segment's length
            capsule = UsdGeom.Capsule.Define(self.stage, path.AppendChild("capsule"))
            instancer.CreatePrototypesRel().SetTargets([capsule.GetPath()])
        capsule = UsdGeom.Capsule(self.stage.GetPrimAtPath(path.AppendChild("capsule")))
        capsule.GetRadiusAttr().Set(radius, self._code)
        self._color_and_extent(capsule, color)
        d = (ends - starts).astype(np.float64)
        lengths = np.linalg.norm(d, axis=1)
        directions = np.where(lengths[:, None] > 0, d / np.maximum(lengths, 1e-30)[:, None], (0.0, 0.0, 1.0))
        q = _rotation_between(np.array([0.0, 0.0, 1.0]), directions)
        scales = np.ones((len(d), 3), np.float32)
        scales[:, 2] = lengths
        self._set_instances(instancer, len(d))
        instancer.GetPositionsAttr().Set(Vt.Vec3fArray.FromNumpy(((starts + ends) * 0.5).astype(np.float32)),
                                         self._code)
        instancer.GetOrientationsAttr().Set(Vt.QuathArray.FromNumpy(q.astype(np.float16)), self._code)
        instancer.GetScalesAttr().Set(Vt.Vec3fArray.FromNumpy(scales), self._code)
        set_extent(instancer, self._code)
        instancer.GetVisibilityAttr().Set(_visibility(visible), self._code)
        return path

    # bodies and instances

    def register_body(self, body_name: str) -> Sdf.Path:
        """An Xform ``/root/body_name`` with pose ops, the parent of shapes given ``parent_body``."""
        body = UsdGeom.Xform.Define(self.stage, self._resolve_path(body_name))
        add_pose_ops(body, scale=True)
        return body.GetPath()

    def add_shape_instance(self, name: str, shape: Sdf.Path, body: str | None, pos, rot, scale=(1.0, 1.0, 1.0),
                           color1=None, color2=None, custom_index: int = -1, visible: bool = True) -> Sdf.Path:
        """An instance ``name`` (under ``body`` if given) of the template ``shape`` (the path a
        ``render_*`` call with ``is_template=True`` returned), posed and scaled (times a box's
        extents or a mesh's scale). ``color1``, ``color2``, ``custom_index``: unused, as in Warp."""
        shape = Sdf.Path(str(shape))
        if not self.stage.GetPrimAtPath(shape):
            raise ValueError(f"shape: expected the path of a template shape, got '{shape}', which is not on the stage")
        path = self._resolve_path(name, body)
        scale = np.multiply(_vector(scale, "scale"), self._template_scales.get(shape.name, (1.0, 1.0, 1.0)))
        pose = self._pose(pos, rot, scale)
        instance = UsdGeom.Xform.Get(self.stage, path)
        if not instance:
            instance = UsdGeom.Xform.Define(self.stage, path)
            instance.GetPrim().GetReferences().AddInternalReference(shape)
            add_pose_ops(instance, scale=True)
        self._finish(instance, pose, None, visible)
        return path
