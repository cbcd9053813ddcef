"""End-to-end DAGs: CarmaExecutor as a good citizen of Airflow's scheduler (tests/e2e/test_citizen.py).

A GPU backlog beside CPU work, a deadline callback, a long GPU task to stop the scheduler under.
"""

from __future__ import annotations

import json
import os
import time
from datetime import datetime, timedelta
from pathlib import Path

from airflow.sdk import DeadlineAlert, DeadlineReference, SyncCallback, dag, task

from carma_airflow import gpu_task

BACKLOG = 12  # exclusive GPU tries, more than [core] parallelism = 8 in the test


def _train(seconds: float) -> str:
    from carma_airflow.testing import simulated_training

    simulated_training(peak_mib=2000, seconds=seconds)
    return os.environ.get("CUDA_VISIBLE_DEVICES", "")


def _backlog_seconds() -> float:
    """A backlog try's work: CARMA_E2E_GPU_SECONDS, or 1 s once the file CARMA_E2E_GPU_QUICK names
    exists (the test makes it once what it asserts on the backlog's pace is checked: the rest of
    the backlog then only has to run, each try once)."""
    quick = os.environ.get("CARMA_E2E_GPU_QUICK")
    if quick and os.path.exists(quick):
        return 1.0
    return float(os.environ.get("CARMA_E2E_GPU_SECONDS", "4"))


@dag(dag_id="carma_backlog", start_date=datetime(2026, 1, 1), schedule=None, catchup=False, max_active_tasks=64)
def backlog() -> None:
    for i in range(BACKLOG):

        @task(task_id=f"gpu_{i:02d}", **gpu_task(memory="2GiB", exclusive=True))
        def gpu() -> str:
            return _train(_backlog_seconds())

        gpu()


@dag(dag_id="carma_cpu_six", start_date=datetime(2026, 1, 1), schedule=None, catchup=False)
def cpu_six() -> None:
    for i in range(6):

        @task(task_id=f"cpu_{i}")
        def cpu() -> str:
            return os.environ.get("CUDA_VISIBLE_DEVICES", "<unset>")

        cpu()


def deadline_missed(marker: str, **context: object) -> None:
    """The deadline's callback: leaves a marker (with where it ran) the test reads."""
    Path(marker).write_text(
        json.dumps({"pid": os.getpid(), "visible": os.environ.get("CUDA_VISIBLE_DEVICES"), "at": time.time()})
    )


@dag(
    dag_id="carma_deadline",
    start_date=datetime(2026, 1, 1),
    schedule=None,
    catchup=False,
    deadline=DeadlineAlert(
        reference=DeadlineReference.DAGRUN_QUEUED_AT,
        interval=timedelta(seconds=3),
        callback=SyncCallback(
            "carma_citizen.deadline_missed",
            kwargs={"marker": os.environ.get("CARMA_E2E_DEADLINE_MARKER", "/tmp/carma-deadline-marker")},
        ),
    ),
)
def deadline() -> None:
    @task(**gpu_task(memory="2GiB"))
    def slow_gpu() -> str:
        return _train(15)

    slow_gpu()


@dag(dag_id="carma_clear", start_date=datetime(2026, 1, 1), schedule=None, catchup=False)
def clear() -> None:
    """The same long task through both executors; the test clears both while they run."""

    def _long(try_number: int) -> int:
        time.sleep(60 if try_number == 1 else 1)  # the try that is cleared runs long, the next is short
        return try_number

    @task
    def local_long(ti=None) -> int:  # type: ignore[no-untyped-def]
        return _long(ti.try_number)

    @task(**gpu_task(memory="2GiB"))
    def carma_long(ti=None) -> int:  # type: ignore[no-untyped-def]
        return _long(ti.try_number)

    local_long()
    carma_long()


backlog()
cpu_six()
deadline()
clear()
