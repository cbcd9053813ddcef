"""`carma gpus` and `carma why` say what waits, across executors, and when no executor runs."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from pathlib import Path

from test_ops import carma, env  # noqa: F401  (the fixture)

from carma_airflow.store.peers import ExecutorRecord
from carma_airflow.store.records import PlacementRecord, TryOutcome
from carma_airflow.store.store import Store


def _store(stack_env: dict[str, str]) -> Store:
    return Store(f"sqlite:///{Path(stack_env['AIRFLOW_HOME']) / 'carma.db'}")


def _beat(stack_env: dict[str, str], name: str, ago_s: float, *, stopped: bool = False) -> None:
    store = _store(stack_env)
    at = datetime.now(timezone.utc) - timedelta(seconds=ago_s)
    store.register_executor(
        ExecutorRecord(f"gpu-01:{name}", "gpu-01", 1, at - timedelta(hours=1), at, stopped_at=at if stopped else None)
    )
    store.close()


def test_gpus_lists_the_tries_waiting_and_says_no_executor_runs(env: dict[str, str]) -> None:  # noqa: F811
    out = carma(env, "gpus")
    assert out.returncode == 0, out.stderr
    assert "note: no CarmaExecutor has registered in this store" in out.stdout
    assert "1 tries wait for a GPU" in out.stdout
    assert "train.gpt try 1" in out.stdout and "waiting: no GPU with 70.3 GiB free" in out.stdout
    _beat(env, "live", 1)
    again = carma(env, "gpus").stdout
    assert "note:" not in again and "1 tries wait for a GPU" in again


def test_why_says_the_executor_is_not_running_above_the_last_entries(env: dict[str, str]) -> None:  # noqa: F811
    _beat(env, "old", 3600, stopped=True)
    out = carma(env, "why", "train.bert")
    assert out.returncode == 0, out.stderr
    assert out.stderr.startswith("note: no CarmaExecutor is running: the last one (gpu-01:old) stopped 60 min ago")
    assert out.stdout.startswith("train.bert ")  # stdout as before: what the store says of the task
    _beat(env, "new", 1)
    assert "note:" not in carma(env, "why", "train.bert").stderr


def test_why_finds_a_try_refused_for_a_bad_executor_config(env: dict[str, str]) -> None:  # noqa: F811
    store = _store(env)
    now = datetime.now(timezone.utc)
    store.upsert_placement(  # as the executor records it (intake.refused_write)
        PlacementRecord(
            key="k3",
            dag_id="train",
            task_id="bad",
            run_id="r1",
            try_number=1,
            decided_at=now,
            ended_at=now,
            outcome=TryOutcome.FAILED,
            label="train.bad",
            summary="refused, never placed: task 'bad': executor_config['carma']['gpus']: write an integer",
        )
    )
    store.close()
    out = carma(env, "why", "train.bad")
    assert out.returncode == 0, out.stderr
    assert "train.bad run r1 try 1: failed" in out.stdout and "executor_config['carma']['gpus']" in out.stdout
