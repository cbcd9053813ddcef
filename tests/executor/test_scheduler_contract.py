"""What Airflow 3.3's scheduler expects of an executor, held against CarmaExecutor (issue 17):
callbacks, a start that fails, tries Airflow has given up on, shutdown, SIGUSR2.

The scheduler-level proofs are in tests/e2e/test_citizen.py; here the same contract is checked
on the executor alone (no Airflow database), with the real launcher, monitor and store.
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path

import pytest
from airflow.utils.state import CallbackState, TaskInstanceState
from executor_helpers import make_callback, make_workload, out_dir, run_until, seen_env, submit

from carma_airflow.executor import CarmaExecutor
from carma_airflow.executor.flow.flow import SUPERSEDED_GRACE_S


def test_a_callback_runs_as_a_cpu_process_and_reports_its_state(executor_factory) -> None:
    ex = executor_factory(gpus="1xA100-40GB", behaviour={"busy": {"seconds": 3.0}})
    submit(ex, make_workload("busy", config={"exclusive": True}))  # the only GPU is taken
    ok, bad = make_callback(), make_callback(exit_code=3)
    for cb in (ok, bad):
        ex.queue_workload(cb, session=None)  # type: ignore[arg-type]
    assert ex.slots_occupied >= 2  # queued callbacks count, as Airflow counts them
    ex.trigger_tasks(ex.parallelism)
    assert ex.event_buffer[ok.key][0] == CallbackState.RUNNING
    run_until(ex, lambda: ex.event_buffer.get(bad.key, (None,))[0] == CallbackState.FAILED, timeout=20)
    assert ex.event_buffer[ok.key][0] == CallbackState.SUCCESS
    seen = json.loads((out_dir() / f"callback-{ok.callback.id}.json").read_text())
    assert seen["CUDA_VISIBLE_DEVICES"] == ""  # never on a GPU, never waiting for one
    assert ok.key not in ex.running and "busy" in {k.task_id for k in ex.active}


def test_a_start_that_fails_holds_gpu_tries_and_starts_them_when_it_recovers(
    executor_factory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    executor_factory()  # the fixture's environment: the fake task runner
    blocker = tmp_path / "state-is-a-file"
    blocker.write_text("not a folder")  # the executor cannot make its state folder: the start fails
    monkeypatch.setenv("AIRFLOW__CARMA__GPU_BACKEND", "simulated")
    monkeypatch.setenv("AIRFLOW__CARMA__SIMULATED_GPUS", "1xA100-40GB")
    monkeypatch.setenv("AIRFLOW__CARMA__STATE_DIR", str(blocker))
    monkeypatch.setenv("AIRFLOW__CARMA__STORE_URL", f"sqlite:///{tmp_path / 'standby.db'}")
    ex = CarmaExecutor(parallelism=4)
    try:
        ex.start()  # does not raise: the scheduler and its other executors run on
        assert ex.flow is None and ex.standby.reason and "state-is-a-file" in ex.standby.reason
        w = make_workload("t", config={"memory": "1GiB"})
        submit(ex, w)
        assert ex.has_task(w.ti) and w.key not in ex.running  # type: ignore[arg-type]
        assert ex.slots_occupied == 0  # held tries do not count against [core] parallelism
        told = [entry for entry in ex._task_event_logs if "could not start" in (entry.extra or "")]
        assert told, "the reason must reach the try's audit log"
        ex.sync()
        assert ex.flow is None  # not due yet: the pause grows, from 5 s
        blocker.unlink()
        ex.standby._next_at = 0.0  # the pause has passed
        ex.sync()
        assert ex.flow is not None
        run_until(ex, lambda: w.key in ex.active or not ex.waiting, timeout=10)
        assert w.key in ex.active or w.key in ex.event_buffer, {k: t.last_summary for k, t in ex.flow.waiting.items()}
        run_until(ex, lambda: not ex.active)
        assert seen_env("t")["CUDA_VISIBLE_DEVICES"] == "GPU-SIM-0000"
    finally:
        ex.end()


def test_a_try_airflow_gave_up_on_is_stopped_when_its_next_try_arrives(executor_factory) -> None:
    ex = executor_factory(gpus="1xA100-40GB", behaviour={"t": {"seconds": 120.0}})
    first = make_workload("t", config={"exclusive": True})
    submit(ex, first)
    assert first.key in ex.active
    second = make_workload("t", try_number=2, config={"exclusive": True})  # after a heartbeat timeout
    submit(ex, second)
    assert second.key in ex.flow.deferred
    ex.flow.deferred[second.key].taken_at -= SUPERSEDED_GRACE_S + 1  # the grace has passed
    run_until(ex, lambda: second.key in ex.active, timeout=30)
    assert first.key not in ex.event_buffer  # Airflow has moved on: its end is not reported


def test_end_returns_at_once_and_leaves_running_tries_to_a_later_executor(executor_factory) -> None:
    ex = executor_factory(gpus="1xA100-40GB", behaviour={"long": {"seconds": 30.0}})
    long, wait = make_workload("long", config={"exclusive": True}), make_workload("wait", config={"exclusive": True})
    submit(ex, long, wait)
    handle = ex.active[long.key].handle
    started = time.monotonic()
    ex.end()
    assert time.monotonic() - started < 10
    assert handle is not None and handle.poll() is None  # the running try goes on in its own session
    assert not ex.flow.waiting  # type: ignore[union-attr]  # the waiting one went back to the scheduler
    handle.kill()
    deadline = time.time() + 15
    while handle.poll() is None and time.time() < deadline:
        time.sleep(0.2)


def test_sigusr2_debug_dump_shows_the_gpus_and_why_tries_wait(executor_factory, caplog) -> None:
    ex = executor_factory(gpus="1xA100-40GB", behaviour={"a": {"seconds": 2.0}})
    submit(ex, make_workload("a", config={"exclusive": True}), make_workload("b", config={"exclusive": True}))
    with caplog.at_level(logging.INFO):
        ex.debug_dump()
    text = caplog.text
    assert "GPU-SIM-0000: dag.a" in text or "GPU-SIM-0000: " in text
    assert "waiting tries (1)" in text and "exclusive" in text


def test_the_waiting_reason_reaches_airflows_audit_log(executor_factory) -> None:
    ex = executor_factory(gpus="1xA100-40GB", behaviour={"a": {"seconds": 2.0}})
    a, b = make_workload("a", config={"exclusive": True}), make_workload("b", config={"exclusive": True})
    submit(ex, a, b)
    events = [e for e in ex._task_event_logs if e.event == "carma: waiting for a GPU"]
    assert [(e.task_id, e.try_number) for e in events] == [("b", 1)]
    assert "exclusive" in events[0].extra
    run_until(ex, lambda: not ex.active and not ex.waiting, timeout=20)
    assert ex.event_buffer[b.key][0] == TaskInstanceState.SUCCESS
    note = seen_env("b")["CARMA_PLACEMENT"]  # what the listener prints at the top of the try's own log
    assert "waited" in note and "exclusive" in note, note
    assert "waited" not in seen_env("a")["CARMA_PLACEMENT"]


def test_a_heartbeat_that_raises_is_logged_and_the_scheduler_runs_on(executor_factory, caplog) -> None:
    ex = executor_factory(gpus="1xA100-40GB", behaviour={"t": {"seconds": 0.2}})
    flow = ex.flow
    real = flow.monitor

    class FellOffTheBus:  # the NVML boundary failing after a good start
        def __getattr__(self, name: str) -> object:
            return getattr(real, name)

        def reading(self) -> object:
            raise RuntimeError("NVML: GPU has fallen off the bus")

        latest = reading

    flow.monitor = FellOffTheBus()
    with caplog.at_level(logging.ERROR):
        ex.sync()  # would end the scheduler loop if it raised
    assert "the heartbeat failed" in caplog.text and "fallen off the bus" in caplog.text
    flow.monitor = real
    w = make_workload("t", config={"memory": "1GiB"})
    submit(ex, w)
    run_until(ex, lambda: w.key in ex.event_buffer)  # it recovers at the next heartbeat


def test_a_hand_over_that_raises_is_held_and_counted_once_each_time(executor_factory, monkeypatch, caplog) -> None:
    from carma_airflow.executor.bookkeeping import metrics

    ex = executor_factory(gpus="1xA100-40GB", behaviour={"t": {"seconds": 0.2}})
    counted: list[str] = []  # the StatsD boundary: what carma.executor_errors would send, by step
    monkeypatch.setattr(metrics.stats, "incr", lambda name, *_, tags=None, **__: counted.append((tags or {})["step"]))

    def broken(key: object, workload: object) -> bool:
        raise RuntimeError("the flow could not take it")

    real = ex.flow.take_over
    monkeypatch.setattr(ex.flow, "take_over", broken)
    w = make_workload("t", config={"memory": "1GiB"})
    with caplog.at_level(logging.ERROR):
        submit(ex, w)  # handed over (raises: held), then the heartbeat tries the held try again (raises)
    assert counted == ["hand-over", "hand-over"] and w.key in ex.standby.held and ex.has_task(w.ti)
    assert caplog.text.count("not taken; held") == 2 and "could not take it" in caplog.text
    monkeypatch.setattr(ex.flow, "take_over", real)
    run_until(ex, lambda: w.key in ex.event_buffer)  # taken at a later heartbeat, and run
    assert ex.event_buffer[w.key][0] == TaskInstanceState.SUCCESS and not ex.standby.held
