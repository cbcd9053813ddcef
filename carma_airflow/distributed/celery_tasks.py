"""What a GPU host's Airflow Celery worker runs for carma: the task ``carma.run_try``, and the
worker's own heartbeat in the store.

Load it in the worker with ``[celery] extra_celery_config = {"imports":
["carma_airflow.distributed.celery_tasks"]}`` (Airflow's worker, ``airflow celery worker --queues
carma-<host>``, then knows the task).  For each try the worker:

1. checks that the try was placed on *this* host (``[carma] host``) and that its dispatch in the
   store still says ``sent`` (a try declared lost is not run late);
2. takes the environment from the message (``CUDA_VISIBLE_DEVICES`` with the chosen GPUs' UUIDs)
   and points ``CARMA_RESULT_FILE`` and ``CARMA_SIM_LEDGER`` at this host's own ``[carma]
   state_dir``;
3. runs the workload as Airflow's ``execute_workload`` does (``BaseExecutor.run_workload``) with
   that environment set only while the try's supervisor starts (one try per pool process);
4. returns the exit code and the try's result file (success / CUDA OOM / other, peak memory).

While the worker runs, a thread of its main process writes its heartbeat into the host's row
every ``[carma] sample_period``; the executor takes a host whose worker went silent out of
placement.  The message is acknowledged on receipt: a try whose worker dies is not redelivered,
the executor declares it lost and Airflow's retries place it afresh.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any

from celery import shared_task
from celery.signals import worker_ready, worker_shutdown

from carma_airflow.config.settings import CarmaSettings
from carma_airflow.distributed.errors import WrongHostError
from carma_airflow.distributed.simgpus import ledger_path
from carma_airflow.store.store import Store
from carma_airflow.taskrun.outcome import RESULT_ENV, SIM_LEDGER_ENV, read_result

log = logging.getLogger(__name__)


@cache
def _settings() -> CarmaSettings:
    return CarmaSettings.from_airflow()


@cache
def _store() -> Store:
    return Store(_settings().store_url)


def host_env(env: dict[str, str], result_name: str, settings: CarmaSettings) -> dict[str, str]:
    """The try's environment on this host: paths rewritten to this host's own state folder."""
    out = dict(env)
    state = Path(settings.state_dir)
    out[RESULT_ENV] = str(state / "results" / result_name)
    if SIM_LEDGER_ENV in out or settings.gpu_backend == "simulated":
        out[SIM_LEDGER_ENV] = str(ledger_path(settings.state_dir))
    return out


@contextlib.contextmanager
def environment(env: dict[str, str]) -> Iterator[None]:
    """``env`` added to ``os.environ`` inside the block, the previous values back after it."""
    saved = {name: os.environ.get(name) for name in env}
    os.environ.update(env)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def run_try(payload: dict[str, Any]) -> dict[str, Any]:
    """Run one try on this host (the body of the Celery task; see the module docstring)."""
    from airflow.executors.base_executor import BaseExecutor
    from airflow.executors.workloads import ExecutorWorkload
    from pydantic import TypeAdapter

    settings = _settings()
    key, host = str(payload["key"]), str(payload["host"])
    if host != settings.host:
        raise WrongHostError(
            f"try {key} was placed on host {host!r} but reached the worker of {settings.host!r}; "
            f"each host's worker must consume only its own queue ({settings.queue_prefix}<host>)"
        )
    dispatch = _store().dispatch(key)
    if dispatch is None or dispatch.state != "sent":
        why = "no dispatch recorded" if dispatch is None else f"its dispatch is {dispatch.state} ({dispatch.reason})"
        log.warning("carma: not running %s: %s", key, why)
        return {"skipped": why, "host": settings.host}
    env = host_env(dict(payload["env"]), str(payload["result_name"]), settings)
    result_path = Path(env[RESULT_ENV])
    result_path.parent.mkdir(parents=True, exist_ok=True)
    result_path.unlink(missing_ok=True)
    workload = TypeAdapter[Any](ExecutorWorkload).validate_json(payload["workload"])
    log.info("carma: running %s on %s with CUDA_VISIBLE_DEVICES=%s", key, host, env.get("CUDA_VISIBLE_DEVICES"))
    from carma_airflow.taskrun.killguard import install_kill_guard

    install_kill_guard()
    try:
        with environment(env):
            code = BaseExecutor.run_workload(
                workload, proctitle=f"airflow worker -- CarmaExecutor: {workload.display_name}"
            )
    except Exception as exc:
        from airflow.sdk.exceptions import TaskAlreadyRunningError
        from celery.exceptions import Ignore

        if isinstance(exc, TaskAlreadyRunningError):
            log.info("carma: %s already runs elsewhere; ignoring this delivery", key)
            raise Ignore() from None
        raise
    result = read_result(result_path)
    return {
        "host": settings.host,
        "exitcode": code if isinstance(code, int) else 0,
        "result": None if result is None else result.as_json(),
        "visible_devices": env.get("CUDA_VISIBLE_DEVICES", ""),
    }


# acknowledged on receipt: a try whose worker died is not redelivered (the executor retries it)
run_try_task: Any = shared_task(name="carma.run_try", acks_late=False)(run_try)


# -- the worker's heartbeat -------------------------------------------------------------------

_beat_stop = threading.Event()


def _beat_loop(host: str, period_s: float) -> None:
    logged: set[str] = set()
    while not _beat_stop.is_set():
        try:
            _store().worker_beat(host, _now(), os.getpid())
        except Exception as exc:  # the worker keeps running while the store is away
            message = str(exc)
            if message not in logged:
                logged.add(message)
                log.error("carma worker heartbeat for %s failed: %s", host, message)
        _beat_stop.wait(period_s)


def _now() -> float:
    import time

    return time.time()


def _start_heartbeat(**_: Any) -> None:
    settings = _settings()
    _beat_stop.clear()
    thread = threading.Thread(
        target=_beat_loop, args=(settings.host, settings.sample_period), name="carma-worker-heartbeat", daemon=True
    )
    thread.start()
    log.info("carma: Celery worker of GPU host %s is up, heartbeat every %s s", settings.host, settings.sample_period)


def _stop_heartbeat(**_: Any) -> None:
    _beat_stop.set()
    with contextlib.suppress(Exception):
        _store().worker_beat(_settings().host, None)  # the executor stops placing here at once


worker_ready.connect(_start_heartbeat, weak=False)
worker_shutdown.connect(_stop_heartbeat, weak=False)
