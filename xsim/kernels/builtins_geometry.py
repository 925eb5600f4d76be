"""Builtins registry, geometry queries on ``xsim.Mesh`` and ``xsim.HashGrid`` (native code in
``native/xsim_geometry.h``), with Warp's names, argument orders and result structs.

A query returns one of the structs below (``MeshQueryPoint``, ``MeshQueryRay``) or, in Warp's older
form, writes the fields into output variables and returns ``result``. The iterating queries
(``mesh_query_aabb``, ``hash_grid_query``) return a state struct; ``*_next(query, index)`` rebinds
both local names to the advanced state and the found index, as Warp's by-reference arguments do
(``OUTPUT_ARGS`` lets a dynamic loop carry them, also from its condition).

A mesh or grid id that comes straight from a kernel parameter is recorded in ``fe.handles``, so a
launch checks that it names a live object of that kind on the launch's device.
"""

from __future__ import annotations

import ast

from .. import types as T
from ..errors import WarpCodegenTypeError
from .builtins import OUTPUT_ARGS, Overload, builtin, special_form, store_to_arguments
from .ir import Var


@T.struct
class MeshArrays:
    """Warp's ``Mesh`` value in a kernel, what ``mesh_get(id)`` returns: the mesh's ``points`` and
    ``velocities`` (empty without them), array(vec3), and ``indices``, int32, 3 per triangle."""

    points: T.ArrayType(T.vec3)
    velocities: T.ArrayType(T.vec3)
    indices: T.ArrayType(T.int32)


@T.struct
class MeshQueryPoint:
    """The closest point on a mesh: ``result`` (found within max_dist), ``sign`` (< 0 inside),
    ``face``, and the barycentric weights ``u``, ``v`` of the face's first two corners."""

    result: T.bool_
    sign: T.float32
    face: T.int32
    u: T.float32
    v: T.float32


@T.struct
class MeshQueryRay:
    """The closest ray hit: ``result``, ``sign`` (> 0 on a face's front), ``face``, ``t`` (in
    multiples of the direction's length), barycentric ``u``, ``v`` and the unit face ``normal``."""

    result: T.bool_
    sign: T.float32
    face: T.int32
    t: T.float32
    u: T.float32
    v: T.float32
    normal: T.vec3


@T.struct
class MeshQueryAABB:
    """The state of a mesh AABB query (opaque: advance it with ``mesh_query_aabb_next``)."""

    id: T.uint64
    lower: T.vec3
    upper: T.vec3
    node: T.int32
    item: T.int32
    end: T.int32
    face: T.int32
    found: T.bool_


MeshQuery = MeshQueryAABB  # Warp's name for the query type in annotations (its sphere queries are not supported)


@T.struct
class HashGridQuery:
    """The state of a hash grid query (opaque: advance it with ``hash_grid_query_next``)."""

    id: T.uint64
    lower: T.vec3i
    upper: T.vec3i
    cell: T.vec3i
    item: T.int32
    end: T.int32
    index: T.int32
    found: T.bool_


def _arg(fe, node, name: str, i: int, t, what: str, kind: str | None = None):
    """Call argument ``i`` converted to ``t`` (weak literals adapt), or an error naming it."""
    v = fe.value(node.args[i])
    if v.type is not t and not v.weak:
        raise fe.err(node.args[i], f"{name}() needs {what} ({T.type_name(t)}) as argument {i + 1}, got "
                                   f"{T.type_name(v.type)}", WarpCodegenTypeError)
    v = fe.convert(v, t, node.args[i])
    if kind is not None:
        param = fe.param_names.get(v.id)
        if param is not None:
            fe.handles[param] = kind
    return v


def _call(fe, node, name: str, native: str, ret, args, differentiable: bool):
    ov = Overload(name, tuple(T.type_name(a.type) for a in args), ret, native, differentiable)
    return fe.emit("call", ret, args, node, overload=ov)


def _fields(fe, node, value, names):
    return [fe.emit("field_get", value.type._fields[f], [value], node, field=f) for f in names]


def _arity(fe, node, name: str, allowed: dict[int, str]):
    if node.keywords or len(node.args) not in allowed:
        forms = "; ".join(f"{name}({sig})" for sig in allowed.values())
        raise fe.err(node, f"{name}() takes positional arguments: {forms}")


# mesh_query_point*: name -> (sign mode of the native template, number of output arguments in the
# older form, the optional trailing parameters with their defaults)
_POINT_QUERIES = {
    "mesh_query_point": (0, ("sign", "face", "u", "v"), ()),
    "mesh_query_point_no_sign": (1, ("face", "u", "v"), ()),
    "mesh_query_point_sign_normal": (2, ("sign", "face", "u", "v"), (("epsilon", 1.0e-3),)),
    "mesh_query_point_sign_winding_number": (3, ("sign", "face", "u", "v"), (("accuracy", 2.0), ("threshold", 0.5))),
}


def _query_point(fe, node, name: str):
    mode, outs, optional = _POINT_QUERIES[name]
    head = "id, point, max_dist"
    opt = "".join(f"[, {o}]" for o, _ in optional)
    allowed = {3 + k: f"{head}{opt}" for k in range(len(optional) + 1)}
    allowed |= {3 + len(outs) + k: f"{head}, {', '.join(outs)}{opt}" for k in range(len(optional) + 1)}
    _arity(fe, node, name, allowed)
    n_out = len(outs) if len(node.args) >= 3 + len(outs) else 0
    mesh = _arg(fe, node, name, 0, T.uint64, "the mesh id", "mesh")
    point = _arg(fe, node, name, 1, T.vec3, "the query point")
    max_dist = _arg(fe, node, name, 2, T.float32, "the maximum distance")
    params = [_arg(fe, node, name, 3 + n_out + k, T.float32, o) if 3 + n_out + k < len(node.args)
              else fe.const(d, T.float32) for k, (o, d) in enumerate(optional)]
    # the epsilon of the pseudo-normal rides in param_a, the winding threshold in param_b
    params = (params + [fe.const(0.0, T.float32)] * 2)[:2] if mode != 3 else [params[0], params[1]]
    native = f"mesh_query_point<{MeshQueryPoint._ctype}, {mode}>"
    q = _call(fe, node, name, native, MeshQueryPoint, [mesh, point, max_dist, *params], True)
    if not n_out:
        return q
    store_to_arguments(fe, node, node.args[3:3 + n_out], _fields(fe, node, q, list(outs)))
    return _fields(fe, node, q, ["result"])[0]


for _name in _POINT_QUERIES:
    special_form(_name)(lambda fe, node, _name=_name: _query_point(fe, node, _name))
    OUTPUT_ARGS[_name] = lambda n, _name=_name: (range(3, 3 + len(_POINT_QUERIES[_name][1]))
                                                 if n >= 3 + len(_POINT_QUERIES[_name][1]) else ())

_RAY_OUTS = ("t", "u", "v", "sign", "normal", "face")


@special_form("mesh_query_ray")
def mesh_query_ray(fe, node):
    """``mesh_query_ray(id, start, dir, max_t[, root])`` -> MeshQueryRay, or the older form with the
    outputs ``t, u, v, sign, normal, face`` after ``max_t``, returning whether it hit."""
    name = "mesh_query_ray"
    head = "id, start, dir, max_t"
    _arity(fe, node, name, {4: head, 5: f"{head}, root", 10: f"{head}, {', '.join(_RAY_OUTS)}",
                            11: f"{head}, {', '.join(_RAY_OUTS)}, root"})
    n_out = len(_RAY_OUTS) if len(node.args) >= 10 else 0
    mesh = _arg(fe, node, name, 0, T.uint64, "the mesh id", "mesh")
    start = _arg(fe, node, name, 1, T.vec3, "the ray start")
    direction = _arg(fe, node, name, 2, T.vec3, "the ray direction")
    max_t = _arg(fe, node, name, 3, T.float32, "the maximum ray parameter")
    root = _arg(fe, node, name, 4 + n_out, T.int32, "the root node") if len(node.args) > 4 + n_out \
        else fe.const(-1, T.int32)
    q = _call(fe, node, name, f"mesh_query_ray<{MeshQueryRay._ctype}>", MeshQueryRay,
              [mesh, start, direction, max_t, root], True)
    if not n_out:
        return q
    store_to_arguments(fe, node, node.args[4:4 + n_out], _fields(fe, node, q, list(_RAY_OUTS)))
    return _fields(fe, node, q, ["result"])[0]


OUTPUT_ARGS["mesh_query_ray"] = lambda n: range(4, 4 + len(_RAY_OUTS)) if n >= 10 else ()


def _eval(fe, node, name: str):
    _arity(fe, node, name, {4: "id, face, bary_u, bary_v"})
    args = [_arg(fe, node, name, 0, T.uint64, "the mesh id", "mesh"),
            _arg(fe, node, name, 1, T.int32, "the face index"),
            _arg(fe, node, name, 2, T.float32, "the barycentric u"),
            _arg(fe, node, name, 3, T.float32, "the barycentric v")]
    return _call(fe, node, name, name, T.vec3, args, True)


for _name in ("mesh_eval_position", "mesh_eval_velocity"):
    special_form(_name)(lambda fe, node, _name=_name: _eval(fe, node, _name))


@special_form("mesh_get")
def mesh_get(fe, node):
    """``mesh_get(id)``: the mesh's arrays (``MeshArrays``). Reads of its points and velocities have
    gradients: the adjoint accumulates into the arrays' gradient buffers, which the native mesh
    descriptor names (``grad_view``: the C++ of the same struct of gradient views, see ir.ArrayLabels).
    ``handle_param``: the kernel parameter the id comes straight from, by which a launch finds the arrays."""
    name = "mesh_get"
    _arity(fe, node, name, {1: "id"})
    mesh = _arg(fe, node, name, 0, T.uint64, "the mesh id", "mesh")
    ov = Overload(name, ("uint64",), MeshArrays, f"mesh_get_arrays<{MeshArrays._ctype}>", False)
    return fe.emit("call", MeshArrays, [mesh], node, overload=ov, grad_view=f"mesh_get_arrays<{MeshArrays._ctype}, true>",
                   handle_param=fe.param_names.get(mesh.id))


@special_form("mesh_query_aabb")
def mesh_query_aabb(fe, node):
    """``mesh_query_aabb(id, low, high)``: a query over the faces whose bounds overlap the box."""
    name = "mesh_query_aabb"
    _arity(fe, node, name, {3: "id, low, high"})
    args = [_arg(fe, node, name, 0, T.uint64, "the mesh id", "mesh"),
            _arg(fe, node, name, 1, T.vec3, "the lower corner"),
            _arg(fe, node, name, 2, T.vec3, "the upper corner")]
    return _call(fe, node, name, f"mesh_query_aabb<{MeshQueryAABB._ctype}>", MeshQueryAABB, args, False)


@special_form("hash_grid_query")
def hash_grid_query(fe, node):
    """``hash_grid_query(id, point, max_dist)``: a query over the points in the cells the box
    ``point -+ max_dist`` touches (candidates: filter by distance)."""
    name = "hash_grid_query"
    if len(node.args) == 4:
        raise fe.err(node, "hash_grid_query(id, point, max_dist, group): grouped hash grids are not supported; "
                           "build one grid per group")
    _arity(fe, node, name, {3: "id, point, max_dist"})
    args = [_arg(fe, node, name, 0, T.uint64, "the hash grid id", "hash_grid"),
            _arg(fe, node, name, 1, T.vec3, "the query point"),
            _arg(fe, node, name, 2, T.float32, "the query radius")]
    return _call(fe, node, name, f"hash_grid_query<{HashGridQuery._ctype}>", HashGridQuery, args, False)


def _next(fe, node, name: str, query_type, native: str, index_field: str):
    """``name(query, index)``: advance; rebind ``query`` and, when found, ``index``; return found."""
    _arity(fe, node, name, {2: "query, index"})
    query = fe.value(node.args[0])
    if query.type is not query_type:
        raise fe.err(node.args[0], f"{name}() needs the {query_type.__name__} variable its query function made, "
                                   f"got {T.type_name(query.type)}", WarpCodegenTypeError)
    index = fe.value(node.args[1])
    if index.type is not T.int32:
        raise fe.err(node.args[1], f"{name}() writes an int32 index into its second argument, got a "
                                   f"{T.type_name(index.type)} variable; declare it as `index = int(0)`",
                     WarpCodegenTypeError)
    advanced = _call(fe, node, name, native, query_type, [query], False)
    found, value = _fields(fe, node, advanced, ["found", index_field])
    store_to_arguments(fe, node, node.args[:2], [advanced, fe.emit("select", T.int32, [found, value, index], node)])
    return found


QUERY_NEXT = {MeshQueryAABB: "mesh_query_aabb_next", HashGridQuery: "hash_grid_query_next"}


def for_each_query(fe, node, query) -> None:
    """``for index in query:`` (Warp's iteration of a mesh AABB or hash grid query): the while loop
    ``while *_next(query, index):`` on a hidden copy of the query, ``index`` an int32 (0 before)."""
    import sys

    from .scope import Ref

    name, hidden = node.target.id, f"$query{id(node)}"
    fe.f.sym[hidden] = query
    fe.f.sym["$xsim"] = Ref(sys.modules["xsim"])
    before = fe.f.sym.get(name)
    if not (isinstance(before, Var) and before.type is T.int32):
        fe.f.sym[name] = fe.const(0, T.int32)
    load = ast.Load()
    cond = ast.Call(func=ast.Attribute(value=ast.Name(id="$xsim", ctx=load), attr=QUERY_NEXT[query.type], ctx=load),
                    args=[ast.Name(id=hidden, ctx=load), ast.Name(id=name, ctx=load)], keywords=[])
    fe.dynamic_loop(node, node.body, cond_node=ast.fix_missing_locations(ast.copy_location(cond, node.iter)))
    fe.f.sym.pop(hidden, None)
    fe.f.sym.pop("$xsim", None)


for _name, _qt, _native, _field in (
        ("mesh_query_aabb_next", MeshQueryAABB, "mesh_query_aabb_advance", "face"),
        ("mesh_query_next", MeshQueryAABB, "mesh_query_aabb_advance", "face"),
        ("hash_grid_query_next", HashGridQuery, "hash_grid_query_advance", "index")):
    special_form(_name)(lambda fe, node, a=(_name, _qt, _native, _field): _next(fe, node, *a))
    OUTPUT_ARGS[_name] = lambda n: (0, 1)


@special_form("hash_grid_point_id")
def hash_grid_point_id(fe, node):
    """``hash_grid_point_id(id, index)``: the original index of the point at ``index`` in the grid's
    cell-sorted order (-1 before the grid is built)."""
    name = "hash_grid_point_id"
    _arity(fe, node, name, {2: "id, index"})
    args = [_arg(fe, node, name, 0, T.uint64, "the hash grid id", "hash_grid"),
            _arg(fe, node, name, 1, T.int32, "the sorted index")]
    return _call(fe, node, name, name, T.int32, args, False)


del _name, _qt, _native, _field

# Moller's triangle-triangle test (native/xsim_geometry.h): 1 where the triangles meet, else 0
builtin("intersect_tri_tri", ["FVec3"] * 6, lambda *args: T.int32, differentiable=False)
