"""dags/history_example.py on CarmaExecutor: the first run is placed with the floor, its peak is
recorded, and the second run's estimate is the learned peak.

The executor, its simulated GPUs, placer and store (SQLite in tmp_path) are the real ones.  Only
Airflow's task supervisor is replaced, at its boundary (``BaseExecutor.run_workload``): in the
executor's own per-task process the fake runs the DAG's real ``train`` callable (carma's
synthetic training on the simulated GPU ledger), then the carma listener's success hook, which
reads the peak from the ledger and leaves the try's result for the executor, as in a real task.
"""

from __future__ import annotations

import importlib.util
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from carma_airflow.testing import make_workload, try_runner_env

os.environ.setdefault("AIRFLOW__API_AUTH__JWT_SECRET", "unit-test-secret")

from airflow.executors.workloads import ExecuteTask

from carma_airflow.config.settings import CarmaSettings
from carma_airflow.executor import CarmaExecutor

ROOT = Path(__file__).resolve().parents[2]
DAG_ID, TASK_ID = "carma_history_example", "train"
PEAK_MIB = 6000


def _load_dag() -> Any:
    spec = importlib.util.spec_from_file_location("history_example_dag", ROOT / "dags" / "history_example.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.carma_history_example()  # the @dag function builds the DAG object


DAG = _load_dag()
TRAIN = DAG.get_task(TASK_ID)


def run_dag_task(workload: ExecuteTask, **_: Any) -> int:
    """In the per-task process: the DAG's own task code, then the listener, as a worker would."""
    from carma_airflow.taskrun import listener

    try:
        TRAIN.python_callable(params={"peak_mib": PEAK_MIB, "seconds": 0.3})
    except Exception as exc:
        listener.on_task_instance_failed(None, None, exc)
        return 1
    listener.on_task_instance_success(None, None)
    return 0


def workload(run_id: str) -> ExecuteTask:
    return make_workload(
        TASK_ID, dag_id=DAG_ID, run_id=run_id, executor_config=TRAIN.executor_config, dag_rel_path="history_example.py"
    )


@pytest.fixture
def executor(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[CarmaExecutor]:
    for name, value in try_runner_env(run_dag_task).items():
        monkeypatch.setenv(name, value)
    values = {"gpu_backend": "simulated", "simulated_gpus": "1xA100-40GB", "sample_period": "0.2"}
    ex = CarmaExecutor(parallelism=4)
    ex.configure(CarmaSettings.load(values.get, str(tmp_path)))
    yield ex
    ex.end()


def run_to_end(ex: CarmaExecutor, key: Any, timeout: float = 30.0) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        ex.monitor.sample_once()  # type: ignore[union-attr]
        ex.sync()
        if key not in ex.active and key not in ex.waiting:
            assert ex.writer is not None and ex.writer.flush()  # its records reach the store
            return
        time.sleep(0.05)
    raise AssertionError(f"{key} did not finish")


def test_second_run_is_placed_with_the_peak_the_first_run_reached(executor: CarmaExecutor) -> None:
    ex = executor
    assert ex.store is not None and ex.settings is not None and ex.settings.estimator == "history"

    first = workload("run1")
    ex.queue_workload(first, session=None)  # type: ignore[arg-type]
    ex.trigger_tasks(ex.parallelism)
    ex.sync()  # the heartbeat's one placement pass, as BaseExecutor.heartbeat runs it after the hand-over
    need = ex.active[first.ti.key].request.memory
    assert (need.source, need.mib) == ("floor", 5120)  # nothing known yet: the floor
    run_to_end(ex, first.ti.key)
    assert ex.store.peaks(DAG_ID, TASK_ID) == [PEAK_MIB]  # the listener's peak, read from the ledger

    second = workload("run2")
    ex.queue_workload(second, session=None)  # type: ignore[arg-type]
    ex.trigger_tasks(ex.parallelism)
    ex.sync()  # the heartbeat's one placement pass, as BaseExecutor.heartbeat runs it after the hand-over
    need = ex.active[second.ti.key].request.memory
    assert need.source == f"history (1 run(s), max {PEAK_MIB} MiB)"
    assert need.mib == 6656  # 6000 MiB + 10 %, rounded up to 256 MiB
    run_to_end(ex, second.ti.key)

    sources = {p.run_id: (p.estimate_source, p.estimate_mib) for p in ex.store.placements(DAG_ID)}
    assert sources == {"run1": ("floor", 5120), "run2": (f"history (1 run(s), max {PEAK_MIB} MiB)", 6656)}
    assert ex.store.peaks(DAG_ID, TASK_ID) == [PEAK_MIB, PEAK_MIB]
