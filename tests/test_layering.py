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
    # its result file, so it never loads the Store class (Airflow itself loads SQLAlchemy, for its own DB).
    code = (
        f"import sys, {module}\nprint(','.join(sorted(m for m in sys.modules if m == 'carma_airflow.store.store')))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "", f"{module} loaded {out.stdout.strip()}"
