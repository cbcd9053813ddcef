"""How an ended try is told: its typed outcome, the words the store and the log keep, and the
store writes that follow (the OOM event, the learned peak).  Whether a CUDA OOM is retried is
not decided here: the try's retry plan says it (decided at its launch, executor/starting/starter.py,
core/recovery.plan_try_end), the one the try itself applied.  No I/O: the executor makes the writes
(the one exception, :func:`close_checkpoint`, removes a succeeded task's checkpoint folder)."""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from carma_airflow.checkpoint import CheckpointFolders
from carma_airflow.core.fencing import PAST_CAP
from carma_airflow.core.recovery import (
    EndPlan,
    Failure,
    FailureKind,
    RecoverySettings,
    RetryPlan,
    oom_advice,
    oom_reached,
    plan_recovery,
    plan_try_end,
)
from carma_airflow.core.shorten import whole_clauses
from carma_airflow.executor.bookkeeping import AddPeak, MarkEnded, RecordOom, StoreWrite, utc
from carma_airflow.executor.tries.book import Try
from carma_airflow.launching import Ended
from carma_airflow.store.records import OomRecord, TryOutcome
from carma_airflow.taskrun.outcome import ResultState, TryResult


@dataclass(frozen=True, slots=True)
class TryEnd:
    outcome: TryOutcome
    result: TryResult
    summary: str | None
    gave_up: bool = False  # an OOM with no OOM retry left


def result_of(ended: Ended) -> TryResult:
    """What the try's process reported; a process that died first is a failure, never an OOM.  After a
    CUDA OOM its peak is what it needed: what it held plus what it asked for where the message says
    (core/recovery.py ``oom_reached``; the listener writes it so, a result of older code may not)."""
    if ended.result is not None:
        result = ended.result
        if result.is_oom:
            reached = oom_reached(result.peak_mib, result.message)
            if reached != result.peak_mib:
                result = replace(result, peak_mib=reached)
        return result
    killed = ended.exitcode in (-9, 137)
    return TryResult(
        state=ResultState.FAILED,
        failure=FailureKind.KILLED if killed else FailureKind.OTHER,
        message=ended.lost
        or f"task process ended with exit code {ended.exitcode} ({'killed' if killed else 'no result'})",
    )


def plan_of(attempt: Try, recovery: RecoverySettings) -> EndPlan:
    """The try's retry plan as it was handed to it; for a try that has none (adopted from an
    executor that recorded none, or never launched by a starter) the same planner's, from the
    store's count of its earlier OOM tries: a CUDA OOM's verdict depends on nothing else."""
    if attempt.plan is not None:
        return attempt.plan
    number = getattr(attempt.ti, "try_number", None)
    return plan_try_end(number if isinstance(number, int) else 1, None, 0, recovery.max_oom_retries, attempt.prior_ooms)


def conclude(attempt: Try, ended: Ended, recovery: RecoverySettings) -> TryEnd:
    result = result_of(ended)
    if result.succeeded:
        return TryEnd(TryOutcome.SUCCESS, result, None)
    where = ",".join(attempt.gpu_uuids)
    if attempt.fault:
        return TryEnd(TryOutcome.FAILED, result, f"stopped: {attempt.fault}; the retry goes to a healthy GPU")
    if result.is_oom:
        reached = result.peak_mib or (attempt.request.memory.mib if attempt.request else None)
        assert result.failure is not None  # an OOM
        verdict = plan_of(attempt, recovery).verdict(Failure(result.failure, result.message or ""))
        if verdict.retry:
            if result.past_cap:  # its own cap, while the GPU had room: it was underestimated
                return TryEnd(TryOutcome.OOM, result, past_cap_summary(attempt, result, reached, where, recovery))
            return TryEnd(
                TryOutcome.OOM, result, f"CUDA OOM at {reached} MiB on {where}; retried on a GPU with more free memory"
            )
        advice = oom_advice(verdict.advice_tries or attempt.prior_ooms + 1, reached, recovery)
        if result.past_cap:  # the last OOM try was stopped by its own cap too
            why = f"{advice} (on {where}; {PAST_CAP}: {stopped_at_cap(result, 'the last try')})"
            return TryEnd(TryOutcome.OOM, result, why, True)
        return TryEnd(TryOutcome.OOM, result, f"{advice} (on {where})", True)
    kind = result.failure.value if result.failure else "other"
    return TryEnd(TryOutcome.FAILED, result, f"failed: {kind}: {whole_clauses(result.message or '', 300)}")


# the cap an OOM'd try was held to, as the message words it: PyTorch's capped allocator and the
# simulated GPUs' ledger both say "... 10.00 GiB allowed;" (core/recovery.py keys on the same words),
# and what the GPU itself had free then ("... of which 22.00 GiB is free")
_SIZE = r"([0-9]+(?:\.[0-9]+)?) (bytes|KiB|MiB|GiB)"
_ALLOWED = re.compile(rf"\b{_SIZE} allowed;")
_FREE = re.compile(rf"of which {_SIZE} is free")
_TRIED = re.compile(rf"Tried to allocate {_SIZE}")
_UNIT_MIB = {"bytes": 1 / (1024 * 1024), "KiB": 1 / 1024, "MiB": 1.0, "GiB": 1024.0}


def _size(match: re.Match[str] | None) -> tuple[str, float] | None:
    """A size as the message writes it, and in MiB."""
    if match is None:
        return None
    number, unit = match.group(1), match.group(2)
    return f"{number} {unit}", float(number) * _UNIT_MIB[unit]


def stopped_at_cap(result: TryResult, who: str = "it") -> str:
    """What stopped a try that went past its cap, in words: its own fence, with the cap where its
    OOM message says it (``10.00 GiB allowed``).  PyTorch says "allowed" in every OOM once a
    fraction is set, so where the message also says the GPU had less free than the try asked
    for, the GPU was full as well, and the words say so."""
    message = result.message or ""
    allowed, free, tried = _size(_ALLOWED.search(message)), _size(_FREE.search(message)), _size(_TRIED.search(message))
    if free is not None and tried is not None and free[1] < tried[1]:
        cap = f"{allowed[0]} allowed; " if allowed else ""
        return f"its cap stopped {who} and the GPU was full too ({cap}{free[0]} free for {tried[0]} asked)"
    return f"its own cap stopped {who}" + (f" ({allowed[0]} allowed)" if allowed else "")


def past_cap_summary(
    attempt: Try, result: TryResult, reached: int | None, where: str, recovery: RecoverySettings
) -> str:
    """The summary of a try stopped past its cap that has an OOM retry left: what stopped it, what
    it asked for, and what its retry gets: the reservation the recovery planner gives it
    (core/recovery.plan_recovery, the rule the executor plans the retry by), so a larger cap."""
    asked = f"the try needed at least {reached} MiB and " if reached else ""
    said = f"CUDA OOM {PAST_CAP} on {where}: {asked}{stopped_at_cap(result)}"
    request = attempt.request
    if request is None:
        return f"{said}; its retry gets a larger reservation and a larger cap"
    plan = plan_recovery(
        request,
        Failure(FailureKind.CAP_OOM, "its own cap"),
        oom_retries_done=attempt.prior_ooms,
        peak_mib=result.peak_mib,
        crashed_gpus=attempt.gpu_uuids,
        now=0.0,
        settings=recovery,
    )
    if not isinstance(plan, RetryPlan):  # not reached: an OOM with a retry left is always planned
        return f"{said}; its retry gets a larger reservation and a larger cap"
    grown = plan.request.memory.mib
    if plan.request.needs_idle_gpu:
        return f"{said}; its retry is placed with {grown} MiB on an idle GPU of its own, its cap that whole GPU"
    return f"{said}; its retry is placed with {grown} MiB (was {request.memory.mib} MiB) and its cap grows with it"


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
    from carma_airflow.executor.bookkeeping import metrics

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


__all__ = [
    "TryEnd",
    "close_checkpoint",
    "conclude",
    "count_end",
    "end_writes",
    "past_cap_summary",
    "plan_of",
    "result_of",
    "stopped_at_cap",
]
