"""A mapped GPU task whose instances need different memory (used by tests/e2e/test_mapped.py)."""

from __future__ import annotations

import os
from datetime import datetime

from airflow.providers.standard.operators.bash import BashOperator
from airflow.sdk import dag, task

from carma_airflow import gpu_task

PEAKS_MIB = [1500, 5000, 9000]  # three fine-tuning jobs of different sizes


def _train(peak_mib: int) -> dict[str, object]:
    from carma_airflow.testing import simulated_training

    out = simulated_training(peak_mib=peak_mib, seconds=1)
    return {"visible": os.environ.get("CUDA_VISIBLE_DEVICES", ""), "peak_mib": out["peak_mib"]}


@dag(dag_id="carma_mapped", start_date=datetime(2026, 1, 1), schedule=None, catchup=False)
def mapped() -> None:
    # declared: one size per map index
    @task(**gpu_task(memory_by_index=["2GiB", "6GiB", "10GiB"]))
    def finetune(peak_mib: int) -> dict[str, object]:
        return _train(peak_mib)

    finetune.expand(peak_mib=PEAKS_MIB)

    # the classic operator form of the issue: per-instance kwargs, per-instance memory in .partial()
    BashOperator.partial(
        task_id="bash_finetune", **gpu_task(memory_by_index=["3GiB", "5GiB"], memory="7GiB")
    ).expand_kwargs([{"bash_command": f"echo {size} $CUDA_VISIBLE_DEVICES"} for size in ("small", "medium", "large")])

    # nothing declared: the floor on the first run, each instance's own peak afterwards
    @task(**gpu_task())
    def learn(peak_mib: int) -> dict[str, object]:
        return _train(peak_mib)

    learn.expand(peak_mib=PEAKS_MIB)


mapped()
