"""The GPU kit's DAG: the kit's training tasks as GPU tasks on CarmaExecutor (bench/gpu, Airflow mode).

The tasks come from the JSON file named by ``CARMA_GPU_KIT_WORK`` (written by
``gpukit.airflow_mode`` for each policy's run); each declares its memory with ``gpu_task`` and
runs :func:`gpukit.train.run_task`, whose figures come back as the task's XCom.  A task with a
submission delay (the underdeclared one, which must start beside the running memory hog) waits
on a CPU task that sleeps that long.
"""

from __future__ import annotations

import json
import os
import sys
from datetime import datetime
from pathlib import Path
from typing import Any

from airflow.sdk import dag, task

from carma_airflow import gpu_task

KIT_DIR = os.environ.get("CARMA_GPU_KIT_DIR", str(Path(__file__).resolve().parents[1]))
if KIT_DIR not in sys.path:
    sys.path.insert(0, KIT_DIR)


def _train(spec_json: str) -> dict[str, Any]:
    from gpukit.train import run_task
    from gpukit.workload import TaskSpec

    return run_task(TaskSpec.from_json(spec_json))


def _sleep(seconds: float) -> None:
    import time

    time.sleep(seconds)


def _specs() -> list[dict[str, Any]]:
    work = os.environ.get("CARMA_GPU_KIT_WORK")
    if not work or not Path(work).exists():
        return []
    data = json.loads(Path(work).read_text())
    return list(data["tasks"])


@dag(
    dag_id="carma_gpu_kit",
    start_date=datetime(2026, 1, 1),
    schedule=None,
    catchup=False,
    max_active_tasks=32,
    tags=["carma", "gpu-kit"],
)
def carma_gpu_kit() -> None:
    delay_scale = float(os.environ.get("CARMA_GPU_KIT_DELAY_SCALE", "1.0"))
    for spec in _specs():
        config = gpu_task(memory=int(spec["declared_mib"]), priority=int(spec["priority"]))
        train = task(task_id=spec["name"], **config)(_train)(json.dumps(spec))
        if float(spec["delay_s"]) > 0:
            wait = task(task_id=f"wait_{spec['name']}")(_sleep)(float(spec["delay_s"]) * delay_scale)
            wait >> train


carma_gpu_kit()
