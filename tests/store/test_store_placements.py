"""Placements: upsert by key, start/end marks, listings, reservations after a restart."""

from __future__ import annotations

import dataclasses
from datetime import datetime, timedelta, timezone

import pytest
from store_helpers import at, placement

from carma_airflow.core.decision import Decision, GpuVerdict, Outcome, Reason
from carma_airflow.store import PlacementRecord, RecordError, Store, TryOutcome

pytestmark = pytest.mark.db


def _plain(rec: PlacementRecord) -> PlacementRecord:
    return dataclasses.replace(rec, id=None)


def test_placement_round_trips_every_field(store: Store) -> None:
    rec = placement(
        "dag/task/run/3/2",
        map_index=3,
        try_number=2,
        started_at=at(5),
        ended_at=at(65),
        outcome=TryOutcome.SUCCESS,
        peak_mib=11_000,
        reasons=("chose GPU 0: 30000 MiB free — ok ✓", 'skipped GPU 1: "quoted", [brackets]'),
    )
    row_id = store.upsert_placement(rec)
    got = store.placement(rec.key)
    assert got is not None
    assert got.id == row_id
    assert _plain(got) == rec
    assert isinstance(got.gpu_uuids, tuple)
    assert isinstance(got.reasons, tuple)
    assert got.decided_at.tzinfo is not None
    assert got.decided_at.utcoffset() == timedelta(0)


def test_empty_json_lists_and_missing_values(store: Store) -> None:
    rec = placement(
        outcome=TryOutcome.WAITING,
        gpu_uuids=(),
        reasons=(),
        host=None,
        estimate_mib=None,
        estimate_source=None,
        summary="",
        policy="",
    )
    store.upsert_placement(rec)
    got = store.placement(rec.key)
    assert got is not None
    assert _plain(got) == rec


def test_times_are_stored_in_utc(store: Store) -> None:
    paris = timezone(timedelta(hours=2))
    store.upsert_placement(placement("aware", decided_at=datetime(2026, 3, 1, 14, 0, tzinfo=paris)))
    store.upsert_placement(placement("naive", decided_at=datetime(2026, 3, 1, 12, 0)))
    for key in ("aware", "naive"):
        got = store.placement(key)
        assert got is not None
        assert got.decided_at == datetime(2026, 3, 1, 12, 0, tzinfo=timezone.utc)
        assert got.decided_at.tzinfo == timezone.utc


def test_upsert_replaces_the_row_with_the_same_key(store: Store) -> None:
    first = store.upsert_placement(placement(outcome=TryOutcome.WAITING, gpu_uuids=(), summary="waiting"))
    second = store.upsert_placement(placement(outcome=TryOutcome.RUNNING, summary="placed", decided_at=at(30)))
    assert first == second
    rows = store.placements()
    assert len(rows) == 1
    assert rows[0].summary == "placed"
    assert rows[0].outcome is TryOutcome.RUNNING
    assert rows[0].gpu_uuids == ("GPU-aaaa", "GPU-bbbb")
    assert rows[0].decided_at == at(30)


def test_mark_started_and_ended(store: Store) -> None:
    store.upsert_placement(placement(outcome=TryOutcome.WAITING))
    assert store.mark_started("k1", at(10))
    got = store.placement("k1")
    assert got is not None
    assert (got.outcome, got.started_at) == (TryOutcome.RUNNING, at(10))

    assert store.mark_ended("k1", at(70), TryOutcome.OOM, peak_mib=39_000)
    got = store.placement("k1")
    assert got is not None
    assert (got.outcome, got.ended_at, got.peak_mib) == (TryOutcome.OOM, at(70), 39_000)


def test_mark_ended_takes_strings_and_epoch_seconds_and_keeps_the_peak(store: Store) -> None:
    store.upsert_placement(placement(peak_mib=5000))
    assert store.mark_ended("k1", at(60).timestamp(), "success")
    got = store.placement("k1")
    assert got is not None
    assert (got.outcome, got.ended_at, got.peak_mib) == (TryOutcome.SUCCESS, at(60), 5000)
    assert got.outcome == "success"  # a str enum: callers may compare with plain strings
    assert f"{got.outcome}" == "success"


def test_mark_started_does_not_revive_a_finished_try(store: Store) -> None:
    store.upsert_placement(placement(outcome=TryOutcome.FAILED))
    assert store.mark_started("k1", at(5))
    got = store.placement("k1")
    assert got is not None
    assert got.outcome is TryOutcome.FAILED


def test_marks_on_an_unknown_key_return_false(store: Store) -> None:
    assert not store.mark_started("nope", at(0))
    assert not store.mark_ended("nope", at(0), TryOutcome.FAILED)
    assert store.placement("nope") is None


@pytest.mark.parametrize("outcome", ["waiting", "running", TryOutcome.RUNNING, "exploded"])
def test_mark_ended_rejects_an_unfinished_or_unknown_outcome(store: Store, outcome: str) -> None:
    store.upsert_placement(placement())
    with pytest.raises(RecordError, match=r"success|unknown"):
        store.mark_ended("k1", at(1), outcome)


def test_placements_newest_first_with_dag_filter_and_limit(store: Store) -> None:
    for i in range(6):
        store.upsert_placement(placement(f"k{i}", dag_id="a" if i % 2 else "b", decided_at=at(i)))
    assert [p.key for p in store.placements()] == ["k5", "k4", "k3", "k2", "k1", "k0"]
    assert [p.key for p in store.placements(dag_id="a")] == ["k5", "k3", "k1"]
    assert [p.key for p in store.placements(limit=2)] == ["k5", "k4"]
    assert store.placements(dag_id="none") == []
    with pytest.raises(RecordError):
        store.placements(limit=0)


def test_latest_for_lists_tries_latest_first(store: Store) -> None:
    store.upsert_placement(placement("r1-t1", run_id="r1", try_number=1, outcome=TryOutcome.OOM))
    store.upsert_placement(placement("other", task_id="other"))
    store.upsert_placement(placement("r1-t2", run_id="r1", try_number=2, outcome=TryOutcome.SUCCESS))
    store.upsert_placement(placement("r2-t1", run_id="r2", try_number=1))
    assert [p.key for p in store.latest_for("train", "fit")] == ["r2-t1", "r1-t2", "r1-t1"]
    assert [p.key for p in store.latest_for("train", "fit", run_id="r1")] == ["r1-t2", "r1-t1"]
    assert [p.key for p in store.latest_for("train", "fit", limit=1)] == ["r2-t1"]
    assert store.latest_for("train", "missing") == []


def test_running_lists_waiting_and_running_tries(store: Store) -> None:
    outcomes = [TryOutcome.WAITING, TryOutcome.RUNNING, TryOutcome.SUCCESS, TryOutcome.FAILED, TryOutcome.OOM]
    for i, outcome in enumerate(outcomes):
        store.upsert_placement(placement(f"k{i}", outcome=outcome))
    store.mark_ended("k1", at(9), TryOutcome.SUCCESS)
    store.upsert_placement(placement("k5", outcome=TryOutcome.RUNNING))
    assert [(p.key, p.outcome) for p in store.running()] == [("k0", TryOutcome.WAITING), ("k5", TryOutcome.RUNNING)]


def test_empty_key_is_rejected(store: Store) -> None:
    with pytest.raises(RecordError, match="empty key"):
        store.upsert_placement(placement(""))


def test_record_from_a_decision(store: Store) -> None:
    chosen = GpuVerdict("GPU-aaaa", 0, "A100-40GB", None, "30000 MiB free")
    skipped = GpuVerdict("GPU-cccc", 2, "A100-40GB", Reason.MEMORY, "2000 MiB free")
    decision = Decision(
        request_key="train/fit/r1/-1/1",
        outcome=Outcome.PLACED,
        gpu_uuids=("GPU-aaaa",),
        chosen=(chosen,),
        rejected=(skipped,),
        summary="placed on GPU 0",
        policy="most-free-memory",
    )
    rec = PlacementRecord.from_decision(
        decision, dag_id="train", task_id="fit", run_id="r1", try_number=1, decided_at=at(0), estimate_mib=12288
    )
    assert rec.outcome is TryOutcome.RUNNING
    assert rec.reasons == (
        "chose GPU 0 (A100-40GB): 30000 MiB free",
        "skipped GPU 2 (A100-40GB): memory: 2000 MiB free",
    )
    store.upsert_placement(rec)
    got = store.placement(decision.request_key)
    assert got is not None
    assert _plain(got) == rec

    waiting = PlacementRecord.from_decision(
        dataclasses.replace(decision, outcome=Outcome.NOT_NOW, gpu_uuids=(), chosen=()),
        dag_id="train",
        task_id="fit",
        run_id="r1",
        try_number=1,
        decided_at=at(0),
    )
    assert waiting.outcome is TryOutcome.WAITING
    never = dataclasses.replace(decision, outcome=Outcome.NEVER_FITS)
    assert PlacementRecord.from_decision(
        never, dag_id="d", task_id="t", run_id="r", try_number=1, decided_at=at(0)
    ).outcome is (TryOutcome.FAILED)
