"""The executor's side of multi-host dispatch: a placed try goes to its host's Celery queue.

``[carma] dispatch = celery`` makes :class:`~carma_airflow.executor.CarmaExecutor` call
:func:`celery_backend`, which returns a :class:`CeleryLauncher` (start tries) and a
:class:`~carma_airflow.distributed.cluster.ClusterMonitor` (see every host's GPUs).

A try is sent as the task ``carma.run_try`` (:mod:`carma_airflow.distributed.celery_tasks`) to
the queue ``[carma] queue_prefix + host`` with the workload and its environment (the devices in
``CUDA_VISIBLE_DEVICES``) in the message, through Airflow's own Celery app (``[celery]
broker_url`` and ``result_backend``).  Before sending, the dispatch is written to the store
(``carma_dispatch``); the worker runs the try only while that row still says ``sent``.

A :class:`CeleryHandle` follows the try through the result backend: the launcher's
:class:`~carma_airflow.distributed.results.ResultFetcher` reads the states of every try in flight
in one round trip, in its own thread (the executor calls :meth:`CeleryLauncher.refresh` at the
start of each heartbeat), and ``poll`` reads that snapshot without network I/O.  It ends as *lost* (the
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

from carma_airflow.config.settings import CarmaSettings
from carma_airflow.core.errors import CarmaError
from carma_airflow.distributed.agent import queue_for
from carma_airflow.distributed.cluster import ClusterMonitor
from carma_airflow.distributed.errors import CeleryMissingError
from carma_airflow.distributed.results import Chores, ResultFetcher
from carma_airflow.keys import request_key
from carma_airflow.launching import Ended, Launcher, TaskHandle
from carma_airflow.monitor.base import GpuSource
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
    return TryResult.from_json(value)


class CeleryHandle:
    """A try sent to a host's Celery queue.  :meth:`poll` reads the launcher's last bulk read of the
    result backend (:mod:`~carma_airflow.distributed.results`) and does no network I/O; revoking the
    try, forgetting its result and recording its end in the store are done off the heartbeat."""

    def __init__(
        self,
        app: Celery,
        store: Store,
        cluster: ClusterMonitor,
        results: ResultFetcher,
        chores: Chores,
        *,
        key: str,
        host: str,
        queue: str,
        celery_id: str,
        sent_at: float,
        start_timeout_s: float,
        ended: Ended | None = None,
    ) -> None:
        self.app = app
        self.store = store
        self.cluster = cluster
        self.results = results
        self.chores = chores
        self.key = key
        self.host = host
        self.queue = queue
        self.celery_id = celery_id
        self.sent_at = sent_at
        self.start_timeout_s = start_timeout_s
        self._ended = ended
        self.state = "PENDING"
        self.reply: dict[str, Any] | None = None  # what the worker returned
        if ended is None:
            results.watch(celery_id)

    @property
    def pid(self) -> int | None:
        return None  # the process lives on another host

    @property
    def pid_start(self) -> int | None:
        return None

    def poll(self) -> Ended | None:
        if self._ended is not None:
            return self._ended
        seen = self.results.state_of(self.celery_id)
        if seen is None:  # not read yet, or the result backend does not answer: nothing is known
            return None
        self.state = seen.state
        if seen.state == "SUCCESS":
            return self._end_from_reply(seen.result)
        if seen.state == "FAILURE":
            lost = f"the Celery task of this try failed on host {self.host!r}: {seen.result!r}"
            return self._end(Ended(None, None, lost=lost), "ended", forget=True)
        if seen.state == "REVOKED":
            revoked = f"the Celery task of this try was revoked on {self.host!r}"
            return self._end(Ended(None, None, lost=revoked), "ended", forget=True)
        status = self.cluster.host_status(self.host, refresh=False)
        if status.lost:
            self._revoke()
            return self._end(
                Ended(None, None, lost=f"{status.reason}; the try is ended as failed so that Airflow retries it"),
                "lost",
            )
        # still PENDING when last read (the read began at fetched_at): no worker took it in time
        if seen.state == "PENDING" and seen.fetched_at - self.sent_at > self.start_timeout_s:
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

    def _end_from_reply(self, value: Any) -> Ended:
        reply = value if isinstance(value, dict) else {}
        self.reply = reply
        skipped = reply.get("skipped")
        if isinstance(skipped, str):
            ended = Ended(None, None, lost=f"the worker on {self.host!r} did not run the try: {skipped}")
        else:
            code = reply.get("exitcode")
            ended = Ended(code if isinstance(code, int) else None, _try_result(reply.get("result")))
        return self._end(ended, "ended", forget=True)

    def _end(self, ended: Ended, state: str, *, forget: bool = False) -> Ended:
        self._ended = ended
        self.results.unwatch(self.celery_id)
        key, at, reason = self.key, time.time(), ended.lost
        self.chores.put(
            f"recording the end of dispatch {key}",
            lambda: self.store.end_dispatch(key, at, state, reason),
            until_done=True,  # a row left 'sent' would be followed again after a restart
        )
        if forget:  # a result left behind expires by itself
            celery_id = self.celery_id
            self.chores.put(f"forgetting Celery result {celery_id}", lambda: self.app.backend.forget(celery_id))
        return ended

    def _revoke(self) -> None:
        # the broker may be what failed; the store row (now 'lost') stops the worker anyway
        celery_id = self.celery_id
        self.chores.put(f"revoking Celery task {celery_id}", lambda: self.app.control.revoke(celery_id))

    def kill(self) -> None:
        """Stop the try on its host (the worker's supervisor gets SIGTERM); returns at once."""
        if self._ended is not None:
            return
        celery_id = self.celery_id
        self.chores.put(
            f"stopping Celery task {celery_id} on {self.host}",
            lambda: self.app.control.revoke(celery_id, terminate=True, signal="SIGTERM"),
        )


class CeleryLauncher:
    """Sends each placed try to the Celery queue of the host of its GPUs, and reads the states of
    the tries in flight in bulk (:meth:`refresh`, once per heartbeat).

    ``background=False``: the bulk read happens in :meth:`refresh` and the chores (store writes,
    revokes) when they arise, in the caller's thread (tests, benchmarks).
    """

    def __init__(
        self,
        app: Celery,
        store: Store,
        cluster: ClusterMonitor,
        settings: CarmaSettings,
        *,
        background: bool = True,
        period_s: float = 0.5,
        stale_s: float | None = None,
    ) -> None:
        self.app = app
        self.store = store
        self.cluster = cluster
        self.settings = settings
        if stale_s is None:  # hosts are declared lost after host_timeout_seconds: a fraction of it is old news
            stale_s = max(5.0, settings.host_timeout_seconds / 3)
        self.results = ResultFetcher(lambda: app.backend, period_s=period_s, stale_s=stale_s, background=background)
        self.chores = Chores(background=background)

    def refresh(self) -> None:
        """Start of a heartbeat: read the states of every try in flight in one round trip (in the
        background thread, or here with ``background=False``)."""
        self.results.refresh()

    def close(self, timeout_s: float = 5.0) -> None:
        """Stop reading results; finish the pending store writes and revokes (at most ``timeout_s``)."""
        self.results.close(timeout_s)
        self.chores.close(timeout_s)

    def _handle(self, **kwargs: Any) -> CeleryHandle:
        return CeleryHandle(self.app, self.store, self.cluster, self.results, self.chores, **kwargs)

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
            return self._handle(ended=Ended(None, None, lost=reason), **handle_args)
        log.info("carma: sent %s to queue %s (Celery task %s)", key, queue, celery_id)
        return self._handle(**handle_args)

    def reattach(self, record: Any) -> TaskHandle | None:
        """After an executor restart: follow a try an earlier executor sent (None if it is not in flight)."""
        try:
            dispatch = self.store.dispatch(record.key)
        except CarmaError as exc:
            log.warning("carma: dispatch of %s unknown (%s)", record.key, exc)
            return None
        if dispatch is None or dispatch.state != "sent":
            return None
        return self._handle(
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
