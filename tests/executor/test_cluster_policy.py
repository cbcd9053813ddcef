"""The cluster policy on real DAG objects: OOM tries on top of the author's retries, the author's
count recorded for the executor, and a refused try that fails with its reason when it runs."""

from __future__ import annotations

import json
from datetime import datetime

import pytest
from airflow.providers.standard.operators.bash import BashOperator
from airflow.sdk import DAG

from carma_airflow import gpu_task
from carma_airflow.core.errors import TaskRefusedError
from carma_airflow.dagparse.cluster_policy import (
    AUTHOR_RETRIES_KEY,
    REFUSED_ENV,
    author_retries_of,
    refusal_env,
    task_policy,
)
from carma_airflow.taskrun.retry import CudaOomRetryPolicy


def _task(task_id: str = "t", **kwargs: object) -> BashOperator:
    with DAG("d", start_date=datetime(2026, 1, 1), schedule=None):
        return BashOperator(task_id=task_id, bash_command="true", **kwargs)  # type: ignore[arg-type]


def test_retries_are_raised_by_the_oom_tries_and_the_authors_count_is_recorded() -> None:
    shared = {"carma": {"memory": "2GiB"}}
    task = _task(retries=1, executor="CarmaExecutor", executor_config=shared)
    task_policy(task)
    assert task.retries == 1 + 2  # [carma] oom_retries defaults to 2
    assert isinstance(task.retry_policy, CudaOomRetryPolicy) and task.retry_policy.author_retries == 1
    assert author_retries_of(task.executor_config) == 1
    assert AUTHOR_RETRIES_KEY not in shared  # a copy: default_args may share the dict
    task_policy(task)  # the worker parses again: applied once
    assert task.retries == 3


def test_a_bad_config_keeps_the_authors_retries_and_fails_when_run() -> None:
    task = _task(retries=2, executor="CarmaExecutor", executor_config={"carma": {"gpus": "two"}})
    task_policy(task)
    assert task.retries == 2
    with pytest.raises(TaskRefusedError, match=r"executor_config\['carma'\]\['gpus'\]"):
        task.execute({})


def test_a_refused_try_fails_with_the_reason_only_for_its_own_task(monkeypatch: pytest.MonkeyPatch) -> None:
    env = refusal_env("d", "wide", "never fits: asks for 3 GPUs\nbut the largest host has 2 GPUs")
    assert env["CUDA_VISIBLE_DEVICES"] == "" and "\n" not in env[REFUSED_ENV]
    monkeypatch.setenv(REFUSED_ENV, env[REFUSED_ENV])
    wide, other = _task("wide", **gpu_task(gpus=3)), _task("other", **gpu_task())
    task_policy(wide)
    task_policy(other)
    with pytest.raises(TaskRefusedError, match="never fits: asks for 3 GPUs but the largest host"):
        wide.execute({})
    assert getattr(other.execute, "__func__", None) is BashOperator.execute  # untouched
    assert json.loads(env[REFUSED_ENV])["task_id"] == "wide"


def test_author_retries_of_rejects_what_the_policy_did_not_write() -> None:
    assert author_retries_of(None) is None
    assert author_retries_of({"carma": {}}) is None
    assert author_retries_of({AUTHOR_RETRIES_KEY: True}) is None
    assert author_retries_of({AUTHOR_RETRIES_KEY: -1}) is None
    assert author_retries_of({AUTHOR_RETRIES_KEY: 0}) == 0


def test_executor_config_in_expand_kwargs_fails_each_instance_with_what_to_write() -> None:
    with DAG("d", start_date=datetime(2026, 1, 1), schedule=None):
        mapped = BashOperator.partial(task_id="m", **gpu_task()).expand_kwargs(
            [{"bash_command": "true", "executor_config": {"carma": {"memory": "4GiB"}}}, {"bash_command": "true"}]
        )
    task_policy(mapped)
    # Airflow's own TypeError would come first: the key is gone, our refusal says what to write
    assert all("executor_config" not in entry for entry in mapped.expand_input.value)
    with pytest.raises(TaskRefusedError, match=r"memory_by_index=\['4GiB', '12GiB', \.\.\.\]"):
        mapped.partial_kwargs["pre_execute"]({})


@pytest.mark.parametrize(
    ("config", "said"),
    [
        ({"carma": {"memroy": "20GiB"}}, "unknown key 'memroy'; did you mean 'memory'?"),
        ({"crama": {"memory": "20GiB"}}, "unknown section 'crama'; did you mean 'carma'?"),
        (gpu_task(memroy="20GiB")["executor_config"], "unknown key 'memroy'; did you mean 'memory'?"),
    ],
)
def test_a_typo_fails_that_task_with_the_nearest_key(config: dict[str, object], said: str) -> None:
    task = _task(retries=1, executor="CarmaExecutor", executor_config=config)
    task_policy(task)
    assert task.retries == 1  # the author's retries only: no OOM tries for a task that cannot run
    with pytest.raises(TaskRefusedError) as caught:
        task.execute({})
    assert said in str(caught.value) and "task 't'" in str(caught.value)


def test_allow_unknown_keys_lets_a_team_keep_them(monkeypatch: pytest.MonkeyPatch) -> None:
    from carma_airflow.dagparse import cluster_policy

    monkeypatch.setenv("AIRFLOW__CARMA__ALLOW_UNKNOWN_KEYS", "True")
    cluster_policy._allow_unknown.cache_clear()
    try:
        task = _task(executor="CarmaExecutor", executor_config={"carma": {"memroy": "20GiB", "memory": "2GiB"}})
        task_policy(task)
    finally:
        cluster_policy._allow_unknown.cache_clear()
    assert getattr(task.execute, "__func__", None) is BashOperator.execute  # untouched: it runs
    assert isinstance(task.retry_policy, CudaOomRetryPolicy)
