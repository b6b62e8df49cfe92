"""No import cycles anywhere in pipeprof/, function-level imports included (issue 13, item 4), and the
package's layers (``LAYERS``: measure -> analysis -> render -> pipeline -> cli, with where the others sit):
a module imports only from its own layer or below, analysis writes no words (``pipeprof.format``) and render
calls no analysis, each but for an explicit allow-list of today's exceptions that may only shrink.

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
import functools
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


@functools.cache  # read once a session: the tests only read it
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


# The package's layers, lowest first: a module imports only from its own layer or those below it. A new
# top-level module or package must be placed here (``test_every_module_has_a_layer``).
LAYERS: list[tuple[str, frozenset[str]]] = [
    ("foundations", frozenset({"errors", "numbers", "version", "run_check", "loader_rules"})),
    ("words", frozenset({"format"})),  # numbers become text
    ("settings", frozenset({"scenario", "machine_limits", "variants", "grid"})),
    ("records", frozenset({"run_meta", "run_folder", "resource_use", "track_record"})),
    ("storage", frozenset({"storage"})),
    ("measure", frozenset({"measure"})),
    ("analysis", frozenset({"analysis"})),
    ("in the training process", frozenset({"workload", "script", "attach", "adapters"})),
    ("render", frozenset({"render", "export"})),
    ("pipeline", frozenset({"pipeline"})),
    ("api", frozenset({"pipeprof", "api", "integrations", "gpu_check"})),  # "pipeprof": the package's __init__
    ("cli", frozenset({"cli", "__main__"})),
]

# Imports that go up a layer today, each a known debt; the list may only shrink (a listed import that is gone
# fails ``test_the_allow_lists_name_only_imports_that_exist``: take it off).
UPWARD_ALLOWED = {
    # settings validation reads the cores this process may use (cgroups, affinity): a reading of the machine
    ("pipeprof.machine_limits", "pipeprof.measure.environment"),
    # the light mode decodes the script hooks' event file as it streams
    ("pipeprof.measure.light", "pipeprof.script.event_file"),
    ("pipeprof.measure.light", "pipeprof.script.event_steps"),
}

# Words at the edge: analysis returns numbers and records (reasons: a kind plus its numbers), render writes the
# sentences. No analysis module phrases with pipeprof.format.
ANALYSIS_FORMATS_ALLOWED: set[str] = set()

# Render only formats what the summary carries: these render modules still call analysis (the import, the
# analysis module); no other import of analysis may start.
RENDER_ANALYSIS_ALLOWED = {
    # the report plots the counted steps from the raw records (its step timeline, the prefetch queue, ranks)
    ("pipeprof.render.html", "pipeprof.analysis.steps"),
}


def unit(module: str) -> str:
    """The top-level module or package of ``pipeprof`` a module belongs to ("pipeprof" for the package itself)."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def layer_violations(graph: dict[str, set[str]], layers: list[tuple[str, frozenset[str]]],
                     allowed: set[tuple[str, str]]) -> list[str]:
    """Each import of a module from a higher layer, not in ``allowed``, as "a (layer) -> b (layer)"."""
    rank = {u: i for i, (_, units) in enumerate(layers) for u in units}
    return [f"{a} ({layers[rank[unit(a)]][0]}) -> {b} ({layers[rank[unit(b)]][0]})"
            for a in sorted(graph) for b in sorted(graph[a])
            if rank[unit(b)] > rank[unit(a)] and (a, b) not in allowed]


def _edges(graph: dict[str, set[str]], source: str, target: str) -> set[tuple[str, str]]:
    return {(a, b) for a, bs in graph.items() for b in bs if unit(a) == source and unit(b) == target}


def test_every_module_has_a_layer():
    placed = {u for _, units in LAYERS for u in units}
    assert sum(len(units) for _, units in LAYERS) == len(placed)  # each in one layer
    assert {unit(m) for m in import_graph()} == placed


def test_each_layer_imports_only_from_itself_and_below():
    assert layer_violations(import_graph(), LAYERS, UPWARD_ALLOWED) == []


def test_analysis_does_not_write_words():
    graph = import_graph()
    phrasing = {a for a, b in _edges(graph, "analysis", "format")}
    assert phrasing - ANALYSIS_FORMATS_ALLOWED == set(), "analysis phrases: return numbers, let render/ word them"


# What render/ may take from analysis without computing anything: the typed summary and the records it holds
# (a summary.json read back, ``as_summary``, is reading, not analysing).
SUMMARY_RECORDS = frozenset({"Summary", "as_summary", "SUMMARY_SCHEMA_VERSION", "Recommendation", "Interval",
                             "LoadingSummary", "WorkerLoading", "DeviceMemory", "MemoryCreep",
                             "CodeView", "CProfileView", "StepCost",
                             "Attribution", "Verdict", "RankEntry", "Straggler", "Verification",
                             "TransformRow", "DecodeRow", "Throughput", "JobSection", "LightSection", "LightWindow",
                             "LightChange", "SampledSection", "SampledShare", "SampledWindow",
                             "Comparison", "FractionChange", "ThroughputRatio", "as_comparison",
                             "Disturbance", "PredictionCheck", "CrossCheck", "Diagnosis", "SampleSplit",
                             "Sweep", "SweepPoint", "Reason", "WRITTEN", "CacheCheck", "LiveWindow", "GateResult"})


def _imported_names(module: str) -> dict[str, set[str]]:
    """The names ``module`` imports from each pipeprof.analysis module (``from pipeprof.analysis.x import a, b``)."""
    path = _modules()[module]
    out: dict[str, set[str]] = {}
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("pipeprof.analysis."):
            out.setdefault(str(node.module), set()).update(a.name for a in node.names)
    return out


def test_render_does_not_call_analysis():
    graph = import_graph()
    computing = {(a, b) for a, b in _edges(graph, "render", "analysis")
                 if not _imported_names(a).get(b, {"?"}) <= SUMMARY_RECORDS}
    assert computing - RENDER_ANALYSIS_ALLOWED == set(), (
        "render/ computes: let the summary carry what the report shows (it may import the summary's records)")


def test_the_allow_lists_name_only_imports_that_exist():
    graph = import_graph()
    edges = {(a, b) for a, bs in graph.items() for b in bs}
    assert UPWARD_ALLOWED - edges == set()
    assert ANALYSIS_FORMATS_ALLOWED - {a for a, _ in _edges(graph, "analysis", "format")} == set()
    assert RENDER_ANALYSIS_ALLOWED - edges == set()


def test_layer_violations_name_the_upward_import():
    layers = [("low", frozenset({"a"})), ("high", frozenset({"b"}))]
    graph = {"pipeprof.a.x": {"pipeprof.b.y"}, "pipeprof.b.y": {"pipeprof.a.z"}, "pipeprof.a.z": set()}
    assert layer_violations(graph, layers, set()) == ["pipeprof.a.x (low) -> pipeprof.b.y (high)"]
    assert layer_violations(graph, layers, {("pipeprof.a.x", "pipeprof.b.y")}) == []


# Reading a run folder (report, compare, the summary after a profiled script ends), and checking a profile's
# --loader settings, need no torch: importing it costs a second of CPU in every such command (pipeprof report:
# 2.07 s -> 0.96 s without it, on 2 cores; and in the parent of every pipeprof profile).
READERS = ("pipeprof.cli.main", "pipeprof.pipeline.derive", "pipeprof.pipeline.script_run", "pipeprof.render.html",
           "pipeprof.run_folder", "pipeprof.analysis.summary")


def test_what_reads_a_run_folder_imports_no_torch():
    import subprocess
    import sys

    code = (f"import sys\nfor m in {READERS!r}:\n    __import__(m)\n"
            "from pipeprof.script.overrides import parse_one\nparse_one('train_loader.num_workers=2')\n"  # --loader
            "print(sorted(m for m in sys.modules if m == 'torch' or m.startswith('torch.')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]", f"torch imported by one of {READERS}: python -X importtime tells which"
