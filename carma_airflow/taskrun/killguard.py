"""A try killed by a signal gets the author's retries, not CARMA's extra CUDA-OOM tries.

Runs in a try's supervisor process (the per-try process of launch.py, or a Celery pool process
on a GPU host), never in the scheduler.  The cluster policy raises a GPU task's ``retries`` by
``[carma] oom_retries`` so that a CUDA OOM can be retried; Airflow's supervisor then marks a
task process that died of a signal (the host's OOM killer, an operator's ``kill -9``)
UP_FOR_RETRY whenever that raised count allows it.

The executor plans each try's retry when it launches it (core/recovery.plan_try_end) and hands
the plan over in END_PLAN_ENV (taskrun/outcome.py): its verdict for a try killed by a signal is
the author's retries of this round.  The executor cannot count the tries of the current round:
the workload carries no ``max_tries``, which Airflow raises past the task's retries when a try
did not end by the task's doing (a clear; a reset try that never ran before a scheduler restart,
executor/flow/restart.py).  So the guard recounts the plan with the ``max_tries`` the Execution
API returned when the try started (``EndPlan.with_max_tries``), as Airflow's own
``should_retry`` does and as the retry policy does for a failure it sees (retry.py): after a
restart a killed try whose reset predecessor never ran still has all the author's retries.
Where that ``max_tries`` is not known the executor's plan stands as it was handed.

A try started by an older executor has no plan but the kill rule that executor sent:
RETRY_ON_KILL_ENV (its estimate) and KILL_BUDGET_ENV (author's retries, OOM retries, OOM tries
so far), read as before.

The supervisor offers no hook for this, so its ``final_state`` property and the API client's
``task_instances.start`` are wrapped: one place, checked against the installed Airflow by
tests/executor/test_killguard.py.
"""

from __future__ import annotations

import logging
import os
from typing import Any

from carma_airflow.core.recovery import Failure, FailureKind, author_retry_left, tries_this_round
from carma_airflow.taskrun.outcome import end_plan_here

# what an older executor sent instead of the plan (outcome.END_PLAN_ENV)
RETRY_ON_KILL_ENV = "CARMA_RETRY_ON_KILL"  # "0": a try that dies without a word is not retried
KILL_BUDGET_ENV = "CARMA_KILL_BUDGET"  # "author retries:OOM retries:OOM tries so far"
_KILLED = Failure(FailureKind.KILLED, "killed by a signal")
_MARK = "_carma_kill_guard"
_max_tries: dict[str, int] = {}  # task instance id -> max_tries, as its try's start returned it
log = logging.getLogger("carma")


def retry_on_kill_env(may_retry: bool, author: int | None = None, oom: int = 0, prior_ooms: int = 0) -> dict[str, str]:
    """What an older executor put in a try's environment: its estimate and, with ``author``, the
    budget itself (the guard still reads it from a try started so)."""
    env = {RETRY_ON_KILL_ENV: "1" if may_retry else "0"}
    if author is not None:
        env[KILL_BUDGET_ENV] = f"{author}:{oom}:{prior_ooms}"
    return env


def may_retry_killed(try_number: int, max_tries: int | None) -> bool | None:
    """Whether a try that died of a signal is retried (None: Airflow decides, no CARMA plan)."""
    plan = end_plan_here()
    if plan is not None:
        return plan.with_max_tries(max_tries).verdict(_KILLED).retry
    budget = os.environ.get(KILL_BUDGET_ENV, "").split(":")
    if max_tries is None or len(budget) != 3 or not all(b.isdigit() for b in budget):
        said = os.environ.get(RETRY_ON_KILL_ENV)
        return None if said is None else said != "0"
    author, oom, prior_ooms = (int(b) for b in budget)
    return author_retry_left(tries_this_round(try_number, max_tries, author + oom), prior_ooms, author)


def _ti_of(proc: Any) -> tuple[str, int] | None:
    ti = getattr(proc, "ti", None)
    number = getattr(ti, "try_number", None)
    return None if ti is None or not isinstance(number, int) else (str(getattr(ti, "id", "")), number)


def _wrap_start(operations: Any) -> None:
    """Remember ``max_tries`` from each try's start (TIRunContext), for its final state."""
    original = getattr(operations, "start", None)
    if original is None or getattr(original, _MARK, False):
        return

    def start(self: Any, id: Any, *args: Any, **kwargs: Any) -> Any:
        context = original(self, id, *args, **kwargs)
        value = getattr(context, "max_tries", None)
        if isinstance(value, int):
            _max_tries[str(id)] = value
            while len(_max_tries) > 1024:  # a Celery pool process runs many tries: the oldest go
                del _max_tries[next(iter(_max_tries))]
        return context

    setattr(start, _MARK, True)
    operations.start = start


def install_kill_guard() -> bool:
    """Wrap the supervisor's end-state rule once per process; False where Airflow's shape differs."""
    from airflow.sdk.api.client import TaskInstanceOperations
    from airflow.sdk.execution_time import supervisor
    from airflow.utils.state import TaskInstanceState

    _wrap_start(TaskInstanceOperations)

    cls: Any = getattr(supervisor, "ActivitySubprocess", None)
    prop = getattr(cls, "final_state", None)
    if not isinstance(prop, property) or prop.fget is None:
        log.warning("carma: this Airflow's supervisor has no final_state; a killed try follows max_tries")
        return False
    if getattr(prop.fget, _MARK, False):
        return True
    original = prop.fget

    def final_state(self: Any) -> Any:
        state = original(self)
        if state != TaskInstanceState.UP_FOR_RETRY or getattr(self, "_terminal_state", None) is not None:
            return state  # the task itself asked for its end (an OOM retry), or it did not fail
        ti = _ti_of(self)  # None: no try to count, the executor's estimate stands
        may = may_retry_killed(ti[1], _max_tries.get(ti[0])) if ti is not None else may_retry_killed(0, None)
        return TaskInstanceState.FAILED if may is False else state

    setattr(final_state, _MARK, True)
    cls.final_state = property(final_state)
    return True


__all__ = ["KILL_BUDGET_ENV", "RETRY_ON_KILL_ENV", "install_kill_guard", "may_retry_killed", "retry_on_kill_env"]
