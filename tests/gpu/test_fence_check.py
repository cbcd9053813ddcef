"""The kit's fence check in its dry run (bench/gpu/gpukit/fence_check.py): the CUDA context measured
per GPU model; the grower gets the OOM past its cap and the neighbour finishes, with the cap fixed
at the promise, under the default ``live`` rule (its cap file re-set as the neighbour is placed)
and under ``driver`` (each process in a leaf whose limit the ledger keeps); unfenced, the
neighbour crashes.  A host without NVML's per-cgroup limit call skips ``driver`` with a line."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from gpukit.fence_check import Context, Gpu, describe_context, driver_check
from gpukit.fence_worker import measure_context

from carma_airflow.core.fence_host import HostIsolation
from carma_airflow.monitor.nvml import DriverLimits

ROOT = Path(__file__).resolve().parents[2]


def test_fence_dry_run_passes_every_scenario_and_measures_the_context() -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHON", "CUDA_VISIBLE_DEVICES")}
    proc = subprocess.run(
        [str(ROOT / "bench" / "gpu" / "run.sh"), "fence", "--dry-run"],
        capture_output=True,
        text=True,
        timeout=180,
        env=env,
        check=False,
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    assert (
        "[fence] CUDA context on A100-40GB: 480 MiB per process after torch.cuda.init() (NVML process memory "
        "480 MiB less PyTorch's reserved 0 MiB), 480 MiB with cuBLAS loaded; core/cuda_context.py counts 768 MiB"
    ) in out
    assert '[fence] context {"gpu_name": "A100-40GB", "counted_mib": 768,' in out
    assert "[fence] framework: PASS: grower: cap-oom; neighbour: finished" in out
    assert "[fence] none: PASS: unfenced: the grower got its memory and the neighbour crashed" in out
    # live: the grower alone may hold the GPU less the reserve (40448 MiB); placed beside the
    # neighbour (12288 MiB promised) its cap file says 28160 MiB, and its follower applied it
    assert (
        "[fence] framework live: PASS: grower: cap-oom; neighbour: finished; [carma] memory cap now 28160 MiB per GPU"
    ) in out
    assert "[fence] driver: PASS: grower: cap-oom; neighbour: finished" in out


def test_a_host_without_the_per_cgroup_call_skips_driver_with_a_line() -> None:
    gpu = Gpu("GPU-0", "H200", 143771, 500)
    why = "this nvidia-ml-py has no nvmlDeviceSetMemoryLimits_v1 (per-cgroup limits need r615+)"
    said = driver_check(DriverLimits(False, why), HostIsolation("nvml"), gpu, None)
    assert said == (
        "driver: skipped: this host has no NVML per-cgroup memory limit call (this nvidia-ml-py has no "
        "nvmlDeviceSetMemoryLimits_v1 (per-cgroup limits need r615+))"
    )


def test_the_context_is_what_the_gpu_counts_less_what_the_allocator_holds() -> None:
    """Where NVML lists no process by this pid (a container's pid namespace), the GPU's used
    memory before and after the CUDA start stands in for the process's."""
    used = {"device": 1000.0}
    reserved = {"now": 0.0}

    def init() -> None:
        used["device"] += 512 + 2  # the context and the allocator's first segment
        reserved["now"] = 2.0

    def cublas() -> None:
        used["device"] += 64 + 20  # cuBLAS's kernels and workspace, and a matmul's result segment
        reserved["now"] += 20.0

    found = measure_context(init, lambda: reserved["now"], lambda: None, lambda: used["device"], cublas)
    assert (found["context_mib"], found["with_cublas_mib"], found["reserved_mib"]) == (512, 576, 2)
    assert found["method"].startswith("the GPU's used memory, before and after")
    line = describe_context(Context("H200", {"ok": True, **found}, 500, "assumed"))
    assert line.startswith("CUDA context on H200: 512 MiB per process after torch.cuda.init() (the GPU's used")
    assert line.endswith("576 MiB with cuBLAS loaded; core/cuda_context.py counts 500 MiB: assumed")
