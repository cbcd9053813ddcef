"""Queue disciplines: in what order a pass considers waiting requests, and whether it blocks.

* ``fifo`` (the paper): submit order, recovered tries first; the first request that cannot be
  placed blocks everything behind it (head-of-line blocking, kept to reproduce the paper).
* ``backfill`` (default): priority order with aging; any request that fits may start while
  larger ones wait.  Starvation bound: a request that has waited longer than
  ``starvation_s`` is *protected*: it is decided first and, while it cannot start, the GPUs
  closest to fitting it take no new tenants, so it starts as soon as they drain.

A policy may rank the waiting tries of one priority (:data:`Rank`: the completion-time policy's
shortest predicted run first, the summed-completion-time rule for one machine): ``backfill`` then
orders a priority's tries that are not *overdue* by their rank, ahead of arrival order.  A try is
overdue once the rank says so (the completion-time policy: waited more than ``overdue_runs`` times
its predicted run) or it has waited ``starvation_s``; only overdue tries age, and an overdue try
goes ahead of every try of its priority that is not, so no try waits for ever behind shorter ones.
Without a rank (every other policy) the order is the plain priority-with-aging one.
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
# a policy's rank of a waiting try given the seconds it has waited: lower goes first inside one
# priority; None: the try is overdue (it goes ahead of its priority's ranked tries, by arrival)
Rank = Callable[[TaskRequest, float], float | None]


class QueueDiscipline:
    """``plan`` orders a pass's waiting requests.  A discipline may also say how to order them
    without sorting them all (what :meth:`SchedulingCycle.run` does with thousands waiting):
    ``order_key`` sorts as ``plan`` does, and inside one ``class_of`` it orders by
    ``(submitted_at, key)`` at every time, so a waiting set kept in that order per class stays
    sorted as time passes and only the heads of the classes need the key."""

    name = "base"
    blocks = False  # True: nothing after the first request that must wait is placed

    def plan(self, pending: Sequence[TaskRequest], now: float, rank: Rank | None = None) -> QueuePlan:
        """The pass's order at ``now``; ``rank``: the policy's rank inside a priority, if it ranks."""
        raise NotImplementedError

    def order_key(self, now: float, rank: Rank | None = None) -> OrderKey | None:
        """The key ``plan`` sorts by at ``now`` (unique per request); None: only ``plan`` orders.
        Inside one ``class_of`` a ``rank`` must be the same for requests that wait equally long
        (the completion-time policy's: one value per task type), so the class order holds."""
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

    def plan(self, pending: Sequence[TaskRequest], now: float, rank: Rank | None = None) -> QueuePlan:
        ordered = sorted(pending, key=_fifo_key)  # the paper's order: a policy's rank is not used
        return QueuePlan(tuple(ordered), blocking=True, protected=None)

    def order_key(self, now: float, rank: Rank | None = None) -> OrderKey:
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
    With a policy's ``rank`` (see the module doc): inside one effective priority, overdue tries
    first, then the rest by rank; a try that is not overdue does not age.
    """

    name = "backfill"

    def __init__(self, aging_s: float = 600.0, starvation_s: float = 3600.0, recovery_boost: float = 5.0) -> None:
        self.aging_s = aging_s
        self.starvation_s = starvation_s
        self.recovery_boost = recovery_boost

    def plan(self, pending: Sequence[TaskRequest], now: float, rank: Rank | None = None) -> QueuePlan:
        ordered = sorted(pending, key=self.order_key(now, rank))
        oldest = min(pending, key=lambda r: (r.submitted_at, r.key), default=None)
        return QueuePlan(tuple(ordered), blocking=False, protected=self.protect(oldest, now))

    def order_key(self, now: float, rank: Rank | None = None) -> OrderKey:
        aging_s, boost, starving = self.aging_s, self.recovery_boost, self.starvation_s

        def key(r: TaskRequest) -> tuple[object, ...]:
            # whole aging points, so that equal priorities stay equal long enough for
            # ``tie_break`` to order them; monotone in submitted_at for one class (class_of)
            waited = max(0.0, now - r.submitted_at)
            eff: float = r.priority + math.floor(waited / aging_s)
            if r.recovered:
                eff += boost
            return (-eff, -r.tie_break, r.submitted_at, r.key)

        if rank is None:
            return key

        def ranked(r: TaskRequest) -> tuple[object, ...]:
            # an overdue try ages and goes first (0.0) inside its effective priority; the rest
            # keep their priority and go by rank (a predicted run: > 0); monotone in submitted_at
            # for one class while the rank is one value per class member's task type
            waited = max(0.0, now - r.submitted_at)
            got = rank(r, waited) if waited <= starving else None
            eff: float = r.priority + boost if r.recovered else r.priority
            if got is None:
                return (-(eff + math.floor(waited / aging_s)), -r.tie_break, 0.0, r.submitted_at, r.key)
            return (-eff, -r.tie_break, got, r.submitted_at, r.key)

        return ranked

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
