"""Example: real PyTorch training on CarmaExecutor, a small CNN and a small transformer side by side.

Both train on synthetic data (no download) with the code in ``carma_airflow.examples.torch_train``.
Each is a GPU task: CarmaExecutor places it, possibly beside other tasks on one GPU, and its
process sees only that GPU (``CUDA_VISIBLE_DEVICES``), which PyTorch calls ``cuda:0``.  Where no
real GPU is visible (``[carma] gpu_backend = simulated``, or a CPU-only PyTorch) the task trains
on the CPU.  Each returns its first and last loss, the device, the seconds it took and, on a GPU,
the peak memory PyTorch allocated (``peak_mib``).

Needs PyTorch in the workers: ``pip install 'carma-airflow[torch]'``.  Sizes, batch sizes and
steps are DAG params: trigger with a config such as ``{"cnn_batch_size": 256, "steps": 500}``.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from airflow.sdk import Param, dag, task

from carma_airflow import gpu_task


@dag(
    dag_id="torch_training",
    start_date=datetime(2026, 1, 1),
    schedule=None,
    catchup=False,
    tags=["carma", "example", "pytorch"],
    params={
        "steps": Param(200, type="integer", minimum=1, description="optimiser steps of each model"),
        "device": Param("auto", enum=["auto", "cuda", "cpu"], description="auto: the task's GPU if it has one"),
        "cnn_batch_size": Param(128, type="integer", minimum=1),
        "cnn_image_size": Param(32, type="integer", minimum=8, multipleOf=8),
        "cnn_width": Param(32, type="integer", minimum=1, description="channels of the first conv block"),
        "transformer_batch_size": Param(64, type="integer", minimum=1),
        "transformer_seq_len": Param(64, type="integer", minimum=2),
        "transformer_d_model": Param(128, type="integer", minimum=8, description="a multiple of the heads"),
        "transformer_heads": Param(4, type="integer", minimum=1),
        "transformer_layers": Param(4, type="integer", minimum=1),
    },
)
def torch_training() -> None:
    def _device(params: dict[str, Any]) -> str | None:
        return None if params["device"] == "auto" else str(params["device"])

    @task(**gpu_task(memory="3GiB"))  # declared: CUDA context and the model fit well within 3 GiB
    def train_cnn(params: dict[str, Any] | None = None) -> dict[str, Any]:
        from carma_airflow.examples.torch_train import train_cnn as train

        p = params or {}
        return train(
            batch_size=p["cnn_batch_size"],
            steps=p["steps"],
            image_size=p["cnn_image_size"],
            width=p["cnn_width"],
            device=_device(p),
        )

    @task(**gpu_task())  # no memory declared: the peak of earlier runs once there are some, else 5 GiB
    def train_transformer(params: dict[str, Any] | None = None) -> dict[str, Any]:
        from carma_airflow.examples.torch_train import train_transformer as train

        p = params or {}
        return train(
            batch_size=p["transformer_batch_size"],
            steps=p["steps"],
            seq_len=p["transformer_seq_len"],
            d_model=p["transformer_d_model"],
            heads=p["transformer_heads"],
            layers=p["transformer_layers"],
            device=_device(p),
        )

    @task  # CPU: LocalExecutor
    def report(cnn: dict[str, Any], transformer: dict[str, Any]) -> str:
        lines = [
            f"{r['model']}: loss {r['loss_start']:.3f} -> {r['loss_end']:.3f} in {r['steps']} steps, "
            f"{r['seconds']:.1f} s on {r['device_name']}"
            + (f", peak {r['peak_mib']} MiB allocated" if r["peak_mib"] is not None else "")
            for r in (cnn, transformer)
        ]
        print("\n".join(lines))
        return "\n".join(lines)

    report(train_cnn(), train_transformer())


torch_training()
