"""200 short tasks, once through CarmaExecutor (simulated GPUs) and once through LocalExecutor."""

from __future__ import annotations

import os
from datetime import datetime

from airflow.sdk import dag, task

N = int(os.environ.get("CARMA_BENCH_TASKS", "200"))


@dag(dag_id="dispatch_carma", start_date=datetime(2026, 1, 1), schedule=None, catchup=False, max_active_tasks=64)
def via_carma() -> None:
    @task(executor="CarmaExecutor", executor_config={"carma": {"memory": 256}})
    def short(i: int) -> int:
        return i

    short.expand(i=list(range(N)))


@dag(dag_id="dispatch_local", start_date=datetime(2026, 1, 1), schedule=None, catchup=False, max_active_tasks=64)
def via_local() -> None:
    @task(executor="LocalExecutor")
    def short(i: int) -> int:
        return i

    short.expand(i=list(range(N)))


via_carma()
via_local()
