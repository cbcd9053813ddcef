"""Solo run times kept per task and GPU model by the executor, and their ratios across a restart (issue 44)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from executor_helpers import running_try

from carma_airflow.core.activity import ActivitySample
from carma_airflow.core.interference import Segment
from carma_airflow.core.policies import make_policy
from carma_airflow.core.policies.completion_time import CompletionTime
from carma_airflow.executor.bookkeeping import AddActivity, StoreWrite
from carma_airflow.executor.learning import Learned, Seen, learn_from_success
from carma_airflow.store.store import Store

ALONE = Seen(ActivitySample(0.4, "process"), True, (Segment(1.0, ()),), ())


def test_a_try_that_ran_alone_keeps_its_gpu_model_with_its_run_time(tmp_path: Path) -> None:
    learned = Learned()
    writes = learn_from_success(learned, running_try("fast", 0.0), ALONE, 120.0, "V100-32GB")
    (row,) = [w for w in writes if isinstance(w, AddActivity)]
    assert (row.solo_s, row.gpu_model) == (120.0, "V100-32GB")
    run = learned.by_model.predict("dag.fast", "V100-32GB")
    assert run is not None and run.source == "measured" and run.seconds == 120.0
    shared = Seen(ActivitySample(0.4, "process"), False, (Segment(1.0, (0.7,), ("dag.x",)),), ("dag.x",))
    writes = learn_from_success(learned, running_try("fast", 0.0), shared, 150.0, "V100-32GB")
    # shared all along: no solo run time; a first try's run time bounds its run alone (issue 41)
    assert [(w.solo_s, w.shared_s, w.gpu_model) for w in writes if isinstance(w, AddActivity)] == [
        (None, 150.0, "V100-32GB")
    ]


def test_the_learned_ratios_survive_a_restart(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'carma.db'}"
    store = Store(url)
    store.migrate()
    for i, (task, v100, h100) in enumerate((("a", 400.0, 100.0), ("b", 300.0, 100.0))):
        store.add_activity(
            "dag", task, 0.3, "process", 1_900_000_000.0 + i, co_tasks=[], solo_s=v100, gpu_model="V100-32GB"
        )
        store.add_activity(
            "dag", task, 0.3, "process", 1_900_000_010.0 + i, co_tasks=[], solo_s=h100, gpu_model="H100-80GB"
        )
    store.add_activity("dag", "c", 0.3, "process", 1_900_000_020.0, co_tasks=[], solo_s=700.0, gpu_model="V100-32GB")
    store.close()
    learned = Learned()
    again = Store(url)
    learned.load(again)
    again.close()
    (pair,) = learned.by_model.ratios()
    assert (pair.slow, pair.fast, pair.source, pair.tasks) == ("V100-32GB", "H100-80GB", "learned", 2)
    assert pair.ratio == pytest.approx(12**0.5)  # the median of 4 and 3, in logs
    c = learned.by_model.predict("dag.c", "H100-80GB")
    # one task's expectation over the two tasks' spread (core/model_speed.PairRatio.one_task)
    expected = 700.0 * learned.by_model.ratio("H100-80GB", "V100-32GB").one_task()[0]
    assert c is not None and c.seconds == pytest.approx(expected) and c.low < c.seconds < c.high
    assert c.seconds > 700.0 / 12**0.5  # above the median's: the two tasks' ratios differ
    assert learned.solo_seconds("dag", "c") == 700.0  # the per-task run time as before


SHARED = Seen(ActivitySample(0.4, "process"), False, (Segment(1.0, (0.7,), ("dag.x",)),), ("dag.x",))


def _long_and_short(learned: Learned) -> list[StoreWrite]:
    """``dag.long`` ran alone 3,000 s; ``dag.short``'s first try shared its GPU all along for 400 s."""
    writes = learn_from_success(learned, running_try("long", 0.0), ALONE, 3000.0, "V100-32GB")
    return writes + learn_from_success(learned, running_try("short", 0.0), SHARED, 400.0, "V100-32GB")


def _priced_after_hand_over(learned: Learned, now: float) -> None:
    """The policy the learned run times are handed to prices the shared-only task at its bound."""
    policy = make_policy("completion-time")
    assert isinstance(policy, CompletionTime)
    assert learned.hand_over(policy, now)
    book = policy.learned.durations
    assert book.expected("dag.long") == 3000.0
    assert not book.measured("dag.short") and book.expected("dag.short") == 400.0


def test_a_first_try_that_ran_shared_all_along_bounds_its_run_alone_in_the_policy() -> None:
    # issue 41: a type that only ever ran shared was priced at the median over the measured types
    learned = Learned()
    _long_and_short(learned)
    _priced_after_hand_over(learned, 400.0)
    # a retry (try 2) may have resumed from a checkpoint: its duration bounds nothing
    retry = running_try("other", 0.0)
    retry.ti = replace(retry.ti, try_number=2)
    learn_from_success(learned, retry, SHARED, 50.0, "V100-32GB")
    assert learned.take_new_bounds() == []


def test_a_shared_first_tries_bound_survives_a_restart(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'carma.db'}"
    store = Store(url)
    store.migrate()
    rows = [w for w in _long_and_short(Learned()) if isinstance(w, AddActivity)]
    assert [(w.task_id, w.solo_s, w.shared_s, w.gpu_model) for w in rows] == [
        ("long", 3000.0, None, "V100-32GB"),
        ("short", None, 400.0, "V100-32GB"),
    ]
    for write in rows:
        write.apply(store)
    store.close()
    again = Store(url)  # a restarted executor
    restarted = Learned()
    restarted.load(again)
    again.close()
    _priced_after_hand_over(restarted, 0.0)


def test_a_shared_first_try_placed_at_a_predicted_slowdown_estimates_its_run_alone(tmp_path: Path) -> None:
    # issue 44: its duration over the slowdown the policy priced it at, not the other tasks' median
    learned = Learned()
    learn_from_success(learned, running_try("long", 0.0), ALONE, 3000.0, "V100-32GB")
    writes = learn_from_success(learned, running_try("short", 0.0), SHARED, 400.0, "V100-32GB", slowdown=1.6)
    (row,) = [w for w in writes if isinstance(w, AddActivity)]
    assert (row.shared_s, row.shared_alone_s) == (400.0, 250.0)
    url = f"sqlite:///{tmp_path / 'carma.db'}"
    store = Store(url)
    store.migrate()
    row.apply(store)
    store.close()
    for learner, now in ((learned, 400.0), (Learned(), 0.0)):  # this executor, and one restarted
        if now == 0.0:
            again = Store(url)
            learner.load(again)
            again.close()
        policy = make_policy("completion-time")
        assert isinstance(policy, CompletionTime)
        assert learner.hand_over(policy, now)
        assert policy.learned.durations.expected("dag.short") == 250.0  # not 400 s (its bound), nor 3,000 s
