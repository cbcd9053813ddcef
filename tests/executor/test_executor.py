"""CarmaExecutor without a database or scheduler (see conftest for what is real)."""

from __future__ import annotations

import json

from airflow.utils.state import TaskInstanceState
from executor_helpers import make_workload, may_retry_kill, release, run_until, seen_env, seen_plan, submit


def test_tasks_that_fit_share_one_gpu_and_see_only_it(executor_factory) -> None:
    ex = executor_factory(gpus="1xA100-40GB", behaviour={"a": {"seconds": 1.5}, "b": {"seconds": 1.5}})
    a, b = make_workload("a", config={"memory": "8GiB"}), make_workload("b", config={"memory": "8GiB"})
    submit(ex, a, b)
    assert set(ex.active) == {a.key, b.key}
    run_until(ex, lambda: not ex.active)
    env_a, env_b = seen_env("a"), seen_env("b")
    assert env_a["CUDA_VISIBLE_DEVICES"] == env_b["CUDA_VISIBLE_DEVICES"] == "GPU-SIM-0000"
    assert env_a["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"
    assert env_a["TF_FORCE_GPU_ALLOW_GROWTH"] == "true"
    assert "placed on GPU 0 (A100-40GB)" in env_b["CARMA_PLACEMENT"]
    events = ex.get_event_buffer()
    assert events[a.key][0] == TaskInstanceState.SUCCESS and events[b.key][0] == TaskInstanceState.SUCCESS
    assert ex.tenants.get("GPU-SIM-0000") == []  # released


def test_token_is_issued_anew_at_launch(executor_factory) -> None:
    ex = executor_factory()
    w = make_workload("t", config={"memory": 1000})
    submit(ex, w)
    run_until(ex, lambda: not ex.active)
    assert seen_env("t")["token"] not in ("", "old-token")


def test_a_task_that_does_not_fit_waits_without_blocking_one_that_does(executor_factory) -> None:
    ex = executor_factory(gpus="1xA100-40GB", behaviour={"big": {"seconds": 2.0}})
    big = make_workload("big", config={"memory": "30GiB"})
    submit(ex, big)
    huge = make_workload("huge", config={"memory": "30GiB"})
    small = make_workload("small", config={"memory": "2GiB"})
    submit(ex, huge, small)
    assert small.key in ex.active and huge.key in ex.waiting
    assert huge.key not in ex.running and small.key in ex.running  # running is what runs
    assert ex.has_task(huge.ti)  # type: ignore[arg-type]  # the scheduler still knows it is ours
    run_until(ex, lambda: not ex.active and not ex.waiting, timeout=30)
    assert seen_env("huge")["CUDA_VISIBLE_DEVICES"] == "GPU-SIM-0000"


def test_waiting_tries_are_bounded_by_max_waiting_not_by_parallelism(executor_factory) -> None:
    # x runs long: on a loaded machine a short one could end between the two submits (seen in CI)
    ex = executor_factory(gpus="1xA100-40GB", parallelism=2, max_waiting="3", behaviour={"x": {"seconds": 30.0}})
    submit(ex, *(make_workload(n, config={"exclusive": True}) for n in ("x", "y", "z")))
    assert len(ex.running) == 1 and len(ex.waiting) == 2  # one GPU: one runs, two wait
    assert ex.slots_occupied == 1  # what the scheduler sums over executors for [core] parallelism
    assert ex.slots_available == 1  # max_waiting 3 - 2 waiting (parallelism would allow 1 too)
    submit(ex, make_workload("w", config={"exclusive": True}))
    assert ex.slots_available == 0 and len(ex.waiting) == 3


def test_parallelism_caps_what_starts(executor_factory) -> None:
    ex = executor_factory(gpus="4xA100-40GB", parallelism=2, behaviour={n: {"seconds": 1.0} for n in "abcd"})
    submit(ex, *(make_workload(n, config={"memory": "1GiB"}) for n in "abcd"))
    assert len(ex.active) == 2 and len(ex.waiting) == 2  # four GPUs free, but only two slots
    run_until(ex, lambda: len(ex.active) == 2 and not ex.waiting, timeout=20)
    assert len(ex.running) <= 2


def test_a_pass_places_no_more_than_the_slots_left_so_none_is_put_back(executor_factory, monkeypatch) -> None:
    ex = executor_factory(gpus="4xA100-40GB", parallelism=2, behaviour={n: {"seconds": 30.0} for n in "abcd"})
    released: list[str] = []
    release = ex.flow.cycle.release
    monkeypatch.setattr(ex.flow.cycle, "release", lambda key: released.append(key) or release(key))
    submit(ex, *(make_workload(n, config={"memory": "1GiB"}) for n in "abcd"))
    assert len(ex.active) == 2 and len(ex.waiting) == 2
    # the pass stopped at the two slots: the other two were never placed, reserved and put back,
    # they wait in their place
    assert released == []
    assert all(ex.flow.cycle.reservations.get(t.rkey) is None for t in ex.waiting.values())


def test_invalid_config_runs_without_gpu_and_carries_the_message(executor_factory) -> None:
    ex = executor_factory()
    w = make_workload("bad", config={"gpus": "two"})
    submit(ex, w)
    run_until(ex, lambda: not ex.bare)
    env = seen_env("bad")
    assert env["CUDA_VISIBLE_DEVICES"] == ""
    assert "executor_config['carma']['gpus']" in env["CARMA_CONFIG_ERROR"]
    assert "write an integer" in env["CARMA_CONFIG_ERROR"]


def test_never_fitting_task_runs_as_a_process_that_fails_with_the_reason(executor_factory) -> None:
    ex = executor_factory(gpus="2xA100-40GB")
    w = make_workload("wide", config={"gpus": 4}, author_retries=0)
    submit(ex, w)
    assert w.key in ex.bare and not ex.waiting  # decided in the first pass, not left waiting
    run_until(ex, lambda: not ex.bare)
    env = seen_env("wide")
    refused = json.loads(env["CARMA_REFUSED"])
    assert (refused["dag_id"], refused["task_id"]) == ("dag", "wide")
    assert refused["reason"].startswith("never fits: asks for 4 GPUs")
    assert env["CUDA_VISIBLE_DEVICES"] == "" and may_retry_kill(env) is False
    assert w.key not in ex.running


def test_a_killed_try_may_retry_only_within_the_authors_retries(executor_factory) -> None:
    ex = executor_factory(gpus="2xA100-40GB")
    plain, once, again = (
        make_workload("plain", config={"memory": "1GiB"}, author_retries=0),
        make_workload("once", config={"memory": "1GiB"}, author_retries=1),
        make_workload("again", try_number=2, config={"memory": "1GiB"}, author_retries=1),
    )
    submit(ex, plain, once, again)
    run_until(ex, lambda: not ex.active)
    assert may_retry_kill(seen_env("plain")) is False
    assert may_retry_kill(seen_env("once")) is True
    assert may_retry_kill(seen_env("again", 2)) is False  # try 1 failed (no OOM): the one retry is spent


def test_oom_is_recorded_and_the_next_try_goes_elsewhere_with_more_memory(executor_factory) -> None:
    oom = {
        "state": "up_for_retry",
        "failure_kind": "cuda-oom",
        "exc_type": "OutOfMemoryError",
        "message": "CUDA out of memory. Tried to allocate 2.00 GiB",
        "peak_mib": 10000,
    }
    ex = executor_factory(gpus="2xA100-40GB", behaviour={"t": {"seconds": 0.2, "result": oom}})
    first = make_workload("t", config={"memory": "2GiB"}, author_retries=0)  # as the cluster policy records it
    submit(ex, first)
    run_until(ex, lambda: not ex.active)
    crashed = seen_env("t")["CUDA_VISIBLE_DEVICES"]
    rec = ex.store.latest_for("dag", "t")[0]
    # what it held (its peak: the message does not say) plus the 2 GiB it asked for (issue 41)
    assert rec.outcome.value == "oom" and rec.peak_mib == 10000 + 2048
    second = make_workload("t", try_number=2, config={"memory": "2GiB"}, author_retries=0)
    submit(ex, second)
    assert second.key in ex.active
    retry = ex.active[second.key].request
    assert retry.memory.mib >= (10000 + 2048) * 1.25 and retry.recovered
    assert ex.active[second.key].gpu_uuids != (crashed,)
    run_until(ex, lambda: not ex.active)
    assert seen_plan("t", 2).prior_ooms == 1


def test_successful_runs_teach_the_history_estimator(executor_factory) -> None:
    ok = {"state": "success", "peak_mib": 7000}
    ex = executor_factory(behaviour={"learn": {"seconds": 0.1, "result": ok}})
    submit(ex, make_workload("learn", config={"memory": "10GiB"}))
    run_until(ex, lambda: not ex.active)
    assert ex.store.peaks("dag", "learn") == [7000]
    nxt = make_workload("learn", run_id="run2", config={})
    submit(ex, nxt)
    request = ex.active[nxt.key].request if nxt.key in ex.active else ex.waiting[nxt.key].request
    assert request.memory.source.startswith("history") and request.memory.mib == 7936  # 7000 * 1.1 -> 256 MiB


def test_revoke_takes_a_waiting_try_out_of_the_queue_and_never_raises(executor_factory) -> None:
    # the try runs until the test releases it: on a loaded machine 1 s ended before the hand-over
    ex = executor_factory(gpus="1xA100-40GB", behaviour={"run": {"seconds": 30.0, "until": "run-released"}})
    run, wait = make_workload("run", config={"exclusive": True}), make_workload("wait", config={"exclusive": True})
    submit(ex, run, wait)
    ex.revoke_task(ti=wait.ti)  # type: ignore[arg-type]
    assert wait.key not in ex.waiting and not ex.has_task(wait.ti)  # type: ignore[arg-type]
    stray = make_workload("stray", config={})
    ex.queue_workload(stray, session=None)  # type: ignore[arg-type]
    ex.revoke_task(ti=stray.ti)  # type: ignore[arg-type]
    assert stray.key not in ex.queued_tasks
    submit(ex, run)  # handed over twice: ignored, no second process
    assert list(ex.active) == [run.key]
    release("run-released")
    run_until(ex, lambda: not ex.active, timeout=20)
    assert ex.event_buffer[run.key][0] == "success"
    assert wait.key not in ex.event_buffer  # revoked: the scheduler queues it again, no event for it
    rec = {p.task_id: p for p in ex.store.placements(dag_id="dag")}["wait"]
    assert "task_queued_timeout" in rec.summary


def test_revoke_stops_a_started_try_that_never_reported(executor_factory) -> None:
    ex = executor_factory(gpus="1xA100-40GB", behaviour={"hang": {"seconds": 30.0}})
    hang = make_workload("hang", config={"memory": "1GiB"})
    submit(ex, hang)
    assert hang.key in ex.active
    ex.revoke_task(ti=hang.ti)  # type: ignore[arg-type]
    assert not ex.active and not ex.has_task(hang.ti)  # type: ignore[arg-type]  # Airflow's at once
    run_until(ex, lambda: not ex.flow.stopping, timeout=20)  # stopped, its GPU freed once reaped
    assert hang.key not in ex.event_buffer and not ex.tenants.get("GPU-SIM-0000")


def test_gpu_samples_are_kept_downsampled(executor_factory) -> None:
    ex = executor_factory(gpus="2xA100-40GB")
    ex.monitor.sample_once()
    ex.sync()
    ex.sync()  # within the interval: no second row
    assert ex.writer.flush()  # written by the writer thread, not in the heartbeat
    rows = ex.store.samples()
    assert sorted(r.gpu_uuid for r in rows) == ["GPU-SIM-0000", "GPU-SIM-0001"]
    assert all(r.memory_total_mib == 40960 for r in rows)


def test_next_try_arriving_while_the_crashed_try_is_still_ending_is_planned_after_it(executor_factory) -> None:
    import time

    oom = {"state": "up_for_retry", "failure_kind": "cuda-oom", "message": "CUDA out of memory", "peak_mib": 10000}
    ex = executor_factory(gpus="2xA100-40GB", behaviour={"t": {"seconds": 0.1, "result": oom, "linger": 1.5}})
    first = make_workload("t", config={"memory": "2GiB"})
    submit(ex, first)
    result = ex.active[first.key].handle.result_path  # type: ignore[attr-defined]
    deadline = time.time() + 10
    while not result.exists() and time.time() < deadline:
        time.sleep(0.05)
    second = make_workload("t", try_number=2, config={"memory": "2GiB"})
    submit(ex, second)  # the scheduler already retries; try 1's process has not ended yet
    assert second.key in ex.flow.deferred and second.key not in ex.running
    run_until(ex, lambda: second.key in ex.active or not ex.flow.deferred)
    assert ex.active[second.key].request.memory.mib >= 12500  # planned from the crash, not the 2 GiB


def test_airflow_priority_weight_orders_waiting_tries_and_executor_priority_breaks_ties(executor_factory) -> None:
    ex = executor_factory(gpus="1xA100-40GB", behaviour={"first": {"seconds": 1.0}})
    submit(ex, make_workload("first", config={"exclusive": True}))
    low = make_workload("low", config={"exclusive": True, "priority": 100}, priority_weight=1)
    tie_a = make_workload("tie_a", config={"exclusive": True}, priority_weight=5)
    tie_b = make_workload("tie_b", config={"exclusive": True, "priority": 1}, priority_weight=5)
    forced = make_workload("forced", config={"exclusive": True, "priority_weight": 50}, priority_weight=1)
    submit(ex, low, tie_a, tie_b, forced)
    assert {t.request.priority for t in ex.waiting.values()} == {1, 5, 50}
    order: list[str] = []

    def record() -> bool:
        order.extend(k.task_id for k in ex.active if k.task_id not in order and k.task_id != "first")
        return len(order) == 4

    run_until(ex, record, timeout=60)
    # priority_weight first (forced replaces its weight), executor_config priority only among equals
    assert order == ["forced", "tie_b", "tie_a", "low"]


def test_the_flow_tells_its_starter_every_gpu_of_this_host(executor_factory) -> None:
    """Driver caps: a gone executor's leaves get their soft limits cleared on each GPU the monitor
    sees on this host (taskrun/driver_cap.py ``DriverCaps.host_gpus``)."""
    from carma_airflow.monitor.ledger import sim_uuid

    ex = executor_factory(gpus="2xA100-40GB")
    run_until(ex, lambda: True)
    host_gpus = ex.flow.starter.host_gpus
    assert host_gpus is not None and sorted(host_gpus()) == sorted([sim_uuid(0), sim_uuid(1)])


def test_an_unknown_key_is_refused_at_intake_with_the_nearest_one(executor_factory) -> None:
    ex = executor_factory()
    submit(ex, make_workload("typo", config={"memroy": "20GiB"}))
    run_until(ex, lambda: not ex.bare)
    env = seen_env("typo")
    assert env["CUDA_VISIBLE_DEVICES"] == ""  # never placed on the floor
    assert "unknown key 'memroy'; did you mean 'memory'?" in env["CARMA_CONFIG_ERROR"]


def test_allow_unknown_keys_places_a_task_with_one(executor_factory) -> None:
    ex = executor_factory(allow_unknown_keys="True")
    submit(ex, make_workload("kept", config={"memroy": "20GiB", "memory": "2GiB"}))
    run_until(ex, lambda: not ex.active and not ex.bare)
    env = seen_env("kept")
    assert env["CUDA_VISIBLE_DEVICES"] == "GPU-SIM-0000" and not env.get("CARMA_CONFIG_ERROR")
