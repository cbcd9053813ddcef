"""Airflow workloads built by hand, to hand an executor directly in tests and benchmarks.

Apart from carma_airflow/testing.py, which the simulated GPUs' task processes import and which
therefore stays free of Airflow (tests/monitor/test_monitor_layering.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any
from uuid import uuid4

if TYPE_CHECKING:
    from airflow.executors.workloads import ExecuteTask


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


__all__ = ["make_workload"]
