"""The carma_airflow pieces the kit shares with CarmaExecutor, all importable without Airflow.

The task environment (GPUs by UUID, PCI order, framework guards, result file) and the tenants'
reservations come from :mod:`carma_airflow.executor.taskenv`, the same code the executor uses.
"""

from __future__ import annotations

from carma_airflow.executor.outcome import RESULT_ENV, TryResult, read_result, write_result
from carma_airflow.executor.taskenv import GUARDS, gpu_task_env, tenants_seen
from carma_airflow.executor.view import build_view

__all__ = [
    "GUARDS",
    "RESULT_ENV",
    "TryResult",
    "build_view",
    "gpu_task_env",
    "read_result",
    "tenants_seen",
    "write_result",
]
