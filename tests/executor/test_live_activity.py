"""A running try's measured SM activity is used while it runs (executor/learning/learning.py,
``tell_while_running``): it counts with it as a co-tenant, and a waiting try of the same task is
decided with it, before the first try has ended."""

from __future__ import annotations

import time

from executor_helpers import make_workload, run_until, submit

from carma_airflow.executor.learning.learning import LIVE_SAMPLES


def test_a_waiting_try_of_the_same_task_learns_the_running_ones_activity(executor_factory) -> None:  # type: ignore[no-untyped-def]
    train = {"peak_mib": 2000, "seconds": 8.0, "activity": 0.8, "ramp_s": 0.2}
    ex = executor_factory(
        gpus="1xA100-40GB",
        behaviour={"heavy": {"train": train}},
        max_tenants="1",  # the second try waits while the first runs
    )
    first = make_workload("heavy", config={"memory": "4GiB"}, run_id="r1")
    second = make_workload("heavy", config={"memory": "4GiB"}, run_id="r2")
    submit(ex, first, second)
    assert len(ex.active) == 1 and len(ex.waiting) == 1
    waiting = next(iter(ex.waiting.values()))
    before = next(r for r in ex.flow.cycle.waiting_requests() if r.key == waiting.rkey).activity
    assert before is None or before.count == 0  # never seen: a prior

    running = next(iter(ex.active.values()))
    run_until(ex, lambda: running.activity_told, timeout=20, flush=False)
    assert len(ex.active) == 1 and len(ex.waiting) == 1  # the first still runs: nothing ended yet

    told = next(r for r in ex.flow.cycle.waiting_requests() if r.key == waiting.rkey).activity
    assert told is not None and told.count == 1 and abs(told.sm_activity - 0.8) < 0.08
    tenants = ex.flow.cycle.reservations.tenants_on(running.gpu_uuids[0], time.time())
    mine = next(t for t in tenants if t.key == running.rkey)
    assert mine.activity is not None and abs(mine.activity.sm_activity - 0.8) < 0.08
    assert LIVE_SAMPLES >= 3  # a few samples, not one glitch
