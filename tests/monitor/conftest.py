"""Fixtures for the monitor tests: a fresh simulated ledger and stand-in tenant processes."""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from carma_airflow.core import parse_gpu_list
from carma_airflow.monitor.ledger import Ledger


@pytest.fixture
def ledger(tmp_path: Path) -> Ledger:
    """Two simulated A100-40GB GPUs (GPU-SIM-0000, GPU-SIM-0001) in a fresh ledger."""
    led = Ledger(tmp_path / "sim" / "ledger.json")
    led.init(parse_gpu_list("2xA100-40GB"))
    return led


@pytest.fixture
def sleepers() -> Iterator[Callable[[], int]]:
    """Start real idle processes whose PIDs stand for other tenants; all killed afterwards."""
    procs: list[subprocess.Popen[bytes]] = []

    def start() -> int:
        proc = subprocess.Popen(["sleep", "60"])
        procs.append(proc)
        return proc.pid

    yield start
    for proc in procs:
        proc.kill()
        proc.wait()
