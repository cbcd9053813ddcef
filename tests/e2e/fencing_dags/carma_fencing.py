"""One simulated 40 GB GPU, two tries: one declares 8 GiB and grows to 30 GiB, its neighbour
declares and uses 12 GiB (tests/e2e/test_fenced_collocation.py).

The neighbour's memory ramps up slowly (3 GiB every 4 s) and the grower grows 10 s into its
work, so the neighbour is placed and holds part of its memory when the grower grows, and asks
for the rest after: unfenced, the neighbour is the one that crashes.  The grower's OOM retry grows
and ends 2 s later.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from airflow.sdk import dag, task

from carma_airflow import gpu_task


@dag(dag_id="carma_fencing", start_date=datetime(2026, 1, 1), schedule=None, catchup=False)
def fencing() -> None:
    @task(**gpu_task(memory="8GiB"), retries=0)
    def grower(ti: Any = None) -> dict[str, object]:
        from carma_airflow.testing import simulated_training

        # try 1 is stopped when it grows; its OOM retry, planned for 30 GiB and placed once the
        # GPU has room, grows as well and trains 2 s more (nothing is checked on its length)
        seconds = 24 if ti.try_number == 1 else 12
        return simulated_training(peak_mib=8192, seconds=seconds, grow_to_mib=30720, grow_after_s=10)

    @task(**gpu_task(memory="12GiB"), retries=0)
    def neighbour() -> dict[str, object]:
        from carma_airflow.testing import simulated_training

        return simulated_training(peak_mib=12288, seconds=10, ramp_s=16)

    grower()
    neighbour()


fencing()
