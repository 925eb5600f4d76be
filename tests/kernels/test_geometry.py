"""Geometry queries (``xsim.Mesh``, ``xsim.HashGrid`` and their kernel builtins) against plain numpy
brute force over every triangle or point pair, and their gradients against float64 finite
differences of the same numpy references."""

import gc

import numpy as np
import pytest
import trimesh

import xsim as wp
from xsim.kernels.generated import load_source

# ---------------------------------------------------------------------------------------------
# kernels (module level: compiled once)


@wp.func
def store_point_query(mesh: wp.uint64, p: wp.vec3, q: wp.MeshQueryPoint, i: int, k: int,
                      closest: wp.array2d(dtype=wp.vec3), signs: wp.array2d(dtype=float),
                      faces: wp.array2d(dtype=int)):
    closest[i, k] = wp.mesh_eval_position(mesh, q.face, q.u, q.v)
    signs[i, k] = q.sign
    faces[i, k] = wp.where(q.result, q.face, -1)


@wp.kernel
def point_queries(mesh: wp.uint64, points: wp.array(dtype=wp.vec3), max_dist: float,
                  closest: wp.array2d(dtype=wp.vec3), signs: wp.array2d(dtype=float),
                  faces: wp.array2d(dtype=int), same_as_outputs: wp.array(dtype=int)):
    i = wp.tid()
    p = points[i]
    q0 = wp.mesh_query_point(mesh, p, max_dist)
    q1 = wp.mesh_query_point_no_sign(mesh, p, max_dist)
    q2 = wp.mesh_query_point_sign_normal(mesh, p, max_dist)
    q3 = wp.mesh_query_point_sign_winding_number(mesh, p, max_dist)
    store_point_query(mesh, p, q0, i, 0, closest, signs, faces)
    store_point_query(mesh, p, q1, i, 1, closest, signs, faces)
    store_point_query(mesh, p, q2, i, 2, closest, signs, faces)
    store_point_query(mesh, p, q3, i, 3, closest, signs, faces)
    # Warp's older forms write the fields into output variables and return `result`
    sign = float(0.0)
    face = int(0)
    u = float(0.0)
    v = float(0.0)
    ok = wp.mesh_query_point(mesh, p, max_dist, sign, face, u, v)
    same = ok == q0.result and sign == q0.sign and face == q0.face and u == q0.u and v == q0.v
    ok = wp.mesh_query_point_no_sign(mesh, p, max_dist, face, u, v)
    same = same and ok == q1.result and face == q1.face and u == q1.u and v == q1.v
    ok = wp.mesh_query_point_sign_normal(mesh, p, max_dist, sign, face, u, v, 1.0e-3)
    same = same and ok == q2.result and sign == q2.sign and face == q2.face
    ok = wp.mesh_query_point_sign_winding_number(mesh, p, max_dist, sign, face, u, v, 2.0, 0.5)
    same = same and ok == q3.result and sign == q3.sign and face == q3.face
    same_as_outputs[i] = wp.where(same, 1, 0)


@wp.kernel
def cast_rays(mesh: wp.uint64, starts: wp.array(dtype=wp.vec3), dirs: wp.array(dtype=wp.vec3), max_t: float,
              t_out: wp.array(dtype=float), faces: wp.array(dtype=int), hits: wp.array(dtype=wp.vec3),
              normals: wp.array(dtype=wp.vec3), signs: wp.array(dtype=float), same_as_outputs: wp.array(dtype=int)):
    i = wp.tid()
    q = wp.mesh_query_ray(mesh, starts[i], dirs[i], max_t)
    t_out[i] = q.t
    faces[i] = wp.where(q.result, q.face, -1)
    hits[i] = wp.mesh_eval_position(mesh, q.face, q.u, q.v)
    normals[i] = q.normal
    signs[i] = q.sign
    t = float(0.0)
    u = float(0.0)
    v = float(0.0)
    sign = float(0.0)
    n = wp.vec3()
    f = int(-1)
    ok = wp.mesh_query_ray(mesh, starts[i], dirs[i], max_t, t, u, v, sign, n, f)
    same = ok == q.result and t == q.t and u == q.u and v == q.v and sign == q.sign and f == q.face
    same_as_outputs[i] = wp.where(same and n == q.normal, 1, 0)


@wp.kernel
def box_faces(mesh: wp.uint64, lows: wp.array(dtype=wp.vec3), highs: wp.array(dtype=wp.vec3),
              visits: wp.array2d(dtype=int)):
    b = wp.tid()
    query = wp.mesh_query_aabb(mesh, lows[b], highs[b])
    face = int(-1)
    while wp.mesh_query_aabb_next(query, face):
        visits[b, face] += 1


@wp.kernel
def grid_candidates(grid: wp.uint64, points: wp.array(dtype=wp.vec3), radius: float,
                    visits: wp.array2d(dtype=int), neighbours: wp.array2d(dtype=int)):
    t = wp.tid()
    i = wp.hash_grid_point_id(grid, t)
    p = points[i]
    query = wp.hash_grid_query(grid, p, radius)
    j = int(0)
    while wp.hash_grid_query_next(query, j):
        visits[i, j] += 1
        if wp.length(points[j] - p) <= radius:
            neighbours[i, j] = 1


@wp.kernel
def grid_energy(grid: wp.uint64, points: wp.array(dtype=wp.vec3), radius: float, energy: wp.array(dtype=float)):
    i = wp.tid()
    p = points[i]
    query = wp.hash_grid_query(grid, p, radius)
    j = int(0)
    e = float(0.0)
    while wp.hash_grid_query_next(query, j):
        d = wp.length(points[j] - p)
        if d < radius and j != i:
            e += (radius - d) * (radius - d)
    wp.atomic_add(energy, 0, e)


@wp.kernel
def closest_point_loss(mesh: wp.uint64, points: wp.array(dtype=wp.vec3), w: wp.vec3,
                       faces: wp.array(dtype=int), loss: wp.array(dtype=float)):
    i = wp.tid()
    q = wp.mesh_query_point_no_sign(mesh, points[i], 1.0e6)
    cp = wp.mesh_eval_position(mesh, q.face, q.u, q.v)
    faces[i] = q.face
    wp.atomic_add(loss, 0, wp.dot(cp, w) + 0.5 * q.u - 0.25 * q.v)


@wp.kernel
def ray_loss(mesh: wp.uint64, starts: wp.array(dtype=wp.vec3), dirs: wp.array(dtype=wp.vec3),
             faces: wp.array(dtype=int), loss: wp.array(dtype=float)):
    i = wp.tid()
    q = wp.mesh_query_ray(mesh, starts[i], dirs[i], 1.0e6)
    faces[i] = wp.where(q.result, q.face, -1)
    wp.atomic_add(loss, 0, q.t + 0.3 * q.u - 0.7 * q.v)


@wp.kernel
def eval_velocity(mesh: wp.uint64, faces: wp.array(dtype=int), uv: wp.array(dtype=wp.vec2),
                  out: wp.array(dtype=wp.vec3)):
    i = wp.tid()
    out[i] = wp.mesh_eval_velocity(mesh, faces[i], uv[i][0], uv[i][1])


# ---------------------------------------------------------------------------------------------
# numpy references


def _dot(a, b):
    return np.einsum("...i,...i->...", a, b)


def closest_on_triangles(a, b, c, p):
    """The closest point of each triangle (a, b, c broadcast with p) to p and its corner weights,
    float64: the plane projection when its barycentrics are all >= 0, else the nearest of the
    three edge segments' closest points."""
    e1, e2, d = b - a, c - a, p - a
    g11, g12, g22 = _dot(e1, e1), _dot(e1, e2), _dot(e2, e2)
    det = g11 * g22 - g12 * g12
    r1, r2 = _dot(e1, d), _dot(e2, d)
    wb = (g22 * r1 - g12 * r2) / det
    wc = (g11 * r2 - g12 * r1) / det
    inside = (wb >= 0) & (wc >= 0) & (wb + wc <= 1)
    best_w = np.stack([1 - wb - wc, wb, wc], -1)
    best_d = np.where(inside, np.inf, np.inf)
    best_d = np.where(inside, np.linalg.norm(a + wb[..., None] * e1 + wc[..., None] * e2 - p, axis=-1), best_d)
    corners = (a, b, c)
    for k in range(3):
        s, e = corners[k], corners[(k + 1) % 3]
        t = np.clip(_dot(p - s, e - s) / _dot(e - s, e - s), 0.0, 1.0)
        q = s + t[..., None] * (e - s)
        dist = np.linalg.norm(q - p, axis=-1)
        w = np.zeros(dist.shape + (3,))
        w[..., k] = 1 - t
        w[..., (k + 1) % 3] = t
        better = ~inside & (dist < best_d)
        best_d = np.where(better, dist, best_d)
        best_w = np.where(better[..., None], w, best_w)
    cp = best_w[..., :1] * a + best_w[..., 1:2] * b + best_w[..., 2:] * c
    return cp, best_w


def brute_closest_distance(points, tris, queries):
    tri = points.astype(np.float64)[tris]
    a, b, c = (tri[None, :, k] for k in range(3))
    cp, _ = closest_on_triangles(a, b, c, queries.astype(np.float64)[:, None])
    return np.linalg.norm(cp - queries[:, None], axis=-1).min(axis=1)


def winding_numbers(points, tris, queries):
    """Sum of the triangles' solid angles (van Oosterom and Strackee) over 4 pi."""
    tri = points.astype(np.float64)[tris][None] - queries.astype(np.float64)[:, None, None]
    a, b, c = tri[..., 0, :], tri[..., 1, :], tri[..., 2, :]
    la, lb, lc = (np.linalg.norm(x, axis=-1) for x in (a, b, c))
    det = _dot(a, np.cross(b, c))
    den = la * lb * lc + _dot(a, b) * lc + _dot(b, c) * la + _dot(c, a) * lb
    return (2 * np.arctan2(det, den)).sum(axis=1) / (4 * np.pi)


def moller_trumbore(points, tris, starts, dirs, max_t):
    """The closest hit t of each ray against every triangle (inf on a miss), float64."""
    tri = points.astype(np.float64)[tris]
    a, e1, e2 = tri[:, 0], tri[:, 1] - tri[:, 0], tri[:, 2] - tri[:, 0]
    s, d = starts.astype(np.float64)[:, None], dirs.astype(np.float64)[:, None]
    pv = np.cross(d, e2)
    det = _dot(e1, pv)
    with np.errstate(divide="ignore", invalid="ignore"):
        inv = 1.0 / det
        tv = s - a
        u = _dot(tv, pv) * inv
        qv = np.cross(tv, e1)
        v = _dot(d, qv) * inv
        t = _dot(e2, qv) * inv
    ok = (det != 0) & (u >= 0) & (v >= 0) & (u + v <= 1) & (t >= 0) & (t < max_t)
    return np.where(ok, t, np.inf).min(axis=1)


def make_mesh(tm, jitter=0.0, seed=0, velocities=None):
    rng = np.random.default_rng(seed)
    pts = (tm.vertices + rng.normal(scale=jitter, size=tm.vertices.shape)).astype(np.float32)
    tris = np.asarray(tm.faces, np.int32)
    vel = None if velocities is None else wp.array(velocities.astype(np.float32), dtype=wp.vec3)
    mesh = wp.Mesh(wp.array(pts, dtype=wp.vec3), wp.array(tris.ravel(), dtype=wp.int32), velocities=vel)
    return mesh, pts, tris


def run_point_queries(mesh, queries, max_dist=1.0e6):
    n = len(queries)
    closest = wp.zeros((n, 4), dtype=wp.vec3)
    signs = wp.zeros((n, 4), dtype=float)
    faces = wp.zeros((n, 4), dtype=int)
    same = wp.zeros(n, dtype=int)
    wp.launch(point_queries, n, [mesh.id, wp.array(queries.astype(np.float32), dtype=wp.vec3), max_dist,
                                 closest, signs, faces, same])
    return closest.numpy(), signs.numpy(), faces.numpy(), same.numpy()


def _random_meshes():
    return {"icosphere": (trimesh.creation.icosphere(subdivisions=2), 0.02),
            "torus": (trimesh.creation.torus(1.0, 0.3, major_sections=24, minor_sections=12), 0.01),
            "soup": (trimesh.creation.random_soup(150), 0.0)}


# ---------------------------------------------------------------------------------------------
# closest points and signs


@pytest.mark.parametrize("name", ["icosphere", "torus", "soup"])
def test_closest_point_distance_matches_brute_force_over_all_triangles(name):
    tm, jitter = _random_meshes()[name]
    mesh, pts, tris = make_mesh(tm, jitter, seed=1)
    rng = np.random.default_rng(2)
    lo, hi = pts.min(0) - 0.5, pts.max(0) + 0.5
    queries = rng.uniform(lo, hi, size=(300, 3)).astype(np.float32)
    closest, _, faces, same = run_point_queries(mesh, queries)
    want = brute_closest_distance(pts, tris, queries)
    for k in range(4):  # every sign method finds the same closest point
        assert (faces[:, k] >= 0).all()
        got = np.linalg.norm(closest[:, k] - queries, axis=1)
        np.testing.assert_allclose(got, want, atol=2e-6, rtol=1e-5)
    assert same.all(), "the output-argument forms differ from the struct forms"


def test_closest_point_respects_max_dist():
    mesh, pts, tris = make_mesh(trimesh.creation.icosphere(subdivisions=1))
    queries = np.array([[0.0, 0.0, 1.5], [0.0, 0.0, 1.2], [0.0, 0.0, 0.0]], np.float32)
    want = brute_closest_distance(pts, tris, queries)
    _, _, faces, _ = run_point_queries(mesh, queries, max_dist=0.35)
    assert (faces[:, 0] >= 0).tolist() == (want < 0.35).tolist() == [False, True, False]


@pytest.mark.parametrize("shape", ["box", "icosphere", "torus", "annulus"])
def test_signs_are_negative_exactly_inside_closed_meshes(shape):
    tm = {"box": trimesh.creation.box(extents=(1.0, 2.0, 0.5)),
          "icosphere": trimesh.creation.icosphere(subdivisions=2),
          "torus": trimesh.creation.torus(1.0, 0.35, major_sections=24, minor_sections=12),
          "annulus": trimesh.creation.annulus(0.5, 1.0, height=0.6)}[shape]
    mesh, pts, tris = make_mesh(tm)
    rng = np.random.default_rng(3)
    queries = rng.uniform(pts.min(0) - 0.3, pts.max(0) + 0.3, size=(400, 3)).astype(np.float32)
    # points within 1e-3 of the surface are left out: float32 cannot tell their side reliably
    queries = queries[brute_closest_distance(pts, tris, queries) > 1e-3]
    inside = winding_numbers(pts, tris, queries) > 0.5
    assert 20 < inside.sum() < len(queries) - 20
    _, signs, _, _ = run_point_queries(mesh, queries)
    for k, method in ((0, "rays"), (2, "pseudo-normal"), (3, "winding number")):
        np.testing.assert_array_equal(signs[:, k] < 0, inside, err_msg=method)
    assert (signs[:, 1] == 0).all()  # no_sign leaves the sign 0


def test_box_corner_and_edge_regions_use_pseudo_normals():
    """Points whose closest point is a box corner or edge: the face normal of one adjacent face
    would misjudge some of them; the angle-weighted pseudo-normal must not."""
    mesh, _, _ = make_mesh(trimesh.creation.box())
    near_corner_outside = [[0.6, 0.55, 0.7], [-0.52, -0.6, 0.51]]
    near_edge_outside = [[0.6, 0.55, 0.0], [0.0, -0.51, 0.7]]
    just_inside = [[0.49, 0.48, 0.47], [-0.49, 0.0, 0.49]]
    queries = np.array(near_corner_outside + near_edge_outside + just_inside, np.float32)
    _, signs, _, _ = run_point_queries(mesh, queries)
    np.testing.assert_array_equal(signs[:, 2], [1, 1, 1, 1, -1, -1])
    np.testing.assert_array_equal(signs[:, 0], [1, 1, 1, 1, -1, -1])


# ---------------------------------------------------------------------------------------------
# rays


@pytest.mark.parametrize("name", ["icosphere", "torus", "soup"])
def test_rays_match_moller_trumbore_over_all_triangles(name):
    tm, jitter = _random_meshes()[name]
    mesh, pts, tris = make_mesh(tm, jitter, seed=4)
    rng = np.random.default_rng(5)
    n = 400
    starts = rng.uniform(pts.min(0) - 1.0, pts.max(0) + 1.0, size=(n, 3)).astype(np.float32)
    targets = rng.uniform(pts.min(0), pts.max(0), size=(n, 3))
    dirs = (targets - starts).astype(np.float32)
    dirs[: n // 4] *= np.float32(-1.0)  # many of these miss
    max_t = 3.0
    t_out, faces, hits, normals, signs = (wp.zeros(n, dtype=d) for d in (float, int, wp.vec3, wp.vec3, float))
    same = wp.zeros(n, dtype=int)
    wp.launch(cast_rays, n, [mesh.id, wp.array(starts, dtype=wp.vec3), wp.array(dirs, dtype=wp.vec3), max_t,
                             t_out, faces, hits, normals, signs, same])
    want_t = moller_trumbore(pts, tris, starts, dirs, max_t)
    faces, t_out = faces.numpy(), t_out.numpy()
    hit = np.isfinite(want_t)
    assert 50 < hit.sum() < n - 50
    np.testing.assert_array_equal(faces >= 0, hit)
    np.testing.assert_allclose(t_out[hit], want_t[hit], rtol=1e-5, atol=1e-6)
    # the reported barycentrics give the hit point
    np.testing.assert_allclose(hits.numpy()[hit], starts[hit] + t_out[hit, None] * dirs[hit], atol=1e-4)
    f = faces[hit]
    tri = pts.astype(np.float64)[tris[f]]
    n_want = np.cross(tri[:, 1] - tri[:, 0], tri[:, 2] - tri[:, 0])
    n_want /= np.linalg.norm(n_want, axis=1, keepdims=True)
    np.testing.assert_allclose(normals.numpy()[hit], n_want, atol=1e-5)
    # Warp's sign: the determinant of the watertight ray test, -dot(cross(b - a, c - a), dir) / max |dir_i|
    area_normal = np.cross(tri[:, 1] - tri[:, 0], tri[:, 2] - tri[:, 0])
    det = -_dot(dirs[hit].astype(np.float64), area_normal) / np.abs(dirs[hit]).max(1)
    np.testing.assert_allclose(signs.numpy()[hit], det, rtol=1e-4, atol=1e-6 * np.abs(det).max())
    assert same.numpy().all(), "the output-argument form differs from the struct form"


RAY_SOURCE = """
import {engine} as m


@m.kernel
def cast(mesh: m.uint64, starts: m.array(dtype=m.vec3), dirs: m.array(dtype=m.vec3), signs: m.array(dtype=float),
         faces: m.array(dtype=int)):
    i = m.tid()
    q = m.mesh_query_ray(mesh, starts[i], dirs[i], 100.0)
    signs[i] = q.sign
    faces[i] = m.where(q.result, q.face, -1)
"""


def test_ray_signs_equal_warps_bit_for_bit():
    warp = pytest.importorskip("warp")
    warp.config.quiet = True
    tm = trimesh.creation.icosphere(2)
    pts, tris = np.asarray(tm.vertices, np.float32), np.asarray(tm.faces, np.int32)
    rng = np.random.default_rng(1)
    starts = rng.uniform(-3, 3, (200, 3)).astype(np.float32)
    dirs = ((rng.uniform(-0.5, 0.5, (200, 3)) - starts) * rng.uniform(0.1, 3, (200, 1))).astype(np.float32)

    def cast(engine):
        kernel = load_source(RAY_SOURCE.format(engine=engine.__name__), f"rays_{engine.__name__}").cast
        mesh = engine.Mesh(points=engine.array(pts, dtype=engine.vec3), indices=engine.array(tris.ravel(), dtype=int))
        signs, faces = engine.zeros(200, dtype=float), engine.zeros(200, dtype=int)
        engine.launch(kernel, 200, inputs=[mesh.id, engine.array(starts, dtype=engine.vec3),
                                           engine.array(dirs, dtype=engine.vec3), signs, faces], device="cpu")
        return signs.numpy(), faces.numpy()

    (signs, faces), (want_signs, want_faces) = cast(wp), cast(warp)
    assert (faces >= 0).sum() > 150
    np.testing.assert_array_equal(faces, want_faces)
    np.testing.assert_array_equal(signs, want_signs)


def test_rays_through_a_shared_edge_do_not_leak():
    pts = np.array([[0.0, 0.0, 0.0], [0.0, 0.5, 0.0], [0.5, 0.0, 0.0], [0.5, 0.5, 0.0]], np.float32)
    tris = np.array([[1, 0, 2], [1, 2, 3]], np.int32)
    mesh = wp.Mesh(wp.array(pts, dtype=wp.vec3), wp.array(tris.ravel(), dtype=wp.int32))
    xy = np.linspace(0.05, 0.45, 41, dtype=np.float32)
    starts = np.stack([xy, 0.5 - xy, np.ones_like(xy)], 1)  # on the diagonal from (0, .5) to (.5, 0)
    dirs = np.tile(np.float32([0, 0, -1]), (len(xy), 1))
    n = len(xy)
    outs = [wp.zeros(n, dtype=d) for d in (float, int, wp.vec3, wp.vec3, float, int)]
    wp.launch(cast_rays, n, [mesh.id, wp.array(starts, dtype=wp.vec3), wp.array(dirs, dtype=wp.vec3), 10.0, *outs])
    assert (outs[1].numpy() >= 0).all()
    np.testing.assert_allclose(outs[0].numpy(), 1.0)


# ---------------------------------------------------------------------------------------------
# boxes and hash grids


def test_aabb_query_visits_exactly_the_faces_whose_bounds_overlap():
    tm, jitter = _random_meshes()["torus"]
    mesh, pts, tris = make_mesh(tm, jitter, seed=6)
    rng = np.random.default_rng(7)
    nb = 60
    centers = rng.uniform(pts.min(0), pts.max(0), size=(nb, 3))
    half = rng.uniform(0.01, 0.6, size=(nb, 3))
    lows, highs = (centers - half).astype(np.float32), (centers + half).astype(np.float32)
    visits = wp.zeros((nb, len(tris)), dtype=int)
    wp.launch(box_faces, nb, [mesh.id, wp.array(lows, dtype=wp.vec3), wp.array(highs, dtype=wp.vec3), visits])
    tri = pts[tris]
    tlo, thi = tri.min(1), tri.max(1)
    want = ((tlo[None] <= highs[:, None]) & (thi[None] >= lows[:, None])).all(-1)
    np.testing.assert_array_equal(visits.numpy(), want.astype(int))  # each overlapping face once
    assert want.sum() > 100


@pytest.mark.parametrize("dims", [(16, 16, 16), (3, 2, 5)])
def test_hash_grid_finds_every_neighbour_once(dims):
    """dims (3, 2, 5) is far smaller than the cloud, so many cells hash onto one bucket."""
    rng = np.random.default_rng(8)
    n, radius = 700, 0.25
    pts = rng.uniform(-1.0, 1.0, size=(n, 3)).astype(np.float32)
    pts[:50] += np.float32(7.3)  # far away, in a bucket shared with near points
    points = wp.array(pts, dtype=wp.vec3)
    grid = wp.HashGrid(*dims)
    grid.build(points, radius)
    visits, neighbours = wp.zeros((n, n), dtype=int), wp.zeros((n, n), dtype=int)
    wp.launch(grid_candidates, n, [grid.id, points, radius, visits, neighbours])
    dist = np.linalg.norm(pts[:, None] - pts[None], axis=-1)
    want = dist <= radius
    np.testing.assert_array_equal(neighbours.numpy(), want.astype(int))
    assert visits.numpy().max() == 1  # no candidate twice
    assert want.sum() > 4 * n  # about 5 neighbours each besides itself


def _points_on_cell_boundaries(width: float) -> np.ndarray:
    """Points whose coordinates are multiples of ``width`` in float32 and their float32 neighbours on each
    side: where float32 and float64 arithmetic put a coordinate in different cells."""
    base = (np.arange(-4, 5) * np.float32(width)).astype(np.float32)
    x = np.concatenate([base, np.nextafter(base, np.float32(np.inf)), np.nextafter(base, np.float32(-np.inf))])
    rng = np.random.default_rng(3)
    return np.stack([x, rng.permutation(x), rng.permutation(x)], 1).astype(np.float32)


def _float32_candidates(pts: np.ndarray, width: float, radius: float, dims) -> np.ndarray:
    """visits[i, j]: 1 where point j lies in a hashed cell that the query around point i visits, with Warp's
    arithmetic: cell = floor(x * (1 / width)) in float32, the query's range from x - r and x + r in float32."""
    f32 = np.float32
    inv = f32(1.0) / f32(width)
    dims = np.array(dims)
    cells = np.floor(pts * inv).astype(np.int64) % dims
    lo = np.floor((pts - f32(radius)) * inv).astype(np.int64)
    hi = np.minimum(np.floor((pts + f32(radius)) * inv).astype(np.int64), lo + dims - 1)
    visits = np.zeros((len(pts), len(pts)), int)
    for i in range(len(pts)):
        axes = [set(np.arange(lo[i, d], hi[i, d] + 1) % dims[d]) for d in range(3)]
        visits[i] = [all(cells[j, d] in axes[d] for d in range(3)) for j in range(len(pts))]
    return visits


CANDIDATES_SOURCE = """
import {engine} as m


@m.kernel
def candidates(grid: m.uint64, points: m.array(dtype=m.vec3), radius: float, visits: m.array2d(dtype=int)):
    i = m.tid()
    query = m.hash_grid_query(grid, points[i], radius)
    j = int(0)
    while m.hash_grid_query_next(query, j):
        visits[i, j] += 1
"""


def test_hash_grid_cells_near_boundaries_are_computed_in_float32_as_in_warp():
    width = 0.1  # not a binary fraction: 1 / width and x * (1 / width) round differently in float32 and float64
    pts = _points_on_cell_boundaries(width)
    n = len(pts)

    def candidates(engine):
        kernel = load_source(CANDIDATES_SOURCE.format(engine=engine.__name__), f"grid_{engine.__name__}").candidates
        points = engine.array(pts, dtype=engine.vec3)
        grid = engine.HashGrid(8, 8, 8)
        grid.build(points, width)
        visits = engine.zeros((n, n), dtype=int)
        engine.launch(kernel, n, inputs=[grid.id, points, width, visits], device="cpu")
        return visits.numpy()

    got = candidates(wp)
    np.testing.assert_array_equal(got, _float32_candidates(pts, width, width, (8, 8, 8)))
    warp = pytest.importorskip("warp")
    warp.config.quiet = True
    np.testing.assert_array_equal(got, candidates(warp))


def test_hash_grid_point_ids_are_a_cell_sorted_permutation():
    # a kernel of its own: joining this file's module would rebuild the module's nine kernels with it
    @wp.kernel(module="unique")
    def point_ids(grid: wp.uint64, out: wp.array(dtype=int)):
        t = wp.tid()
        out[t] = wp.hash_grid_point_id(grid, t)

    rng = np.random.default_rng(9)
    pts = rng.uniform(0, 1, size=(200, 3)).astype(np.float32)
    grid = wp.HashGrid(4, 4, 4)
    out = wp.zeros(202, dtype=int)
    wp.launch(point_ids, 202, [grid.id, out])
    assert (out.numpy() == -1).all()  # not built yet
    grid.build(wp.array(pts, dtype=wp.vec3), 0.25)
    wp.launch(point_ids, 202, [grid.id, out])
    ids = out.numpy()
    assert sorted(ids[:200]) == list(range(200)) and (ids[200:] == -1).all()
    cell = np.floor(pts[ids[:200]].astype(np.float64) * np.float32(4.0)).astype(int) % 4
    key = (cell[:, 2] * 4 + cell[:, 1]) * 4 + cell[:, 0]
    assert (np.diff(key) >= 0).all()


# ---------------------------------------------------------------------------------------------
# refit, velocities


def test_refit_and_new_points_follow_moved_vertices():
    mesh, pts, tris = make_mesh(trimesh.creation.icosphere(subdivisions=2))
    rng = np.random.default_rng(10)
    queries = rng.uniform(-3, 3, size=(200, 3)).astype(np.float32)
    moved = (pts * np.float32([2.0, 0.5, 1.0]) + np.float32([1.0, 0.0, 0.0])).astype(np.float32)
    mesh.points.assign(moved)
    mesh.refit()
    closest, _, _, _ = run_point_queries(mesh, queries)
    np.testing.assert_allclose(np.linalg.norm(closest[:, 1] - queries, axis=1),
                               brute_closest_distance(moved, tris, queries), atol=2e-6, rtol=1e-5)
    again = (moved * np.float32(0.3)).astype(np.float32)
    mesh.points = wp.array(again, dtype=wp.vec3)  # assigning new points refits
    closest, _, _, _ = run_point_queries(mesh, queries)
    np.testing.assert_allclose(np.linalg.norm(closest[:, 1] - queries, axis=1),
                               brute_closest_distance(again, tris, queries), atol=2e-6, rtol=1e-5)


def test_eval_velocity_interpolates_vertex_velocities():
    tm = trimesh.creation.icosphere(subdivisions=1)
    rng = np.random.default_rng(11)
    vel = rng.normal(size=tm.vertices.shape)
    mesh, _, tris = make_mesh(tm, velocities=vel)
    faces = rng.integers(0, len(tris), 50).astype(np.int32)
    uv = rng.uniform(0, 0.5, size=(50, 2)).astype(np.float32)
    out = wp.zeros(50, dtype=wp.vec3)
    args = [wp.array(faces, dtype=int), wp.array(uv, dtype=wp.vec2), out]
    wp.launch(eval_velocity, 50, [mesh.id, *args])
    v = vel.astype(np.float32)[tris[faces]]
    want = uv[:, :1] * v[:, 0] + uv[:, 1:] * v[:, 1] + (1 - uv.sum(1, keepdims=True)) * v[:, 2]
    np.testing.assert_allclose(out.numpy(), want, atol=1e-5)
    still, _, _ = make_mesh(tm)
    wp.launch(eval_velocity, 50, [still.id, *args])
    assert (out.numpy() == 0).all()  # no velocities: zero, as in Warp


# ---------------------------------------------------------------------------------------------
# gradients against float64 finite differences of the numpy references


def test_closest_point_gradient_matches_finite_differences():
    mesh, pts, tris = make_mesh(trimesh.creation.icosphere(subdivisions=1), 0.03, seed=12)
    rng = np.random.default_rng(13)
    dirs = rng.normal(size=(60, 3))
    queries = (dirs / np.linalg.norm(dirs, axis=1, keepdims=True) * rng.uniform(0.3, 1.6, (60, 1))).astype(np.float32)
    w = np.array([0.3, -1.2, 0.7])
    points = wp.array(queries, dtype=wp.vec3, requires_grad=True)
    faces = wp.zeros(60, dtype=int)
    loss = wp.zeros(1, dtype=float, requires_grad=True)
    tape = wp.Tape()
    with tape:
        wp.launch(closest_point_loss, 60, [mesh.id, points, wp.vec3(*w), faces, loss])
    tape.backward(loss)
    got = points.grad.numpy()
    tri = pts.astype(np.float64)[tris[faces.numpy()]]

    def per_point(q):
        cp, wts = closest_on_triangles(tri[:, 0], tri[:, 1], tri[:, 2], q)
        return cp @ w + 0.5 * wts[:, 0] - 0.25 * wts[:, 1], wts

    q0 = queries.astype(np.float64)
    _, w0 = per_point(q0)
    want = np.zeros_like(q0)
    eps, stable = 1e-6, np.ones(60, bool)
    for k in range(3):
        dq = np.zeros(3)
        dq[k] = eps
        (lp, wp_), (lm, wm) = per_point(q0 + dq), per_point(q0 - dq)
        want[:, k] = (lp - lm) / (2 * eps)
        # a point at a region border (face/edge/corner) has no derivative there: leave it out
        stable &= ((wp_ > 0) == (w0 > 0)).all(1) & ((wm > 0) == (w0 > 0)).all(1)
    regions = (w0[stable] > 1e-9).sum(1)
    assert {1, 2, 3} <= set(regions.tolist()), "corner, edge and face regions are all exercised"
    np.testing.assert_allclose(got[stable], want[stable], rtol=1e-3, atol=1e-4)


def test_ray_gradient_matches_finite_differences():
    mesh, pts, tris = make_mesh(trimesh.creation.icosphere(subdivisions=2), 0.02, seed=14)
    rng = np.random.default_rng(15)
    n = 40
    starts_np = (rng.normal(size=(n, 3)) * 0.1 + np.array([0.0, 0.0, -3.0])).astype(np.float32)
    dirs_np = (rng.uniform(-0.15, 0.15, size=(n, 3)) + np.array([0.0, 0.0, 1.0])).astype(np.float32)
    starts = wp.array(starts_np, dtype=wp.vec3, requires_grad=True)
    dirs = wp.array(dirs_np, dtype=wp.vec3, requires_grad=True)
    faces = wp.zeros(n, dtype=int)
    loss = wp.zeros(1, dtype=float, requires_grad=True)
    tape = wp.Tape()
    with tape:
        wp.launch(ray_loss, n, [mesh.id, starts, dirs, faces, loss])
    tape.backward(loss)
    f = faces.numpy()
    assert (f >= 0).all()
    tri = pts.astype(np.float64)[tris[f]]

    def per_ray(s, d):  # Moller-Trumbore on each ray's own face
        a, e1, e2 = tri[:, 0], tri[:, 1] - tri[:, 0], tri[:, 2] - tri[:, 0]
        pv = np.cross(d, e2)
        inv = 1.0 / _dot(e1, pv)
        tv = s - a
        wb = _dot(tv, pv) * inv
        qv = np.cross(tv, e1)
        wc = _dot(d, qv) * inv
        t = _dot(e2, qv) * inv
        return t + 0.3 * (1 - wb - wc) - 0.7 * wb

    s0, d0 = starts_np.astype(np.float64), dirs_np.astype(np.float64)
    eps = 1e-6
    for arr, grad, which in ((s0, starts.grad.numpy(), 0), (d0, dirs.grad.numpy(), 1)):
        want = np.zeros_like(arr)
        for k in range(3):
            dx = np.zeros(3)
            dx[k] = eps
            plus = per_ray(s0 + dx, d0) if which == 0 else per_ray(s0, d0 + dx)
            minus = per_ray(s0 - dx, d0) if which == 0 else per_ray(s0, d0 - dx)
            want[:, k] = (plus - minus) / (2 * eps)
        np.testing.assert_allclose(grad, want, rtol=1e-3, atol=1e-4)


def test_gradient_through_a_hash_grid_loop_matches_finite_differences():
    """The query state and index are carried by the while loop's condition; the adjoint replays the
    loop, condition included, to recover each neighbour."""
    rng = np.random.default_rng(16)
    n, radius = 150, 0.3
    pts = rng.uniform(-0.6, 0.6, size=(n, 3)).astype(np.float32)
    points = wp.array(pts, dtype=wp.vec3, requires_grad=True)
    grid = wp.HashGrid(8, 8, 8)
    grid.build(points, radius)
    energy = wp.zeros(1, dtype=float, requires_grad=True)
    tape = wp.Tape()
    with tape:
        wp.launch(grid_energy, n, [grid.id, points, radius, energy])
    tape.backward(energy)

    def total(x):
        d = np.linalg.norm(x[:, None] - x[None], axis=-1)
        near = (d < radius) & ~np.eye(n, dtype=bool)
        return np.where(near, (radius - d) ** 2, 0.0).sum()

    def pairs_of(x, i):  # the terms of total() that move with point i: its pairs, counted from both ends
        d = np.linalg.norm(x[i] - np.delete(x, i, axis=0), axis=-1)
        return 2 * np.where(d < radius, (radius - d) ** 2, 0.0).sum()

    x0 = pts.astype(np.float64)
    np.testing.assert_allclose(energy.numpy()[0], total(x0), rtol=1e-4)
    eps = 1e-6
    want = np.zeros_like(x0)
    for i in range(n):
        for k in range(3):
            xp, xm = x0.copy(), x0.copy()
            xp[i, k] += eps
            xm[i, k] -= eps
            want[i, k] = (pairs_of(xp, i) - pairs_of(xm, i)) / (2 * eps)
    np.testing.assert_allclose(points.grad.numpy(), want, rtol=1e-3, atol=1e-3)


# ---------------------------------------------------------------------------------------------
# bad input


def _box_arrays():
    tm = trimesh.creation.box()
    return (wp.array(tm.vertices.astype(np.float32), dtype=wp.vec3),
            np.asarray(tm.faces, np.int32).ravel())


def test_mesh_refuses_bad_indices_and_points():
    points, idx = _box_arrays()
    with pytest.raises(ValueError, match="3 vertex indices per triangle .* got 35"):
        wp.Mesh(points, wp.array(idx[:35], dtype=wp.int32))
    bad = idx.copy()
    bad[7] = 8
    with pytest.raises(ValueError, match=r"indices\[7\] = 8 is out of range for 8 points"):
        wp.Mesh(points, wp.array(bad, dtype=wp.int32))
    bad[7] = -1
    with pytest.raises(ValueError, match=r"indices\[7\] = -1 is out of range"):
        wp.Mesh(points, wp.array(bad, dtype=wp.int32))
    with pytest.raises(TypeError, match="indices must be a contiguous 1-d xsim.array of int32"):
        wp.Mesh(points, wp.array(idx.astype(np.float32), dtype=wp.float32))
    with pytest.raises(TypeError, match="points must be a contiguous 1-d xsim.array of xsim.vec3"):
        wp.Mesh(wp.array(points.numpy().astype(np.float64), dtype=wp.vec3d), wp.array(idx, dtype=wp.int32))
    with pytest.raises(ValueError, match="bvh_leaf_size must be at least 1"):
        wp.Mesh(points, wp.array(idx, dtype=wp.int32), bvh_leaf_size=0)


def test_hash_grid_refuses_bad_dimensions_and_radius():
    with pytest.raises(ValueError, match="dimensions must be positive"):
        wp.HashGrid(4, 0, 4)
    grid = wp.HashGrid(4, 4, 4)
    with pytest.raises(ValueError, match="cell width .* must be positive, got 0.0"):
        grid.build(wp.zeros(3, dtype=wp.vec3), 0.0)
    with pytest.raises(TypeError, match="points must be an xsim.array of xsim.vec3"):
        grid.build(wp.zeros(3, dtype=wp.vec3d), 1.0)


def test_launch_refuses_stale_foreign_and_wrong_kind_ids():
    points, idx = _box_arrays()
    mesh = wp.Mesh(points, wp.array(idx, dtype=wp.int32))
    grid = wp.HashGrid(2, 2, 2)
    q = np.zeros((1, 3), np.float32)
    run_point_queries(mesh, q)  # a live mesh works, also by an id read back from a uint64 array
    wp.launch(point_queries, 1, [np.uint64(mesh.id), wp.array(q, dtype=wp.vec3), 1.0, wp.zeros((1, 4), dtype=wp.vec3),
                                 wp.zeros((1, 4), dtype=float), wp.zeros((1, 4), dtype=int), wp.zeros(1, dtype=int)])
    stale = mesh.id
    del mesh
    gc.collect()
    args = [wp.array(q, dtype=wp.vec3), 1.0, wp.zeros((1, 4), dtype=wp.vec3), wp.zeros((1, 4), dtype=float),
            wp.zeros((1, 4), dtype=int), wp.zeros(1, dtype=int)]
    for bad, why in ((stale, "not the id of a live one"), (12345, "not the id of a live one"),
                     (grid.id, "it is the id of an xsim.HashGrid")):
        with pytest.raises(ValueError, match=f"kernel 'point_queries' parameter 'mesh': expected the id of an "
                                             f"xsim.Mesh, got {bad}, .*{why}"):
            wp.launch(point_queries, 1, [bad, *args])


def test_query_arguments_of_the_wrong_type_are_compile_errors():
    @wp.kernel(module="unique")  # as point_ids above
    def double_point(mesh: wp.uint64, out: wp.array(dtype=float)):
        q = wp.mesh_query_point(mesh, wp.vec3d(0.0, 0.0, 0.0), 1.0)
        out[0] = q.sign

    @wp.kernel(module="unique")
    def float_index(grid: wp.uint64, out: wp.array(dtype=float)):
        query = wp.hash_grid_query(grid, wp.vec3(0.0, 0.0, 0.0), 1.0)
        j = float(0.0)
        while wp.hash_grid_query_next(query, j):
            out[0] += 1.0

    points, idx = _box_arrays()
    mesh = wp.Mesh(points, wp.array(idx, dtype=wp.int32))
    with pytest.raises(wp.CompileError, match=r"mesh_query_point\(\) needs the query point \(vec3f\) as argument 2, "
                                              r"got vec3d"):
        wp.launch(double_point, 1, [mesh.id, wp.zeros(1, dtype=float)])
    grid = wp.HashGrid(2, 2, 2)
    with pytest.raises(wp.CompileError, match=r"hash_grid_query_next\(\) writes an int32 index .* got a float32"):
        wp.launch(float_index, 1, [grid.id, wp.zeros(1, dtype=float)])


@wp.kernel
def for_loop_counts(mesh: wp.uint64, grid: wp.uint64, points: wp.array(dtype=wp.vec3), radius: float,
                    faces: wp.array(dtype=int), candidates: wp.array(dtype=int), last: wp.array(dtype=int)):
    i = wp.tid()
    p = points[i]
    n = int(0)
    for _face in wp.mesh_query_aabb(mesh, p - wp.vec3(radius), p + wp.vec3(radius)):
        n += 1
    faces[i] = n
    query = wp.hash_grid_query(grid, p, radius)
    m = int(0)
    for j in query:
        m += 1
        last[i] = j
    candidates[i] = m


def test_for_loops_over_queries_visit_what_the_while_forms_visit():
    tm, jitter = _random_meshes()["torus"]
    mesh, pts, tris = make_mesh(tm, jitter, seed=17)
    rng = np.random.default_rng(18)
    n, radius = 300, 0.2
    q = rng.uniform(pts.min(0), pts.max(0), size=(n, 3)).astype(np.float32)
    points = wp.array(q, dtype=wp.vec3)
    grid = wp.HashGrid(8, 8, 8)
    grid.build(points, radius)
    faces, candidates, last = (wp.zeros(n, dtype=int) for _ in range(3))
    wp.launch(for_loop_counts, n, [mesh.id, grid.id, points, radius, faces, candidates, last])
    visits = wp.zeros((n, len(tris)), dtype=int)
    wp.launch(box_faces, n, [mesh.id, wp.array(q - radius, dtype=wp.vec3), wp.array(q + radius, dtype=wp.vec3),
                             visits])
    np.testing.assert_array_equal(faces.numpy(), visits.numpy().sum(1))
    grid_visits, neighbours = wp.zeros((n, n), dtype=int), wp.zeros((n, n), dtype=int)
    wp.launch(grid_candidates, n, [grid.id, points, radius, grid_visits, neighbours])
    np.testing.assert_array_equal(candidates.numpy(), grid_visits.numpy().sum(1))
    assert (grid_visits.numpy()[np.arange(n), last.numpy()] == 1).all()  # the loop variable is a visited point


TRI_TRI_SOURCE = """
import {engine} as m


@m.kernel
def tri_tri(a: m.array(dtype=m.vec3, ndim=2), b: m.array(dtype=m.vec3, ndim=2), out: m.array(dtype=int)):
    t = m.tid()
    out[t] = m.intersect_tri_tri(a[t, 0], a[t, 1], a[t, 2], b[t, 0], b[t, 1], b[t, 2])
"""


def _triangle_pairs():
    """1,500 random pairs of float32 triangles, about a fifth of them meeting; the last 300 in one plane."""
    rng = np.random.default_rng(0)
    a = rng.uniform(-1, 1, (1500, 3, 3)).astype(np.float32)
    b = (rng.uniform(-1, 1, (1500, 3, 3)) + rng.uniform(-0.7, 0.7, (1500, 1, 3))).astype(np.float32)
    a[-300:, :, 2] = 0.0
    b[-300:, :, 2] = 0.0
    return a, b


def _tri_tri(engine, a, b):
    kernel = load_source(TRI_TRI_SOURCE.format(engine=engine.__name__), f"tri_tri_{engine.__name__}").tri_tri
    out = engine.zeros(len(a), dtype=engine.int32)
    engine.launch(kernel, len(a), inputs=[engine.array(a, dtype=engine.vec3), engine.array(b, dtype=engine.vec3), out],
                  device="cpu")
    return out.numpy()


def test_intersect_tri_tri_finds_the_pairs_whose_edges_cross_the_other_triangle():
    from reference_values import _intersect_tri_tri
    a, b = _triangle_pairs()
    got = _tri_tri(wp, a, b)
    want = np.array([_intersect_tri_tri(*x, *y) for x, y in zip(a, b)])
    assert 150 < got[:-300].sum() < 1000 and 50 < got[-300:].sum() < 250
    np.testing.assert_array_equal(got, want)


def test_intersect_tri_tri_equals_warp():
    warp = pytest.importorskip("warp")
    warp.config.quiet = True
    a, b = _triangle_pairs()
    np.testing.assert_array_equal(_tri_tri(wp, a, b), _tri_tri(warp, a, b))
