"""``carma hosts``: the real command against a store holding two hosts, one of them silent."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

from carma_airflow.store.records import DispatchRecord, HostRecord
from carma_airflow.store.store import Store

CARMA = str(Path(sys.executable).with_name("carma"))


def _host(name: str, at: datetime, names: list[str], used: int) -> HostRecord:
    gpus = tuple(
        {"uuid": f"GPU-{name}-{i}", "index": i, "name": n, "memory_total_mib": 40960, "memory_used_mib": used}
        for i, n in enumerate(names)
    )
    return HostRecord(host=name, queue=f"carma-{name}", heartbeat_at=at, started_at=at, backend="simulated", gpus=gpus)


def _run(store: Store, tmp_path: Path, *args: str, dispatch: str = "celery") -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")}
    env |= {
        "AIRFLOW__CARMA__DISPATCH": dispatch,
        "AIRFLOW_HOME": str(tmp_path),
        "AIRFLOW__CARMA__STORE_URL": store._url.render_as_string(hide_password=False),
        "AIRFLOW__CARMA__HOST_TIMEOUT_SECONDS": "30",
        "COLUMNS": "200",
    }
    return subprocess.run([CARMA, "hosts", *args], env=env, capture_output=True, text=True, timeout=120, check=False)


def test_hosts_shows_which_host_is_live_and_what_runs_there(store: Store, tmp_path: Path) -> None:
    now = datetime.now(timezone.utc)
    store.publish_host(_host("gpu-a", now, ["A100-40GB", "A100-40GB"], 1024))
    store.worker_beat("gpu-a", now, pid=7)
    store.publish_host(_host("gpu-b", now - timedelta(seconds=300), ["H100-80GB"], 0))  # its agent stopped
    for i in range(3):
        store.record_dispatch(DispatchRecord(f"d/t{i}/r/-1/1", "gpu-a", "carma-gpu-a", f"c{i}", now))
    store.record_dispatch(DispatchRecord("d/t9/r/-1/1", "gpu-b", "carma-gpu-b", "c9", now))
    store.end_dispatch("d/t9/r/-1/1", time.time(), "lost", "gpu-b silent")

    out = _run(store, tmp_path, "--json")
    assert out.returncode == 0, out.stderr
    rows = {r["host"]: r for r in json.loads(out.stdout)}
    a, b = rows["gpu-a"], rows["gpu-b"]
    assert a["status"] == "live" and a["running_tries"] == 3 and a["gpus"] == 2
    assert a["models"] == "2xA100-40GB" and a["memory_used_mib"] == 2048 and a["memory_total_mib"] == 81920
    assert (
        b["status"].startswith("silent: agent silent for 3") and "no Celery worker on queue carma-gpu-b" in b["status"]
    )
    assert b["running_tries"] == 0  # its lost dispatch is not running

    table = _run(store, tmp_path)
    assert table.returncode == 0, table.stderr
    assert "gpu-a" in table.stdout and "live" in table.stdout and "2 (2xA100-40GB)" in table.stdout


def test_hosts_with_no_agent_says_what_to_start(store: Store, tmp_path: Path) -> None:
    out = _run(store, tmp_path)
    assert out.returncode == 0, out.stderr
    assert "no GPU host has published" in out.stdout and "carma agent" in out.stdout


def test_hosts_with_local_dispatch_asks_for_no_agent(store: Store, tmp_path: Path) -> None:
    out = _run(store, tmp_path, dispatch="local")  # the default: one host
    assert out.returncode == 0, out.stderr
    assert "carma agent" not in out.stdout and "no GPU host has published" not in out.stdout
    assert "[carma] dispatch = local: every GPU try runs on the scheduler's own host" in out.stdout
