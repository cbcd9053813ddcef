"""A 1-minute simulated training that checkpoints every 5 s of work and is made to hit a CUDA OOM
at 50 s on its first try (tests/e2e/test_checkpoint_resume.py): its OOM retry resumes from the
checkpoint of 0:50 in the task instance's folder, so it has 10 s of work left, not 60 (and saves
one more checkpoint, at 55 s)."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from airflow.sdk import dag, task

from carma_airflow import gpu_task

TRAIN_S, EVERY_S, OOM_AT_S = 60.0, 5.0, 50.0  # 120, 10 and 100 s until 2026-12-06: the same run at half the wall


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
