"""Store fixtures: every store test runs on a SQLite file and on PostgreSQL.

PostgreSQL: a fresh database ``carma_test_<hex>`` per test session (per xdist worker), made
through the maintenance database of ``CARMA_TEST_PG_URL`` (default
``postgresql+psycopg://postgres@127.0.0.1:5432/postgres``) and dropped at the end.  When the
server cannot be reached the PostgreSQL tests fail, unless ``CARMA_SKIP_PG=1`` says to skip them.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import Engine, create_engine, make_url, text

from carma_airflow.store import Store
from carma_airflow.store.schema import VERSION_TABLE, metadata

PG_ADMIN_URL = os.environ.get("CARMA_TEST_PG_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres")
SKIP_PG = os.environ.get("CARMA_SKIP_PG") == "1"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "db: needs a database (a SQLite file, or PostgreSQL)")
    config.addinivalue_line("markers", "postgres: needs a PostgreSQL server (CARMA_SKIP_PG=1 skips it)")


def _unreachable(exc: Exception) -> str:
    admin = make_url(PG_ADMIN_URL).render_as_string(hide_password=True)
    return (
        f"PostgreSQL for the store tests is not reachable at {admin}: {' '.join(str(exc).split())}\n"
        "Start it (pg_ctlcluster --skip-systemctl-redirect $(ls /etc/postgresql) main start), point "
        "CARMA_TEST_PG_URL at a server whose user may CREATE DATABASE, or set CARMA_SKIP_PG=1 to skip "
        "the PostgreSQL half of the store tests."
    )


@pytest.fixture(scope="session")
def pg_database() -> Iterator[str]:
    """URL of a fresh PostgreSQL database for this session; dropped at the end."""
    if SKIP_PG:
        pytest.skip("CARMA_SKIP_PG=1: PostgreSQL store tests skipped")
    name = f"carma_test_{secrets.token_hex(6)}"
    admin = create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT", connect_args={"connect_timeout": 5})
    try:
        with admin.connect() as conn:
            conn.exec_driver_sql(f'CREATE DATABASE "{name}"')
    except Exception as exc:
        admin.dispose()
        pytest.fail(_unreachable(exc), pytrace=False)
    try:
        yield make_url(PG_ADMIN_URL).set(database=name).render_as_string(hide_password=False)
    finally:
        with admin.connect() as conn:
            conn.exec_driver_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.dispose()


@pytest.fixture(scope="session")
def pg_engine(pg_database: str) -> Iterator[Engine]:
    engine = create_engine(pg_database)
    yield engine
    engine.dispose()


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def any_url(backend: str, request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """URL of a database on the backend under test: a new SQLite file, or the session's PostgreSQL."""
    if backend == "sqlite":
        return f"sqlite:///{tmp_path / 'carma.db'}"
    return str(request.getfixturevalue("pg_database"))


@pytest.fixture
def db_url(backend: str, any_url: str, request: pytest.FixtureRequest) -> str:
    """URL of an empty database (no tables of the store, no version tables)."""
    if backend == "postgresql":
        engine: Engine = request.getfixturevalue("pg_engine")
        with engine.begin() as conn:
            metadata.drop_all(conn)
            conn.execute(text(f"DROP TABLE IF EXISTS {VERSION_TABLE}"))
            conn.execute(text("DROP TABLE IF EXISTS alembic_version"))
    return any_url


@pytest.fixture
def store(backend: str, any_url: str, request: pytest.FixtureRequest) -> Iterator[Store]:
    """A migrated store with empty tables."""
    s = Store(any_url)
    s.migrate()  # a no-op on PostgreSQL unless a migration test dropped the tables
    if backend == "postgresql":
        engine: Engine = request.getfixturevalue("pg_engine")
        with engine.begin() as conn:
            names = ", ".join(t.name for t in metadata.sorted_tables)
            conn.execute(text(f"TRUNCATE {names} RESTART IDENTITY"))
    yield s
    s.close()
