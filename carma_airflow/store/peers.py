"""Several schedulers: each executor's heartbeat, and the reservations executors share.

Every CarmaExecutor (one per Airflow scheduler) has a row in ``carma_executor`` with a heartbeat;
one whose heartbeat is older than a bound, or that stopped, is gone.  An executor that places
next to live peers publishes what each of its tries holds in ``carma_reservation`` and reads
the others' there, inside one transaction (:meth:`PeerStore.reservation_pass`) that on
PostgreSQL holds an advisory lock per GPU host (``pg_advisory_xact_lock``), so two placement
passes never count the same free memory.  On SQLite the transaction takes the file's write lock.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import delete, select, text, update
from sqlalchemy.orm import Session

from carma_airflow.store.engine import Moment, StoreBase, utc
from carma_airflow.store.errors import RecordError
from carma_airflow.store.live_snapshots import name_of
from carma_airflow.store.schema import ExecutorRow, ReservationRow, SnapshotRow


@dataclass(frozen=True, slots=True)
class ExecutorRecord:
    """One CarmaExecutor as the store knows it."""

    id: str
    host: str
    pid: int
    started_at: datetime
    heartbeat_at: datetime
    stopped_at: datetime | None = None
    shared: bool = False

    def alive(self, now: float, timeout_s: float) -> bool:
        """Whether it beat within ``timeout_s`` of ``now`` and has not stopped."""
        return self.stopped_at is None and now - self.heartbeat_at.timestamp() <= timeout_s


@dataclass(frozen=True, slots=True)
class ReservationRecord:
    """What one try holds: ``mib`` on each of ``gpu_uuids`` since ``since`` (epoch seconds)."""

    key: str
    owner: str
    label: str
    gpu_uuids: tuple[str, ...]
    mib: int
    since: float
    exclusive: bool = False
    activity: dict[str, Any] | None = None  # an ActivityEstimate's fields
    fence: dict[str, Any] | None = None  # the try's fence (records.fence_of); None: not published (before 0008)


def host_lock_key(host: str) -> int:
    """The advisory lock (a signed 64-bit key) that placements on GPU host ``host`` take."""
    digest = hashlib.blake2b(f"carma:gpu-host:{host}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big", signed=True)


def _executor(row: ExecutorRow) -> ExecutorRecord:
    return ExecutorRecord(row.id, row.host, row.pid, row.started_at, row.heartbeat_at, row.stopped_at, row.shared)


def _reservation(row: ReservationRow) -> ReservationRecord:
    activity = dict(row.activity) if row.activity else None
    return ReservationRecord(
        row.key,
        row.owner,
        row.label,
        tuple(row.gpu_uuids),
        row.mib,
        row.since,
        row.exclusive,
        activity,
        dict(row.fence) if row.fence is not None else None,
    )


def _reservation_values(rec: ReservationRecord) -> dict[str, Any]:
    if not rec.key or not rec.owner:
        raise RecordError(f"a reservation needs a try key and an owner, got key={rec.key!r} owner={rec.owner!r}")
    return {
        "key": rec.key,
        "owner": rec.owner,
        "label": rec.label,
        "gpu_uuids": [str(u) for u in rec.gpu_uuids],
        "mib": int(rec.mib),
        "since": float(rec.since),
        "exclusive": bool(rec.exclusive),
        "activity": rec.activity,
        "fence": rec.fence,
    }


class ReservationPass:
    """The open transaction of one placement pass (see :meth:`PeerStore.reservation_pass`)."""

    def __init__(self, store: PeerStore, session: Session, me: str) -> None:
        self._store, self._session, self.me = store, session, me
        self.executors = [_executor(r) for r in session.scalars(select(ExecutorRow).order_by(ExecutorRow.started_at))]
        rows = session.scalars(select(ReservationRow).where(ReservationRow.owner != me).order_by(ReservationRow.since))
        self.others = [_reservation(r) for r in rows]  # every other executor's, live or gone

    def publish(self, recs: Iterable[ReservationRecord]) -> None:
        """Add (or replace) reservations of this executor."""
        for rec in recs:
            self._session.execute(self._store._upsert(ReservationRow, "key", _reservation_values(rec)))

    def replace_mine(self, recs: Iterable[ReservationRecord]) -> None:
        """This executor's reservations are exactly ``recs`` from now on."""
        self._session.execute(delete(ReservationRow).where(ReservationRow.owner == self.me))
        self.publish(recs)

    def set_shared(self, shared: bool) -> None:
        self._session.execute(update(ExecutorRow).where(ExecutorRow.id == self.me).values(shared=shared))


class PeerStore(StoreBase):
    """The store's calls on executors and shared reservations (part of :class:`~carma_airflow.store.store.Store`)."""

    def register_executor(self, rec: ExecutorRecord) -> list[ExecutorRecord]:
        """Write this executor's row; returns every executor's row (this one included), oldest first."""
        if not rec.id:
            raise RecordError("an executor needs a non-empty id")
        values = {
            "id": rec.id,
            "host": rec.host,
            "pid": rec.pid,
            "started_at": utc(rec.started_at),
            "heartbeat_at": utc(rec.heartbeat_at),
            "stopped_at": None if rec.stopped_at is None else utc(rec.stopped_at),
            "shared": rec.shared,
        }
        with self._session(write=True) as session:
            session.execute(self._upsert(ExecutorRow, "id", values))
            return [_executor(r) for r in session.scalars(select(ExecutorRow).order_by(ExecutorRow.started_at))]

    def beat_executor(self, me: str, at: Moment, released: Sequence[str] = ()) -> list[ExecutorRecord]:
        """One short transaction: ``me`` is alive at ``at``, its tries ``released`` hold nothing
        any more; returns every executor's row, oldest first."""
        with self._session(write=True) as session:
            session.execute(update(ExecutorRow).where(ExecutorRow.id == me).values(heartbeat_at=utc(at)))
            if released:
                session.execute(
                    delete(ReservationRow).where(ReservationRow.owner == me, ReservationRow.key.in_(list(released)))
                )
            return [_executor(r) for r in session.scalars(select(ExecutorRow).order_by(ExecutorRow.started_at))]

    def stop_executor(self, me: str, at: Moment) -> None:
        """``me`` stopped (its tries that still run stay reserved until a peer adopts them)."""
        self._write(update(ExecutorRow).where(ExecutorRow.id == me).values(stopped_at=utc(at), shared=False))

    def executors(self) -> list[ExecutorRecord]:
        with self._session() as session:
            return [_executor(r) for r in session.scalars(select(ExecutorRow).order_by(ExecutorRow.started_at))]

    def shared_reservations(self, owner: str | None = None) -> list[ReservationRecord]:
        """Published reservations (of one owner), oldest first."""
        stmt = select(ReservationRow).order_by(ReservationRow.since)
        if owner is not None:
            stmt = stmt.where(ReservationRow.owner == owner)
        with self._session() as session:
            return [_reservation(r) for r in session.scalars(stmt)]

    def drop_reservations(self, keys: Sequence[str]) -> int:
        """These tries hold nothing any more (their owner is gone and they were reset or closed)."""
        if not keys:
            return 0
        return self._write(delete(ReservationRow).where(ReservationRow.key.in_(list(keys))))

    def forget_executors(self, ids: Sequence[str]) -> None:
        """Executors gone long ago: their rows and whatever they had published (live snapshots included)."""
        if not ids:
            return
        with self._session(write=True) as session:
            session.execute(delete(ReservationRow).where(ReservationRow.owner.in_(list(ids))))
            session.execute(delete(SnapshotRow).where(SnapshotRow.name.in_([name_of(i) for i in ids])))
            session.execute(delete(ExecutorRow).where(ExecutorRow.id.in_(list(ids))))

    @contextmanager
    def reservation_pass(self, me: str, hosts: Iterable[str]) -> Iterator[ReservationPass]:
        """One placement pass's transaction: the lock of every GPU host in ``hosts`` (PostgreSQL:
        ``pg_advisory_xact_lock``, taken in one order so two passes cannot deadlock; SQLite: the
        write lock), the executors and the other executors' reservations as they stand; what the
        pass publishes commits with it, and the locks end with it."""
        with self._session(write=True) as session:
            if not self._sqlite:
                for key in sorted({host_lock_key(h) for h in hosts}):
                    session.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": key})
            yield ReservationPass(self, session, me)


__all__ = ["ExecutorRecord", "PeerStore", "ReservationPass", "ReservationRecord", "host_lock_key"]
