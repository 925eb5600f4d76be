"""Contact geometry of the new shape kinds against independent references, in float64: the signed
distance, normal and closest point of random points to a cylinder, cone and ellipsoid (what a sphere, a
capsule's end, a box corner or a particle meets) against python-fcl and exact closed forms, and the
depth and contact point of a cylinder, cone, ellipsoid and convex hull in random poses against a plane
(their support points) against the closed form of their lowest point, with the tape's gradient of
that depth against central differences."""

import numpy as np
import pytest
import trimesh
from scipy.optimize import minimize

import xsim
from xsim.collision.surfaces import contact_geometry, surface_contact
from xsim.sim.shapes import (
    SHAPE_CONE,
    SHAPE_CONVEX_MESH,
    SHAPE_CYLINDER,
    SHAPE_ELLIPSOID,
    SHAPE_PLANE,
    cone_points,
    cylinder_points,
    quat_to_matrix,
)

V3, TF = xsim.vec3d, xsim.transformd
RNG = np.random.default_rng(11)


@xsim.kernel
def surface_depths(kind: int, size: xsim.vec3d, points: xsim.array(dtype=xsim.vec3d),
                   normals: xsim.array(dtype=xsim.vec3d), depths: xsim.array(dtype=xsim.float64)):
    i = xsim.tid()
    n, pen = surface_contact(kind, points[i], size, xsim.float64(0.0))
    normals[i] = n
    depths[i] = pen


@xsim.kernel
def plane_depths(kind: int, size: xsim.vec3d, k: int, point: xsim.vec3d, poses: xsim.array(dtype=xsim.transformd),
                 frames: xsim.array(dtype=xsim.transformd), depths: xsim.array(dtype=xsim.float64),
                 contact_points: xsim.array(dtype=xsim.vec3d)):
    """Depth of contact point ``k`` of a shape at ``poses[i]`` against the plane z = 0 (frames[0]: the
    shape's frame in its body, the identity; the plane's body sits at the origin)."""
    i = xsim.tid()
    x = poses[i]
    sx = frames[0]
    _n, pen, ca, _cb = contact_geometry(xsim.transform_get_translation(x), xsim.transform_get_rotation(x), sx, kind,
                                        size, k, point, xsim.float64(0.0), xsim.transform_get_translation(sx),
                                        xsim.transform_get_rotation(sx), sx, SHAPE_PLANE, size)
    depths[i] = pen
    contact_points[i] = ca


def measure(kind, size, points):
    n = len(points)
    normals, depths = xsim.zeros(n, dtype=V3), xsim.zeros(n, dtype=xsim.float64)
    xsim.launch(surface_depths, n, inputs=[kind, V3(*size), xsim.array(points, dtype=V3)], outputs=[normals, depths])
    return normals.numpy(), depths.numpy()


def segment_distances(p2: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Distances (n,) of 2-D points (n, 2) to the segment a-b."""
    d = b - a
    t = np.clip((p2 - a) @ d / (d @ d), 0.0, 1.0)
    return np.linalg.norm(p2 - (a + t[:, None] * d), axis=1)


def polygon_sdf(p2: np.ndarray, corners: np.ndarray) -> np.ndarray:
    """Signed distance (n,) of 2-D points to a convex polygon (corners counter-clockwise): < 0 inside."""
    dist = np.min([segment_distances(p2, corners[i], corners[(i + 1) % len(corners)])
                   for i in range(len(corners))], axis=0)
    edges = np.roll(corners, -1, axis=0) - corners
    cross = edges[None, :, 0] * (p2[:, None, 1] - corners[None, :, 1]) - \
        edges[None, :, 1] * (p2[:, None, 0] - corners[None, :, 0])
    return np.where(np.all(cross >= 0.0, axis=1), -dist, dist)


def revolved_sdf(points: np.ndarray, corners: np.ndarray) -> np.ndarray:
    """Signed distance of 3-D points to the solid that the polygon (in the (x, z) plane, symmetric about
    x = 0) sweeps about z: its 2-D distance at (distance from the axis, z)."""
    return polygon_sdf(np.stack([np.hypot(points[:, 0], points[:, 1]), points[:, 2]], 1), corners)


def ellipsoid_sdf(points: np.ndarray, radii: np.ndarray) -> np.ndarray:
    """Signed distance to an ellipsoid by minimizing the distance over its surface (several starts)."""
    out = np.empty(len(points))
    for i, p in enumerate(points):
        def d2(angles, p=p):
            u, v = angles
            x = radii * np.array([np.cos(u) * np.cos(v), np.sin(u) * np.cos(v), np.sin(v)])
            return np.sum((p - x) ** 2)
        best = min((minimize(d2, s, method="BFGS", options={"gtol": 1e-14}) for s in
                    [(a, b) for a in np.linspace(-3, 3, 5) for b in (-1.0, 0.0, 1.0)]), key=lambda r: r.fun)
        out[i] = np.sqrt(best.fun) * (1.0 if np.sum((p / radii) ** 2) > 1.0 else -1.0)
    return out


def fcl_distances(geometry, points: np.ndarray) -> np.ndarray:
    """python-fcl's distance of each point (outside the shape) to it. (Its cone is not used: for a point
    below the base's centre fcl 0.7 gives the distance to the rim, not to the base.)"""
    import fcl

    shape = fcl.CollisionObject(geometry, fcl.Transform())
    out = []
    for p in points:
        dot = fcl.CollisionObject(fcl.Sphere(1e-12), fcl.Transform(np.asarray(p, dtype=np.float64)))
        out.append(fcl.distance(dot, shape, fcl.DistanceRequest(), fcl.DistanceResult()))
    return np.array(out)


R, H = 0.3, 0.5
CORNERS = {SHAPE_CYLINDER: np.array([[-R, -H], [R, -H], [R, H], [-R, H]]),
           SHAPE_CONE: np.array([[-R, -H], [R, -H], [0.0, H]])}


@pytest.mark.parametrize("kind", [SHAPE_CYLINDER, SHAPE_CONE, SHAPE_ELLIPSOID], ids=["cylinder", "cone", "ellipsoid"])
def test_distance_normal_and_closest_point_of_random_points_match_the_exact_ones(kind):
    size = (0.3, 0.2, 0.5) if kind == SHAPE_ELLIPSOID else (R, H, 0.0)
    count = 300 if kind == SHAPE_ELLIPSOID else 3000
    points = RNG.uniform(-1.0, 1.0, size=(count, 3)) * 1.6 * np.array([0.3, 0.3, 0.5])
    normals, depths = measure(kind, size, points)
    sdf = (lambda x: ellipsoid_sdf(x, np.array(size))) if kind == SHAPE_ELLIPSOID else \
        (lambda x: revolved_sdf(x, CORNERS[kind]))
    exact = sdf(points)
    assert (exact < 0).sum() > count // 20 and (exact > 0).sum() > count // 20  # inside and outside both tried
    # the ellipsoid's reference is an optimizer's minimum: good to about 1e-8 m
    np.testing.assert_allclose(-depths, exact, rtol=0, atol=1e-7 if kind == SHAPE_ELLIPSOID else 1e-9)
    np.testing.assert_allclose(np.linalg.norm(normals, axis=1), 1.0, atol=1e-12)
    # the point the contact pushes to, p + n depth, lies on the surface (at the distance: a closest point)
    closest = points + normals * depths[:, None]
    if kind == SHAPE_ELLIPSOID:
        np.testing.assert_allclose(np.sum((closest / size) ** 2, axis=1), 1.0, rtol=0, atol=1e-9)
    else:
        np.testing.assert_allclose(sdf(closest), 0.0, rtol=0, atol=1e-9)


@pytest.mark.parametrize("kind", [SHAPE_CYLINDER, SHAPE_ELLIPSOID], ids=["cylinder", "ellipsoid"])
def test_distances_outside_match_python_fcl(kind):
    import fcl

    size = (0.3, 0.2, 0.5) if kind == SHAPE_ELLIPSOID else (R, H, 0.0)
    geometry = fcl.Ellipsoid(*size) if kind == SHAPE_ELLIPSOID else fcl.Cylinder(R, 2 * H)
    points = RNG.normal(size=(400, 3))
    points = points / np.linalg.norm(points, axis=1, keepdims=True) * RNG.uniform(0.7, 2.0, size=(400, 1))
    _normals, depths = measure(kind, size, points)
    outside = depths < -1e-3
    assert outside.sum() > 300
    ours, theirs = -depths[outside], fcl_distances(geometry, points[outside])
    if kind == SHAPE_CYLINDER:
        np.testing.assert_allclose(ours, theirs, rtol=0, atol=2e-6)
    else:
        # fcl's GJK stops early on an ellipsoid: its distance is an upper bound, up to 2.3e-4 m above ours
        # here (ours agrees with the optimizer's minimum to 1e-7, the test above); most agree to 2e-6
        assert np.all(ours <= theirs + 1e-9)
        assert np.mean(theirs - ours < 2e-6) > 0.9


def random_unit_quaternions(n: int) -> np.ndarray:
    q = RNG.normal(size=(n, 4))
    return q / np.linalg.norm(q, axis=1, keepdims=True)


HULL_POINTS = np.asarray(trimesh.creation.icosphere(1).vertices) * (0.3, 0.2, 0.1)
KINDS = {"cylinder": (SHAPE_CYLINDER, (R, H, 0.0), cylinder_points(R, H)),
         "cone": (SHAPE_CONE, (R, H, 0.0), cone_points(R, H)),
         "ellipsoid": (SHAPE_ELLIPSOID, (0.3, 0.2, 0.5), np.array([[0.0, 0.0, -0.5]])),
         "hull": (SHAPE_CONVEX_MESH, (0.0, 0.0, 0.0), HULL_POINTS)}


def lowest_point(name: str, q: np.ndarray) -> np.ndarray:
    """The exact lowest point (3,) of the shape turned by ``q`` about its frame's origin."""
    rot = quat_to_matrix(q)
    down = rot.T @ [0.0, 0.0, -1.0]  # in the shape's frame
    if name == "ellipsoid":
        a = np.array([0.3, 0.2, 0.5])
        local = a * a * down / np.linalg.norm(a * down)
    elif name == "hull":
        local = HULL_POINTS[np.argmax(HULL_POINTS @ down)]
    else:
        side = down[:2] / np.linalg.norm(down[:2]) * R
        rims = [np.array([side[0], side[1], -H])]
        rims.append(np.array([side[0], side[1], H]) if name == "cylinder" else np.array([0.0, 0.0, H]))
        local = max(rims, key=lambda x: x @ down)
    return rot @ local


@pytest.mark.parametrize("name", list(KINDS))
def test_depth_against_a_plane_is_the_lowest_point_in_random_poses(name):
    kind, size, points = KINDS[name]
    n = 200
    quats = random_unit_quaternions(n)
    heights = RNG.uniform(-0.3, 0.3, size=n)
    poses = np.concatenate([np.zeros((n, 2)), heights[:, None], quats], 1)
    frames = xsim.array(np.array([[0, 0, 0, 0, 0, 0, 1.0]]), dtype=TF)
    best_depth, best_point = np.full(n, -np.inf), np.zeros((n, 3))
    for k, p in enumerate(points):
        depths, cps = xsim.zeros(n, dtype=xsim.float64), xsim.zeros(n, dtype=V3)
        xsim.launch(plane_depths, n, inputs=[kind, V3(*size), k, V3(*p), xsim.array(poses, dtype=TF), frames],
                    outputs=[depths, cps])
        d, c = depths.numpy(), cps.numpy()
        better = d > best_depth
        best_depth[better], best_point[better] = d[better], c[better]
    exact = np.array([lowest_point(name, q) for q in quats]) + np.stack([np.zeros(n), np.zeros(n), heights], 1)
    np.testing.assert_allclose(best_depth, -exact[:, 2], rtol=0, atol=1e-12)
    np.testing.assert_allclose(best_point, exact, rtol=0, atol=1e-12)


@pytest.mark.parametrize("name", ["cylinder", "cone", "ellipsoid"])
def test_support_contact_depth_gradient_matches_central_differences(name):
    kind, size, _points = KINDS[name]
    q = random_unit_quaternions(1)[0]
    pose = np.concatenate([[0.1, -0.2, 0.05], q])
    frames = xsim.array(np.array([[0, 0, 0, 0, 0, 0, 1.0]]), dtype=TF)

    def depth(x, tape=None):
        poses = xsim.array(x[None, :], dtype=TF, requires_grad=tape is not None)
        depths, cps = (xsim.zeros(1, dtype=xsim.float64, requires_grad=tape is not None),
                       xsim.zeros(1, dtype=V3, requires_grad=tape is not None))
        if tape is None:
            xsim.launch(plane_depths, 1, inputs=[kind, V3(*size), 0, V3(0.0, 0.0, 0.0), poses, frames],
                        outputs=[depths, cps])
            return depths.numpy()[0]
        with tape:
            xsim.launch(plane_depths, 1, inputs=[kind, V3(*size), 0, V3(0.0, 0.0, 0.0), poses, frames],
                        outputs=[depths, cps])
        tape.backward(grads={depths: xsim.array([1.0], dtype=xsim.float64)})
        return poses.grad.numpy()[0]

    grad = depth(pose, xsim.Tape())
    eps = 1e-6
    fd = np.array([(depth(pose + eps * e) - depth(pose - eps * e)) / (2 * eps) for e in np.eye(7)])
    assert abs(grad[2] + 1.0) < 1e-12  # lifting the shape by dz lifts its lowest point by dz
    assert np.abs(fd[3:]).max() > 1e-2  # its rotation moves the lowest point
    np.testing.assert_allclose(grad, fd, rtol=0, atol=1e-7)
