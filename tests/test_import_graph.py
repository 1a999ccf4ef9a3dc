"""The package's import graph: no circles, no arrows up.

Every module of ``cognate_tvm`` is parsed with `ast`; every ``import`` statement counts, at module
level and inside functions alike (an import inside a function is still a dependency, only a later
one). Importing ``a.b.c`` also runs the ``__init__`` of ``a.b``, so that package counts as imported
too (unless it is a package around the importing module, which is already being imported when that
module runs). The root package's ``__init__`` is left out: it imports nothing (its two names are looked up
lazily) and every module is inside it.

Layers. Each top-level unit of the package (a top-level module, or a subpackage with everything in
it) sits on one layer of `LAYERS`, lowest first:

0. ``errors``;
1. the foundations: ``ops``, ``matrix``, ``space``, ``formats``, ``executors``, ``tvm_intrinsics``;
2. what reads matrices and spaces only: ``data``, ``metrics``, ``mapper``, ``simulator``, ``sweeps``, ``train``
   (the loops take any model; the model imports them), ``kernels``;
3. ``model`` and ``backends``;
4. what composes them: ``baselines``, ``tuning`` (tune, its options, search strategies, re-timing, oracle);
5. the front ends: ``metaschedule``, ``transfer``, ``torch`` (PyTorch operators), ``measure``, ``collect``,
   ``tune``, ``cli``.

The rule: a module imports only modules of its own unit, or of a unit on the same or a lower layer.
An import to a higher layer is an arrow up (a backend importing the MetaSchedule front end that
builds on backends, say). Within one unit or layer, the graph must have no circle.

Size: every module stays under `MAX_MODULE_LINES` lines, so each holds one concept.
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "python" / "cognate_tvm"

LAYERS = (
    ("errors",),
    ("ops", "matrix", "space", "formats", "executors", "tvm_intrinsics"),
    ("data", "metrics", "mapper", "simulator", "train", "kernels", "sweeps"),
    ("model", "backends"),
    ("baselines", "tuning"),
    ("metaschedule", "transfer", "torch", "measure", "collect", "tune", "cli"),
)

# Known circles, each a frozenset of the modules on it, to be removed: none.
ALLOWED_CIRCLES: tuple[frozenset[str], ...] = ()


def _modules() -> dict[str, tuple[Path, bool]]:
    """{dotted name: (path, is a package)} of every module of the package."""
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        package = parts[-1] == "__init__"
        out[".".join(parts[:-1] if package else parts)] = (path, package)
    return out


def _targets(name: str, package: bool, node: ast.AST, modules) -> list[str]:
    """The package's modules that one import statement of module `name` names."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names if alias.name.split(".")[0] == "cognate_tvm"]
    if node.level:
        base = name.split(".")[:None if package else -1]
        base = base[:len(base) - (node.level - 1)]
        target = ".".join(base + ([node.module] if node.module else []))
    else:
        target = node.module or ""
        if target.split(".")[0] != "cognate_tvm":
            return []
    return [target] + [f"{target}.{alias.name}" for alias in node.names if f"{target}.{alias.name}" in modules]


def import_graph() -> dict[str, set[str]]:
    """{module: the package's modules it imports}, parent packages included, the root package left out."""
    modules = _modules()
    graph = {}
    for name, (path, package) in modules.items():
        deps = set()
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if not isinstance(node, (ast.Import, ast.ImportFrom)):
                continue
            for target in _targets(name, package, node, modules):
                while target not in modules and "." in target:  # a name imported from a module
                    target = target.rsplit(".", 1)[0]
                parts = target.split(".")
                deps.update(".".join(parts[:n]) for n in range(2, len(parts) + 1))  # and its packages
        # the packages around `name` are already being imported when it runs: not a dependency
        graph[name] = deps - {".".join(name.split(".")[:n]) for n in range(1, name.count(".") + 2)}
    del graph["cognate_tvm"]
    return graph


def _unit(module: str) -> str:
    return module.split(".")[1]


def _layer(module: str) -> int:
    unit = _unit(module)
    for n, units in enumerate(LAYERS):
        if unit in units:
            return n
    raise AssertionError(f"{module}: its unit {unit!r} is on no layer; add it to LAYERS")


def _circles(graph: dict[str, set[str]]) -> list[frozenset[str]]:
    """The strongly connected components with more than one module (Tarjan's algorithm)."""
    index, low, stack, on_stack, out = {}, {}, [], set(), []

    def visit(node):
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for dep in graph.get(node, ()):
            if dep not in index:
                visit(dep)
                low[node] = min(low[node], low[dep])
            elif dep in on_stack:
                low[node] = min(low[node], index[dep])
        if low[node] == index[node]:
            component = set()
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.add(member)
                if member == node:
                    break
            if len(component) > 1:
                out.append(frozenset(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return out


@pytest.fixture(scope="module")
def graph():
    return import_graph()


def test_the_graph_sees_function_level_and_relative_imports(graph):
    assert "cognate_tvm.train" in graph["cognate_tvm.model.cognate"]
    assert {"cognate_tvm.backends", "cognate_tvm.backends.base"} <= graph["cognate_tvm.metaschedule.runner"]
    assert "cognate_tvm.kernels.cpu" in graph["cognate_tvm.metaschedule.backend"]  # inside a method


def test_every_unit_is_on_a_layer(graph):
    for module in graph:
        _layer(module)


def test_no_import_circles(graph):
    circles = [c for c in _circles(graph) if c not in ALLOWED_CIRCLES]
    assert not circles, "import circles: " + "; ".join(" <-> ".join(sorted(c)) for c in circles)


def test_no_upward_imports(graph):
    up = sorted(f"{module} (layer {_layer(module)}) imports {dep} (layer {_layer(dep)})"
                for module, deps in graph.items() for dep in deps
                if _unit(dep) != _unit(module) and _layer(dep) > _layer(module))
    assert not up, "arrows up:\n" + "\n".join(up)


MAX_MODULE_LINES = 400  # a module this long holds more than one concept: split it


def test_every_module_is_under_the_line_limit():
    long = sorted((len(path.read_text().splitlines()), name) for name, (path, _) in _modules().items())
    long = [(lines, name) for lines, name in long if lines >= MAX_MODULE_LINES]
    assert not long, (f"modules of {MAX_MODULE_LINES} lines or more (split each along its concepts): "
                      + ", ".join(f"{name} ({lines} lines)" for lines, name in reversed(long)))


def test_the_rules_catch_a_circle_and_an_arrow_up():
    graph = {"cognate_tvm.backends.x": {"cognate_tvm.metaschedule"}, "cognate_tvm.metaschedule": {"cognate_tvm.backends.x"}}
    assert _circles(graph) == [frozenset(graph)]
    assert _layer("cognate_tvm.backends.x") < _layer("cognate_tvm.metaschedule")
