"""The cycle's reservation ledger when several schedulers share GPUs.

:class:`SharedLedger` is the core ledger (:class:`~carma_airflow.core.reservations.Reservations`)
with two additions: the other executors' reservations, read from the store, are laid over it as
*foreign* tenants (so the placer counts them like its own, with their since time and activity),
and it notes the tries of its own that it released, so the peer heartbeat can take their
published reservations out of the store.  Everything here runs in the scheduler's thread,
except :meth:`SharedLedger.drain_released` and :meth:`SharedLedger.mine` (the heartbeat thread):
both copy in one step.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import asdict

from carma_airflow.core.activity import ActivityEstimate
from carma_airflow.core.reservations import Reservation, Reservations
from carma_airflow.store.peers import ReservationRecord
from carma_airflow.store.records import fence_of, kept_margin_of


def record_of(res: Reservation, owner: str) -> ReservationRecord:
    activity = asdict(res.activity) if res.activity is not None else None
    return ReservationRecord(
        res.key,
        owner,
        res.label,
        res.gpu_uuids,
        res.mib,
        res.since,
        res.exclusive,
        activity,
        fence_of(res.kept_margin_mib),
    )


def _activity(raw: dict[str, object] | None) -> ActivityEstimate | None:
    if not raw:
        return None
    try:
        return ActivityEstimate(**raw)  # type: ignore[arg-type]
    except TypeError:  # written by another version: the prior applies
        return None


class SharedLedger(Reservations):
    """Reservations of this executor's tries and, laid over them, those of its peers."""

    def __init__(self, *, seen_after_s: float | None = None, foreign_kept_margin_mib: int | None = None) -> None:
        super().__init__(seen_after_s=seen_after_s)
        self.foreign: set[str] = set()  # keys of the peers' reservations laid over the view
        # what the placer keeps above a peer's reservation for its life (Reservation.kept_margin_mib)
        # where the peer did not publish its try's fence (a writer before store revision 0008)
        self.foreign_kept_margin_mib = foreign_kept_margin_mib
        self._released: deque[str] = deque()

    def release(self, key: str) -> Reservation | None:
        res = super().release(key)
        if res is not None and key not in self.foreign:
            self._released.append(key)
        self.foreign.discard(key)
        return res

    def drain_released(self) -> list[str]:
        """Own tries released since the last call (their published rows can go)."""
        out = []
        while self._released:
            out.append(self._released.popleft())
        return out

    def release_later(self, key: str) -> None:
        """A released key whose row could not be taken out yet (the next drain returns it)."""
        self._released.append(key)

    def mine(self) -> list[Reservation]:
        """This executor's own reservations (a copy)."""
        foreign = set(self.foreign)
        return [r for r in self if r.key not in foreign]

    def lay_over(self, others: Sequence[ReservationRecord]) -> None:
        """The peers' reservations are exactly ``others`` from now on (one of our own with the
        same key, a try we adopted, stays ours)."""
        keys = {r.key for r in others}
        for key in list(self.foreign - keys):
            self.forget_foreign(key)
        for rec in others:
            held = self.get(rec.key)
            if held is not None:
                if rec.key not in self.foreign:
                    continue  # ours: adopted, the store's owner follows
                kept = kept_margin_of(rec.fence, self.foreign_kept_margin_mib)
                if (held.gpu_uuids, held.mib, held.since, held.exclusive, held.kept_margin_mib) == (
                    rec.gpu_uuids,
                    rec.mib,
                    rec.since,
                    rec.exclusive,
                    kept,
                ):
                    continue
                self.forget_foreign(rec.key)
            before = {u: self.last_placed_at(u) for u in rec.gpu_uuids}
            self.reserve(
                rec.key,
                rec.label,
                rec.gpu_uuids,
                rec.mib,
                rec.since,
                exclusive=rec.exclusive,
                activity=_activity(rec.activity),
                kept_margin_mib=kept_margin_of(rec.fence, self.foreign_kept_margin_mib),
            )
            self.foreign.add(rec.key)
            for uuid, last in before.items():  # a peer's older placement does not move the lock window back
                if last is not None and last > rec.since:
                    self._last_placed[uuid] = last

    def forget_foreign(self, key: str) -> bool:
        """A peer's reservation stops counting here (adopted, reset, or gone from the store)."""
        if key not in self.foreign:
            return False
        self.foreign.discard(key)
        super().release(key)
        return True


__all__ = ["SharedLedger", "record_of"]
