"""Test helpers shipped with the package, for tests and for DAGs written against simulated GPUs.

- :func:`make_workload`: the workload the scheduler would queue for one try, to hand an executor
  directly (tests and benchmarks); imports Airflow when called, not at import.
- :func:`try_runner_env`: run a function of the test's own in each try's process instead of
  Airflow's supervisor (the boundary tests replace).
- :func:`simulated_training`: what a task runs on ``[carma] gpu_backend = simulated``; it lives
  with the simulated GPUs' task side (carma_airflow/taskrun/simulated_training.py) and is named
  here too because DAGs and docs import it from here (with :func:`spec_speedup`, its
  ``speedup`` from the spec sheets).

Nothing in carma_airflow imports this module (tests/test_layering.py): production code takes
what it needs from where it lives.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any
from uuid import uuid4

from carma_airflow.taskrun.simulated_training import (
    SimulatedCudaOOM,
    simulated_training,
    spec_speedup,
    training_slowdown,
)

if TYPE_CHECKING:
    from airflow.executors.workloads import ExecuteTask

__all__ = [
    "TRY_RUNNER_ENV",
    "SimulatedCudaOOM",
    "make_workload",
    "simulated_training",
    "spec_speedup",
    "training_slowdown",
    "try_runner_env",
]

TRY_RUNNER_ENV = "CARMA_TRY_RUNNER"  # read by carma_airflow/taskrun/launcher.py


def try_runner_env(function: Callable[..., int]) -> dict[str, str]:
    """The environment under which CarmaExecutor's launcher runs ``function`` in each try's process
    instead of Airflow's supervisor (``BaseExecutor.run_workload``, same signature): tests replace
    the supervisor at that boundary.  Set it before the executor starts; ``function`` must be a
    module-level function (the launcher imports it by name; its folder goes on PYTHONPATH)."""
    module = sys.modules[function.__module__]
    if not getattr(module, "__file__", None):
        raise ValueError(f"{function.__module__} has no file: the launcher could not import it")
    root = Path(str(module.__file__)).resolve().parents[function.__module__.count(".")]
    path = os.pathsep.join(p for p in (str(root), os.environ.get("PYTHONPATH", "")) if p)
    return {TRY_RUNNER_ENV: f"{function.__module__}:{function.__qualname__}", "PYTHONPATH": path}


def make_workload(
    task_id: str,
    *,
    dag_id: str = "dag",
    run_id: str = "run1",
    try_number: int = 1,
    executor_config: dict[str, Any] | None = None,
    dag_rel_path: str = "dag.py",
    bundle: str = "dags",
    token: str = "t",
    priority_weight: int = 1,
) -> ExecuteTask:
    """The workload the scheduler would queue for one try of ``dag_id.task_id`` (an unmapped task
    instance with fresh ids and nothing behind it in Airflow's database), to hand an executor
    directly (``queue_workload``) in tests and benchmarks.  Imports Airflow when called."""
    from airflow.executors.workloads import ExecuteTask
    from airflow.executors.workloads.base import BundleInfo
    from airflow.executors.workloads.task import TaskInstanceDTO

    ti = TaskInstanceDTO(
        id=uuid4(),
        task_id=task_id,
        dag_id=dag_id,
        run_id=run_id,
        try_number=try_number,
        dag_version_id=uuid4(),
        map_index=-1,
        pool_slots=1,
        priority_weight=priority_weight,
        executor_config=executor_config,
    )
    return ExecuteTask(
        ti=ti, dag_rel_path=Path(dag_rel_path), token=token, log_path=None, bundle_info=BundleInfo(name=bundle)
    )
