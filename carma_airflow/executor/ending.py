"""How an ended try is told: its typed outcome, the words the store and the log keep, and the
store writes that follow (the OOM event, the learned peak).  No I/O: the executor makes them
(the one exception, :func:`close_checkpoint`, removes a succeeded task's checkpoint folder)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from carma_airflow.checkpoint import CheckpointFolders
from carma_airflow.core.recovery import FailureKind, RecoverySettings, oom_advice, oom_retry_left
from carma_airflow.executor.launch import Ended
from carma_airflow.executor.tries import Try
from carma_airflow.executor.writes import AddPeak, MarkEnded, RecordOom, StoreWrite
from carma_airflow.store.records import OomRecord, TryOutcome
from carma_airflow.taskrun.outcome import ResultState, TryResult


@dataclass(frozen=True, slots=True)
class TryEnd:
    outcome: TryOutcome
    result: TryResult
    summary: str | None
    gave_up: bool = False  # an OOM with no OOM retry left


def result_of(ended: Ended) -> TryResult:
    """What the try's process reported; a process that died first is a failure, never an OOM."""
    if ended.result is not None:
        return ended.result
    killed = ended.exitcode in (-9, 137)
    return TryResult(
        state=ResultState.FAILED,
        failure=FailureKind.KILLED if killed else FailureKind.OTHER,
        message=ended.lost
        or f"task process ended with exit code {ended.exitcode} ({'killed' if killed else 'no result'})",
    )


def conclude(attempt: Try, ended: Ended, recovery: RecoverySettings) -> TryEnd:
    result = result_of(ended)
    if result.succeeded:
        return TryEnd(TryOutcome.SUCCESS, result, None)
    where = ",".join(attempt.gpu_uuids)
    if attempt.fault:
        return TryEnd(TryOutcome.FAILED, result, f"stopped: {attempt.fault}; the retry goes to a healthy GPU")
    if result.is_oom:
        reached = result.peak_mib or (attempt.request.memory.mib if attempt.request else None)
        if oom_retry_left(attempt.prior_ooms, recovery.max_oom_retries):
            if result.past_cap:  # its own cap, while the GPU had room: it was underestimated
                why = f"CUDA OOM past its cap at {reached} MiB on {where}; retried with a larger cap"
                return TryEnd(TryOutcome.OOM, result, why)
            return TryEnd(
                TryOutcome.OOM, result, f"CUDA OOM at {reached} MiB on {where}; retried on a GPU with more free memory"
            )
        return TryEnd(
            TryOutcome.OOM, result, f"{oom_advice(attempt.prior_ooms + 1, reached, recovery)} (on {where})", True
        )
    kind = result.failure.value if result.failure else "other"
    return TryEnd(TryOutcome.FAILED, result, f"failed: {kind}: {(result.message or '')[:300]}")


def end_writes(attempt: Try, end: TryEnd, now: float) -> list[StoreWrite]:
    """The store writes of an ended try, in the order they are made."""
    ti = attempt.ti
    writes: list[StoreWrite] = [MarkEnded(attempt.rkey, now, end.outcome, end.result.peak_mib, end.summary)]
    if end.outcome is TryOutcome.OOM:
        writes.append(
            RecordOom(
                OomRecord(
                    placement_key=attempt.rkey,
                    dag_id=ti.dag_id,
                    task_id=ti.task_id,
                    try_number=ti.try_number,
                    gpu_uuid=",".join(attempt.gpu_uuids),
                    peak_mib=end.result.peak_mib,
                    message=(end.result.message or "")[:2000],
                    at=utc(now),
                )
            )
        )
    elif end.outcome is TryOutcome.SUCCESS and end.result.peak_mib:
        writes.append(AddPeak(ti.dag_id, ti.task_id, end.result.peak_mib, utc(now), ti.run_id, ti.map_index))
    return writes


def count_end(attempt: Try, end: TryEnd) -> None:
    """The metrics of an ended try (docs/metrics.md)."""
    from carma_airflow.executor import metrics

    ti = attempt.ti
    if end.outcome is TryOutcome.OOM:
        metrics.oom(ti.dag_id, ti.task_id)
        if end.gave_up:
            metrics.recovery("gave_up")
    elif end.outcome is TryOutcome.SUCCESS and attempt.prior_ooms:
        metrics.recovery("recovered")


def close_checkpoint(attempt: Try, end: TryEnd, folders: CheckpointFolders) -> bool:
    """The task instance's checkpoint folder after a try ended: removed once it succeeded (unless
    ``[carma] checkpoint_keep``), kept for the next try after an OOM, a fault, a kill or any
    failure (and for a clear of a task instance that failed for good).  True if removed."""
    if end.outcome is not TryOutcome.SUCCESS:
        return False
    return folders.finished(attempt.ti)


def utc(ts: float) -> Any:
    return datetime.fromtimestamp(ts, tz=timezone.utc)


__all__ = ["TryEnd", "close_checkpoint", "conclude", "count_end", "end_writes", "result_of", "utc"]
