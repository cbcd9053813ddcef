"""DAGs for tests/e2e/test_revoke.py: tries the scheduler revokes (task_queued_timeout), and tries
that only waited when their scheduler was killed."""

from __future__ import annotations

import os
from datetime import datetime

from airflow.sdk import dag, get_current_context, task

from carma_airflow import gpu_task


def _ran(seconds: float, peak_mib: int = 1000, until: str | None = None) -> int:
    """The task's code ran (one line per run in $CARMA_E2E_RUNS/<task>), then it trains: for
    ``seconds``, or with ``until`` (a path) until that file exists (at most ``seconds``): as long
    as its test needs it, however loaded the machine."""
    from carma_airflow.testing import simulated_training

    ti = get_current_context()["ti"]
    runs = os.environ.get("CARMA_E2E_RUNS")
    if runs:
        with open(os.path.join(runs, ti.task_id), "a") as out:
            out.write(f"{ti.try_number}\n")
    simulated_training(peak_mib=peak_mib, seconds=seconds, until_file=until)
    return int(ti.try_number)


@dag(dag_id="carma_revoke", start_date=datetime(2026, 1, 1), schedule=None, catchup=False)
def revoke() -> None:
    @task(**gpu_task(exclusive=True, priority_weight=10))
    def stalled() -> int:  # its first process stalls before the supervisor (test_revoke.py's runner)
        return _ran(2)

    @task(**gpu_task(exclusive=True, priority_weight=1))
    def waiter() -> int:  # waits behind `stalled` past task_queued_timeout
        return _ran(1)

    stalled()
    waiter()


revoke()


@dag(dag_id="carma_restart_budget", start_date=datetime(2026, 1, 1), schedule=None, catchup=False)
def restart_budget() -> None:
    @task(**gpu_task(exclusive=True, priority_weight=10))
    def blocker() -> int:  # holds the GPU until test_revoke.py releases it ($CARMA_E2E_RELEASE), else 40 s
        release = os.environ.get("CARMA_E2E_RELEASE")
        return _ran(300, until=release) if release else _ran(40)

    @task(**gpu_task(memory="8GiB", priority_weight=1), retries=0)
    def grower() -> int:  # more than the GPU has: a CUDA OOM on every try
        return _ran(5, peak_mib=50_000)

    blocker()
    grower()


restart_budget()
