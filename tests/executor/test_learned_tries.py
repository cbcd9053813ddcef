"""The ended tries of a task instance as the recovery planner reads them (executor/learning/learned.py):
the store's truth whichever scheduler ran them and whenever their end reached the store (issue
24), with no store read when every earlier try is known here, and a bounded memory."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest

from carma_airflow.core.errors import CarmaError
from carma_airflow.core.task import MemoryNeed, TaskRequest
from carma_airflow.executor.learning import EndedTry, Family, Learned
from carma_airflow.executor.learning import learned as learned_mod
from carma_airflow.executor.tries import recovered
from carma_airflow.store.records import PlacementRecord, TryOutcome
from carma_airflow.store.store import Store

T0 = datetime(2026, 12, 3, 12, 0, 0, tzinfo=timezone.utc)
FAMILY: Family = ("dag", "t", "run", -1)


@dataclass
class _Ti:
    try_number: int
    dag_id: str = "dag"
    task_id: str = "t"
    run_id: str = "run"
    map_index: int = -1


@pytest.fixture
def store(tmp_path: Path) -> Store:
    s = Store(f"sqlite:///{tmp_path / 'carma.db'}")
    s.migrate()
    return s


def _record(try_number: int, outcome: TryOutcome, family: Family = FAMILY, gpu: str = "GPU-b") -> PlacementRecord:
    """A try as its scheduler writes it: running, or ended (an OOM with its peak)."""
    dag_id, task_id, run_id, map_index = family
    ended = outcome.finished
    return PlacementRecord(
        key=f"{dag_id}/{task_id}/{run_id}/{map_index}#{try_number}",
        dag_id=dag_id,
        task_id=task_id,
        run_id=run_id,
        map_index=map_index,
        try_number=try_number,
        decided_at=T0,
        outcome=outcome,
        gpu_uuids=(gpu,),
        estimate_mib=8192,
        peak_mib=10000 if outcome is TryOutcome.OOM else None,
        started_at=T0,
        ended_at=T0 if ended else None,
    )


def _oom(try_number: int, gpu: str = "GPU-a") -> EndedTry:
    return EndedTry(try_number, "oom", 10000, 8192, (gpu,))


def _count_reads(store: Store, monkeypatch: pytest.MonkeyPatch) -> list[Family]:
    reads: list[Family] = []
    real = store.tries_of

    def counted(*family: Any) -> list[PlacementRecord]:
        reads.append(family)  # type: ignore[arg-type]
        return real(*family)

    monkeypatch.setattr(store, "tries_of", counted)
    return reads


def _prior_ooms(learned: Learned, try_number: int) -> tuple[int, list[int]]:
    """What intake gives the try: the OOM tries before it, and the OOM retries the planner is told
    were spent (one list entry per plan asked for)."""
    told: list[int] = []

    def plan_retry(previous: TaskRequest, failure: object, *, oom_retries_done: int, **kw: object) -> object:
        told.append(oom_retries_done)
        return object()  # no plan: the count is what is checked

    request = TaskRequest(f"try{try_number}", "dag.t", MemoryNeed(8192, "declared"), try_number=try_number)
    _, prior, _ = recovered(_Ti(try_number), request, learned, plan_retry, 0.0)
    return prior, told


@pytest.mark.parametrize("why", ["written late", "store unreachable"])
def test_an_oom_another_scheduler_ran_counts_though_the_try_before_is_known_here(
    store: Store, monkeypatch: pytest.MonkeyPatch, why: str
) -> None:
    """B ran try 1 (OOM); A took try 2 without learning of it (B's end reached the store after A
    read it, or A could not read the store); try 2 OOMs on A.  A's try 3 counts both OOMs: the
    store is read again, though try 2 (the one just before) is known here."""
    a = Learned()
    a.load(store)
    store.upsert_placement(_record(1, TryOutcome.RUNNING))  # B's try 1, its end not yet written
    if why == "store unreachable":
        real = store.tries_of

        def down(*family: Any) -> list[PlacementRecord]:
            raise CarmaError("connection refused")

        monkeypatch.setattr(store, "tries_of", down)
        assert a.tries_for(FAMILY, 2) == []
        monkeypatch.setattr(store, "tries_of", real)
    else:
        assert a.tries_for(FAMILY, 2) == []  # try 1 still runs in the store: no ended try yet
    store.upsert_placement(_record(1, TryOutcome.OOM))  # B's try 1 ended with an OOM
    a.add_try(FAMILY, _oom(2))  # try 2 OOMs on A
    store.upsert_placement(_record(2, TryOutcome.OOM, gpu="GPU-a"))

    earlier = a.tries_for(FAMILY, 3)
    assert [(t.try_number, t.outcome) for t in earlier] == [(1, "oom"), (2, "oom")]
    prior, told = _prior_ooms(a, 3)
    assert prior == 2 and told == [1]  # two OOM tries spent, not one: no extra OOM retry


def test_no_store_read_when_every_earlier_try_is_known_and_one_when_not(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The hot path: a task instance whose tries all ran here reads nothing; one whose try 1 ran
    on another scheduler reads the store once, for its try 2, and not again for its try 3."""
    learned = Learned()
    learned.load(store)
    reads = _count_reads(store, monkeypatch)
    here: Family = ("dag", "here", "run", -1)
    learned.add_try(here, _oom(1))
    learned.add_try(here, _oom(2))
    assert [t.try_number for t in learned.tries_for(here, 3)] == [1, 2] and reads == []

    store.upsert_placement(_record(1, TryOutcome.OOM))  # B's
    assert [t.try_number for t in learned.tries_for(FAMILY, 2)] == [1] and reads == [FAMILY]
    learned.add_try(FAMILY, _oom(2))
    assert [t.try_number for t in learned.tries_for(FAMILY, 3)] == [1, 2] and reads == [FAMILY]
    assert learned.tries_for(FAMILY, 1) == [] and reads == [FAMILY]


def test_a_task_instance_whose_try_succeeded_keeps_nothing_here() -> None:
    learned = Learned()
    done: Family = ("dag", "done", "run", -1)
    learned.add_try(done, _oom(1))
    learned.add_try(done, EndedTry(2, "success", 9000, 12288, ("GPU-a",)))
    assert learned.tries(done) == [] and done not in learned._tries


def test_only_the_latest_task_instances_are_kept_and_one_that_went_is_read_from_the_store(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Of the task instances with ended tries only the latest to end one are kept here.  One that
    went costs its next try a store read and is planned the same."""
    monkeypatch.setattr(learned_mod, "TRIED_INSTANCES_KEPT", 3, raising=False)  # absent: unbounded
    learned = Learned()
    learned.load(store)
    families = [("dag", f"t{i}", "run", -1) for i in range(5)]
    for family in families:
        learned.add_try(family, _oom(1))
        store.upsert_placement(_record(1, TryOutcome.OOM, family=family, gpu="GPU-a"))
    assert [f for f in families if learned.tries(f)] == families[2:]
    assert len(learned._tries) == 3

    reads = _count_reads(store, monkeypatch)
    (t1,) = learned.tries_for(families[0], 2)  # forgotten here, not in the store
    assert t1.outcome == "oom" and t1.gpu_uuids == ("GPU-a",) and reads == [families[0]]
    prior, told = _prior_ooms(learned, 2)  # FAMILY: no tries anywhere
    assert prior == 0 and told == []
    assert len(learned._tries) <= 3


def test_a_clear_after_a_success_reads_the_earlier_tries_from_the_store(store: Store) -> None:
    """The success dropped what was kept; the try a clear brings sees every earlier try."""
    learned = Learned()
    learned.load(store)
    store.upsert_placement(_record(1, TryOutcome.OOM))
    store.upsert_placement(_record(2, TryOutcome.SUCCESS))
    learned.add_try(FAMILY, _oom(1))
    learned.add_try(FAMILY, EndedTry(2, "success", 9000, 12288, ("GPU-b",)))
    assert [(t.try_number, t.outcome) for t in learned.tries_for(FAMILY, 3)] == [(1, "oom"), (2, "success")]
    assert _prior_ooms(learned, 3) == (1, [])  # the last try succeeded: no recovery plan
