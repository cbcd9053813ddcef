"""End-to-end DAG: what a newcomer reads while tries wait and after one grew (tests/e2e/test_newcomer.py).

``hog`` holds both simulated GPUs alone (exclusive, placed first: the highest priority) while
``urgent`` and ``routine`` wait behind it, until the test has read what it reads (it writes
``$AIRFLOW_HOME/release-<run id>``; 150 s at most); ``grower`` then runs alone, declared 2 GiB,
and grows to 12 GB: the live cap lets it through, and its log and `carma why` say so.
"""

from __future__ import annotations

import os
from datetime import datetime

from airflow.sdk import dag, get_current_context, task

from carma_airflow import gpu_task


def _train(peak_mib: int, seconds: float, until: str | None = None) -> int:
    from carma_airflow.testing import simulated_training

    return int(simulated_training(peak_mib=peak_mib, seconds=seconds, until_file=until)["peak_mib"])


def _release_file() -> str:
    """What the test writes once it has read what it reads of this run."""
    return os.path.join(os.environ["AIRFLOW_HOME"], f"release-{get_current_context()['run_id']}")


@dag(dag_id="carma_newcomer", start_date=datetime(2026, 1, 1), schedule=None, catchup=False)
def newcomer() -> None:
    @task(**gpu_task(gpus=2, memory="1GiB", exclusive=True, priority_weight=100), retries=0)
    def hog() -> int:
        # it trained a fixed 30 s; 150 s at most: below the 180 s the next test waits for a quiet deployment
        return _train(1000, 150, until=_release_file())

    @task(retries=0)
    def start() -> str:  # a CPU step, so that hog is placed before the two below are queued
        return "go"

    @task(**gpu_task(memory="1GiB", priority_weight=50), retries=0)
    def urgent() -> int:
        return _train(1000, 1)

    @task(**gpu_task(memory="1GiB", priority_weight=1), retries=0)
    def routine() -> int:
        return _train(1000, 1)

    @task(**gpu_task(memory="2GiB"), retries=0)
    def grower() -> int:
        return _train(12000, 2)

    waits = [urgent(), routine()]
    start() >> waits
    waits >> grower()
    hog()


newcomer()
