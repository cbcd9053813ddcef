"""`carma why` says where a retry resumed (its placement's checkpoint reason, docs/checkpoints.md)."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path

from why_helpers import carma, home_with, nightly_try

from carma_airflow.core.checkpoints import RESUME_REASON, Progress, resumed_from
from carma_airflow.store.records import PlacementRecord, TryOutcome

SUMMARY = "placed on GPU 0 (A100-40GB): 39.5 GiB free, SM activity 0.00, co-tenants: none"
SAVED = datetime(2026, 12, 2, 2, 53, 10, tzinfo=timezone.utc)


def _try(number: int, outcome: TryOutcome, reasons: tuple[str, ...]) -> PlacementRecord:
    return nightly_try(number, outcome, reasons, decided_at=SAVED, summary=SUMMARY)


def test_why_shows_the_step_a_retry_resumed_from(tmp_path: Path) -> None:
    saved = Progress(step=180, saved_at=SAVED.timestamp(), try_number=1)
    tries = [
        _try(1, TryOutcome.OOM, ("GPU 0 (A100-40GB): 39.5 GiB free",)),
        _try(2, TryOutcome.SUCCESS, ("GPU 0 (A100-40GB)", RESUME_REASON + resumed_from(saved))),
    ]
    env = home_with(tmp_path, tries)

    out = carma(env, "why", "nightly.train")
    assert out.returncode == 0, out.stderr
    assert "  try 2 resumed from step 180 (checkpoint of 02:53:10 UTC, saved by try 1)" in out.stdout
    assert out.stdout.count("resumed from") == 1  # try 1 started from zero: no line for it

    as_json = carma(env, "why", "nightly.train", "--json", check=True)
    rows = {r["try_number"]: r for r in json.loads(as_json.stdout)}
    assert rows[2]["resumed"].startswith("try 2 resumed from step 180") and rows[1]["resumed"] is None
