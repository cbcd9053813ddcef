"""Detecting the driver's per-cgroup GPU memory limits (monitor/nvml.py) with fake bindings."""

from __future__ import annotations

import os
from pathlib import Path
from types import SimpleNamespace

import pytest

from carma_airflow.monitor.nvml import MEMORY_LIMITS_FN, driver_memory_limits


def test_a_binding_without_the_function_says_so() -> None:
    got = driver_memory_limits(SimpleNamespace())
    assert not got.supported and MEMORY_LIMITS_FN in got.why and "r615" in got.why


def test_no_cgroup_v2_says_so(tmp_path: Path) -> None:
    got = driver_memory_limits(SimpleNamespace(**{MEMORY_LIMITS_FN: lambda *a: None}), str(tmp_path))
    assert not got.supported and "cgroup v2" in got.why


def test_root_and_cgroup_v2_and_the_function_is_supported(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "cgroup.controllers").write_text("memory\n")
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    got = driver_memory_limits(SimpleNamespace(**{MEMORY_LIMITS_FN: lambda *a: None}), str(tmp_path))
    assert got.supported
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    assert (
        "needs root" in driver_memory_limits(SimpleNamespace(**{MEMORY_LIMITS_FN: lambda *a: None}), str(tmp_path)).why
    )
