"""Builtins registry, linear algebra: componentwise products of matrices and the decompositions
``svd2``, ``svd3``, ``qr3``, ``eig3`` (native code in ``native/xsim_linalg.h``). A decomposition is
one native call returning its factors packed in one matrix, unpacked here into Warp's tuple
(``U, sigma, V = svd3(A)``) or written into output variables (``svd3(A, U, sigma, V)``)."""

from __future__ import annotations

from .. import types as T
from ..errors import WarpCodegenTypeError
from .builtins import Overload, builtin, special_form, store_to_arguments

builtin("cw_mul", ["Mat", "Mat"], "M")
builtin("cw_div", ["Mat", "Mat"], "M")

# name -> (matrix size, factor shapes as (columns, is_vector), packed native)
_DECOMPOSITIONS = {
    "svd2": (2, [(2, False), (1, True), (2, False)], "svd2_packed"),
    "svd3": (3, [(3, False), (1, True), (3, False)], "svd3_packed"),
    "qr3": (3, [(3, False), (3, False)], "qr3_packed"),
    "eig3": (3, [(3, False), (1, True)], "eig3_packed"),
}


def _decompose(fe, node, name: str):
    n, factors, native = _DECOMPOSITIONS[name]
    if node.keywords or len(node.args) not in (1, 1 + len(factors)):
        raise fe.err(node, f"{name}(A) takes a {n}x{n} float matrix (and optionally {len(factors)} output "
                           f"variables)")
    a = fe.value(node.args[0])
    if not (T.is_matrix(a.type) and a.type._shape == (n, n) and T.is_float(a.type._scalar)):
        raise fe.err(node.args[0], f"{name}() needs a {n}x{n} float matrix, got {T.type_name(a.type)}",
                     WarpCodegenTypeError)
    s = a.type._scalar
    width = sum(c for c, _ in factors)
    ov = Overload(name, ("FMat",), "", native)
    packed = fe.emit("call", T.matrix((n, width), s), [a], node, overload=ov)
    out, first = [], 0
    for cols, is_vec in factors:
        t = T.vector(n, s) if is_vec else T.matrix((n, n), s)
        comps = [fe.emit("extract", s, [packed, fe.const(i * width + first + j, T.int32)], node)
                 for i in range(n) for j in range(cols)]
        out.append(fe.emit("construct", t, comps, node))
        first += cols
    if len(node.args) == 1:
        return tuple(out)
    store_to_arguments(fe, node, node.args[1:], out)
    return fe.const(False)


for _name in _DECOMPOSITIONS:
    special_form(_name)(lambda fe, node, _name=_name: _decompose(fe, node, _name))
del _name
