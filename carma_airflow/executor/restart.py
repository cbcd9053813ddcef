"""After a restart: the tries an earlier executor on this host left in the store.

A try whose process still runs keeps its GPUs reserved (an ORPHAN until the scheduler hands it
over through ``try_adopt_task_instances``, or until it ends); one whose process is gone is
ended from its result file; one that never started is closed (the scheduler queues its task
again).  Pure bookkeeping: the executor reads the store once at start and passes the records.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from carma_airflow.core.task import MemoryNeed, TaskRequest
from carma_airflow.executor.launch import PidHandle, TaskHandle
from carma_airflow.executor.tries import Try, TryState
from carma_airflow.executor.writes import MarkEnded
from carma_airflow.store.records import PlacementRecord, TryOutcome


@dataclass(frozen=True, slots=True)
class StoredTi:
    """The identity of a try known only from the store (an orphan not handed over yet)."""

    dag_id: str
    task_id: str
    run_id: str
    map_index: int
    try_number: int
    id: None = None


def request_of(rec: PlacementRecord) -> TaskRequest:
    return TaskRequest(
        key=rec.key,
        label=rec.label or f"{rec.dag_id}.{rec.task_id}",
        memory=MemoryNeed(rec.estimate_mib or 0, rec.estimate_source or "store"),
        gpus=max(1, len(rec.gpu_uuids)),
        submitted_at=rec.decided_at.timestamp(),
        try_number=rec.try_number,
    )


def reattach(rec: PlacementRecord, host: str, result_file: Path, launcher: Any) -> TaskHandle | None:
    """A handle on a try an earlier executor started: its process here, or its dispatch elsewhere."""
    if rec.host in (host, None) and rec.pid is not None and rec.ti_id is not None:
        return PidHandle(rec.pid, rec.pid_start, result_file)
    again = getattr(launcher, "reattach", None)
    return again(rec) if again is not None else None


def orphan_of(rec: PlacementRecord, handle: TaskHandle, now: float) -> Try:
    return Try(
        key=None,
        rkey=rec.key,
        ti=StoredTi(rec.dag_id, rec.task_id, rec.run_id, rec.map_index, rec.try_number),
        state=TryState.ORPHAN,
        request=request_of(rec),
        gpu_uuids=tuple(rec.gpu_uuids),
        handle=handle,
        started_at=rec.started_at.timestamp() if rec.started_at else now,
    )


def closed_at_restart(rec: PlacementRecord, now: float) -> MarkEnded:
    """A try that was not running when the executor restarted: the scheduler queues it again."""
    return MarkEnded(rec.key, now, TryOutcome.FAILED, None, "not running when the executor restarted; requeued")


__all__ = ["StoredTi", "closed_at_restart", "orphan_of", "reattach", "request_of"]
