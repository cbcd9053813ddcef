"""End-to-end DAG: which failures of a GPU task are retried, and how often (tests/e2e/test_retries.py).

Only a CUDA OOM gets CARMA's extra tries; a try killed by a signal, one that can never be
placed, a bad executor_config and any other error get exactly the author's ``retries``.
"""

from __future__ import annotations

import os
import signal
from datetime import datetime, timedelta

from airflow.sdk import dag, task

from carma_airflow import gpu_task

SOON = timedelta(seconds=1)


def _killed() -> None:
    os.kill(os.getpid(), signal.SIGKILL)  # as the host's OOM killer or an operator would


@dag(dag_id="carma_retries", start_date=datetime(2026, 1, 1), schedule=None, catchup=False)
def retries() -> None:
    @task(**gpu_task(memory="2GiB"), retries=0)
    def killed_no_retries() -> None:
        _killed()

    @task(**gpu_task(memory="2GiB"), retries=1, retry_delay=SOON)
    def killed_one_retry() -> None:
        _killed()

    @task(**gpu_task(memory="100GiB"), retries=0)
    def too_much_memory() -> None:
        raise AssertionError("must never run")

    @task(**gpu_task(gpus=3, memory="1GiB"), retries=0)
    def too_many_gpus() -> None:
        raise AssertionError("must never run")

    @task(**gpu_task(memory="100GiB"), retries=1, retry_delay=SOON)
    def too_much_memory_one_retry() -> None:
        raise AssertionError("must never run")

    @task(executor="CarmaExecutor", executor_config={"carma": {"gpus": "two"}}, retries=1, retry_delay=SOON)
    def bad_config_one_retry() -> None:
        raise AssertionError("must never run")

    @task(**gpu_task(memory="2GiB"), retries=0)
    def plain_error() -> None:
        raise ValueError("a bug in the task, not a GPU problem")

    killed_no_retries()
    killed_one_retry()
    too_much_memory()
    too_many_gpus()
    too_much_memory_one_retry()
    bad_config_one_retry()
    plain_error()


retries()
