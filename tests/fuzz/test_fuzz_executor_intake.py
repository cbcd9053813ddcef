"""CarmaExecutor's intake under junk executor_config: the scheduler loop must never see an exception.

The harness follows tests/executor/conftest.py: the task supervisor is replaced at the true
boundary (``BaseExecutor.run_workload``) by a fake that records the environment it was given in
the executor's real per-task process; monitor (simulated GPUs), placer and store (SQLite in
tmp_path) are the real ones.  One executor serves all examples of a test, each example a new task.
"""

from __future__ import annotations

import itertools
import json
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from fuzz_runner import recording_run_workload

from carma_airflow.testing import make_workload, try_runner_env

os.environ.setdefault("AIRFLOW__API_AUTH__JWT_SECRET", "fuzz-test-secret-" + "x" * 64)  # >= 64 bytes: no key warning

from airflow.executors.workloads import ExecuteTask
from airflow.utils.state import TaskInstanceState
from hypothesis import given, settings
from hypothesis import strategies as st

from carma_airflow.config.settings import CarmaSettings
from carma_airflow.config.task_config import parse_task_config
from carma_airflow.core.errors import ConfigError
from carma_airflow.executor import CarmaExecutor
from carma_airflow.launching import check_task_env

FUZZ = settings.get_profile("carma-fuzz")
_ids = itertools.count()

scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**80), max_value=2**80)
    | st.floats()
    | st.text(max_size=20)
    | st.sampled_from(["12GiB", "1e3", "-1", "0", "A100", "\x00", "GPU-0,GPU-1", "a\nb"])
)
junk = st.recursive(
    scalars,
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=6) | st.integers(), children),
    max_leaves=8,
)
fields = st.sampled_from(["gpus", "memory", "exclusive", "gpu_model", "priority"]) | st.text(max_size=6)
executor_configs = (
    junk
    | st.builds(lambda block: {"carma": block}, st.dictionaries(fields, junk, max_size=4))
    | st.builds(lambda block: {"carma": block}, junk)
)


@pytest.fixture
def executor(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[CarmaExecutor]:
    for name, value in try_runner_env(recording_run_workload).items():
        monkeypatch.setenv(name, value)
    (tmp_path / "out").mkdir()
    monkeypatch.setenv("CARMA_FUZZ_OUT", str(tmp_path / "out"))
    values = {
        "gpu_backend": "simulated",
        "simulated_gpus": "2xA100-40GB",
        "sample_period": "0.2",
        "lock_seconds": "0.1",
    }
    ex = CarmaExecutor(parallelism=10_000)
    ex.configure(CarmaSettings.load(values.get, str(tmp_path)))
    yield ex
    ex.end()


def workload(task_id: str, executor_config: Any) -> ExecuteTask:
    w = make_workload(task_id, dag_id="fuzz", bundle="d")
    # after construction, as a row unpickled from the database could hold it: no type check
    w.ti.executor_config = executor_config
    return w


def settle(ex: CarmaExecutor, done: Callable[[], bool], timeout: float = 30.0) -> None:
    """Heartbeat (sync) until ``done``: the task's process ended and the executor took note."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ex.sync()
        if done():
            return
        time.sleep(0.01)
    raise AssertionError("the task was neither run, nor waiting, nor failed")


@settings(FUZZ, max_examples=max(FUZZ.max_examples // 2, 20))
@given(executor_config=executor_configs)
def test_junk_executor_config_fails_that_task_only(executor: CarmaExecutor, executor_config: Any) -> None:
    task_id = f"t{next(_ids)}"
    w = workload(task_id, executor_config)
    executor.queue_workload(w, session=None)  # type: ignore[arg-type]
    executor.trigger_tasks(1)  # -> _process_workloads: must not raise, whatever the config
    try:
        parse_task_config(executor_config, where=f"task {task_id!r}: executor_config")
    except ConfigError as exc:
        # run without GPUs, the message passed on for the task's first log line
        settle(executor, lambda: w.key not in executor.bare)
        seen = json.loads((Path(os.environ["CARMA_FUZZ_OUT"]) / f"{task_id}.json").read_text())
        assert seen["CUDA_VISIBLE_DEVICES"] == ""
        assert seen["CARMA_CONFIG_ERROR"] == str(exc)
        assert check_task_env(seen) == seen
    else:
        # a valid config is planned: it waits, runs, or fails at once as one that never fits
        settle(executor, lambda: w.key not in executor.active)
        events = executor.get_event_buffer()
        assert w.key in executor.waiting or events.get(w.key, (None,))[0] in (
            TaskInstanceState.SUCCESS,
            TaskInstanceState.FAILED,
        )
        executor.flow.takeback.withdraw(w.key)  # leave the GPUs to the next example
