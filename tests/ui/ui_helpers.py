"""A store filled as a running CarmaExecutor would fill it: a live snapshot, placements, an OOM.

The snapshot follows the executor's published schema (version 1): it is the input boundary of the
page, written here the way the executor writes it (``Store.put_snapshot("executor:<host>", ...)``).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from fastapi.testclient import TestClient

from carma_airflow.store import OomRecord, PlacementRecord, TryOutcome
from carma_airflow.store.store import Store
from carma_airflow.ui.app import create_app, require_viewer

HOST = "gpu-host-1"
UUIDS = [f"GPU-5f3a9c1e-0000-4000-8000-00000000000{i}" for i in range(4)]
OOM_MESSAGE = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"
WAIT_REASON = "needs 30000 MiB on 1 GPU: GPU 0 has 6144 MiB free, GPU 1 has 9216 MiB free, GPU 2 is quarantined"


def snapshot_body(now: datetime, *, host: str = HOST) -> dict[str, Any]:
    t = now.timestamp()
    return {
        "version": 1,
        "host": host,
        "at": t,
        "policy": "interference-aware",
        "backend": "simulated",
        "queue": "backfill",
        "running": 3,
        "dispatch": "local",
        "passes": {"count": 40, "last_ms": 0.6, "median_ms": 0.8, "max_ms": 3.1},
        "pending_store_writes": 0,
        "gpus": [
            {
                "uuid": UUIDS[0],
                "index": 0,
                "name": "NVIDIA A100-SXM4-40GB",
                "host": host,
                "memory_total_mib": 40960,
                "memory_used_mib": 33000,
                "memory_free_mib": 7960,
                "smact": 0.82,
                "health": "healthy",
                "health_reason": "",
                "risk": "high",
                "tenants": [
                    {
                        "label": "carma_demo.bert_large",
                        "key": "carma_demo/bert_large/r1/-1/1",
                        "reserved_mib": 20000,
                        "since": t - 95,
                    },
                    {
                        "label": "carma_demo.resnet3",
                        "key": "carma_demo/resnet3/r1/-1/1",
                        "reserved_mib": 12000,
                        "since": t - 40,
                    },
                ],
            },
            {
                "uuid": UUIDS[1],
                "index": 1,
                "name": "NVIDIA A100-SXM4-40GB",
                "host": host,
                "memory_total_mib": 40960,
                "memory_used_mib": 31000,
                "memory_free_mib": 9960,
                "smact": 0.35,
                "health": "healthy",
                "health_reason": "",
                "risk": "low",
                "tenants": [
                    {
                        "label": "carma_demo.maskrcnn",
                        "key": "carma_demo/maskrcnn/r1/-1/2",
                        "reserved_mib": 30000,
                        "since": t - 20,
                    },
                ],
            },
            {
                "uuid": UUIDS[2],
                "index": 2,
                "name": "NVIDIA A100-SXM4-40GB",
                "host": host,
                "memory_total_mib": 40960,
                "memory_used_mib": 0,
                "memory_free_mib": 40960,
                "smact": None,
                "health": "quarantined",
                "health_reason": "NVML: GPU is lost (Xid 79)",
                "risk": "unknown",
                "tenants": [],
            },
        ],
        "waiting": [
            {
                "label": "carma_demo.vgg3",
                "key": "carma_demo/vgg3/r1/-1/1",
                "since": t - 65,
                "memory_mib": 30000,
                "gpus": 1,
                "try_number": 1,
                "reason": WAIT_REASON,
            },
        ],
    }


def placement(
    task: str,
    try_number: int,
    outcome: TryOutcome,
    gpus: list[int],
    decided: datetime,
    *,
    started_after: float = 1,
    ran: float | None = None,
    estimate: int = 8000,
    peak: int | None = None,
    run_id: str = "r1",
) -> PlacementRecord:
    started = decided + timedelta(seconds=started_after) if gpus else None
    ended = started + timedelta(seconds=ran) if started is not None and ran is not None else None
    return PlacementRecord(
        key=f"carma_demo/{task}/{run_id}/-1/{try_number}",
        dag_id="carma_demo",
        task_id=task,
        run_id=run_id,
        try_number=try_number,
        label=f"carma_demo.{task}",
        decided_at=decided,
        started_at=started,
        ended_at=ended,
        outcome=outcome,
        gpu_uuids=tuple(UUIDS[i] for i in gpus),
        host=HOST,
        estimate_mib=estimate,
        estimate_source="declared",
        peak_mib=peak,
        summary=f"placed on GPU {gpus[0]}: most free memory" if gpus else "waits: no GPU has 30000 MiB free",
        reasons=("chose GPU 0",),
        policy="interference-aware",
    )


def fill_store(store: Store, now: datetime, *, snapshot_age_s: float = 1.0) -> None:
    """The situation of the demo a minute and a half in."""
    t0 = now - timedelta(seconds=120)
    for rec in (
        placement("bert_large", 1, TryOutcome.RUNNING, [0], t0 + timedelta(seconds=25), estimate=20000),
        placement("resnet3", 1, TryOutcome.RUNNING, [0], t0 + timedelta(seconds=80), estimate=12000),
        placement("maskrcnn", 1, TryOutcome.OOM, [0], t0, ran=30, estimate=8000, peak=28606),
        placement("maskrcnn", 2, TryOutcome.RUNNING, [1], t0 + timedelta(seconds=40), estimate=30000),
        placement("ddp_gpt2", 1, TryOutcome.SUCCESS, [1, 3], t0 + timedelta(seconds=2), ran=20, peak=15000),
        placement("vgg3", 1, TryOutcome.WAITING, [], t0 + timedelta(seconds=55), estimate=30000),
    ):
        store.upsert_placement(rec)
    store.record_oom(
        OomRecord(
            placement_key="carma_demo/maskrcnn/r1/-1/1",
            dag_id="carma_demo",
            task_id="maskrcnn",
            try_number=1,
            at=t0 + timedelta(seconds=31),
            gpu_uuid=UUIDS[0],
            peak_mib=28606,
            message=OOM_MESSAGE,
        )
    )
    at = now - timedelta(seconds=snapshot_age_s)
    store.put_snapshot(f"executor:{HOST}", at, snapshot_body(at))


def client_for(open_store: Callable[[], Store]) -> TestClient:
    """The page's app with Airflow's access check passed (the check itself is tested on a real Airflow)."""
    app = create_app(open_store)
    app.dependency_overrides[require_viewer] = lambda: None
    return TestClient(app)
