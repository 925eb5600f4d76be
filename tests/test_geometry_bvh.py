"""The host side of xsim.Mesh: the BVH's layout, which the native traversals of
native/xsim_geometry.h rely on (its boxes: tests/test_geometry_refit.py; kernel-level queries:
tests/kernels/test_geometry.py)."""

import numpy as np
import pytest

from xsim.geometry import _build_bvh


@pytest.mark.parametrize(("n", "leaf_size"), [(1, 4), (3, 4), (5, 1), (17, 2), (1000, 4), (1001, 1)])
def test_bvh_is_depth_first_with_median_splits_and_escape_links(n, leaf_size):
    rng = np.random.default_rng(n)
    tri = rng.normal(size=(n, 3, 3))
    nodes, perm, depth = _build_bvh(tri.mean(axis=1), leaf_size)
    assert sorted(perm.tolist()) == list(range(n))
    first, count, right, escape = nodes["first"], nodes["count"], nodes["right"], nodes["escape"]

    def covered(i):  # the triangles under node i
        return perm[first[i]:first[i] + count[i]].tolist() if count[i] else covered(i + 1) + covered(right[i])

    for i in range(len(nodes)):
        under = covered(i)
        if count[i]:
            assert count[i] <= leaf_size and escape[i] == i + 1
        else:  # left child next, right child after the left subtree, both halves of the range
            left, r = i + 1, right[i]
            assert len(under) > leaf_size and first[left] == first[i] and escape[left] == r
            assert len(covered(left)) == len(under) // 2 and escape[r] == escape[i]
            assert depth[left] == depth[r] == depth[i] + 1
    assert len(covered(0)) == n and escape[0] == len(nodes)
    assert depth.max() <= int(np.ceil(np.log2(max(n / leaf_size, 1)))) + 1
