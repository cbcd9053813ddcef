"""Fixtures for the end-to-end suite: real Airflow deployments on SQLite or PostgreSQL.

* ``default_stack``: one deployment per backend for the whole session (2 simulated A100-40GB,
  the DAGs of ``dags/`` and ``checkpoint_dags/``, the executor's defaults).  Tests on it stay
  independent: each triggers its own DAG run, asserts only on that run's rows and logs
  (``AirflowStack.run_log``), and starts once the tries before it have ended
  (``AirflowStack.wait_quiet``).  A
  boot costs about a minute of CPU on a 2-core machine; sharing it is what keeps the suite
  within its budget.
* ``airflow_stack``: a throwaway Airflow per test, for tests that must own theirs (a killed or
  restarted scheduler, two schedulers, a config of their own).
"""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

from carma_airflow.devstack import AirflowStack

DAGS = Path(__file__).with_name("dags")
CHECKPOINT_DAGS = Path(__file__).with_name("checkpoint_dags")
DEFAULT_CARMA = {"simulated_gpus": "2xA100-40GB"}

PG_ADMIN = os.environ.get("CARMA_TEST_PG_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres")
BACKENDS = ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]


def _pg_database() -> Iterator[str]:
    name = f"carma_e2e_{uuid.uuid4().hex[:10]}"
    admin = sa.create_engine(PG_ADMIN, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
    except sa.exc.OperationalError as exc:
        pytest.fail(f"PostgreSQL at {PG_ADMIN} is not reachable ({exc.orig}); start it (make prereqs does)")
    try:
        yield PG_ADMIN.rsplit("/", 1)[0] + f"/{name}"
    finally:
        with admin.connect() as conn:
            conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


def _database(kind: str) -> Iterator[str | None]:
    if kind == "sqlite":
        yield None
    else:
        yield from _pg_database()


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> Iterator[str | None]:
    yield from _database(request.param)


@pytest.fixture
def airflow_stack(tmp_path: Path, backend: str | None) -> Iterator[Callable[..., AirflowStack]]:
    made: list[AirflowStack] = []

    def start(**carma: str) -> AirflowStack:
        home = tmp_path / f"home{len(made)}"
        home.mkdir()
        if backend is not None:
            carma.setdefault("store_url", backend)
        stack = AirflowStack(home, DAGS, db_url=backend, **carma)
        made.append(stack)
        stack.start()
        return stack

    yield start
    for stack in made:
        stack.stop()


# -- the shared deployment -----------------------------------------------------------------
@pytest.fixture(scope="session", params=BACKENDS)
def shared_backend(request: pytest.FixtureRequest) -> Iterator[str | None]:
    """The backend of the session's shared deployment (a test that needs only one of them
    parametrises this indirectly)."""
    yield from _database(request.param)


@pytest.fixture(scope="session")
def default_deployment(shared_backend: str | None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[AirflowStack]:
    dags = tmp_path_factory.mktemp("default-dags")
    shutil.copytree(DAGS, dags, dirs_exist_ok=True)
    shutil.copytree(CHECKPOINT_DAGS, dags, dirs_exist_ok=True)
    carma = dict(DEFAULT_CARMA)
    if shared_backend is not None:
        carma["store_url"] = shared_backend
    stack = AirflowStack(tmp_path_factory.mktemp("default-home"), dags, db_url=shared_backend, **carma)
    try:
        stack.start()
        yield stack
    finally:
        stack.stop()


@pytest.fixture
def default_stack(default_deployment: AirflowStack) -> AirflowStack:
    """The shared deployment, once every try an earlier test started there has ended."""
    default_deployment.wait_quiet()
    return default_deployment
