"""The store's tables (SQLAlchemy 2 typed declarative), on metadata of their own.

Every table is prefixed ``carma_`` and the migrations keep their version in
``carma_alembic_version``, so the store can share a database with Airflow's own tables.
Schema changes go through a new migration in ``migrations/versions``; the test suite checks
that the migrations and these models agree.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any, ClassVar

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    CheckConstraint,
    DateTime,
    Dialect,
    Float,
    Index,
    Integer,
    MetaData,
    String,
    Text,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column
from sqlalchemy.types import TypeDecorator

TABLE_PREFIX = "carma_"
VERSION_TABLE = "carma_alembic_version"

NAMING_CONVENTION = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

# Airflow's ID_LEN: dag_id, task_id and run_id are at most 250 characters.
ID_LEN = 250
KEY_LEN = 1024
UUID_LEN = 128
HOST_LEN = 255

# Row ids: 64-bit on servers; SQLite needs plain INTEGER for an auto-incrementing rowid.
RowId = BigInteger().with_variant(Integer(), "sqlite")


class UtcDateTime(TypeDecorator[datetime]):
    """A point in time, stored in UTC and returned timezone-aware (naive input is taken as UTC).

    PostgreSQL stores ``timestamp with time zone``; SQLite stores naive UTC text.
    """

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        utc = value.replace(tzinfo=timezone.utc) if value.tzinfo is None else value.astimezone(timezone.utc)
        return utc.replace(tzinfo=None) if dialect.name == "sqlite" else utc

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=timezone.utc) if value.tzinfo is None else value.astimezone(timezone.utc)


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING_CONVENTION)
    type_annotation_map: ClassVar[dict[Any, Any]] = {datetime: UtcDateTime()}


class GpuSampleRow(Base):
    """One downsampled GPU reading (at most one per GPU per sampling interval).

    Kept for ``[carma] telemetry_retention`` (7 days by default): each executor's writer thread
    deletes older rows every 10 minutes, in batches (executor/bookkeeping/writer.py)."""

    __tablename__ = "carma_gpu_sample"
    __table_args__ = (Index(None, "gpu_uuid", "at"), Index(None, "at"))

    id: Mapped[int] = mapped_column(RowId, primary_key=True, autoincrement=True)
    host: Mapped[str] = mapped_column(String(HOST_LEN))
    gpu_uuid: Mapped[str] = mapped_column(String(UUID_LEN))
    gpu_index: Mapped[int] = mapped_column(Integer)
    name: Mapped[str] = mapped_column(String(128))
    at: Mapped[datetime]
    memory_total_mib: Mapped[int | None] = mapped_column(Integer)
    memory_used_mib: Mapped[int | None] = mapped_column(Integer)
    smact: Mapped[float | None] = mapped_column(Float)
    smocc: Mapped[float | None] = mapped_column(Float)
    drama: Mapped[float | None] = mapped_column(Float)
    power_w: Mapped[float | None] = mapped_column(Float)
    energy_j: Mapped[float | None] = mapped_column(Float)
    error: Mapped[str | None] = mapped_column(Text)


OUTCOME_VALUES = ("waiting", "running", "success", "failed", "oom")


class PlacementRow(Base):
    """One task try: the placement decision, its GPUs, and how the try ended."""

    __tablename__ = "carma_placement"
    __table_args__ = (
        CheckConstraint(f"outcome IN ({', '.join(repr(v) for v in OUTCOME_VALUES)})", name="outcome"),
        Index(None, "dag_id", "task_id"),
        Index(None, "outcome"),
    )

    id: Mapped[int] = mapped_column(RowId, primary_key=True, autoincrement=True)
    key: Mapped[str] = mapped_column(String(KEY_LEN), unique=True)
    dag_id: Mapped[str] = mapped_column(String(ID_LEN))
    task_id: Mapped[str] = mapped_column(String(ID_LEN))
    run_id: Mapped[str] = mapped_column(String(ID_LEN))
    map_index: Mapped[int] = mapped_column(Integer)
    try_number: Mapped[int] = mapped_column(Integer)
    label: Mapped[str] = mapped_column(String(KEY_LEN))
    decided_at: Mapped[datetime]
    started_at: Mapped[datetime | None]
    ended_at: Mapped[datetime | None]
    outcome: Mapped[str] = mapped_column(String(16))
    gpu_uuids: Mapped[list[str]] = mapped_column(JSON)
    host: Mapped[str | None] = mapped_column(String(HOST_LEN))
    estimate_mib: Mapped[int | None] = mapped_column(Integer)
    estimate_source: Mapped[str | None] = mapped_column(String(255))
    peak_mib: Mapped[int | None] = mapped_column(Integer)
    summary: Mapped[str] = mapped_column(Text)
    reasons: Mapped[list[str]] = mapped_column(JSON)
    policy: Mapped[str] = mapped_column(String(64))
    pid: Mapped[int | None] = mapped_column(Integer)  # the try's process (restart reconciliation)
    pid_start: Mapped[int | None] = mapped_column(BigInteger)  # its start time, clock ticks since boot
    ti_id: Mapped[str | None] = mapped_column(String(64))  # Airflow's task-instance UUID
    owner: Mapped[str | None] = mapped_column(String(HOST_LEN))  # the executor that placed it (0006)
    fence: Mapped[dict[str, Any] | None] = mapped_column(JSON)  # {"kept_margin_mib": ...} (0008)
    end_plan: Mapped[dict[str, Any] | None] = mapped_column(JSON)  # its retry plan, as launched (0011)


class OomEventRow(Base):
    """A CUDA out-of-memory failure of one try (kept, as placements are: only GPU telemetry is pruned)."""

    __tablename__ = "carma_oom_event"
    __table_args__ = (Index(None, "placement_key"), Index(None, "dag_id", "task_id"))

    id: Mapped[int] = mapped_column(RowId, primary_key=True, autoincrement=True)
    placement_key: Mapped[str] = mapped_column(String(KEY_LEN))
    dag_id: Mapped[str] = mapped_column(String(ID_LEN))
    task_id: Mapped[str] = mapped_column(String(ID_LEN))
    try_number: Mapped[int] = mapped_column(Integer)
    gpu_uuid: Mapped[str | None] = mapped_column(String(KEY_LEN))  # one UUID, or several comma-separated
    peak_mib: Mapped[int | None] = mapped_column(Integer)
    message: Mapped[str] = mapped_column(Text)
    at: Mapped[datetime]


class MemoryHistoryRow(Base):
    """The memory peak of one successful run of a task (what the history estimator learns from)."""

    __tablename__ = "carma_memory_history"
    __table_args__ = (Index(None, "dag_id", "task_id", "at"), Index(None, "dag_id", "task_id", "map_index", "at"))

    id: Mapped[int] = mapped_column(RowId, primary_key=True, autoincrement=True)
    dag_id: Mapped[str] = mapped_column(String(ID_LEN))
    task_id: Mapped[str] = mapped_column(String(ID_LEN))
    peak_mib: Mapped[int] = mapped_column(Integer)
    at: Mapped[datetime]
    run_id: Mapped[str | None] = mapped_column(String(ID_LEN))
    map_index: Mapped[int | None] = mapped_column(Integer)  # -1: not mapped; None: not recorded (before 0004)


ACTIVITY_SOURCE_VALUES = ("process", "gpu-alone", "hint")


class ActivityHistoryRow(Base):
    """The solo SM activity (0..1) of one ended try of a task (what the activity estimate learns from).

    ``source``: ``process`` (per-process SM utilisation), ``gpu-alone`` (the GPU's SM activity
    while the try was its only tenant) or ``hint`` (the DAG author's declared value).
    ``co_tasks``: the task types the try shared its GPUs with (``[]``: alone throughout); NULL
    where not recorded (rows before 0007, a hint).  ``solo_s``: its run time where it ran alone
    throughout (its task's solo run time); NULL where it shared, or not recorded (before 0009).
    ``gpu_model``: the GPU model ``solo_s`` (or ``shared_s``) was measured on (NULL: none, or before 0010).
    ``shared_s``: the run time of a first try that shared its GPUs all along, an upper bound of its
    task's run alone (NULL: it ran alone, was a retry, or before 0012).  ``shared_alone_s``: that
    task's run alone as estimated from it, ``shared_s`` over the slowdown predicted when the try was
    placed (NULL: none predicted, or before 0013).
    """

    __tablename__ = "carma_activity_history"
    __table_args__ = (
        CheckConstraint(f"source IN ({', '.join(repr(v) for v in ACTIVITY_SOURCE_VALUES)})", name="source"),
        CheckConstraint("sm_activity >= 0 AND sm_activity <= 1", name="sm_activity"),
        Index(None, "dag_id", "task_id", "at"),
    )

    id: Mapped[int] = mapped_column(RowId, primary_key=True, autoincrement=True)
    dag_id: Mapped[str] = mapped_column(String(ID_LEN))
    task_id: Mapped[str] = mapped_column(String(ID_LEN))
    map_index: Mapped[int | None] = mapped_column(Integer)
    sm_activity: Mapped[float] = mapped_column(Float)
    source: Mapped[str] = mapped_column(String(16))
    at: Mapped[datetime]
    run_id: Mapped[str | None] = mapped_column(String(ID_LEN))
    co_tasks: Mapped[list[str] | None] = mapped_column(JSON)  # 0007
    solo_s: Mapped[float | None] = mapped_column(Float)  # 0009
    gpu_model: Mapped[str | None] = mapped_column(String(64))  # 0010: the model ``solo_s`` was measured on
    shared_s: Mapped[float | None] = mapped_column(Float)  # 0012: a first try's run time, shared all along
    shared_alone_s: Mapped[float | None] = mapped_column(Float)  # 0013: its run alone estimated from it


class SnapshotRow(Base):
    """One named JSON document, rewritten in place (an executor's live view, read by the UI)."""

    __tablename__ = "carma_snapshot"

    name: Mapped[str] = mapped_column(String(HOST_LEN), primary_key=True)
    at: Mapped[datetime]
    body: Mapped[dict[str, Any]] = mapped_column(JSON)


# -- hosts and agents (multi-host) --------------------------------------------------------


class HostRow(Base):
    """One GPU host: its agent's heartbeat and the newest reading of each of its GPUs (JSON)."""

    __tablename__ = "carma_host"

    host: Mapped[str] = mapped_column(String(HOST_LEN), primary_key=True)
    queue: Mapped[str] = mapped_column(String(HOST_LEN))
    backend: Mapped[str] = mapped_column(String(32))
    agent_version: Mapped[str] = mapped_column(String(64))
    pid: Mapped[int | None] = mapped_column(Integer)
    started_at: Mapped[datetime]
    heartbeat_at: Mapped[datetime]
    gpus: Mapped[list[dict[str, Any]]] = mapped_column(JSON)
    worker_at: Mapped[datetime | None]  # the host's Celery worker said it is alive (None: stopped)
    worker_pid: Mapped[int | None] = mapped_column(Integer)


DISPATCH_STATE_VALUES = ("sent", "ended", "lost")


class DispatchRow(Base):
    """One try sent to a GPU host's Celery queue (the worker checks it is still wanted)."""

    __tablename__ = "carma_dispatch"
    __table_args__ = (
        CheckConstraint(f"state IN ({', '.join(repr(v) for v in DISPATCH_STATE_VALUES)})", name="state"),
        Index(None, "host", "state"),
    )

    id: Mapped[int] = mapped_column(RowId, primary_key=True, autoincrement=True)
    key: Mapped[str] = mapped_column(String(KEY_LEN), unique=True)
    host: Mapped[str] = mapped_column(String(HOST_LEN))
    queue: Mapped[str] = mapped_column(String(HOST_LEN))
    celery_id: Mapped[str] = mapped_column(String(64))
    dispatched_at: Mapped[datetime]
    state: Mapped[str] = mapped_column(String(16))
    ended_at: Mapped[datetime | None]
    reason: Mapped[str | None] = mapped_column(Text)


# -- several schedulers (0006) ------------------------------------------------------------


class ExecutorRow(Base):
    """One CarmaExecutor (one per scheduler): its heartbeat, and whether it places in shared mode.

    ``shared``: its reservations are all in ``carma_reservation`` and it places only under the
    store's lock; a peer waits for that before placing next to it.
    """

    __tablename__ = "carma_executor"

    id: Mapped[str] = mapped_column(String(HOST_LEN), primary_key=True)
    host: Mapped[str] = mapped_column(String(HOST_LEN))
    pid: Mapped[int] = mapped_column(Integer)
    started_at: Mapped[datetime]
    heartbeat_at: Mapped[datetime]
    stopped_at: Mapped[datetime | None]
    shared: Mapped[bool] = mapped_column(Boolean)


class ReservationRow(Base):
    """GPU memory one try holds, published by the executor that placed (or adopted) it."""

    __tablename__ = "carma_reservation"
    __table_args__ = (Index(None, "owner"),)

    key: Mapped[str] = mapped_column(String(KEY_LEN), primary_key=True)
    owner: Mapped[str] = mapped_column(String(HOST_LEN))
    label: Mapped[str] = mapped_column(String(KEY_LEN))
    gpu_uuids: Mapped[list[str]] = mapped_column(JSON)
    mib: Mapped[int] = mapped_column(Integer)
    since: Mapped[float] = mapped_column(Float)  # seconds since the epoch (the ledger's clock)
    exclusive: Mapped[bool] = mapped_column(Boolean)
    activity: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    fence: Mapped[dict[str, Any] | None] = mapped_column(JSON)  # {"kept_margin_mib": ...} (0008)


metadata = Base.metadata


def include_name(name: str | None, type_: str, parent_names: Any) -> bool:
    """Alembic filter: look only at the store's own tables (a shared database holds Airflow's)."""
    if type_ == "table":
        return name is not None and name.startswith(TABLE_PREFIX) and name != VERSION_TABLE
    return True
