"""The bookkeeping store: GPU samples, placements, OOM events and memory history.

One :class:`Store` per process: it opens connections lazily, and a store carried across
``fork()`` opens fresh connections in the child instead of sharing the parent's.  Everything
goes in and out as plain values or the frozen records of :mod:`carma_airflow.store.records`.

SQLite (the default, a file in AIRFLOW_HOME) runs in WAL mode with a busy timeout, and every
write takes the write lock when its transaction begins (``BEGIN IMMEDIATE``), so the executor,
task runners and the CLI can use one file at once.  PostgreSQL is the choice for many hosts.
"""

from __future__ import annotations

import os
import weakref
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from sqlalchemy import CursorResult, Engine, case, create_engine, delete, event, func, insert, select, text, update
from sqlalchemy import exc as sa_exc
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.engine import URL, Connection, make_url
from sqlalchemy.orm import Session

from carma_airflow.store.errors import RecordError, StoreError
from carma_airflow.store.records import (
    ACTIVE_OUTCOMES,
    DISPATCH_STATES,
    DispatchRecord,
    HostRecord,
    OomRecord,
    PlacementRecord,
    SampleRecord,
    TryOutcome,
)
from carma_airflow.store.schema import (
    ACTIVITY_SOURCE_VALUES,
    VERSION_TABLE,
    ActivityHistoryRow,
    DispatchRow,
    GpuSampleRow,
    HostRow,
    MemoryHistoryRow,
    OomEventRow,
    PlacementRow,
    SnapshotRow,
)
from carma_airflow.store.url import default_url, mask_password

if TYPE_CHECKING:
    from alembic.config import Config

MIGRATIONS_DIR = Path(__file__).resolve().parent / "migrations"
SUPPORTED_BACKENDS = ("sqlite", "postgresql")
_WRITE = "carma_write"  # connection execution option: this transaction will write
_MIGRATE_LOCK = 0x6361726D61  # pg_advisory_xact_lock key ("carma") serialising migrations


Moment = datetime | float
"""A point in time: a datetime (naive means UTC) or seconds since the epoch (``time.time()``)."""


def _utc(at: datetime | float) -> datetime:
    if isinstance(at, datetime):
        return at.replace(tzinfo=timezone.utc) if at.tzinfo is None else at.astimezone(timezone.utc)
    if isinstance(at, bool) or not isinstance(at, (int, float)):
        raise RecordError(f"a time must be a datetime or seconds since the epoch, got {at!r}")
    return datetime.fromtimestamp(at, tz=timezone.utc)


def _sample_record(row: GpuSampleRow) -> SampleRecord:
    return SampleRecord(
        host=row.host,
        gpu_uuid=row.gpu_uuid,
        gpu_index=row.gpu_index,
        name=row.name,
        at=row.at,
        memory_total_mib=row.memory_total_mib,
        memory_used_mib=row.memory_used_mib,
        smact=row.smact,
        smocc=row.smocc,
        drama=row.drama,
        power_w=row.power_w,
        energy_j=row.energy_j,
        error=row.error,
    )


def _placement_record(row: PlacementRow) -> PlacementRecord:
    return PlacementRecord(
        key=row.key,
        dag_id=row.dag_id,
        task_id=row.task_id,
        run_id=row.run_id,
        map_index=row.map_index,
        try_number=row.try_number,
        label=row.label,
        decided_at=row.decided_at,
        outcome=TryOutcome(row.outcome),
        gpu_uuids=tuple(row.gpu_uuids),
        host=row.host,
        estimate_mib=row.estimate_mib,
        estimate_source=row.estimate_source,
        peak_mib=row.peak_mib,
        summary=row.summary,
        reasons=tuple(row.reasons),
        policy=row.policy,
        started_at=row.started_at,
        ended_at=row.ended_at,
        pid=row.pid,
        pid_start=row.pid_start,
        ti_id=row.ti_id,
        id=row.id,
    )


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


def _oom_record(row: OomEventRow) -> OomRecord:
    return OomRecord(
        placement_key=row.placement_key,
        dag_id=row.dag_id,
        task_id=row.task_id,
        try_number=row.try_number,
        at=row.at,
        gpu_uuid=row.gpu_uuid,
        peak_mib=row.peak_mib,
        message=row.message,
        id=row.id,
    )


def _outcome(value: TryOutcome | str) -> TryOutcome:
    try:
        return TryOutcome(value)
    except ValueError:
        known = ", ".join(o.value for o in TryOutcome)
        raise RecordError(f"unknown try outcome {value!r}; use one of: {known}") from None


def _placement_values(rec: PlacementRecord) -> dict[str, Any]:
    if not rec.key:
        raise RecordError(f"placement of {rec.dag_id}.{rec.task_id} has an empty key; give each try a unique key")
    return {
        "key": rec.key,
        "dag_id": rec.dag_id,
        "task_id": rec.task_id,
        "run_id": rec.run_id,
        "map_index": rec.map_index,
        "try_number": rec.try_number,
        "label": rec.label,
        "decided_at": _utc(rec.decided_at),
        "started_at": None if rec.started_at is None else _utc(rec.started_at),
        "ended_at": None if rec.ended_at is None else _utc(rec.ended_at),
        "outcome": _outcome(rec.outcome).value,
        "gpu_uuids": [str(u) for u in rec.gpu_uuids],
        "host": rec.host,
        "estimate_mib": rec.estimate_mib,
        "estimate_source": rec.estimate_source,
        "peak_mib": rec.peak_mib,
        "summary": rec.summary,
        "reasons": [str(r) for r in rec.reasons],
        "policy": rec.policy,
        "pid": rec.pid,
        "pid_start": rec.pid_start,
        "ti_id": rec.ti_id,
    }


def _check_limit(limit: int) -> None:
    if limit < 1:
        raise RecordError(f"limit must be at least 1, got {limit}")


class Store:
    """The bookkeeping store at one database URL (SQLite or PostgreSQL).

    Nothing connects until the first call.  Call :meth:`migrate` once (it is cheap when the
    schema is current) before using a new database.
    """

    def __init__(self, url: str, *, busy_timeout_s: float = 30.0) -> None:
        try:
            self._url: URL = make_url(url)
        except sa_exc.ArgumentError:
            raise StoreError(
                f"cannot read the store URL {mask_password(url)!r}; write it as sqlite:////abs/path/carma.db "
                "or postgresql+psycopg://user:password@host:5432/dbname"
            ) from None
        self._masked = self._url.render_as_string(hide_password=True)
        backend = self._url.get_backend_name()
        if backend not in SUPPORTED_BACKENDS:
            raise StoreError(
                f"the store supports SQLite and PostgreSQL, not {backend!r} ({self._masked}); "
                "use sqlite:///... or postgresql+psycopg://..."
            )
        self._sqlite = backend == "sqlite"
        self.busy_timeout_s = busy_timeout_s
        connect_args: dict[str, Any] = {"timeout": busy_timeout_s} if self._sqlite else {}
        try:
            self._engine: Engine = create_engine(self._url, pool_pre_ping=True, connect_args=connect_args)
        except (sa_exc.ArgumentError, ImportError) as exc:
            raise StoreError(
                f"cannot open the store at {self._masked}: {exc}; check the driver in the URL "
                "(sqlite:// or postgresql+psycopg://) and that its package is installed"
            ) from None
        _forget_connections_across_fork(self._engine)
        if self._sqlite:
            _configure_sqlite(self._engine, busy_timeout_s)

    # -- housekeeping -------------------------------------------------------------------

    @property
    def masked_url(self) -> str:
        """The database URL with any password replaced by ``***`` (safe for logs and errors)."""
        return self._masked

    @staticmethod
    def default_url(airflow_home: str) -> str:
        """``sqlite:///{airflow_home}/carma.db``."""
        return default_url(airflow_home)

    def __repr__(self) -> str:
        return f"Store({self._masked!r})"

    def close(self) -> None:
        """Close pooled connections (the store opens new ones if used again)."""
        self._engine.dispose()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def migrate(self, revision: str = "head") -> None:
        """Bring the schema to ``revision`` (default the newest: ``alembic upgrade head``); a no-op when current.

        Safe to call from several processes at once: migrations run one at a time.
        """
        from alembic import command

        config = self._alembic_config()
        with self._connect(write=True) as conn, conn.begin():
            if not self._sqlite:
                conn.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": _MIGRATE_LOCK})
            config.attributes["connection"] = conn
            command.upgrade(config, revision)

    def revision(self) -> str | None:
        """The schema revision of the database, None before the first :meth:`migrate`."""
        from alembic.runtime.migration import MigrationContext

        with self._connect() as conn:
            context = MigrationContext.configure(conn, opts={"version_table": VERSION_TABLE})
            return context.get_current_revision()

    def head_revision(self) -> str:
        """The newest revision this version of carma-airflow ships."""
        from alembic.script import ScriptDirectory

        head = ScriptDirectory.from_config(self._alembic_config()).get_current_head()
        assert head is not None
        return head

    # -- GPU samples --------------------------------------------------------------------

    def record_samples(self, samples: Sequence[SampleRecord], min_interval_s: float = 30.0) -> int:
        """Store samples, at most one per GPU per ``min_interval_s``; returns the rows written.

        A sample is kept when it is at least ``min_interval_s`` newer than the last kept
        sample of its GPU (stored or in this batch); older or closer ones are dropped.
        """
        if min_interval_s < 0:
            raise RecordError(f"min_interval_s must not be negative, got {min_interval_s}")
        if not samples:
            return 0
        uuids = sorted({s.gpu_uuid for s in samples})
        with self._session(write=True) as session:
            stmt = (
                select(GpuSampleRow.gpu_uuid, func.max(GpuSampleRow.at))
                .where(GpuSampleRow.gpu_uuid.in_(uuids))
                .group_by(GpuSampleRow.gpu_uuid)
            )
            last: dict[str, datetime] = {uuid: _utc(at) for uuid, at in session.execute(stmt)}
            rows: list[dict[str, Any]] = []
            for sample in sorted(samples, key=lambda s: _utc(s.at)):
                at = _utc(sample.at)
                previous = last.get(sample.gpu_uuid)
                if previous is not None and (at - previous).total_seconds() < min_interval_s:
                    continue
                last[sample.gpu_uuid] = at
                rows.append(
                    {
                        "host": sample.host,
                        "gpu_uuid": sample.gpu_uuid,
                        "gpu_index": sample.gpu_index,
                        "name": sample.name,
                        "at": at,
                        "memory_total_mib": sample.memory_total_mib,
                        "memory_used_mib": sample.memory_used_mib,
                        "smact": sample.smact,
                        "smocc": sample.smocc,
                        "drama": sample.drama,
                        "power_w": sample.power_w,
                        "energy_j": sample.energy_j,
                        "error": sample.error,
                    }
                )
            if rows:
                session.execute(insert(GpuSampleRow), rows)
            return len(rows)

    def samples(
        self, gpu_uuid: str | None = None, since: Moment | None = None, limit: int = 10_000
    ) -> list[SampleRecord]:
        """The latest ``limit`` samples (of one GPU, newer than ``since``), oldest first."""
        _check_limit(limit)
        stmt = select(GpuSampleRow).order_by(GpuSampleRow.at.desc(), GpuSampleRow.id.desc()).limit(limit)
        if gpu_uuid is not None:
            stmt = stmt.where(GpuSampleRow.gpu_uuid == gpu_uuid)
        if since is not None:
            stmt = stmt.where(GpuSampleRow.at > _utc(since))
        with self._session() as session:
            return [_sample_record(row) for row in reversed(session.scalars(stmt).all())]

    def latest_samples(self) -> list[SampleRecord]:
        """The newest sample of every GPU ever sampled, by host and GPU index."""
        newest = select(func.max(GpuSampleRow.id)).group_by(GpuSampleRow.gpu_uuid).scalar_subquery()
        stmt = (
            select(GpuSampleRow)
            .where(GpuSampleRow.id.in_(newest))
            .order_by(GpuSampleRow.host, GpuSampleRow.gpu_index, GpuSampleRow.gpu_uuid)
        )
        with self._session() as session:
            return [_sample_record(row) for row in session.scalars(stmt)]

    def prune_samples(self, before: Moment) -> int:
        """Delete samples taken before ``before``; returns how many."""
        with self._session(write=True) as session:
            result = session.execute(
                delete(GpuSampleRow).where(GpuSampleRow.at < _utc(before)),
                execution_options={"synchronize_session": False},
            )
            return cast(CursorResult[Any], result).rowcount

    # -- placements ---------------------------------------------------------------------

    def upsert_placement(self, rec: PlacementRecord) -> int:
        """Insert the try, or replace every field of the stored try with the same key; returns its id."""
        values = _placement_values(rec)
        dialect_insert = sqlite_insert if self._sqlite else pg_insert
        stmt = dialect_insert(PlacementRow).values(values)
        stmt = stmt.on_conflict_do_update(
            index_elements=[PlacementRow.key],
            set_={name: stmt.excluded[name] for name in values if name != "key"},
        )
        with self._session(write=True) as session:
            session.execute(stmt, execution_options={"synchronize_session": False})
            row_id = session.scalar(select(PlacementRow.id).where(PlacementRow.key == rec.key))
            assert row_id is not None
            return row_id

    def mark_started(self, key: str, at: Moment) -> bool:
        """The try's process started at ``at``: a waiting try becomes running.  False if no such key."""
        stmt = (
            update(PlacementRow)
            .where(PlacementRow.key == key)
            .values(
                started_at=_utc(at),
                outcome=case(
                    (PlacementRow.outcome == TryOutcome.WAITING.value, TryOutcome.RUNNING.value),
                    else_=PlacementRow.outcome,
                ),
            )
        )
        return self._update(stmt)

    def mark_ended(
        self,
        key: str,
        at: Moment,
        outcome: TryOutcome | str,
        peak_mib: int | None = None,
        summary: str | None = None,
    ) -> bool:
        """The try ended at ``at`` with ``outcome`` (success, failed or oom).  False if no such key.

        ``peak_mib`` None keeps the peak already stored; ``summary`` None keeps the summary.
        """
        final = _outcome(outcome)
        if not final.finished:
            raise RecordError(f"mark_ended needs success, failed or oom, not {final.value!r}; use mark_started")
        values: dict[str, Any] = {"ended_at": _utc(at), "outcome": final.value}
        if peak_mib is not None:
            values["peak_mib"] = peak_mib
        if summary is not None:
            values["summary"] = summary
        return self._update(update(PlacementRow).where(PlacementRow.key == key).values(**values))

    def mark_launched(self, key: str, pid: int, pid_start: int | None) -> bool:
        """The try's process is ``pid`` (started at ``pid_start`` ticks since boot).  False if no such key."""
        return self._update(update(PlacementRow).where(PlacementRow.key == key).values(pid=pid, pid_start=pid_start))

    def placement(self, key: str) -> PlacementRecord | None:
        """The try with this key, or None."""
        with self._session() as session:
            row = session.scalar(select(PlacementRow).where(PlacementRow.key == key))
            return None if row is None else _placement_record(row)

    def placements(self, dag_id: str | None = None, limit: int = 500) -> list[PlacementRecord]:
        """The newest ``limit`` tries (of one DAG), newest first."""
        _check_limit(limit)
        stmt = select(PlacementRow).order_by(PlacementRow.id.desc()).limit(limit)
        if dag_id is not None:
            stmt = stmt.where(PlacementRow.dag_id == dag_id)
        return self._placements(stmt)

    def latest_for(
        self, dag_id: str, task_id: str, run_id: str | None = None, limit: int = 50
    ) -> list[PlacementRecord]:
        """The tries of one task (in one run), latest try first."""
        _check_limit(limit)
        stmt = (
            select(PlacementRow)
            .where(PlacementRow.dag_id == dag_id, PlacementRow.task_id == task_id)
            .order_by(PlacementRow.id.desc())
            .limit(limit)
        )
        if run_id is not None:
            stmt = stmt.where(PlacementRow.run_id == run_id)
        return self._placements(stmt)

    def running(self) -> list[PlacementRecord]:
        """Tries still waiting or running, oldest first (to rebuild reservations after a restart)."""
        active = [o.value for o in ACTIVE_OUTCOMES]
        return self._placements(select(PlacementRow).where(PlacementRow.outcome.in_(active)).order_by(PlacementRow.id))

    # -- OOM events and memory history --------------------------------------------------

    def record_oom(self, ev: OomRecord) -> int:
        """Store an out-of-memory event; returns its id."""
        row = OomEventRow(
            placement_key=ev.placement_key,
            dag_id=ev.dag_id,
            task_id=ev.task_id,
            try_number=ev.try_number,
            gpu_uuid=ev.gpu_uuid,
            peak_mib=ev.peak_mib,
            message=ev.message,
            at=_utc(ev.at),
        )
        with self._session(write=True) as session:
            session.add(row)
            session.flush()
            return row.id

    def ooms(self, dag_id: str | None = None, task_id: str | None = None, limit: int = 100) -> list[OomRecord]:
        """The newest ``limit`` OOM events (of one DAG, of one task), newest first."""
        _check_limit(limit)
        stmt = select(OomEventRow).order_by(OomEventRow.at.desc(), OomEventRow.id.desc()).limit(limit)
        if dag_id is not None:
            stmt = stmt.where(OomEventRow.dag_id == dag_id)
        if task_id is not None:
            stmt = stmt.where(OomEventRow.task_id == task_id)
        with self._session() as session:
            return [_oom_record(row) for row in session.scalars(stmt)]

    def add_peak(
        self,
        dag_id: str,
        task_id: str,
        peak_mib: int,
        at: Moment,
        run_id: str | None = None,
        map_index: int | None = None,
    ) -> None:
        """Remember the memory peak of a successful run of a task (``map_index``: of which instance)."""
        if peak_mib < 0:
            raise RecordError(f"peak of {dag_id}.{task_id} must not be negative, got {peak_mib} MiB")
        row = MemoryHistoryRow(
            dag_id=dag_id, task_id=task_id, peak_mib=peak_mib, at=_utc(at), run_id=run_id, map_index=map_index
        )
        with self._session(write=True) as session:
            session.add(row)

    def peaks(self, dag_id: str, task_id: str, limit: int = 5, *, map_index: int | None = None) -> list[int]:
        """The latest ``limit`` peaks of a task, oldest first (``TaskMemoryInfo.history_mib``).

        ``map_index`` None: of every run of the task; an int: only of runs of that map index.
        """
        _check_limit(limit)
        stmt = select(MemoryHistoryRow.peak_mib).where(
            MemoryHistoryRow.dag_id == dag_id, MemoryHistoryRow.task_id == task_id
        )
        if map_index is not None:
            stmt = stmt.where(MemoryHistoryRow.map_index == map_index)
        stmt = stmt.order_by(MemoryHistoryRow.at.desc(), MemoryHistoryRow.id.desc()).limit(limit)
        with self._session() as session:
            return list(reversed(session.scalars(stmt).all()))

    def recent_peaks(self, limit: int = 100_000) -> list[tuple[str, str, int | None, int]]:
        """The newest ``limit`` learned peaks of every task, oldest first: (dag_id, task_id,
        map_index, peak_mib).  Read once when an executor starts (executor/learned.py)."""
        _check_limit(limit)
        stmt = (
            select(
                MemoryHistoryRow.dag_id, MemoryHistoryRow.task_id, MemoryHistoryRow.map_index, MemoryHistoryRow.peak_mib
            )
            .order_by(MemoryHistoryRow.at.desc(), MemoryHistoryRow.id.desc())
            .limit(limit)
        )
        with self._session() as session:
            rows = [(r[0], r[1], r[2], int(r[3])) for r in session.execute(stmt)]
        return list(reversed(rows))

    # -- activity history (issue 13: learned SM activity) ---------------------------------

    def add_activity(
        self,
        dag_id: str,
        task_id: str,
        sm_activity: float,
        source: str,
        at: Moment,
        run_id: str | None = None,
        map_index: int | None = None,
    ) -> None:
        """Remember the solo SM activity (0..1) of one ended try of a task, and how it was measured.

        ``source``: ``"process"`` (per-process SM utilisation), ``"gpu-alone"`` (the GPU's SM
        activity while the try was its only tenant) or ``"hint"`` (the author's declared value).
        """
        if source not in ACTIVITY_SOURCE_VALUES:
            raise RecordError(
                f"unknown activity source {source!r} for {dag_id}.{task_id}; use one of: "
                f"{', '.join(ACTIVITY_SOURCE_VALUES)}"
            )
        if isinstance(sm_activity, bool) or not isinstance(sm_activity, (int, float)) or not 0.0 <= sm_activity <= 1.0:
            raise RecordError(
                f"SM activity of {dag_id}.{task_id} must be a share of SM time between 0 and 1, got {sm_activity!r} "
                "(divide a percentage by 100)"
            )
        row = ActivityHistoryRow(
            dag_id=dag_id,
            task_id=task_id,
            sm_activity=float(sm_activity),
            source=source,
            at=_utc(at),
            run_id=run_id,
            map_index=map_index,
        )
        with self._session(write=True) as session:
            session.add(row)

    def activities(self, dag_id: str, task_id: str, limit: int = 10) -> list[tuple[float, str]]:
        """The latest ``limit`` activities of a task, oldest first: (sm_activity, source)."""
        _check_limit(limit)
        stmt = (
            select(ActivityHistoryRow.sm_activity, ActivityHistoryRow.source)
            .where(ActivityHistoryRow.dag_id == dag_id, ActivityHistoryRow.task_id == task_id)
            .order_by(ActivityHistoryRow.at.desc(), ActivityHistoryRow.id.desc())
            .limit(limit)
        )
        with self._session() as session:
            rows = [(float(r[0]), str(r[1])) for r in session.execute(stmt)]
        return list(reversed(rows))

    def recent_activities(self, limit: int = 100_000) -> list[tuple[str, str, float, str]]:
        """The newest ``limit`` learned activities of every task, oldest first: (dag_id, task_id,
        sm_activity, source).  Read once when an executor starts."""
        _check_limit(limit)
        stmt = (
            select(
                ActivityHistoryRow.dag_id,
                ActivityHistoryRow.task_id,
                ActivityHistoryRow.sm_activity,
                ActivityHistoryRow.source,
            )
            .order_by(ActivityHistoryRow.at.desc(), ActivityHistoryRow.id.desc())
            .limit(limit)
        )
        with self._session() as session:
            rows = [(str(r[0]), str(r[1]), float(r[2]), str(r[3])) for r in session.execute(stmt)]
        return list(reversed(rows))

    # -- snapshots (an executor's live view, read by the UI page) ------------------------

    def put_snapshot(self, name: str, at: Moment, body: dict[str, Any]) -> None:
        """Write (or replace) the JSON document ``name``."""
        if not name:
            raise RecordError("a snapshot needs a non-empty name")
        values = {"name": name, "at": _utc(at), "body": body}
        dialect_insert = sqlite_insert if self._sqlite else pg_insert
        stmt = dialect_insert(SnapshotRow).values(values)
        stmt = stmt.on_conflict_do_update(
            index_elements=[SnapshotRow.name], set_={"at": stmt.excluded.at, "body": stmt.excluded.body}
        )
        with self._session(write=True) as session:
            session.execute(stmt, execution_options={"synchronize_session": False})

    def snapshots(self, prefix: str = "") -> dict[str, tuple[datetime, dict[str, Any]]]:
        """Every snapshot whose name starts with ``prefix``: name -> (written at, document)."""
        stmt = (
            select(SnapshotRow).where(SnapshotRow.name.startswith(prefix, autoescape=True)).order_by(SnapshotRow.name)
        )
        with self._session() as session:
            return {row.name: (row.at, dict(row.body)) for row in session.scalars(stmt)}

    # -- plumbing -----------------------------------------------------------------------

    def _alembic_config(self) -> Config:
        from alembic.config import Config

        config = Config()
        config.set_main_option("script_location", str(MIGRATIONS_DIR))
        config.set_main_option("path_separator", "os")
        return config

    def _placements(self, stmt: Any) -> list[PlacementRecord]:
        with self._session() as session:
            return [_placement_record(row) for row in session.scalars(stmt)]

    def _update(self, stmt: Any) -> bool:
        with self._session(write=True) as session:
            result = session.execute(stmt, execution_options={"synchronize_session": False})
            return cast(CursorResult[Any], result).rowcount > 0

    @contextmanager
    def _connect(self, write: bool = False) -> Iterator[Connection]:
        try:
            with self._engine.connect() as conn:
                if write:
                    conn.execution_options(**{_WRITE: True})
                yield conn
        except (sa_exc.DBAPIError, sa_exc.TimeoutError) as exc:
            raise self._error(exc) from exc

    @contextmanager
    def _session(self, write: bool = False) -> Iterator[Session]:
        """One transaction: committed when the block ends, rolled back on an error."""
        try:
            with Session(self._engine, expire_on_commit=False) as session, session.begin():
                if write:
                    session.connection(execution_options={_WRITE: True})
                yield session
        except (sa_exc.DBAPIError, sa_exc.TimeoutError) as exc:
            raise self._error(exc) from exc

    def _error(self, exc: sa_exc.SQLAlchemyError) -> StoreError:
        orig = getattr(exc, "orig", None)
        detail = " ".join(str(orig if orig is not None else exc).split())
        if self._url.password:
            detail = detail.replace(str(self._url.password), "***")
        lowered = detail.lower()
        if "no such table" in lowered or ("relation" in lowered and "does not exist" in lowered):
            hint = "the store's tables are missing: run Store(url).migrate() once for this database"
        elif self._sqlite and "locked" in lowered:
            hint = (
                f"another process held the SQLite file longer than the busy timeout ({self.busy_timeout_s:g} s); "
                "raise the timeout or use PostgreSQL for many writers"
            )
        elif self._sqlite and "unable to open" in lowered:
            hint = "check that the file's directory exists and that this user may write to it"
        elif isinstance(exc, sa_exc.IntegrityError):
            hint = "a record broke a constraint of the store: check the values the caller passed"
        elif isinstance(exc, (sa_exc.OperationalError, sa_exc.TimeoutError)):
            hint = (
                "check that the database server is running and reachable from this host, that the database "
                "exists, and the user name and password in the store URL"
            )
        else:
            hint = "check that the schema is current (Store(url).migrate())"
        return StoreError(f"CARMA store at {self._masked} failed: {detail} ({hint})")

    # -- hosts and agents (multi-host) ----------------------------------------------------

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
            "started_at": _utc(rec.started_at),
            "heartbeat_at": _utc(rec.heartbeat_at),
            "gpus": [dict(g) for g in rec.gpus],
        }
        dialect_insert = sqlite_insert if self._sqlite else pg_insert
        stmt = dialect_insert(HostRow).values(values)
        stmt = stmt.on_conflict_do_update(
            index_elements=[HostRow.host], set_={name: stmt.excluded[name] for name in values if name != "host"}
        )
        with self._session(write=True) as session:
            session.execute(stmt, execution_options={"synchronize_session": False})

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
        when = None if at is None else _utc(at)
        return self._update(update(HostRow).where(HostRow.host == name).values(worker_at=when, worker_pid=pid))

    def forget_host(self, name: str) -> bool:
        """Remove a GPU host (decommissioned); False if there was none."""
        return self._update(delete(HostRow).where(HostRow.host == name))

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
            "dispatched_at": _utc(rec.dispatched_at),
            "state": rec.state,
            "ended_at": None if rec.ended_at is None else _utc(rec.ended_at),
            "reason": rec.reason,
        }
        dialect_insert = sqlite_insert if self._sqlite else pg_insert
        stmt = dialect_insert(DispatchRow).values(values)
        stmt = stmt.on_conflict_do_update(
            index_elements=[DispatchRow.key], set_={name: stmt.excluded[name] for name in values if name != "key"}
        )
        with self._session(write=True) as session:
            session.execute(stmt, execution_options={"synchronize_session": False})

    def dispatch(self, key: str) -> DispatchRecord | None:
        """The dispatch of the try with this placement key, or None."""
        with self._session() as session:
            row = session.scalar(select(DispatchRow).where(DispatchRow.key == key))
            return None if row is None else _dispatch_record(row)

    def dispatches(self, host: str | None = None, state: str | None = None, limit: int = 1000) -> list[DispatchRecord]:
        """The newest ``limit`` dispatches (to one host, in one state), newest first."""
        _check_limit(limit)
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
            .values(state=state, ended_at=_utc(at), reason=reason)
        )
        return self._update(stmt)


def _configure_sqlite(engine: Engine, busy_timeout_s: float) -> None:
    """WAL, a busy timeout, and transactions SQLAlchemy begins itself (IMMEDIATE for writes)."""

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.isolation_level = None  # we emit BEGIN ourselves (see _on_begin)
        cursor = dbapi_connection.cursor()
        try:
            cursor.execute(f"PRAGMA busy_timeout = {int(busy_timeout_s * 1000)}")
            cursor.execute("PRAGMA journal_mode = WAL")
            cursor.execute("PRAGMA synchronous = NORMAL")
        finally:
            cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Connection) -> None:
        # A deferred transaction that reads and then writes cannot wait for the lock in WAL
        # mode (SQLITE_BUSY at once); taking it up front lets the busy timeout apply.
        conn.exec_driver_sql("BEGIN IMMEDIATE" if conn.get_execution_options().get(_WRITE) else "BEGIN")


def _forget_connections_across_fork(engine: Engine) -> None:
    """A forked child drops (without closing) the pooled connections it inherited.

    Closing or pinging them would talk on the parent's sockets; ``dispose(close=False)`` is
    SQLAlchemy's recipe for pools and ``fork()``.  The engine is held weakly.
    """
    ref = weakref.ref(engine)

    def _after_fork_in_child() -> None:
        inherited = ref()
        if inherited is not None:
            inherited.dispose(close=False)

    os.register_at_fork(after_in_child=_after_fork_in_child)
