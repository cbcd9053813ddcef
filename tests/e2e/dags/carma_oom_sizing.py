"""End-to-end DAG: a retry after a full-GPU OOM is sized from held + asked (tests/e2e/test_oom_sizing.py).

``fill0`` and ``fill1`` hold 26000 MiB on each simulated GPU (placed first: the highest priority)
until the test has seen grower's try 2 wait (it writes ``$AIRFLOW_HOME/release-<run id>``; 150 s at
most: below the 180 s the next test waits for a quiet deployment); ``grower`` (declared 5000 MiB,
unfenced) is placed beside one of them, holds 5000 MiB and then asks 13003 MiB more: the GPU is
full, a CUDA OOM.  Its try 2 is planned for what it held plus what it asked (about 18 GiB, grown),
waits for a GPU with that free and succeeds (issue 41).
"""

from __future__ import annotations

import os
from datetime import datetime

from airflow.sdk import dag, get_current_context, task

from carma_airflow import gpu_task


def _fill_until_released(at_most_s: float) -> int:
    """Holds 26000 MiB until the test releases this run (at most ``at_most_s``)."""
    from carma_airflow.testing import simulated_training

    release = os.path.join(os.environ["AIRFLOW_HOME"], f"release-{get_current_context()['run_id']}")
    return int(simulated_training(peak_mib=26000, seconds=at_most_s, until_file=release)["peak_mib"])


@dag(dag_id="carma_oom_sizing", start_date=datetime(2026, 1, 1), schedule=None, catchup=False)
def oom_sizing() -> None:
    @task(**gpu_task(memory="26000MiB", priority_weight=100), retries=0)
    def fill0() -> int:
        return _fill_until_released(150)  # it held a fixed 40 s

    @task(**gpu_task(memory="26000MiB", priority_weight=100), retries=0)
    def fill1() -> int:
        return _fill_until_released(150)  # it held a fixed 40 s

    @task(retries=0)
    def start() -> str:  # a CPU step, so that the fillers are placed before grower is queued
        return "go"

    @task(**gpu_task(memory="5000MiB", isolation="none", priority_weight=1), retries=0)
    def grower() -> int:
        from carma_airflow.testing import simulated_training

        return int(simulated_training(peak_mib=5000, seconds=3, grow_to_mib=18003, grow_after_s=0.5)["peak_mib"])

    fill0()
    fill1()
    start() >> grower()


oom_sizing()
