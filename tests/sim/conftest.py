"""Shared fixtures for the simulator tests: the packaged workload and tiny hand-made ones."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from carma_airflow.core import GpuSpec, parse_gpu_list
from carma_airflow.sim import Arrival, TaskType, load_catalog, load_trace, packaged


@pytest.fixture(scope="session")
def catalog() -> dict[str, TaskType]:
    return load_catalog(packaged("task_catalog.csv"))


@pytest.fixture(scope="session")
def trace_t1(catalog: dict[str, TaskType]) -> list[Arrival]:
    return load_trace(packaged("trace_t1.csv"), catalog)


@pytest.fixture(scope="session")
def four_a100() -> tuple[GpuSpec, ...]:
    return tuple(parse_gpu_list("4xA100-40GB"))


@pytest.fixture
def write(tmp_path: Path) -> Callable[[str, str], Path]:
    """Write a text file under tmp_path and return its path."""

    def _write(name: str, text: str) -> Path:
        path = tmp_path / name
        path.write_text(text)
        return path

    return _write
