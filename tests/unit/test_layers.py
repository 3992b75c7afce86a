"""The house's rules, read from the imports themselves (module level and the lazy ones inside functions):
each room imports only rooms below it, click stays in the CLI, pyspark in the driver-side runtime and
the state data source."""

from __future__ import annotations

import ast
import glob
import importlib
import importlib.util
import os
import shutil
import subprocess
from pathlib import Path

import pytest

PACKAGE = Path(__file__).parents[2] / "sparkpoint"

# Lower imports nothing higher. runtime, the driver side, stands beside the core rooms: it shares the job
# directory (jobs.protocol), the adapters and what is known of each source (spark.sources: the one room of it),
# and nothing but spark-submit's command line reaches it.
RANK = {"errors": 0, "config": 0, "times": 0, "results": 0, "json_input": 0, "lookup": 0, "paths": 0,
        "spark_versions": 0, "adapters": 1, "spark": 2, "savepoints": 3, "jobs": 4, "cli": 5, "web": 5}
RUNTIME_MAY_IMPORT = {"errors", "config", "times", "results", "json_input", "lookup", "paths", "spark_versions",
                      "adapters", "runtime", "jobs.protocol", "spark.sources"}


def room(module: str) -> str:
    """sparkpoint.<room>[.…] → <room>; the package's own __main__ counts as the CLI."""
    parts = module.split(".")
    return "cli" if parts[1:] in (["__main__"], []) else parts[1]


def imports() -> list[tuple[str, str, int]]:
    """(importing module, imported module, line) for every import in the package."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        module = ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts).removesuffix(".__init__")
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                found += [(module, alias.name, node.lineno) for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                found += [(module, _imported_module(node.module, alias.name), node.lineno) for alias in node.names]
    return found


def _imported_module(source: str, name: str) -> str:
    """The module `from source import name` imports: ``source.name`` when that is a module of sparkpoint
    (`from sparkpoint.jobs import run`), else ``source``."""
    return f"{source}.{name}" if source.startswith("sparkpoint") and _is_module(f"{source}.{name}") else source


def _is_module(dotted: str) -> bool:
    try:
        return importlib.util.find_spec(dotted) is not None
    except ModuleNotFoundError:  # its parent is a module, not a package
        return False


def imported_names() -> list[tuple[str, str, str, int]]:
    """(importing module, source module, name, line) for every `from sparkpoint.… import name`."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        module = ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts).removesuffix(".__init__")
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("sparkpoint"):
                found += [(module, node.module, alias.name, node.lineno) for alias in node.names]
    return found


def test_the_scan_sees_module_level_and_lazy_imports():
    found = {(module, imported) for module, imported, _ in imports()}
    assert ("sparkpoint.jobs.run", "sparkpoint.jobs.replace") in found  # at module level
    assert ("sparkpoint.cli.job_cmds", "sparkpoint.jobs.run") in found  # inside the command's function
    assert ("sparkpoint.spark.state_rows", "pyspark.sql") in found  # lazily, in spark_session()


def test_each_room_imports_only_rooms_below_it():
    upward = []
    for module, imported, line in imports():
        if not imported.startswith("sparkpoint.") or imported == "sparkpoint":
            continue
        source, target = room(module), room(imported)
        if source == "runtime":
            allowed = target in RUNTIME_MAY_IMPORT or ".".join(imported.split(".")[1:3]) in RUNTIME_MAY_IMPORT
        else:  # the two faces, the CLI and the page, share the core, not each other
            allowed = target != "runtime" and RANK[target] <= RANK[source] and {source, target} != {"cli", "web"}
            allowed = allowed or (source, imported.rsplit(".", 1)[0]) == ("cli", "sparkpoint.web")
        if not allowed:
            upward.append(f"{module}:{line} imports {imported}")
    assert upward == []


def test_every_import_of_a_sparkpoint_name_resolves():
    """A name imported inside a function is looked up only when that command runs: after a move, a stale
    one would fail at 3 a.m., not at import time."""
    missing = []
    for module, imported, line in imports():
        if not imported.startswith("sparkpoint."):
            continue
        try:
            importlib.import_module(imported)
        except ModuleNotFoundError:
            missing.append(f"{module}:{line} imports {imported}")
    for module, source, name, line in imported_names():
        if not hasattr(importlib.import_module(source), name) and not _is_module(f"{source}.{name}"):
            missing.append(f"{module}:{line} imports {name} from {source}")
    assert missing == []


def test_click_stays_in_the_cli_pyspark_in_the_driver_side_and_the_kafka_client_in_its_adapter():
    misplaced = []
    for module, imported, line in imports():
        top = imported.split(".")[0]
        if top == "click" and room(module) != "cli":
            misplaced.append(f"{module}:{line} imports click")
        if top in ("starlette", "jinja2", "uvicorn") and room(module) not in ("web", "cli"):
            misplaced.append(f"{module}:{line} imports {imported} (the page's stack: web, and `ui` lazily)")
        if top in ("pyspark", "py4j") and room(module) != "runtime" and module != "sparkpoint.spark.state_rows":
            misplaced.append(f"{module}:{line} imports {imported}")
        if top == "kafka" and module != "sparkpoint.adapters.kafka_log":
            misplaced.append(f"{module}:{line} imports {imported}")
    assert misplaced == []
    assert ("sparkpoint.adapters.kafka_log", "kafka.admin") in {(m, i) for m, i, _ in imports()}  # seen, lazily



def circles(edges: set[tuple[str, str]]) -> list[list[str]]:
    """The circles of a graph of imports (importing, imported): each strongly connected component of more than
    one module (Tarjan's algorithm, without recursion), its modules sorted."""
    graph: dict[str, list[str]] = {}
    for module, imported in sorted(edges):
        graph.setdefault(module, []).append(imported)
        graph.setdefault(imported, [])
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []
    for root, imported in graph.items():
        if root in index:
            continue
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        work = [(root, iter(imported))]
        while work:
            node, successors = work[-1]
            for successor in successors:
                if successor not in index:
                    index[successor] = low[successor] = len(index)
                    stack.append(successor)
                    on_stack.add(successor)
                    work.append((successor, iter(graph[successor])))
                    break
                if successor in on_stack:
                    low[node] = min(low[node], index[successor])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = [stack.pop()]
                    while component[-1] != node:
                        component.append(stack.pop())
                    on_stack.difference_update(component)
                    if len(component) > 1:
                        found.append(sorted(component))
    return sorted(found)


def test_the_circle_scan_finds_each_circle_and_nothing_else():
    edges = {("a", "b"), ("b", "c"), ("c", "a"), ("c", "d"), ("d", "e"), ("e", "d"), ("e", "f"), ("g", "a")}
    assert circles(edges) == [["a", "b", "c"], ["d", "e"]]
    assert circles({("a", "b"), ("b", "c"), ("a", "c")}) == []


def test_no_import_circles_among_the_modules():
    """A circle of imports (a lazy import counts: it only hides the circle until that function runs) means
    its modules share a piece that belongs in a lower module they all import."""
    edges = {(module, imported) for module, imported, _ in imports()
             if imported.startswith("sparkpoint.") and imported != module}
    assert circles(edges) == []


def test_no_module_is_over_450_lines():
    """A module that long does several jobs: split it by them."""
    long = [f"{path.relative_to(PACKAGE.parent)}: {lines} lines" for path in sorted(PACKAGE.rglob("*.py"))
            if (lines := len(path.read_text().splitlines())) > 450]
    assert long == []


# The oldest Python each supported Spark runs on (Spark 3.5: 3.8; 4.0: 3.9; 4.1 and 4.2: 3.10): a cluster's driver
# runs the Python its cluster has, not the CLI's.
DRIVER_PYTHONS = ("3.8", "3.9", "3.10")


def _pythons(versions) -> dict[str, str]:
    """Each version's interpreter on this machine: pyenv's (a pyenv shim on the PATH runs only the active ones),
    else one on the PATH."""
    found = {}
    for version in versions:
        candidates = [*sorted(glob.glob(os.path.expanduser(f"~/.pyenv/versions/{version}.*/bin/python"))),
                      shutil.which(f"python{version}")]
        first = next((path for path in candidates if path), None)
        if first:
            found[version] = first
    return found


def test_the_driver_side_runtime_imports_on_the_oldest_python_of_each_supported_spark_with_the_standard_library_only():
    """What a driver loads of sparkpoint (every module of runtime/, and all it imports) with no site-packages
    (-I -S: no pyspark, nothing installed), on each Python a supported Spark's driver may run. It failed on
    datetime.UTC (3.11+) and on subscripting collections.abc.Callable at import (3.9+)."""
    pythons = _pythons(DRIVER_PYTHONS)
    if not pythons:
        pytest.skip(f"none of Python {', '.join(DRIVER_PYTHONS)} is on this machine")
    # With -I -S there is no site-packages: an import of anything but the standard library and sparkpoint fails.
    probe = ("import importlib, pkgutil, sys; sys.path.insert(0, sys.argv[1]); import sparkpoint.runtime as r; "
             "[importlib.import_module('sparkpoint.runtime.' + m.name) for m in pkgutil.iter_modules(r.__path__)]")
    for version, python in pythons.items():
        done = subprocess.run([python, "-I", "-S", "-c", probe, str(PACKAGE.parent)], capture_output=True, text=True,
                              timeout=60)
        assert done.returncode == 0, (version, done.stderr[-2000:])
