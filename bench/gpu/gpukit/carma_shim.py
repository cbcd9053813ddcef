"""The carma_airflow pieces the kit shares with CarmaExecutor, all importable without Airflow.

The task environment (GPUs by UUID, PCI order, framework guards, result file) comes from
:mod:`carma_airflow.launching.taskenv`, the same code the executor uses; the scheduling cycle and
its reservations come from :mod:`carma_airflow.core.cycle`.
"""

from __future__ import annotations

from carma_airflow.executor.gpus import build_view
from carma_airflow.launching import GUARDS, gpu_task_env
from carma_airflow.taskrun.outcome import RESULT_ENV, TryResult, read_result, write_result

__all__ = [
    "GUARDS",
    "RESULT_ENV",
    "TryResult",
    "build_view",
    "gpu_task_env",
    "read_result",
    "write_result",
]
