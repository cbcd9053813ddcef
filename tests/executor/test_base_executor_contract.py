"""Airflow's generic executor contract (what Airflow's own ``test_base_executor.py`` checks of
every executor), held against CarmaExecutor with its real parts: the event buffer, slots,
state changes, metrics with several executors, adoption, multi-team settings, the CLI group.

Written for CarmaExecutor: where BaseExecutor's tests use a bare executor, these run real tries
through the launcher on simulated GPUs.  The metrics backend is the only thing replaced (the
StatsD boundary: the gauges are recorded, not sent).
"""

from __future__ import annotations

import textwrap
from typing import Any

import pytest
from airflow.executors.base_executor import BaseExecutor
from airflow.models.taskinstancekey import TaskInstanceKey
from airflow.utils.state import TaskInstanceState
from executor_helpers import make_workload, run_until, submit

from carma_airflow.config.settings import CarmaSettings
from carma_airflow.executor import CarmaExecutor


def test_class_flags_say_what_the_executor_supports() -> None:
    assert CarmaExecutor.is_local and CarmaExecutor.serve_logs and CarmaExecutor.is_production
    assert CarmaExecutor.supports_callbacks  # the scheduler sends callbacks to the default executor regardless
    assert CarmaExecutor.supports_multi_team
    assert not CarmaExecutor.supports_connection_test  # it would run on the scheduler's host: not ours to run


def test_zero_parallelism_is_refused_as_by_every_executor() -> None:
    with pytest.raises(ValueError, match="parallelism is set to 0 or lower"):
        CarmaExecutor(parallelism=0)


def test_repr_names_parallelism_and_team() -> None:
    assert repr(CarmaExecutor(parallelism=10)) == "CarmaExecutor(parallelism=10)"
    assert repr(CarmaExecutor(parallelism=10, team_name="teamA")) == "CarmaExecutor(parallelism=10, team_name='teamA')"


def test_event_buffer_is_filtered_by_dag_and_drained(executor_factory) -> None:
    ex = executor_factory(behaviour={"a": {"seconds": 0.2}, "b": {"seconds": 0.2}, "c": {"seconds": 0.2}})
    a, b, c = (
        make_workload("a", dag_id="d1", config={"memory": "1GiB"}),
        make_workload("b", dag_id="d2", config={"memory": "1GiB"}),
        make_workload("c", dag_id="d2", config={"memory": "1GiB"}),
    )
    submit(ex, a, b, c)
    run_until(ex, lambda: len(ex.event_buffer) == 3, timeout=30)
    assert set(ex.get_event_buffer(("d1",))) == {a.key}
    rest = ex.get_event_buffer()
    assert set(rest) == {b.key, c.key} and all(state == TaskInstanceState.SUCCESS for state, _ in rest.values())
    assert not ex.event_buffer and not ex.running and ex.slots_occupied == 0


def test_fail_success_and_running_state_move_keys_as_airflow_expects(executor_factory) -> None:
    ex = executor_factory()
    key = TaskInstanceKey("d", "t", "r", 1)
    ex.running.add(key)
    ex.running_state(key, info="i")
    assert key in ex.running and ex.event_buffer[key] == (TaskInstanceState.RUNNING, "i")
    ex.fail(key, info="why")
    assert key not in ex.running and ex.event_buffer[key] == (TaskInstanceState.FAILED, "why")
    other = TaskInstanceKey("d", "u", "r", 1)
    ex.running.add(other)
    ex.success(other)
    assert not ex.running and ex.slots_occupied == 0


def test_heartbeat_takes_queued_tries_and_reports_open_slots_per_executor(
    executor_factory, monkeypatch: pytest.MonkeyPatch
) -> None:
    from airflow.executors import base_executor

    gauges: list[tuple[str, Any]] = []
    monkeypatch.setattr(base_executor.stats, "gauge", lambda name, value=None, **_: gauges.append((name, value)))
    monkeypatch.setattr(
        base_executor.ExecutorLoader, "get_executor_names", staticmethod(lambda *a, **k: ["LocalExecutor", "Carma"])
    )
    ex = executor_factory(gpus="1xA100-40GB", parallelism=4, behaviour={"x": {"seconds": 2.0}})
    for name in ("x", "y", "z"):
        ex.queue_workload(make_workload(name, config={"exclusive": True}), session=None)  # type: ignore[arg-type]
    ex.heartbeat()  # the scheduler's call: metrics, trigger_tasks, sync
    assert not ex.queued_tasks  # every queued try was taken (none left counting against parallelism)
    assert len(ex.running) == 1 and len(ex.waiting) == 2
    ex.heartbeat()
    by_name = dict(gauges)
    assert by_name["executor.open_slots.CarmaExecutor"] == 3  # parallelism 4 - 1 running: waiting tries are not counted
    assert by_name["executor.running_tasks.CarmaExecutor"] == 1
    assert by_name["executor.queued_tasks.CarmaExecutor"] == 0


def test_adoption_returns_what_it_cannot_adopt(executor_factory) -> None:
    ex = executor_factory()
    unknown = make_workload("gone").ti
    assert list(ex.try_adopt_task_instances([unknown])) == [unknown]  # type: ignore[list-item]
    assert BaseExecutor.try_adopt_task_instances(ex, []) == []


def test_settings_are_read_for_the_executors_team(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    from airflow.configuration import conf
    from airflow.executors.base_executor import ExecutorConf

    monkeypatch.setenv("AIRFLOW_HOME", str(tmp_path))
    conf.read_string(textwrap.dedent("[carma]\npolicy = most-free-memory\n\n[team_gpu=carma]\npolicy = exclusive\n"))
    try:
        assert CarmaSettings.from_airflow(ExecutorConf(team_name=None)).policy == "most-free-memory"
        assert CarmaSettings.from_airflow(ExecutorConf(team_name="team_gpu")).policy == "exclusive"
    finally:
        conf.remove_section("team_gpu=carma")
        conf.remove_option("carma", "policy")


def test_the_cli_group_is_vended_and_parses() -> None:
    commands = CarmaExecutor.get_cli_commands()
    assert [c.name for c in commands] == ["carma"]
    parser = CarmaExecutor(parallelism=2)._get_parser()
    args = parser.parse_args(["carma", "gpus"])
    assert callable(args.func)
