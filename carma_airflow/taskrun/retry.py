"""Retry policy attached to GPU tasks: CUDA OOM gets its own bounded retries.

Runs in the task process with the real exception (Airflow 3 asks the task's ``RetryPolicy``
whether a failed try is retried).  The decision is not made here: the executor planned this try's
retry for each way it can end when it launched it (core/recovery.plan_try_end, recorded with the
try's placement) and handed the plan over in ``CARMA_END_PLAN``.  This policy classifies the
exception (taskrun/cap_oom.py) and applies the verdict for it: a CUDA OOM is retried (short
delay, with a reason that shows in the Airflow UI) while OOM tries remain; any other failure (a
GPU that failed under the task and a refusal by the executor included) follows the author's own
``retries`` and then fails, even though the cluster policy raised ``retries`` to make room for
OOM tries.  The one input the executor cannot know, Airflow's ``max_tries`` (raised by a clear
or a restart's reset), is the one this try recounts with (``EndPlan.with_max_tries``).

A try started by an older executor has no plan: it is planned here by the same function, from
the earlier OOM count that executor put in ``CARMA_PRIOR_OOM_TRIES``.
"""

from __future__ import annotations

import os
from datetime import timedelta
from typing import Any

from airflow.sdk.definitions.retry_policy import RetryDecision, RetryPolicy

from carma_airflow.core.recovery import EndPlan, plan_try_end
from carma_airflow.taskrun.cap_oom import classify_here
from carma_airflow.taskrun.outcome import PRIOR_OOMS_ENV, end_plan_here, remember_failure


class CudaOomRetryPolicy(RetryPolicy):
    def __init__(self, author_retries: int, oom_retries: int, oom_delay_s: float = 5.0) -> None:
        self.author_retries = author_retries
        self.oom_retries = oom_retries
        self.oom_delay_s = oom_delay_s

    def plan(self, try_number: int, max_tries: int) -> EndPlan:
        """The plan this try was handed, counted with Airflow's ``max_tries``; without one (an older
        executor started it), today's rule from the earlier OOM count it was handed."""
        handed = end_plan_here()
        if handed is not None:
            return handed.with_max_tries(max_tries)
        prior_ooms = int(os.environ.get(PRIOR_OOMS_ENV, "0") or 0)
        return plan_try_end(try_number, max_tries, self.author_retries, self.oom_retries, prior_ooms)

    def evaluate(self, exception: BaseException, try_number: int, max_tries: int, context: Any = None) -> RetryDecision:
        # past its cap or a full GPU: by what it held and asked against its fence (taskrun/cap_oom.py)
        failure = classify_here(type(exception).__name__, str(exception))
        remember_failure(exception, failure)  # the listener writes this classification, not its own
        verdict = self.plan(try_number, max_tries).verdict(failure)
        if not verdict.retry:
            reached = None
            if verdict.advice_tries is not None:  # the advice says what the try reached
                from carma_airflow.taskrun.listener import peak_mib_of_this_process

                reached = peak_mib_of_this_process()
            return RetryDecision.fail(reason=verdict.words(failure, reached))
        if failure.is_oom:
            return RetryDecision.retry(delay=timedelta(seconds=self.oom_delay_s), reason=verdict.words(failure))
        return RetryDecision.retry(reason=verdict.words(failure))

    def serialize(self) -> dict[str, Any]:
        return {"author_retries": self.author_retries, "oom_retries": self.oom_retries, "oom_delay_s": self.oom_delay_s}

    @classmethod
    def deserialize(cls, data: dict[str, Any]) -> CudaOomRetryPolicy:
        return cls(int(data["author_retries"]), int(data["oom_retries"]), float(data["oom_delay_s"]))
