"""A try killed by a signal gets the author's retries, not CARMA's extra CUDA-OOM tries.

Runs in a try's supervisor process (the per-try process of launch.py, or a Celery pool process
on a GPU host), never in the scheduler.  The cluster policy raises a GPU task's ``retries`` by
``[carma] oom_retries`` so that a CUDA OOM can be retried; Airflow's supervisor then marks a
task process that died of a signal (the host's OOM killer, an operator's ``kill -9``)
UP_FOR_RETRY whenever that raised count allows it.  The executor knows the author's own count
(the cluster policy records it in ``executor_config``) and tells the try through
RETRY_ON_KILL_ENV whether a non-OOM failure may still be retried; where it may not, the
supervisor's end state of a process that reported nothing is FAILED.

The supervisor offers no hook for this, so its ``final_state`` property is wrapped: one place,
checked against the installed Airflow by tests/executor/test_killguard.py.
"""

from __future__ import annotations

import logging
import os
from typing import Any

RETRY_ON_KILL_ENV = "CARMA_RETRY_ON_KILL"  # "0": a try that dies without a word is not retried
_MARK = "_carma_kill_guard"
log = logging.getLogger("carma")


def retry_on_kill_env(may_retry: bool) -> dict[str, str]:
    return {RETRY_ON_KILL_ENV: "1" if may_retry else "0"}


def install_kill_guard() -> bool:
    """Wrap the supervisor's end-state rule once per process; False where Airflow's shape differs."""
    from airflow.sdk.execution_time import supervisor
    from airflow.utils.state import TaskInstanceState

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
        if (
            state == TaskInstanceState.UP_FOR_RETRY
            and getattr(self, "_terminal_state", None) is None  # the task itself asked for nothing
            and os.environ.get(RETRY_ON_KILL_ENV) == "0"
        ):
            return TaskInstanceState.FAILED
        return state

    setattr(final_state, _MARK, True)
    cls.final_state = property(final_state)
    return True


__all__ = ["RETRY_ON_KILL_ENV", "install_kill_guard", "retry_on_kill_env"]
