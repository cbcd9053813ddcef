"""Retry policy attached to GPU tasks: CUDA OOM gets its own bounded retries.

Runs in the task process with the real exception.  A CUDA OOM is retried (short delay, with a
reason that shows in the Airflow UI) while OOM tries remain; any other failure (a GPU that
failed under the task and a refusal by the executor included) follows the author's own
``retries`` and then fails, even though the cluster policy raised ``retries`` to make room for
OOM tries.
"""

from __future__ import annotations

import os
from datetime import timedelta
from typing import Any

from airflow.sdk.definitions.retry_policy import RetryDecision, RetryPolicy

from carma_airflow.core.fencing import PAST_CAP
from carma_airflow.core.recovery import (
    FailureKind,
    author_retry_left,
    oom_advice,
    oom_retry_left,
    tries_this_round,
)
from carma_airflow.taskrun.cap_oom import classify_here
from carma_airflow.taskrun.outcome import PRIOR_OOMS_ENV, remember_failure


class CudaOomRetryPolicy(RetryPolicy):
    def __init__(self, author_retries: int, oom_retries: int, oom_delay_s: float = 5.0) -> None:
        self.author_retries = author_retries
        self.oom_retries = oom_retries
        self.oom_delay_s = oom_delay_s

    def evaluate(self, exception: BaseException, try_number: int, max_tries: int, context: Any = None) -> RetryDecision:
        # past its cap or a full GPU: by what it held and asked against its fence (taskrun/cap_oom.py)
        failure = classify_here(type(exception).__name__, str(exception))
        remember_failure(exception, failure)  # the listener writes this classification, not its own
        prior_ooms = int(os.environ.get(PRIOR_OOMS_ENV, "0") or 0)
        if failure.is_oom:
            if oom_retry_left(prior_ooms, self.oom_retries):
                where = "with a larger cap" if failure.past_cap else "on a GPU with more free memory"
                what = f"CUDA out of memory {PAST_CAP}" if failure.past_cap else "CUDA out of memory"
                return RetryDecision.retry(
                    delay=timedelta(seconds=self.oom_delay_s),
                    reason=f"{what} ({failure.evidence}); CARMA retries it {where} "
                    f"(OOM retry {prior_ooms + 1} of {self.oom_retries})",
                )
            from carma_airflow.taskrun.listener import peak_mib_of_this_process

            return RetryDecision.fail(reason=oom_advice(prior_ooms + 1, peak_mib_of_this_process()))
        tries = tries_this_round(try_number, max_tries, self.author_retries + self.oom_retries)
        other_failures = tries - prior_ooms  # tries that failed for other reasons, this one included
        if author_retry_left(tries, prior_ooms, self.author_retries):
            if failure.kind is FailureKind.GPU_FAULT:
                return RetryDecision.retry(
                    reason=f"the GPU failed under the task ({failure.evidence}); CARMA retries it on a healthy GPU "
                    f"(author's retry {other_failures} of {self.author_retries})"
                )
            return RetryDecision.retry(
                reason=f"{failure.kind.value}: author's retry {other_failures} of {self.author_retries}"
            )
        return RetryDecision.fail(
            reason=f"{failure.kind.value} ({failure.evidence}); the author's {self.author_retries} retries are spent"
        )

    def serialize(self) -> dict[str, Any]:
        return {"author_retries": self.author_retries, "oom_retries": self.oom_retries, "oom_delay_s": self.oom_delay_s}

    @classmethod
    def deserialize(cls, data: dict[str, Any]) -> CudaOomRetryPolicy:
        return cls(int(data["author_retries"]), int(data["oom_retries"]), float(data["oom_delay_s"]))
