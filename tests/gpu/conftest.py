"""The GPU kit's tests: ``gpu``-marked ones skip without an NVIDIA GPU, with run.sh's own line."""

from __future__ import annotations

import sys
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
GPUKIT = ROOT / "bench" / "gpu"
if str(GPUKIT) not in sys.path:
    sys.path.insert(0, str(GPUKIT))


@cache
def no_gpu_reason() -> str | None:
    from gpukit.gpu_check import no_gpu_reason as reason

    return reason()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    gpu_items = [item for item in items if item.get_closest_marker("gpu") is not None]
    if not gpu_items:
        return
    reason = no_gpu_reason()
    if reason is None:
        return
    for item in gpu_items:
        item.add_marker(pytest.mark.skip(reason=reason))
