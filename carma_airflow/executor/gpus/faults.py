"""GPU faults seen by the monitor: which running tries to stop (their GPU failed for long enough).

Usually such a try fails on its own first (CUDA reports the lost device); stopping one that
hangs instead lets its retry go to a healthy GPU.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import TYPE_CHECKING

from carma_airflow.monitor.base import GpuSample

if TYPE_CHECKING:
    from carma_airflow.executor.tries import Try

log = logging.getLogger(__name__)


class FaultWatch:
    def __init__(self, kill_after_s: float) -> None:
        self.kill_after_s = kill_after_s
        self._faulted_since: dict[str, float] = {}

    def to_stop(self, samples: Iterable[GpuSample], running: Iterable[Try], now: float) -> list[tuple[Try, str]]:
        """The tries to stop now, each with why; a try is named once (its ``fault`` is then set)."""
        failed: dict[str, str] = {}
        for sample in samples:
            if sample.error:
                since = self._faulted_since.setdefault(sample.uuid, now)
                if now - since >= self.kill_after_s:
                    failed[sample.uuid] = sample.error
            else:
                self._faulted_since.pop(sample.uuid, None)
        stop = []
        for attempt in running:
            hit = next((u for u in attempt.gpu_uuids if u in failed), None)
            if hit is not None and attempt.fault is None:
                stop.append((attempt, f"GPU {hit} failed ({failed[hit]})"))
        return stop

    def stop_tries(self, samples: Iterable[GpuSample], running: Iterable[Try], now: float) -> None:
        """Kill the tries on a GPU NVML has reported failed for ``kill_after_s`` (each once)."""
        for attempt, fault in self.to_stop(samples, running, now):
            attempt.fault = fault
            log.error("Task %s: %s; stopping it", attempt.rkey, fault)
            if attempt.handle is not None:
                attempt.handle.kill()


__all__ = ["FaultWatch"]
