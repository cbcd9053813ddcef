"""The tries the scheduler takes back: revoked (stuck in queued), handed back at shutdown, or
superseded by a newer try of the same task instance.

A collaborator of the flow (flow.py) with no state of its own: it moves tries through the try
book (book.py), which owns their states, and ends them through the flow's one end path.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from carma_airflow.executor.tries.book import Try, TryBook, TryState
from carma_airflow.launching import Ended

log = logging.getLogger("carma_airflow.executor")

SUPERSEDED_GRACE_S = 10.0  # a newer try of the same task waits this long before the older is stopped

End = Callable[[Try, Ended | None], None]  # the flow's one end path (None: the try never had a process)
Note = Callable[[Try, str], None]  # the store's word that a waiting try was taken back, and why


class TakeBack:
    """Taking tries back; see the module docstring."""

    def __init__(self, tries: TryBook, end: End, note: Note) -> None:
        self.tries, self._end, self._note = tries, end, note

    def withdraw(self, key: Any) -> bool:
        """Take a waiting (or deferred) try out: it will not be placed; False if it does not wait."""
        attempt = self.tries.get(key)
        if attempt is None or attempt.state not in (TryState.WAITING, TryState.DEFERRED):
            return False
        self._end(attempt, None)
        return True

    def revoke(self, key: Any, why: str) -> bool:
        """The scheduler takes a try back: at once it is no try of this executor any more (the
        scheduler may hand the key over again); a waiting one leaves the queue, a started one is
        stopped and reaped in the background, its GPUs reserved until then and its end not
        reported.  False if unknown."""
        attempt = self.tries.get(key)
        if attempt is None:
            return False
        if attempt.request is not None and attempt.state in (TryState.WAITING, TryState.DEFERRED):
            self._note(attempt, why)
        if not self.withdraw(key):
            self.stop(attempt)
        return True

    def hand_back(self, why: str) -> int:
        """Shutdown: every try that waits leaves the queue (the next scheduler resets and queues
        it again); started tries run on for a later executor to adopt.  Returns how many."""
        waiting = [*self.tries.in_state(TryState.WAITING).values(), *self.tries.in_state(TryState.DEFERRED).values()]
        for attempt in waiting:
            if attempt.request is not None:
                self._note(attempt, why)
            self._end(attempt, None)
        return len(waiting)

    def stop(self, attempt: Try) -> None:
        """A started try the scheduler gave up on: STOPPING until its process is reaped."""
        self.tries.move(attempt, TryState.STOPPING)
        if attempt.handle is not None:
            attempt.handle.kill()

    def stop_superseded(self, newer: Try) -> None:
        """A newer try of the same task instance was handed over while an older one still runs:
        Airflow has given up on the older (a heartbeat timeout, a clear); it must not keep the
        GPUs the newer one needs."""
        for older in self.tries.earlier(newer):
            if older.state is not TryState.STOPPING:
                log.warning("Try %s superseded by try %d: stopping it", older.rkey, newer.ti.try_number)
                self.stop(older)


__all__ = ["SUPERSEDED_GRACE_S", "TakeBack"]
