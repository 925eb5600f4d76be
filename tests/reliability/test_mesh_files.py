"""Reliability, mesh files named by scenes: a non-finite or out-of-range vertex names the file and
line, an unreadable file is explained as an unreadable mesh, and a FIFO, a device, a directory or a
symlink loop is refused (never read forever or hung on), all as ``xsim.SceneError`` naming the key
path, with ``xsim check`` exiting 2."""

import os
import struct

import numpy as np
import pytest

import xsim
from xsim.cli import main
from xsim.io import load_scene

from test_scene_inputs import xsim_check_in_a_subprocess  # same folder (pytest puts it on sys.path)

# a scene that reads MESH in each of the three places a mesh file can appear, with its key path
PLACES = {
    "collider": ('[[collider]]\ntype = "mesh"\nmesh = "{mesh}"\nscale = {scale}\n', "collider[0].mesh"),
    "cloth": ('[[cloth]]\nmesh = "{mesh}"\nscale = {scale}\n', "cloth[0].mesh"),
    "body shape": ('[[body]]\n[[body.shape]]\ntype = "mesh"\nmesh = "{mesh}"\nscale = {scale}\n',
                   "body[0].shape[0].mesh"),
}
GOOD_OBJ = "v 0 0 0\nv 1 0 0\nv 0 1 0\nv 0 0 1\nf 1 3 2\nf 1 2 4\nf 1 4 3\nf 2 3 4\n"


def refused(tmp_path, capsys, place: str, mesh: str, scale: float = 1.0) -> str:
    """Load a scene reading ``mesh`` at ``place``; assert a SceneError naming the key (and exit 2
    from ``xsim check``, in a subprocess for files that would hang without the check); return the
    message."""
    text, key = PLACES[place]
    path = tmp_path / "scene.toml"
    path.write_text(text.format(mesh=mesh, scale=scale))
    if mesh in ("pipe.obj", "/dev/zero"):
        result = xsim_check_in_a_subprocess(path, tmp_path)
        assert result.returncode == 2
        message = result.stderr.removeprefix("xsim: error: ").rstrip("\n")
    else:
        with pytest.raises(xsim.SceneError) as info:
            load_scene(path)
        assert main(["check", str(path)]) == 2
        message = str(info.value)
        assert capsys.readouterr().err == f"xsim: error: {message}\n"
    assert message.startswith(f"{path}: {key}: expected "), message
    return message


def binary_stl(vertices) -> bytes:
    """A binary STL of the triangles ``vertices`` (m, 3, 3)."""
    tris = np.asarray(vertices, np.float32).reshape(-1, 3, 3)
    body = b"".join(struct.pack("<3f", 0, 0, 1) + t.tobytes() + b"\0\0" for t in tris)
    return b"\0" * 80 + struct.pack("<I", len(tris)) + body


# (file name, contents, line of the bad number or None for binary files)
BAD_VERTICES = {
    "obj nan": ("m.obj", GOOD_OBJ.replace("v 1 0 0", "v nan 0 0"), 2),
    "obj inf": ("m.obj", GOOD_OBJ.replace("v 0 0 1", "v 0 0 inf"), 4),
    "obj -inf": ("m.obj", GOOD_OBJ.replace("v 0 1 0", "v 0 -inf 0"), 3),
    "obj 1e39": ("m.obj", GOOD_OBJ.replace("v 0 0 0", "v 1e39 0 0"), 1),
    "ascii stl nan": ("m.stl", "solid s\nfacet normal 0 0 1\nouter loop\nvertex 0 0 0\nvertex nan 0 0\n"
                      "vertex 0 1 0\nendloop\nendfacet\nendsolid s\n", 5),
    "ascii ply nan": ("m.ply", "ply\nformat ascii 1.0\nelement vertex 3\nproperty float x\nproperty float y\n"
                      "property float z\nelement face 1\nproperty list uchar int vertex_indices\nend_header\n"
                      "0 0 0\n1 nan 0\n0 1 0\n3 0 1 2\n", 11),
    "binary stl nan": ("m.stl", binary_stl([[0, 0, 0], [np.nan, 0, 0], [0, 1, 0]]), None),
}


@pytest.mark.parametrize("place", PLACES)
@pytest.mark.parametrize("name,contents,line", BAD_VERTICES.values(), ids=BAD_VERTICES.keys())
def test_non_finite_vertex_names_the_file_and_line(tmp_path, capsys, place, name, contents, line):
    file = tmp_path / name
    (file.write_bytes if isinstance(contents, bytes) else file.write_text)(contents)
    message = refused(tmp_path, capsys, place, name)
    assert "vertices times scale are finite and at most 3.4e+38 in magnitude" in message
    if line is not None:
        assert f"{file}:{line}: " in message
    else:
        assert f'"{name}", whose vertex ' in message


def test_vertex_times_scale_beyond_float32_names_the_vertex(tmp_path, capsys):
    (tmp_path / "m.obj").write_text(GOOD_OBJ.replace("v 1 0 0", "v 1e30 0 0"))
    message = refused(tmp_path, capsys, "collider", "m.obj", scale=1e10)
    assert '"m.obj", whose vertex 1 is (1e+30, 0.0, 0.0) (times scale 1e+10)' in message


def _random(name):
    def make(tmp_path):
        (tmp_path / name).write_bytes(np.random.default_rng(18).integers(0, 256, 4096, dtype=np.uint8).tobytes())
        return name
    return make


def _write(name, contents):
    def make(tmp_path):
        (tmp_path / name).write_text(contents)
        return name
    return make


def _fifo(tmp_path):
    os.mkfifo(tmp_path / "pipe.obj")
    return "pipe.obj"


def _loop(tmp_path):
    (tmp_path / "a.obj").symlink_to(tmp_path / "b.obj")
    (tmp_path / "b.obj").symlink_to(tmp_path / "a.obj")
    return "a.obj"


def _dangling(tmp_path):
    (tmp_path / "gone.obj").symlink_to(tmp_path / "nothing.obj")
    return "gone.obj"


def _directory(tmp_path):
    (tmp_path / "dir.obj").mkdir()
    return "dir.obj"


# (how to make the file, fragment of what was found)
UNREADABLE = {
    "random bytes .stl": (_random("r.stl"), "unreadable or corrupt mesh file"),
    "random bytes .ply": (_random("r.ply"), "unreadable or corrupt mesh file"),
    "random bytes .glb": (_random("r.glb"), "unreadable or corrupt mesh file"),
    "binary stl with a wrong triangle count": (
        lambda tmp_path: (tmp_path / "t.stl").write_bytes(binary_stl([[0, 0, 0], [1, 0, 0], [0, 1, 0]])[:-10])
        and "t.stl", "unreadable or corrupt mesh file"),
    "an empty obj": (_write("e.obj", ""), "which has none"),
    "an obj without faces": (_write("v.obj", "v 0 0 0\nv 1 0 0\nv 0 1 0\n"), "which has none"),
    "a FIFO": (_fifo, "is not a regular file (a FIFO)"),
    "/dev/zero": (lambda tmp_path: "/dev/zero", "is not a regular file (a character device)"),
    "a symlink loop": (_loop, "is a symlink loop"),
    "a dangling symlink": (_dangling, "does not exist"),
    "a directory": (_directory, "is a directory"),
}


@pytest.mark.parametrize("make,fragment", UNREADABLE.values(), ids=UNREADABLE.keys())
def test_unreadable_mesh_file_is_explained(tmp_path, capsys, make, fragment):
    message = refused(tmp_path, capsys, "collider", make(tmp_path))
    assert fragment in message


def test_symlink_loop_names_its_key_path_for_a_body_shape(tmp_path, capsys):
    message = refused(tmp_path, capsys, "body shape", _loop(tmp_path))
    assert f"and {tmp_path / 'a.obj'} is a symlink loop" in message


@pytest.mark.parametrize("place", PLACES)
def test_a_good_mesh_loads_scaled(tmp_path, place):
    (tmp_path / "m.obj").write_text(GOOD_OBJ)
    text, _ = PLACES[place]
    path = tmp_path / "scene.toml"
    path.write_text(text.format(mesh="m.obj", scale=2.0))
    scene = load_scene(path)
    spec = {"collider": lambda: scene.colliders[0], "cloth": lambda: scene.cloths[0],
            "body shape": lambda: scene.bodies[0]["shape"][0]}[place]()
    assert spec["vertices"].dtype == np.float32
    np.testing.assert_array_equal(spec["vertices"], 2.0 * np.array([[0, 0, 0], [1, 0, 0], [0, 1, 0], [0, 0, 1]]))
    assert spec["indices"].tolist() == [[0, 2, 1], [0, 1, 3], [0, 3, 2], [1, 2, 3]]


@pytest.mark.parametrize("place", PLACES)
def test_a_vertex_a_hair_from_zero_loads_and_builds(tmp_path, place):
    (tmp_path / "m.obj").write_text(GOOD_OBJ.replace("v 1 0 0", "v 1 1e-45 -1e-300"))
    text, _ = PLACES[place]
    path = tmp_path / "scene.toml"
    path.write_text(text.format(mesh="m.obj", scale=1.0))
    scene = load_scene(path)
    builder = scene.builder()
    assert builder.particle_count == (4 if place == "cloth" else 0)
    assert len(builder.colliders) == (1 if place == "collider" else 0)
    # a static collider is a shape on body -1, a body's shape one on its body
    assert [sh["body"] >= 0 for sh in builder.shapes] == ([True] if place == "body shape" else
                                                          [False] if place == "collider" else [])
