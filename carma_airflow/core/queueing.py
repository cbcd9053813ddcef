"""Queue disciplines: in what order a pass considers waiting requests, and whether it blocks.

* ``fifo`` (the paper): submit order, recovered tries first; the first request that cannot be
  placed blocks everything behind it (head-of-line blocking, kept to reproduce the paper).
* ``backfill`` (default): priority order with aging; any request that fits may start while
  larger ones wait.  Starvation bound: a request that has waited longer than
  ``starvation_s`` is *protected*: it is decided first and, while it cannot start, the GPUs
  closest to fitting it take no new tenants, so it starts as soon as they drain.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass

from carma_airflow.core.errors import UnknownPolicyError
from carma_airflow.core.task import TaskRequest


@dataclass(frozen=True, slots=True)
class QueuePlan:
    ordered: tuple[TaskRequest, ...]
    blocking: bool
    protected: TaskRequest | None


OrderKey = Callable[[TaskRequest], tuple[object, ...]]


class QueueDiscipline:
    """``plan`` orders a pass's waiting requests.  A discipline may also say how to order them
    without sorting them all (what :meth:`SchedulingCycle.run` does with thousands waiting):
    ``order_key`` sorts as ``plan`` does, and inside one ``class_of`` it orders by
    ``(submitted_at, key)`` at every time, so a waiting set kept in that order per class stays
    sorted as time passes and only the heads of the classes need the key."""

    name = "base"
    blocks = False  # True: nothing after the first request that must wait is placed

    def plan(self, pending: Sequence[TaskRequest], now: float) -> QueuePlan:
        raise NotImplementedError

    def order_key(self, now: float) -> OrderKey | None:
        """The key ``plan`` sorts by at ``now`` (unique per request); None: only ``plan`` orders."""
        return None

    def class_of(self, request: TaskRequest) -> Hashable:
        """The request's class: inside one, ``order_key`` orders by ``(submitted_at, key)``."""
        return None

    def protect(self, oldest: TaskRequest | None, now: float) -> TaskRequest | None:
        """``plan``'s protected request, given the oldest waiting one (by submitted_at, key)."""
        return None


class Fifo(QueueDiscipline):
    name = "fifo"

    blocks = True

    def plan(self, pending: Sequence[TaskRequest], now: float) -> QueuePlan:
        ordered = sorted(pending, key=_fifo_key)
        return QueuePlan(tuple(ordered), blocking=True, protected=None)

    def order_key(self, now: float) -> OrderKey:
        return _fifo_key

    def class_of(self, request: TaskRequest) -> Hashable:
        return request.recovered


def _fifo_key(r: TaskRequest) -> tuple[object, ...]:
    return (not r.recovered, r.submitted_at, r.key)


class Backfill(QueueDiscipline):
    """Priority with aging, backfilling, and a starvation bound.

    Effective priority = priority + whole ``aging_s`` waited (one priority point per ``aging_s``),
    then ``tie_break``, then arrival;
    recovered tries get ``recovery_boost`` points so they go early without blocking anyone.
    """

    name = "backfill"

    def __init__(self, aging_s: float = 600.0, starvation_s: float = 3600.0, recovery_boost: float = 5.0) -> None:
        self.aging_s = aging_s
        self.starvation_s = starvation_s
        self.recovery_boost = recovery_boost

    def plan(self, pending: Sequence[TaskRequest], now: float) -> QueuePlan:
        ordered = sorted(pending, key=self.order_key(now))
        oldest = min(pending, key=lambda r: (r.submitted_at, r.key), default=None)
        return QueuePlan(tuple(ordered), blocking=False, protected=self.protect(oldest, now))

    def order_key(self, now: float) -> OrderKey:
        aging_s, boost = self.aging_s, self.recovery_boost

        def key(r: TaskRequest) -> tuple[object, ...]:
            # whole aging points, so that equal priorities stay equal long enough for
            # ``tie_break`` to order them; monotone in submitted_at for one class (class_of)
            eff: float = r.priority + math.floor(max(0.0, now - r.submitted_at) / aging_s)
            if r.recovered:
                eff += boost
            return (-eff, -r.tie_break, r.submitted_at, r.key)

        return key

    def class_of(self, request: TaskRequest) -> Hashable:
        return (request.priority, request.tie_break, request.recovered)

    def protect(self, oldest: TaskRequest | None, now: float) -> TaskRequest | None:
        if oldest is not None and now - oldest.submitted_at > self.starvation_s:
            return oldest
        return None


DEFAULT_QUEUE = "backfill"


def make_queue(name: str) -> QueueDiscipline:
    wanted = name.strip().lower()
    if wanted == "fifo":
        return Fifo()
    if wanted in ("backfill", "priority"):
        return Backfill()
    raise UnknownPolicyError(f"unknown queue {name!r}; use fifo or backfill")
