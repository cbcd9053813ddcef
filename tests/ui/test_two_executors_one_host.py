"""Two CarmaExecutors on one host: each writes its own live snapshot (``executor:<id>``) and the
page merges them (carma_airflow/store/live_snapshots.py); a gone executor's snapshot is dropped while
another on its host runs, and kept (stale) while none does."""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from ui_helpers import HOST, UUIDS, snapshot_body

from carma_airflow.config.settings import CarmaSettings
from carma_airflow.core.gpu import ClusterView
from carma_airflow.executor.bookkeeping import LiveView
from carma_airflow.store.live_snapshots import current, name_of
from carma_airflow.store.peers import ExecutorRecord
from carma_airflow.store.store import Store
from carma_airflow.ui.state import build_state

pytestmark = pytest.mark.db


def _register(store: Store, eid: str, now: datetime, *, beat_s: float = 1, stopped: bool = False) -> None:
    beat = now - timedelta(seconds=beat_s)
    rec = ExecutorRecord(eid, HOST, 1, now - timedelta(minutes=5), beat, stopped_at=beat if stopped else None)
    store.register_executor(rec)


def _body(eid: str, at: datetime, tenant_key: str, mib: int) -> dict[str, Any]:
    body = snapshot_body(at)
    body["executor"] = eid
    for g in body["gpus"]:
        g["tenants"] = []
    body["gpus"][0]["tenants"] = [{"label": tenant_key, "key": tenant_key, "reserved_mib": mib, "since": 0.0}]
    body["waiting"] = [{"label": f"w.{eid}", "key": f"w/{eid}", "since": at.timestamp() - 5, "memory_mib": 100}]
    return body


def test_two_executors_on_a_host_write_two_snapshots(tmp_path: Path) -> None:
    settings = CarmaSettings.load({"gpu_backend": "simulated", "host": HOST}.get, str(tmp_path))
    view = ClusterView(now=0.0, gpus=())
    ids = (f"{HOST}:1:a", f"{HOST}:2:b")
    puts = [LiveView(settings, "p", "q", eid).snapshot(1.0, view, [], 0, 0, []) for eid in ids]
    assert [p.body["executor"] for p in puts] == list(ids)
    names = {p.snapshot for p in puts}
    assert names == {name_of(f"{HOST}:1:a"), name_of(f"{HOST}:2:b")}  # the old key was executor:<host> for both


def test_the_page_merges_two_executors_snapshots_on_one_host(store: Store, now: datetime) -> None:
    a, b, gone = f"{HOST}:1:a", f"{HOST}:2:b", f"{HOST}:0:old"
    _register(store, a, now)
    _register(store, b, now)
    _register(store, gone, now, beat_s=600, stopped=True)
    store.put_snapshot(name_of(a), now, _body(a, now, "ka", 1000))
    store.put_snapshot(name_of(b), now - timedelta(seconds=1), _body(b, now - timedelta(seconds=1), "kb", 2000))
    stale = now - timedelta(seconds=600)
    store.put_snapshot(name_of(gone), stale, _body(gone, stale, "k-gone", 9000))
    store.put_snapshot(f"executor:{HOST}", stale, snapshot_body(stale))  # the key before executor ids
    state = build_state(store, now=now)
    assert sorted(e["id"] for e in state["executors"]) == [a, b]  # the gone one and the old key are not listed
    assert [g["uuid"] for g in state["gpus"]] == UUIDS[:3]  # each GPU once, not once per executor
    g0 = state["gpus"][0]
    assert sorted(t["key"] for t in g0["tenants"]) == ["ka", "kb"]  # both executors' tenants
    assert g0["reserved_mib"] == 3000
    assert {w["key"] for w in state["waiting"]} == {f"w/{a}", f"w/{b}"}


def test_a_host_whose_executors_are_gone_keeps_its_newest_snapshot(store: Store, now: datetime) -> None:
    old, older = f"{HOST}:1:a", f"{HOST}:2:b"
    _register(store, old, now, beat_s=120, stopped=True)
    _register(store, older, now, beat_s=300)
    at = now - timedelta(seconds=120)
    store.put_snapshot(name_of(old), at, _body(old, at, "ka", 1000))
    before = now - timedelta(seconds=300)
    store.put_snapshot(name_of(older), before, _body(older, before, "kb", 2000))
    store.put_snapshot(f"executor:{HOST}", before, snapshot_body(before))
    state = build_state(store, now=now)
    (ex,) = state["executors"]
    assert ex["id"] == old and ex["stale"]
    assert all(g["snapshot_stale"] for g in state["gpus"]) and len(state["gpus"]) == 3


def test_a_snapshot_from_before_executor_ids_is_its_hosts_view_while_no_executor_writes_one(
    store: Store, now: datetime
) -> None:
    store.put_snapshot(f"executor:{HOST}", now, snapshot_body(now))
    assert list(current(store.snapshots("executor:"), store.executors(), now.timestamp(), 30.0)) == [f"executor:{HOST}"]
    eid = f"{HOST}:1:a"
    _register(store, eid, now)
    store.put_snapshot(name_of(eid), now, _body(eid, now, "ka", 1000))
    assert list(current(store.snapshots("executor:"), store.executors(), now.timestamp(), 30.0)) == [name_of(eid)]


def test_an_unregistered_executors_fresh_snapshot_counts_as_running(store: Store, now: datetime) -> None:
    # its registration failed (the store was unreachable at start): unknown is not gone
    a, b = f"{HOST}:1:a", f"{HOST}:2:b"
    _register(store, a, now)
    store.put_snapshot(name_of(a), now, _body(a, now, "ka", 1000))
    store.put_snapshot(name_of(b), now, _body(b, now, "kb", 2000))
    assert sorted(e["id"] for e in build_state(store, now=now)["executors"]) == [a, b]


def test_forgetting_an_executor_deletes_its_snapshot(store: Store, now: datetime) -> None:
    a, b = f"{HOST}:1:a", f"{HOST}:2:b"
    for eid in (a, b):
        _register(store, eid, now)
        store.put_snapshot(name_of(eid), now, _body(eid, now, "k" + eid, 1000))
    store.forget_executors([a])
    assert list(store.snapshots("executor:")) == [name_of(b)]
