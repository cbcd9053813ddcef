"""One owner for each retry (issue 43, item 2): the executor plans a try's retry once, when it launches
it; the plan goes to the try (CARMA_END_PLAN) and to the store with its placement, and the try's end
is told by it, here and after a restart."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

from executor_helpers import OOM_RESULT, make_workload, run_until, seen_plan, submit

from carma_airflow.core.recovery import EndPlan, Failure, FailureKind
from carma_airflow.executor.flow.restart import orphan_of
from carma_airflow.keys import request_key
from carma_airflow.launching import PidHandle
from carma_airflow.store.records import PlacementRecord, TryOutcome


def test_the_plan_handed_to_the_try_is_the_one_recorded_and_its_end_is_told_by_it(executor_factory) -> None:
    ex = executor_factory(gpus="2xA100-40GB", behaviour={"t": {"seconds": 0.2, "result": OOM_RESULT}}, oom_retries="1")
    first = make_workload("t", config={"memory": "2GiB"}, author_retries=1)
    submit(ex, first)
    run_until(ex, lambda: not ex.active)
    assert ex.writer.flush()
    handed = seen_plan("t")
    assert (handed.try_number, handed.author_retries, handed.oom_retries, handed.prior_ooms) == (1, 1, 1, 0)
    stored = ex.store.placement(request_key(first.key))
    assert stored is not None and EndPlan.from_json(stored.end_plan) == handed
    assert stored.outcome is TryOutcome.OOM and "retried on a GPU with more free memory" in stored.summary
    # try 2: one OOM try before it (the store's count), its OOM retries spent; its end says so
    second = make_workload("t", try_number=2, config={"memory": "2GiB"}, author_retries=1)
    submit(ex, second)
    run_until(ex, lambda: not ex.active)
    assert ex.writer.flush()
    again = seen_plan("t", 2)
    assert again.prior_ooms == 1 and not again.verdict(Failure(FailureKind.CUDA_OOM, "")).retry
    assert again.verdict(Failure(FailureKind.OTHER, "")).retry  # the author's retry is left
    last = ex.store.placement(request_key(second.key))
    assert last is not None and EndPlan.from_json(last.end_plan) == again
    assert "no more OOM retries" in last.summary and "CUDA OOM on 2 tries" in last.summary


def test_a_try_adopted_after_a_restart_keeps_the_plan_it_was_launched_with(tmp_path: Path) -> None:
    from carma_airflow.core.recovery import plan_try_end

    plan = plan_try_end(3, None, author_retries=0, oom_retries=2, prior_ooms=2)
    rec = PlacementRecord(
        key="d/t/r/-1#3",
        dag_id="d",
        task_id="t",
        run_id="r",
        try_number=3,
        decided_at=datetime(2026, 12, 6, tzinfo=UTC),
        outcome=TryOutcome.RUNNING,
        gpu_uuids=("GPU-SIM-0000",),
        pid=1,
        end_plan=plan.as_json(),
    )
    orphan = orphan_of(rec, PidHandle(1, None, tmp_path / "r.json"), 0.0, None)
    assert orphan.plan == plan and orphan.prior_ooms == 2
    older = orphan_of(replace(rec, end_plan=None), PidHandle(1, None, tmp_path / "r.json"), 0.0, None)
    assert older.plan is None and older.prior_ooms == 0  # recorded by an older executor: as before
