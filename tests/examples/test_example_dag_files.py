"""The PyTorch and history example DAGs parse with Airflow's DagBag (cluster policy applied), their
GPU tasks carry a valid executor_config, and the PyTorch tasks' own code trains with tiny params."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

CODE = """
import json, sys
from airflow.models.dagbag import DagBag
from carma_airflow.config.task_config import parse_task_config

bag = DagBag(dag_folder={folder!r})
out = {{"errors": {{k: str(v) for k, v in bag.import_errors.items()}}, "dags": {{}}}}
for dag_id in ("torch_training", "carma_history_example"):
    dag = bag.dags[dag_id]
    tasks = {{}}
    for t in dag.tasks:
        config = parse_task_config(t.executor_config) if t.executor == "CarmaExecutor" else None
        tasks[t.task_id] = {{
            "executor": t.executor,
            "memory": config.memory if config else None,
            "gpus": config.gpus if config else None,
            "retries": t.retries,
            "retry_policy": type(t.retry_policy).__name__,
        }}
    out["dags"][dag_id] = {{"tasks": tasks, "params": sorted(dag.params.keys())}}

if {train!r}:
    import torch
    torch.set_num_threads(1)
    dag = bag.dags["torch_training"]
    params = {{k: dag.params[k] for k in dag.params.keys()}}
    params.update(steps=30, cnn_batch_size=16, cnn_image_size=16, cnn_width=8, transformer_batch_size=8,
                  transformer_seq_len=16, transformer_d_model=32, transformer_heads=2, transformer_layers=1)
    cnn = dag.get_task("train_cnn").python_callable(params=params)
    transformer = dag.get_task("train_transformer").python_callable(params=params)
    text = dag.get_task("report").python_callable(cnn, transformer)
    out["trained"] = {{"cnn": cnn, "transformer": transformer, "report": text}}
print("RESULT " + json.dumps(out))
"""


def _run(folder: Path, tmp_path: Path, train: bool) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")}
    env.update(
        AIRFLOW_HOME=str(tmp_path),
        AIRFLOW__CORE__EXECUTOR="LocalExecutor,carma_airflow.executor.CarmaExecutor",
        AIRFLOW__CORE__LOAD_EXAMPLES="False",
    )
    proc = subprocess.run(
        [sys.executable, "-c", CODE.format(folder=str(folder), train=train)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    line = next(x for x in proc.stdout.splitlines() if x.startswith("RESULT "))
    return json.loads(line.removeprefix("RESULT "))


def test_example_dags_parse_and_their_tasks_run(tmp_path: Path) -> None:
    folder = tmp_path / "dags"
    folder.mkdir()
    for name in ("torch_training.py", "history_example.py"):
        (folder / name).write_text((ROOT / "dags" / name).read_text())
    try:
        import torch  # noqa: F401

        train = True
    except ImportError:
        train = False
    out = _run(folder, tmp_path, train)
    assert out["errors"] == {}

    torch_dag = out["dags"]["torch_training"]
    tasks = torch_dag["tasks"]
    assert tasks["train_cnn"]["executor"] == "CarmaExecutor" and tasks["train_cnn"]["memory"] == 3 * 1024
    assert tasks["train_transformer"]["executor"] == "CarmaExecutor" and tasks["train_transformer"]["memory"] is None
    assert tasks["train_cnn"]["retry_policy"] == "CudaOomRetryPolicy" and tasks["train_cnn"]["retries"] == 2
    assert tasks["report"]["executor"] is None  # the CPU task stays on the default executor
    assert {"steps", "cnn_batch_size", "transformer_d_model", "device"} <= set(torch_dag["params"])

    history = out["dags"]["carma_history_example"]
    assert history["tasks"]["train"] == {
        "executor": "CarmaExecutor",
        "memory": None,  # nothing declared: floor first, then learned
        "gpus": 1,
        "retries": 2,
        "retry_policy": "CudaOomRetryPolicy",
    }
    assert history["params"] == ["peak_mib", "seconds"]

    if not train:
        pytest.skip("PyTorch is not installed: the DAGs parse, the training part is skipped")
    cnn, transformer = out["trained"]["cnn"], out["trained"]["transformer"]
    assert cnn["steps"] == 30 and cnn["batch_size"] == 16 and cnn["device"] == "cpu"
    assert cnn["loss_end"] < cnn["loss_start"] and transformer["loss_end"] < transformer["loss_start"]
    assert "cnn: loss" in out["trained"]["report"] and "transformer: loss" in out["trained"]["report"]
