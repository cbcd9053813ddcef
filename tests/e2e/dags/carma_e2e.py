"""End-to-end DAGs for CarmaExecutor on simulated GPUs (used by tests/e2e)."""

from __future__ import annotations

import os
from datetime import datetime

from airflow.sdk import dag, task

from carma_airflow import gpu_task


def _train(peak_mib: int, seconds: float, until: str | None = None) -> dict[str, object]:
    """Simulated training for ``seconds``; with ``until`` (a path), until that file exists (at most
    ``seconds``): as long as its test needs it, however loaded the machine."""
    from carma_airflow.testing import simulated_training

    out = simulated_training(peak_mib=peak_mib, seconds=seconds, until_file=until)
    return {
        "visible": os.environ.get("CUDA_VISIBLE_DEVICES", ""),
        "order": os.environ.get("CUDA_DEVICE_ORDER"),
        "peak_mib": out["peak_mib"],
        "guard": os.environ.get("TF_FORCE_GPU_ALLOW_GROWTH"),
    }


@dag(dag_id="carma_collocate", start_date=datetime(2026, 1, 1), schedule=None, catchup=False)
def collocate() -> None:
    @task(**gpu_task(memory="8GiB"))
    def train_a() -> dict[str, object]:
        return _train(6000, 12)

    @task(**gpu_task(memory="8GiB"))
    def train_b() -> dict[str, object]:
        return _train(6000, 12)

    @task(**gpu_task(memory="8GiB"))
    def train_c() -> dict[str, object]:
        return _train(6000, 12)

    @task
    def on_cpu() -> str:
        return os.environ.get("CUDA_VISIBLE_DEVICES", "<unset>")

    @task(executor="CarmaExecutor", executor_config={"carma": {"gpus": "two", "memory": "12 parsecs"}})
    def bad_config() -> str:
        return "must never run"

    train_a()
    train_b()
    train_c()
    on_cpu()
    bad_config()


@dag(dag_id="carma_oom", start_date=datetime(2026, 1, 1), schedule=None, catchup=False)
def oom() -> None:
    @task(**gpu_task(memory="30GiB", priority=10))
    def big_long() -> dict[str, object]:
        return _train(30000, 25)

    @task(**gpu_task(memory="30GiB", priority=5))
    def big_short() -> dict[str, object]:
        return _train(30000, 6)

    @task(**gpu_task(memory="2GiB"), retries=0)
    def underdeclared() -> dict[str, object]:
        import time

        time.sleep(3)  # the big tenant holds its memory by now
        return _train(20000, 3)

    big_long()
    big_short()
    underdeclared()


collocate()
oom()


@dag(dag_id="carma_queue_wait", start_date=datetime(2026, 1, 1), schedule=None, catchup=False)
def queue_wait() -> None:
    @task(**gpu_task(exclusive=True, priority=10))
    def first() -> dict[str, object]:
        return _train(1000, 20)

    @task(**gpu_task(exclusive=True))
    def second() -> dict[str, object]:
        return _train(1000, 1)

    first()
    second()


queue_wait()


def _until_released() -> dict[str, object]:
    """Trains until test_restart.py releases it ($CARMA_E2E_RELEASE, at most 300 s), else 35 s."""
    release = os.environ.get("CARMA_E2E_RELEASE")
    return _train(6000, 300, until=release) if release else _train(6000, 35)


@dag(dag_id="carma_restart", start_date=datetime(2026, 1, 1), schedule=None, catchup=False)
def restart() -> None:
    @task(**gpu_task(memory="8GiB"))
    def long_a() -> dict[str, object]:
        return _until_released()

    @task(**gpu_task(memory="8GiB"))
    def long_b() -> dict[str, object]:
        return _until_released()

    @task(**gpu_task(memory="8GiB"))
    def long_c() -> dict[str, object]:
        return _until_released()

    long_a()
    long_b()
    long_c()


restart()
