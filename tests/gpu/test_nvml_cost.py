"""bench/gpu/run.sh nvml-cost --dry-run: NVML's calls per kind, counted through carma's NvmlProbe
on a stand-in binding (8 Hopper GPUs), at nvml_detail_every 1 and at the default 5."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_the_dry_run_prints_calls_per_gpu_second_fewer_at_the_default(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "PYTHON"}
    proc = subprocess.run(
        [str(ROOT / "bench" / "gpu" / "run.sh"), "nvml-cost", "--dry-run", "--out", str(tmp_path)],
        capture_output=True, text=True, timeout=120, env=env, cwd=ROOT, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "stand-in binding, DRY RUN" in proc.stdout
    settings = json.loads((tmp_path / "nvml-cost.json").read_text())["settings"]
    every1, every5 = settings["1"], settings["5"]
    assert every1["gpus"] == every5["gpus"] == 8
    assert every5["calls_per_gpu_second"] < 0.6 * every1["calls_per_gpu_second"]
    for line in (f"nvml_detail_every={n}: {settings[n]['calls_per_gpu_second']:.2f} NVML calls per GPU-second"
                 for n in ("1", "5")):  # fmt: skip
        assert line in proc.stdout
    calls5 = every5["calls"]
    # what the placer and the risk window read: every period
    for name in ("nvmlDeviceGetMemoryInfo", "nvmlGpmSampleGet", "nvmlDeviceGetProcessUtilization"):
        assert calls5[name]["calls_per_gpu_sample"] == pytest.approx(1.0), name
    # the rest: one sample in five
    for name in ("nvmlDeviceGetComputeRunningProcesses", "nvmlDeviceGetPowerUsage", "nvmlDeviceGetUUID"):
        assert calls5[name]["calls_per_gpu_sample"] == pytest.approx(0.2), name
        assert every1["calls"][name]["calls_per_gpu_sample"] == pytest.approx(1.0), name
