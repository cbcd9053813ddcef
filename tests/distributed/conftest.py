"""Fixtures for the multi-host tests: a store on SQLite and on PostgreSQL, Redis for Celery."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa
from dist_helpers import drop_pg_database, make_pg_database

from carma_airflow.store.store import Store

REDIS_URL = os.environ.get("CARMA_TEST_REDIS_URL", "redis://127.0.0.1:6379/11")


@pytest.fixture(scope="session")
def pg_url() -> Iterator[str]:
    url = make_pg_database("carma_dist")
    try:
        yield url
    finally:
        drop_pg_database(url)


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    """A migrated, empty store (the PostgreSQL one is emptied after each test)."""
    sqlite = f"sqlite:///{tmp_path / 'carma.db'}"
    url = sqlite if request.param == "sqlite" else request.getfixturevalue("pg_url")
    s = Store(url)
    s.migrate()
    try:
        yield s
    finally:
        if request.param == "postgres":
            engine = sa.create_engine(url)
            with engine.begin() as conn:
                conn.exec_driver_sql("DELETE FROM carma_host")
                conn.exec_driver_sql("DELETE FROM carma_dispatch")
            engine.dispose()
        s.close()


@pytest.fixture
def redis_url() -> str:
    import redis

    try:
        redis.Redis.from_url(REDIS_URL, socket_connect_timeout=3).ping()
    except redis.RedisError as exc:
        pytest.fail(f"Redis at {REDIS_URL} is not reachable ({exc}); start it (make prereqs does)")
    return REDIS_URL


RABBITMQ_URL = os.environ.get("CARMA_TEST_RABBITMQ_URL", "amqp://guest:guest@127.0.0.1:5672//")


@pytest.fixture
def rabbitmq_url() -> str:
    import socket
    from urllib.parse import urlparse

    where = urlparse(RABBITMQ_URL)
    try:
        socket.create_connection((where.hostname or "127.0.0.1", where.port or 5672), timeout=3).close()
    except OSError as exc:
        pytest.fail(f"RabbitMQ at {where.hostname}:{where.port} is not reachable ({exc}); start it (make prereqs does)")
    return RABBITMQ_URL
