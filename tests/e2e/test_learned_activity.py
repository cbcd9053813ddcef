"""Learned activity end to end (issue 13): a DAG of a light and a heavy simulated task runs twice
in a real Airflow; after the first run the store holds each task's SM activity, measured from the
simulated GPUs' per-process telemetry, within 10% of the truth, and the second run's placements
are made with it."""

from __future__ import annotations

import importlib.util
import time
from pathlib import Path

import pytest

from carma_airflow.store.records import TryOutcome
from carma_airflow.store.store import Store

pytestmark = [pytest.mark.e2e, pytest.mark.db]

_spec = importlib.util.spec_from_file_location("activity_dag", Path(__file__).with_name("dags") / "carma_activity.py")
assert _spec is not None and _spec.loader is not None
_dag = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_dag)
TRUTH: dict[str, float] = _dag.TRUTH


def _learned(store: Store, task_id: str, timeout: float = 30.0) -> list[tuple[float, str]]:
    """The task's measured activities; the executor writes a try's once it has seen its process
    end, a heartbeat or two after Airflow marks the run done."""
    deadline = time.time() + timeout
    while not (found := store.activities("carma_activity", task_id)) and time.time() < deadline:
        time.sleep(0.5)
    return found


def _placed_as(store: Store, task_id: str, run_id: str, timeout: float = 30.0) -> str:
    """The activity the placer assumed for the task's try in ``run_id`` (its placement's reasons;
    the executor's writer records them just after Airflow sees the run end)."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        for rec in store.latest_for("carma_activity", task_id, run_id=run_id):
            said = [r for r in rec.reasons if r.startswith("activity: ")]
            if rec.outcome == TryOutcome.SUCCESS and said:
                return said[0]
        time.sleep(0.5)
    raise AssertionError(f"no placement of {task_id} in {run_id} says what activity it assumed")


def test_each_tasks_activity_is_learned_and_used_by_the_next_run(default_stack) -> None:
    stack = default_stack  # the devstack samples every 0.5 s
    first = stack.trigger("carma_activity")
    assert stack.wait_run("carma_activity", first) == "success"
    store = Store(stack.env.get("AIRFLOW__CARMA__STORE_URL") or Store.default_url(str(stack.home)))
    for task_id, truth in TRUTH.items():
        learned = _learned(store, task_id)
        assert len(learned) == 1, f"{task_id}: {learned}"
        value, source = learned[0]
        assert source == "process"
        assert abs(value - truth) <= 0.1 * truth, f"{task_id}: learned {value:.3f}, truth {truth}"

    second = stack.trigger("carma_activity")
    assert stack.wait_run("carma_activity", second) == "success"
    for task_id, truth in TRUTH.items():
        said = _placed_as(store, task_id, second)
        value = float(said.split()[1])  # "activity: 0.20 (median of 1 try, confidence 0.6)"
        assert abs(value - truth) <= 0.1 * truth, f"{task_id} was placed as activity {said!r}"
