"""What a try asks of the placer: its TaskRequest, from its executor_config, what was learned
of the task, and (after CUDA OOM tries of the same run) the recovery planner.  No I/O, but for
the tries of a task instance another scheduler ran (``Learned.tries_for``); the record of a try
refused before it was planned."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from carma_airflow.config.task_config import GpuTaskConfig
from carma_airflow.core.estimators import MemoryEstimator, TaskMemoryInfo
from carma_airflow.core.recovery import Failure, FailureKind, GiveUp, RetryPlan
from carma_airflow.core.task import TaskRequest
from carma_airflow.core.vouch import vouched_need
from carma_airflow.executor.bookkeeping import UpsertPlacement, utc
from carma_airflow.keys import request_key
from carma_airflow.store.records import PlacementRecord, TryOutcome

if TYPE_CHECKING:
    from carma_airflow.executor.learning import Family, Learned


def family_of(ti: Any) -> Family:
    """The tries of one task instance in one run share this."""
    return (ti.dag_id, ti.task_id, ti.run_id, ti.map_index)


def label_of(ti: Any) -> str:
    return f"{ti.dag_id}.{ti.task_id}" + (f"[{ti.map_index}]" if ti.map_index >= 0 else "")


def first_request(
    ti: Any,
    config: GpuTaskConfig,
    estimator: MemoryEstimator,
    learned: Learned,
    now: float,
    kept_margin_mib: int | None = None,
    vouched: bool = True,
) -> TaskRequest:
    """The request of a try before recovery: declared memory, else learned, else the floor;
    ``kept_margin_mib``: what the placer keeps above its reservation for its life (its fence's);
    ``vouched``: whether the interference fit is learned for every GPU model here, without which
    learned peaks below the estimate made without them wait (core/vouch.py)."""
    history: tuple[int, ...] = ()
    history_of = None
    if ti.map_index >= 0:  # a mapped instance learns from its own runs first
        history = learned.peaks(ti.dag_id, ti.task_id, ti.map_index)
        history_of = f"map index {ti.map_index}" if history else None
    if not history:
        history = learned.peaks(ti.dag_id, ti.task_id)
    info = TaskMemoryInfo(
        declared_mib=config.memory_for(ti.map_index),
        history_mib=history,
        history_of=history_of,
        keep_declared=config.keeps_declared,
    )
    need = estimator.estimate(info)
    assert need is not None  # the estimator chain ends with the floor
    if history and not vouched:
        need = vouched_need(need, estimator.estimate(replace(info, history_mib=(), history_of=None)), vouched)
    return TaskRequest(
        key=request_key(ti.key),
        label=label_of(ti),
        memory=need,
        gpus=config.gpus,
        exclusive=config.exclusive,
        gpu_model=config.gpu_model,
        priority=priority_of(ti, config),
        tie_break=config.priority,
        submitted_at=now,
        try_number=ti.try_number,
        activity=learned.activity(ti.dag_id, ti.task_id, config.activity),
        kept_margin_mib=kept_margin_mib,
    )


def priority_of(ti: Any, config: GpuTaskConfig) -> int:
    """Airflow's ``priority_weight`` (what the scheduler queued by, its weight rule applied),
    unless the task's ``executor_config`` replaces it explicitly."""
    if config.priority_weight is not None:
        return config.priority_weight
    weight = getattr(ti, "priority_weight", None)
    return int(weight) if weight is not None else 0


def recovered(
    ti: Any, request: TaskRequest, learned: Learned, plan_retry: Callable[..., RetryPlan | GiveUp], now: float
) -> tuple[TaskRequest, int, bool]:
    """After CUDA OOM tries of the same run: the planner's request (``plan_retry``: the cycle's,
    core/cycle.py); with how many tries crashed with an OOM before this one, and whether this try
    was planned by the recovery planner."""
    if ti.try_number <= 1:
        return request, 0, False
    # from the store if another scheduler ran them; a try that never ran (it waited when its
    # scheduler stopped, Airflow reset it) is no OOM and does not hide the OOM before it
    earlier = [t for t in learned.tries_for(family_of(ti), ti.try_number) if t.ran]
    ooms = [t for t in earlier if t.outcome == "oom"]
    last = max(earlier, key=lambda t: t.try_number, default=None)
    if last is None or last.outcome != "oom":
        return request, len(ooms), False
    previous = replace(request, try_number=last.try_number)
    if last.estimate_mib:
        previous = replace(previous, memory=replace(request.memory, mib=max(request.memory.mib, last.estimate_mib)))
    plan = plan_retry(
        previous,
        Failure(FailureKind.CUDA_OOM, "recorded by CarmaExecutor"),
        oom_retries_done=len(ooms) - 1,
        peak_mib=last.peak_mib,
        crashed_gpus=last.gpu_uuids,
        now=now,
    )
    if isinstance(plan, RetryPlan):
        return replace(plan.request, key=request.key, try_number=ti.try_number), len(ooms), True
    return request, len(ooms), False


def refused_write(ti: Any, message: str, host: str, now: float) -> UpsertPlacement:
    """The record of a try refused before it was planned (its ``executor_config`` is invalid): a
    failed try with the reason and no GPU, so that ``carma why`` and the GPU page find it."""
    at = utc(now)
    return UpsertPlacement(
        PlacementRecord(
            key=request_key(ti.key),
            dag_id=ti.dag_id,
            task_id=ti.task_id,
            run_id=ti.run_id,
            try_number=ti.try_number,
            map_index=ti.map_index,
            label=label_of(ti),
            decided_at=at,
            ended_at=at,
            outcome=TryOutcome.FAILED,
            host=host,
            summary=f"refused, never placed: {message}",
            ti_id=str(ti.id) if getattr(ti, "id", None) else None,
        )
    )


__all__ = ["family_of", "first_request", "label_of", "recovered", "refused_write"]
