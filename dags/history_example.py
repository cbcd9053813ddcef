"""Example: CarmaExecutor learns a task's GPU memory from its earlier runs.

``train`` declares no memory.  Trigger the DAG twice:

1. First run: nothing is known, so the task is placed with the floor (``[carma] floor_mib``,
   5120 MiB free).  It reaches a peak of ``peak_mib`` (6000 MiB by default), which is recorded
   when it succeeds.
2. Second run: the estimate is that peak plus 10 %, rounded up to 256 MiB (6656 MiB), with
   the source ``history (1 run(s), max 6000 MiB)``.

``carma why carma_history_example.train`` shows both tries with their estimates and where they
came from (``memory estimate 5120 MiB from floor; peak 6000 MiB``, then ``memory estimate 6656 MiB
from history (1 run(s), max 6000 MiB)``).  Runs on simulated GPUs (``[carma] gpu_backend =
simulated``) with carma's synthetic workload; on real GPUs the peak comes from PyTorch's own
counters.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from airflow.sdk import Param, dag, task

from carma_airflow import gpu_task


@dag(
    dag_id="carma_history_example",
    start_date=datetime(2026, 1, 1),
    schedule=None,
    catchup=False,
    tags=["carma", "example"],
    params={
        "peak_mib": Param(6000, type="integer", minimum=1, description="GPU memory the synthetic training holds"),
        "seconds": Param(20.0, type="number", minimum=0, description="seconds of training"),
    },
)
def carma_history_example() -> None:
    @task(**gpu_task())  # no memory: learned from earlier successful runs, else the floor
    def train(params: dict[str, Any] | None = None) -> dict[str, Any]:
        from carma_airflow.testing import simulated_training

        p = params or {}
        return simulated_training(peak_mib=int(p["peak_mib"]), seconds=float(p["seconds"]))

    train()


carma_history_example()
