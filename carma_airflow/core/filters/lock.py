"""The paper's lock: no new try on a GPU for ``lock_s`` after its last placement, until its
telemetry window has seen the last tenant."""

from __future__ import annotations

from carma_airflow.core.decision import Reason
from carma_airflow.core.facts import GpuFacts
from carma_airflow.core.filtering import Filter, Rejection
from carma_airflow.core.task import TaskRequest


class RecentPlacementLock(Filter):
    """A GPU placed on less than ``lock_s`` seconds ago (:attr:`GpuFacts.locked`) waits for its window."""

    name = "placement-lock"
    reason = Reason.LOCKED

    def __init__(self, lock_s: float) -> None:
        self.lock_s = lock_s
        form = "placed on recently; waiting for its window"
        self._rejection = Rejection(self.name, self.reason, form, "s", limit=lock_s)

    def check(self, facts: GpuFacts, request: TaskRequest) -> Rejection | None:
        return self._rejection if facts.locked else None


__all__ = ["RecentPlacementLock"]
