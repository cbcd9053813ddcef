"""Store errors by kind: a refusal (retrying cannot help) is StoreRefusedError, a failure that may
pass (connection, lock, rollback) is StoreUnreachableError; both against real databases."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
import sqlalchemy as sa
from store_helpers import at, placement

from carma_airflow.store import Store, StoreError
from carma_airflow.store.errors import RecordError, StoreRefusedError, StoreUnreachableError

pytestmark = pytest.mark.db


def test_a_broken_constraint_is_a_refusal(store: Store) -> None:
    with pytest.raises(StoreRefusedError, match=r"broke a constraint|NOT NULL|null value"):
        store.add_peak(None, "t", 100, at(0))  # type: ignore[arg-type]  # dag_id is NOT NULL
    store.add_peak("d", "t", 100, at(0))  # the store goes on
    assert store.peaks("d", "t") == [100]


def test_a_bad_record_is_a_refusal_and_still_a_value_error(store: Store) -> None:
    with pytest.raises(StoreRefusedError) as caught:
        store.add_peak("d", "t", -1, at(0))
    assert isinstance(caught.value, (RecordError, ValueError, StoreError))


def test_missing_tables_are_a_refusal(db_url: str) -> None:
    with pytest.raises(StoreRefusedError, match="migrate"):
        Store(db_url).upsert_placement(placement())


def test_an_unreachable_server_is_transient() -> None:
    store = Store("postgresql+psycopg://carma:secret@127.0.0.1:9/none?connect_timeout=1")
    with pytest.raises(StoreUnreachableError) as caught:
        store.peaks("d", "t")
    assert "secret" not in str(caught.value)


def test_a_locked_sqlite_file_is_transient(tmp_path: Path) -> None:
    path = tmp_path / "carma.db"
    Store(f"sqlite:///{path}").migrate()
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")  # another process holds the write lock
    try:
        with pytest.raises(StoreUnreachableError, match="busy timeout"):
            Store(f"sqlite:///{path}", busy_timeout_s=0.2).add_peak("d", "t", 1, at(0))
    finally:
        holder.rollback()
        holder.close()


@pytest.mark.postgres
def test_a_lock_timeout_on_postgres_is_transient(pg_database: str) -> None:
    Store(pg_database).migrate()
    holder = sa.create_engine(pg_database)
    with holder.connect() as conn:
        conn.exec_driver_sql("BEGIN")
        conn.exec_driver_sql("LOCK TABLE carma_memory_history IN ACCESS EXCLUSIVE MODE")
        impatient = Store(pg_database + "?options=-c%20lock_timeout%3D300")
        with pytest.raises(StoreUnreachableError, match="lock"):
            impatient.add_peak("d", "t", 1, at(0))
        impatient.close()
        conn.exec_driver_sql("ROLLBACK")
    holder.dispose()


@pytest.mark.postgres
def test_a_serialization_failure_on_postgres_is_transient(pg_database: str) -> None:
    """Two SERIALIZABLE transactions that read and write each other's rows: PostgreSQL rolls one
    back with 40001, which the same transaction made again would pass."""
    store = Store(pg_database)
    store.migrate()
    store.add_peak("d", "a", 1, at(0))
    store.add_peak("d", "b", 1, at(0))
    engine = sa.create_engine(pg_database, isolation_level="SERIALIZABLE")
    first, second = engine.connect(), engine.connect()
    first.exec_driver_sql("BEGIN")
    second.exec_driver_sql("BEGIN")
    first.exec_driver_sql("SELECT sum(peak_mib) FROM carma_memory_history WHERE task_id = 'a'")
    second.exec_driver_sql("SELECT sum(peak_mib) FROM carma_memory_history WHERE task_id = 'b'")
    first.exec_driver_sql("UPDATE carma_memory_history SET peak_mib = 2 WHERE task_id = 'b'")
    second.exec_driver_sql("UPDATE carma_memory_history SET peak_mib = 2 WHERE task_id = 'a'")
    first.exec_driver_sql("COMMIT")
    failed: list[BaseException] = []
    try:
        second.exec_driver_sql("COMMIT")
    except sa.exc.DBAPIError as exc:
        failed.append(store._error(exc))
    finally:
        first.close()
        second.close()
        engine.dispose()
        store.close()
    assert failed and isinstance(failed[0], StoreUnreachableError), failed


def test_the_kinds_are_store_errors_for_callers_that_catch_any() -> None:
    assert issubclass(StoreRefusedError, StoreError) and issubclass(StoreUnreachableError, StoreError)
    assert not issubclass(StoreRefusedError, StoreUnreachableError)
    assert not issubclass(StoreUnreachableError, StoreRefusedError)
