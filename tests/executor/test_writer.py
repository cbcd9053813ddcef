"""The executor's store writer: order kept, caller never waits for the database, outages held
(transient errors retried with backoff), a write the store refuses parked without holding the
writes behind it, a bounded queue, and what is held at close made by the next writer."""

from __future__ import annotations

import itertools
import json
import os
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from tcp_proxy import TcpProxy

from carma_airflow.executor.bookkeeping import (
    AddActivity,
    AddPeak,
    MarkEnded,
    RecordOom,
    SaveDocument,
    UpsertPlacement,
    decode_write,
    encode_write,
    journal,
)
from carma_airflow.executor.bookkeeping.writer import HELD_FILE, PARKED_FILE, PRUNE_EVERY_S, StoreWriter
from carma_airflow.store.records import OomRecord, PlacementRecord, TryOutcome
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


def test_a_bad_record_is_parked_and_the_writes_behind_it_are_made(store: Store, tmp_path: Path, caplog) -> None:
    writer = StoreWriter(store, state_dir=tmp_path / "state")
    writer.put(AddPeak("dag", "t", -5, _at(time.time())))  # RecordError: a bug in the caller
    writer.put(AddPeak("dag", "t", 2000, _at(time.time() + 1)))
    assert writer.flush(timeout_s=10)
    assert store.peaks("dag", "t") == [2000]
    assert "refused write add_peak; parked" in caplog.text
    assert writer.parked == 1 and len(_parked(tmp_path / "state")) == 1
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
    from carma_airflow.executor.bookkeeping import PutSnapshot

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


# -- errors by kind, a bounded queue, nothing lost across a restart (issue 24 item 5) ------------

PG_ADMIN_URL = os.environ.get("CARMA_TEST_PG_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres")


@pytest.fixture
def pg_url() -> Iterator[str]:
    """A fresh, migrated PostgreSQL database of this test's own."""
    name = f"carma_writer_{uuid.uuid4().hex[:10]}"
    admin = sa.create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.exec_driver_sql(f'CREATE DATABASE "{name}"')
    url = sa.engine.make_url(PG_ADMIN_URL).set(database=name).render_as_string(hide_password=False)
    try:
        Store(url).migrate()
        yield url
    finally:
        with admin.connect() as conn:
            conn.exec_driver_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.dispose()


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def real_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    if request.param == "sqlite":
        s = Store(f"sqlite:///{tmp_path / 'carma.db'}")
        s.migrate()
    else:
        s = Store(request.getfixturevalue("pg_url"))
    yield s
    s.close()


def _parked(state: Path) -> list[dict[str, Any]]:
    path = state / PARKED_FILE
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def _placement(key: str, at: float) -> PlacementRecord:
    return PlacementRecord(key, "dag", key, "run", 1, _at(at), outcome=TryOutcome.RUNNING, gpu_uuids=("GPU-0",))


def test_a_write_the_store_refuses_is_parked_and_reported_and_the_rest_land(
    real_store: Store, tmp_path: Path, caplog
) -> None:
    """A NOT NULL constraint of the real schema, broken by one write among others: that one is
    parked (file, log, count), every other lands in order, nothing else is lost."""
    state = tmp_path / "state"
    writer = StoreWriter(real_store, state_dir=state, retry_s=0.05)
    now = time.time()
    writer.put(AddPeak("dag", "t", 1000, _at(now)))
    writer.put(UpsertPlacement(_placement("k1", now)))
    writer.put(AddPeak(None, "t", 1001, _at(now + 1)))  # type: ignore[arg-type]  # dag_id NOT NULL
    writer.put(MarkEnded("k1", now + 2, TryOutcome.SUCCESS, 1500, "success"))
    for i in range(20):
        writer.put(AddPeak("dag", "t", 2000 + i, _at(now + 3 + i)))
    assert writer.flush(timeout_s=20), "the refused write held the queue"
    assert writer.pending == 0 and writer.parked == 1
    assert real_store.peaks("dag", "t", limit=50) == [1000] + [2000 + i for i in range(20)]
    rec = real_store.placement("k1")
    assert rec is not None and rec.outcome == TryOutcome.SUCCESS and rec.peak_mib == 1500
    parked = _parked(state)
    assert len(parked) == 1 and parked[0]["write"] == "add_peak"
    assert "null" in parked[0]["error"].lower() and "failed" in parked[0]["error"]
    assert parked[0]["record"]["f"]["peak_mib"] == 1001  # the write itself, for an operator to replay
    assert "refused write add_peak; parked in" in caplog.text
    writer.close()


@pytest.mark.postgres
def test_a_value_that_does_not_fit_its_column_is_parked_on_postgres(pg_url: str, tmp_path: Path) -> None:
    store = Store(pg_url)
    writer = StoreWriter(store, state_dir=tmp_path)
    writer.put(AddPeak("dag", "t", 2**40, _at(time.time())))  # integer out of range: a data error
    writer.put(AddPeak("dag", "t", 7, _at(time.time() + 1)))
    assert writer.flush(timeout_s=10)
    assert store.peaks("dag", "t") == [7]
    assert [p["write"] for p in _parked(tmp_path)] == ["add_peak"]
    writer.close()
    store.close()


@pytest.mark.postgres
def test_an_outage_with_200_writes_queued_loses_none(pg_url: str, tmp_path: Path) -> None:
    """The TCP path to PostgreSQL is cut (every connection closed, new ones refused) for a few
    seconds while 200 writes are put; they land in order once it is back.  bench/store_outage.py
    runs the same for 60 s."""
    url = sa.engine.make_url(pg_url)
    proxy = TcpProxy(url.host or "127.0.0.1", url.port or 5432)
    proxy.up()
    store = Store(url.set(port=proxy.port).render_as_string(hide_password=False) + "?connect_timeout=2")
    writer = StoreWriter(store, state_dir=tmp_path, retry_s=0.1, max_retry_s=1.0)
    try:
        writer.put(AddPeak("dag", "t", 1, _at(time.time())))
        assert writer.flush(timeout_s=10)
        proxy.down()
        start = time.time()
        for i in range(200):
            writer.put(AddPeak("dag", "t", 10_000 + i, _at(start + 1 + i)))
        time.sleep(OUTAGE_S)
        assert writer.pending == 200 and writer.parked == 0  # held, not parked, not dropped
        proxy.up()
        assert writer.flush(timeout_s=30)
        direct = Store(pg_url)
        assert direct.peaks("dag", "t", limit=500) == [1] + [10_000 + i for i in range(200)]
        direct.close()
    finally:
        writer.close(timeout_s=1)
        proxy.down()
        store.close()


OUTAGE_S = 6.0


def test_transient_errors_are_retried_with_a_growing_pause(tmp_path: Path) -> None:
    gone = Store("postgresql+psycopg://carma@127.0.0.1:9/none?connect_timeout=1")  # nothing listens on port 9
    tries: list[float] = []

    class Counting(Store):
        def add_peak(self, *args, **kwargs) -> None:  # type: ignore[no-untyped-def]
            tries.append(time.monotonic())
            gone.add_peak(*args, **kwargs)

    writer = StoreWriter(Counting(f"sqlite:///{tmp_path / 'x.db'}"), retry_s=0.1, max_retry_s=0.8)
    writer.put(AddPeak("dag", "t", 1, _at(time.time())))
    time.sleep(3.0)
    writer.close(timeout_s=0.1)
    gaps = [b - a for a, b in itertools.pairwise(tries)]
    assert len(tries) >= 3 and writer.parked == 0
    assert gaps[-1] > gaps[0] + 0.2  # backoff: the pause grows ...
    assert max(gaps) < 0.8 + 1.5  # ... up to max_retry_s (plus the connect attempt)


def test_the_queue_is_bounded_and_full_pauses_placement_without_dropping(tmp_path: Path) -> None:
    gone = Store("postgresql+psycopg://carma@127.0.0.1:9/none?connect_timeout=1")
    writer = StoreWriter(gone, retry_s=0.2, capacity=10, state_dir=tmp_path)
    for i in range(9):
        writer.put(AddPeak("dag", "t", i, _at(time.time() + i)))
    assert not writer.full
    started = time.perf_counter()
    for i in range(9, 15):
        writer.put(AddPeak("dag", "t", i, _at(time.time() + i)))
    assert time.perf_counter() - started < 0.5  # put never blocks the scheduler
    assert writer.full and writer.pending == 15  # past the bound, held all the same
    store = Store(f"sqlite:///{tmp_path / 'back.db'}")
    store.migrate()
    writer.store = store  # the database is back
    assert writer.flush(timeout_s=10)
    assert not writer.full and store.peaks("dag", "t", limit=20) == list(range(15))
    writer.close()


def test_what_is_held_at_close_is_saved_and_made_first_by_the_next_writer(tmp_path: Path) -> None:
    state = tmp_path / "state"
    gone = Store("postgresql+psycopg://carma@127.0.0.1:9/none?connect_timeout=1")
    gone.owner = "host:1:old"
    writer = StoreWriter(gone, retry_s=0.2, state_dir=state)
    now = time.time()
    writer.put(UpsertPlacement(_placement("k1", now)))
    writer.put(MarkEnded("k1", now + 1, TryOutcome.OOM, 2048, "CUDA OOM"))
    writer.put(RecordOom(OomRecord("k1", "dag", "k1", 1, _at(now + 1), "GPU-0", 2048, "oom")))
    writer.put(AddPeak("dag", "t", 1234, _at(now)))
    writer.close(timeout_s=0.5)
    assert len(list((state / journal.FOLDER).glob("*.jsonl"))) == 1  # kept in its journal

    store = Store(f"sqlite:///{tmp_path / 'carma.db'}")
    store.migrate()
    store.owner = "host:2:new"
    again = StoreWriter(store, state_dir=state)  # the next executor: held writes first, before anything else
    assert again.pending == 0  # made before the constructor returned (the store is up)
    assert [p.name for p in (state / journal.FOLDER).glob("*.jsonl")] == [again._journal.path.name]
    rec = store.placement("k1")
    assert rec is not None and rec.outcome == TryOutcome.OOM and rec.peak_mib == 2048
    assert rec.owner == "host:1:old"  # the executor that placed it, gone: the next one may reconcile it
    assert rec.decided_at == _at(now) and rec.gpu_uuids == ("GPU-0",)
    assert [o.peak_mib for o in store.ooms()] == [2048] and store.peaks("dag", "t") == [1234]
    again.close()


def test_a_held_write_that_cannot_be_read_back_is_parked_not_lost(tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir()
    good = encode_write(AddPeak("dag", "t", 5, _at(time.time())))
    (state / HELD_FILE).write_text('{"__t": "NoSuchWrite", "f": {}}\n' + good + "\n")
    store = Store(f"sqlite:///{tmp_path / 'carma.db'}")
    store.migrate()
    writer = StoreWriter(store, state_dir=state)
    assert store.peaks("dag", "t") == [5]
    assert [p["write"] for p in _parked(state)] == ["unreadable"] and writer.parked == 1
    writer.close()


_KILLED_WRITER = """
import os, signal, sys, time
from datetime import datetime, timezone
from carma_airflow.executor.bookkeeping import StoreWriter
from carma_airflow.executor.bookkeeping import AddPeak, MarkEnded, RecordOom, UpsertPlacement
from carma_airflow.store.records import OomRecord, PlacementRecord, TryOutcome
from carma_airflow.store.store import Store

store_url, state, made_first = sys.argv[1], sys.argv[2], int(sys.argv[3])
store = Store(store_url)
store.owner = "host:1:killed"
writer = StoreWriter(store, state_dir=state, retry_s=0.05, max_retry_s=0.2)
at = datetime.fromtimestamp(1_800_000_000, tz=timezone.utc)
for i in range(made_first):  # made while the store is up
    writer.put(AddPeak("dag", "t", i, at))
assert writer.flush(timeout_s=20)
writer.put(RecordOom(OomRecord("k1", "dag", "t", 1, at, "GPU-0", 2048, "oom")))
assert writer.flush(timeout_s=20)
gone = Store("postgresql+psycopg://carma@127.0.0.1:9/none?connect_timeout=1")  # the database goes away
gone.owner = store.owner
writer.store = gone
record = PlacementRecord("k2", "dag", "t", "r", 1, at, outcome=TryOutcome.RUNNING, gpu_uuids=("GPU-0",))
writer.put(UpsertPlacement(record))
for i in range(200):
    writer.put(AddPeak("dag", "t", 10_000 + i, at))
writer.put(MarkEnded("k2", 1_800_000_001.0, TryOutcome.OOM, 4096, "CUDA OOM"))
# one write: the writer's log line (another thread, the same stdout) may come between print's pieces
sys.stdout.write(f"queued {writer.pending}\\n")
sys.stdout.flush()
os.kill(os.getpid(), signal.SIGKILL)  # no close, no atexit: the scheduler killed outright
"""


def test_a_killed_writer_loses_nothing_it_had_queued(tmp_path: Path) -> None:
    """SIGKILL with 202 writes queued behind a store outage: the next writer on the host makes
    every one, in order, once; the OOM event the killed one had made is not counted twice (its
    journal line is replayed, the store keeps one event per try)."""
    import subprocess
    import sys

    state = tmp_path / "state"
    url = f"sqlite:///{tmp_path / 'carma.db'}"
    Store(url).migrate()
    child = subprocess.run(
        [sys.executable, "-c", _KILLED_WRITER, url, str(state), "5"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert child.returncode == -9, child.stderr
    assert "queued 202" in child.stdout
    # a kill between the store's commit of the OOM event and its "-" line: the event is in the
    # journal still (written back here, as such a kill leaves it) and is made again
    path = next((state / journal.FOLDER).glob("*.jsonl"))
    oom = RecordOom(OomRecord("k1", "dag", "t", 1, _at(1_800_000_000), "GPU-0", 2048, "oom"))
    path.write_text(f"+0 {encode_write(oom)}\n" + path.read_text())

    store = Store(url)
    store.owner = "host:2:new"
    again = StoreWriter(store, state_dir=state)
    assert again.flush(timeout_s=30) and again.pending == 0
    assert store.peaks("dag", "t", limit=500) == list(range(5)) + [10_000 + i for i in range(200)]
    rec = store.placement("k2")
    assert rec is not None and rec.outcome == TryOutcome.OOM and rec.peak_mib == 4096
    assert rec.owner == "host:1:killed"  # a gone executor's try: the next one reconciles it
    assert len(store.ooms()) == 1  # replayed, counted once
    assert [p.name for p in (state / journal.FOLDER).glob("*.jsonl")] == [again._journal.path.name]
    again.close()
    assert not list((state / journal.FOLDER).glob("*.jsonl"))  # all made: nothing left for anyone
    store.close()


def test_a_living_writers_journal_is_not_taken(tmp_path: Path) -> None:
    state = tmp_path / "state"
    gone = Store("postgresql+psycopg://carma@127.0.0.1:9/none?connect_timeout=1")
    alive = StoreWriter(gone, retry_s=0.2, state_dir=state)
    alive.put(AddPeak("dag", "t", 7, _at(time.time())))
    store = Store(f"sqlite:///{tmp_path / 'carma.db'}")
    store.migrate()
    other = StoreWriter(store, state_dir=state)  # a second scheduler on the host
    assert other.pending == 0 and store.peaks("dag", "t") == []
    assert alive.pending == 1 and alive._journal is not None and alive._journal.path.exists()
    other.close()
    alive.close(timeout_s=0.2)
    third = StoreWriter(store, state_dir=state)  # after the first one stopped: its write is made
    assert third.flush(timeout_s=10) and store.peaks("dag", "t") == [7]
    third.close()


def test_a_journal_never_named_is_removed_once_old_and_unlocked(tmp_path: Path) -> None:
    """A writer killed between creating its hidden journal and naming it leaves an empty
    ``.new-*`` file: the next recovery removes it when its lock is free and it is over a minute
    old, and leaves a young one (a writer starting now) and a locked one alone."""
    import fcntl

    folder = tmp_path / journal.FOLDER
    folder.mkdir()
    old, young, held = (folder / f".new-{n}" for n in ("old", "young", "held"))
    for path in (old, young, held):
        path.touch()
    past = time.time() - 2 * journal.UNBORN_AGE_S
    os.utime(old, (past, past))
    os.utime(held, (past, past))
    with held.open("r") as lock:
        fcntl.flock(lock.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        found = journal.recover(tmp_path)
    assert found.writes == [] and found.files == []
    assert not old.exists() and young.exists() and held.exists()


def test_every_ordered_write_survives_the_held_file(tmp_path: Path) -> None:
    now = _at(time.time())
    writes = [
        UpsertPlacement(replace(_placement("k", time.time()), reasons=("chose GPU-0",), summary="s", pid=3)),
        MarkEnded("k", time.time(), TryOutcome.FAILED, None, None),
        AddPeak("dag", "t", 10, now, "run", 2),
        RecordOom(OomRecord("k", "dag", "t", 2, now, None, None, "m")),
        AddActivity("dag", "t", 0.5, "process", now, "run", -1),
        SaveDocument("model:interference", 1.5, {"a": [1, 2], "b": {"c": None}}),
    ]
    assert [decode_write(encode_write(w)) for w in writes] == writes


# -- telemetry retention (issue 24 item 7) ----------------------------------------------------------


def _simulate_telemetry(store: Store, retention: str, hours: float, gpus: int = 8) -> tuple[int, StoreWriter]:
    """What an executor writes for ``hours`` of simulated time: a row per GPU every 30 s (the live
    view's cadence), with the writer's background pruning on the same simulated clock."""
    from carma_airflow.config.settings import CarmaSettings
    from carma_airflow.executor.bookkeeping import RecordSamples
    from carma_airflow.executor.bookkeeping.liveview import SAMPLES_EVERY_S
    from carma_airflow.store.records import SampleRecord

    settings = CarmaSettings.load({"telemetry_retention": retention}.get, "/nonexistent")
    clock = [1_800_000_000.0]
    writer = StoreWriter(store, background=False, retention_s=settings.telemetry_retention_s, clock=lambda: clock[0])
    steps = int(hours * 3600 / SAMPLES_EVERY_S)
    for _ in range(steps):
        at = _at(clock[0])
        rows = tuple(SampleRecord("h", f"GPU-{i}", i, "A100", at, 40960, 100, 0.5) for i in range(gpus))
        writer.put(RecordSamples(rows, SAMPLES_EVERY_S))
        clock[0] += SAMPLES_EVERY_S
    return steps, writer


def test_a_day_of_telemetry_with_default_settings_stays_within_the_retention(store: Store, capsys) -> None:
    steps, _ = _simulate_telemetry(store, "7d", hours=24)
    rows = store.count_samples()
    with capsys.disabled():
        print(f"\n24 h simulated, 8 GPUs, default telemetry_retention (7d): carma_gpu_sample holds {rows} rows")
    assert rows == steps * 8 == 23_040  # a day is within 7 days: nothing old enough to go yet
    assert rows <= 7 * 24 * 120 * 8  # the bound the default keeps to (161,280 rows for 8 GPUs)


def test_telemetry_older_than_the_retention_is_pruned_in_the_background(store: Store, capsys) -> None:
    steps, writer = _simulate_telemetry(store, "2h", hours=24)
    rows = store.count_samples()
    with capsys.disabled():
        print(f"24 h simulated, 8 GPUs, telemetry_retention = 2h: carma_gpu_sample holds {rows} rows")
    per_round = int(PRUNE_EVERY_S / 30) * 8
    assert 2 * 120 * 8 <= rows <= 2 * 120 * 8 + per_round  # 2 h of rows, plus at most one round's worth
    assert writer.pruned == steps * 8 - rows  # every other row was deleted by the pruner, none lost otherwise
    oldest = min(s.at for s in store.samples(limit=100_000))
    assert (_at(1_800_000_000.0 + steps * 30) - oldest).total_seconds() <= 2 * 3600 + PRUNE_EVERY_S + 30


def test_a_full_writer_pauses_placement_and_nothing_is_dropped(executor_factory) -> None:
    from executor_helpers import make_workload, run_until, submit

    ex = executor_factory(gpus="1xA100-40GB")
    writer = ex.writer
    writer.capacity = writer.pending  # at its bound: as many writes held as it may hold
    held = make_workload("held", config={"memory": "4GiB"})
    submit(ex, held)
    for _ in range(5):
        ex.sync()
    assert held.key in ex.waiting and not ex.active  # no placement while the writer is full
    writer.capacity = 20_000  # the store took what it held
    run_until(ex, lambda: held.key not in ex.waiting, timeout=20)
    run_until(ex, lambda: not ex.active, timeout=20)
    assert ex.get_event_buffer()[held.key][0] == "success"
