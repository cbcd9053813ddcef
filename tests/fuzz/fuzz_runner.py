"""The fake task supervisor of test_fuzz_executor_intake.py, in a module of its own: the executor's
launcher process imports it by name (carma_airflow.testing.try_runner_env)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from airflow.executors.workloads import ExecuteTask

from carma_airflow.taskrun.outcome import TryResult, write_result


def recording_run_workload(workload: ExecuteTask, **_: Any) -> int:
    """Runs in the per-task process: record the environment, report success at once."""
    env = {k: v for k, v in os.environ.items() if k.startswith(("CUDA_", "CARMA_"))}
    out = Path(os.environ["CARMA_FUZZ_OUT"]) / f"{workload.ti.task_id}.json"
    out.write_text(json.dumps(env))
    write_result(TryResult(state="success", peak_mib=100))
    return 0
