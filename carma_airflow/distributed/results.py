"""The Celery states of every live remote try, read in bulk off the scheduler's heartbeat.

Following a try sent to a GPU host means reading its Celery result.  One ``AsyncResult`` per
try per heartbeat is N round trips to the result backend inside the scheduler loop (on the
database backend each one also opens a connection: about 6 ms a try on a local PostgreSQL).
Decision, as Airflow's CeleryExecutor does with its ``BulkStateFetcher``: a
:class:`ResultFetcher` reads the states of all the tries it watches in one round trip
(:func:`read_states`: an ``MGET`` on a key-value backend such as Redis, one ``SELECT ... WHERE
task_id IN (...)`` on the database backend, one read per try only on a backend with neither),
from its own thread, every ``period_s`` and when the executor calls ``refresh`` at the start
of a heartbeat.  :class:`~carma_airflow.distributed.dispatch.CeleryHandle.poll` reads the last
snapshot: no network I/O.

While the backend does not answer (down, or a connection hanging), the snapshot goes stale and
:meth:`ResultFetcher.state_of` says "not known" once it is older than ``stale_s``: the handles
then wait (they declare no try lost on old news), and a try that ended meanwhile is read at the
first fetch that succeeds again, since results stay in the backend until they are forgotten.

The side effects of following a try (its dispatch's end in the store, revoking it, forgetting
its result) are :class:`Chores`, run by a second thread, so that a broker or store that hangs
delays neither the heartbeat nor the reading of states.  ``background=False`` makes both run in
the caller's thread (tests, benchmarks).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

log = logging.getLogger(__name__)

CHUNK = 1000  # task ids per round trip (IN lists and MGETs stay well within server limits)
KEY_VALUE, DATABASE, PER_TASK = "mget", "select", "per-task"


@dataclass(frozen=True, slots=True)
class RemoteState:
    """A Celery task's state as last read: ``result`` is its return value (``SUCCESS``) or its error
    (``FAILURE``); ``fetched_at`` is when the read began (the state held at least then)."""

    state: str
    result: Any
    fetched_at: float


def read_path(backend: Any) -> str:
    """How :func:`read_states` reads ``backend``: ``mget``, ``select`` or ``per-task``."""
    from celery.backends.base import BaseKeyValueStoreBackend

    if isinstance(backend, BaseKeyValueStoreBackend):
        return KEY_VALUE
    try:
        from celery.backends.database import DatabaseBackend
    except ImportError:  # SQLAlchemy missing: no database backend either
        return PER_TASK
    return DATABASE if isinstance(backend, DatabaseBackend) else PER_TASK


def _chunks(ids: Sequence[str]) -> Iterable[Sequence[str]]:
    for start in range(0, len(ids), CHUNK):
        yield ids[start : start + CHUNK]


def read_states(backend: Any, ids: Sequence[str], path: str) -> dict[str, tuple[str, Any]]:
    """``(state, result)`` of each of ``ids``: one round trip per :data:`CHUNK` ids on the bulk paths.

    A task the backend has no result for is ``PENDING`` (not taken by a worker yet, or forgotten).
    """
    found: dict[str, tuple[str, Any]] = {}
    for chunk in _chunks(ids):
        if path == KEY_VALUE:
            values = backend.mget([backend.get_key_for_task(task_id) for task_id in chunk])
            for task_id, value in zip(chunk, values, strict=True):
                if value:
                    meta = backend.decode_result(value)
                    found[task_id] = (str(meta["status"]), meta.get("result"))
        elif path == DATABASE:
            from celery.backends.database import session_cleanup
            from sqlalchemy import select

            task_cls = backend.task_cls
            session = backend.ResultSession()
            with session_cleanup(session):
                rows = session.scalars(select(task_cls).where(task_cls.task_id.in_(list(chunk)))).all()
                for row in rows:
                    meta = backend.meta_from_decoded(row.to_dict())
                    found[str(meta["task_id"])] = (str(meta["status"]), meta.get("result"))
        else:
            for task_id in chunk:
                meta = backend.get_task_meta(task_id)
                found[task_id] = (str(meta["status"]), meta.get("result"))
    return {task_id: found.get(task_id, ("PENDING", None)) for task_id in ids}


class _Logged:
    """Logs each distinct failure message once until things work again."""

    def __init__(self, what: str) -> None:
        self.what = what
        self.message: str | None = None

    def failed(self, exc: BaseException) -> str:
        message = f"{type(exc).__name__}: {exc}"
        if message != self.message:
            log.error("carma: %s: %s", self.what, message)
        self.message = message
        return message

    def worked(self) -> None:
        if self.message is not None:
            log.info("carma: %s works again", self.what)
        self.message = None


class ResultFetcher:
    """The last bulk read of the states of every watched Celery task; see the module docstring."""

    def __init__(
        self,
        backend: Callable[[], Any],
        *,
        period_s: float = 0.5,
        stale_s: float = 5.0,
        background: bool = True,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._backend = backend  # called on the reading thread: Celery backends may be per thread
        self.period_s = period_s
        self.stale_s = max(stale_s, 2 * period_s)
        self.background = background
        self.clock = clock
        self._lock = threading.Lock()
        self._watched: set[str] = set()
        self._snapshot: dict[str, RemoteState] = {}
        self._ok_at = -float("inf")  # when the last successful read began
        self._path: str | None = None
        self._errors = _Logged("could not read the Celery results of the remote tries")
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.reads = 0  # successful reads, for tests and benchmarks
        self.read_s = 0.0  # how long the last successful read took

    # -- what the handles use (no I/O) -----------------------------------------------------

    def watch(self, celery_id: str) -> None:
        with self._lock:
            self._watched.add(celery_id)
        self._start()

    def unwatch(self, celery_id: str) -> None:
        with self._lock:
            self._watched.discard(celery_id)
            self._snapshot.pop(celery_id, None)

    def state_of(self, celery_id: str) -> RemoteState | None:
        """The task's state as last read, or None when not read since it was watched or when the
        backend has not answered for ``stale_s`` (then nothing is known)."""
        with self._lock:
            if self.clock() - self._ok_at > self.stale_s:
                return None
            return self._snapshot.get(celery_id)

    @property
    def last_error(self) -> str | None:
        return self._errors.message

    @property
    def watched(self) -> int:
        with self._lock:
            return len(self._watched)

    # -- reading ---------------------------------------------------------------------------

    def refresh(self) -> None:
        """Once per heartbeat: wake the reader (``background``), or read now in this thread."""
        if self.background:
            self._start()
            self._wake.set()
        else:
            self.fetch()

    def fetch(self) -> bool:
        """One bulk read of every watched task's state (False if the backend did not answer)."""
        with self._lock:
            ids = sorted(self._watched)
        if not ids:
            return True
        began, started = self.clock(), time.perf_counter()
        try:
            backend = self._backend()
            if self._path is None:
                self._path = read_path(backend)
            try:
                states = read_states(backend, ids, self._path)
            except NotImplementedError:  # a key-value backend without MGET
                self._path = PER_TASK
                states = read_states(backend, ids, self._path)
        except Exception as exc:  # any backend's connection error: keep the last snapshot, read again later
            self._errors.failed(exc)
            return False
        self._errors.worked()
        snapshot = {task_id: RemoteState(state, result, began) for task_id, (state, result) in states.items()}
        with self._lock:
            # tasks unwatched during the read are not put back
            self._snapshot = {task_id: s for task_id, s in snapshot.items() if task_id in self._watched}
            self._ok_at = began
            self.reads += 1
            self.read_s = time.perf_counter() - started
        return True

    # -- the reader thread -----------------------------------------------------------------

    def _start(self) -> None:
        if not self.background or self._stop.is_set():
            return
        with self._lock:
            if self._thread is not None:
                return
            self._thread = threading.Thread(target=self._run, name="carma-celery-results", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            self.fetch()
            self._wake.wait(self.period_s)
            self._wake.clear()

    def close(self, timeout_s: float = 5.0) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout_s)


@dataclass(slots=True)
class _Chore:
    what: str
    run: Callable[[], object]
    until_done: bool


class Chores:
    """Side effects run off the heartbeat, in order; ``until_done`` ones are retried every
    ``retry_s`` until they succeed (a store write), the others are tried once (a revoke)."""

    def __init__(self, *, background: bool = True, retry_s: float = 1.0) -> None:
        self.background = background
        self.retry_s = retry_s
        self._queue: deque[_Chore] = deque()
        self._held: deque[_Chore] = deque()  # failed, tried again at _retry_at
        self._retry_at = 0.0
        self._cond = threading.Condition()
        self._busy = False
        self._stopping = False
        self._thread: threading.Thread | None = None
        self._errors = _Logged("could not finish what follows a remote try")

    def put(self, what: str, run: Callable[[], object], *, until_done: bool = False) -> None:
        chore = _Chore(what, run, until_done)
        if not self.background or self._stopping:  # closed: nobody else would run it
            if not self._do(chore) and until_done:
                log.error("carma: gave up on %s (no retry without the background thread)", what)
            return
        with self._cond:
            self._queue.append(chore)
            if self._thread is None and not self._stopping:
                self._thread = threading.Thread(target=self._run, name="carma-celery-chores", daemon=True)
                self._thread.start()
            self._cond.notify_all()

    @property
    def pending(self) -> int:
        """Chores not done yet (the one running and the held ones included)."""
        with self._cond:
            return len(self._queue) + len(self._held) + int(self._busy)

    def _do(self, chore: _Chore) -> bool:
        try:
            chore.run()
        except Exception as exc:
            self._errors.failed(Exception(f"{chore.what}: {type(exc).__name__}: {exc}"))
            return False
        self._errors.worked()
        return True

    def _next(self) -> _Chore | None:
        with self._cond:
            while True:
                now = time.monotonic()
                if self._held and not self._stopping and now >= self._retry_at:
                    self._queue.extend(self._held)
                    self._held.clear()
                if self._queue:
                    self._busy = True
                    return self._queue.popleft()
                if self._stopping:
                    return None
                self._cond.wait(self._retry_at - now if self._held else None)

    def _run(self) -> None:
        while (chore := self._next()) is not None:
            done = self._do(chore)
            with self._cond:
                self._busy = False
                if not done and chore.until_done:
                    if not self._held:
                        self._retry_at = time.monotonic() + self.retry_s
                    self._held.append(chore)
                self._cond.notify_all()

    def close(self, timeout_s: float = 5.0) -> None:
        """Finish what is queued (held chores get one more try), waiting at most ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        with self._cond:
            self._queue.extend(self._held)
            self._held.clear()
            self._stopping = True
            self._cond.notify_all()
            while (self._queue or self._busy) and self._thread is not None and time.monotonic() < deadline:
                self._cond.wait(max(0.0, deadline - time.monotonic()))
            left = len(self._queue) + len(self._held)
        if left:
            log.error("carma: %d chore(s) of remote tries not done at shutdown (their dispatch rows stay 'sent')", left)
