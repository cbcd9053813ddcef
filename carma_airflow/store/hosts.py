"""GPU hosts and dispatches (multi-host): each host's agent heartbeat, and the tries sent to its queue."""

from __future__ import annotations

from sqlalchemy import delete, func, select, update

from carma_airflow.store.engine import Moment, StoreBase, check_limit, utc
from carma_airflow.store.errors import RecordError
from carma_airflow.store.records import DISPATCH_STATES, DispatchRecord, HostRecord
from carma_airflow.store.schema import DispatchRow, HostRow


def _host_record(row: HostRow) -> HostRecord:
    return HostRecord(
        host=row.host,
        queue=row.queue,
        heartbeat_at=row.heartbeat_at,
        started_at=row.started_at,
        backend=row.backend,
        agent_version=row.agent_version,
        pid=row.pid,
        gpus=tuple(dict(g) for g in row.gpus),
        worker_at=row.worker_at,
        worker_pid=row.worker_pid,
    )


def _dispatch_record(row: DispatchRow) -> DispatchRecord:
    return DispatchRecord(
        key=row.key,
        host=row.host,
        queue=row.queue,
        celery_id=row.celery_id,
        dispatched_at=row.dispatched_at,
        state=row.state,
        ended_at=row.ended_at,
        reason=row.reason,
    )


class HostStore(StoreBase):
    """The store's calls on hosts and dispatches (part of :class:`~carma_airflow.store.store.Store`)."""

    # -- hosts and agents ---------------------------------------------------------------

    def publish_host(self, rec: HostRecord) -> None:
        """Write (or replace) a GPU host's row: its heartbeat and the newest reading of its GPUs.

        The worker's heartbeat (``worker_at``, ``worker_pid``) is the worker's to write: an
        existing one is kept, and a new row starts without one.
        """
        if not rec.host:
            raise RecordError("a GPU host needs a non-empty name ([carma] host)")
        values = {
            "host": rec.host,
            "queue": rec.queue,
            "backend": rec.backend,
            "agent_version": rec.agent_version,
            "pid": rec.pid,
            "started_at": utc(rec.started_at),
            "heartbeat_at": utc(rec.heartbeat_at),
            "gpus": [dict(g) for g in rec.gpus],
        }
        self._write(self._upsert(HostRow, "host", values))

    def hosts(self) -> list[HostRecord]:
        """Every GPU host an agent ever published, by name."""
        with self._session() as session:
            return [_host_record(row) for row in session.scalars(select(HostRow).order_by(HostRow.host))]

    def host(self, name: str) -> HostRecord | None:
        """The row of one GPU host, or None."""
        with self._session() as session:
            row = session.get(HostRow, name)
            return None if row is None else _host_record(row)

    def worker_beat(self, name: str, at: Moment | None, pid: int | None = None) -> bool:
        """The Celery worker of host ``name`` is alive at ``at`` (None: it stopped).  False if no such host yet."""
        when = None if at is None else utc(at)
        return self._update(update(HostRow).where(HostRow.host == name).values(worker_at=when, worker_pid=pid))

    def forget_host(self, name: str) -> bool:
        """Remove a GPU host (decommissioned); False if there was none."""
        return self._update(delete(HostRow).where(HostRow.host == name))

    # -- dispatches ---------------------------------------------------------------------

    def record_dispatch(self, rec: DispatchRecord) -> None:
        """Write (or replace) the dispatch of one try to a host's queue."""
        if rec.state not in DISPATCH_STATES:
            raise RecordError(f"unknown dispatch state {rec.state!r}; use one of: {', '.join(DISPATCH_STATES)}")
        if not rec.key:
            raise RecordError(f"dispatch to {rec.host} has an empty key; give each try a unique key")
        values = {
            "key": rec.key,
            "host": rec.host,
            "queue": rec.queue,
            "celery_id": rec.celery_id,
            "dispatched_at": utc(rec.dispatched_at),
            "state": rec.state,
            "ended_at": None if rec.ended_at is None else utc(rec.ended_at),
            "reason": rec.reason,
        }
        self._write(self._upsert(DispatchRow, "key", values))

    def dispatch(self, key: str) -> DispatchRecord | None:
        """The dispatch of the try with this placement key, or None."""
        with self._session() as session:
            row = session.scalar(select(DispatchRow).where(DispatchRow.key == key))
            return None if row is None else _dispatch_record(row)

    def dispatches(self, host: str | None = None, state: str | None = None, limit: int = 1000) -> list[DispatchRecord]:
        """The newest ``limit`` dispatches (to one host, in one state), newest first."""
        check_limit(limit)
        stmt = select(DispatchRow).order_by(DispatchRow.id.desc()).limit(limit)
        if host is not None:
            stmt = stmt.where(DispatchRow.host == host)
        if state is not None:
            stmt = stmt.where(DispatchRow.state == state)
        with self._session() as session:
            return [_dispatch_record(row) for row in session.scalars(stmt)]

    def dispatch_counts(self, state: str) -> dict[str, int]:
        """How many dispatches are in ``state``, per host (one grouped query, not the rows)."""
        if state not in DISPATCH_STATES:
            raise RecordError(f"dispatch state must be one of {', '.join(DISPATCH_STATES)}, not {state!r}")
        stmt = select(DispatchRow.host, func.count()).where(DispatchRow.state == state).group_by(DispatchRow.host)
        with self._session() as session:
            return {host: int(n) for host, n in session.execute(stmt)}

    def end_dispatch(self, key: str, at: Moment, state: str, reason: str | None = None) -> bool:
        """A sent try ended (``ended``) or its host was lost (``lost``).  False if it was not ``sent``.

        Only the first ending counts: a try declared lost stays lost when its worker answers late.
        """
        if state not in ("ended", "lost"):
            raise RecordError(f"end_dispatch needs 'ended' or 'lost', not {state!r}")
        stmt = (
            update(DispatchRow)
            .where(DispatchRow.key == key, DispatchRow.state == "sent")
            .values(state=state, ended_at=utc(at), reason=reason)
        )
        return self._update(stmt)
