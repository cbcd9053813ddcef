"""Values shared by the store tests (a unique module name: tests/ is not a package)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from carma_airflow.store import PlacementRecord, TryOutcome

T0 = datetime(2026, 3, 1, 12, 0, 0, tzinfo=timezone.utc)


def at(seconds: float) -> datetime:
    """A fixed UTC time ``seconds`` after T0 (tests never read the clock)."""
    return T0 + timedelta(seconds=seconds)


def placement(key: str = "k1", **fields: object) -> PlacementRecord:
    """A placement record with every field set; override any with keyword arguments."""
    values: dict[str, object] = {
        "key": key,
        "dag_id": "train",
        "task_id": "fit",
        "run_id": "manual__2026-03-01",
        "map_index": -1,
        "try_number": 1,
        "label": "train.fit",
        "decided_at": at(0),
        "outcome": TryOutcome.RUNNING,
        "gpu_uuids": ("GPU-aaaa", "GPU-bbbb"),
        "host": "gpu-01",
        "estimate_mib": 12288,
        "estimate_source": "history (3 run(s), max 11000 MiB)",
        "peak_mib": None,
        "summary": "placed on GPU 0, GPU 1",
        "reasons": ("chose GPU 0 (A100-40GB): 30000 MiB free", "skipped GPU 2 (A100-40GB): memory: 2000 MiB free"),
        "policy": "most-free-memory",
        "started_at": None,
        "ended_at": None,
    }
    values.update(fields)
    return PlacementRecord(**values)  # type: ignore[arg-type]
