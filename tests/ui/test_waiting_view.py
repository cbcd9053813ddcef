"""One view of the waiting tries across executors: the page and the CLI read every executor's
rows from the store, not the one live snapshot that two executors on a host both write."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta

import pytest
from ui_helpers import HOST, placement, snapshot_body

from carma_airflow.store import TryOutcome
from carma_airflow.store.peers import ExecutorRecord
from carma_airflow.store.store import Store
from carma_airflow.ui.state import build_state

pytestmark = pytest.mark.db


def _executor(name: str, now: datetime, *, beat_s: float = 1, stopped: bool = False) -> ExecutorRecord:
    beat = now - timedelta(seconds=beat_s)
    return ExecutorRecord(
        f"{HOST}:{name}", HOST, 1, now - timedelta(minutes=5), beat, stopped_at=beat if stopped else None
    )


def _two_schedulers(store: Store, now: datetime, *, b_alive: bool = True) -> None:
    store.register_executor(_executor("a", now))
    store.register_executor(_executor("b", now, beat_s=1 if b_alive else 300))
    t0 = now - timedelta(seconds=60)
    for i in range(7):  # 3 wait in executor a, 4 in b (SQLite: b places nothing while a does)
        rec = placement(f"train{i}", 1, TryOutcome.WAITING, [], t0 + timedelta(seconds=i))
        store.upsert_placement(replace(rec, owner=f"{HOST}:{'a' if i < 3 else 'b'}"))
    body = snapshot_body(now)
    body["waiting"] = []  # the snapshot the page read last was b's, or a's before it had any
    store.put_snapshot(f"executor:{HOST}", now, body)


def test_the_page_lists_every_executors_waiting_tries_whichever_wrote_the_snapshot(store: Store, now: datetime) -> None:
    _two_schedulers(store, now)
    state = build_state(store, now=now)
    assert sorted(w["label"] for w in state["waiting"]) == [f"carma_demo.train{i}" for i in range(7)]
    assert state["counts"]["waiting"] == len(state["waiting"])  # the chip and the counts agree
    assert state["executors_running"] == 2 and state["not_running"] is None
    assert {w["owner_running"] for w in state["waiting"]} == {True}
    assert state["waiting"][0]["waiting_s"] == pytest.approx(60, abs=1)  # oldest first, from decided_at


def test_tries_of_an_executor_that_stopped_beating_say_so(store: Store, now: datetime) -> None:
    _two_schedulers(store, now, b_alive=False)
    waiting = {w["label"]: w for w in build_state(store, now=now)["waiting"]}
    assert waiting["carma_demo.train0"]["owner_running"] is True
    gone = waiting["carma_demo.train5"]
    assert gone["owner_running"] is False and f"its CarmaExecutor ({HOST}:b) is not running" in gone["reason"]


def test_no_executor_beating_is_said_once_at_the_top(store: Store, now: datetime) -> None:
    store.register_executor(_executor("a", now, beat_s=600, stopped=True))
    state = build_state(store, now=now)
    assert state["executors_running"] == 0
    assert state["not_running"].startswith(f"no CarmaExecutor is running: the last one ({HOST}:a) stopped 10 min ago")
