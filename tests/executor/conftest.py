"""Fixture of the CarmaExecutor unit tests; the harness itself is in executor_helpers.py."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from executor_helpers import fake_run_workload

from carma_airflow.config.settings import CarmaSettings
from carma_airflow.executor import CarmaExecutor
from carma_airflow.testing import try_runner_env


@pytest.fixture
def executor_factory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[..., CarmaExecutor]]:
    for name, value in try_runner_env(fake_run_workload).items():
        monkeypatch.setenv(name, value)
    out = tmp_path / "out"
    out.mkdir()
    monkeypatch.setenv("CARMA_TEST_OUT", str(out))
    made: list[CarmaExecutor] = []

    def factory(
        gpus: str = "2xA100-40GB", parallelism: int = 32, behaviour: dict[str, Any] | None = None, **options: str
    ) -> CarmaExecutor:
        monkeypatch.setenv("CARMA_TEST_BEHAVIOUR", json.dumps(behaviour or {}))
        values = {
            "gpu_backend": "simulated",
            "simulated_gpus": gpus,
            "sample_period": "0.2",
            "lock_seconds": "0.5",
            **options,
        }
        settings = CarmaSettings.load(values.get, str(tmp_path))
        ex = CarmaExecutor(parallelism=parallelism)
        ex.configure(settings)
        made.append(ex)
        return ex

    yield factory
    for ex in made:
        ex.end()
