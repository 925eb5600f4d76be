"""URDF robots through yourdfpy: ``add_urdf(builder, source, ...)`` parses the file (or XML text) and
copies its links and joints into the builder.

What a URDF element becomes:

- a link -> a body whose frame is the link frame at zero joint positions, with the link's
  ``inertial`` mass, centre of mass and inertia (turned by the inertial origin) in that frame; a link
  without mass is kinematic (mass 0): a fixed base's ``world`` or ``base`` link, never a moving one
  (refused);
- a joint -> revolute (limits) / continuous (none) / prismatic / fixed / floating (free) with the
  joint origin as the parent frame and the child link frame as the child frame, so ``joint_q`` is
  the URDF joint position; ``dynamics damping`` -> a velocity drive towards 0. ``planar`` joints need
  a D6 joint, which xsim does not have yet: refused naming the joint;
- the root link: with ``floating=False`` (default) welded to the world (kinematic if it has no
  mass), with ``floating=True`` free;
- ``collision`` geometry -> shapes: box, sphere, mesh (trimesh; ``package://name/...`` resolved
  against ``package_dirs``, other paths against the file's folder). xsim has no cylinders yet: a
  collision cylinder is refused naming the file and the link, or with ``unsupported_geoms="skip"``
  left out and listed in ``UrdfImport.skipped``. ``visual`` geometry is not imported (xsim has no
  visual shapes).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

import numpy as np

from ...errors import AssetError, missing_extra


@dataclass
class UrdfImport:
    """What ``add_urdf`` made: link and joint names -> builder indices."""

    file: str
    """The file imported (``<string>`` for XML text)"""
    body: dict[str, int]
    """Link name -> builder body"""
    joint: dict[str, int]
    """Joint name -> builder joint (the root's weld or free joint: ``<root link>_root``)"""
    shape: list[tuple[str, int]] = field(default_factory=list)
    """(link name, builder shape) of each collision shape"""
    skipped: list[tuple[str, str]] = field(default_factory=list)
    """(link name, why) of the collision geometry left out"""


def _yourdfpy():
    try:
        import yourdfpy
    except ImportError as e:
        raise missing_extra("add_urdf (URDF import)", "yourdfpy", "urdf") from e
    return yourdfpy


def _pose(matrix) -> tuple[np.ndarray, np.ndarray]:
    """(position, quaternion xyzw) of a 4x4 homogeneous transform (None: identity)."""
    if matrix is None:
        return np.zeros(3), np.array([0.0, 0.0, 0.0, 1.0])
    from scipy.spatial.transform import Rotation

    m = np.asarray(matrix, dtype=np.float64)
    return m[:3, 3].copy(), Rotation.from_matrix(m[:3, :3]).as_quat()


def _resolve(filename: str, base: str, package_dirs, fail, link: str) -> str:
    """The file a mesh ``filename`` of link ``link`` names."""
    if filename.startswith("package://"):
        rest = filename[len("package://"):]
        package, _, inner = rest.partition("/")
        tried = []
        for d in package_dirs:
            for candidate in (os.path.join(d, package, inner), os.path.join(d, inner)):
                tried.append(candidate)
                if os.path.isfile(candidate):
                    return candidate
        raise fail(f"link {link!r}: mesh {filename!r} not found in package_dirs (tried {', '.join(tried) or 'none'})")
    filename = filename.removeprefix("file://")
    path = filename if os.path.isabs(filename) else os.path.join(base, filename)
    if not os.path.isfile(path):
        raise fail(f"link {link!r}: mesh file {path!r} not found")
    return path


def add_urdf(builder, source, xform=None, floating: bool = False, package_dirs=(), unsupported_geoms: str = "error",
             collision: bool = True) -> UrdfImport:
    """Import a URDF robot into ``builder`` (module docstring). ``source``: a file path or XML text;
    ``xform``: where the root link goes ((p, q) or 7 numbers); ``floating``: free root (True) or welded
    to the world; ``package_dirs``: folders ``package://`` paths are looked up in (the file's folder is
    always one); ``unsupported_geoms``: ``"error"`` or ``"skip"`` for collision cylinders;
    ``collision``: whether to import collision geometry. Returns the ``UrdfImport`` name maps."""
    from ...sim.rigid import _xform
    from ...sim.shapes import quat_multiply, quat_to_matrix

    if unsupported_geoms not in ("error", "skip"):
        raise ValueError(f"add_urdf: unsupported_geoms must be 'error' or 'skip', got {unsupported_geoms!r}")
    yourdfpy = _yourdfpy()
    text = str(source)
    is_text = text.lstrip().startswith("<")
    file = "<string>" if is_text else text

    def fail(what: str) -> AssetError:
        return AssetError(f"add_urdf: {file}: {what}")
    if not is_text and not os.path.isfile(text):
        raise fail("no such file (expected a URDF file or URDF XML text)")
    base = os.getcwd() if is_text else os.path.dirname(os.path.abspath(text))
    import xml.etree.ElementTree as ET

    try:  # yourdfpy recovers from broken XML by guessing: a malformed file is refused here instead
        root_element = ET.fromstring(text) if is_text else ET.parse(text).getroot()
    except ET.ParseError as e:
        raise fail(f"not well-formed XML: {e}") from e
    if root_element.tag != "robot":
        raise fail(f"the top element is <{root_element.tag}> (expected <robot>)")
    try:
        if is_text:
            import io

            urdf = yourdfpy.URDF.load(io.StringIO(text), load_meshes=False, build_scene_graph=False)
        else:
            urdf = yourdfpy.URDF.load(text, load_meshes=False, build_scene_graph=False)
    except Exception as e:  # lxml's and yourdfpy's parse errors
        raise fail(f"not a readable URDF: {type(e).__name__}: {e}") from e
    robot = urdf.robot
    links = {link.name: link for link in robot.links}
    children: dict[str, list] = {}
    has_parent = set()
    for j in robot.joints:
        for end in (j.parent, j.child):
            if end not in links:
                raise fail(f"joint {j.name!r}: link {end!r} is not defined (expected a <link name={end!r}>)")
        if j.child in has_parent:
            raise fail(f"joint {j.name!r}: link {j.child!r} already has a parent joint (a URDF is a tree)")
        has_parent.add(j.child)
        children.setdefault(j.parent, []).append(j)
    roots = [n for n in links if n not in has_parent]
    if len(roots) != 1:
        raise fail(f"expected one root link, found {len(roots)} ({', '.join(roots)})")
    out = UrdfImport(file=file, body={}, joint={})
    root_pose = _xform(xform)
    dirs = [*package_dirs, base]

    def add_link(name: str, pose, moves: bool) -> int:
        link = links[name]
        inertial = link.inertial
        mass = float(inertial.mass) if inertial is not None and inertial.mass is not None else 0.0
        if mass <= 0.0 and moves:
            raise fail(f"link {name!r} moves but has no mass (expected an <inertial> with <mass value> > 0)")
        kw = {}
        if mass > 0.0:
            p, q = _pose(inertial.origin)
            rot = quat_to_matrix(q)
            inertia = np.asarray(inertial.inertia, dtype=np.float64)
            kw = {"com": p, "inertia": rot @ inertia @ rot.T}
        k = builder.add_body(pose, mass=mass, label=name, **kw)
        out.body[name] = k
        if collision:
            _add_collisions(builder, link, k, dirs, fail, unsupported_geoms, out)
        return k

    def walk(name: str, pose, parent_body: int) -> None:
        for j in children.get(name, []):
            origin = _pose(j.origin)
            child_pose = (pose[0] + quat_to_matrix(pose[1]) @ origin[0], quat_multiply(pose[1], origin[1]))
            k = add_link(j.child, child_pose, moves=j.type != "fixed" or parent_body >= 0 and
                         builder.bodies[parent_body]["mass"] != 0.0)
            out.joint[j.name] = _add_joint(builder, j, parent_body, k, origin, fail)
            builder.joints[out.joint[j.name]]["label"] = j.name
            walk(j.child, child_pose, k)

    root = roots[0]
    r = add_link(root, root_pose, moves=floating)
    if floating:
        out.joint[f"{root}_root"] = builder.add_joint_free(r, parent=-1, parent_xform=root_pose,
                                                           child_xform=None)
        builder.joints[-1]["label"] = f"{root}_root"
    elif builder.bodies[r]["mass"] != 0.0:
        out.joint[f"{root}_root"] = builder.add_joint_fixed(-1, r, parent_xform=root_pose)
        builder.joints[-1]["label"] = f"{root}_root"
    walk(root, root_pose, r)
    return out


def _add_joint(builder, j, parent: int, child: int, origin, fail) -> int:
    """The builder joint of URDF joint ``j`` between bodies ``parent`` and ``child``."""
    axis = np.asarray(j.axis if j.axis is not None else (1.0, 0.0, 0.0), dtype=np.float64)
    kd = float(j.dynamics.damping) if j.dynamics is not None and j.dynamics.damping else 0.0
    limit = j.limit
    lo = float(limit.lower) if limit is not None and limit.lower is not None else None
    hi = float(limit.upper) if limit is not None and limit.upper is not None else None
    if j.type == "revolute":
        return builder.add_joint_revolute(parent, child, origin, None, axis, lo, hi, target_kd=kd)
    if j.type == "continuous":
        return builder.add_joint_revolute(parent, child, origin, None, axis, target_kd=kd)
    if j.type == "prismatic":
        return builder.add_joint_prismatic(parent, child, origin, None, axis, lo, hi, target_kd=kd)
    if j.type == "fixed":
        return builder.add_joint_fixed(parent, child, origin, None)
    if j.type == "floating":
        return builder.add_joint_free(child, parent=parent, parent_xform=origin)
    if j.type == "planar":
        raise fail(f"joint {j.name!r} is planar: that needs a D6 joint, which xsim does not have yet")
    raise fail(f"joint {j.name!r} has type {j.type!r} (expected revolute, continuous, prismatic, fixed or floating)")


def _add_collisions(builder, link, body: int, dirs, fail, unsupported: str, out: UrdfImport) -> None:
    """The collision geometry of ``link`` as shapes on ``body``."""
    for c in link.collisions:
        g = c.geometry
        xf = _pose(c.origin)
        if g.box is not None:
            k = builder.add_shape_box(body, xf, *(0.5 * float(s) for s in g.box.size))
        elif g.sphere is not None:
            k = builder.add_shape_sphere(body, xf, radius=float(g.sphere.radius))
        elif g.mesh is not None:
            import trimesh

            path = _resolve(g.mesh.filename, dirs[-1], dirs, fail, link.name)
            mesh = trimesh.load(path, force="mesh", process=False)
            scale = np.ones(3) if g.mesh.scale is None else np.broadcast_to(np.asarray(g.mesh.scale, float), 3)
            k = builder.add_shape_mesh(body, (np.asarray(mesh.vertices) * scale, np.asarray(mesh.faces)), xf)
        else:
            kind = "cylinder" if g.cylinder is not None else "unknown"
            why = f"link {link.name!r}: collision geometry {kind!r}: xsim has no such shape"
            if unsupported == "error":
                raise fail(f"{why} (expected box, sphere or mesh; unsupported_geoms='skip' leaves it out)")
            out.skipped.append((link.name, why))
            continue
        builder.shapes[k]["label"] = f"{link.name}/{c.name}" if c.name else link.name
        out.shape.append((link.name, k))
