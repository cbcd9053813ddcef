"""``python -m gpukit nvml-cost``: what carma's NVML sampling costs, per call kind.

Samples the GPUs with carma's :class:`~carma_airflow.monitor.nvml.NvmlProbe` (every NVML call
counted and timed: ``count_calls=True``) twice: reading everything every sample
(``nvml_detail_every = 1``, what every sample read before it existed) and at the default
``[carma] nvml_detail_every``.  Prints, per NVML function: calls per GPU-sample, CPU and wall
microseconds per call; then per setting: NVML calls and CPU milliseconds per GPU-second at the
default sample period (1 s), the figure to hold against the target (at most 2 ms of CPU per
GPU-second).  Writes ``nvml-cost.json`` under ``--out``.

``--dry-run``: against a stand-in binding with ``--sim-gpus`` Hopper GPUs (GPM, two processes
each): the call counts are carma's, the times are the stand-in's and say nothing of a driver.
"""

from __future__ import annotations

import ctypes
import json
import sys
import time
import types
from pathlib import Path
from typing import Any

from carma_airflow.monitor.nvml import DEFAULT_DETAIL_EVERY, NvmlProbe
from carma_airflow.monitor.nvml_calls import CallCost

PERIOD_S = 1.0  # [carma] sample_period's default
GIB = 1024**3


class _Error(Exception):
    def __init__(self, code: int) -> None:
        super().__init__(code)
        self.value = code


class _NotSupportedError(_Error):
    pass


class _NotFoundError(_Error):
    pass


class _Metric(ctypes.Structure):
    _fields_ = [("metricId", ctypes.c_uint), ("nvmlReturn", ctypes.c_uint), ("value", ctypes.c_double)]


class _MetricsGet(ctypes.Structure):
    _fields_ = [
        ("version", ctypes.c_uint),
        ("numMetrics", ctypes.c_uint),
        ("sample1", ctypes.c_void_p),
        ("sample2", ctypes.c_void_p),
        ("metrics", _Metric * 16),
    ]


def stand_in(gpus: int) -> types.ModuleType:
    """A binding with ``gpus`` H200s: memory, GPM, power, energy, two processes each."""
    nv = types.ModuleType("nvml-stand-in")
    ns = types.SimpleNamespace
    nv.NVMLError = _Error  # type: ignore[attr-defined]
    nv.NVMLError_NotSupportedError = _NotSupportedError  # type: ignore[attr-defined]
    nv.NVMLError_NotFoundError = _NotFoundError  # type: ignore[attr-defined]
    nv.NVMLError_InvalidArgument = _NotFoundError  # type: ignore[attr-defined]
    nv.NVML_DEVICE_MIG_ENABLE = 1  # type: ignore[attr-defined]
    nv.NVML_SUCCESS = 0  # type: ignore[attr-defined]
    nv.NVML_GPM_METRICS_GET_VERSION = 1  # type: ignore[attr-defined]
    nv.nvmlMemory_v2 = 0x02000028  # type: ignore[attr-defined]
    nv.c_nvmlGpmMetricsGet_t = _MetricsGet  # type: ignore[attr-defined]
    calls = {"tick": 0}

    def tick() -> int:
        calls["tick"] += 1
        return calls["tick"]

    functions: dict[str, Any] = {
        "nvmlInit": lambda: None,
        "nvmlShutdown": lambda: None,
        "nvmlDeviceGetCount": lambda: gpus,
        "nvmlDeviceGetHandleByIndex": lambda i: i,
        "nvmlDeviceGetUUID": lambda h: f"GPU-STAND-IN-{h:04d}",
        "nvmlDeviceGetName": lambda h: "NVIDIA H200 (stand-in)",
        "nvmlDeviceGetMigMode": lambda h: [0, 0],
        "nvmlDeviceGetMemoryInfo": lambda h, v=None: ns(total=141 * GIB, used=(20 + h) * GIB, free=(121 - h) * GIB),
        "nvmlDeviceGetUtilizationRates": lambda h: ns(gpu=60, memory=20),
        "nvmlDeviceGetPowerUsage": lambda h: 300_000,
        "nvmlDeviceGetTotalEnergyConsumption": lambda h: 1_000_000 + 300 * tick(),
        "nvmlDeviceGetComputeRunningProcesses": lambda h: [
            ns(pid=1000 + 10 * h, usedGpuMemory=8 * GIB),
            ns(pid=1001 + 10 * h, usedGpuMemory=4 * GIB),
        ],
        "nvmlDeviceGetMPSComputeRunningProcesses": lambda h: [],
        "nvmlDeviceGetProcessUtilization": lambda h, seen: [
            ns(pid=1000 + 10 * h, timeStamp=seen + 1000, smUtil=50),
            ns(pid=1001 + 10 * h, timeStamp=seen + 1000, smUtil=20),
        ],
        "nvmlGpmQueryDeviceSupport": lambda h: ns(isSupportedDevice=1),
        "nvmlGpmSampleAlloc": lambda: ctypes.c_void_p(tick()),
        "nvmlGpmSampleFree": lambda buf: None,
        "nvmlGpmSampleGet": lambda h, buf: buf,
    }

    def metrics_get(request: Any) -> Any:
        for i in range(request.numMetrics):
            request.metrics[i].value = 40.0
            request.metrics[i].nvmlReturn = 0
        return request

    functions["nvmlGpmMetricsGet"] = metrics_get
    for name, fn in functions.items():
        setattr(nv, name, fn)
    return nv


def measure(detail_every: int, samples: int) -> tuple[dict[str, CallCost], int, float]:
    """Sample ``samples`` times; the costs per NVML function, the GPUs and the CPU s per sample."""
    probe = NvmlProbe(detail_every=detail_every, count_calls=True)
    try:
        gpus = len(probe.sample())  # nvmlInit and the first (full) sample, counted
        cpu = time.thread_time()
        for _ in range(samples - 1):
            probe.sample()
            time.sleep(0.01)  # GPM and per-process readings measure an interval
        cpu_per_sample = (time.thread_time() - cpu) / max(1, samples - 1)
        return probe.call_costs(), gpus, cpu_per_sample
    finally:
        probe.close()


def main(dry_run: bool, out: Path, samples: int = 100, sim_gpus: int = 8) -> int:
    if dry_run:
        sys.modules["pynvml"] = stand_in(sim_gpus)
    results: dict[str, Any] = {"dry_run": dry_run, "samples": samples, "period_s": PERIOD_S, "settings": {}}
    for every in sorted({1, DEFAULT_DETAIL_EVERY}):
        costs, gpus, cpu_per_sample = measure(every, samples)
        gpu_samples = gpus * samples
        calls = sum(c.calls for c in costs.values())
        cpu_ms = 1000.0 * sum(c.cpu_s for c in costs.values())
        per_gpu_second = calls / gpu_samples / PERIOD_S
        results["settings"][str(every)] = {
            "gpus": gpus,
            "calls_per_gpu_second": per_gpu_second,
            "nvml_cpu_ms_per_gpu_second": cpu_ms / gpu_samples / PERIOD_S,
            "probe_cpu_ms_per_gpu_sample": 1000.0 * cpu_per_sample / gpus if gpus else None,
            "calls": {
                name: {
                    "calls_per_gpu_sample": c.calls / gpu_samples,
                    "cpu_us_per_call": c.cpu_us_per_call,
                    "wall_us_per_call": c.wall_us_per_call,
                }
                for name, c in sorted(costs.items())
            },
        }
    label = "stand-in binding, DRY RUN: times are not a driver's" if dry_run else "real NVML"
    print(f"== NVML cost per call kind ({label}; {samples} samples of every GPU back to back)")
    for every, r in results["settings"].items():
        print(f"-- nvml_detail_every = {every} ({r['gpus']} GPU(s))")
        print(f"   {'NVML function':44} {'calls/GPU-sample':>16} {'CPU us/call':>12} {'wall us/call':>13}")
        for name, c in r["calls"].items():
            print(
                f"   {name:44} {c['calls_per_gpu_sample']:16.2f} {c['cpu_us_per_call']:12.1f} "
                f"{c['wall_us_per_call']:13.1f}"
            )
    for every, r in results["settings"].items():
        print(
            f"[nvml-cost] nvml_detail_every={every}: {r['calls_per_gpu_second']:.2f} NVML calls per GPU-second, "
            f"{r['nvml_cpu_ms_per_gpu_second']:.3f} ms CPU in NVML per GPU-second at a {PERIOD_S:g} s period "
            f"(probe {r['probe_cpu_ms_per_gpu_sample']:.3f} ms CPU per GPU-sample)"
        )
    out.mkdir(parents=True, exist_ok=True)
    (out / "nvml-cost.json").write_text(json.dumps(results, indent=2, sort_keys=True))
    print(f"[nvml-cost] written: {out / 'nvml-cost.json'}")
    return 0
