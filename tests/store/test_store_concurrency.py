"""Several processes on one store: no 'database is locked', no lost writes."""

from __future__ import annotations

import multiprocessing
import subprocess
import sys
import time

import pytest
from store_helpers import at, placement

from carma_airflow.store import Store, TryOutcome

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
