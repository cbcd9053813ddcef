"""A try as the store keeps it: its placement record (built here, written by the writer)."""

from __future__ import annotations

from carma_airflow.executor.bookkeeping import UpsertPlacement, utc
from carma_airflow.executor.tries.book import Try
from carma_airflow.store.records import PlacementRecord, TryOutcome, fence_of


def placement_record(
    attempt: Try,
    *,
    outcome: TryOutcome,
    summary: str,
    policy: str,
    host: str,
    started_at: float | None = None,
    reasons: list[str] | None = None,
) -> UpsertPlacement:
    """The try as the store keeps it: where it stands, why, on which GPUs and in which process."""
    assert attempt.request is not None
    ti, request, handle = attempt.ti, attempt.request, attempt.handle
    if outcome is TryOutcome.RUNNING and request.activity is not None:  # what the placer assumed of it
        a = request.activity
        known = f"{a.sm_activity:.2f} ({a.source}, confidence {a.confidence:.2f})" if a.known else "unknown (prior)"
        reasons = [*(reasons or ()), f"activity: {known}"]
    return UpsertPlacement(
        PlacementRecord(
            key=request.key,
            dag_id=ti.dag_id,
            task_id=ti.task_id,
            run_id=ti.run_id,
            map_index=ti.map_index,
            try_number=ti.try_number,
            label=request.label,
            decided_at=utc(request.submitted_at),  # when the executor took the try
            started_at=utc(started_at) if started_at else None,
            outcome=outcome,
            gpu_uuids=tuple(attempt.gpu_uuids) if outcome is not TryOutcome.WAITING else (),
            host=host,
            estimate_mib=request.memory.mib,
            estimate_source=request.memory.source,
            summary=summary,
            reasons=tuple(reasons or ()),
            policy=policy,
            pid=handle.pid if handle is not None and outcome is TryOutcome.RUNNING else None,
            pid_start=handle.pid_start if handle is not None and outcome is TryOutcome.RUNNING else None,
            ti_id=str(ti.id) if getattr(ti, "id", None) else None,
            fence=fence_of(request.kept_margin_mib),  # what a restarted executor keeps it (restart.py)
            # its retry plan as handed to it (starter.py): what its end is told by, here or after a restart
            end_plan=attempt.plan.as_json() if attempt.plan is not None else None,
        )
    )


__all__ = ["placement_record"]
