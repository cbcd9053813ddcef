"""One-way dependencies and what a module holds (docs/design.md, "Layers").

- core, sim, monitor and the task helpers load neither Airflow nor SQLAlchemy, and NVML is loaded
  only by monitor/nvml.py when a probe first samples;
- no import climbs a layer (LAYERS below), at module or function level (``TYPE_CHECKING`` blocks
  aside), and no two packages, nor two modules, import each other at any level;
- a module's size is a prompt, not a rule: no module only re-exports, a small one-class module
  split off its only user says what it holds on its own, and past 900 lines is a smell alarm.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from collections import defaultdict
from functools import cache
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "carma_airflow"

FORBIDDEN = ("airflow", "pynvml", "sqlalchemy", "torch")


@pytest.mark.parametrize(
    "module",
    [
        "carma_airflow",
        "carma_airflow.core",
        "carma_airflow.sim",
        "carma_airflow.monitor",
        "carma_airflow.monitor.nvml",
        "carma_airflow.monitor.sampler",
        "carma_airflow.monitor.simulated",
        "carma_airflow.testing",
        "carma_airflow.taskrun.simulated_training",
        "carma_airflow.launching",
        "carma_airflow.executor",
        "carma_airflow.executor.gpus",
        "carma_airflow.store.records",
    ],
)
def test_import_loads_no_airflow_nvml_or_sqlalchemy(module: str) -> None:
    code = (
        f"import sys, {module}\n"
        f"bad = sorted(m for m in sys.modules if m.split('.')[0] in {FORBIDDEN!r})\n"
        "print(','.join(bad))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "", f"{module} loaded {out.stdout.strip()}"


def test_core_imports_only_stdlib_and_itself() -> None:
    code = (
        "import sys\n"
        "before = set(sys.modules)\n"
        "import carma_airflow.core\n"
        "new = {m.split('.')[0] for m in set(sys.modules) - before}\n"
        "print(','.join(sorted(n for n in new if n not in sys.stdlib_module_names and n != 'carma_airflow')))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "", f"core pulled in third-party modules: {out.stdout.strip()}"


STORE_LIGHT = ("carma_airflow.store.errors", "carma_airflow.store.records", "carma_airflow.store.url")


@pytest.mark.parametrize(
    "module",
    [
        "carma_airflow.taskrun.listener",
        "carma_airflow.taskrun.retry",
        "carma_airflow.dagparse.cluster_policy",
        "carma_airflow.taskrun.outcome",
        "carma_airflow.launching.taskenv",
        "carma_airflow.testing",
        "carma_airflow.taskrun.simulated_training",
    ],
)
def test_code_that_runs_in_task_processes_cannot_reach_the_store(module: str) -> None:
    # Only the executor and the agents write the store: a task (code from a DAG) reports through
    # its result file, so it never loads the Store class or any of its parts (Airflow itself loads
    # SQLAlchemy, for its own DB); the records, errors and URL helpers are plain Python.
    code = (
        f"import sys, {module}\n"
        "heavy = (m for m in sys.modules if m.startswith('carma_airflow.store.'))\n"
        f"print(','.join(sorted(m for m in heavy if m not in {STORE_LIGHT!r})))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "", f"{module} loaded {out.stdout.strip()}"


# -- the import graph ---------------------------------------------------------------------------
# A unit is a top-level package (core, executor, ...) or a loose top-level module (keys, settings,
# ...); ``carma_airflow`` is the package's own __init__ (its public names).  Bottom layer first.
# A unit imports only units of its own layer or of layers below, and no two units, packages or
# modules import each other, directly or around a circle.  Derived from the tree of 2026-12-06;
# docs/design.md says what each layer holds.  A new unit goes in the layer its imports put it in.
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("model: standard library only", ("core",)),
    ("shared vocabulary over the model", ("keys", "checkpoint")),
    ("backends: GPUs, the database, the simulator", ("monitor", "store", "sim")),
    (
        "configuration, what DAG authors import, the task side, read views",
        ("config", "carma_airflow", "taskrun", "views"),
    ),
    ("seams: launching a try, Airflow's DAG side", ("launching", "dagparse")),
    ("several hosts, the local deployment", ("distributed", "dev")),
    ("user surfaces", ("cli", "ui")),
    ("Airflow's entry points", ("executor", "plugin", "provider")),
    ("outside the product: test helpers, shipped DAGs and examples", ("testing", "demo_dags", "examples")),
)

# Imports that climb a layer, each named, dated and with its reason (none on 2026-12-06).
CLIMBS_ALLOWED: dict[tuple[str, str], str] = {}

# Circles, each with the work that ends it (none on 2026-12-06, issue 43).  Once a circle is gone
# its entry must go too (the test says so), so the list only ever shrinks.
PACKAGE_CIRCLES_ALLOWED: dict[frozenset[str], str] = {}
MODULE_CIRCLES_ALLOWED: dict[frozenset[str], str] = {}


def _name_of(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@cache
def _modules() -> dict[str, Path]:
    return {_name_of(path): path for path in sorted(PACKAGE.rglob("*.py"))}


def _is_package(name: str) -> bool:
    return _modules()[name].name == "__init__.py"


class _Imports(ast.NodeVisitor):
    """Every carma_airflow module one module imports, at module or function level (an import
    under ``if TYPE_CHECKING:`` runs never and is left out): target -> the first line."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.found: dict[str, int] = {}

    def visit_If(self, node: ast.If) -> None:
        if "TYPE_CHECKING" in ast.unparse(node.test):
            for child in node.orelse:
                self.visit(child)
        else:
            self.generic_visit(node)

    def _add(self, target: str, line: int) -> None:
        if target.split(".", maxsplit=1)[0] == "carma_airflow" and target != self.name:
            self.found.setdefault(target, line)

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            self._add(alias.name, node.lineno)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.level:  # relative: from the importer's package
            base = self.name.split(".") if _is_package(self.name) else self.name.split(".")[:-1]
            module = ".".join([*base[: len(base) - node.level + 1], *([node.module] if node.module else [])])
        else:
            module = node.module or ""
        submodules = [f"{module}.{a.name}" for a in node.names if f"{module}.{a.name}" in _modules()]
        for target in submodules:
            self._add(target, node.lineno)
        if len(submodules) < len(node.names):  # names defined in ``module`` itself
            self._add(module, node.lineno)


@cache
def _imports() -> dict[str, dict[str, int]]:
    """Module -> the carma_airflow modules it imports (at any level but TYPE_CHECKING) -> line."""
    graph: dict[str, dict[str, int]] = {}
    for name, path in _modules().items():
        visitor = _Imports(name)
        visitor.visit(ast.parse(path.read_text()))
        graph[name] = {t: line for t, line in visitor.found.items() if t in _modules()}
    return graph


def _unit(name: str) -> str:
    parts = name.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def _package(name: str) -> str:
    """The package a module is in; a loose top-level module counts as a package of its own."""
    if _is_package(name) or name.count(".") == 1:
        return name
    return name.rsplit(".", 1)[0]


def _layer_of() -> dict[str, int]:
    return {unit: i for i, (_, units) in enumerate(LAYERS) for unit in units}


def _circles(graph: dict[str, set[str]]) -> list[frozenset[str]]:
    """The strongly connected parts of ``graph`` with more than one node (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[frozenset[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph.get(root, ()))))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    part = set()
                    while True:
                        top = stack.pop()
                        on_stack.discard(top)
                        part.add(top)
                        if top == node:
                            break
                    if len(part) > 1:
                        found.append(frozenset(part))
            elif child not in index:
                index[child] = low[child] = len(index)
                stack.append(child)
                on_stack.add(child)
                work.append((child, iter(sorted(graph.get(child, ())))))
            elif child in on_stack:
                low[node] = min(low[node], index[child])
    return found


def _grouped(key: object) -> dict[str, set[str]]:
    """The import graph at the grain ``key`` gives (unit, package or module); a module's import of
    a package it is in (its own ``__init__``) is Python loading parents, not a dependency."""
    assert callable(key)
    graph: dict[str, set[str]] = defaultdict(set)
    for source, targets in _imports().items():
        for target in targets:
            if source.startswith(target + "."):
                continue
            a, b = key(source), key(target)
            if a != b:
                graph[a].add(b)
    return graph


def _edges_between(members: frozenset[str], key: object) -> list[str]:
    assert callable(key)
    return sorted(
        f"{s}:{line} -> {t}"
        for s, targets in _imports().items()
        for t, line in targets.items()
        if key(s) in members and key(t) in members and key(s) != key(t) and not s.startswith(t + ".")
    )


def test_every_unit_has_a_layer() -> None:
    placed = [unit for _, units in LAYERS for unit in units]
    assert len(placed) == len(set(placed)), "a unit is in two layers"
    missing = sorted({_unit(name) for name in _modules()} - set(placed))
    assert not missing, f"place {missing} in LAYERS (tests/test_layering.py) and in docs/design.md's layer table"


def test_the_design_guide_names_every_unit_in_its_layer() -> None:
    text = (PACKAGE.parent / "docs" / "design.md").read_text()
    rows = {line.split("|")[1].strip(): line for line in text.splitlines() if line.startswith("| ")}
    misplaced = [
        unit for i, (_, units) in enumerate(LAYERS) for unit in units if f"`{unit}`" not in rows.get(str(i), "")
    ]
    assert not misplaced, f"docs/design.md's layer table does not name these in their layer's row: {misplaced}"


def test_no_import_climbs_a_layer() -> None:
    layer = _layer_of()
    climbs = {
        (source, target): f"{source}:{line} -> {target}"
        for source, targets in _imports().items()
        for target, line in targets.items()
        if layer.get(_unit(target), 0) > layer.get(_unit(source), 0)
    }
    unexpected = sorted(text for edge, text in climbs.items() if edge not in CLIMBS_ALLOWED)
    assert not unexpected, (
        "imports that climb a layer (docs/design.md, Layers): hand the lower side what it needs "
        f"(a parameter, a Protocol of its own) or move the code down: {unexpected}"
    )
    gone = sorted(f"{a} -> {b}" for a, b in CLIMBS_ALLOWED if (a, b) not in climbs)
    assert not gone, f"these climbs are gone: take them out of CLIMBS_ALLOWED: {gone}"


@pytest.mark.parametrize(
    ("grain", "key", "allowed"),
    [
        ("units", _unit, {}),
        ("packages", _package, PACKAGE_CIRCLES_ALLOWED),
        ("modules", lambda name: name, MODULE_CIRCLES_ALLOWED),
    ],
)
def test_no_import_circles_at_any_level(grain: str, key: object, allowed: dict[frozenset[str], str]) -> None:
    # imports inside functions count too: they defer a circle, they do not end it
    circles = _circles(_grouped(key))
    unexpected = {", ".join(sorted(c)): _edges_between(c, key) for c in circles if c not in allowed}
    assert not unexpected, f"import circles between {grain}: {unexpected}"
    gone = sorted(", ".join(sorted(c)) for c in allowed if c not in circles)
    assert not gone, f"these circles are gone: take them out of the allowed list in tests/test_layering.py: {gone}"


# Packages that are a public entry: an outsider imports the package (what its ``__init__`` names),
# never one of its modules; a module of the package imports its siblings directly.
ENTRY_PACKAGES = ("carma_airflow.launching", "carma_airflow.executor.")


def _exported(package: str) -> set[str]:
    tree = ast.parse(_modules()[package].read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and [ast.unparse(t) for t in node.targets] == ["__all__"]:
            return set(ast.literal_eval(node.value))
    return set()


def test_outsiders_import_a_sub_package_only_through_its_public_entry() -> None:
    entries = sorted(
        name
        for name in _modules()
        if _is_package(name) and (name == ENTRY_PACKAGES[0] or name.startswith(ENTRY_PACKAGES[1]))
    )
    reached_in = sorted(
        f"{source}:{line} -> {target}"
        for source, targets in _imports().items()
        for target, line in targets.items()
        for entry in entries
        if target.startswith(entry + ".")
        and not source.startswith(entry + ".")
        and source != entry
        and target.rsplit(".", 1)[1] not in _exported(entry)
    )
    assert not reached_in, (
        "import these through their package (what its __init__ names; add a name there if outsiders need it): "
        f"{reached_in}"
    )


def test_production_code_does_not_import_the_test_helpers() -> None:
    users = sorted(
        f"{source}:{line}"
        for source, targets in _imports().items()
        for target, line in targets.items()
        if target == "carma_airflow.testing" and source != target
    )
    assert not users, f"carma_airflow.testing is for tests and example DAGs; import from where it lives: {users}"


# -- what a module holds ------------------------------------------------------------------------
# Size is a prompt, not a rule (docs/design.md): a module is the right size when it has one reason
# to change.  What is checked is what it holds.

# Small one-class modules with a single user, kept apart because they hold a concern of their own.
SMALL_PIECES_KEPT: dict[str, str] = {
    "carma_airflow.executor.airflow.running": "Airflow's `running` set, a live view of the try book (BaseExecutor's)",
    "carma_airflow.executor.airflow.standby": "while its parts cannot start: tries held, the start tried again",
    "carma_airflow.store.snapshots": "the carma_snapshot table's calls: one Store mixin per table, as the others",
}

SMELL_LINES = 900


def _holds(path: Path) -> tuple[list[str], list[str], bool]:
    """A module's public classes, its public functions, and whether it holds anything but imports."""
    classes: list[str] = []
    functions: list[str] = []
    own = False
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):  # a docstring
            continue
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            continue
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            continue
        if isinstance(node, ast.Assign) and [ast.unparse(t) for t in node.targets] == ["__all__"]:
            continue
        own = True
        if isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
            classes.append(node.name)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and not node.name.startswith("_"):
            functions.append(node.name)
    return classes, functions, own


def test_no_module_only_re_exports() -> None:
    # a package's __init__ may name its public entry; any other module holds something of its own
    shells = sorted(name for name, path in _modules().items() if path.name != "__init__.py" and not _holds(path)[2])
    assert not shells, f"modules that only import and re-export: import from where the names live: {shells}"


def _small_split_pieces() -> dict[str, str]:
    """Modules under 100 lines holding one public class and nothing else public, used by one module
    only, of their own package and not its __init__ (a registry, as core/policies' is): a piece
    split off its user.  Module -> its user."""
    users: dict[str, set[str]] = defaultdict(set)
    for source, targets in _imports().items():
        for target in targets:
            users[target].add(source)
    pieces = {}
    for name, path in _modules().items():
        if path.name == "__init__.py" or len(path.read_text().splitlines()) >= 100:
            continue
        classes, functions, _ = _holds(path)
        who = users.get(name, set())
        if len(classes) == 1 and not functions and len(who) == 1:
            (user,) = who
            if _package(user) == _package(name) and not _is_package(user):
                pieces[name] = user
    return pieces


def test_a_small_one_class_module_split_off_its_only_user_says_why() -> None:
    pieces = _small_split_pieces()
    unexplained = {name: user for name, user in pieces.items() if name not in SMALL_PIECES_KEPT}
    assert not unexplained, (
        "one small class used by one module only (module: its user): merge it into its user, or, if it "
        f"holds a concern of its own, say which in SMALL_PIECES_KEPT: {unexplained}"
    )
    gone = sorted(set(SMALL_PIECES_KEPT) - set(pieces))
    assert not gone, f"no longer small one-class pieces: take them out of SMALL_PIECES_KEPT: {gone}"


def test_no_module_past_the_smell_alarm() -> None:
    sizes = {name: len(path.read_text().splitlines()) for name, path in _modules().items()}
    over = {name: n for name, n in sizes.items() if n > SMELL_LINES}
    assert not over, f"past {SMELL_LINES} lines: a smell, look for a second reason to change and move it out: {over}"


def test_the_scheduler_side_does_not_import_task_process_internals_at_import() -> None:
    # the launcher process and a try's process import taskrun/ without the executor's threads
    code = (
        "import sys, carma_airflow.taskrun.launcher, carma_airflow.taskrun.listener, carma_airflow.taskrun.retry\n"
        "print(','.join(sorted(m for m in sys.modules if m.startswith('carma_airflow.executor'))))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "", f"task-side code loaded {out.stdout.strip()}"
