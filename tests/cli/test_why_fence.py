"""`carma why` and the UI say each try's own fence, per GPU: the cap it started under, fixed or
re-set (its placement's fence reason, core/fencing.FENCE_REASON), not only the host's mechanism."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path

import pytest
from why_helpers import carma, home_with, nightly_try

from carma_airflow.core.fencing import FENCE_REASON
from carma_airflow.store.records import PlacementRecord, TryOutcome
from carma_airflow.store.store import Store

AT = datetime(2026, 12, 2, 2, 53, 10, tzinfo=timezone.utc)
FIXED = "capped at 10240 MiB per GPU (framework: PyTorch's fraction; fixed at the try's start: its promise)"
SUMMARY = "placed on GPU 0, GPU 1 (A100-40GB)"
WIDE = "capped at 40448, 27648 MiB per GPU (framework: PyTorch's fraction; re-set as co-tenants come and go)"


def _try(number: int, outcome: TryOutcome, reasons: tuple[str, ...]) -> PlacementRecord:
    gpus = ("GPU-SIM-0000", "GPU-SIM-0001")
    return nightly_try(number, outcome, reasons, decided_at=AT, gpu_uuids=gpus, summary=SUMMARY)


def test_why_shows_each_tries_own_fence_per_gpu(tmp_path: Path) -> None:
    tries = [
        _try(1, TryOutcome.OOM, ("chose GPU 0", FENCE_REASON + FIXED)),
        _try(2, TryOutcome.SUCCESS, ("chose GPU 0", FENCE_REASON + WIDE)),
        _try(3, TryOutcome.WAITING, ("skipped GPU 0",)),  # not started: no fence yet
    ]
    env = home_with(tmp_path, tries)

    out = carma(env, "why", "nightly.train")
    assert out.returncode == 0, out.stderr
    assert f"  memory fence of this try: {FIXED}" in out.stdout
    assert f"  memory fence of this try: {WIDE}" in out.stdout
    assert out.stdout.count("memory fence of this try") == 2
    assert f"  {FENCE_REASON}" not in out.stdout  # said once, not again among the reasons
    assert "memory fence on this host" in out.stdout  # the host's mechanism stays the last line

    as_json = carma(env, "why", "nightly.train", "--json", check=True)
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
