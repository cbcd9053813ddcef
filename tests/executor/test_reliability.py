"""Faults provoked for real against CarmaExecutor: killed processes, failing GPUs, a lost store,
an executor that dies while its tasks run, OOM loops and tasks that can never fit.

The executor, monitor (simulated GPUs in a ledger file), placer and store are the real ones; the
task supervisor is the conftest's fake at ``run_workload``.
"""

from __future__ import annotations

import json
import os
import signal
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import pytest
import sqlalchemy as sa
from airflow.utils.state import TaskInstanceState
from executor_helpers import abandon, make_workload, release, run_until, seen_env, submit
from private_pg import PrivatePostgres
from tcp_proxy import TcpProxy

from carma_airflow.monitor.ledger import Ledger
from carma_airflow.store.records import TryOutcome

OOM = {
    "state": "up_for_retry",
    "failure_kind": "cuda-oom",
    "exc_type": "OutOfMemoryError",
    "message": "CUDA out of memory. Tried to allocate 2.00 GiB",
    "peak_mib": 20000,
}


def _snapshot(ex):
    snaps = ex.store.snapshots("executor:")
    assert len(snaps) == 1
    return next(iter(snaps.values()))[1]


def test_a_sigkilled_task_releases_its_gpus_and_is_not_taken_for_an_oom(executor_factory) -> None:
    ex = executor_factory(gpus="1xA100-40GB", behaviour={"t": {"seconds": 30}})
    w = make_workload("t", config={"memory": "8GiB"})
    submit(ex, w)
    pid = ex.active[w.key].handle.pid
    assert pid and [t.key for t in ex.tenants["GPU-SIM-0000"]]
    os.kill(pid, signal.SIGKILL)  # as the host's OOM killer would
    run_until(ex, lambda: not ex.active)
    assert ex.get_event_buffer()[w.key][0] == TaskInstanceState.FAILED
    assert ex.tenants["GPU-SIM-0000"] == []
    rec = ex.store.latest_for("dag", "t")[0]
    assert rec.outcome == TryOutcome.FAILED and "killed" in rec.summary
    assert ex.store.ooms() == []
    # the next try is not planned as an OOM recovery: same estimate, no crashed GPU avoided
    submit(ex, make_workload("t", try_number=2, config={"memory": "8GiB"}))
    retry = next(iter(ex.active.values())).request
    assert retry.memory.mib == 8192 and not retry.recovered


def test_a_task_on_a_failing_gpu_fails_with_the_fault_and_its_retry_goes_to_a_healthy_gpu(executor_factory) -> None:
    train = {"peak_mib": 6000, "seconds": 30, "ramp_s": 0.2}
    ex = executor_factory(
        gpus="2xA100-40GB", behaviour={"t": {"train": train}}, fault_kill_seconds="60", snapshot_period="0.1"
    )
    w = make_workload("t", config={"memory": "8GiB"})
    submit(ex, w)
    (gpu,) = ex.active[w.key].gpu_uuids
    run_until(ex, lambda: any(a.pid > 0 for a in Ledger(ex.parts.ledger_path).allocations()))
    Ledger(ex.parts.ledger_path).set_fault(gpu, "Xid 79: GPU has fallen off the bus")
    run_until(ex, lambda: not ex.active)  # the training run fails by itself, long before 60 s
    rec = ex.store.latest_for("dag", "t")[0]
    assert rec.outcome == TryOutcome.FAILED and "gpu-fault" in rec.summary
    assert "unspecified launch failure" in rec.summary
    run_until(ex, lambda: any(g["health"] == "quarantined" for g in _snapshot(ex)["gpus"]))
    bad = next(g for g in _snapshot(ex)["gpus"] if g["uuid"] == gpu)
    assert bad["health"] == "quarantined" and "fallen off the bus" in bad["health_reason"]
    w2 = make_workload("t", try_number=2, config={"memory": "8GiB"})
    submit(ex, w2)
    assert ex.active[w2.key].gpu_uuids != (gpu,)
    # healthy again: it takes placements again
    Ledger(ex.parts.ledger_path).set_fault(gpu, None)
    other = make_workload("u", config={"memory": "8GiB", "exclusive": True})
    run_until(ex, lambda: ex.monitor.latest()[gpu].error is None)
    submit(ex, other)
    run_until(ex, lambda: other.key in ex.active)
    assert ex.active[other.key].gpu_uuids == (gpu,)


def test_a_task_hanging_on_a_failed_gpu_is_stopped_after_the_grace_time(executor_factory) -> None:
    ex = executor_factory(gpus="2xA100-40GB", behaviour={"t": {"seconds": 60}}, fault_kill_seconds="1")
    w = make_workload("t", config={"memory": "8GiB"})
    submit(ex, w)
    (gpu,) = ex.active[w.key].gpu_uuids
    Ledger(ex.parts.ledger_path).set_fault(gpu, "Xid 48: double bit ECC error")
    started = time.time()
    run_until(ex, lambda: not ex.active, timeout=20)
    assert time.time() - started < 15
    assert ex.get_event_buffer()[w.key][0] == TaskInstanceState.FAILED
    rec = ex.store.latest_for("dag", "t")[0]
    assert rec.outcome == TryOutcome.FAILED and f"stopped: GPU {gpu} failed (Xid 48" in rec.summary
    assert ex.tenants[gpu] == []


def test_an_oom_loop_ends_with_what_memory_it_reached_and_what_to_declare(executor_factory) -> None:
    ex = executor_factory(gpus="2xA100-40GB", behaviour={"t": {"seconds": 0.2, "result": OOM}}, oom_retries="1")
    for try_number in (1, 2):
        submit(ex, make_workload("t", try_number=try_number, config={"memory": "2GiB"}))
        run_until(ex, lambda: not ex.active)
    first, last = sorted(ex.store.latest_for("dag", "t"), key=lambda p: p.try_number)
    assert "retried on a GPU with more free memory" in first.summary
    # what it held (its peak, 20000 MiB: the message does not say) plus what it asked (2 GiB) (issue 41)
    assert "CUDA OOM on 2 tries, the last at 22048 MiB" in last.summary
    assert "'memory': '27GiB'" in last.summary  # 22048 * 1.25 MiB in GiB rounded up; the placer adds headroom
    assert len(ex.store.ooms()) == 2


@pytest.mark.parametrize(
    ("config", "why"),
    [({"memory": "60GiB"}, "60"), ({"gpus": 4, "memory": "1GiB"}, "4 GPUs")],
)
def test_a_task_that_can_never_fit_fails_at_once(executor_factory, config, why) -> None:
    ex = executor_factory(gpus="2xA100-40GB")
    w = make_workload("t", config=config)
    submit(ex, w)
    assert not ex.waiting and w.key in ex.bare  # refused in the first pass: its process fails with the reason
    run_until(ex, lambda: not ex.bare)
    assert why in json.loads(seen_env("t")["CARMA_REFUSED"])["reason"]
    rec = ex.store.latest_for("dag", "t")[0]
    assert rec.outcome.value == "failed" and rec.summary.startswith("never fits") and why in rec.summary
    assert w.key not in ex.running


def test_after_a_restart_running_tries_are_adopted_and_ended_ones_closed(executor_factory) -> None:
    # "long" must outlive the second executor's start (its launcher imports Airflow: seconds on a
    # loaded machine): it runs until it was adopted (60 s at most)
    behaviour = {"long": {"seconds": 60, "until": "adopted"}, "short": {"seconds": 0.1}}
    first = executor_factory(gpus="2xA100-40GB", behaviour=behaviour)
    long, short = make_workload("long", config={"memory": "8GiB"}), make_workload("short", config={"memory": "8GiB"})
    submit(first, long, short)
    long_gpu = first.active[long.key].gpu_uuids
    time.sleep(1.0)  # "short" ends while no executor watches it
    assert first.writer is not None and first.writer.flush()  # the launches were recorded
    # the executor dies: nothing of it runs any more, its task processes do
    abandon(first)

    second = executor_factory(gpus="2xA100-40GB")
    assert set(second.flow.orphans) == {first_key(long)}  # short ended: closed from its result file
    assert second.writer is not None and second.writer.flush()
    short_rec = second.store.latest_for("dag", "short")[0]
    assert short_rec.outcome == TryOutcome.SUCCESS
    # the running try keeps its GPU reserved before the scheduler hands it over
    assert [t.key for t in second.tenants[long_gpu[0]]] == [first_key(long)]
    stray = make_workload("gone").ti  # a try this host knows nothing about: the scheduler resets it
    assert second.try_adopt_task_instances([long.ti, stray]) == [stray]
    assert long.key in second.active and long.key in second.running
    release("adopted")
    run_until(second, lambda: not second.active, timeout=40)
    assert second.get_event_buffer()[long.key][0] == TaskInstanceState.SUCCESS
    assert second.store.latest_for("dag", "long")[0].outcome == TryOutcome.SUCCESS
    assert second.tenants[long_gpu[0]] == []


def first_key(w) -> str:
    from carma_airflow.keys import request_key

    return request_key(w.key)


# -- the store goes away ----------------------------------------------------------------------
PG_ADMIN_URL = os.environ.get("CARMA_TEST_PG_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres")


@dataclass
class Outage:
    url: str  # the store URL the executor is given
    down: Callable[[], None]
    up: Callable[[], None]
    seconds: float


# The server-stopped outage: 20 s is more than twice the writer's longest pause between two tries
# (8 s) and than the executor's peer timeout set below, so the writer has retried at its longest
# pause and the executor's own heartbeats have lapsed before the store returns, as in a minute's
# outage (CARMA_OUTAGE_SECONDS=60 runs a minute; bench/store_outage.py cuts 60 s).
OUTAGE_S = float(os.environ.get("CARMA_OUTAGE_SECONDS", "20"))
OUTAGE_PEER_TIMEOUT_S = "8"


@pytest.fixture(params=["server-stopped", "connection-cut"])
def store_outage(request) -> Iterator[Outage]:
    if request.param == "server-stopped":
        # a PostgreSQL server of the test's own, stopped with pg_ctl for a minute and started again
        pg = PrivatePostgres()
        pg.start()
        try:
            yield Outage(pg.url, pg.stop, pg.start, OUTAGE_S)
        finally:
            pg.remove()
        return
    # the shared server stays up; a TCP forwarder in front of it closes every connection and
    # refuses new ones, as a network partition would
    name = f"carma_outage_{uuid.uuid4().hex[:10]}"
    admin = sa.create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.exec_driver_sql(f'CREATE DATABASE "{name}"')
    url = sa.engine.make_url(PG_ADMIN_URL)
    proxy = TcpProxy(url.host or "127.0.0.1", url.port or 5432)
    proxy.up()
    try:
        yield Outage(
            url.set(port=proxy.port, database=name).render_as_string(hide_password=False),
            proxy.down,
            proxy.up,
            min(OUTAGE_S, 15.0),
        )
    finally:
        proxy.down()
        with admin.connect() as conn:
            conn.exec_driver_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.dispose()


@pytest.mark.postgres
@pytest.mark.slow
def test_placement_goes_on_while_the_store_is_gone_and_nothing_is_lost(executor_factory, store_outage) -> None:
    outage = store_outage
    ex = executor_factory(
        gpus="2xA100-40GB", store_url=outage.url, snapshot_period="0.2", peer_timeout_seconds=OUTAGE_PEER_TIMEOUT_S
    )
    before = make_workload("before", config={"memory": "4GiB"})
    submit(ex, before)
    run_until(ex, lambda: not ex.active)

    outage.down()  # PostgreSQL is gone for the executor
    cut = time.time()
    during = [make_workload(f"during{i}", config={"memory": "4GiB"}) for i in range(6)]
    submit(ex, *during)
    assert len(ex.active) == 6  # placed from memory
    run_until(ex, lambda: not ex.active, flush=False)
    # kept in order: per task its waiting and running records, its end and its learned peak, and
    # its measured activity where the monitor saw it run alone
    held = ex.writer.pending if ex.writer is not None else 0
    assert 4 * len(during) <= held <= 5 * len(during)
    while time.time() - cut < outage.seconds:
        ex.sync()
        time.sleep(0.5)
    events = ex.get_event_buffer()
    assert all(events[w.key][0] == TaskInstanceState.SUCCESS for w in during)

    outage.up()
    run_until(ex, lambda: ex.writer is not None and ex.writer.pending == 0, timeout=30)
    records = {p.task_id: p for p in ex.store.placements()}
    assert set(records) == {"before"} | {w.ti.task_id for w in during}
    assert all(r.outcome == TryOutcome.SUCCESS and r.gpu_uuids and r.pid for r in records.values())
    assert ex.store.peaks("dag", "during0") == [1000]  # learned memory reached the store too
    run_until(ex, lambda: _snapshot(ex)["pending_store_writes"] == 0, timeout=5)  # the UI sees it next


def test_a_waiting_tasks_reason_is_written_when_its_kind_changes_or_once_a_minute() -> None:
    # found by the 2,000-task load run: every pass rewrote every waiting task's reason (its
    # counts change with every placement), thousands of writes that stalled the scheduler loop
    from carma_airflow.executor.tries import WAIT_RECORD_S, Try, TryState

    w = Try(key=None, rkey="dag/t/r/-1/1", ti=None, state=TryState.WAITING)

    def _worth_recording(attempt: Try, summary: str, now: float) -> bool:
        return attempt.worth_recording(summary, now)

    assert _worth_recording(w, "waiting: no GPU with 6.0 GiB free (7 tenant-cap, 1 memory)", 100.0)
    assert not _worth_recording(w, "waiting: no GPU with 6.0 GiB free (6 tenant-cap, 2 memory)", 101.0)
    assert not _worth_recording(w, "waiting: no GPU with 6.0 GiB free (8 memory)", 101.5)  # same headline
    assert _worth_recording(w, "waiting: no idle GPU (4 not-idle)", 102.0)  # another kind of reason
    assert not _worth_recording(w, "waiting: no idle GPU (3 not-idle)", 102.0 + WAIT_RECORD_S - 1)
    assert _worth_recording(w, "waiting: no idle GPU (3 not-idle)", 102.0 + WAIT_RECORD_S)


def test_an_mps_fault_quarantines_its_server_and_stops_the_other_clients_for_a_retry(executor_factory) -> None:
    mps_fault = {
        "state": "up_for_retry",
        "failure_kind": "gpu-fault",
        "exc_type": "RuntimeError",
        "message": "CUDA error: CUDA_ERROR_MPS_CLIENT_TERMINATED",
    }
    ex = executor_factory(
        gpus="1xA100-40GB",
        behaviour={"bad": {"seconds": 1.0, "result": mps_fault}, "ok": {"seconds": 60}},
        snapshot_period="0.1",
    )
    bad, ok = make_workload("bad", config={"memory": "4GiB"}), make_workload("ok", config={"memory": "4GiB"})
    submit(ex, bad)
    submit(ex, ok)
    assert ex.active[ok.key].gpu_uuids == ex.active[bad.key].gpu_uuids == ("GPU-SIM-0000",)
    run_until(ex, lambda: not ex.active, timeout=20)  # the neighbour is stopped, not left to hang
    rec = ex.store.latest_for("dag", "ok")[0]
    assert rec.outcome == TryOutcome.FAILED and "stopped: MPS server of GPU GPU-SIM-0000 faulted" in rec.summary
    later = make_workload("later", config={"memory": "4GiB"})
    submit(ex, later)
    assert later.key not in ex.active  # no new client on the faulted server until it restarts
    assert "quarantined" in ex.waiting[later.key].last_summary
    run_until(ex, lambda: any(g["health"] == "quarantined" for g in _snapshot(ex)["gpus"]))
    assert "until the MPS daemon restarts" in _snapshot(ex)["gpus"][0]["health_reason"]
