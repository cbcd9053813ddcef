"""Cluster policy (entry point ``airflow.policy``): validate GPU tasks and give them OOM retries.

Runs wherever DAGs are parsed (dag-processor, and the worker before a task runs).  An invalid
``executor_config`` fails *that task* with a message naming the field and what to write: the
task's ``execute`` is replaced by one raising AirflowFailException, so the rest of the DAG runs
and the message is the first line of the task's log.  With ``[carma] strict_validation = True``
the whole DAG fails to import instead (AirflowClusterPolicyViolation).  The ``gpu_task()``
helper validates where the DAG is written, so helper users see mistakes at import time.
"""

from __future__ import annotations

import functools
from typing import Any

from airflow.exceptions import AirflowClusterPolicyViolation
from airflow.policies import hookimpl

from carma_airflow.core.errors import ConfigError
from carma_airflow.settings import option_default
from carma_airflow.task_config import EXECUTOR_NAME, parse_task_config


def is_carma_task(task: Any) -> bool:
    executor = getattr(task, "executor", None)
    return isinstance(executor, str) and (executor == EXECUTOR_NAME or executor.endswith(f".{EXECUTOR_NAME}"))


@functools.lru_cache(maxsize=1)
def _oom_settings() -> tuple[int, float]:
    from airflow.configuration import conf

    retries = conf.getint("carma", "oom_retries", fallback=option_default("oom_retries"))
    delay = conf.getfloat("carma", "oom_retry_delay", fallback=option_default("oom_retry_delay"))
    return max(0, retries), max(0.0, delay)


@functools.lru_cache(maxsize=1)
def _strict() -> bool:
    from airflow.configuration import conf

    return conf.getboolean("carma", "strict_validation", fallback=option_default("strict_validation"))


def _fail_at_run(task: Any, message: str) -> None:
    from airflow.sdk.exceptions import AirflowFailException

    def execute(*args: Any, **kwargs: Any) -> None:
        raise AirflowFailException(f"CARMA cannot run this task: {message}")

    task.retries = 0
    task.execute = execute


@hookimpl
def task_policy(task: Any) -> None:
    if not is_carma_task(task):
        return
    try:
        parse_task_config(getattr(task, "executor_config", None), where=f"task {task.task_id!r}: executor_config")
    except ConfigError as exc:
        if _strict():
            raise AirflowClusterPolicyViolation(str(exc)) from None
        _fail_at_run(task, str(exc))
        return
    if getattr(task, "_carma_policy_applied", False):
        return
    from carma_airflow.executor.retry import CudaOomRetryPolicy

    oom_retries, delay = _oom_settings()
    author = int(getattr(task, "retries", 0) or 0)
    task.retries = author + oom_retries
    task.retry_policy = CudaOomRetryPolicy(author, oom_retries, delay)
    task._carma_policy_applied = True
