"""A task that gains 4x from the A100-80GB and one that gains nothing, on simulated
2xA100-80GB + 2xV100-32GB (tests/e2e/test_mixed_fleet.py, issue 44).

Each is mapped over two sizes of the same training: instance 0 holds 48 GiB (only an A100-80GB
can), instance 1 holds 6 GiB (any GPU; an idle V100 while the larger instances wait for the
A100s), so one run measures each task alone on both models.  ``WORK_S`` is a try's solo work on
the reference model (the V100-32GB: every model ``speedup`` does not name).
"""

from __future__ import annotations

from datetime import datetime

from airflow.sdk import dag, task

from carma_airflow import gpu_task

WORK_S = 10.0  # solo seconds on a V100-32GB
SPEEDUP: dict[str, dict[str, float] | None] = {"gains": {"A100-80GB": 4.0}, "flat": None}
PEAKS_MIB = [48 * 1024, 6 * 1024]  # map index 0: an A100-80GB only; 1: either model
MEMORY = ["48GiB", "6GiB"]


def _train(kind: str, peak_mib: int) -> dict[str, object]:
    from carma_airflow.testing import simulated_training

    return simulated_training(peak_mib=peak_mib, seconds=WORK_S, activity=0.6, speedup=SPEEDUP[kind])


@dag(dag_id="carma_mixed_speed", start_date=datetime(2026, 1, 1), schedule=None, catchup=False)
def mixed_speed() -> None:
    @task(**gpu_task(memory_by_index=MEMORY))
    def gains(peak_mib: int) -> dict[str, object]:
        return _train("gains", peak_mib)

    @task(**gpu_task(memory_by_index=MEMORY))
    def flat(peak_mib: int) -> dict[str, object]:
        return _train("flat", peak_mib)

    gains.expand(peak_mib=PEAKS_MIB)
    flat.expand(peak_mib=PEAKS_MIB)


mixed_speed()
