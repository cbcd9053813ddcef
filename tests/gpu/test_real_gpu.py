"""On a real NVIDIA GPU (skipped elsewhere, with run.sh's one line): NVML readings, a real CUDA OOM."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from gpukit.workload import TaskSpec

from carma_airflow.monitor.nvml import NvmlProbe
from carma_airflow.monitor.sampler import Monitor

ROOT = Path(__file__).resolve().parents[2]
GPUKIT = ROOT / "bench" / "gpu"

pytestmark = pytest.mark.gpu


def test_nvml_probe_reads_every_gpu() -> None:
    probe = NvmlProbe()
    try:
        monitor = Monitor(probe, period_s=0.2)
        first = monitor.sample_once()
        second = monitor.sample_once()
    finally:
        probe.close()
    assert first and len(first) == len(second)
    for s in second:
        assert s.ok, s.error
        assert s.uuid.startswith(("GPU-", "MIG-"))
        assert s.memory_total_mib > 1024
        assert s.memory_used_mib + s.memory_free_mib <= s.memory_total_mib + 1
        assert s.activity_source in ("gpm", "utilization")
        assert s.smact is not None and 0.0 <= s.smact <= 1.0
    assert monitor.cpu_seconds_per_sample() < 0.5


def _run_task(spec: TaskSpec, uuid: str, tmp_path: Path) -> tuple[subprocess.CompletedProcess[str], Path, Path]:
    result, metrics = tmp_path / "result.json", tmp_path / "metrics.json"
    env = {
        **os.environ,
        "CUDA_VISIBLE_DEVICES": uuid,
        "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
        "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True",
        "CARMA_RESULT_FILE": str(result),
        "CARMA_KIT_METRICS": str(metrics),
        "CARMA_KIT_BACKEND": "nvml",
        "PYTHONPATH": os.pathsep.join([str(GPUKIT), str(ROOT)]),
    }
    proc = subprocess.run(
        [sys.executable, "-m", "gpukit.train", spec.to_json()],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        cwd=GPUKIT,
    )
    return proc, result, metrics


def _first_gpu() -> tuple[str, int]:
    pytest.importorskip("torch")
    probe = NvmlProbe()
    try:
        s = next(s for s in probe.sample() if s.ok)
    finally:
        probe.close()
    return s.uuid, s.memory_total_mib


def test_a_real_cuda_oom_is_classified_as_oom(tmp_path: Path) -> None:
    uuid, total = _first_gpu()
    spec = TaskSpec(
        "oversized",
        "ramp",
        1024,
        1.0,
        params={"d_model": 64, "layers": 1, "heads": 2, "seq": 16, "batch": 2, "vocab": 256},
        ramp_mib=total + 4096,
    )
    proc, result, metrics = _run_task(spec, uuid, tmp_path)
    assert proc.returncode == 1, proc.stdout[-2000:] + proc.stderr[-2000:]
    outcome = json.loads(result.read_text())
    assert outcome["state"] == "failed"
    assert outcome["failure_kind"] == "cuda-oom", outcome
    assert outcome["exc_type"] == "OutOfMemoryError"
    assert outcome["peak_mib"] > 1024  # it reached real memory before the crash
    assert not metrics.exists()


def test_a_small_cnn_trains_on_the_visible_gpu_only(tmp_path: Path) -> None:
    uuid, _ = _first_gpu()
    spec = TaskSpec("probe_cnn", "cnn", 4096, 1.0, params={"width": 16, "batch": 32, "image": 32})
    proc, result, metrics = _run_task(spec, uuid, tmp_path)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert json.loads(result.read_text())["state"] == "success"
    m = json.loads(metrics.read_text())
    assert m["steps"] >= 10 and m["train_s"] >= 1.0 and 0 < m["peak_mib"] < 4096
