"""What goes into the store and comes out of it: small frozen dataclasses, no ORM objects.

Standard library and :mod:`carma_airflow.core` only, so code that merely builds or reads records
(the monitor, the CLI, tests) does not load SQLAlchemy.  Datetimes come back timezone-aware in
UTC; naive datetimes given to the store are taken as UTC.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from carma_airflow.core.decision import Decision, Outcome


def fence_of(kept_margin_mib: int | None) -> dict[str, Any]:
    """A try's fence as the store keeps it with its placement and its published reservation:
    what the placer keeps above its reservation for its life (None: unfenced)."""
    return {"kept_margin_mib": kept_margin_mib}


def kept_margin_of(fence: Mapping[str, Any] | None, default: int | None) -> int | None:
    """The kept margin a stored fence says (:func:`fence_of`); ``default`` where none was kept
    (written before revision 0008): the reader's own host's configured fence."""
    if fence is None or "kept_margin_mib" not in fence:
        return default
    value = fence["kept_margin_mib"]
    return None if value is None else int(value)


class TryOutcome(str, enum.Enum):
    """Where one task try stands.  ``WAITING`` and ``RUNNING`` hold (or wait for) GPUs.

    A ``str`` enum: ``TryOutcome.OOM == "oom"`` holds, and it prints and serialises to JSON as
    its value.
    """

    WAITING = "waiting"  # no GPU yet: the placer said not-now
    RUNNING = "running"  # placed on GPUs (launched or about to be)
    SUCCESS = "success"
    FAILED = "failed"
    OOM = "oom"  # failed with a CUDA out-of-memory signature

    def __str__(self) -> str:
        return str(self.value)

    @property
    def finished(self) -> bool:
        return self in (TryOutcome.SUCCESS, TryOutcome.FAILED, TryOutcome.OOM)


ACTIVE_OUTCOMES = (TryOutcome.WAITING, TryOutcome.RUNNING)
FINISHED_OUTCOMES = (TryOutcome.SUCCESS, TryOutcome.FAILED, TryOutcome.OOM)


def try_outcome(decision_outcome: Outcome) -> TryOutcome:
    """The try's state right after a placement decision: placed runs, not-now waits, else failed."""
    if decision_outcome is Outcome.PLACED:
        return TryOutcome.RUNNING
    if decision_outcome is Outcome.NOT_NOW:
        return TryOutcome.WAITING
    return TryOutcome.FAILED


@dataclass(frozen=True, slots=True)
class SampleRecord:
    """One GPU reading.  Readings the monitor could not take are None; ``error`` says why."""

    host: str
    gpu_uuid: str
    gpu_index: int
    name: str
    at: datetime
    memory_total_mib: int | None = None
    memory_used_mib: int | None = None
    smact: float | None = None
    smocc: float | None = None
    drama: float | None = None
    power_w: float | None = None
    energy_j: float | None = None
    error: str | None = None


@dataclass(frozen=True, slots=True)
class PlacementRecord:
    """One task try as the executor placed it, and how it ended.

    ``key`` identifies the try (the placer's request key) and is unique in the store.
    ``reasons`` are the decision's lines (chosen and skipped GPUs with why), for "why GPU 2?".
    ``id`` is assigned by the store and ignored by :meth:`Store.upsert_placement`.
    """

    key: str
    dag_id: str
    task_id: str
    run_id: str
    try_number: int
    decided_at: datetime
    map_index: int = -1
    label: str = ""
    outcome: TryOutcome = TryOutcome.WAITING
    gpu_uuids: tuple[str, ...] = ()
    host: str | None = None
    estimate_mib: int | None = None
    estimate_source: str | None = None
    peak_mib: int | None = None
    summary: str = ""
    reasons: tuple[str, ...] = ()
    policy: str = ""
    started_at: datetime | None = None
    ended_at: datetime | None = None
    pid: int | None = None  # the try's process, once launched
    pid_start: int | None = None  # that process's start time (clock ticks since boot): guards PID reuse
    ti_id: str | None = None  # Airflow's task-instance UUID
    id: int | None = None
    owner: str | None = None  # the executor that placed (or adopted) it; None: written before 0006
    fence: dict[str, Any] | None = None  # the try's fence as placed (:func:`fence_of`); None: before 0008
    # the try's retry for each way it can end, as its executor launched it (core/recovery.EndPlan.as_json);
    # None: not launched yet, or before 0011
    end_plan: dict[str, Any] | None = None

    @classmethod
    def from_decision(
        cls,
        decision: Decision,
        *,
        dag_id: str,
        task_id: str,
        run_id: str,
        try_number: int,
        decided_at: datetime,
        map_index: int = -1,
        label: str = "",
        host: str | None = None,
        estimate_mib: int | None = None,
        estimate_source: str | None = None,
    ) -> PlacementRecord:
        """The record of a fresh decision: key, GPUs, summary, reasons and policy taken from it."""
        reasons = tuple(f"chose {v}" for v in decision.chosen) + tuple(f"skipped {v}" for v in decision.rejected)
        return cls(
            key=decision.request_key,
            dag_id=dag_id,
            task_id=task_id,
            run_id=run_id,
            map_index=map_index,
            try_number=try_number,
            label=label,
            decided_at=decided_at,
            outcome=try_outcome(decision.outcome),
            gpu_uuids=decision.gpu_uuids,
            host=host,
            estimate_mib=estimate_mib,
            estimate_source=estimate_source,
            summary=decision.summary,
            reasons=reasons,
            policy=decision.policy,
        )


@dataclass(frozen=True, slots=True)
class OomRecord:
    """A CUDA out-of-memory failure of one try on one GPU (``gpu_uuid`` None when not known)."""

    placement_key: str
    dag_id: str
    task_id: str
    try_number: int
    at: datetime
    gpu_uuid: str | None = None
    peak_mib: int | None = None
    message: str = ""
    id: int | None = None


# -- hosts and agents (multi-host) --------------------------------------------------------


@dataclass(frozen=True, slots=True)
class HostRecord:
    """One GPU host as its agent last published it: a heartbeat and the newest reading of every GPU.

    ``gpus`` holds one plain dict per GPU (the fields of a monitor ``GpuSample``; JSON-safe), so
    the executor can rebuild the host's samples without a query per GPU.  ``queue`` is the Celery
    queue the host's worker consumes.
    """

    host: str
    queue: str
    heartbeat_at: datetime
    started_at: datetime
    backend: str = ""
    agent_version: str = ""
    pid: int | None = None
    gpus: tuple[dict[str, object], ...] = ()
    worker_at: datetime | None = None  # written by the host's Celery worker (Store.worker_beat), not the agent
    worker_pid: int | None = None


DISPATCH_STATES = ("sent", "ended", "lost")


@dataclass(frozen=True, slots=True)
class ActivityRecord:
    """One learned solo SM activity of an ended try, and whom the try shared its GPUs with.

    ``co_tasks``: the task types of its co-tenants (``()``: alone throughout); None where not
    recorded (rows written before revision 0007, a declared hint).
    """

    dag_id: str
    task_id: str
    sm_activity: float
    source: str
    at: datetime
    run_id: str | None = None
    map_index: int | None = None
    co_tasks: tuple[str, ...] | None = None


@dataclass(frozen=True, slots=True)
class DispatchRecord:
    """One try sent to a host's Celery queue, and how that dispatch ended.

    ``key`` is the placement key of the try.  ``state``: ``sent`` (in the queue or running),
    ``ended`` (the worker returned), ``lost`` (the host stopped answering; ``reason`` says why).
    """

    key: str
    host: str
    queue: str
    celery_id: str
    dispatched_at: datetime
    state: str = "sent"
    ended_at: datetime | None = None
    reason: str | None = None
