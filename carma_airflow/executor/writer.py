"""The executor's store writes, in order, off the scheduler loop.

Every placement, try end, OOM event and learned peak is a store write.  Made inline, each costs
a database round trip and commit inside the scheduler's heartbeat (milliseconds on PostgreSQL,
far more on a busy host), and a deep queue launches many tries per pass.  Decision: one writer
thread per executor takes writes from an ordered queue and makes them one after the other, so
the heartbeat only appends.  The same queue holds writes while the store is unreachable: the
head write is retried every ``retry_s`` until it succeeds, nothing behind it overtakes it, and
nothing is dropped (the executor's own memory serves reads meanwhile, see ``_recent``).

``background=False`` makes every write in the caller's thread (the behaviour before this
module; ``bench/pass_cost.py`` compares the two in one run).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from typing import Any

from carma_airflow.core.errors import CarmaError
from carma_airflow.executor.writes import StoreWrite
from carma_airflow.store.errors import RecordError

log = logging.getLogger(__name__)

LOOSE_EVERY_S = 1.0


class StoreWriter:
    """Ordered store writes: ``put`` appends, a thread (or ``retry``) writes them."""

    def __init__(self, store: Any, *, background: bool = True, retry_s: float = 1.0) -> None:
        self.store = store
        self.background = background
        self.retry_s = retry_s
        self._queue: deque[StoreWrite] = deque()
        # best-effort writes (telemetry, the live snapshot): the latest of each kind, made when
        # the ordered queue is empty, dropped if the store is unreachable; not counted as pending
        self._loose: dict[str, StoreWrite] = {}
        self._loose_busy = False
        self._loose_at = 0.0
        self._cond = threading.Condition()
        self._outage = False
        self._stopping = False
        self._thread: threading.Thread | None = None
        if background:
            self._thread = threading.Thread(target=self._run, name="carma-store-writer", daemon=True)
            self._thread.start()

    @property
    def pending(self) -> int:
        """Writes not made yet (the one in flight included)."""
        with self._cond:
            return len(self._queue)

    def put(self, write: StoreWrite) -> None:
        """Make ``write`` after every write put before it (a best-effort one: when idle)."""
        with self._cond:
            if write.best_effort:
                self._loose[write.name] = write
            else:
                self._queue.append(write)
            if self.background:
                self._cond.notify()
                return
        self.retry()

    def retry(self) -> None:
        """Inline mode: make the writes held so far, stopping at the first that fails."""
        if self.background:
            return
        while self._queue:
            if not self._write_head():
                return
        while self._loose:
            self._write_loose(self._loose.popitem()[1])

    def flush(self, timeout_s: float = 10.0) -> bool:
        """Wait until every write put so far is made; False if the store did not take them in time."""
        if not self.background:
            self.retry()
            return not self._queue
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while self._queue or self._loose or self._loose_busy:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(min(left, 0.05))
        return True

    def close(self, timeout_s: float = 10.0) -> None:
        """Make what is held (up to ``timeout_s``), then stop the thread; what is left is logged."""
        done = self.flush(timeout_s)
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
            left = len(self._queue)
        if self._thread is not None:
            self._thread.join(timeout=2.0)
        if not done and left:
            log.error("carma store unreachable at shutdown: %d write(s) not made", left)

    # -- the writer ------------------------------------------------------------------------
    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._queue and not self._loose and not self._stopping:
                    self._cond.wait()
                if self._stopping:
                    return
                # a best-effort write goes when the queue is empty, or once a second behind a busy
                # queue (the UI's snapshot must not wait for thousands of placement rows)
                due = not self._queue or time.monotonic() - self._loose_at >= LOOSE_EVERY_S
                loose = self._loose.popitem()[1] if self._loose and due else None
                self._loose_busy = loose is not None
            if loose is not None:
                self._write_loose(loose)
                with self._cond:
                    self._loose_busy = False
                    self._cond.notify_all()
                continue
            if not self._write_head():
                with self._cond:  # store unreachable: try the same write again later
                    self._cond.wait(self.retry_s)

    def _write_loose(self, write: StoreWrite) -> None:
        self._loose_at = time.monotonic()
        try:
            write.apply(self.store)
        except CarmaError as exc:
            log.debug("carma store: %s not made (%s)", write.name, exc)
        except Exception:
            log.exception("carma store write %s failed; dropped", write.name)

    def _write_head(self) -> bool:
        with self._cond:
            if not self._queue:
                return True
            write = self._queue[0]
        method = write.name
        try:
            write.apply(self.store)
        except RecordError:  # a bad record is a bug: retrying it would hold every write behind it
            log.exception("carma store write %s refused; dropped", method)
        except CarmaError as exc:
            if not self._outage:
                self._outage = True
                log.warning("carma store unreachable (%s); %d write(s) kept for later", exc, self.pending)
            return False
        except Exception:  # a bug, not an outage: drop this write, keep the writer alive
            log.exception("carma store write %s failed; dropped", method)
        with self._cond:
            self._queue.popleft()
            emptied = not self._queue
            self._cond.notify_all()
        if self._outage and emptied:
            self._outage = False
            log.info("carma store reachable again; buffered writes done")
        return True


__all__ = ["StoreWriter"]
