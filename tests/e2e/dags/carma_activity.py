"""End-to-end DAG: simulated tasks of different SM activity (tests/e2e/test_activity.py)."""

from __future__ import annotations

from datetime import datetime

from airflow.sdk import dag, task

from carma_airflow import gpu_task

TRUTH = {"light": 0.2, "heavy": 0.8}  # each task's true solo SM activity on the simulated GPUs


def _train(activity: float) -> dict[str, object]:
    from carma_airflow.testing import simulated_training

    return simulated_training(peak_mib=4000, seconds=8, activity=activity)


@dag(dag_id="carma_activity", start_date=datetime(2026, 1, 1), schedule=None, catchup=False)
def activity() -> None:
    @task(**gpu_task(memory="6GiB"))
    def light() -> dict[str, object]:
        return _train(TRUTH["light"])

    @task(**gpu_task(memory="6GiB"))
    def heavy() -> dict[str, object]:
        return _train(TRUTH["heavy"])

    light()
    heavy()


activity()
