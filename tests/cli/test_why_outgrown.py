"""A declaration the task's runs outgrew (issue 22), as ``carma why`` and the GPU page show it:
the estimate's reason in full, and a flag on the task."""

from __future__ import annotations

import json
import os
from datetime import datetime, timezone
from pathlib import Path

import pytest
from why_helpers import carma  # in this process: the console script runs in test_ops

from carma_airflow.core.estimators import TaskMemoryInfo, make_estimator
from carma_airflow.store.records import PlacementRecord, TryOutcome
from carma_airflow.store.store import Store
from carma_airflow.ui.state import build_state

pytestmark = pytest.mark.db

AT = datetime(2026, 12, 2, 3, 0, 0, tzinfo=timezone.utc)


def _store(tmp_path: Path) -> Store:
    """Run 3 of a task that declared 8 GiB and peaked at 30000 MiB on runs 1 and 2."""
    need = make_estimator("history").estimate(TaskMemoryInfo(declared_mib=8192, history_mib=(30000, 30000)))
    assert need is not None
    store = Store(f"sqlite:///{tmp_path / 'carma.db'}")
    store.migrate()
    store.upsert_placement(
        PlacementRecord(
            key="nightly/grower/r3/-1#1",
            dag_id="nightly",
            task_id="grower",
            run_id="r3",
            try_number=1,
            decided_at=AT,
            outcome=TryOutcome.SUCCESS,
            gpu_uuids=("GPU-SIM-0000",),
            estimate_mib=need.mib,
            estimate_source=need.source,
            peak_mib=30000,
            summary="placed on GPU 0 (A100-40GB): 39.5 GiB free, SM activity 0.00, co-tenants: none",
        )
    )
    return store


def test_why_says_the_declaration_was_outgrown_and_what_was_reserved(tmp_path: Path) -> None:
    _store(tmp_path).close()
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")}
    env.update(AIRFLOW_HOME=str(tmp_path), AIRFLOW__CARMA__GPU_BACKEND="simulated")
    out = carma(env, "why", "nightly.grower")
    assert out.returncode == 0, out.stderr
    assert (
        "  memory estimate 33024 MiB: outgrew its declaration: declared 8192 MiB; its last 2 runs peaked at"
        " 30000, 30000 MiB: reserving 33024 MiB (30000 + 10 %); to keep the declaration instead, write"
        " memory_policy='declared';"
        " peak 30000 MiB"
    ) in out.stdout
    rows = json.loads(carma(env, "why", "nightly.grower", "--json", check=True).stdout)
    assert rows[0]["estimate_source"].startswith("outgrew its declaration: declared 8192 MiB")


def test_the_gpu_page_flags_the_task(tmp_path: Path) -> None:
    store = _store(tmp_path)
    try:
        state = build_state(store, now=AT)
    finally:
        store.close()
    placed = [p for p in state["timeline"]["placements"] if p["task_id"] == "grower"]
    assert placed and placed[0]["outgrew_declaration"] is True
