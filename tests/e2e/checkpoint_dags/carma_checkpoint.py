"""A 4-minute simulated training that checkpoints every 30 s of work and is made to hit a CUDA OOM
at 3 minutes on its first try (tests/e2e/test_checkpoint_resume.py): its OOM retry resumes from
the checkpoint of 3:00 in the task instance's folder, so it has 1 minute of work left, not 4."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from airflow.sdk import dag, task

from carma_airflow import gpu_task

TRAIN_S, EVERY_S, OOM_AT_S = 240.0, 30.0, 180.0


@dag(dag_id="carma_checkpoint", start_date=datetime(2026, 1, 1), schedule=None, catchup=False)
def checkpointed() -> None:
    @task(**gpu_task(memory="4GiB"), retries=0, retry_delay=timedelta(seconds=1))
    def train(ti: Any = None) -> dict[str, object]:
        from carma_airflow.testing import simulated_training

        return simulated_training(
            peak_mib=4096,
            seconds=TRAIN_S,
            checkpoint_every_s=EVERY_S,
            oom_after_s=OOM_AT_S if ti.try_number == 1 else None,  # the first try only
        )

    train()


checkpointed()
