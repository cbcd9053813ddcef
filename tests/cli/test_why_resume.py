"""`carma why` says where a retry resumed (its placement's checkpoint reason, docs/checkpoints.md)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

from carma_airflow.core.checkpoints import RESUME_REASON, Progress, resumed_from
from carma_airflow.store.records import PlacementRecord, TryOutcome
from carma_airflow.store.store import Store

CARMA = str(Path(sys.executable).with_name("carma"))
SAVED = datetime(2026, 12, 2, 2, 53, 10, tzinfo=timezone.utc)


def _try(number: int, outcome: TryOutcome, reasons: tuple[str, ...]) -> PlacementRecord:
    return PlacementRecord(
        key=f"nightly/train/r1/-1#{number}",
        dag_id="nightly",
        task_id="train",
        run_id="r1",
        try_number=number,
        decided_at=SAVED,
        outcome=outcome,
        gpu_uuids=("GPU-SIM-0000",),
        estimate_mib=8192,
        estimate_source="declared",
        summary="placed on GPU 0 (A100-40GB): 39.5 GiB free, SM activity 0.00, co-tenants: none",
        reasons=reasons,
    )


def test_why_shows_the_step_a_retry_resumed_from(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")}
    env.update(AIRFLOW_HOME=str(tmp_path), AIRFLOW__CARMA__GPU_BACKEND="simulated")
    store = Store(f"sqlite:///{tmp_path / 'carma.db'}")
    store.migrate()
    saved = Progress(step=180, saved_at=SAVED.timestamp(), try_number=1)
    store.upsert_placement(_try(1, TryOutcome.OOM, ("GPU 0 (A100-40GB): 39.5 GiB free",)))
    store.upsert_placement(_try(2, TryOutcome.SUCCESS, ("GPU 0 (A100-40GB)", RESUME_REASON + resumed_from(saved))))
    store.close()

    out = subprocess.run([CARMA, "why", "nightly.train"], env=env, capture_output=True, text=True, check=False)
    assert out.returncode == 0, out.stderr
    assert "  try 2 resumed from step 180 (checkpoint of 02:53:10 UTC, saved by try 1)" in out.stdout
    assert out.stdout.count("resumed from") == 1  # try 1 started from zero: no line for it

    as_json = subprocess.run(
        [CARMA, "why", "nightly.train", "--json"], env=env, capture_output=True, text=True, check=True
    )
    rows = {r["try_number"]: r for r in json.loads(as_json.stdout)}
    assert rows[2]["resumed"].startswith("try 2 resumed from step 180") and rows[1]["resumed"] is None
