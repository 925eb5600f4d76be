"""The package has no import cycle: the graph of xsim's module-level imports (read from the sources
with ast) has no strongly connected component of more than one module. Layers import downwards
(shared/DESIGN.md); a cycle makes import order matter and hides which layer depends on which."""

import ast
from pathlib import Path

import xsim

PACKAGE = Path(xsim.__file__).parent


def _modules() -> dict[str, tuple[Path, bool]]:
    """Dotted name -> (file, whether it is a package's __init__)."""
    out = {}
    for f in PACKAGE.rglob("*.py"):
        parts = list(f.relative_to(PACKAGE.parent).with_suffix("").parts)
        is_package = parts[-1] == "__init__"
        out[".".join(parts[:-1] if is_package else parts)] = (f, is_package)
    return out


def _top_level_statements(body):
    """Statements run at import: the module body and the branches of its top-level if/try blocks."""
    for s in body:
        if isinstance(s, (ast.If, ast.Try)):
            yield from _top_level_statements(s.body + s.orelse + [x for h in getattr(s, "handlers", []) for x in h.body]
                                             + getattr(s, "finalbody", []))
        else:
            yield s


def import_graph() -> dict[str, set[str]]:
    """Module -> the xsim modules it imports at module level. ``from P import n`` depends on the
    module ``P.n`` when there is one, else on ``P`` (a name its __init__ defines)."""
    modules = _modules()
    graph = {}
    for name, (path, is_package) in modules.items():
        package = name.split(".") if is_package else name.split(".")[:-1]
        deps = set()
        for s in _top_level_statements(ast.parse(path.read_text()).body):
            if isinstance(s, ast.Import):
                deps.update(a.name for a in s.names)
            elif isinstance(s, ast.ImportFrom):
                base = s.module or ""
                if s.level:
                    base = ".".join(package[:len(package) - s.level + 1] + ([s.module] if s.module else []))
                deps.update(f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in s.names)
        graph[name] = {d for d in deps if d in modules and d != name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one node (Tarjan, iterative)."""
    index, low, on_stack, stack, found = {}, {}, set(), [], []
    for root, deps in graph.items():
        if root in index:
            continue
        work = [(root, iter(sorted(deps)))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            v, children = work[-1]
            for w in children:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                    break
                if w in on_stack:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    component = []
                    while True:
                        w = stack.pop()
                        on_stack.discard(w)
                        component.append(w)
                        if w == v:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
    return found


def test_the_cycle_finder_finds_a_cycle_and_only_it():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": set(), "e": {"e"}}
    assert cycles(graph) == [["a", "b", "c"]]


def test_the_graph_sees_the_package_root_and_relative_imports():
    graph = import_graph()
    assert "xsim.kernels.launch" in graph["xsim"]  # from .kernels.launch import launch
    assert "xsim.types" in graph["xsim.sim.model"]  # from .. import types as T
    assert "xsim" in graph["xsim.solvers.xpbd.kernels"]  # import xsim (the kernel language's names)


def test_the_package_has_no_import_cycle():
    found = cycles(import_graph())
    assert not found, "import cycles: " + "; ".join(" <-> ".join(c) for c in found)


def test_the_root_still_offers_the_lazily_imported_names():
    assert xsim.sim.ModelBuilder is not None and xsim.solvers.SolverXPBD is not None
    assert xsim.norm_l1 is xsim.kernels.funcs_math.norm_l1
    assert {"sim", "solvers", "norm_l1", "quat_twist"} <= set(dir(xsim))
