"""Helpers of the multi-host tests: throwaway PostgreSQL databases."""

from __future__ import annotations

import os
import secrets

import pytest
import sqlalchemy as sa

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
