"""The package's shape: its imports flow one way, load -> cut -> synthesize -> run -> compose -> report.

Every import of the package's own modules is read from the source (at any depth, type-checking
imports included) and checked against the stage each module belongs to, so a module that climbs
back to a later stage, or a new cycle, fails here before it lands.
"""

from __future__ import annotations

import ast
import pkgutil
from pathlib import Path

import networkx as nx

import pytest_dlbricks

PACKAGE = Path(pytest_dlbricks.__file__).parent
#: The stages in the order the pipeline runs them; a module may import from its own stage and earlier ones.
STAGES: dict[str, set[str]] = {
    "vocabulary": {
        *("__init__", "graph", "errors", "settings", "sweeps", "clock", "synthetic", "placement", "identity"),
        *("noise", "budget", "wording", "verdict", "cycle_model"),
    },
    "runtime": {"runtime"},
    "load": {"screening", "ordering", "samples", "model_parts", "loading", "weightless"},
    "cut": {"bricks", "cutting", "counters", "fused_counters", "flops", "numerics"},
    "synthesize": {"synthesis"},
    "run": {"running", "overhead", "probes", "speed_trace", "load", "sharding", "retiming"},
    "simulate": {"callgrind_output", "simulation", "simulation_worker"},
    "compose": {
        *("composition", "calibration", "analysis", "validation"),
        *("store", "store_records", "atomic_files", "file_digests", "plans"),
        "machine_info",
    },
    "count": {"simulated_costs"},
    "report": {
        *("formatting", "executor_text", "accuracy_text", "terminal", "html", "html_parts", "html_charts"),
        *("report", "entries", "executor_entry", "validation_fields", "recomposition", "merging", "maps"),
        *("machines", "comparing", "drift", "estimates", "suite"),
    },
    "wiring": {
        *("run_state", "engine", "items", "session", "collector", "tracking", "baselines", "plugin", "options"),
        *("option_table", "distributed", "hooks", "interruption", "warning_types", "cli", "__main__", "simulated"),
    },
}
RANK = {module: rank for rank, modules in enumerate(STAGES.values()) for module in modules}


def own_imports(path: Path) -> set[str]:
    """The package's modules that the module at ``path`` imports, wherever the import statement is."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            if node.level == 1 and node.module is None:  # from . import name
                found.update(alias.name for alias in node.names)
            elif node.level == 1 and node.module is not None:
                found.add(node.module.split(".")[0])
            elif node.level == 0 and node.module and node.module.startswith("pytest_dlbricks."):
                found.add(node.module.split(".")[1])
        elif isinstance(node, ast.Import):
            found.update(a.name.split(".")[1] for a in node.names if a.name.startswith("pytest_dlbricks."))
    return {name if (PACKAGE / f"{name}.py").exists() else "__init__" for name in found}


def import_graph() -> nx.DiGraph:
    modules = ["__init__", *(module.name for module in pkgutil.iter_modules([str(PACKAGE)]))]
    graph = nx.DiGraph()
    graph.add_nodes_from(modules)
    for module in modules:
        graph.add_edges_from((module, imported) for imported in own_imports(PACKAGE / f"{module}.py"))
    return graph


def test_every_module_has_a_stage() -> None:
    assert set(import_graph()) == set(RANK), "place new modules in STAGES, at the stage they serve"


def test_the_imports_have_no_cycle() -> None:
    graph = import_graph()
    assert graph.number_of_edges() > len(graph), "the walk finds the package's imports"
    cycle = None if nx.is_directed_acyclic_graph(graph) else nx.find_cycle(graph)
    assert cycle is None, f"import cycle: {cycle}"


def test_no_stage_imports_a_later_one() -> None:
    upward = [
        f"{importer} ({stage_of(importer)}) imports {imported} ({stage_of(imported)})"
        for importer, imported in import_graph().edges
        if RANK[imported] > RANK[importer]
    ]
    assert upward == []


def test_only_the_runtime_module_imports_onnxruntime() -> None:
    """The version settings record, the conversion tools numerics uses and the worker process valgrind runs
    are the exceptions (see each)."""
    importers = set()
    for module in import_graph():
        tree = ast.parse((PACKAGE / f"{module}.py").read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            names += [node.module or ""] if isinstance(node, ast.ImportFrom) and node.level == 0 else []
            if any(name.split(".")[0] == "onnxruntime" for name in names):
                importers.add(module)
    assert importers == {"runtime", "settings", "numerics", "simulation_worker"}


def test_the_walk_sees_imports_inside_functions(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text("from . import graph\n\ndef f():\n    from .loading import load_model\n")
    assert own_imports(module) == {"graph", "loading"}


def stage_of(module: str) -> str:
    return next(stage for stage, modules in STAGES.items() if module in modules)
