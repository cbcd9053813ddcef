"""docker/compose.multihost.yaml, checked statically (no Docker engine on these machines)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = ROOT / "docker" / "compose.multihost.yaml"


def services() -> dict[str, Any]:
    return dict(yaml.safe_load(COMPOSE.read_text())["services"])


def test_central_part_places_and_gpu_hosts_run() -> None:
    s = services()
    assert {"postgres", "redis", "airflow-init", "api-server", "scheduler", "dag-processor"} <= set(s)
    assert {"gpu-agent", "gpu-worker"} <= set(s)
    assert "deploy" not in s["scheduler"]  # placement needs no GPU: tries run on the GPU hosts
    for name in ("gpu-agent", "gpu-worker"):
        devices = s[name]["deploy"]["resources"]["reservations"]["devices"]
        assert devices == [{"driver": "nvidia", "count": "all", "capabilities": ["gpu"]}]
        assert s[name]["profiles"] == ["gpu-host"]
    assert s["gpu-agent"]["entrypoint"] == ["carma", "agent"]
    worker = s["gpu-worker"]["command"]
    assert worker.startswith("celery worker --queues carma-${CARMA_HOST")
    assert "--concurrency" in worker


def test_every_airflow_service_dispatches_through_celery_to_the_same_store() -> None:
    s = services()
    airflow = ["airflow-init", "api-server", "scheduler", "dag-processor", "gpu-agent", "gpu-worker"]
    stores = set()
    for name in airflow:
        env = s[name]["environment"]
        assert env["AIRFLOW__CORE__EXECUTOR"] == "LocalExecutor,carma_airflow.executor.CarmaExecutor"
        assert env["AIRFLOW__CARMA__DISPATCH"] == "celery"
        assert env["AIRFLOW__CELERY__BROKER_URL"].startswith("redis://")
        assert env["AIRFLOW__CELERY__RESULT_BACKEND"].startswith("redis://")
        imports = json.loads(env["AIRFLOW__CELERY__EXTRA_CELERY_CONFIG"])["imports"]
        assert imports == ["carma_airflow.distributed.celery_tasks"]
        assert (ROOT / "carma_airflow" / "distributed" / "celery_tasks.py").exists()
        stores.add(env["AIRFLOW__CARMA__STORE_URL"])
        assert s[name]["build"]["dockerfile"] == "docker/Dockerfile"
        for volume in s[name]["volumes"]:
            host = volume.split(":")[0]
            if host.startswith("."):
                assert (ROOT / "docker" / host).resolve().exists(), volume
    assert len(stores) == 1 and next(iter(stores)).startswith("postgresql+psycopg://")
    # the agent and the worker of one host share its name (its queue) and its state folder (ledger, results)
    agent, worker = s["gpu-agent"], s["gpu-worker"]
    assert agent["environment"]["AIRFLOW__CARMA__HOST"] == worker["environment"]["AIRFLOW__CARMA__HOST"]
    assert agent["environment"]["AIRFLOW__CARMA__HOST"].startswith("${CARMA_HOST")
    assert agent["volumes"] == worker["volumes"]
    assert s["scheduler"]["environment"]["AIRFLOW__CARMA__HOST"] == "scheduler"


def test_ports_are_the_documented_ones() -> None:
    s = services()
    assert s["api-server"]["ports"] == ["8080:8080"]
    assert s["postgres"]["ports"] == ["5432:5432"]
    assert s["redis"]["ports"] == ["6379:6379"]
    assert s["gpu-worker"]["ports"] == ["8793:8793"]
    doc = (ROOT / "docs" / "multihost.md").read_text()
    for port in ("8080", "5432", "6379", "8793"):
        assert port in doc
