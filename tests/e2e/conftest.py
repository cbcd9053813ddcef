"""Fixtures for the end-to-end suite: a throwaway Airflow per test, on SQLite or PostgreSQL."""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

from carma_airflow.devstack import AirflowStack

DAGS = Path(__file__).with_name("dags")

PG_ADMIN = os.environ.get("CARMA_TEST_PG_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres")


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


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def backend(request: pytest.FixtureRequest) -> Iterator[str | None]:
    if request.param == "sqlite":
        yield None
    else:
        yield from _pg_database()


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
