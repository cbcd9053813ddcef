"""One process of the fence check (gpukit/fence_check.py): allocate in phases, report as JSON.

    python -m gpukit.fence_worker ROLE SYNC_DIR PHASES_JSON [--ledger PATH] [--sim-context-mib N]

``PHASES_JSON``: a list of ``[wait_for, mib, then_mark]``: wait until the file ``wait_for``
exists in SYNC_DIR (or none), allocate ``mib`` more on the visible GPU, then create ``then_mark``.
Real GPU: PyTorch tensors, the try first moved into its cgroup leaf where it has one
(``CARMA_CGROUP_LEAF``, as the launcher does) and the framework caps installed as the try's
listener does (a live cap file followed); dry run (``--ledger``): the simulated ledger, held to
the fence in the environment as the simulated GPUs hold a try (a cap file re-read, a leaf's limit).
The last line of stdout is ``{"role", "ok", "exc_type", "message", "held_mib"}``.

ROLE ``context`` allocates nothing: it measures the CUDA context this process holds on its
GPU, after ``torch.cuda.init()`` and one small tensor (the caching allocator's first segment):
what NVML counts for the process less ``torch.cuda.memory_reserved()``, and again once cuBLAS is
loaded (one matmul).  Where NVML lists no process by this pid (a container's own pid namespace),
the GPU's used memory before and after.  Its last line is ``{"role": "context", "ok",
"context_mib", "with_cublas_mib", "method", "gpu_name", ...}``.  In the dry run the ledger plays
a context of ``--sim-context-mib`` so that the same arithmetic runs.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

WAIT_S = 60.0
MIB = 1024 * 1024


def _wait(sync: Path, name: str | None) -> None:
    deadline = time.monotonic() + WAIT_S
    while name and not (sync / name).exists() and time.monotonic() < deadline:
        time.sleep(0.05)


def _torch_allocator() -> Any:
    from carma_airflow.taskrun.driver_cap import enter_leaf
    from carma_airflow.taskrun.framework_hook import install_framework_caps

    enter_leaf(os.environ)  # isolation = driver: into its leaf before CUDA starts (a fall-back says why)
    print(install_framework_caps(), flush=True)
    import torch

    held: list[Any] = []

    def allocate(mib: int) -> None:
        held.append(torch.empty(mib * MIB, dtype=torch.uint8, device="cuda:0"))

    return allocate


def _ledger_allocator(path: str) -> Any:
    from carma_airflow.core.sharing import ActivityProfile
    from carma_airflow.monitor.ledger import Ledger
    from carma_airflow.taskrun.fence_env import fence_from_env
    from carma_airflow.taskrun.live_cap import SimulatedCaps

    ledger = Ledger(path)
    uuid = os.environ["CUDA_VISIBLE_DEVICES"].split(",")[0]
    fence = fence_from_env(os.environ, 1)
    caps = SimulatedCaps(fence, os.environ) if fence is not None else None  # as simulated_training holds a try
    profile = ActivityProfile(0.3, 0.2, 0.1)

    def allocate(mib: int) -> None:
        if fence is None or caps is None:
            ledger.allocate(os.getpid(), uuid, mib, profile, "fence-check")
            return
        cap = caps.cap_mib(0)
        ledger.allocate(
            os.getpid(), uuid, mib, profile, "fence-check", ordinal=0,
            promise_mib=fence.promise_mib[0] if cap is not None else None, cap_mib=cap,
            leaf=caps.leaf, held_by=caps.held_by_on(0),
        )  # fmt: skip

    return allocate


def measure_context(
    init: Callable[[], None],
    reserved_mib: Callable[[], float],
    process_mib: Callable[[], float | None],
    device_used_mib: Callable[[], float],
    load_cublas: Callable[[], None],
) -> dict[str, Any]:
    """The CUDA context of this process: what the GPU counts for it less what its allocator holds,
    after ``init`` and again after ``load_cublas``.  ``process_mib``: NVML's figure for this pid
    (None where NVML does not list it); else the GPU's used memory grown since before ``init``."""
    before = device_used_mib()
    init()

    def held() -> tuple[float, str]:
        own = process_mib()
        if own is not None:
            return own, "NVML process memory"
        return device_used_mib() - before, "the GPU's used memory, before and after (NVML lists no process by this pid)"

    used, method = held()
    reserved = reserved_mib()
    load_cublas()
    used_cublas, _ = held()
    reserved_cublas = reserved_mib()
    return {
        "context_mib": round(used - reserved),
        "with_cublas_mib": round(used_cublas - reserved_cublas),
        "process_mib": round(used),
        "reserved_mib": round(reserved),
        "method": method,
    }


def _torch_context() -> dict[str, Any]:
    import pynvml
    import torch

    pynvml.nvmlInit()
    uuid = os.environ["CUDA_VISIBLE_DEVICES"].split(",")[0]
    handle = pynvml.nvmlDeviceGetHandleByUUID(uuid)
    kept: list[Any] = []

    def init() -> None:
        torch.cuda.init()
        kept.append(torch.ones(1, device="cuda:0"))  # the context, and the allocator's first segment
        torch.cuda.synchronize()

    def process() -> float | None:
        for p in pynvml.nvmlDeviceGetComputeRunningProcesses(handle):
            if p.pid == os.getpid() and p.usedGpuMemory:
                return float(p.usedGpuMemory) / MIB
        return None

    def cublas() -> None:
        a = torch.ones(256, 256, device="cuda:0")
        kept.append(a @ a)
        torch.cuda.synchronize()

    found = measure_context(
        init,
        lambda: torch.cuda.memory_reserved(0) / MIB,
        process,
        lambda: float(pynvml.nvmlDeviceGetMemoryInfo(handle).used) / MIB,
        cublas,
    )
    name = pynvml.nvmlDeviceGetName(handle)
    found["gpu_name"] = name.decode() if isinstance(name, bytes) else str(name)
    found["torch"] = str(torch.__version__)
    return found


def _ledger_context(path: str, context_mib: int) -> dict[str, Any]:
    """The dry run: the ledger plays a process whose CUDA start takes ``context_mib`` (simulated
    GPUs hold none otherwise) and whose allocator holds nothing yet, through the same arithmetic."""
    from carma_airflow.core.sharing import ActivityProfile
    from carma_airflow.monitor.ledger import Ledger

    ledger = Ledger(path)
    uuid = os.environ["CUDA_VISIBLE_DEVICES"].split(",")[0]
    pid = os.getpid()
    profile = ActivityProfile(0.0, 0.0, 0.0)

    def own() -> float | None:
        held = [a.mib for a in ledger.allocations() if a.pid == pid and a.uuid == uuid]
        return float(sum(held)) if held else None

    def used() -> float:
        return float(sum(a.mib for a in ledger.allocations() if a.uuid == uuid))

    found = measure_context(
        lambda: ledger.allocate(pid, uuid, context_mib, profile, "cuda-context"),
        lambda: 0.0,
        own,
        used,
        lambda: None,
    )
    found["gpu_name"] = next(g.spec.name for g in ledger.gpus() if g.uuid == uuid)
    found["played"] = f"the dry run plays a context of {context_mib} MiB in the simulated ledger"
    return found


def main(argv: list[str]) -> int:
    role, sync, phases = argv[0], Path(argv[1]), json.loads(argv[2])
    ledger = argv[argv.index("--ledger") + 1] if "--ledger" in argv else None
    out: dict[str, Any] = {"role": role, "ok": True, "exc_type": None, "message": None, "held_mib": 0}
    if role == "context":
        try:
            if ledger:
                sim = int(argv[argv.index("--sim-context-mib") + 1]) if "--sim-context-mib" in argv else 0
                out.update(_ledger_context(ledger, sim))
            else:
                out.update(_torch_context())
        except Exception as exc:
            out.update(ok=False, exc_type=type(exc).__name__, message=str(exc)[:1500])
        print(json.dumps(out), flush=True)
        return 0 if out["ok"] else 1
    try:
        allocate = _ledger_allocator(ledger) if ledger else _torch_allocator()
        for wait_for, mib, mark in phases:
            _wait(sync, wait_for)
            allocate(int(mib))
            out["held_mib"] += int(mib)
            if mark:
                (sync / mark).touch()
        time.sleep(0.5)
    except Exception as exc:  # the OOM this check is about
        out.update(ok=False, exc_type=type(exc).__name__, message=str(exc)[:1500])
        for _, _, mark in phases:  # the other process waits on none of them in vain
            if mark:
                (sync / mark).touch()
    print(json.dumps(out), flush=True)
    return 0 if out["ok"] else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
