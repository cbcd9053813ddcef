"""`carma agent`: publishes its host's GPUs with host-qualified simulated UUIDs; one-line errors."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from carma_airflow.config.settings import CarmaSettings
from carma_airflow.distributed.agent import Agent
from carma_airflow.store.store import Store

pytestmark = pytest.mark.db

CARMA = str(Path(sys.executable).with_name("carma"))


def settings(tmp_path: Path, host: str, gpus: str, store_url: str) -> CarmaSettings:
    values = {
        "gpu_backend": "simulated",
        "simulated_gpus": gpus,
        "host": host,
        "state_dir": str(tmp_path / host),
        "store_url": store_url,
        "dispatch": "celery",
    }
    return CarmaSettings.load(values.get, str(tmp_path))


def test_two_simulated_hosts_publish_distinct_gpus(tmp_path: Path, store: Store) -> None:
    a = Agent.from_settings(settings(tmp_path, "gpu-a", "2xA100-40GB", ""), store)
    b = Agent.from_settings(settings(tmp_path, "gpu-b", "4xH100-80GB", ""), store)
    a.run(rounds=2)
    b.beat()
    rows = {h.host: h for h in store.hosts()}
    assert rows["gpu-a"].queue == "carma-gpu-a" and rows["gpu-b"].queue == "carma-gpu-b"
    assert [g["uuid"] for g in rows["gpu-a"].gpus] == ["GPU-SIM-gpu-a-0000", "GPU-SIM-gpu-a-0001"]
    assert [g["name"] for g in rows["gpu-b"].gpus] == ["H100-80GB"] * 4
    assert a.beats == 2 and rows["gpu-a"].heartbeat_at > rows["gpu-a"].started_at


def _cli(tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")}
    base.update(AIRFLOW_HOME=str(tmp_path), AIRFLOW__CARMA__GPU_BACKEND="simulated", **env)
    return subprocess.run(
        [CARMA, "agent", "--once"], env=base, capture_output=True, text=True, timeout=120, check=False
    )


def test_cli_once_prints_the_published_host(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'carma.db'}"
    out = _cli(
        tmp_path, AIRFLOW__CARMA__HOST="gpu-z", AIRFLOW__CARMA__STORE_URL=url, AIRFLOW__CARMA__SIMULATED_GPUS="L4"
    )
    assert out.returncode == 0, out.stderr
    shown = json.loads(out.stdout)
    assert shown["host"] == "gpu-z" and [g["uuid"] for g in shown["gpus"]] == ["GPU-SIM-gpu-z-0000"]
    assert Store(url).host("gpu-z") is not None


def test_cli_unreachable_store_is_one_line_exit_2(tmp_path: Path) -> None:
    out = _cli(tmp_path, AIRFLOW__CARMA__STORE_URL="postgresql+psycopg://nobody@127.0.0.1:1/none")
    assert out.returncode == 2
    lines = [line for line in out.stderr.splitlines() if line.startswith("error:")]
    assert len(lines) == 1 and "CARMA store" in lines[0] and "reachable" in lines[0], out.stderr
