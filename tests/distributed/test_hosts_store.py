"""The store's hosts and dispatches (migration 0003), on SQLite and PostgreSQL."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from carma_airflow.store.errors import RecordError
from carma_airflow.store.records import DispatchRecord, HostRecord
from carma_airflow.store.store import Store

pytestmark = pytest.mark.db

T0 = datetime(2026, 12, 1, 12, 0, tzinfo=timezone.utc)


def host(name: str, at: datetime, gpus: int = 2) -> HostRecord:
    return HostRecord(
        host=name,
        queue=f"carma-{name}",
        heartbeat_at=at,
        started_at=T0,
        backend="simulated",
        agent_version="carma-agent/1",
        pid=42,
        gpus=tuple({"uuid": f"GPU-{name}-{i}", "index": i, "memory_total_mib": 40960} for i in range(gpus)),
    )


def test_publish_replaces_the_row_and_keeps_the_worker_heartbeat(store: Store) -> None:
    store.publish_host(host("a", T0))
    assert store.worker_beat("a", T0 + timedelta(seconds=1), pid=7)
    store.publish_host(host("a", T0 + timedelta(seconds=2), gpus=3))
    store.publish_host(host("b", T0))
    rows = store.hosts()
    assert [r.host for r in rows] == ["a", "b"]
    a = rows[0]
    assert a.heartbeat_at == T0 + timedelta(seconds=2)
    assert [g["uuid"] for g in a.gpus] == ["GPU-a-0", "GPU-a-1", "GPU-a-2"]
    assert a.worker_at == T0 + timedelta(seconds=1) and a.worker_pid == 7  # the agent does not erase it
    assert rows[1].worker_at is None
    assert store.worker_beat("a", None)  # the worker stopped
    assert store.host("a") is not None and store.host("a").worker_at is None  # type: ignore[union-attr]
    assert not store.worker_beat("nobody", T0)
    assert store.forget_host("b") and store.host("b") is None


def test_a_host_needs_a_name(store: Store) -> None:
    with pytest.raises(RecordError, match="non-empty name"):
        store.publish_host(host("", T0))


def test_a_lost_dispatch_stays_lost_when_the_worker_answers_late(store: Store) -> None:
    store.record_dispatch(DispatchRecord("d/t/r/-1/1", "a", "carma-a", "c1", T0))
    store.record_dispatch(DispatchRecord("d/t/r/-1/2", "b", "carma-b", "c2", T0))
    assert store.end_dispatch("d/t/r/-1/1", T0 + timedelta(seconds=30), "lost", "host a is out of service")
    assert not store.end_dispatch("d/t/r/-1/1", T0 + timedelta(seconds=40), "ended")
    lost = store.dispatch("d/t/r/-1/1")
    assert lost is not None and lost.state == "lost" and lost.reason == "host a is out of service"
    assert [d.key for d in store.dispatches(host="b", state="sent")] == ["d/t/r/-1/2"]
    assert [d.key for d in store.dispatches()] == ["d/t/r/-1/2", "d/t/r/-1/1"]
    with pytest.raises(RecordError, match="'ended' or 'lost'"):
        store.end_dispatch("d/t/r/-1/2", T0, "sent")
    with pytest.raises(RecordError, match="unknown dispatch state"):
        store.record_dispatch(DispatchRecord("x", "a", "q", "c", T0, state="gone"))


def test_dispatch_counts_per_host_in_one_state(store: Store) -> None:
    for i, h in enumerate(["a", "a", "b"]):
        store.record_dispatch(DispatchRecord(f"d/t{i}/r/-1/1", h, f"carma-{h}", f"c{i}", T0))
    store.end_dispatch("d/t1/r/-1/1", T0 + timedelta(seconds=5), "ended")
    assert store.dispatch_counts("sent") == {"a": 1, "b": 1}
    assert store.dispatch_counts("ended") == {"a": 1}
    assert store.dispatch_counts("lost") == {}
    with pytest.raises(RecordError, match="dispatch state"):
        store.dispatch_counts("running")
