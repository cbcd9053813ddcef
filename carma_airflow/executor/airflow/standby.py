"""CarmaExecutor while its parts cannot start: GPU tries are held, never lost, and the start is
tried again with a growing pause.

A missing NVML driver, an unreachable store or a launcher that does not come up must not take
the scheduler down: ``start()`` failing would stop every executor, CPU DAGs included.  While on
standby the executor holds the tries it is handed (they count against ``[carma] max_waiting``,
not against ``[core] parallelism``), says why in the scheduler log and in each try's Airflow
audit log, and hands them to the flow once the start succeeds.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

FIRST_RETRY_S = 5.0
MAX_RETRY_S = 60.0


class Standby:
    """The start's failure, when to try again, and the tries held meanwhile."""

    def __init__(self) -> None:
        self.reason: str | None = None
        self.held: dict[Any, Any] = {}  # TaskInstanceKey -> workload, in hand-over order
        self._retry_s = FIRST_RETRY_S
        self._next_at = 0.0

    @property
    def waiting_reason(self) -> str:
        return f"waiting: CarmaExecutor could not start ({self.reason}); it is tried again"

    def failed(self, exc: BaseException, now: float) -> float:
        """Note a failed start; returns the seconds until the next one (doubling, at most a minute)."""
        self.reason = " ".join(f"{type(exc).__name__}: {exc}".split())[:600]
        wait, self._next_at = self._retry_s, now + self._retry_s
        self._retry_s = min(self._retry_s * 2, MAX_RETRY_S)
        return wait

    def due(self, now: float) -> bool:
        return self.reason is not None and now >= self._next_at

    def started(self) -> None:
        self.reason = None
        self._retry_s = FIRST_RETRY_S

    def hold(self, key: Any, workload: Any) -> None:
        self.held.setdefault(key, workload)

    def take_held(self, take: Callable[[Any, Any], object]) -> list[tuple[Any, Exception]]:
        """Hand each held try to ``take(key, workload)``, in hand-over order.  One that raises stays
        held (tried again later) and the rest go on; returns those, each with its exception."""
        failed: list[tuple[Any, Exception]] = []
        for key, workload in list(self.held.items()):
            try:
                take(key, workload)
            except Exception as exc:
                failed.append((key, exc))
                continue
            if self.held.get(key) is workload:
                del self.held[key]
        return failed


__all__ = ["Standby"]
