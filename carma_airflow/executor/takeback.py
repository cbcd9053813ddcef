"""The flow's tries by state, and the tries the scheduler takes back: revoked (stuck in
queued), handed back at shutdown, or superseded by a newer try of the same task instance.

A mixin of :class:`~carma_airflow.executor.flow.TryFlow` (the flow's own module stays small);
what it uses of the flow is declared below.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from carma_airflow.core.cycle import SchedulingCycle
from carma_airflow.executor.intake import family_of
from carma_airflow.executor.tries import Try, TryBook, TryState
from carma_airflow.store.records import TryOutcome

log = logging.getLogger("carma_airflow.executor")

SUPERSEDED_GRACE_S = 10.0  # a newer try of the same task waits this long before the older is stopped


class TakeBack:
    """The tries by state, and taking them back; see the module docstring."""

    tries: TryBook
    cycle: SchedulingCycle

    # -- the tries by state ------------------------------------------------------------------
    @property
    def waiting(self) -> Mapping[Any, Try]:
        return self.tries.in_state(TryState.WAITING)

    @property
    def active(self) -> Mapping[Any, Try]:
        return self.tries.in_state(TryState.RUNNING)

    @property
    def bare(self) -> Mapping[Any, Try]:
        return self.tries.in_state(TryState.REFUSED)

    @property
    def deferred(self) -> Mapping[Any, Try]:
        return self.tries.in_state(TryState.DEFERRED)

    @property
    def orphans(self) -> Mapping[str, Try]:
        return self.tries.in_state(TryState.ORPHAN)

    def _record(
        self, attempt: Try, *, outcome: TryOutcome, summary: str, host: str | None = None, **extra: Any
    ) -> None:
        raise NotImplementedError  # the flow's

    def withdraw(self, key: Any) -> bool:
        """Take a waiting (or deferred) try out: it will not be placed; False if it does not wait."""
        attempt = self.tries.get(key)
        if attempt is None or attempt.state not in (TryState.WAITING, TryState.DEFERRED):
            return False
        self.cycle.withdraw(attempt.rkey)
        self.tries.move(attempt, TryState.ENDED)
        return True

    def revoke(self, key: Any, why: str) -> bool:
        """The scheduler takes a try back: a waiting one leaves the queue, a started one is
        stopped (its end is not reported: the scheduler has rescheduled it); False if unknown."""
        attempt = self.tries.get(key)
        if attempt is None:
            return False
        if attempt.request is not None and attempt.state in (TryState.WAITING, TryState.DEFERRED):
            self._record(attempt, outcome=TryOutcome.FAILED, summary=why)
        if self.withdraw(key):
            return True
        attempt.revoked = True
        if attempt.handle is not None:
            attempt.handle.kill()
        return True

    def hand_back(self, why: str) -> int:
        """Shutdown: every try that waits leaves the queue (the next scheduler resets and queues
        it again); started tries run on for a later executor to adopt.  Returns how many."""
        keys = [*self.waiting, *self.deferred]
        for key in keys:
            attempt = self.tries.get(key)
            if attempt is not None and attempt.request is not None:
                self._record(attempt, outcome=TryOutcome.FAILED, summary=why)
            self.withdraw(key)
        return len(keys)

    def _stop_superseded(self, newer: Try) -> None:
        """A newer try of the same task instance was handed over while an older one still runs:
        Airflow has given up on the older (a heartbeat timeout, a clear); it must not keep the
        GPUs the newer one needs."""
        family = family_of(newer.ti)
        for older in (*self.active.values(), *self.orphans.values()):
            if family_of(older.ti) == family and older.ti.try_number < newer.ti.try_number and not older.revoked:
                log.warning("Try %s superseded by try %d: stopping it", older.rkey, newer.ti.try_number)
                older.revoked = True
                if older.handle is not None:
                    older.handle.kill()


__all__ = ["SUPERSEDED_GRACE_S", "TakeBack"]
