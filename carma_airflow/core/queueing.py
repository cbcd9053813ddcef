"""Queue disciplines: in what order a pass considers waiting requests, and whether it blocks.

* ``fifo`` (the paper): submit order, recovered tries first; the first request that cannot be
  placed blocks everything behind it (head-of-line blocking, kept to reproduce the paper).
* ``backfill`` (default): priority order with aging; any request that fits may start while
  larger ones wait.  Starvation bound: a request that has waited longer than
  ``starvation_s`` is *protected*: it is decided first and, while it cannot start, the GPUs
  closest to fitting it take no new tenants, so it starts as soon as they drain.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from carma_airflow.core.errors import UnknownPolicyError
from carma_airflow.core.task import TaskRequest


@dataclass(frozen=True, slots=True)
class QueuePlan:
    ordered: tuple[TaskRequest, ...]
    blocking: bool
    protected: TaskRequest | None


class QueueDiscipline:
    name = "base"

    def plan(self, pending: Sequence[TaskRequest], now: float) -> QueuePlan:
        raise NotImplementedError


class Fifo(QueueDiscipline):
    name = "fifo"

    def plan(self, pending: Sequence[TaskRequest], now: float) -> QueuePlan:
        ordered = sorted(pending, key=lambda r: (not r.recovered, r.submitted_at, r.key))
        return QueuePlan(tuple(ordered), blocking=True, protected=None)


class Backfill(QueueDiscipline):
    """Priority with aging, backfilling, and a starvation bound.

    Effective priority = priority + waited_s / aging_s (one priority point per ``aging_s``);
    recovered tries get ``recovery_boost`` points so they go early without blocking anyone.
    """

    name = "backfill"

    def __init__(self, aging_s: float = 600.0, starvation_s: float = 3600.0, recovery_boost: float = 5.0) -> None:
        self.aging_s = aging_s
        self.starvation_s = starvation_s
        self.recovery_boost = recovery_boost

    def plan(self, pending: Sequence[TaskRequest], now: float) -> QueuePlan:
        def key(r: TaskRequest) -> tuple[float, float, str]:
            eff = r.priority + max(0.0, now - r.submitted_at) / self.aging_s
            if r.recovered:
                eff += self.recovery_boost
            return (-eff, r.submitted_at, r.key)

        ordered = sorted(pending, key=key)
        protected: TaskRequest | None = None
        oldest = min(pending, key=lambda r: (r.submitted_at, r.key), default=None)
        if oldest is not None and now - oldest.submitted_at > self.starvation_s:
            protected = oldest
        return QueuePlan(tuple(ordered), blocking=False, protected=protected)


DEFAULT_QUEUE = "backfill"


def make_queue(name: str) -> QueueDiscipline:
    wanted = name.strip().lower()
    if wanted == "fifo":
        return Fifo()
    if wanted in ("backfill", "priority"):
        return Backfill()
    raise UnknownPolicyError(f"unknown queue {name!r}; use fifo or backfill")
