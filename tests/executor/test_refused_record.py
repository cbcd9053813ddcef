"""A try refused for an invalid executor_config is in the store, so `carma why` finds it."""

from __future__ import annotations

from executor_helpers import make_workload, run_until, submit


def test_a_try_refused_for_a_bad_executor_config_is_recorded_with_the_reason(executor_factory) -> None:
    ex = executor_factory()
    w = make_workload("bad", config={"gpus": "two"})
    submit(ex, w)
    run_until(ex, lambda: not ex.bare)
    assert ex.writer.flush()
    (rec,) = [p for p in ex.store.placements(dag_id="dag") if p.task_id == "bad"]
    assert rec.outcome == "failed" and rec.try_number == 1 and rec.gpu_uuids == ()
    assert rec.summary.startswith("refused, never placed: ") and "executor_config['carma']['gpus']" in rec.summary
    assert rec.started_at is None and rec.ended_at is not None  # it never ran: a closed bar, not an open one
