"""Helpers of the multi-host tests: throwaway PostgreSQL databases, what the launcher tests share."""

from __future__ import annotations

import os
import secrets
from datetime import datetime, timezone
from pathlib import Path

import pytest
import sqlalchemy as sa

from carma_airflow.config.settings import CarmaSettings
from carma_airflow.store.records import HostRecord
from carma_airflow.store.store import Store

PG_ADMIN_URL = os.environ.get("CARMA_TEST_PG_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres")


def make_pg_database(prefix: str) -> str:
    name = f"{prefix}_{secrets.token_hex(5)}"
    admin = sa.create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT", connect_args={"connect_timeout": 5})
    try:
        with admin.connect() as conn:
            conn.exec_driver_sql(f'CREATE DATABASE "{name}"')
    except sa.exc.OperationalError as exc:
        pytest.fail(f"PostgreSQL at {PG_ADMIN_URL} is not reachable ({exc.orig}); start it (make prereqs does)")
    finally:
        admin.dispose()
    return sa.make_url(PG_ADMIN_URL).set(database=name).render_as_string(hide_password=False)


def drop_pg_database(url: str) -> None:
    name = sa.make_url(url).database
    admin = sa.create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            conn.exec_driver_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        admin.dispose()


# -- what the launcher tests share ------------------------------------------------------------


class Workload:
    """What the launcher reads of an Airflow ExecuteTask: the try's key and its JSON."""

    def __init__(self, try_number: int = 1, task_id: str = "t") -> None:
        from types import SimpleNamespace

        self.ti = SimpleNamespace(
            key=SimpleNamespace(dag_id="d", task_id=task_id, run_id="r", map_index=-1, try_number=try_number)
        )

    def model_dump_json(self) -> str:
        return "{}"


def carma_settings(tmp_path: Path, **extra: str) -> CarmaSettings:
    values = {"gpu_backend": "simulated", "host": "gpu-a", "state_dir": str(tmp_path / "state"), **extra}
    return CarmaSettings.load(values.get, str(tmp_path))


def live_host(store: Store, name: str) -> None:
    """A host row whose agent and worker were just heard from."""
    now = datetime.now(tz=timezone.utc)
    store.publish_host(HostRecord(name, f"carma-test-{name}", now, now, "simulated"))
    store.worker_beat(name, now)
