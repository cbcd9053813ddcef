"""The "load data, then allocate" pattern on one simulated 40 GB GPU (issue 22,
tests/e2e/test_fenced_collocation.py): a promise must hold from placement.

A grower declares 8 GiB and grows to 30 GiB 8 s into its work (then works 22 s more; its OOM
retry, 2 s); a neighbour declares 20 GiB, spends 15 s on the CPU (loading data, holding nothing
on the GPU), then allocates 12 GiB.  The second of the two is placed after a short CPU task
(about 2 s, more on a loaded machine), while the first runs.  Each DAG id is used for one run
only (a task's history is kept per DAG and task).

* ``carma_fencing_grower_first`` / ``carma_fencing_neighbour_first``: the host's default fence.
* ``carma_fencing_driver``: both tasks ask for ``isolation="driver"``, which the simulated GPUs
  play with the ledger (no cgroup).
* ``carma_fencing_live`` (a deployment with ``isolation_cap = live``): the grower starts alone,
  capped at the whole GPU less the reserve, and its cap is re-set when the neighbour is placed.
* ``carma_fencing_unfenced``: both ask for ``isolation="none"`` and are placed together (so the
  neighbour is surely still loading when the grower grows): the neighbour is the one that
  crashes (the other DAGs' assertions can fail).
"""

from __future__ import annotations

import time
from datetime import datetime
from typing import Any

from airflow.sdk import dag, task

from carma_airflow import gpu_task

CPU_LOAD_S = 15  # the neighbour's data loading, before it touches the GPU


def _grow(after_s: float, try_number: int) -> dict[str, Any]:
    from carma_airflow.testing import simulated_training

    # try 1 holds its 30 GiB for 22 s once grown (unfenced, the loading neighbour allocates within
    # them); a retry, after the first was stopped past its cap, grows and ends 2 s later
    seconds = after_s + (22 if try_number == 1 else 2)
    return simulated_training(peak_mib=8192, seconds=seconds, grow_to_mib=30720, grow_after_s=after_s)


def _load_then_allocate() -> dict[str, Any]:
    from carma_airflow.testing import simulated_training

    time.sleep(CPU_LOAD_S)  # placed, promised 20 GiB, holding nothing yet
    return simulated_training(peak_mib=12288, seconds=10)


def _pattern(dag_id: str, first: str, isolation: str | None = None, grow_after_s: float = 8) -> None:
    extra = {"isolation": isolation} if isolation else {}

    @dag(dag_id=dag_id, start_date=datetime(2026, 1, 1), schedule=None, catchup=False)
    def pattern() -> None:
        @task(**gpu_task(memory="8GiB", **extra), retries=0)
        def grower(ti: Any = None) -> dict[str, Any]:
            return _grow(grow_after_s, ti.try_number)

        @task(**gpu_task(memory="20GiB", **extra), retries=0)
        def neighbour() -> dict[str, Any]:
            return _load_then_allocate()

        @task
        def pause() -> None:  # on the CPU executor: the second GPU task is placed a little later
            time.sleep(2)

        if first == "grower":
            grower()
            pause() >> neighbour()
        elif first == "neighbour":
            neighbour()
            pause() >> grower()
        else:  # placed in the same pass: the neighbour still loads when the grower grows
            grower()
            neighbour()

    pattern()


_pattern("carma_fencing_grower_first", "grower")
_pattern("carma_fencing_neighbour_first", "neighbour")
_pattern("carma_fencing_driver", "grower", isolation="driver")
_pattern("carma_fencing_unfenced", "together", isolation="none")
# for a deployment with isolation_cap = live: the grower grows late enough that the neighbour has
# surely been placed by then, however slow the CPU task before it (its cap must have been re-set)
_pattern("carma_fencing_live", "grower", grow_after_s=25)
