"""The package's layers: every import goes down (or stays in its layer), and no module imports
itself back through others. Every import counts — at module level, inside a function, or under
`TYPE_CHECKING` — since each one is a dependency a reader has to hold in mind.

The benchmarks (bench/) sit above the package: they may import gateway's public modules and
names (none whose dotted path or name starts with `_`), no module of gateway/ imports bench/,
and there is no import cycle in gateway/ and bench/ together."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2] / "gateway"

LAYERS: list[tuple[str, ...]] = [
    ("gateway", "gateway._offline", "gateway.errors", "gateway.core"),
    ("gateway.core.text",),
    ("gateway.core.recall", "gateway.core.memory"),
    ("gateway.core.context", "gateway.core.dialects"),
    ("gateway.config", "gateway.ports", "gateway.tokenizer", "gateway.inprocess"),
    ("gateway.ops",),
    ("gateway.store", "gateway.upstream"),
    ("gateway.store.recording",),
    ("gateway.memory", "gateway.memory.ports"),
    ("gateway.memory.embedders", "gateway.memory.records", "gateway.memory.pages"),
    ("gateway.memory.search",),
    ("gateway.memory.recall", "gateway.memory.jobs"),
    ("gateway.memory.control", "gateway.memory.erasure", "gateway.memory.export",
     "gateway.memory.runtime"),
    ("gateway.pipeline",),
    ("gateway.wiring",),
    ("gateway.http", "gateway.worker"),
    ("gateway.cli", "gateway.__main__"),
]
"""Lowest first. A module belongs to the layer of its longest listed prefix; it may import its
own layer and those before it. `gateway.memory` (the package's `__init__`) and `ports` sit
below every memory room; the recall and the jobs are peers that never import each other."""

PEERS_APART = [("gateway.memory.recall", "gateway.memory.jobs"),
               ("gateway.store", "gateway.upstream")]
"""Peers of one layer that must not import each other at all."""


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in sorted(ROOT.rglob("*.py"))}


def imports_of(name: str, modules: dict[str, Path] = MODULES) -> set[str]:
    """The modules of `modules` that `name` imports (a `from package import module` names the
    module)."""
    path = modules[name]
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([base] if base else [])])
            found |= {f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base
                      for a in node.names}
    return {m for m in found if m in modules and m != name}


GRAPH = {name: imports_of(name) for name in MODULES}

BENCH = {module_name(p): p for p in sorted((ROOT.parent / "bench").rglob("*.py"))}
EVERY = MODULES | BENCH
"""gateway/ and bench/: the modules the benchmarks' imports are checked over."""
EVERY_GRAPH = {name: imports_of(name, EVERY) for name in EVERY}


def layer_of(name: str) -> tuple[int, str]:
    best: tuple[int, str] | None = None
    for rank, prefixes in enumerate(LAYERS):
        for prefix in prefixes:
            if (name == prefix or name.startswith(prefix + ".")) and \
                    (best is None or len(prefix) > len(best[1])):
                best = (rank, prefix)
    assert best is not None, f"{name} is in no layer: add it to LAYERS"
    return best


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
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

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_the_graph_sees_every_room():
    assert len(MODULES) > 100
    assert "gateway.pipeline.chat" in GRAPH["gateway.http.routes"] | GRAPH["gateway.http.app"]


def test_no_module_imports_itself_back_through_others():
    assert cycles(GRAPH) == []


def test_no_import_cycle_in_gateway_and_bench():
    assert cycles(EVERY_GRAPH) == []


def test_the_bench_graph_sees_the_benchmarks():
    assert len(BENCH) > 50
    assert "bench.locomo.simulate" in EVERY_GRAPH["bench.locomo.ranker"]
    assert "gateway.core.recall.ranking" in EVERY_GRAPH["bench.locomo.simulate"]


def test_gateway_never_imports_bench():
    reaching = sorted((n, m) for n in MODULES for m in EVERY_GRAPH[n] if m in BENCH)
    named = sorted(n for n in MODULES for imported in _imported_names(MODULES[n])
                   if imported == "bench" or imported.startswith("bench."))
    assert reaching == [] and named == []


def _imported_names(path: Path) -> list[str]:
    """Every absolute module name an import statement of `path` names."""
    names = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            names.append(node.module)
    return names


def private_gateway_imports(path: Path) -> list[str]:
    """`line: what` for each import of `path` that reaches a private part of gateway: a module
    or a name starting with `_`."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            dotted = [a.name for a in node.names if a.name.split(".")[0] == "gateway"]
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "gateway":
            dotted = [f"{node.module}.{a.name}" for a in node.names]
        else:
            continue
        found += [f"{node.lineno}: {d}" for d in dotted
                  if any(part.startswith("_") for part in d.split("."))]
    return found


@pytest.mark.parametrize("name", sorted(BENCH))
def test_bench_imports_only_public_gateway_names(name):
    assert private_gateway_imports(BENCH[name]) == []


def test_a_private_import_is_caught(tmp_path):
    source = tmp_path / "b.py"
    source.write_text("import gateway._offline\nfrom gateway.core.recall import fusion, _x\n"
                      "from gateway.core.recall.ranking import DEPTH\n")
    assert private_gateway_imports(source) == ["1: gateway._offline",
                                               "2: gateway.core.recall._x"]


def test_cycle_finder_finds_a_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


@pytest.mark.parametrize("name", sorted(MODULES))
def test_imports_go_down_the_layers(name):
    rank, _ = layer_of(name)
    upward = sorted(m for m in GRAPH[name] if layer_of(m)[0] > rank)
    assert upward == [], f"{name} (layer {rank}) imports a higher layer"


@pytest.mark.parametrize("a, b", PEERS_APART)
def test_peers_do_not_import_each_other(a, b):
    def inside(name: str, prefix: str) -> bool:
        return layer_of(name)[1] == prefix

    crossing = sorted((n, m) for n in MODULES for m in GRAPH[n]
                      if (inside(n, a) and inside(m, b)) or (inside(n, b) and inside(m, a)))
    assert crossing == []


def test_folders_stay_small():
    top = [p for p in ROOT.glob("*.py")]
    assert len(top) <= 10, sorted(p.name for p in top)
    for folder in [p for p in ROOT.rglob("*") if p.is_dir() and p.name != "__pycache__"]:
        modules = [p for p in folder.glob("*.py") if p.name != "__init__.py"]
        assert len(modules) <= 15, folder


def test_every_package_says_what_lives_there():
    for init in ROOT.rglob("__init__.py"):
        tree = ast.parse(init.read_text())
        assert ast.get_docstring(tree), f"{init.relative_to(ROOT.parent)} has no docstring"
