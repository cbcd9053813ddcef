"""Load benchmark DAG: ``CARMA_LOAD_TASKS`` short GPU tasks for CarmaExecutor (bench/load.py).

One DAG run holds N mapped task instances spread over ten mapped tasks, one per declared memory
class (2, 4, ..., 20 GiB): an ``executor_config`` is per task, not per map index, so the
classes are separate tasks.  Item ``i`` goes to class ``i % 10``; each item trains on the
simulated GPUs for 1-4 s and peaks at 55-95 % of what its class declares (so a correct
placement never hits a CUDA OOM).

Each task also counts descriptors of the simulated GPU ledger's lock file that it inherited
(``inherited_lock`` in its result): when tries were forked from the scheduler, a copy of that
open file held by a try kept the lock for ever and hung every later writer (121 of 2,000 tries
in one run, which this DAG once worked around).  Tries now start from the launcher process,
which opens no ledger: the count must stay 0, and nothing here releases a lock.
"""

from __future__ import annotations

import os
from datetime import datetime

from airflow.sdk import dag, task

from carma_airflow import gpu_task

N = int(os.environ.get("CARMA_LOAD_TASKS", "2000"))
CLASSES_GIB = tuple(range(2, 21, 2))
GOLDEN = 0.6180339887498949


def _frac(x: float) -> float:
    return x - int(x)


def _inherited_ledger_locks() -> list[int]:
    """Descriptors of the ledger's lock file this process inherited from the scheduler."""
    ledger = os.environ.get("CARMA_SIM_LEDGER")
    if not ledger:
        return []
    lock_file = os.path.realpath(ledger + ".lock")
    found = []
    for name in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{name}")
        except OSError:  # the descriptor listdir itself used, already closed
            continue
        if target == lock_file:
            found.append(int(name))
    return found


def _train(i: int, declared_gib: int) -> dict[str, int]:
    """Item ``i`` of a class: 1-4 s of simulated training at 55-95 % of the declared memory."""
    from carma_airflow.testing import simulated_training

    inherited = _inherited_ledger_locks()
    seconds = 1.0 + 3.0 * _frac(i * GOLDEN)
    peak_mib = int(declared_gib * 1024 * (0.55 + 0.40 * _frac(i * GOLDEN * GOLDEN + 0.3)))
    activity = 0.3 + 0.4 * _frac(i * 0.37)
    out = simulated_training(peak_mib=peak_mib, seconds=seconds, activity=activity, ramp_s=0.2)
    return {"peak_mib": int(out["peak_mib"]), "inherited_lock": len(inherited)}


@dag(
    dag_id="carma_load",
    start_date=datetime(2026, 1, 1),
    schedule=None,
    catchup=False,
    max_active_tasks=N + 64,
    max_active_runs=1,
)
def carma_load() -> None:
    for k, gib in enumerate(CLASSES_GIB):
        items = [i for i in range(N) if i % len(CLASSES_GIB) == k]
        if not items:
            continue
        train = task(task_id=f"train_{gib:02d}gib", **gpu_task(memory=f"{gib}GiB"))(_train)
        train.partial(declared_gib=gib).expand(i=items)


carma_load()
