"""No import cycles anywhere in pipeprof/, function-level imports included (issue 13, item 4).

The scan reads every module's source with ``ast`` (nothing is imported), takes
every ``import`` statement wherever it sits — module level, inside functions,
under ``if TYPE_CHECKING`` — and resolves ``from x import y`` to the module
``x.y`` when ``y`` is a module, else to ``x`` (so ``from pipeprof import
__version__`` is an edge to the package's ``__init__``). The packages above an
imported module are not edges of their own: Python runs a package's
``__init__`` to the end before any module below it, so a package that imports
its own submodules is no cycle.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pipeprof

ROOT = Path(pipeprof.__file__).resolve().parent


def _modules() -> dict[str, Path]:
    """Dotted name -> file, for every module of the package."""
    found = {}
    for path in sorted(ROOT.rglob("*.py")):
        parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def _resolve_relative(module: str, is_package: bool, level: int, name: str | None) -> str:
    base = module.split(".") if is_package else module.split(".")[:-1]
    base = base[: len(base) - (level - 1)] if level > 1 else base
    return ".".join([*base, name] if name else base)


def import_graph() -> dict[str, set[str]]:
    """Module -> the pipeprof modules it imports (at any level in the file)."""
    modules = _modules()
    graph: dict[str, set[str]] = {m: set() for m in modules}

    def add(src: str, target: str) -> None:
        if target in modules and target != src:
            graph[src].add(target)

    for module, path in modules.items():
        is_package = path.name == "__init__.py"
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name.split(".")[0] == "pipeprof":
                        add(module, alias.name)
            elif isinstance(node, ast.ImportFrom):
                base = (_resolve_relative(module, is_package, node.level, node.module) if node.level
                        else node.module or "")
                if base.split(".")[0] != "pipeprof":
                    continue
                for alias in node.names:
                    add(module, f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base)
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle as a path ``[a, b, ..., a]``, or None."""
    state: dict[str, int] = {}  # 1: on the stack, 2: done
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return [*stack[stack.index(nxt):], nxt]
            if nxt not in state:
                found = visit(nxt)
                if found:
                    return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state:
            found = visit(node)
            if found:
                return found
    return None


def test_no_import_cycle_in_pipeprof():
    cycle = find_cycle(import_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_the_scan_sees_function_level_and_from_imports():
    graph = import_graph()
    # A real edge of each kind the scan must see, so a scan that saw nothing could not pass the test above.
    assert "pipeprof.analysis.attribution" in graph["pipeprof.analysis.verdict"]
    assert "pipeprof.api" in graph["pipeprof"]  # the lazy import inside pipeprof.__getattr__
    assert "pipeprof.measure.gpu" in graph["pipeprof.script.session"]  # from pipeprof.measure import gpu
    assert "pipeprof.storage.base" in graph["pipeprof.storage"]  # from pipeprof.storage.base import Builder


def _reachable(graph: dict[str, set[str]], start: str) -> set[str]:
    seen, todo = set(), [start]
    while todo:
        for nxt in graph.get(todo.pop(), ()):
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    return seen


def test_the_analysis_flows_one_way():
    """steps -> attribution -> verdict -> recommend -> summary: each imports only stages before it."""
    graph = import_graph()
    order = [f"pipeprof.analysis.{m}" for m in ("steps", "attribution", "verdict", "recommend", "summary")]
    for i, stage in enumerate(order[:-1]):
        later = set(order[i + 1:])
        assert not _reachable(graph, stage) & later, f"{stage} reaches a later stage: {_reachable(graph, stage) & later}"
    assert set(order[:-1]) <= graph["pipeprof.analysis.summary"]


def test_find_cycle_reports_the_path():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None
