"""What the `carma why` tests of one task's tries share: a store of placements under a fresh
AIRFLOW_HOME, and the CLI run against it as a user runs it."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterable
from datetime import datetime
from pathlib import Path

from carma_airflow.store.records import PlacementRecord, TryOutcome
from carma_airflow.store.store import Store

CARMA = str(Path(sys.executable).with_name("carma"))


def nightly_try(
    number: int,
    outcome: TryOutcome,
    reasons: tuple[str, ...],
    *,
    decided_at: datetime,
    gpu_uuids: tuple[str, ...] = ("GPU-SIM-0000",),
    summary: str = "placed on GPU 0 (A100-40GB)",
) -> PlacementRecord:
    """Try ``number`` of ``nightly.train`` (run r1), declared 8,192 MiB."""
    return PlacementRecord(
        key=f"nightly/train/r1/-1#{number}",
        dag_id="nightly",
        task_id="train",
        run_id="r1",
        try_number=number,
        decided_at=decided_at,
        outcome=outcome,
        gpu_uuids=gpu_uuids,
        estimate_mib=8192,
        estimate_source="declared",
        summary=summary,
        reasons=reasons,
    )


def home_with(tmp_path: Path, tries: Iterable[PlacementRecord]) -> dict[str, str]:
    """The environment of a `carma` run whose store (under ``tmp_path``) holds ``tries``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")}
    env.update(AIRFLOW_HOME=str(tmp_path), AIRFLOW__CARMA__GPU_BACKEND="simulated")
    store = Store(f"sqlite:///{tmp_path / 'carma.db'}")
    store.migrate()
    for rec in tries:
        store.upsert_placement(rec)
    store.close()
    return env


def carma(env: dict[str, str], *args: str, check: bool = False) -> subprocess.CompletedProcess[str]:
    return subprocess.run([CARMA, *args], env=env, capture_output=True, text=True, check=check)
