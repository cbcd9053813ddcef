"""The executor's store writer: order kept, caller never waits for the database, outages held,
a bad record dropped without holding the writes behind it."""

from __future__ import annotations

import threading
import time
from datetime import datetime, timezone
from pathlib import Path

import pytest

from carma_airflow.executor.writer import StoreWriter
from carma_airflow.executor.writes import AddPeak
from carma_airflow.store.store import Store


@pytest.fixture
def store(tmp_path: Path) -> Store:
    s = Store(f"sqlite:///{tmp_path / 'carma.db'}")
    s.migrate()
    return s


class SlowStore(Store):
    """The real store, with each peak write taking ``delay`` seconds and noting its thread."""

    delay = 0.3
    threads: list[str]

    def add_peak(self, *args, **kwargs) -> None:  # type: ignore[no-untyped-def]
        self.threads.append(threading.current_thread().name)
        time.sleep(self.delay)
        super().add_peak(*args, **kwargs)


@pytest.mark.parametrize("background", [True, False])
def test_writes_are_made_in_the_order_they_were_put(store: Store, background: bool) -> None:
    writer = StoreWriter(store, background=background)
    for i in range(40):
        writer.put(AddPeak("dag", "t", 1000 + i, _at(time.time() + i)))
    assert writer.flush(timeout_s=10)
    assert writer.pending == 0
    assert store.peaks("dag", "t", limit=40) == [1000 + i for i in range(40)]
    writer.close()


def test_the_caller_does_not_wait_for_the_database(tmp_path: Path) -> None:
    slow = SlowStore(f"sqlite:///{tmp_path / 'slow.db'}")
    slow.migrate()
    slow.threads = []
    writer = StoreWriter(slow)
    started = time.perf_counter()
    for i in range(5):
        writer.put(AddPeak("dag", "t", 1000 + i, _at(time.time() + i)))
    put_s = time.perf_counter() - started
    assert put_s < slow.delay  # five writes of 0.3 s each were only queued
    assert writer.pending >= 4
    assert writer.flush(timeout_s=10)
    assert slow.peaks("dag", "t") == [1000 + i for i in range(5)]
    assert set(slow.threads) == {"carma-store-writer"}
    writer.close()


def test_an_outage_holds_the_writes_and_the_store_gets_them_after(store: Store) -> None:
    gone = Store("postgresql+psycopg://carma@127.0.0.1:9/none?connect_timeout=1")  # nothing listens on port 9
    writer = StoreWriter(gone, retry_s=0.1)
    for i in range(3):
        writer.put(AddPeak("dag", "t", 1000 + i, _at(time.time() + i)))
    assert not writer.flush(timeout_s=1.5)  # retried, never made, never dropped
    assert writer.pending == 3
    writer.store = store  # the database is back
    assert writer.flush(timeout_s=10)
    assert store.peaks("dag", "t") == [1000, 1001, 1002]
    writer.close()


def test_a_bad_record_is_dropped_and_the_writes_behind_it_are_made(store: Store, caplog) -> None:
    writer = StoreWriter(store)
    writer.put(AddPeak("dag", "t", -5, _at(time.time())))  # RecordError: a bug in the caller
    writer.put(AddPeak("dag", "t", 2000, _at(time.time() + 1)))
    assert writer.flush(timeout_s=10)
    assert store.peaks("dag", "t") == [2000]
    assert "refused; dropped" in caplog.text
    writer.close()


def test_close_makes_what_is_held_then_stops_the_thread(tmp_path: Path) -> None:
    slow = SlowStore(f"sqlite:///{tmp_path / 'slow.db'}")
    slow.migrate()
    slow.threads = []
    slow.delay = 0.05
    writer = StoreWriter(slow)
    for i in range(10):
        writer.put(AddPeak("dag", "t", 1000 + i, _at(time.time() + i)))
    writer.close(timeout_s=10)
    assert slow.peaks("dag", "t", limit=10) == [1000 + i for i in range(10)]
    assert writer._thread is not None and not writer._thread.is_alive()


def _at(ts: float) -> datetime:
    return datetime.fromtimestamp(ts, tz=timezone.utc)


def test_a_snapshot_is_not_held_behind_a_busy_queue(tmp_path: Path) -> None:
    # found by the 1,000-task load run: with placement rows always queued, the UI's snapshot
    # (best effort, made when the queue is empty) was never written
    from carma_airflow.executor.writes import PutSnapshot

    slow = SlowStore(f"sqlite:///{tmp_path / 'slow.db'}")
    slow.migrate()
    slow.threads, slow.delay = [], 0.25
    writer = StoreWriter(slow, background=True)
    for i in range(12):  # 3 s of ordered writes
        writer.put(AddPeak("dag", "t", 1000 + i, _at(time.time() + i)))
    writer.put(PutSnapshot("executor:test", time.time(), {"n": 1}))
    deadline = time.monotonic() + 2.5
    while "executor:test" not in slow.snapshots("executor:") and time.monotonic() < deadline:
        time.sleep(0.05)
    assert "executor:test" in slow.snapshots("executor:"), "the snapshot waited for the whole queue"
    assert writer.pending > 0  # it went while ordered writes were still held
    assert writer.flush(10)
    writer.close()
