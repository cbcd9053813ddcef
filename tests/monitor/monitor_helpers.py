"""Helpers for the monitor tests: run simulated_training in a real subprocess, wait for things."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from carma_airflow.monitor.ledger import Ledger

REPO = Path(__file__).resolve().parents[2]
A100_MIB = 40960


def training_env(ledger: Ledger, visible: str) -> dict[str, str]:
    env = dict(os.environ)
    env["CUDA_VISIBLE_DEVICES"] = visible
    env["CARMA_SIM_LEDGER"] = str(ledger.path)
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    return env


def start_training(ledger: Ledger, visible: str, **kwargs: object) -> subprocess.Popen[str]:
    """simulated_training(**kwargs) in a subprocess; its stdout is the result as JSON."""
    code = (
        "import json, sys\n"
        "from carma_airflow.testing import simulated_training\n"
        f"print(json.dumps(simulated_training(**{kwargs!r})))\n"
    )
    return subprocess.Popen(
        [sys.executable, "-c", code],
        env=training_env(ledger, visible),
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def finish(proc: subprocess.Popen[str], timeout: float = 20.0) -> tuple[int, dict[str, object] | None, str]:
    out, err = proc.communicate(timeout=timeout)
    result = json.loads(out.strip().splitlines()[-1]) if proc.returncode == 0 else None
    return proc.returncode, result, err


def wait_for(predicate: Callable[[], bool], timeout: float = 10.0, step: float = 0.02) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(step)
    return predicate()
