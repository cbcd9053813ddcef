"""Tries for benchmarks, run by the executor's launcher instead of Airflow's supervisor
(carma_airflow.testing.try_runner_env): bench/launch.py, bench/pass_cost.py."""

from __future__ import annotations

import time
import zlib
from typing import Any


def run(workload: Any, **_: Any) -> int:
    return 0


def train_briefly(workload: Any, **_: Any) -> int:
    """bench/pass_cost.py's try: 1-4 s of "training" (fixed per task id), then a success with a peak."""
    from carma_airflow.taskrun.outcome import ResultState, TryResult, write_result

    time.sleep(1.0 + (zlib.crc32(workload.ti.task_id.encode()) % 301) / 100)
    write_result(TryResult(ResultState.SUCCESS, peak_mib=1000))
    return 0
