"""tri_intersect.py, the triangle-intersection reference of the cloth self-collision tests, against
FCL (python-fcl, in the ``test`` extra): FCL decides each triangle pair with a separating-axis test,
a different algorithm from the Moller interval test it checks. Pairs with a known answer by
construction (near-misses, degenerate triangles, shared vertices) are checked against that answer
too."""

import numpy as np
import pytest
from scipy.spatial.transform import Rotation
from tri_intersect import intersecting_pairs, intersecting_pairs_between

fcl = pytest.importorskip("fcl")

UNIT = np.array([[0.0, 0.0, 0.0], [1.0, 0.0, 0.0], [0.0, 1.0, 0.0]])
ONE_TRI = np.array([[0, 1, 2]])


# ---- FCL: the reference ------------------------------------------------------------------------

def fcl_object(points, tris):
    model = fcl.BVHModel()
    model.beginModel(len(points), len(tris))
    model.addSubModel(np.asarray(points, dtype=np.float64), np.asarray(tris, dtype=np.int32))
    model.endModel()
    return fcl.CollisionObject(model, fcl.Transform())


def fcl_pairs_between(points_a, tris_a, points_b, tris_b) -> set[tuple[int, int]]:
    """Every (triangle of a, triangle of b) pair FCL finds touching."""
    request = fcl.CollisionRequest(num_max_contacts=10**8)  # all primitive pairs, not the first
    result = fcl.CollisionResult()
    fcl.collide(fcl_object(points_a, tris_a), fcl_object(points_b, tris_b), request, result)
    return {(c.b1, c.b2) for c in result.contacts}


def fcl_self_pairs(points, tris) -> set[tuple[int, int]]:
    """FCL's pairs of one mesh with itself, i < j, less those sharing a vertex index."""
    tris = np.asarray(tris)
    return {(i, j) for i, j in fcl_pairs_between(points, tris, points, tris)
            if i < j and not set(tris[i]) & set(tris[j])}


def as_set(pairs: np.ndarray) -> set[tuple[int, int]]:
    return {(int(i), int(j)) for i, j in pairs}


# ---- many independent pairs in one call --------------------------------------------------------

def side_by_side(a, b, spacing=4.0):
    """Triangle pairs (a[k], b[k]), each (k, 3, 3) within 1.5 of the origin, moved each to its own
    lattice cell, so that one call tests them all: (points_a, tris_a, points_b, tris_b)."""
    side = int(np.ceil(len(a) ** (1.0 / 3.0)))
    cell = np.stack(np.unravel_index(np.arange(len(a)), (side, side, side)), axis=1) * spacing
    tris = np.arange(3 * len(a)).reshape(-1, 3)
    return (a + cell[:, None]).reshape(-1, 3), tris, (b + cell[:, None]).reshape(-1, 3), tris


def hits_each(a, b) -> np.ndarray:
    """Whether a[k] meets b[k], for each k, by intersecting_pairs_between."""
    pairs = intersecting_pairs_between(*side_by_side(a, b))
    assert (pairs[:, 0] == pairs[:, 1]).all(), "a pair reached into another lattice cell"
    hit = np.zeros(len(a), dtype=bool)
    hit[pairs[:, 0]] = True
    return hit


def fcl_hits_each(a, b) -> np.ndarray:
    """Whether a[k] meets b[k], for each k, by FCL on the same lattice."""
    hit = np.zeros(len(a), dtype=bool)
    for i, j in fcl_pairs_between(*side_by_side(a, b)):
        assert i == j, "a pair reached into another lattice cell"
        hit[i] = True
    return hit


def random_frames(rng, n):
    """n random rotations (n, 3, 3) and shifts (n, 3) that keep unit-sized triangles near the origin."""
    return Rotation.random(n, random_state=rng).as_matrix(), rng.uniform(-0.2, 0.2, (n, 3))


def moved(tris, rotations, shifts):
    return np.einsum("kij,kcj->kci", rotations, tris) + shifts[:, None]


def planar_triangles(rng, n):
    """n triangles in the plane z = 0, the unit right triangle with its corners jittered by 0.2."""
    t = UNIT + rng.uniform(-0.2, 0.2, (n, 3, 3))
    t[..., 2] = 0.0
    return t


# ---- cloth grids --------------------------------------------------------------------------------

def grid(cells: int, size: float = 1.0):
    """A flat square cloth in z = 0: points ((cells+1)^2, 3), metres, and tris (2 cells^2, 3);
    also each point's (u, v) grid coordinate in [0, 1]."""
    uv = np.stack(np.meshgrid(np.linspace(0, 1, cells + 1), np.linspace(0, 1, cells + 1), indexing="ij"), -1)
    uv = uv.reshape(-1, 2)
    index = np.arange((cells + 1) ** 2).reshape(cells + 1, cells + 1)
    a, b = index[:-1, :-1].ravel(), index[1:, :-1].ravel()
    c, d = index[1:, 1:].ravel(), index[:-1, 1:].ravel()
    tris = np.concatenate([np.stack([a, b, c], 1), np.stack([a, c, d], 1)])
    points = np.concatenate([uv * size, np.zeros((len(uv), 1))], axis=1)
    return points, tris, uv


LOOP_T = 1.8954942670339809  # t = 2 sin t: where the curl below crosses itself


def curled_through_itself(cells: int):
    """The grid rolled into a prolate cycloid x = t - 2 sin t, z = -2 cos t (t in [-pi, pi] along
    u), whose cross-section loops and crosses itself at t = +-LOOP_T: the sheet passes through
    itself along one line parallel to v."""
    points, tris, uv = grid(cells)
    t = np.pi * (2.0 * uv[:, 0] - 1.0)
    scale = 1.0 / (2.0 * np.pi)
    points = np.stack([(t - 2.0 * np.sin(t)) * scale, uv[:, 1], -2.0 * np.cos(t) * scale], axis=1)
    return points, tris, uv


# ---- tests --------------------------------------------------------------------------------------

def test_random_triangle_pairs_agree_with_fcl():
    rng = np.random.default_rng(7)
    a, b = rng.random((3000, 3, 3)), rng.random((3000, 3, 3))
    near = rng.random((1000, 3, 3))
    a, b = np.concatenate([a, near]), np.concatenate([b, near + rng.normal(0.0, 0.05, near.shape)])
    mine, ref = hits_each(a, b), fcl_hits_each(a, b)
    assert 0.2 < ref.mean() < 0.8
    assert (mine == ref).all(), f"{(mine != ref).sum()} of {len(a)} pairs disagree"


@pytest.mark.parametrize("gap, expected", [(1e-9, False), (-1e-9, True)])
def test_a_vertex_1e9_above_a_face_misses_and_1e9_below_pierces(gap, expected):
    rng = np.random.default_rng(11)
    n = 500
    a = planar_triangles(rng, n)
    weights = rng.uniform(0.2, 1.0, (n, 3))
    apex = np.einsum("kc,kcj->kj", weights / weights.sum(axis=1, keepdims=True), a) + [0.0, 0.0, gap]
    rest = apex[:, None] + rng.uniform([-1.0, -1.0, 0.3], [1.0, 1.0, 1.0], (n, 2, 3))
    b = np.concatenate([apex[:, None], rest], axis=1)
    frames = random_frames(rng, n)
    a, b = moved(a, *frames), moved(b, *frames)
    assert (hits_each(a, b) == expected).all()
    assert (fcl_hits_each(a, b) == expected).all()


@pytest.mark.parametrize("gap, expected", [(1e-9, False), (-1e-9, True)])
def test_an_edge_1e9_outside_an_edge_misses_and_1e9_inside_crosses(gap, expected):
    """b's edge passes a's edge at right angles, gap outside it in a's plane (negative: inside);
    the rest of b lies further out."""
    rng = np.random.default_rng(13)
    n = 500
    a = planar_triangles(rng, n)
    along = a[:, 1] - a[:, 0]
    along /= np.linalg.norm(along, axis=1, keepdims=True)
    up = np.array([0.0, 0.0, 1.0])
    out = np.cross(along, up)
    out[np.einsum("kj,kj->k", out, a[:, 2] - a[:, 0]) > 0] *= -1.0
    base = a[:, 0] + rng.uniform(0.2, 0.8, (n, 1)) * (a[:, 1] - a[:, 0]) + gap * out

    def at(o, e, z):
        return base + o[:, None] * out + e[:, None] * along + z[:, None] * up

    zeros = np.zeros(n)
    b = np.stack([at(zeros, rng.uniform(-0.05, 0.05, n), -rng.uniform(0.3, 1.0, n)),
                  at(zeros, rng.uniform(-0.05, 0.05, n), rng.uniform(0.3, 1.0, n)),
                  at(rng.uniform(0.3, 1.0, n), rng.uniform(-0.5, 0.5, n), rng.uniform(-1.0, 1.0, n))], axis=1)
    frames = random_frames(rng, n)
    a, b = moved(a, *frames), moved(b, *frames)
    assert (hits_each(a, b) == expected).all()
    assert (fcl_hits_each(a, b) == expected).all()


@pytest.mark.parametrize("b", [
    [[0.2, 0.2, 0.0], [0.3, 0.2, 1.0], [0.2, 0.3, 1.0]],   # a vertex on the face
    [[0.5, 0.0, -1.0], [0.5, 0.0, 1.0], [0.5, -1.0, 0.0]],  # an edge through a point of an edge
    [[0.0, 0.0, 0.0], [-1.0, 0.0, 0.5], [0.0, -1.0, 0.5]],  # one corner in common
    [[0.0, 0.0, 0.0], [1.0, 0.0, 0.0], [0.0, -1.0, 0.0]],   # coplanar, one edge in common
    [[0.5, 0.5, 0.0], [1.5, 0.5, 0.0], [0.5, 1.5, 0.0]],    # coplanar, a corner on the hypotenuse
], ids=["vertex-on-face", "edge-on-edge", "corner-on-corner", "coplanar-edge", "coplanar-corner"])
def test_triangles_that_touch_exactly_intersect(b):
    assert len(intersecting_pairs_between(UNIT, ONE_TRI, b, ONE_TRI)) == 1
    assert fcl_pairs_between(UNIT, ONE_TRI, b, ONE_TRI) == {(0, 0)}


@pytest.mark.parametrize("kept", [(0, 1), (0, 2), (1, 2)], ids=["z-plane", "y-plane", "x-plane"])
def test_coplanar_pairs_agree_with_fcl(kept):
    """Random pairs in one axis plane (so exactly coplanar in float64), overlapping or apart."""
    rng = np.random.default_rng(17)
    n = 2000
    a, b = np.full((n, 3, 3), 0.3), np.full((n, 3, 3), 0.3)
    a[..., kept], b[..., kept] = rng.random((n, 3, 2)), rng.random((n, 3, 2)) + rng.uniform(0, 0.5, (n, 1, 2))
    mine, ref = hits_each(a, b), fcl_hits_each(a, b)
    assert 0.2 < ref.mean() < 0.8
    assert (mine == ref).all(), f"{(mine != ref).sum()} of {n} pairs disagree"


@pytest.mark.parametrize("b, expected", [
    ([[0.2, 0.2, 0.3], [0.3, 0.3, 0.5], [0.5, 0.2, 0.4]], False),   # above
    ([[2.0, 2.0, 0.0], [3.0, 2.0, 0.0], [2.0, 3.0, 0.0]], False),   # beside
    ([[0.5, 0.5 + 1e-9, 0.0], [1.5, 0.5, 0.0], [0.5, 1.5, 0.0]], False),  # 1e-9 past the hypotenuse
    ([[0.1, 0.1, 0.0], [0.2, 0.1, 0.0], [0.1, 0.2, 0.0]], True),    # coplanar, inside a
    ([[-1.0, -1.0, 0.0], [3.0, -1.0, 0.0], [-1.0, 3.0, 0.0]], True),  # coplanar, around a
    ([[0.4, 0.4, 0.0], [1.5, 0.5, 0.0], [0.5, 1.5, 0.0]], True),    # coplanar, 0.1 over the hypotenuse
], ids=["above", "beside", "coplanar-near-miss", "coplanar-inside", "coplanar-around", "coplanar-overlap"])
def test_known_pairs(b, expected):
    assert (len(intersecting_pairs_between(UNIT, ONE_TRI, b, ONE_TRI)) == 1) == expected
    assert (fcl_pairs_between(UNIT, ONE_TRI, b, ONE_TRI) == {(0, 0)}) == expected


@pytest.mark.parametrize("b, expected", [
    ([[0.2, 0.2, -1.0], [0.2, 0.2, 0.5], [0.2, 0.2, 1.0]], True),    # collinear: a needle through a
    ([[0.2, 0.2, 1e-9], [0.2, 0.2, 0.5], [0.2, 0.2, 1.0]], False),   # the needle stopping 1e-9 short
    ([[0.7, 0.7, -1.0], [0.7, 0.7, 0.0], [0.7, 0.7, 1.0]], False),   # the needle beside a
    ([[-0.5, 0.25, 0.0], [0.0, 0.25, 0.0], [0.5, 0.25, 0.0]], True),  # the needle in a's plane, across an edge
    ([[-0.5, 0.25, 0.0], [-0.3, 0.25, 0.0], [-0.1, 0.25, 0.0]], False),  # in a's plane, outside
    ([[0.2, 0.2, 0.0]] * 3, True),    # a point on a's face
    ([[0.2, 0.2, 1e-9]] * 3, False),  # a point 1e-9 above it
    ([[0.7, 0.7, 0.0]] * 3, False),   # a point in a's plane, outside
], ids=["needle-through", "needle-short", "needle-beside", "needle-in-plane", "needle-in-plane-outside",
        "point-on-face", "point-above", "point-outside"])
def test_a_degenerate_triangle_counts_as_its_edges(b, expected):
    assert (len(intersecting_pairs_between(UNIT, ONE_TRI, b, ONE_TRI)) == 1) == expected
    assert (len(intersecting_pairs_between(b, ONE_TRI, UNIT, ONE_TRI)) == 1) == expected


def test_two_degenerate_triangles_never_intersect():
    needle = [[0.0, 0.0, -1.0], [0.0, 0.0, 0.0], [0.0, 0.0, 1.0]]
    point = [[0.0, 0.0, 0.0]] * 3
    assert len(intersecting_pairs_between(needle, ONE_TRI, point, ONE_TRI)) == 0


def test_triangles_sharing_a_vertex_index_are_skipped_but_coincident_copies_are_not():
    crossing = [[0.0, 0.0, 0.0], [0.3, 0.3, 1.0], [0.3, 0.3, -1.0]]  # crosses UNIT from its corner
    points = np.concatenate([UNIT, crossing])
    assert len(intersecting_pairs(points, [[0, 1, 2], [0, 4, 5]])) == 0
    assert intersecting_pairs(points, [[0, 1, 2], [3, 4, 5]]).tolist() == [[0, 1]]


def test_the_pairs_are_sorted_int64_and_empty_is_0_by_2():
    points, tris, _ = grid(4)
    pairs = intersecting_pairs(points, tris)
    assert pairs.shape == (0, 2) and pairs.dtype == np.int64
    assert intersecting_pairs_between(points, tris[:0], points, tris).shape == (0, 2)
    points, tris, _ = curled_through_itself(16)
    pairs = intersecting_pairs(points, tris)
    assert pairs.dtype == np.int64 and (pairs[:, 0] < pairs[:, 1]).all()
    assert (np.lexsort((pairs[:, 1], pairs[:, 0])) == np.arange(len(pairs))).all()


def test_a_flat_grid_cloth_does_not_intersect_itself():
    points, tris, _ = grid(32)
    assert len(intersecting_pairs(points, tris)) == 0
    assert fcl_self_pairs(points, tris) == set()


@pytest.mark.parametrize("cells", [16, 64])
def test_a_cloth_curled_through_itself_intersects_along_the_crossing_line(cells):
    points, tris, uv = curled_through_itself(cells)
    pairs = intersecting_pairs(points, tris)
    assert as_set(pairs) == fcl_self_pairs(points, tris)
    # each pair has one triangle at each crossing, t = -LOOP_T and t = +LOOP_T, and every row has one
    u_crossings = 0.5 * (1.0 + np.array([-LOOP_T, LOOP_T]) / np.pi)
    u_of_tri = uv[tris, 0].mean(axis=1)
    u = np.sort(u_of_tri[pairs], axis=1)
    assert (np.abs(u - u_crossings) < 1.5 / cells).all()
    rows = np.floor(uv[tris[pairs[:, 0]], 1].min(axis=1) * cells + 0.5).astype(int)
    assert set(rows) == set(range(cells))


def test_a_cloth_folded_flat_onto_itself_touches_wherever_the_layers_overlap():
    """The right half mirrored onto the left, exactly coplanar: coincident and crossing triangles."""
    points, tris, _ = grid(16)
    right = points[:, 0] > 0.5
    points[right, 0] = 1.0 - points[right, 0]
    pairs = intersecting_pairs(points, tris)
    assert len(pairs) > 0
    assert as_set(pairs) == fcl_self_pairs(points, tris)
    flap = right[tris].any(axis=1)
    assert (flap[pairs].sum(axis=1) == 1).all(), "each pair: one flap triangle, one of the layer under it"


def crossing_grids():
    """A flat 16 x 16 grid in z = 0 and a second one tilted 60 degrees, crossing it along y = 0.37."""
    points_a, tris, _ = grid(16)
    points_b, _, uv = grid(16)
    w = uv[:, 1] - 0.5
    points_b = np.stack([uv[:, 0] + 0.03, 0.37 + w * np.cos(np.pi / 3), w * np.sin(np.pi / 3)], axis=1)
    return points_a, tris, points_b, tris


def test_two_crossing_grids_intersect_along_their_crossing_line():
    points_a, tris_a, points_b, tris_b = crossing_grids()
    pairs = intersecting_pairs_between(points_a, tris_a, points_b, tris_b)
    assert len(pairs) > 0
    assert as_set(pairs) == fcl_pairs_between(points_a, tris_a, points_b, tris_b)
    y_a = points_a[tris_a[pairs[:, 0]], 1]
    assert ((y_a.min(axis=1) <= 0.37) & (0.37 <= y_a.max(axis=1))).all()
    assert np.abs(points_b[tris_b[pairs[:, 1]], 2]).min(axis=1).max() < 0.1


def test_two_grids_in_one_mesh_give_the_pairs_between_them():
    points_a, tris_a, points_b, tris_b = crossing_grids()
    points = np.concatenate([points_a, points_b])
    tris = np.concatenate([tris_a, tris_b + len(points_a)])
    between = intersecting_pairs_between(points_a, tris_a, points_b, tris_b) + [0, len(tris_a)]
    assert intersecting_pairs(points, tris).tolist() == between.tolist()


def test_a_stretched_triangle_among_small_ones_finds_every_pair():
    """One long triangle across a grid goes to the brute-force broad phase: still every pair."""
    points, tris, _ = grid(32)
    long_tri = np.array([[-0.5, 0.51, -0.01], [1.5, 0.52, -0.01], [0.5, 0.53, 0.3]])
    pairs = intersecting_pairs_between(long_tri, ONE_TRI, points, tris)
    assert len(pairs) > 32
    assert as_set(pairs) == fcl_pairs_between(long_tri, ONE_TRI, points, tris)
    both = np.concatenate([points, long_tri])
    merged = intersecting_pairs(both, np.concatenate([tris, ONE_TRI + len(points)]))
    assert merged.tolist() == (pairs[:, ::-1] + [0, len(tris)]).tolist()
