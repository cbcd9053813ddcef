"""MPS's pitfall: a client's fatal GPU fault hits every client of that server.

When a try ends with an MPS error (core/recovery.py ``MPS_FAULT``: the failure classification
types it a GPU fault), the MPS server of its GPUs is suspect:

* its GPUs are **quarantined** for new placements (health ``QUARANTINED``, as a GPU with NVML
  errors) until the MPS control daemon is restarted (its control pipe is made anew) or
  ``timeout_s`` has passed;
* the **other tries on those GPUs** (every CUDA process of the daemon's user is a client of its
  server) are stopped, as :class:`~carma_airflow.executor.gpus.faults.FaultWatch` stops the tries on a
  lost GPU: ``fault`` set (their end says "stopped: ...; the retry goes to a healthy GPU"), then
  SIGTERM, SIGKILL only after ``MPS_KILL_GRACE_S`` (launching/local.py), so that a client ends
  its outstanding GPU work itself, as NVIDIA documents.

Their retries come from the author's retries (taskrun/killguard.py), like any GPU fault's.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from carma_airflow.core.gpu import GpuHealth, GpuState
from carma_airflow.core.recovery import MPS_FAULT, FailureKind
from carma_airflow.taskrun.isolation import MPS_DEFAULT_PIPE_DIR, MPS_PIPE_ENV
from carma_airflow.taskrun.outcome import TryResult

if TYPE_CHECKING:
    from carma_airflow.executor.tries import Try

log = logging.getLogger(__name__)

MPS_QUARANTINE_S = 300.0  # no placement on a faulted MPS server for this long, unless it restarts

ServerId = Callable[[], object]  # what changes when the MPS control daemon is restarted


def control_pipe_id(environ: Mapping[str, str] = os.environ) -> object:
    """The MPS control pipe's identity (inode, mtime): a restarted daemon makes it anew."""
    pipe = Path(environ.get(MPS_PIPE_ENV) or MPS_DEFAULT_PIPE_DIR) / "control"
    try:
        st = pipe.stat()
    except OSError:
        return None
    return (st.st_ino, st.st_mtime_ns)


@dataclass(frozen=True, slots=True)
class Faulted:
    since: float
    server: object  # the control daemon's identity when it faulted
    why: str


def mps_fault_of(result: TryResult) -> str | None:
    """The MPS error a try ended with, or None."""
    if result.failure is not FailureKind.GPU_FAULT:
        return None
    found = MPS_FAULT.search(result.message or "")
    return found.group(0) if found else None


class MpsGuard:
    def __init__(self, timeout_s: float = MPS_QUARANTINE_S, server_id: ServerId = control_pipe_id) -> None:
        self.timeout_s = timeout_s
        self.server_id = server_id
        self.faulted: dict[str, Faulted] = {}  # GPU uuid -> its MPS server's fault

    def quarantined(self, now: float) -> dict[str, Faulted]:
        """The GPUs whose MPS server is quarantined now (restarted or timed-out ones are lifted)."""
        server = self.server_id() if self.faulted else None
        for uuid, fault in list(self.faulted.items()):
            if now - fault.since >= self.timeout_s or server != fault.server:
                why = "timed out" if now - fault.since >= self.timeout_s else "the MPS daemon was restarted"
                log.warning("GPU %s: MPS quarantine lifted (%s)", uuid, why)
                del self.faulted[uuid]
        return self.faulted

    def apply(self, gpus: Iterable[GpuState], now: float) -> tuple[GpuState, ...]:
        """The GPUs as the placer should see them: a quarantined MPS server takes no new try."""
        held = self.quarantined(now)
        return tuple(dataclasses.replace(g, health=GpuHealth.QUARANTINED) if g.uuid in held else g for g in gpus)

    def after_end(self, attempt: Try, result: TryResult, running: Iterable[Try], now: float) -> list[Try]:
        """A try ended: if of an MPS fault, quarantine its GPUs' server and stop the other tries
        there (each once).  Returns the tries stopped."""
        error = mps_fault_of(result)
        if error is None or not attempt.gpu_uuids:
            return []
        held = self.quarantined(now)
        fresh = [u for u in attempt.gpu_uuids if u not in held]
        server = self.server_id()
        for uuid in fresh:
            why = f"MPS server of GPU {uuid} faulted ({error} in {attempt.rkey})"
            self.faulted[uuid] = Faulted(now, server, why)
            log.error("%s: no new tries there until the MPS daemon restarts or %.0f s pass", why, self.timeout_s)
        stopped = []
        for other in running:
            hit = next((u for u in other.gpu_uuids if u in self.faulted), None)
            if other is attempt or hit is None or other.fault is not None:
                continue
            other.fault = f"{self.faulted[hit].why}: a client of the same server"
            log.error("Task %s: %s; stopping it (SIGTERM, then SIGKILL after its grace)", other.rkey, other.fault)
            if other.handle is not None:
                other.handle.kill()
            stopped.append(other)
        return stopped


__all__ = ["MPS_QUARANTINE_S", "Faulted", "MpsGuard", "control_pipe_id", "mps_fault_of"]
