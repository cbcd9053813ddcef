"""Example: a small training pipeline with CPU steps on LocalExecutor and GPU steps on CarmaExecutor.

Runs on simulated GPUs (``[carma] gpu_backend = simulated``) with carma's synthetic workload;
on real GPUs replace ``simulated_training`` with your training code, nothing else changes.
"""

from __future__ import annotations

from datetime import datetime

from airflow.sdk import dag, task

from carma_airflow import gpu_task


@dag(
    dag_id="carma_example", start_date=datetime(2026, 1, 1), schedule="@daily", catchup=False, tags=["carma", "example"]
)
def carma_example() -> None:
    @task
    def prepare_data() -> list[int]:
        return [32, 64, 128]  # batch sizes to sweep

    @task(**gpu_task(memory="6GiB"))
    def train_resnet(batch_size: int) -> dict[str, object]:
        from carma_airflow.testing import simulated_training

        # peak grows with the batch size; 128 does not fit its declared 6 GiB on a busy GPU:
        # CARMA recognises the CUDA OOM and retries it on a GPU with room
        return simulated_training(peak_mib=2000 + 40 * batch_size, seconds=20)

    @task(**gpu_task())  # no memory declared: learned from earlier runs, else a 5 GiB floor
    def evaluate(results: list[dict[str, object]]) -> int:
        from carma_airflow.testing import simulated_training

        simulated_training(peak_mib=3000, seconds=5)
        return len(results)

    evaluate(train_resnet.expand(batch_size=prepare_data()))


carma_example()
