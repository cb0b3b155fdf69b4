"""The apps' layering (docs/architecture.md): an app imports only the apps below it, and the
modules of one app do not import each other in a circle.

The import graph is read from the source with ast, so an `import` inside a function counts like
one at the top of the module (a late import is still a dependency; it only hides the cycle from
Python). Migrations are left out: they name models by string.
"""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# Bottom to top. An app may import the apps before it in this list, and no other; config, the
# composition root (settings, URLs, the API, which app adds what to whose page), may import all.
LAYERS = [
    "core",
    "workspaces",
    "billing",
    "datasets",
    "training",
    "annotation",
    "deploy",
    "evaluations",
    "sweeps",
]
MAY_IMPORT = {app: set(LAYERS[:i]) for i, app in enumerate(LAYERS)} | {"config": set(LAYERS)}
APPS = list(MAY_IMPORT)

# The one declared way up: a new workspace gets the default plan and a credit account holding
# its signup grant, in the transaction that creates it (workspaces.services.workspaces).
INTERFACES = {"workspaces": {"billing.plans", "billing.ledger"}}

# Module cycles within an app that another change under way is removing. Listed so the check
# stays in the suite; each entry goes when its cycle does (the test then passes: strict=False).
CYCLES_BEING_REMOVED: dict[str, str] = {}


def _modules() -> dict[str, Path]:
    modules = {}
    for app in APPS:
        for path in sorted((ROOT / app).rglob("*.py")):
            if "migrations" in path.parts:
                continue
            name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
            modules[name.removesuffix(".__init__")] = path
    return modules


def _imported(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The modules of the apps that `name` imports, each resolved to the longest known name
    (`from training import selectors` is training.selectors, `import training` is training)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(parts + ([base] if base else []))
            names = [base] + [f"{base}.{alias.name}" for alias in node.names]
        else:
            continue
        for target in names:
            while target and target not in modules:
                target = target.rpartition(".")[0]
            if target and target != name:
                found.add(target)
    return found


MODULES = _modules()
GRAPH = {name: _imported(name, path, MODULES) for name, path in MODULES.items()}


def _app(module: str) -> str:
    return module.partition(".")[0]


def _cycles(nodes: set[str]) -> list[list[str]]:
    """Strongly connected groups of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in GRAPH[v] & nodes:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for v in sorted(nodes):
        if v not in index:
            visit(v)
    return found


def test_the_graph_sees_every_app_and_late_imports():
    assert {_app(m) for m in MODULES} == set(APPS)
    assert "training.selectors" in GRAPH["config.pages"]  # imported inside page_parts_wire()


def _refused(app: str, graph: dict[str, set[str]]) -> list[str]:
    """`module -> target` for each import of an app that its row of MAY_IMPORT does not allow."""
    allowed_modules = INTERFACES.get(app, set())
    return sorted(
        f"{module} -> {target}"
        for module, targets in graph.items()
        if _app(module) == app
        for target in targets
        if _app(target) not in MAY_IMPORT[app] | {app}
        and not any(target == m or target.startswith(m + ".") for m in allowed_modules)
    )


@pytest.mark.parametrize("app", APPS)
def test_an_app_imports_only_the_apps_below_it(app):
    refused = _refused(app, GRAPH)
    assert not refused, f"{app} may import only {sorted(MAY_IMPORT[app])}:\n" + "\n".join(refused)


@pytest.mark.parametrize(
    "app",
    [
        pytest.param(app, marks=pytest.mark.xfail(reason=CYCLES_BEING_REMOVED[app], strict=False))
        if app in CYCLES_BEING_REMOVED
        else app
        for app in APPS
    ],
)
def test_the_modules_of_an_app_import_each_other_without_a_cycle(app):
    cycles = _cycles({m for m in MODULES if _app(m) == app})
    assert not cycles, "\n".join(" <-> ".join(c) for c in cycles)


def test_a_layering_break_is_caught(tmp_path):
    """The check can fail: a billing module importing training inside a function is refused,
    and so is a workspaces module reaching billing beyond its declared interface."""
    probe = tmp_path / "probe.py"
    probe.write_text("def f():\n    from training.selectors import job_costs\n")
    graph = {"billing.probe": _imported("billing.probe", probe, MODULES)}
    assert _refused("billing", graph) == ["billing.probe -> training.selectors"]
    graph = {"workspaces.probe": {"billing.plans", "billing.payments"}}
    assert _refused("workspaces", graph) == ["workspaces.probe -> billing.payments"]


# Training's process side is one package (issue 27: its runner and supervisor had grown to 935
# and 1256 lines): a phase of an attempt that outgrows this becomes a module of its own.
PROCESS_MAX_LINES = 500


def test_no_module_of_trainings_process_side_is_over_500_lines():
    sizes = {
        name: len(path.read_text().splitlines())
        for name, path in MODULES.items()
        if name.startswith("training.process.")
    }
    assert {"training.process.runner", "training.process.supervisor"} <= set(sizes)
    over = {name: lines for name, lines in sizes.items() if lines > PROCESS_MAX_LINES}
    assert not over, f"over {PROCESS_MAX_LINES} lines: {over}"


# What a run reports as it goes (epochs, console, system samples) has one writer, whoever ran the
# job: a supervised run's trainer and an external run's client alike (issue 27).
REPORT_ROWS = {"EpochMetric", "LogChunk", "SystemSample"}
ROW_WRITES = {"create", "bulk_create", "update_or_create", "get_or_create"}


def _report_row_writes(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        if isinstance(func, ast.Name) and func.id in REPORT_ROWS:
            found.append(f"{func.id}(...)")
        elif (
            isinstance(func, ast.Attribute)
            and func.attr in ROW_WRITES
            and isinstance(func.value, ast.Attribute)
            and func.value.attr == "objects"
            and isinstance(func.value.value, ast.Name)
            and func.value.value.id in REPORT_ROWS
        ):
            found.append(f"{func.value.value.id}.objects.{func.attr}")
    return found


def test_what_a_run_reports_as_it_goes_has_one_writer():
    writers = {name: found for name, path in MODULES.items() if (found := _report_row_writes(path))}
    assert set(writers) == {"training.process.writer"}, writers
