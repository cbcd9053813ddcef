"""docker/ is checked statically (no Docker engine on these machines): lint and structure."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]


def test_dockerfile_passes_hadolint() -> None:
    hadolint = shutil.which("hadolint") or str(Path(sys.executable).with_name("hadolint"))
    out = subprocess.run(
        [hadolint, str(ROOT / "docker" / "Dockerfile")], capture_output=True, text=True, check=False, timeout=60
    )
    assert out.returncode == 0, out.stdout + out.stderr


def test_dockerfile_copies_what_exists_and_sets_the_executor_line() -> None:
    text = (ROOT / "docker" / "Dockerfile").read_text()
    assert "FROM apache/airflow:3.3.2" in text
    assert 'AIRFLOW__CORE__EXECUTOR="LocalExecutor,carma_airflow.executor.CarmaExecutor"' in text
    for line in text.splitlines():
        if line.startswith("COPY"):
            for src in line.split()[2:-1]:
                assert (ROOT / src).exists(), src
    assert "-c /opt/carma/constraints.txt" in text


def test_compose_gives_the_scheduler_the_gpus_and_shares_postgres() -> None:
    compose = yaml.safe_load((ROOT / "docker" / "compose.yaml").read_text())
    services = compose["services"]
    assert {"postgres", "airflow-init", "api-server", "scheduler", "dag-processor"} <= set(services)
    devices = services["scheduler"]["deploy"]["resources"]["reservations"]["devices"]
    assert devices == [{"driver": "nvidia", "count": "all", "capabilities": ["gpu"]}]
    for name in ("api-server", "scheduler", "dag-processor"):
        env = services[name]["environment"]
        assert env["AIRFLOW__CORE__EXECUTOR"] == "LocalExecutor,carma_airflow.executor.CarmaExecutor"
        assert env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"].startswith("postgresql+psycopg://")
        assert env["AIRFLOW__CARMA__STORE_URL"].startswith("postgresql+psycopg://")
        assert services[name]["build"]["dockerfile"] == "docker/Dockerfile"
        for volume in services[name]["volumes"]:
            host = volume.split(":")[0]
            if host.startswith("."):
                assert (ROOT / "docker" / host).resolve().exists(), volume
    assert services["api-server"]["ports"] == ["8080:8080"]
