"""The package's shape: its imports flow one way, load -> cut -> synthesize -> run -> compose -> report.

Every import of the package's own modules is read from the source (at any depth, type-checking
imports included) and checked twice: against the stage each module belongs to, and against the
order of the stage packages that hold the modules, so that a module that climbs back to a later
stage or package, or a new cycle, fails here before it lands.
"""

from __future__ import annotations

import ast
import importlib.util
import pkgutil
from collections.abc import Iterable
from pathlib import Path

import networkx as nx

import pytest_dlbricks

PACKAGE = Path(pytest_dlbricks.__file__).parent
#: The stage packages in pipeline order: a package may import from itself and earlier ones. The package's own
#: ``__init__`` counts with the first; its entry points (the plugin, the hookspecs, ``python -m``) with the last.
PACKAGES = ("core", "cut", "timing", "simulating", "estimating", "storage", "rendering", "reporting", "wiring")
TOP_LEVEL = {"__init__": "core", "hooks": "wiring", "plugin": "wiring", "__main__": "wiring"}
#: The stages in the order the pipeline runs them; a module may import from its own stage and earlier ones.
STAGES: dict[str, set[str]] = {
    "vocabulary": {
        *("__init__", "core", "core.graph", "core.errors", "core.settings", "core.sweeps", "core.clock"),
        *("core.synthetic", "core.buffers", "core.placement", "core.identity", "core.noise", "core.budget"),
        *("core.wording", "core.verdict", "core.cycle_model"),
    },
    "runtime": {"core.runtime"},
    "load": {"cut", "cut.screening", "cut.ordering", "cut.samples", "cut.model_parts", "cut.loading", "cut.weightless"},
    "cut": {"cut.bricks", "cut.cutting", "cut.counters", "cut.fused_counters", "cut.flops", "cut.numerics"},
    "synthesize": {"timing", "timing.synthesis"},
    "run": {
        *("timing.running", "timing.overhead", "timing.probes", "timing.speed_trace", "timing.load"),
        *("timing.sharding", "timing.retiming", "timing.caches", "timing.neighbours"),
    },
    "simulate": {
        *("simulating", "simulating.callgrind_output", "simulating.simulation", "simulating.simulation_worker"),
        *("simulating.simulated_costs", "simulating.brick_edges"),
    },
    "compose": {
        *("estimating", "estimating.composition", "estimating.calibration", "estimating.analysis"),
        *("estimating.validation", "storage", "storage.store", "storage.store_records", "storage.atomic_files"),
        *("storage.file_digests", "storage.plans", "storage.machine_info"),
    },
    "report": {
        *("rendering", "rendering.formatting", "rendering.executor_text", "rendering.accuracy_text"),
        *("rendering.terminal", "rendering.html", "rendering.html_parts", "rendering.html_charts", "reporting"),
        *("reporting.report", "reporting.entries", "reporting.executor_entry", "reporting.validation_fields"),
        *("reporting.recomposition", "reporting.merging", "reporting.maps", "reporting.machines"),
        *("reporting.comparing", "reporting.drift", "reporting.estimates", "reporting.suite"),
    },
    "wiring": {
        *("wiring", "wiring.run_state", "wiring.engine", "wiring.items", "wiring.session", "wiring.collector"),
        *("wiring.tracking", "wiring.baselines", "wiring.options", "wiring.option_table", "wiring.distributed"),
        *("wiring.interruption", "wiring.heap", "wiring.warning_types", "wiring.cli", "wiring.simulated", "hooks"),
        "plugin",
        "__main__",
    },
}
RANK = {module: rank for rank, modules in enumerate(STAGES.values()) for module in modules}


def modules() -> list[str]:
    """Every module of the package by its dotted name inside it (a sub-package by its own), ``__init__`` for
    the package itself."""
    walked = pkgutil.walk_packages(pytest_dlbricks.__path__, prefix="pytest_dlbricks.")
    return ["__init__", *(module.name.removeprefix("pytest_dlbricks.") for module in walked)]


def source(module: str) -> Path:
    path = PACKAGE.joinpath(*module.split("."))
    if module == "__init__":
        return PACKAGE / "__init__.py"
    return path / "__init__.py" if path.is_dir() else path.with_suffix(".py")


def is_module(name: str) -> bool:
    path = PACKAGE.joinpath(*name.split("."))
    return bool(name) and (path.with_suffix(".py").is_file() or (path / "__init__.py").is_file())


def own_imports(path: Path, module: str) -> set[str]:
    """The package's modules that ``module``, read from ``path``, imports, wherever the import statement is."""
    is_package = path.name == "__init__.py"
    home = "pytest_dlbricks" + ("" if module == "__init__" else "." + module)
    anchor = home if is_package else home.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = importlib.util.resolve_name("." * node.level + base, anchor)
            if base != "pytest_dlbricks" and not base.startswith("pytest_dlbricks."):
                continue
            inside = base.removeprefix("pytest_dlbricks").removeprefix(".")
            for alias in node.names:
                name = f"{inside}.{alias.name}" if inside else alias.name
                found.add(name if is_module(name) else inside or "__init__")
        elif isinstance(node, ast.Import):
            found.update(
                a.name.removeprefix("pytest_dlbricks.") for a in node.names if a.name.startswith("pytest_dlbricks.")
            )
    return found


def import_graph() -> nx.DiGraph:
    graph = nx.DiGraph()
    graph.add_nodes_from(modules())
    for module in list(graph):
        graph.add_edges_from((module, imported) for imported in own_imports(source(module), module))
    return graph


def package_of(module: str) -> str:
    return TOP_LEVEL.get(module) or module.split(".")[0]


def upward_packages(edges: Iterable[tuple[str, str]]) -> list[str]:
    """The imports that climb from a package to a later one."""
    order = {package: rank for rank, package in enumerate(PACKAGES)}
    return [
        f"{importer} ({package_of(importer)}) imports {imported} ({package_of(imported)})"
        for importer, imported in edges
        if order[package_of(imported)] > order[package_of(importer)]
    ]


def test_every_module_has_a_stage() -> None:
    assert set(import_graph()) == set(RANK), "place new modules in STAGES, at the stage they serve"


def test_the_top_level_holds_the_entry_points_and_the_stage_packages() -> None:
    top = {module.name for module in pkgutil.iter_modules([str(PACKAGE)])}
    assert top == {*PACKAGES, *TOP_LEVEL} - {"__init__"}


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


def test_no_package_imports_a_later_one() -> None:
    assert upward_packages(import_graph().edges) == []


def test_an_upward_import_between_packages_fails(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text("def f():\n    from ..wiring.engine import DLBricksRun\n")
    planted = [("core.m", imported) for imported in own_imports(module, "core.m")]
    assert upward_packages(planted) == ["core.m (core) imports wiring.engine (wiring)"]


def test_only_the_runtime_module_imports_onnxruntime() -> None:
    """The version settings record, the conversion tools numerics uses and the worker process valgrind runs
    are the exceptions (see each)."""
    importers = set()
    for module in import_graph():
        tree = ast.parse(source(module).read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            names += [node.module or ""] if isinstance(node, ast.ImportFrom) and node.level == 0 else []
            if any(name.split(".")[0] == "onnxruntime" for name in names):
                importers.add(module)
    assert importers == {"core.runtime", "core.settings", "cut.numerics", "simulating.simulation_worker"}


def test_the_walk_sees_imports_inside_functions(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text("from . import graph\nfrom .. import __version__\n\ndef f():\n    from ..cut import loading\n")
    assert own_imports(module, "core.m") == {"core.graph", "__init__", "cut.loading"}


def stage_of(module: str) -> str:
    return next(stage for stage, modules in STAGES.items() if module in modules)
