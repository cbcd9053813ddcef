"""Small tasks without a ``gpu_model`` beside tasks that need an 80 GB GPU, on simulated
2xA100-80GB + 2xV100-32GB (tests/e2e/test_mixed_fleet.py, issue 44: the layout a new user met).

Four small tasks (4 GiB) fit any GPU; four large ones (36 GiB) only an A100-80GB, two to a card.
Lowest index first, the small ones take both A100s and the large ones then run three to a card
beside them while each V100 holds one small task.
"""

from __future__ import annotations

from datetime import datetime

from airflow.sdk import dag, task

from carma_airflow import gpu_task

SMALL = [f"small_{i}" for i in range(4)]
LARGE = [f"large_{i}" for i in range(4)]


def _train(peak_mib: int, seconds: float) -> dict[str, object]:
    from carma_airflow.testing import simulated_training

    return simulated_training(peak_mib=peak_mib, seconds=seconds, activity=0.4)


@dag(dag_id="carma_mixed_scarce", start_date=datetime(2026, 1, 1), schedule=None, catchup=False)
def mixed_scarce() -> None:
    for task_id in SMALL:

        @task(task_id=task_id, **gpu_task(memory="4GiB"))
        def small() -> dict[str, object]:
            return _train(3 * 1024, 3.0)

        small()
    for task_id in LARGE:

        @task(task_id=task_id, **gpu_task(memory="36GiB"))
        def large() -> dict[str, object]:
            return _train(35 * 1024, 4.0)

        large()


mixed_scarce()
