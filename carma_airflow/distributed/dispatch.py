"""The executor's side of multi-host dispatch: a placed try goes to its host's Celery queue.

``[carma] dispatch = celery`` makes :class:`~carma_airflow.executor.CarmaExecutor` call
:func:`celery_backend`, which returns a :class:`CeleryLauncher` (start tries) and a
:class:`~carma_airflow.distributed.cluster.ClusterMonitor` (see every host's GPUs).

A try is sent as the task ``carma.run_try`` (:mod:`carma_airflow.distributed.celery_tasks`) to
the queue ``[carma] queue_prefix + host`` with the workload and its environment (the devices in
``CUDA_VISIBLE_DEVICES``) in the message, through Airflow's own Celery app (``[celery]
broker_url`` and ``result_backend``).  Before sending, the dispatch is written to the store
(``carma_dispatch``); the worker runs the try only while that row still says ``sent``.

A :class:`CeleryHandle` follows the try through the result backend.  It ends as *lost* (the
executor then fails the try with the reason, and Airflow's retries rerun it, placed afresh)
when the host's agent or worker goes silent for ``host_timeout_seconds``, when no worker took the
try from the queue within ``2 x host_timeout_seconds``, or when the message could not be sent.
"""

from __future__ import annotations

import contextlib
import logging
import time
import uuid as uuidlib
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from carma_airflow.core.errors import CarmaError
from carma_airflow.distributed.agent import queue_for
from carma_airflow.distributed.cluster import ClusterMonitor
from carma_airflow.distributed.errors import CeleryMissingError
from carma_airflow.executor.launch import Ended, Launcher, TaskHandle
from carma_airflow.monitor.base import GpuSource
from carma_airflow.settings import CarmaSettings
from carma_airflow.store.records import DispatchRecord
from carma_airflow.store.store import Store
from carma_airflow.taskrun.outcome import TryResult

if TYPE_CHECKING:
    from airflow.executors.workloads import ExecuteTask
    from celery import Celery

log = logging.getLogger(__name__)

TASK_NAME = "carma.run_try"
CELERY_IMPORTS_HINT = (
    "workers load carma's Celery task with "
    '[celery] extra_celery_config = {"imports": ["carma_airflow.distributed.celery_tasks"]}'
)


def _utc(ts: float) -> datetime:
    return datetime.fromtimestamp(ts, tz=timezone.utc)


def placement_key(workload: ExecuteTask) -> str:
    """The placement key of the try (the executor's request key)."""
    from carma_airflow.executor.executor import request_key

    return request_key(workload.ti.key)


def airflow_celery_app() -> Celery:
    """Airflow's own Celery app (``[celery]`` broker and result backend)."""
    try:
        from airflow.providers.celery.executors.celery_executor_utils import app
    except ImportError as exc:
        raise CeleryMissingError(
            f"[carma] dispatch = celery needs the Celery provider ({exc}); "
            "pip install apache-airflow-providers-celery redis"
        ) from None
    return app


def _try_result(value: Any) -> TryResult | None:
    if not isinstance(value, dict) or not isinstance(value.get("state"), str):
        return None
    peak = value.get("peak_mib")
    text = {k: value.get(k) if isinstance(value.get(k), str) else None for k in ("failure_kind", "exc_type", "message")}
    return TryResult(
        state=value["state"],
        failure_kind=text["failure_kind"],
        exc_type=text["exc_type"],
        message=text["message"],
        peak_mib=int(peak) if isinstance(peak, (int, float)) and not isinstance(peak, bool) else None,
    )


class CeleryHandle:
    """A try sent to a host's Celery queue; :meth:`poll` reads the result backend (at most every ``poll_s``)."""

    def __init__(
        self,
        app: Celery,
        store: Store,
        cluster: ClusterMonitor,
        *,
        key: str,
        host: str,
        queue: str,
        celery_id: str,
        sent_at: float,
        start_timeout_s: float,
        poll_s: float = 0.5,
        ended: Ended | None = None,
    ) -> None:
        self.app = app
        self.store = store
        self.cluster = cluster
        self.key = key
        self.host = host
        self.queue = queue
        self.celery_id = celery_id
        self.sent_at = sent_at
        self.start_timeout_s = start_timeout_s
        self.poll_s = poll_s
        self._ended = ended
        self._polled_at = 0.0
        self.state = "PENDING"
        self.reply: dict[str, Any] | None = None  # what the worker returned

    @property
    def pid(self) -> int | None:
        return None  # the process lives on another host

    @property
    def pid_start(self) -> int | None:
        return None

    def poll(self) -> Ended | None:
        if self._ended is not None:
            return self._ended
        now = time.time()
        if now - self._polled_at < self.poll_s:
            return None
        self._polled_at = now
        from celery.result import AsyncResult

        result = AsyncResult(self.celery_id, app=self.app)
        try:
            self.state = str(result.state)
            value = result.result if self.state in ("SUCCESS", "FAILURE") else None
        except Exception as exc:  # the result backend did not answer: ask again next time
            log.warning("carma: could not read the Celery result of %s: %s", self.key, exc)
            return None
        if self.state == "SUCCESS":
            return self._end_from_reply(value, result)
        if self.state == "FAILURE":
            return self._end(
                Ended(None, None, lost=f"the Celery task of this try failed on host {self.host!r}: {value!r}"), "ended"
            )
        if self.state == "REVOKED":
            revoked = f"the Celery task of this try was revoked on {self.host!r}"
            return self._end(Ended(None, None, lost=revoked), "ended")
        status = self.cluster.host_status(self.host, now)
        if status.lost:
            self._revoke()
            return self._end(
                Ended(None, None, lost=f"{status.reason}; the try is ended as failed so that Airflow retries it"),
                "lost",
            )
        if self.state == "PENDING" and now - self.sent_at > self.start_timeout_s:
            self._revoke()
            return self._end(
                Ended(
                    None,
                    None,
                    lost=(
                        f"no Celery worker took the try from queue {self.queue!r} within "
                        f"{self.start_timeout_s:.0f} s; run `airflow celery worker --queues {self.queue}` "
                        f"on host {self.host!r} with --concurrency at least its GPUs x [carma] max_tenants "
                        f"({CELERY_IMPORTS_HINT})"
                    ),
                ),
                "lost",
            )
        return None

    def _end_from_reply(self, value: Any, result: Any) -> Ended:
        reply = value if isinstance(value, dict) else {}
        self.reply = reply
        skipped = reply.get("skipped")
        if isinstance(skipped, str):
            ended = Ended(None, None, lost=f"the worker on {self.host!r} did not run the try: {skipped}")
        else:
            code = reply.get("exitcode")
            ended = Ended(code if isinstance(code, int) else None, _try_result(reply.get("result")))
        try:
            result.forget()
        except Exception as exc:  # a result left behind expires by itself
            log.debug("carma: could not forget Celery result %s: %s", self.celery_id, exc)
        return self._end(ended, "ended")

    def _end(self, ended: Ended, state: str) -> Ended:
        self._ended = ended
        try:
            self.store.end_dispatch(self.key, time.time(), state, ended.lost)
        except CarmaError as exc:
            log.error("carma: could not record the end of dispatch %s: %s", self.key, exc)
        return ended

    def _revoke(self) -> None:
        try:
            self.app.control.revoke(self.celery_id)
        except Exception as exc:  # the broker may be what failed; the store row stops the worker anyway
            log.warning("carma: could not revoke Celery task %s: %s", self.celery_id, exc)

    def kill(self) -> None:
        """Stop the try on its host (the worker's supervisor gets SIGTERM)."""
        if self._ended is not None:
            return
        try:
            self.app.control.revoke(self.celery_id, terminate=True, signal="SIGTERM")
        except Exception as exc:
            log.warning("carma: could not stop Celery task %s on %s: %s", self.celery_id, self.host, exc)


class CeleryLauncher:
    """Sends each placed try to the Celery queue of the host of its GPUs."""

    def __init__(self, app: Celery, store: Store, cluster: ClusterMonitor, settings: CarmaSettings) -> None:
        self.app = app
        self.store = store
        self.cluster = cluster
        self.settings = settings

    def launch(self, workload: ExecuteTask, env: dict[str, str], result_path: Path, host: str) -> TaskHandle:
        key = placement_key(workload)
        queue = self.cluster.queue_of(host) or queue_for(self.settings, host)
        celery_id = str(uuidlib.uuid4())
        now = time.time()
        payload = {
            "key": key,
            "host": host,
            "workload": workload.model_dump_json(),
            "env": dict(env),
            "result_name": result_path.name,
        }
        handle_args: dict[str, Any] = {
            "key": key,
            "host": host,
            "queue": queue,
            "celery_id": celery_id,
            "sent_at": now,
            "start_timeout_s": 2 * self.settings.host_timeout_seconds,
        }
        try:
            self.store.record_dispatch(DispatchRecord(key, host, queue, celery_id, _utc(now)))
            self.app.send_task(TASK_NAME, args=[payload], queue=queue, task_id=celery_id)
        except Exception as exc:
            reason = f"could not send the try to Celery queue {queue!r} of host {host!r}: {type(exc).__name__}: {exc}"
            log.error("carma: %s", reason)
            with contextlib.suppress(CarmaError):
                self.store.end_dispatch(key, time.time(), "lost", reason)
            return CeleryHandle(self.app, self.store, self.cluster, ended=Ended(None, None, lost=reason), **handle_args)
        log.info("carma: sent %s to queue %s (Celery task %s)", key, queue, celery_id)
        return CeleryHandle(self.app, self.store, self.cluster, **handle_args)

    def reattach(self, record: Any) -> TaskHandle | None:
        """After an executor restart: follow a try an earlier executor sent (None if it is not in flight)."""
        try:
            dispatch = self.store.dispatch(record.key)
        except CarmaError as exc:
            log.warning("carma: dispatch of %s unknown (%s)", record.key, exc)
            return None
        if dispatch is None or dispatch.state != "sent":
            return None
        return CeleryHandle(
            self.app,
            self.store,
            self.cluster,
            key=dispatch.key,
            host=dispatch.host,
            queue=dispatch.queue,
            celery_id=dispatch.celery_id,
            sent_at=dispatch.dispatched_at.timestamp(),
            start_timeout_s=2 * self.settings.host_timeout_seconds,
        )


def celery_backend(settings: CarmaSettings, store: Store) -> tuple[Launcher, GpuSource]:
    """The launcher and GPU view of ``[carma] dispatch = celery``."""
    app = airflow_celery_app()
    cluster = ClusterMonitor(store, host_timeout_s=settings.host_timeout_seconds, period_s=settings.sample_period)
    cluster.refresh(force=True)
    return CeleryLauncher(app, store, cluster, settings), cluster
