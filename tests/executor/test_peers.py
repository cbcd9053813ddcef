"""Two CarmaExecutors (two schedulers) on one store and one GPU: no double booking, refusal on
SQLite, reconciliation only of tries whose owner is gone, adoption of a peer that died later."""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Iterator

import pytest
import sqlalchemy as sa
from executor_helpers import OOM_RESULT, abandon, make_workload, release, run_until, seen_env, seen_plan, submit

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
    abandon(a)
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
    # they outlive b's start on a loaded machine: they run until the hand-over is checked (60 s at most)
    behaviour = {"a1": {"seconds": 60, "until": "handed-over"}, "a2": {"seconds": 60, "until": "handed-over"}}
    a = executor_factory(gpus="1xA100-40GB", behaviour=behaviour, **opts)
    a1, a2 = make_workload("a1", config=GIB16), make_workload("a2", config=GIB16)
    submit(a, a1, a2)
    run_until(a, lambda: {a1.key, a2.key} <= set(a.active), timeout=10)
    assert a.writer.flush() and a.store.placement(request_key(a1.key)).owner == _peers(a).me
    b = executor_factory(gpus="1xA100-40GB", behaviour=behaviour, **opts)
    assert not b.flow.orphans  # a live peer's try is not a left-over
    # a dies now, after b started: Airflow hands its tries over
    abandon(a)
    store, reads = b.store, []
    executors = store.executors
    store.executors = lambda: reads.append(1) or executors()  # type: ignore[method-assign]
    assert b.try_adopt_task_instances([a1.ti, a2.ti]) == []
    assert len(reads) == 1  # the other executors read once for the hand-over, not once a try
    store.executors = executors  # type: ignore[method-assign]
    assert a1.key in b.active and a2.key in b.active
    assert b.store.placement(request_key(a1.key)).owner == _peers(b).me
    release("handed-over")
    run_until(b, lambda: not b.active, timeout=30)
    assert b.get_event_buffer()[a1.key][0] == "success"
    _close(b)


@pytest.mark.postgres
def test_a_gone_executors_ended_try_stops_counting_and_its_end_is_recorded(tmp_path, pg_url: str) -> None:
    import subprocess
    from dataclasses import replace
    from datetime import datetime, timezone

    from carma_airflow.config.settings import CarmaSettings
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


@pytest.mark.postgres
def test_a_failed_registration_is_retried_and_no_try_of_the_live_peer_is_touched(executor_factory, pg_url: str) -> None:
    """B starts while its registration cannot be made (a real lock on ``carma_executor`` held by
    another session, B's lock_timeout 0.3 s): B's view is unknown, not empty.  It places nothing,
    reconciles nothing until its registration, retried at each beat, succeeds; then A, alive, keeps
    its running try: not adopted, not closed, its reservation not dropped."""
    opts = {"store_url": pg_url, "peer_timeout_seconds": "60"}  # a beat every 5 s
    # a1 runs until B's view of it is checked (60 s at most)
    behaviour = {"a1": {"seconds": 60, "until": "checked"}, "b1": {"seconds": 1}}
    a = executor_factory(gpus="1xA100-40GB", behaviour=behaviour, **opts)
    a1 = make_workload("a1", config=GIB16)
    submit(a, a1)
    run_until(a, lambda: a1.key in a.active, timeout=20)
    assert a.writer.flush()
    me_a, key = _peers(a).me, request_key(a1.key)

    holder = sa.create_engine(pg_url)
    conn = holder.connect()
    conn.exec_driver_sql("BEGIN")
    conn.exec_driver_sql("LOCK TABLE carma_executor IN ACCESS EXCLUSIVE MODE")
    try:
        impatient = {**opts, "store_url": pg_url + "?options=-c%20lock_timeout%3D300"}
        b = executor_factory(gpus="1xA100-40GB", behaviour=behaviour, **impatient)
        peers_b = _peers(b)
        assert not peers_b.view.known and "lock" in (peers_b.view.error or "")
        assert not peers_b.owner_gone(me_a) and peers_b.owner_state(me_a).value == "unknown"
        assert not b.flow.orphans  # not reconciled on a guess
        b1 = make_workload("b1", config=GIB16)
        submit(b, b1)
        assert b1.key in b.waiting and not b.active
        assert "has not read the other schedulers' state" in b.waiting[b1.key].last_summary
    finally:
        conn.exec_driver_sql("ROLLBACK")
        conn.close()
        holder.dispose()

    run_until(b, lambda: peers_b.view.known, timeout=20)  # the registration, retried, succeeds
    run_until(b, lambda: (a.sync() or True) and b1.key not in b.waiting, timeout=30)
    assert peers_b.owner_state(me_a).value == "alive"
    assert not b.flow.orphans and a1.key in a.active
    rec = b.store.placement(key)
    assert rec is not None and rec.owner == me_a and rec.outcome.value == "running"
    run_until(a, lambda: _peers(a).shared, timeout=20)
    assert [r.key for r in b.store.shared_reservations(owner=me_a)] == [key]  # still reserved, still A's
    release("checked")
    _close(a, b)


@pytest.mark.postgres
def test_the_next_try_after_an_oom_follows_the_recovery_plan_on_the_other_scheduler(
    executor_factory, pg_url: str
) -> None:
    """Try 1 OOMs under A; Airflow hands try 2 to B: B reads the task instance's tries from the
    store and places try 2 by the recovery plan, away from the GPU try 1 crashed on, with more
    memory, counting one OOM try."""
    opts = {"store_url": pg_url, "peer_timeout_seconds": "10"}
    behaviour = {"t": {"seconds": 0.3, "result": OOM_RESULT}}
    a = executor_factory(gpus="2xA100-40GB", behaviour=behaviour, **opts)
    b = executor_factory(gpus="2xA100-40GB", behaviour=behaviour, **opts)
    first = make_workload("t", config={"memory": "2GiB"}, author_retries=0)
    submit(a, first)
    run_until(a, lambda: a.get_event_buffer().get(first.key) is not None or not (a.active or a.waiting), timeout=30)
    run_until(a, lambda: not a.active and not a.waiting, timeout=30)
    assert a.writer.flush()
    crashed = seen_env("t")["CUDA_VISIBLE_DEVICES"]
    assert a.store.latest_for("dag", "t")[0].outcome.value == "oom"
    second = make_workload("t", try_number=2, config={"memory": "2GiB"}, author_retries=0)
    submit(b, second)
    run_until(b, lambda: (a.sync() or True) and second.key in b.active, timeout=30)
    retry = b.active[second.key].request
    assert retry is not None and retry.recovered and retry.memory.mib >= 12500
    assert b.active[second.key].gpu_uuids != (crashed,) and crashed in retry.avoid_gpus
    run_until(b, lambda: not b.active, timeout=30)
    assert seen_plan("t", 2).prior_ooms == 1
    _close(a, b)


def test_a_restart_with_waiting_tries_leaves_the_task_its_oom_tries_and_its_plan(executor_factory) -> None:
    """Try 1 of ``w`` OOMs; its try 2 only waited when its executor stopped (Airflow resets it and
    hands try 3 over).  The never-run try 2 is no OOM try and does not hide try 1's OOM: try 3
    is planned by the recovery planner, with one OOM try spent, not two and not none."""
    # big runs until try 3's plan is checked (60 s at most): it outlives b's start and adoption
    behaviour = {"big": {"seconds": 60, "until": "planned"}, "w": {"seconds": 0.3, "result": OOM_RESULT}}
    a = executor_factory(gpus="1xA100-40GB", behaviour=behaviour, peer_timeout_seconds="3")
    first = make_workload("w", config={"memory": "8GiB"}, author_retries=0)
    submit(a, first)
    run_until(a, lambda: not a.active and not a.waiting, timeout=30)
    big = make_workload("big", config={"memory": "30GiB"})
    second = make_workload("w", try_number=2, config={"memory": "8GiB"}, author_retries=0)
    submit(a, big)
    submit(a, second)
    assert big.key in a.active and second.key in a.waiting  # planned at 12.5 GiB+: no room beside big
    assert a.writer.flush()
    abandon(a)  # the scheduler stops: big runs on, w's try 2 never ran
    b = executor_factory(gpus="1xA100-40GB", behaviour=behaviour, peer_timeout_seconds="3")
    assert b.writer.flush()
    closed = b.store.placement(request_key(second.key))
    assert closed is not None and closed.outcome.value == "failed" and closed.started_at is None
    assert b.try_adopt_task_instances([big.ti]) == []  # the running one is adopted
    third = make_workload("w", try_number=3, config={"memory": "8GiB"}, author_retries=0)
    submit(b, third)
    attempt = b.active.get(third.key) or b.waiting[third.key]
    assert attempt.request is not None and attempt.request.recovered  # planned from try 1's OOM
    assert attempt.request.memory.mib >= 12500 and attempt.prior_ooms == 1
    release("planned")
    run_until(b, lambda: not b.active and not b.waiting, timeout=60)
    assert seen_plan("w", 3).prior_ooms == 1  # one OOM retry spent, the never-run try none
    _close(b)


def test_a_heartbeat_lapsed_past_the_peer_timeout_is_said_and_counted(executor_factory, caplog, monkeypatch) -> None:
    """A scheduler stalled (stopped, swapped out, a store outage) past the peer timeout may have been
    taken for gone by its peers and by Airflow: its next beat says so in the log and the metric."""
    from carma_airflow.executor.bookkeeping import metrics

    ex = executor_factory(gpus="1xA100-40GB", peer_timeout_seconds="60")  # a beat every 20 s: ours only
    peers = _peers(ex)
    lapses: list[int] = []
    monkeypatch.setattr(metrics, "peer_lapse", lambda: lapses.append(1))
    caplog.set_level("WARNING", logger="carma_airflow.executor")
    peers.beat()  # on time: nothing said
    assert lapses == [] and "sent no heartbeat" not in caplog.text
    peers._last_beat_at = time.time() - 95  # the scheduler was stopped for 95 s
    peers.beat()
    assert lapses == [1]
    assert "sent no heartbeat for 95 s, over [carma] peer_timeout_seconds (60 s)" in caplog.text
    peers.beat()  # beating again: said once
    assert lapses == [1]
    _close(ex)
