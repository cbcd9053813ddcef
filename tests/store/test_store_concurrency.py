"""Several processes on one store: no 'database is locked', no lost writes."""

from __future__ import annotations

import multiprocessing
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from store_helpers import at, placement

from carma_airflow.store import Store, StoreError, TryOutcome

pytestmark = pytest.mark.db

# Each writer migrates the (empty) database itself, then writes placements, marks, samples and
# peaks in many small transactions, all starting at the same moment as the other writer.
WRITER = """
import sys, time
from datetime import datetime, timedelta, timezone
from carma_airflow.store import PlacementRecord, SampleRecord, Store, TryOutcome

url, name, start, count = sys.argv[1], sys.argv[2], float(sys.argv[3]), int(sys.argv[4])
store = Store(url)
time.sleep(max(0.0, start - time.time()))
store.migrate()
t0 = datetime(2026, 3, 1, tzinfo=timezone.utc)
for i in range(count):
    key = f"{name}-{i}"
    at = t0 + timedelta(seconds=i)
    store.upsert_placement(PlacementRecord(key=key, dag_id="d", task_id=name, run_id="r", try_number=1,
                                           decided_at=at, outcome=TryOutcome.WAITING))
    store.mark_started(key, at)
    store.record_samples([SampleRecord("h", f"GPU-{name}", 0, "A100", at + timedelta(seconds=30 * i))])
    store.peaks("d", name)
    store.mark_ended(key, at, TryOutcome.SUCCESS, peak_mib=i)
    store.add_peak("d", name, i, at)
store.close()
print("ok", name)
"""


def test_two_processes_write_at_once(db_url: str) -> None:
    count = 60
    start = time.time() + 1.0  # both interpreters are up by then
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", WRITER, db_url, name, str(start), str(count)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for name in ("w1", "w2")
    ]
    outputs = [p.communicate(timeout=60) for p in procs]
    for proc, (out, err) in zip(procs, outputs, strict=True):
        assert "locked" not in err
        assert proc.returncode == 0, err
        assert out.startswith("ok")
    store = Store(db_url)
    placements = store.placements(limit=1000)
    assert len(placements) == 2 * count
    assert {p.outcome for p in placements} == {TryOutcome.SUCCESS}
    assert store.peaks("d", "w1", limit=1000) == list(range(count))
    assert len(store.samples(limit=1000)) == 2 * count
    assert store.revision() == store.head_revision()
    store.close()


def _writer_in_rollback_mode(path: Path) -> sqlite3.Connection:
    """A connection to a new SQLite file (rollback-journal mode) that holds its write lock."""
    holder = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    holder.execute("CREATE TABLE other (x)")
    holder.execute("BEGIN IMMEDIATE")
    holder.execute("INSERT INTO other VALUES (1)")
    return holder


def test_a_new_sqlite_file_waits_for_a_writer_before_switching_to_wal(tmp_path: Path) -> None:
    # SQLite refuses the switch to WAL at once (no busy timeout) while another connection holds
    # the write lock of a file still in rollback mode: two processes that open a new store
    # together (the flaky "database is locked" of the test above).  The store waits instead.
    path = tmp_path / "carma.db"
    holder = _writer_in_rollback_mode(path)
    release = threading.Timer(0.3, holder.execute, ("COMMIT",))
    release.start()
    try:
        store = Store(f"sqlite:///{path}", busy_timeout_s=10)
        store.migrate()
        store.upsert_placement(placement("k"))
    finally:
        release.join()
        holder.close()
    assert [p.key for p in store.placements()] == ["k"]
    store.close()
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_the_switch_to_wal_gives_up_after_the_busy_timeout(tmp_path: Path) -> None:
    path = tmp_path / "carma.db"
    holder = _writer_in_rollback_mode(path)
    try:
        started = time.monotonic()
        with pytest.raises(StoreError, match="busy timeout"):
            Store(f"sqlite:///{path}", busy_timeout_s=0.3).migrate()
        assert time.monotonic() - started < 5
    finally:
        holder.close()


def _child_writes(store: Store, queue: multiprocessing.Queue[str]) -> None:
    try:
        store.upsert_placement(placement("child"))
        queue.put(",".join(sorted(p.key for p in store.placements())))
    except Exception as exc:  # reported to the parent
        queue.put(f"error: {exc!r}")


def test_a_store_used_before_fork_works_in_the_child(store: Store) -> None:
    store.upsert_placement(placement("parent"))  # the parent's pool now holds a connection
    ctx = multiprocessing.get_context("fork")
    queue: multiprocessing.Queue[str] = ctx.Queue()
    child = ctx.Process(target=_child_writes, args=(store, queue))
    child.start()
    result = queue.get(timeout=30)
    child.join(timeout=30)
    assert result == "child,parent"
    assert child.exitcode == 0
    store.mark_ended("parent", at(1), TryOutcome.SUCCESS)  # the parent's connections still work
    assert [p.key for p in store.placements()] == ["child", "parent"]
