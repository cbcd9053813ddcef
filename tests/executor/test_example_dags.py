"""The example DAGs in dags/ import cleanly with the cluster policy applied."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

CODE = """
from airflow.models.dagbag import DagBag
bag = DagBag(dag_folder={folder!r})
print("ERRORS", dict(bag.import_errors))
for dag_id, dag in sorted(bag.dags.items()):
    gpu = [t for t in dag.tasks if getattr(t, "executor", None) == "CarmaExecutor"]
    print("DAG", dag_id, len(dag.tasks), [(t.task_id, t.retries, type(t.retry_policy).__name__) for t in gpu])
"""


def test_example_dags_import_and_gpu_tasks_get_oom_retries(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")}
    env.update(
        AIRFLOW_HOME=str(tmp_path),
        AIRFLOW__CORE__EXECUTOR="LocalExecutor,carma_airflow.executor.CarmaExecutor",
        AIRFLOW__CORE__LOAD_EXAMPLES="False",
    )
    out = subprocess.run(
        [sys.executable, "-c", CODE.format(folder=str(ROOT / "dags"))],
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert "ERRORS {}" in out.stdout, out.stdout
    line = next(x for x in out.stdout.splitlines() if x.startswith("DAG carma_example"))
    assert "('train_resnet', 2, 'CudaOomRetryPolicy')" in line  # retries=0 by the author, +2 for CUDA OOM


BAD_DAG = """
from datetime import datetime
from airflow.sdk import dag, task

@dag(dag_id="bad", start_date=datetime(2026, 1, 1), schedule=None)
def bad():
    @task(executor="CarmaExecutor", executor_config={"carma": {"memory": "lots"}})
    def t(): ...
    t()

bad()
"""


def test_strict_validation_turns_a_bad_config_into_a_dag_import_error(tmp_path: Path) -> None:
    dags = tmp_path / "dags"
    dags.mkdir()
    (dags / "bad.py").write_text(BAD_DAG)
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")}
    env.update(
        AIRFLOW_HOME=str(tmp_path),
        AIRFLOW__CORE__EXECUTOR="LocalExecutor,carma_airflow.executor.CarmaExecutor",
        AIRFLOW__CARMA__STRICT_VALIDATION="True",
    )
    out = subprocess.run(
        [sys.executable, "-c", CODE.format(folder=str(dags))],
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert "bad.py" in out.stdout and "executor_config['carma']['memory']" in out.stdout
    assert "DAG bad" not in out.stdout  # the DAG itself is not loaded
