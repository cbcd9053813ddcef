"""Helpers of the CarmaExecutor unit tests (the fixture is in conftest.py): no Airflow database, no scheduler.

The task supervisor is replaced at the true boundary (``BaseExecutor.run_workload``) by a fake
that runs in the executor's real per-task process: it records the environment it was given and
leaves a result file, as the listener would in a real task process.  Monitor (simulated GPUs),
placer and store (SQLite in tmp_path) are the real ones.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

os.environ.setdefault("AIRFLOW__API_AUTH__JWT_SECRET", "unit-test-secret")

from airflow.executors.workloads import ExecuteTask

from carma_airflow import testing
from carma_airflow.core.recovery import EndPlan, Failure, FailureKind
from carma_airflow.executor import CarmaExecutor
from carma_airflow.executor.tries import Try, TryState
from carma_airflow.taskrun.outcome import TryResult, write_result

BEHAVIOUR: dict[str, dict[str, Any]] = {}
# a simulated try's result: a CUDA OOM at 10,000 MiB, retried as Airflow would (a behaviour's "result")
OOM_RESULT: dict[str, Any] = {
    "state": "up_for_retry",
    "failure_kind": "cuda-oom",
    "exc_type": "OutOfMemoryError",
    "message": "CUDA out of memory. Tried to allocate 2.00 GiB",
    "peak_mib": 10000,
}


@dataclass(frozen=True)
class FakeTi:
    """The task-instance fields an ended try's lessons read (no Airflow database)."""

    dag_id: str
    task_id: str
    run_id: str = "r"
    map_index: int = -1
    try_number: int = 1


def running_try(task: str, started_at: float) -> Try:
    """A try of ``dag.task`` RUNNING since ``started_at``."""
    return Try(key=task, rkey=task, ti=FakeTi("dag", task), state=TryState.RUNNING, started_at=started_at)


def make_workload(
    task_id: str,
    *,
    try_number: int = 1,
    config: dict[str, Any] | None = None,
    run_id: str = "run1",
    dag_id: str = "dag",
    author_retries: int | None = None,
    priority_weight: int = 1,
) -> ExecuteTask:
    return testing.make_workload(
        task_id,
        dag_id=dag_id,
        run_id=run_id,
        try_number=try_number,
        executor_config=_executor_config(config, author_retries),
        token="old-token",
        priority_weight=priority_weight,
    )


def _executor_config(config: dict[str, Any] | None, author_retries: int | None) -> dict[str, Any] | None:
    """What the scheduler hands over: the DAG's block, and the author's retries the cluster policy recorded."""
    out: dict[str, Any] = {} if config is None else {"carma": config}
    if author_retries is not None:
        out["carma_author_retries"] = author_retries
    return out or None


def fake_run_workload(workload: ExecuteTask, **_: Any) -> int:
    """Runs in the per-task process: record env, behave as told, leave the try's result."""
    out_dir = Path(os.environ["CARMA_TEST_OUT"])
    if getattr(workload, "type", None) == "ExecuteCallback":  # an executor callback: CPU only
        seen = {"CUDA_VISIBLE_DEVICES": os.environ.get("CUDA_VISIBLE_DEVICES"), "data": workload.callback.data}
        (out_dir / f"callback-{workload.callback.id}.json").write_text(json.dumps(seen))
        if workload.callback.data.get("exit", 0):  # as Airflow's callback supervisor does
            raise RuntimeError(f"Callback subprocess exited with code {workload.callback.data['exit']}")
        return 0
    task_id = workload.ti.task_id
    behaviour = json.loads(os.environ.get("CARMA_TEST_BEHAVIOUR", "{}")).get(task_id, {})
    env = {
        k: os.environ.get(k)
        for k in (
            "CUDA_VISIBLE_DEVICES",
            "CUDA_DEVICE_ORDER",
            "CARMA_PLACEMENT",
            "TF_FORCE_GPU_ALLOW_GROWTH",
            "CARMA_CONFIG_ERROR",
            "CARMA_END_PLAN",
            "CARMA_REFUSED",
        )
    }
    env["token"] = workload.token
    (out_dir / f"{task_id}.{workload.ti.try_number}.json").write_text(json.dumps(env))
    if "train" in behaviour:  # a real simulated training run on the GPUs it was given
        from carma_airflow.core.recovery import classify_failure
        from carma_airflow.testing import simulated_training

        try:
            simulated_training(**behaviour["train"])
        except Exception as exc:
            failure = classify_failure(type(exc).__name__, str(exc))
            write_result(TryResult("failed", failure.kind.value, type(exc).__name__, str(exc)))
            return 1
        write_result(TryResult("success", peak_mib=behaviour["train"]["peak_mib"]))
        return 0
    if behaviour.get("touch_locks"):  # what a task's start-up takes: the logging lock, SQLite's mutexes
        import logging
        import sqlite3

        logging.getLogger("carma.test").warning("try %s logs", task_id)
        with sqlite3.connect(out_dir / f"{task_id}.db") as db:
            db.execute("create table if not exists t (x)")
            db.execute("insert into t values (1)")
    _run_for(behaviour, out_dir)
    result = TryResult.from_json(behaviour.get("result", {"state": "success", "peak_mib": 1000}))
    assert result is not None, f"not a try result: {behaviour.get('result')}"
    write_result(result)
    time.sleep(behaviour.get("linger", 0.0))  # the supervisor outlives the task's own report
    return 0


def _run_for(behaviour: dict[str, Any], out: Path) -> None:
    """``seconds`` of work; with ``until`` (a file name) the try ends once the test releases it
    (:func:`release`), ``seconds`` being then the longest it runs."""
    seconds = float(behaviour.get("seconds", 0.2))
    if "until" not in behaviour:
        time.sleep(seconds)
        return
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and not (out / behaviour["until"]).exists():
        time.sleep(0.05)


def release(name: str) -> None:
    """End the tries whose behaviour says ``until: name`` (they run no longer than the test needs)."""
    (out_dir() / name).touch()


def make_callback(path: str = "callbacks.notify", *, exit_code: int = 0) -> Any:
    """An ``ExecuteCallback`` as the scheduler builds it for a missed deadline's ``SyncCallback``."""
    from uuid import uuid4

    from airflow.executors.workloads import ExecuteCallback
    from airflow.executors.workloads.base import BundleInfo
    from airflow.executors.workloads.callback import CallbackDTO

    dto = CallbackDTO(id=str(uuid4()), fetch_method="import_path", data={"path": path, "kwargs": {}, "exit": exit_code})
    return ExecuteCallback(
        callback=dto, dag_rel_path=Path("dag.py"), token="t", log_path=None, bundle_info=BundleInfo(name="dags")
    )


def out_dir() -> Path:
    return Path(os.environ["CARMA_TEST_OUT"])


def seen_env(task_id: str, try_number: int = 1) -> dict[str, Any]:
    return json.loads((out_dir() / f"{task_id}.{try_number}.json").read_text())


def seen_plan(task_id: str, try_number: int = 1) -> EndPlan:
    """The retry plan the try was handed (CARMA_END_PLAN, core/recovery.EndPlan)."""
    return plan_in(seen_env(task_id, try_number))


def plan_in(env: dict[str, Any]) -> EndPlan:
    plan = EndPlan.from_json(json.loads(env["CARMA_END_PLAN"]))
    assert plan is not None, env["CARMA_END_PLAN"]
    return plan


def may_retry_kill(env: dict[str, Any]) -> bool:
    """Whether the try's plan retries it if it is killed by a signal (what the kill guard applies)."""
    return plan_in(env).verdict(Failure(FailureKind.KILLED, "killed")).retry


def submit(ex: CarmaExecutor, *workloads: ExecuteTask) -> None:
    """What the scheduler's heartbeat does with new tries: hand them over, then sync (the one
    placement pass of the heartbeat)."""
    for w in workloads:
        ex.queue_workload(w, session=None)  # type: ignore[arg-type]
    ex.trigger_tasks(ex.parallelism - len(ex.running))  # what heartbeat() offers
    ex.sync()


def abandon(ex: CarmaExecutor) -> None:
    """Kill an executor as far as its tries go: nothing of it runs any more (monitor, heartbeat to
    its peers, its book of tries), its task processes run on."""
    from carma_airflow.executor.tries import TryState

    assert ex.flow is not None
    ex.monitor.stop()
    ex.flow.peers.close()  # its row in the store says it stopped (a killed one: its beat goes stale)
    book = ex.flow.tries
    for attempt in list(book.all()):  # forgotten, not ended: no store write, no report, GPUs untouched
        book.move(attempt, TryState.ENDED)


def run_until(ex: CarmaExecutor, done: Callable[[], bool], timeout: float = 20.0, *, flush: bool = True) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        ex.monitor.sample_once()  # type: ignore[union-attr]
        ex.sync()
        if done():
            # what the executor did is in the store once its writer has caught up (writer.py)
            assert not flush or ex.writer is None or ex.writer.flush(), "the store writer did not catch up"
            return
        time.sleep(0.05)
    raise AssertionError("condition not reached")
