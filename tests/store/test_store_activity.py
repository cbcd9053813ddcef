"""Activity history (issue 13): what each ended try's solo SM activity was, and how it was measured."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.exc import IntegrityError
from store_helpers import at

from carma_airflow.store import RecordError, StoreError
from carma_airflow.store.store import Store

pytestmark = pytest.mark.db


def test_activities_are_the_latest_oldest_first(store: Store) -> None:
    for i, value in enumerate([0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0, 0.0, 0.35]):
        store.add_activity("train", "fit", value, "process" if i % 2 else "gpu-alone", at(i), run_id=f"r{i}")
    store.add_activity("train", "other", 0.99, "hint", at(100))
    store.add_activity("other", "fit", 0.98, "process", at(100), map_index=3)
    latest = store.activities("train", "fit")
    assert len(latest) == 10  # the default window of core.activity
    assert latest[0] == (0.3, "gpu-alone") and latest[-1] == (0.35, "process")  # floats stored as given
    assert store.activities("train", "fit", limit=2) == [(0.0, "gpu-alone"), (0.35, "process")]
    assert [v for v, _ in store.activities("train", "fit", limit=50)][:2] == [0.1, 0.2]
    assert store.activities("train", "missing") == []
    assert store.activities("other", "fit") == [(0.98, "process")]


def test_activities_order_by_time_not_insertion(store: Store) -> None:
    store.add_activity("d", "t", 0.3, "process", at(30))
    store.add_activity("d", "t", 0.1, "process", at(10))
    store.add_activity("d", "t", 0.2, "gpu-alone", at(20).timestamp())  # seconds since the epoch work too
    store.add_activity("d", "t", 0.4, "process", at(30))  # same time: the later insert counts as newer
    assert [v for v, _ in store.activities("d", "t")] == [0.1, 0.2, 0.3, 0.4]
    assert store.activities("d", "t", limit=1) == [(0.4, "process")]


def test_recent_activities_of_every_task_newest_limit_oldest_first(store: Store) -> None:
    store.add_activity("a", "x", 0.5, "process", at(20))
    store.add_activity("b", "y", 0.25, "hint", at(10))
    store.add_activity("a", "z", 0.75, "gpu-alone", at(30))
    assert store.recent_activities() == [("b", "y", 0.25, "hint"), ("a", "x", 0.5, "process"),
                                         ("a", "z", 0.75, "gpu-alone")]  # fmt: skip
    assert store.recent_activities(limit=2) == [("a", "x", 0.5, "process"), ("a", "z", 0.75, "gpu-alone")]
    with pytest.raises(RecordError, match="limit must be at least 1"):
        store.recent_activities(limit=0)


@pytest.mark.parametrize("value", [-0.01, 1.01, 42.0, float("nan"), float("inf")])
def test_an_activity_outside_zero_to_one_is_refused(store: Store, value: float) -> None:
    with pytest.raises(RecordError, match=r"between 0 and 1, got .*divide a percentage by 100"):
        store.add_activity("d", "t", value, "process", at(0))
    assert store.activities("d", "t") == []


def test_the_bounds_themselves_are_activities(store: Store) -> None:
    store.add_activity("d", "t", 0, "process", at(0))
    store.add_activity("d", "t", 1.0, "process", at(1))
    assert store.activities("d", "t") == [(0.0, "process"), (1.0, "process")]


def test_an_unknown_source_is_refused_with_the_known_ones(store: Store) -> None:
    with pytest.raises(RecordError, match=r"unknown activity source 'nvml'.*process, gpu-alone, hint"):
        store.add_activity("d", "t", 0.5, "nvml", at(0))
    with pytest.raises(RecordError, match="limit must be at least 1"):
        store.activities("d", "t", limit=0)


def test_the_database_itself_refuses_bad_rows(store: Store, any_url: str) -> None:
    # A writer that bypassed add_activity (another version, a hand-made INSERT) cannot store nonsense.
    engine = create_engine(any_url)
    try:
        for source, value in (("nvml", 0.5), ("process", 1.5)):
            with pytest.raises(IntegrityError, match=r"(?i)check"), engine.begin() as conn:
                conn.execute(
                    text(
                        "INSERT INTO carma_activity_history (dag_id, task_id, sm_activity, source, at)"
                        " VALUES ('d', 't', :v, :s, '2026-01-01 00:00:00+00:00')"
                    ),
                    {"v": value, "s": source},
                )
    finally:
        engine.dispose()
    assert store.activities("d", "t") == []


def test_without_the_migration_the_error_says_to_migrate(tmp_path: Path) -> None:
    store = Store(f"sqlite:///{tmp_path}/empty.db")
    with pytest.raises(StoreError, match=r"migrate\(\)"):
        store.activities("d", "t")
    store.close()


def test_each_activity_keeps_the_task_types_its_try_shared_with(store: Store) -> None:
    # issue 23: whom a try ran beside is recorded with what was learned of it (distinct, sorted);
    # alone is an empty list, not knowing (a hint, an older writer) is None
    store.add_activity("d", "t", 0.4, "process", at(1), "r1", -1, co_tasks=["d.b", "other.a", "d.b"])
    store.add_activity("d", "t", 0.3, "gpu-alone", at(2), "r2", -1, co_tasks=[])
    store.add_activity("d", "t", 0.5, "hint", at(3))
    got = store.activity_records("d", "t")
    assert [(r.sm_activity, r.source, r.co_tasks) for r in got] == [
        (0.4, "process", ("d.b", "other.a")),
        (0.3, "gpu-alone", ()),
        (0.5, "hint", None),
    ]
    assert got[0].run_id == "r1" and got[0].map_index == -1 and got[0].at == at(1)
    assert store.activities("d", "t") == [(0.4, "process"), (0.3, "gpu-alone"), (0.5, "hint")]  # unchanged
    assert [r.sm_activity for r in store.activity_records("d", "t", limit=1)] == [0.5]


@pytest.mark.parametrize("bad", ["d.b", ["d.b", ""], [3]])
def test_co_tenant_types_must_be_a_list_of_names(store: Store, bad: object) -> None:
    with pytest.raises(RecordError, match=r"co-tenant task types of d\.t must be a list of non-empty names"):
        store.add_activity("d", "t", 0.4, "process", at(1), co_tasks=bad)  # type: ignore[arg-type]
    assert store.activity_records("d", "t") == []


def test_solo_run_times_are_the_tries_that_ran_alone_newest_limit_oldest_first(store: Store) -> None:
    store.add_activity("d", "t", 0.5, "process", 1_900_000_000.0, co_tasks=[], solo_s=600.0)
    store.add_activity("d", "t", 0.4, "process", 1_900_000_001.0, co_tasks=["d.u"])  # shared: no solo time
    store.add_activity("d", "u", 0.6, "gpu-alone", 1_900_000_002.0, co_tasks=[], solo_s=90)
    store.add_activity("d", "t", 0.5, "process", 1_900_000_003.0, co_tasks=[], solo_s=630.5)
    assert store.recent_solo_runs() == [("d", "t", 600.0), ("d", "u", 90.0), ("d", "t", 630.5)]
    assert store.recent_solo_runs(limit=1) == [("d", "t", 630.5)]


@pytest.mark.parametrize("bad", [0.0, -5.0, math.inf, math.nan, True, "600"])
def test_a_solo_run_time_must_be_positive_seconds(store: Store, bad: object) -> None:
    with pytest.raises(RecordError, match=r"solo run time of d\.t must be positive seconds"):
        store.add_activity("d", "t", 0.5, "process", 1_900_000_000.0, co_tasks=[], solo_s=bad)  # type: ignore[arg-type]
    assert store.recent_solo_runs() == []
