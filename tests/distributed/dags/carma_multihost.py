"""A DAG for the multi-host end-to-end test: GPU tasks long enough to lose a host under them."""

from __future__ import annotations

import os
import socket
from datetime import datetime, timedelta

from airflow.sdk import dag, task

from carma_airflow import gpu_task

SECONDS = float(os.environ.get("CARMA_MH_SECONDS", "25"))


def _train(peak_mib: int) -> dict[str, object]:
    from carma_airflow.testing import simulated_training

    out = simulated_training(peak_mib=peak_mib, seconds=SECONDS)
    return {
        "visible": os.environ.get("CUDA_VISIBLE_DEVICES", ""),
        "carma_host": os.environ.get("AIRFLOW__CARMA__HOST", ""),
        "ledger": os.environ.get("CARMA_SIM_LEDGER", ""),
        "hostname": socket.gethostname(),
        "peak_mib": out["peak_mib"],
    }


@dag(
    dag_id="carma_multihost",
    start_date=datetime(2026, 1, 1),
    schedule=None,
    catchup=False,
    default_args={"retries": 2, "retry_delay": timedelta(seconds=1)},
)
def multihost() -> None:
    # 30 GiB each: one per A100-40GB, two per H100-80GB; the placer spreads them over both hosts
    for i in range(6):

        @task(task_id=f"train_{i}", **gpu_task(memory="30000MiB"))
        def train() -> dict[str, object]:
            return _train(28000)

        train()

    @task(**gpu_task(memory="30000MiB", gpus=2))
    def train_pair() -> dict[str, object]:
        return _train(28000)

    train_pair()


multihost()
