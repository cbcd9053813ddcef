"""A try that does nothing: the runner bench/launch.py gives the launcher (carma_airflow.testing.try_runner_env)."""

from __future__ import annotations

from typing import Any


def run(workload: Any, **_: Any) -> int:
    return 0
