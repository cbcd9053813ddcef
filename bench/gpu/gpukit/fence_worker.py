"""One process of the fence check (gpukit/fence_check.py): allocate in phases, report as JSON.

    python -m gpukit.fence_worker ROLE SYNC_DIR PHASES_JSON [--ledger PATH]

``PHASES_JSON``: a list of ``[wait_for, mib, then_mark]``: wait until the file ``wait_for``
exists in SYNC_DIR (or none), allocate ``mib`` more on the visible GPU, then create ``then_mark``.
Real GPU: PyTorch tensors, the framework caps installed first exactly as the try's listener
does; dry run (``--ledger``): the simulated ledger, held to the fence in the environment.
The last line of stdout is ``{"role", "ok", "exc_type", "message", "held_mib"}``.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

WAIT_S = 60.0


def _wait(sync: Path, name: str | None) -> None:
    deadline = time.monotonic() + WAIT_S
    while name and not (sync / name).exists() and time.monotonic() < deadline:
        time.sleep(0.05)


def _torch_allocator() -> Any:
    from carma_airflow.taskrun.framework_hook import install_framework_caps

    print(install_framework_caps(), flush=True)
    import torch

    held: list[Any] = []

    def allocate(mib: int) -> None:
        held.append(torch.empty(mib * 1024 * 1024, dtype=torch.uint8, device="cuda:0"))

    return allocate


def _ledger_allocator(path: str) -> Any:
    from carma_airflow.core.sharing import ActivityProfile
    from carma_airflow.monitor.ledger import Ledger
    from carma_airflow.taskrun.fence_env import fence_from_env

    ledger = Ledger(path)
    uuid = os.environ["CUDA_VISIBLE_DEVICES"].split(",")[0]
    fence = fence_from_env(os.environ, 1)
    profile = ActivityProfile(0.3, 0.2, 0.1)

    def allocate(mib: int) -> None:
        if fence is None:
            ledger.allocate(os.getpid(), uuid, mib, profile, "fence-check")
        else:
            ledger.allocate(
                os.getpid(), uuid, mib, profile, "fence-check",
                promise_mib=fence.promise_mib[0], cap_mib=fence.cap_mib[0],
            )  # fmt: skip

    return allocate


def main(argv: list[str]) -> int:
    role, sync, phases = argv[0], Path(argv[1]), json.loads(argv[2])
    ledger = argv[argv.index("--ledger") + 1] if "--ledger" in argv else None
    out: dict[str, Any] = {"role": role, "ok": True, "exc_type": None, "message": None, "held_mib": 0}
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
