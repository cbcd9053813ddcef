"""Executors' heartbeats, shared reservations and try owners in the store (several schedulers)."""

from __future__ import annotations

import threading
import time
from datetime import datetime, timezone

import pytest

from carma_airflow.store import PlacementRecord, Store, TryOutcome
from carma_airflow.store.peers import ExecutorRecord, ReservationRecord, host_lock_key

pytestmark = pytest.mark.db


def _at(t: float) -> datetime:
    return datetime.fromtimestamp(t, tz=timezone.utc)


def _executor(name: str, t: float) -> ExecutorRecord:
    return ExecutorRecord(name, "h", 100, _at(t), _at(t))


def _res(key: str, owner: str, mib: int = 16384, since: float = 1_900_000_000.0) -> ReservationRecord:
    return ReservationRecord(key, owner, f"d.{key}", ("GPU-0",), mib, since, False, {"sm_activity": 0.5})


def test_a_published_reservation_and_a_placement_keep_the_tries_fence(store: Store) -> None:
    now = time.time()
    store.register_executor(_executor("a", now))
    fenced = ReservationRecord("t1", "a", "d.t1", ("GPU-0",), 16384, now, False, None, {"kept_margin_mib": 2048})
    unfenced = ReservationRecord("t2", "a", "d.t2", ("GPU-0",), 8192, now, False, None, {"kept_margin_mib": None})
    with store.reservation_pass("a", ["h"]) as txn:
        txn.publish([fenced, unfenced, _res("t3", "a")])
    got = {r.key: r.fence for r in store.shared_reservations("a")}
    assert got == {"t1": {"kept_margin_mib": 2048}, "t2": {"kept_margin_mib": None}, "t3": None}
    rec = PlacementRecord("d/t/r/-1/1", "d", "t", "r", 1, _at(now), fence={"kept_margin_mib": 0})
    store.upsert_placement(rec)
    stored = store.placement(rec.key)
    assert stored is not None and stored.fence == {"kept_margin_mib": 0}


def test_executors_register_beat_and_stop(store: Store) -> None:
    now = time.time()
    rows = store.register_executor(_executor("a", now - 10))
    assert [r.id for r in rows] == ["a"]
    store.register_executor(_executor("b", now))
    rows = store.beat_executor("a", now)
    assert [r.id for r in rows] == ["a", "b"]  # oldest first
    a = rows[0]
    assert a.alive(now, 30) and not a.alive(now + 31, 30)
    store.stop_executor("b", now)
    assert not store.executors()[1].alive(now, 30)


def test_a_pass_sees_the_others_reservations_and_publishes_its_own(store: Store) -> None:
    now = time.time()
    store.register_executor(_executor("a", now))
    store.register_executor(_executor("b", now))
    with store.reservation_pass("a", ["h"]) as txn:
        assert txn.others == []
        txn.publish([_res("t1", "a"), _res("t2", "a")])
        txn.set_shared(True)
    with store.reservation_pass("b", ["h"]) as txn:
        assert [r.key for r in txn.others] == ["t1", "t2"]
        assert txn.others[0].activity == {"sm_activity": 0.5} and txn.others[0].gpu_uuids == ("GPU-0",)
        assert {e.id: e.shared for e in txn.executors} == {"a": True, "b": False}
        txn.replace_mine([_res("t3", "b")])
    with store.reservation_pass("a", ["h"]) as txn:
        assert [r.key for r in txn.others] == ["t3"]
        txn.replace_mine([_res("t2", "a")])
    assert [r.key for r in store.shared_reservations("a")] == ["t2"]
    store.beat_executor("b", now, released=["t3", "t2"])  # only its own go
    assert [r.key for r in store.shared_reservations()] == ["t2"]


def test_claiming_tries_moves_their_placements_and_reservations(store: Store) -> None:
    store.owner = "a"
    store.upsert_placement(PlacementRecord("k1", "d", "t", "r", 1, _at(1_900_000_000.0), outcome=TryOutcome.RUNNING))
    assert store.placement("k1").owner == "a"  # type: ignore[union-attr]
    with store.reservation_pass("a", ["h"]) as txn:
        txn.publish([_res("k1", "a")])
    assert store.claim_tries(["k1"], "b") == 1
    assert store.placement("k1").owner == "b"  # type: ignore[union-attr]
    assert [r.owner for r in store.shared_reservations()] == ["b"]
    store.owner = None  # a CLI writing the try keeps its owner
    store.upsert_placement(PlacementRecord("k1", "d", "t", "r", 1, _at(1_900_000_000.0), summary="x"))
    assert store.placement("k1").owner == "b"  # type: ignore[union-attr]
    assert store.drop_reservations(["k1"]) == 1 and store.shared_reservations() == []


def test_forgotten_executors_take_their_reservations_with_them(store: Store) -> None:
    store.register_executor(_executor("old", 1_900_000_000.0))
    with store.reservation_pass("old", ["h"]) as txn:
        txn.publish([_res("k", "old")])
    store.forget_executors(["old"])
    assert store.executors() == [] and store.shared_reservations() == []


def test_host_lock_keys_are_stable_signed_64_bit() -> None:
    assert host_lock_key("gpu-01") == host_lock_key("gpu-01") != host_lock_key("gpu-02")
    assert -(2**63) <= host_lock_key("gpu-01") < 2**63


@pytest.mark.postgres
@pytest.mark.parametrize("backend", ["postgresql"], indirect=True)
def test_two_passes_on_one_gpu_host_take_turns(store: Store, any_url: str) -> None:
    """The advisory lock: a second pass on the same host waits until the first one commits, and
    then sees what it published."""
    other = Store(any_url)
    inside, seen = threading.Event(), []

    def second() -> None:
        inside.wait(10)
        with other.reservation_pass("b", ["h"]) as txn:
            seen.append([r.key for r in txn.others])

    thread = threading.Thread(target=second)
    thread.start()
    with store.reservation_pass("a", ["h"]) as txn:
        inside.set()
        time.sleep(0.5)  # the second pass is blocked on the lock meanwhile
        assert seen == []
        txn.publish([_res("k", "a")])
    thread.join(10)
    assert seen == [["k"]]
    with store.reservation_pass("a", ["h"]), other.reservation_pass("b", ["another-host"]):
        pass  # other hosts' passes do not wait
    other.close()
