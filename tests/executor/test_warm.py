"""The launcher's warm imports (taskrun/warm.py): all present, nothing of the scheduler side, no thread."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

PROBE = """
import json, sys, threading
import airflow.sdk.execution_time.supervisor
from carma_airflow.taskrun.warm import preload
missing = preload()
print(json.dumps({
    "missing": missing,
    "threads": threading.active_count(),
    "executor": sorted(m for m in sys.modules if m.startswith("carma_airflow.executor")),
    "dagbag": "airflow.dag_processing.dagbag" in sys.modules,
}))
"""


def test_preload_imports_what_a_try_needs_and_stays_single_threaded(tmp_path: Path) -> None:
    env = {"AIRFLOW_HOME": str(tmp_path), "PATH": "/usr/bin:/bin"}
    out = subprocess.run(
        [sys.executable, "-c", PROBE], check=False, capture_output=True, text=True, env=env, timeout=120
    )
    assert out.returncode == 0, out.stderr[-2000:]
    found = json.loads(out.stdout.strip().splitlines()[-1])
    assert found["missing"] == []  # a name Airflow moved would leave every try cold again
    assert found["threads"] == 1  # the launcher forks: it must not run a thread
    assert found["executor"] == []  # task-side code loads nothing of the executor
    assert found["dagbag"]
