"""One simulated 40 GB GPU, two tries: one declares 8 GiB and grows to 30 GiB, its neighbour
declares and uses 12 GiB (tests/e2e/test_fenced_collocation.py).

The neighbour's memory ramps up slowly (3 GiB every 4 s) and the grower grows 10 s into its
work, so the neighbour is placed and holds part of its memory when the grower grows, and asks
for the rest after: unfenced, the neighbour is the one that crashes.
"""

from __future__ import annotations

from datetime import datetime

from airflow.sdk import dag, task

from carma_airflow import gpu_task


@dag(dag_id="carma_fencing", start_date=datetime(2026, 1, 1), schedule=None, catchup=False)
def fencing() -> None:
    @task(**gpu_task(memory="8GiB"), retries=0)
    def grower() -> dict[str, object]:
        from carma_airflow.testing import simulated_training

        return simulated_training(peak_mib=8192, seconds=24, grow_to_mib=30720, grow_after_s=10)

    @task(**gpu_task(memory="12GiB"), retries=0)
    def neighbour() -> dict[str, object]:
        from carma_airflow.testing import simulated_training

        return simulated_training(peak_mib=12288, seconds=10, ramp_s=16)

    grower()
    neighbour()


fencing()
