"""Fixtures of the GPU page tests: a SQLite store filled as a running executor fills it."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from ui_helpers import client_for, fill_store

from carma_airflow.store.store import Store


@pytest.fixture
def store_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'carma.db'}"


@pytest.fixture
def store(store_url: str) -> Iterator[Store]:
    s = Store(store_url)
    s.migrate()
    yield s
    s.close()


@pytest.fixture
def now() -> datetime:
    return datetime.now(timezone.utc)


@pytest.fixture
def filled(store: Store, now: datetime) -> Store:
    fill_store(store, now)
    return store


@pytest.fixture
def client(filled: Store, store_url: str) -> TestClient:
    return client_for(lambda: Store(store_url))
