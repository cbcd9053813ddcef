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
