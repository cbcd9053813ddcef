"""The executor's live view as one JSON document (version 1), for the UI page and `carma` tools.

Written into the store as ``executor:<executor id>`` every ``[carma] snapshot_period`` seconds
(carma_airflow/store/live_snapshots.py: one per executor, even two on one host); the api-server
(another process, maybe another host) reads it.  Plain data only: no secrets, no
database URLs.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from statistics import median
from typing import Any

from carma_airflow.config.settings import CarmaSettings
from carma_airflow.core.gpu import ClusterView
from carma_airflow.core.task import TaskRequest

VERSION = 1


def build_snapshot(
    *,
    now: float,
    settings: CarmaSettings,
    policy: str,
    queue: str,
    view: ClusterView | None,
    waiting: Sequence[tuple[TaskRequest, str]],
    running: int,
    pass_ms: Sequence[float] = (),
    pending_writes: int = 0,
    errors: Mapping[str, str] | None = None,
    executor_id: str | None = None,
) -> dict[str, Any]:
    """``errors``: GPU UUID -> what NVML (or the simulated fault) said about a failed GPU."""
    errors = errors or {}
    gpus = []
    for g in view.gpus if view is not None else ():
        w = g.window
        gpus.append(
            {
                "uuid": g.uuid,
                "index": g.index,
                "name": g.spec.name,
                "host": g.host,
                "memory_total_mib": g.total_mib,
                "memory_used_mib": g.used_mib,
                "memory_free_mib": g.free_mib,
                "smact": w.smact[-1] if w.smact else None,
                "health": g.health.value,
                "health_reason": _health_reason(g.health.value, settings.stale_seconds, errors.get(g.uuid)),
                "risk": "unknown" if not w.smact else ("high" if w.high_risk else "low"),
                "tenants": [
                    {
                        "label": t.label,
                        "key": t.key,
                        "reserved_mib": t.reserved_mib,
                        "since": t.placed_at,
                        # the tenant's expected solo SM activity, where it was learned or declared
                        "activity": round(t.activity.sm_activity, 3) if t.activity and t.activity.known else None,
                    }
                    for t in g.tenants
                ],
            }
        )
    return {
        "version": VERSION,
        "executor": executor_id,  # the id it beats under in carma_executor (None: not given)
        "host": settings.host,
        "at": now,
        "policy": policy,
        "backend": settings.gpu_backend,
        "queue": queue,
        "dispatch": settings.dispatch,
        "gpus": gpus,
        "waiting": [
            {
                "label": r.label,
                "key": r.key,
                "since": r.submitted_at,
                "memory_mib": r.memory.mib,
                "gpus": r.gpus,
                "try_number": r.try_number,
                "priority": r.priority,  # the queue's order (queue_place.py: `carma why`'s place)
                "tie_break": r.tie_break,
                "activity": round(r.activity.sm_activity, 3) if r.activity and r.activity.known else None,
                "reason": reason or "waiting for the next scheduling pass",
            }
            for r, reason in sorted(waiting, key=lambda item: item[0].submitted_at)
        ],
        "running": running,
        "passes": {
            "count": len(pass_ms),
            "last_ms": round(pass_ms[-1], 3) if pass_ms else None,
            "median_ms": round(median(pass_ms), 3) if pass_ms else None,
            "max_ms": round(max(pass_ms), 3) if pass_ms else None,
        },
        "pending_store_writes": pending_writes,
    }


def _health_reason(health: str, stale_s: float, error: str | None) -> str:
    if health == "quarantined" and error and error.startswith("MPS server"):
        return f"{error}: no placements until the MPS daemon restarts or the quarantine times out"
    if health == "quarantined":
        return f"failed ({error or 'NVML error'}): no placements until it reads healthy again"
    if health == "stale":
        return f"no fresh sample for over {stale_s:g} s: no collocation until the monitor catches up"
    return ""


__all__ = ["VERSION", "build_snapshot"]
