"""Cluster policy (entry point ``airflow.policy``): validate GPU tasks and give them OOM retries.

Runs wherever DAGs are parsed (dag-processor, and the worker before a task runs).  An invalid
``executor_config`` (a key carma does not know included, named with the nearest valid one, unless
``[carma] allow_unknown_keys``) fails *that task* with a message naming the field and what to write: the
task's ``execute`` is replaced by one raising TaskRefusedError, so the rest of the DAG runs, the
message is in the task's log, and the author's own ``retries`` apply.  With ``[carma]
strict_validation = True`` the whole DAG fails to import instead (AirflowClusterPolicyViolation).
The ``gpu_task()`` helper validates where the DAG is written, so helper users see mistakes at
import time.

Retries: a CUDA OOM gets ``[carma] oom_retries`` tries of its own, on top of the author's
``retries``.  Airflow decides at the start of a try whether it may be retried (from
``max_tries``), so the policy raises ``retries`` by ``oom_retries`` (room only: which failure
uses it is not decided here) and attaches CudaOomRetryPolicy, which applies the retry plan the
executor hands each try (taskrun/retry.py); the author's count travels in ``executor_config``
(AUTHOR_RETRIES_KEY) for the executor to plan with (executor/starting/starter.py ``end_plan``,
core/recovery.plan_try_end): every failure but a CUDA OOM, a kill by a signal included, is held
to it.  A try the executor refuses (never fits) runs as a
process that fails at once with the reason: the worker's parse of the DAG sees REFUSED_ENV.
"""

from __future__ import annotations

import functools
import json
import os
from typing import Any

from airflow.exceptions import AirflowClusterPolicyViolation
from airflow.policies import hookimpl

from carma_airflow.config.options import option_default
from carma_airflow.config.task_config import EXECUTOR_NAME, check_task
from carma_airflow.core.errors import ConfigError, TaskRefusedError

AUTHOR_RETRIES_KEY = "carma_author_retries"  # top-level executor_config key, written by this policy
REFUSED_ENV = "CARMA_REFUSED"  # JSON {"dag_id", "task_id", "reason"}: the executor will not run this try


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


@functools.lru_cache(maxsize=1)
def _allow_unknown() -> bool:
    from airflow.configuration import conf

    return conf.getboolean("carma", "allow_unknown_keys", fallback=option_default("allow_unknown_keys"))


def _fail_at_run(task: Any, message: str) -> None:
    """Make the task fail when it runs, with ``message`` in its log; the author's retries apply."""

    def refuse(*args: Any, **kwargs: Any) -> None:
        raise TaskRefusedError(f"CARMA cannot run this task: {message}")

    partial_kwargs = getattr(task, "partial_kwargs", None)
    if isinstance(partial_kwargs, dict):  # a mapped task: each instance is built from partial_kwargs
        partial_kwargs["pre_execute"] = refuse
    else:
        task.execute = refuse


def _unmap_executor_keys(task: Any) -> None:
    """Drop ``executor``/``executor_config`` from literal ``expand_kwargs`` entries: Airflow would
    fail each instance with its own TypeError before our refusal could say what to write."""
    entries = getattr(getattr(task, "expand_input", None), "value", None)
    if isinstance(entries, list):
        for entry in entries:
            if isinstance(entry, dict):
                entry.pop("executor_config", None)
                entry.pop("executor", None)


def refusal_env(dag_id: str, task_id: str, reason: str) -> dict[str, str]:
    """The environment of a try the executor refuses: no GPU, and the reason for the worker's parse."""
    text = " ".join(reason.split())[:4000]
    return {"CUDA_VISIBLE_DEVICES": "", REFUSED_ENV: json.dumps({"dag_id": dag_id, "task_id": task_id, "reason": text})}


def _refused_reason(task: Any) -> str | None:
    """Why the executor refused the try this process runs, if it did and this is its task."""
    raw = os.environ.get(REFUSED_ENV)
    if not raw:
        return None
    try:
        data = json.loads(raw)
    except ValueError:
        return None
    if not isinstance(data, dict) or data.get("task_id") != getattr(task, "task_id", None):
        return None
    if data.get("dag_id") != getattr(task, "dag_id", data.get("dag_id")):
        return None
    reason = data.get("reason")
    return reason if isinstance(reason, str) else "refused by CarmaExecutor"


def _set_executor_config(task: Any, config: dict[str, Any]) -> None:
    partial_kwargs = getattr(task, "partial_kwargs", None)
    if isinstance(partial_kwargs, dict):
        partial_kwargs["executor_config"] = config
    else:
        task.executor_config = config


@hookimpl
def task_policy(task: Any) -> None:
    if not is_carma_task(task):
        return
    executor_config = getattr(task, "executor_config", None)
    try:
        check_task(task, allow_unknown=_allow_unknown())
    except ConfigError as exc:
        if _strict():
            raise AirflowClusterPolicyViolation(str(exc)) from None
        _unmap_executor_keys(task)
        _fail_at_run(task, str(exc))
        return
    if not getattr(task, "_carma_policy_applied", False):
        from carma_airflow.taskrun.retry import CudaOomRetryPolicy

        oom_retries, delay = _oom_settings()
        author = int(getattr(task, "retries", 0) or 0)
        task.retries = author + oom_retries
        task.retry_policy = CudaOomRetryPolicy(author, oom_retries, delay)
        # a copy: default_args may share one dict between many tasks
        _set_executor_config(task, {**(executor_config or {}), AUTHOR_RETRIES_KEY: author})
        task._carma_policy_applied = True
    reason = _refused_reason(task)
    if reason is not None:
        _fail_at_run(task, reason)


def author_retries_of(executor_config: Any) -> int | None:
    """The author's own ``retries`` as this policy recorded them (None: a DAG parsed without it)."""
    if not isinstance(executor_config, dict):
        return None
    value = executor_config.get(AUTHOR_RETRIES_KEY)
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None
