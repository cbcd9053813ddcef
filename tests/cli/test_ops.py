"""`carma gpus`, `carma placements` and `carma why` against a real store and simulated GPUs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

import pytest

from carma_airflow.store.records import PlacementRecord, TryOutcome
from carma_airflow.store.store import Store

CARMA = str(Path(sys.executable).with_name("carma"))


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    out = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")}
    out.update(
        AIRFLOW_HOME=str(tmp_path),
        AIRFLOW__CARMA__GPU_BACKEND="simulated",
        AIRFLOW__CARMA__SIMULATED_GPUS="2xA100-40GB,1xH100-80GB",
        AIRFLOW__CARMA__HOST="gpu-01",
    )
    store = Store(f"sqlite:///{tmp_path / 'carma.db'}")
    store.migrate()
    now = datetime.now(timezone.utc)
    store.upsert_placement(
        PlacementRecord(
            key="k1",
            dag_id="train",
            task_id="bert",
            run_id="r1",
            try_number=1,
            decided_at=now,
            outcome=TryOutcome.RUNNING,
            gpu_uuids=("GPU-SIM-0001",),
            label="train.bert",
            estimate_mib=12288,
            estimate_source="declared",
            summary="placed on GPU 1 (A100-40GB): 39.5 GiB free, SM activity 0.00, co-tenants: none",
            reasons=("GPU 1 (A100-40GB): 39.5 GiB free",),
        )
    )
    store.upsert_placement(
        PlacementRecord(
            key="k2",
            dag_id="train",
            task_id="gpt",
            run_id="r1",
            try_number=1,
            decided_at=now,
            outcome=TryOutcome.WAITING,
            label="train.gpt",
            estimate_mib=70000,
            estimate_source="declared",
            summary="waiting: no GPU with 70.3 GiB free (2 memory, 1 tenant-cap)",
        )
    )
    store.close()
    return out


def carma(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([CARMA, *args], env=env, capture_output=True, text=True, timeout=120, check=False)


def test_gpus_lists_every_gpu_with_its_tenants(env: dict[str, str]) -> None:
    out = carma(env, "gpus", "--json")
    assert out.returncode == 0, out.stderr
    rows = json.loads(out.stdout)
    assert [(r["index"], r["name"]) for r in rows] == [(0, "A100-40GB"), (1, "A100-40GB"), (2, "H100-80GB")]
    assert rows[1]["tenants"] == ["train.bert"] and rows[0]["tenants"] == []
    assert all(r["host"] == "gpu-01" and r["risk"] == "ok" for r in rows)
    table = carma(env, "gpus")
    assert table.returncode == 0 and "train.bert" in table.stdout


def test_why_explains_waiting_and_placed_tasks(env: dict[str, str]) -> None:
    waiting = carma(env, "why", "train.gpt")
    assert waiting.returncode == 0, waiting.stderr
    assert "waiting: no GPU with 70.3 GiB free" in waiting.stdout
    placed = carma(env, "why", "train.bert")
    assert "placed on GPU 1 (A100-40GB)" in placed.stdout and "declared" in placed.stdout
    missing = carma(env, "why", "train.nothing")
    assert missing.returncode == 2 and missing.stderr.startswith("error: no placement recorded")
    bad = carma(env, "why", "no_dot")
    assert bad.returncode == 2 and "DAG_ID.TASK_ID" in bad.stderr


def test_placements_json_filters_by_dag(env: dict[str, str]) -> None:
    out = carma(env, "placements", "--dag-id", "train", "--json")
    rows = json.loads(out.stdout)
    assert {r["task_id"] for r in rows} == {"bert", "gpt"}
    assert {r["outcome"] for r in rows} == {"running", "waiting"}
    assert json.loads(carma(env, "placements", "--dag-id", "other", "--json").stdout) == []
