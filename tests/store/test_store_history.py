"""OOM events and the memory history the history estimator learns from."""

from __future__ import annotations

import dataclasses

import pytest
from store_helpers import at

from carma_airflow.store import OomRecord, RecordError, Store

pytestmark = pytest.mark.db


def test_oom_round_trip_newest_first(store: Store) -> None:
    first = OomRecord(
        "k1", "train", "fit", 1, at(10), "GPU-aaaa", 39_800, "torch.OutOfMemoryError: CUDA out of memory."
    )
    second = OomRecord("k2", "train", "fit", 2, at(20))
    other = OomRecord("k3", "train", "eval", 1, at(30), ",".join(f"GPU-{i:036d}" for i in range(8)), None, "x" * 5000)
    ids = [store.record_oom(ev) for ev in (first, second, other)]
    assert len(set(ids)) == 3
    got = store.ooms()
    assert [ev.id for ev in got] == ids[::-1]
    assert [dataclasses.replace(ev, id=None) for ev in got] == [other, second, first]
    assert [ev.placement_key for ev in store.ooms(task_id="fit")] == ["k2", "k1"]
    assert [ev.placement_key for ev in store.ooms(dag_id="train", limit=1)] == ["k3"]
    assert store.ooms(dag_id="none") == []


def test_peaks_are_the_latest_oldest_first(store: Store) -> None:
    for i, peak in enumerate([100, 200, 300, 400, 500, 600, 700]):
        store.add_peak("train", "fit", peak, at(i), run_id=f"r{i}")
    store.add_peak("train", "other", 9999, at(100))
    store.add_peak("other", "fit", 8888, at(100))
    assert store.peaks("train", "fit") == [300, 400, 500, 600, 700]
    assert store.peaks("train", "fit", limit=2) == [600, 700]
    assert store.peaks("train", "fit", limit=50) == [100, 200, 300, 400, 500, 600, 700]
    assert store.peaks("train", "missing") == []


def test_peaks_of_one_map_index(store: Store) -> None:
    # three instances of a mapped task, two runs each; an unmapped task of the same name elsewhere
    for run in range(2):
        for index, peak in enumerate([1000, 5000, 9000]):
            store.add_peak("ft", "tune", peak + run, at(10 * run + index), run_id=f"r{run}", map_index=index)
    store.add_peak("ft", "tune", 7777, at(50))  # written without a map index (before revision 0004)
    store.add_peak("ft", "plain", 3000, at(60), "r0", -1)  # positional, as the executor's writer passes it
    assert store.peaks("ft", "tune", map_index=1) == [5000, 5001]
    assert store.peaks("ft", "tune", map_index=2, limit=1) == [9001]
    assert store.peaks("ft", "tune", map_index=3) == []
    assert store.peaks("ft", "tune") == [9000, 1001, 5001, 9001, 7777]  # the whole task, as before
    assert store.peaks("ft", "plain", map_index=-1) == [3000]
    assert store.peaks("ft", "plain", map_index=0) == []


def test_peaks_order_by_time_not_insertion(store: Store) -> None:
    store.add_peak("d", "t", 3, at(30))
    store.add_peak("d", "t", 1, at(10))
    store.add_peak("d", "t", 2, at(20).timestamp())
    store.add_peak("d", "t", 4, at(30))  # same time: the later insert counts as newer
    assert store.peaks("d", "t") == [1, 2, 3, 4]
    assert store.peaks("d", "t", limit=1) == [4]


def test_peaks_reject_bad_input(store: Store) -> None:
    with pytest.raises(RecordError, match="negative"):
        store.add_peak("d", "t", -1, at(0))
    with pytest.raises(RecordError, match="limit"):
        store.peaks("d", "t", limit=0)
