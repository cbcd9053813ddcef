"""A 2-minute simulated training that checkpoints every 10 s of work and is made to hit a CUDA OOM
at 100 s on its first try (tests/e2e/test_checkpoint_resume.py): its OOM retry resumes from the
checkpoint of 1:40 in the task instance's folder, so it has 20 s of work left, not 120 (and saves
one more checkpoint, at 110 s)."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from airflow.sdk import dag, task

from carma_airflow import gpu_task

TRAIN_S, EVERY_S, OOM_AT_S = 120.0, 10.0, 100.0


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
