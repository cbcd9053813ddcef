"""Listener that runs inside each task process started by CarmaExecutor.

* On start it writes the placement decision into the task's own log ("placed on GPU 2 ...").
* On failure it classifies the real exception (CUDA OOM or not), measures the peak GPU memory the
  try reached (after a CUDA OOM: what it held plus what it asked for, where the message says), and
  leaves both in the result file for the executor.
* On success it leaves the peak, which feeds the history estimator, and says in the log when the
  try grew past the memory it was placed with and its fence let it through (core/grown.py).
Outside CarmaExecutor (no result file requested) it does nothing.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Mapping
from typing import Any

from airflow.listeners import hookimpl

from carma_airflow.core.fencing import PAST_CAP
from carma_airflow.core.grown import grown_line
from carma_airflow.core.recovery import oom_reached
from carma_airflow.taskrun.cap_oom import classify_here
from carma_airflow.taskrun.fence_env import fence_from_env
from carma_airflow.taskrun.framework_hook import install_framework_caps
from carma_airflow.taskrun.outcome import (
    PLACEMENT_ENV,
    RESULT_ENV,
    ResultState,
    TryResult,
    remembered_failure,
    write_result,
)

log = logging.getLogger("carma")


def peak_mib_of_this_process() -> int | None:
    """Peak GPU memory of this process: simulated ledger, else PyTorch's own counters if loaded."""
    ledger_path = os.environ.get("CARMA_SIM_LEDGER")
    if ledger_path:
        try:
            from carma_airflow.monitor.ledger import Ledger

            peak = Ledger(ledger_path).peak(os.getpid())
            if peak is not None:
                return int(peak)
        except Exception:  # the ledger is best effort here
            log.debug("could not read the simulated ledger", exc_info=True)
    torch = sys.modules.get("torch")
    if torch is not None:
        try:
            if torch.cuda.is_initialized():
                return int(torch.cuda.max_memory_reserved() // (1024 * 1024))
        except Exception:
            return None
    return None


@hookimpl
def on_task_instance_running(previous_state: Any, task_instance: Any) -> None:
    placement = os.environ.get(PLACEMENT_ENV)
    if placement and os.environ.get(RESULT_ENV):
        print(f"[carma] {placement}", flush=True)
        print(f"[carma] CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES', '')}", flush=True)
        # before the task's code runs: caps PyTorch / TensorFlow when (if ever) the task imports them
        print(f"[carma] {install_framework_caps()}", flush=True)


def grown_in_this_try(peak_mib: int | None, environ: Mapping[str, str]) -> str | None:
    """The log's line for a try that grew past its fence's promise and was not stopped; None otherwise."""
    fence = fence_from_env(environ)
    if fence is None or not fence.promise_mib:
        return None
    rule = fence.rule or ("live" if fence.live else "promise")
    return grown_line("success", peak_mib, max(fence.promise_mib), declared=False, cap_rule=rule)


@hookimpl
def on_task_instance_success(previous_state: Any, task_instance: Any) -> None:
    if os.environ.get(RESULT_ENV):
        peak = peak_mib_of_this_process()
        write_result(TryResult(state=ResultState.SUCCESS, peak_mib=peak))
        if (grown := grown_in_this_try(peak, os.environ)) is not None:  # said where the user looks
            print(f"[carma] this try {grown}", flush=True)


@hookimpl
def on_task_instance_failed(previous_state: Any, task_instance: Any, error: Any) -> None:
    if not os.environ.get(RESULT_ENV):
        return
    exc_type = type(error).__name__ if isinstance(error, BaseException) else None
    message = str(error) if error is not None else None
    # classified once: by the retry policy that decided on the retry, else here
    failure = remembered_failure(error) or classify_here(exc_type, message)
    held = peak = peak_mib_of_this_process()
    if failure.is_oom:  # what it held plus what it asked for: its next try is sized from that (cap or full GPU)
        peak = oom_reached(peak, message)
    state = getattr(getattr(task_instance, "state", None), "value", None) or "failed"
    write_result(
        TryResult(
            state=ResultState(state) if state in ResultState._value2member_map_ else ResultState.FAILED,
            failure=failure.kind,
            exc_type=exc_type,
            message=(message or "")[:2000],
            peak_mib=peak,
        )
    )
    if failure.past_cap:
        print(f"[carma] CUDA out of memory {PAST_CAP} ({failure.evidence}); it asked for {peak} MiB", flush=True)
    elif failure.is_oom and peak != held:
        print(
            f"[carma] CUDA out of memory recognised ({failure.evidence}); it needed at least {peak} MiB "
            f"(held plus asked; its peak held {held} MiB)",
            flush=True,
        )
    elif failure.is_oom:
        print(f"[carma] CUDA out of memory recognised ({failure.evidence}); peak {peak} MiB", flush=True)
