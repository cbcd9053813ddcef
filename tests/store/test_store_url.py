"""URLs, passwords in messages, typed errors, and what the store package may import."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from store_helpers import at, placement

from carma_airflow.core.errors import CarmaError
from carma_airflow.store import RecordError, Store, StoreError, default_url
from carma_airflow.store.url import mask_password

REPO = Path(__file__).resolve().parents[2]


def test_masked_url_hides_the_password() -> None:
    store = Store("postgresql+psycopg://carma:s3cret@db.example:5432/carma")
    assert store.masked_url == "postgresql+psycopg://carma:***@db.example:5432/carma"
    assert "s3cret" not in repr(store)


def test_masked_url_without_a_password_is_the_url(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'carma.db'}"
    assert Store(url).masked_url == url
    assert Store("postgresql+psycopg://postgres@127.0.0.1:5432/test").masked_url == (
        "postgresql+psycopg://postgres@127.0.0.1:5432/test"
    )


def test_default_url() -> None:
    assert default_url("/opt/airflow") == "sqlite:////opt/airflow/carma.db"
    assert default_url("/opt/airflow/") == "sqlite:////opt/airflow/carma.db"
    assert Store.default_url("/opt/airflow") == "sqlite:////opt/airflow/carma.db"
    assert default_url("~/airflow") == f"sqlite:///{os.path.expanduser('~')}/airflow/carma.db"


def test_mask_password_for_urls_sqlalchemy_cannot_read() -> None:
    assert mask_password("weird+driver://u:p@ss@host/db") == "weird+driver://u:***@host/db"
    assert mask_password("sqlite:////tmp/x.db") == "sqlite:////tmp/x.db"


def test_unreadable_and_unsupported_urls_are_store_errors() -> None:
    with pytest.raises(StoreError, match="cannot read the store URL") as info:
        Store("not a url at all")
    assert isinstance(info.value, CarmaError)
    with pytest.raises(StoreError, match="SQLite and PostgreSQL") as info:
        Store("mysql+pymysql://carma:s3cret@host/db")
    assert "s3cret" not in str(info.value)


def test_unreachable_server_is_a_store_error_without_the_password() -> None:
    store = Store("postgresql+psycopg://carma:s3cret@127.0.0.1:1/carma?connect_timeout=3")
    with pytest.raises(StoreError) as info:
        store.placements()
    message = str(info.value)
    assert "s3cret" not in message
    assert "postgresql+psycopg://carma:***@127.0.0.1:1/carma" in message
    assert "check that the database server is running" in message


@pytest.mark.db
def test_missing_tables_say_to_migrate(db_url: str) -> None:
    store = Store(db_url)
    with pytest.raises(StoreError, match=r"migrate\(\)"):
        store.running()


def test_missing_directory_says_what_to_check(tmp_path: Path) -> None:
    store = Store(f"sqlite:///{tmp_path / 'no' / 'such' / 'dir' / 'carma.db'}")
    with pytest.raises(StoreError, match="directory exists"):
        store.migrate()


def test_bad_times_and_limits_are_record_errors(tmp_path: Path) -> None:
    store = Store(f"sqlite:///{tmp_path / 'carma.db'}")
    store.migrate()
    store.upsert_placement(placement())
    with pytest.raises(RecordError, match="datetime or seconds"):
        store.mark_started("k1", "yesterday")  # type: ignore[arg-type]
    with pytest.raises(RecordError):
        store.latest_for("train", "fit", limit=0)
    assert issubclass(RecordError, ValueError)
    assert store.mark_started("k1", at(1))


def test_sqlite_runs_in_wal_mode(tmp_path: Path) -> None:
    import sqlite3

    path = tmp_path / "carma.db"
    Store(f"sqlite:///{path}").migrate()
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


IMPORTS = """
import sys
import carma_airflow.store
light = sorted(m for m in sys.modules if m.split('.')[0] in ('sqlalchemy', 'alembic', 'airflow', 'pynvml'))
import carma_airflow.store.store, carma_airflow.store.schema
from carma_airflow.store import Store
Store('sqlite:///' + sys.argv[1]).migrate()
heavy = sorted({m.split('.')[0] for m in sys.modules if m.split('.')[0] in ('airflow', 'pynvml')})
print(','.join(light) + '|' + ','.join(heavy))
"""


def test_store_imports_neither_airflow_nor_nvml(tmp_path: Path) -> None:
    out = subprocess.run(
        [sys.executable, "-c", IMPORTS, str(tmp_path / "carma.db")], capture_output=True, text=True, check=True
    )
    light, heavy = out.stdout.strip().split("|")
    assert light == "", f"importing carma_airflow.store (records, errors) loaded {light}"
    assert heavy == "", f"the store loaded {heavy}"


def test_unreachable_postgres_fails_the_tests_unless_skipped() -> None:
    target = "tests/store/test_store_history.py::test_peaks_reject_bad_input"
    env = {k: v for k, v in os.environ.items() if k != "CARMA_SKIP_PG"}
    env["CARMA_TEST_PG_URL"] = "postgresql+psycopg://postgres@127.0.0.1:1/postgres"
    env["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"  # a bare pytest starts in a second
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", target]
    failed = subprocess.run(cmd, check=False, cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert failed.returncode != 0
    assert "PostgreSQL for the store tests is not reachable" in failed.stdout
    assert "CARMA_SKIP_PG=1" in failed.stdout
    assert "1 passed" in failed.stdout  # the SQLite half still ran

    skipped = subprocess.run(
        cmd, check=False, cwd=REPO, env={**env, "CARMA_SKIP_PG": "1"}, capture_output=True, text=True, timeout=120
    )
    assert skipped.returncode == 0, skipped.stdout
    assert "1 passed, 1 skipped" in skipped.stdout
