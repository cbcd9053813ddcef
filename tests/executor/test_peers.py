"""Two CarmaExecutors (two schedulers) on one store and one GPU: no double booking, refusal on
SQLite, reconciliation only of tries whose owner is gone, adoption of a peer that died later."""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Iterator

import pytest
import sqlalchemy as sa
from executor_helpers import make_workload, run_until, submit

from carma_airflow.executor.peers import Peers
from carma_airflow.keys import request_key

pytestmark = pytest.mark.db

PG_ADMIN_URL = os.environ.get("CARMA_TEST_PG_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres")
GIB16 = {"memory": "16GiB"}
LONG = {name: {"seconds": 8} for name in ("a1", "a2", "b1", "b2")}


@pytest.fixture
def pg_url() -> Iterator[str]:
    name = f"carma_peers_{uuid.uuid4().hex[:10]}"
    admin = sa.create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.exec_driver_sql(f'CREATE DATABASE "{name}"')
    try:
        yield sa.engine.make_url(PG_ADMIN_URL).set(database=name).render_as_string(hide_password=False)
    finally:
        with admin.connect() as conn:
            conn.exec_driver_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.dispose()


def _peers(ex) -> Peers:
    return ex.flow.peers  # type: ignore[no-any-return]


def _close(*executors) -> None:
    for ex in executors:
        run_until(ex, lambda ex=ex: not ex.active, timeout=30)
        _peers(ex).close()


def _booked_mib(*executors) -> int:
    """What every executor's own tries hold on the one GPU (a peer's, laid over, counted once)."""
    return sum(r.mib for ex in executors for r in _peers(ex).ledger.mine())


@pytest.mark.postgres
def test_two_executors_on_postgres_never_book_the_same_memory(executor_factory, pg_url: str) -> None:
    opts = {"store_url": pg_url, "peer_timeout_seconds": "3"}
    a = executor_factory(gpus="1xA100-40GB", behaviour=LONG, **opts)
    b = executor_factory(gpus="1xA100-40GB", behaviour=LONG, **opts)
    a1, a2 = make_workload("a1", config=GIB16), make_workload("a2", config=GIB16)
    b1, b2 = make_workload("b1", config=GIB16), make_workload("b2", config=GIB16)
    submit(a, a1, a2)
    submit(b, b1, b2)
    deadline = time.time() + 6
    while time.time() < deadline:  # both pass again and again while the first two run: nothing more fits
        a.sync()
        b.sync()
        assert _booked_mib(a, b) <= 40960 - 512, "two schedulers placed on the same free memory"
        time.sleep(0.05)
    assert len(a.active) + len(b.active) == 2 and _peers(a).shared and _peers(b).shared
    waiting = b if b.waiting else a
    assert any(r.key in _peers(waiting).ledger.foreign for r in _peers(waiting).ledger)  # the peer's, counted
    run_until(b, lambda: (b.sync() or a.sync() or True) and not (a.waiting or b.waiting), timeout=30)
    run_until(a, lambda: (b.sync() or True) and not (a.active or b.active), timeout=30)
    deadline = time.time() + 5
    while a.store.shared_reservations() and time.time() < deadline:  # released: gone at the next beat
        time.sleep(0.1)
    assert a.store.shared_reservations() == []
    _close(a, b)


def test_a_second_executor_on_sqlite_places_nothing_and_says_why(executor_factory) -> None:
    opts = {"peer_timeout_seconds": "3"}
    behaviour = {"a1": {"seconds": 8}, "b1": {"seconds": 4}, "b2": {"seconds": 4}}
    a = executor_factory(gpus="1xA100-40GB", behaviour=behaviour, **opts)
    b = executor_factory(gpus="1xA100-40GB", behaviour=behaviour, **opts)
    assert _peers(a).refusal is None and _peers(b).refusal is not None
    a1 = make_workload("a1", config=GIB16)
    submit(a, a1)
    run_until(a, lambda: a1.key in a.active, timeout=10)
    b1, b2 = make_workload("b1", config=GIB16), make_workload("b2", config=GIB16)
    submit(b, b1, b2)
    assert b1.key in b.waiting and not b.active
    assert "SQLite serves one scheduler only" in b.waiting[b1.key].last_summary
    assert b.writer.flush() and a.writer.flush()
    assert "use PostgreSQL" in b.store.latest_for("dag", "b1")[0].summary
    # the first one dies: the second places from its next beat on, counting the try still running
    a.monitor.stop()
    _peers(a).close()
    a.flow.tries.forget_all()
    run_until(b, lambda: len(b.active) == 1, timeout=10)
    for _ in range(20):
        b.sync()
        time.sleep(0.05)
    assert len(b.active) == 1 and request_key(a1.key) in _peers(b).ledger.foreign  # a1 + b1 fill the GPU
    _close(b)


@pytest.mark.postgres
def test_restart_reconciles_only_tries_whose_owner_is_gone_and_adopts_a_peer_that_died_later(
    executor_factory, pg_url: str
) -> None:
    opts = {"store_url": pg_url, "peer_timeout_seconds": "3"}
    behaviour = {"a1": {"seconds": 8}}
    a = executor_factory(gpus="1xA100-40GB", behaviour=behaviour, **opts)
    a1 = make_workload("a1", config=GIB16)
    submit(a, a1)
    run_until(a, lambda: a1.key in a.active, timeout=10)
    assert a.writer.flush() and a.store.placement(request_key(a1.key)).owner == _peers(a).me
    b = executor_factory(gpus="1xA100-40GB", behaviour=behaviour, **opts)
    assert not b.flow.orphans  # a live peer's try is not a left-over
    # a dies now, after b started: Airflow hands its try over
    a.monitor.stop()
    _peers(a).close()
    a.flow.tries.forget_all()
    a.running.clear()
    assert b.try_adopt_task_instances([a1.ti]) == []
    assert a1.key in b.active
    assert b.store.placement(request_key(a1.key)).owner == _peers(b).me
    run_until(b, lambda: not b.active, timeout=30)
    assert b.get_event_buffer()[a1.key][0] == "success"
    _close(b)


@pytest.mark.postgres
def test_a_gone_executors_ended_try_stops_counting_and_its_end_is_recorded(tmp_path, pg_url: str) -> None:
    import subprocess
    from dataclasses import replace
    from datetime import datetime, timezone

    from carma_airflow.settings import CarmaSettings
    from carma_airflow.store import PlacementRecord, Store, TryOutcome
    from carma_airflow.store.peers import ExecutorRecord, ReservationRecord
    from carma_airflow.taskrun.outcome import ResultState, TryResult, write_result

    values = {"gpu_backend": "simulated", "store_url": pg_url, "host": "h1", "peer_timeout_seconds": "3"}
    settings = CarmaSettings.load(values.get, str(tmp_path))
    store = Store(pg_url)
    store.migrate()
    dead = subprocess.Popen(["true"])
    dead.wait()  # a pid that no longer runs
    long_ago = datetime.fromtimestamp(time.time() - 60, tz=timezone.utc)
    store.register_executor(ExecutorRecord("h1:1:gone", "h1", dead.pid, long_ago, long_ago))
    store.owner = "h1:1:gone"
    running = PlacementRecord("k", "d", "t", "r", 1, long_ago, outcome=TryOutcome.RUNNING, host="h1", pid=dead.pid)
    store.upsert_placement(replace(running, ti_id="ti"))
    with store.reservation_pass("h1:1:gone", ["h1"]) as txn:
        txn.publish([ReservationRecord("k", "h1:1:gone", "d.t", ("GPU-0",), 16384, time.time() - 60)])
    (tmp_path / "carma" / "results").mkdir(parents=True)
    write_result(TryResult(ResultState.SUCCESS, peak_mib=15000), tmp_path / "carma" / "results" / "ti.json")
    peers = Peers(settings, Store(pg_url))
    peers.beat()  # registers, sees the gone executor, reaps
    peers.beat()
    assert store.shared_reservations() == []
    rec = store.placement("k")
    assert rec is not None and rec.outcome == TryOutcome.SUCCESS and rec.peak_mib == 15000
    store.close()
