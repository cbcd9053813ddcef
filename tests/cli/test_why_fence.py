"""`carma why` and the UI say each try's own fence, per GPU: the cap it started under, fixed or
re-set (its placement's fence reason, core/fencing.FENCE_REASON), not only the host's mechanism."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path

import pytest

from carma_airflow.core.fencing import FENCE_REASON
from carma_airflow.store.records import PlacementRecord, TryOutcome
from carma_airflow.store.store import Store

CARMA = str(Path(sys.executable).with_name("carma"))
AT = datetime(2026, 12, 2, 2, 53, 10, tzinfo=timezone.utc)
FIXED = "capped at 10240 MiB per GPU (framework: PyTorch's fraction; fixed at the try's start: its promise)"
WIDE = "capped at 40448, 27648 MiB per GPU (framework: PyTorch's fraction; re-set as co-tenants come and go)"


def _try(number: int, outcome: TryOutcome, reasons: tuple[str, ...]) -> PlacementRecord:
    return PlacementRecord(
        key=f"nightly/train/r1/-1#{number}",
        dag_id="nightly",
        task_id="train",
        run_id="r1",
        try_number=number,
        decided_at=AT,
        outcome=outcome,
        gpu_uuids=("GPU-SIM-0000", "GPU-SIM-0001"),
        estimate_mib=8192,
        estimate_source="declared",
        summary="placed on GPU 0, GPU 1 (A100-40GB)",
        reasons=reasons,
    )


def test_why_shows_each_tries_own_fence_per_gpu(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")}
    env.update(AIRFLOW_HOME=str(tmp_path), AIRFLOW__CARMA__GPU_BACKEND="simulated")
    store = Store(f"sqlite:///{tmp_path / 'carma.db'}")
    store.migrate()
    store.upsert_placement(_try(1, TryOutcome.OOM, ("chose GPU 0", FENCE_REASON + FIXED)))
    store.upsert_placement(_try(2, TryOutcome.SUCCESS, ("chose GPU 0", FENCE_REASON + WIDE)))
    store.upsert_placement(_try(3, TryOutcome.WAITING, ("skipped GPU 0",)))  # not started: no fence yet
    store.close()

    out = subprocess.run([CARMA, "why", "nightly.train"], env=env, capture_output=True, text=True, check=False)
    assert out.returncode == 0, out.stderr
    assert f"  memory fence of this try: {FIXED}" in out.stdout
    assert f"  memory fence of this try: {WIDE}" in out.stdout
    assert out.stdout.count("memory fence of this try") == 2
    assert f"  {FENCE_REASON}" not in out.stdout  # said once, not again among the reasons
    assert "memory fence on this host" in out.stdout  # the host's mechanism stays the last line

    as_json = subprocess.run(
        [CARMA, "why", "nightly.train", "--json"], env=env, capture_output=True, text=True, check=True
    )
    rows = {r["try_number"]: r for r in json.loads(as_json.stdout)}
    assert (rows[1]["fence"], rows[2]["fence"], rows[3]["fence"]) == (FIXED, WIDE, None)


@pytest.mark.db
def test_the_ui_try_detail_shows_its_fence(tmp_path: Path) -> None:
    from carma_airflow.ui.state import build_state

    store = Store(f"sqlite:///{tmp_path / 'carma.db'}")
    store.migrate()
    rec = _try(1, TryOutcome.RUNNING, ("chose GPU 0", FENCE_REASON + WIDE))
    store.upsert_placement(replace(rec, started_at=AT))
    state = build_state(store, now=AT)
    store.close()
    row = next(p for p in state["timeline"]["placements"] if p["key"] == rec.key)
    assert row["fence"] == WIDE
    bar = next(b for lane in state["timeline"]["lanes"] for b in lane["bars"] if b["key"] == rec.key)
    assert f"memory fence: {WIDE}" in bar["detail"]
