"""One-way dependencies (design.md): core, sim, monitor and the task helpers load neither Airflow
nor SQLAlchemy, and NVML is loaded only by monitor/nvml.py when a probe first samples."""

import subprocess
import sys

import pytest

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
        "carma_airflow.executor.taskenv",
        "carma_airflow.testing",
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


def _module_imports() -> dict[str, set[str]]:
    """Each carma_airflow module and the carma_airflow modules it imports at its top level
    (imports inside functions and under TYPE_CHECKING are deferred: they make no circle at import)."""
    import ast
    from pathlib import Path

    root = Path(__file__).resolve().parents[1] / "carma_airflow"
    graph: dict[str, set[str]] = {}
    for path in root.rglob("*.py"):
        parts = path.relative_to(root.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        tree = ast.parse(path.read_text())
        deps: set[str] = set()
        for node in tree.body:
            if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
                continue
            for sub in ast.walk(node) if isinstance(node, (ast.Import, ast.ImportFrom, ast.Try)) else ():
                if isinstance(sub, ast.ImportFrom) and sub.module and sub.module.startswith("carma_airflow"):
                    deps.add(sub.module)
                elif isinstance(sub, ast.Import):
                    deps.update(a.name for a in sub.names if a.name.startswith("carma_airflow"))
        graph[name] = deps
    return graph


def test_no_import_circles_between_modules() -> None:
    graph = _module_imports()
    seen: dict[str, int] = {}  # 1: on the current path, 2: done
    circles: list[list[str]] = []

    def visit(name: str, path: list[str]) -> None:
        seen[name] = 1
        for dep in sorted(d for d in graph.get(name, ()) if d in graph and d != name):
            if seen.get(dep) == 1 and not name.startswith(dep + "."):  # a package's own __init__ is not a circle
                circles.append([*path[path.index(dep) :], dep] if dep in path else [name, dep])
            elif dep not in seen:
                visit(dep, [*path, dep])
        seen[name] = 2

    for module in sorted(graph):
        if module not in seen:
            visit(module, [module])
    assert not circles, f"import circles: {circles}"


@pytest.mark.parametrize("package", ["executor", "store", "core", "core/policies", "sim"])
def test_modules_stay_small(package: str) -> None:
    from pathlib import Path

    folder = Path(__file__).resolve().parents[1] / "carma_airflow" / package
    sizes = {p.name: len(p.read_text().splitlines()) for p in folder.glob("*.py")}
    # past 400 lines is a prompt to look for a module's second responsibility, and to move it out
    over = {name: n for name, n in sizes.items() if n > 400}
    assert not over, over


def test_the_scheduler_side_does_not_import_task_process_internals_at_import() -> None:
    # the launcher process and a try's process import taskrun/ without the executor's threads
    code = (
        "import sys, carma_airflow.taskrun.launcher, carma_airflow.taskrun.listener, carma_airflow.taskrun.retry\n"
        "print(','.join(sorted(m for m in sys.modules if m.startswith('carma_airflow.executor'))))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "", f"task-side code loaded {out.stdout.strip()}"
