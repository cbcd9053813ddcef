"""The executor's store writes, in order, off the scheduler loop.

Every placement, try end, OOM event and learned peak is a store write.  Made inline, each costs
a database round trip and commit inside the scheduler's heartbeat (milliseconds on PostgreSQL,
far more on a busy host), and a deep queue launches many tries per pass.  Decision: one writer
thread per executor takes writes from an ordered queue and makes them one after the other, so
the heartbeat only appends.

What the writer does with a write the store did not take depends on the kind of error
(store/errors.py):

- **transient** (:class:`StoreUnreachableError`: connection lost or refused, a lock timeout, a
  serialisation failure): the head write is retried with backoff (``retry_s``, doubling up to
  ``max_retry_s``) until it succeeds; nothing behind it overtakes it and nothing is dropped (the
  executor's own memory serves reads meanwhile).
- **permanent** (:class:`StoreRefusedError`: a constraint broke, a value does not fit, a bug in the
  record): retrying cannot help, so that one write is **parked**: appended to
  ``<state_dir>/parked-writes.jsonl`` (what it was, the error, when), logged as an error, counted
  in the metric ``carma.store.parked_writes``; the writes behind it go on.

The queue is bounded (``capacity`` writes).  When it is full the writer is :attr:`full` and the
executor's placement pass places nothing until it drains (its tries wait), so new writes come
only from the tries it already holds (their ends, their waiting reasons): ``put`` never blocks
the scheduler and never drops a write.  At :meth:`close` what the store has not taken within the
timeout stays in the writer's journal and is made first by the next executor's writer (before it
reads the store).  The journal (executor/bookkeeping/journal.py) holds every ordered write from ``put`` until
the store took it, so a scheduler killed outright (SIGKILL) loses none either: nothing is lost
across a restart.  ``held-writes.jsonl``, what versions before the journal saved at close, is
still read.

**Telemetry retention** (``[carma] telemetry_retention``, ``retention_s``): every
``prune_every_s`` (10 minutes) the writer deletes GPU samples older than the retention, in
batches of ``PRUNE_BATCH`` rows, one transaction each, ordered writes going first between two
batches; memory and activity history are other tables and are kept.  A failed prune is tried
again at the next round.

``background=False`` makes every write in the caller's thread (the behaviour before this
module; ``bench/pass_cost.py`` compares the two in one run).
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from carma_airflow.executor.bookkeeping import journal
from carma_airflow.executor.bookkeeping.writes import StoreWrite, UpsertPlacement, encode_write
from carma_airflow.store.errors import StoreError, StoreRefusedError

log = logging.getLogger(__name__)

LOOSE_EVERY_S = 1.0
CAPACITY = 20_000  # ordered writes held at most before placement pauses (a try makes about four)
HELD_FILE = "held-writes.jsonl"  # what writers before the journal saved at close; still read
PARKED_FILE = "parked-writes.jsonl"
REPLAY_WAIT_S = 5.0  # how long a new writer waits for the held writes of the last one before going on
PRUNE_EVERY_S = 600.0  # telemetry retention: a pruning round this often
PRUNE_BATCH = 5_000  # rows deleted per transaction


class StoreWriter:
    """Ordered store writes: ``put`` appends, a thread (or ``retry``) writes them."""

    def __init__(
        self,
        store: Any,
        *,
        background: bool = True,
        retry_s: float = 1.0,
        max_retry_s: float = 8.0,
        capacity: int = CAPACITY,
        state_dir: Path | str | None = None,
        retention_s: float | None = None,
        prune_every_s: float = PRUNE_EVERY_S,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.store = store
        self.retention_s = retention_s
        self.prune_every_s = prune_every_s
        self.clock = clock
        self.pruned = 0  # telemetry rows deleted by retention (this executor's life)
        self._prune_at = clock() if retention_s else float("inf")  # the first round at start
        self.background = background
        self.retry_s = retry_s
        self.max_retry_s = max(retry_s, max_retry_s)
        self.capacity = max(1, capacity)
        self.state_dir = Path(state_dir) if state_dir is not None else None
        self.parked = 0  # writes the store refused, parked (this executor's life)
        self._queue: deque[tuple[int, StoreWrite]] = deque()  # (its number in the journal, the write)
        self._seq = 0
        # best-effort writes (telemetry, the live snapshot): the latest of each kind, made when
        # the ordered queue is empty, dropped if the store is unreachable; not counted as pending
        self._loose: dict[str, StoreWrite] = {}
        self._loose_busy = False
        self._loose_at = 0.0
        self._cond = threading.Condition()
        self._outage = False
        self._failures = 0  # transient failures of the head write in a row (the backoff)
        self._full_said = False
        self._stopping = False
        self._thread: threading.Thread | None = None
        self._journal: journal.WriteJournal | None = None
        replayed = self._load_held()
        if background:
            self._thread = threading.Thread(target=self._run, name="carma-store-writer", daemon=True)
            self._thread.start()
            if replayed and not self.flush(REPLAY_WAIT_S):
                log.warning("carma store: %d held write(s) of the last executor not made yet; kept in order", replayed)
        elif replayed:
            self.retry()

    @property
    def pending(self) -> int:
        """Writes not made yet (the one in flight included)."""
        with self._cond:
            return len(self._queue)

    @property
    def full(self) -> bool:
        """The queue holds ``capacity`` writes or more: the executor places nothing until it drains."""
        with self._cond:
            held = len(self._queue)
        full = held >= self.capacity
        if full and not self._full_said:
            log.warning(
                "carma store writer holds %d writes (its bound): new GPU tries wait until the store takes them", held
            )
        self._full_said = full
        return full

    def put(self, write: StoreWrite) -> None:
        """Make ``write`` after every write put before it (a best-effort one: when idle).  Never
        blocks, never drops: past ``capacity`` the write is held all the same (see :attr:`full`)."""
        with self._cond:
            if write.best_effort:
                self._loose[write.name] = write
            else:
                self._append(write)
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
        while self._prune_due() and self._prune_batch():
            pass

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
        """Make what is held (up to ``timeout_s``), then stop the thread; what is left is saved
        for the next executor (``held-writes.jsonl`` in the state folder), or logged if there is none."""
        done = self.flush(timeout_s)
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join(timeout=2.0)  # one in a blocking connect: its head write is saved too
        with self._cond:
            left = list(self._queue)
            self._queue.clear()
        kept = self._journal
        if kept is not None:
            kept.close(remove=not left)
        if done or not left:
            return
        if kept is not None and kept.path.exists():
            log.warning(
                "carma store unreachable at shutdown: %d write(s) kept in %s; the next executor makes them first",
                len(left),
                kept.path,
            )
        else:
            log.error("carma store unreachable at shutdown: %d write(s) not made", len(left))

    # -- the writer ------------------------------------------------------------------------
    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._queue and not self._loose and not self._stopping:
                    if self._prune_due():
                        break
                    self._cond.wait(self._until_prune())
                if self._stopping:
                    return
                prune = not self._queue and not self._loose
            if prune:  # idle and a pruning round is due: one batch, then the queue again
                self._prune_batch()
                continue
            with self._cond:
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
                with self._cond:  # store unreachable: the same write again, after a growing pause
                    if not self._stopping:
                        self._cond.wait(self._backoff_s())

    # -- telemetry retention -------------------------------------------------------------
    def _prune_due(self) -> bool:
        return self.clock() >= self._prune_at

    def _until_prune(self) -> float | None:
        if self._prune_at == float("inf"):
            return None
        return max(0.05, min(self._prune_at - self.clock(), self.prune_every_s))

    def _prune_batch(self) -> bool:
        """One batch of the due round; True if another batch of it follows."""
        assert self.retention_s is not None
        now = self.clock()
        try:
            deleted = int(self.store.prune_samples(now - self.retention_s, limit=PRUNE_BATCH))
        except StoreError as exc:
            log.debug("carma store: telemetry not pruned this round (%s)", exc)
            deleted = 0
        except Exception:
            log.exception("carma store: pruning telemetry failed")
            deleted = 0
        self.pruned += deleted
        if deleted >= PRUNE_BATCH:
            return True
        self._prune_at = now + self.prune_every_s
        return False

    def _backoff_s(self) -> float:
        return float(min(self.max_retry_s, self.retry_s * 2 ** max(0, self._failures - 1)))

    def _write_loose(self, write: StoreWrite) -> None:
        self._loose_at = time.monotonic()
        try:
            write.apply(self.store)
        except StoreError as exc:
            log.debug("carma store: %s not made (%s)", write.name, exc)
        except Exception:
            log.exception("carma store write %s failed; dropped", write.name)

    def _write_head(self) -> bool:
        with self._cond:
            if not self._queue:
                return True
            head = self._queue[0]
        seq, write = head
        try:
            write.apply(self.store)
        except StoreRefusedError as exc:  # the same write fails again however often: park it, go on
            self._park(write, exc)
        except StoreError as exc:  # transient (or not known to be permanent): keep it, retry later
            self._failures += 1
            if not self._outage:
                self._outage = True
                log.warning("carma store unreachable (%s); %d write(s) kept for later", exc, self.pending)
            return False
        except Exception as exc:  # a bug in the write, not an outage: park it, keep the writer alive
            log.exception("carma store write %s failed", write.name)
            self._park(write, exc)
        self._failures = 0
        with self._cond:
            if self._queue and self._queue[0] is head:
                self._queue.popleft()
                if self._journal is not None:
                    self._journal.done(seq)
            emptied = not self._queue
            if emptied and self._journal is not None:
                self._journal.clear()
            self._cond.notify_all()
        if self._outage and emptied:
            self._outage = False
            log.info("carma store reachable again; buffered writes done")
        return True

    # -- parked and held writes --------------------------------------------------------------
    def _park(self, write: StoreWrite, exc: BaseException) -> None:
        """A write the store refused: kept where an operator sees it, out of the queue."""
        from carma_airflow.executor.bookkeeping import metrics

        self.parked += 1
        error = " ".join(str(exc).split())[:2000]
        where = "the log only (no state folder)"
        if self.state_dir is not None:
            line = {"at": datetime.now(timezone.utc).isoformat(), "write": write.name, "error": error}
            try:
                line["record"] = json.loads(encode_write(write))
            except (TypeError, ValueError):
                line["record"] = repr(write)
            path = self.state_dir / PARKED_FILE
            try:
                self.state_dir.mkdir(parents=True, exist_ok=True)
                with path.open("a", encoding="utf-8") as out:
                    out.write(json.dumps(line, sort_keys=True) + "\n")
                where = str(path)
            except OSError as io_exc:
                where = f"the log only ({path} not writable: {io_exc})"
        log.error(
            "carma store refused write %s; parked in %s, the writes behind it go on (%s); write: %r",
            write.name,
            where,
            error,
            write,
        )
        metrics.parked_write(write.name)

    def _append(self, write: StoreWrite) -> None:
        """Queue an ordered write and journal it (the caller holds the lock, or is the constructor)."""
        self._seq += 1
        self._queue.append((self._seq, write))
        if self._journal is not None:
            self._journal.add(self._seq, self._as_held(write))

    def _as_held(self, write: StoreWrite) -> StoreWrite:
        """The write as the next executor should make it if this one dies first: a placement keeps
        its owner (this executor), so that the next one sees it as a gone peer's and reconciles it."""
        owner = getattr(self.store, "owner", None)
        if isinstance(write, UpsertPlacement) and write.record.owner is None and owner:
            return replace(write, record=replace(write.record, owner=owner))
        return write

    def _load_held(self) -> int:
        """The writes of gone writers on this host (their journals, and a held-writes file of an
        older version): first in the queue, journaled here before their files are removed."""
        if self.state_dir is None:
            return 0
        try:
            self._journal = journal.WriteJournal(self.state_dir)
        except OSError as exc:
            log.error("carma store: no journal in %s (%s); queued writes are kept in memory only", self.state_dir, exc)
        found = journal.recover(self.state_dir, legacy=HELD_FILE)
        for line, why in found.unreadable:
            self._park_line(line, why)
        for write in found.writes:
            self._append(write)
        journal.forget(found)  # once they are in this writer's journal
        loaded = len(found.writes)
        if loaded:
            log.info("carma store: %d write(s) left by a stopped or killed executor, made first", loaded)
        return loaded

    def _park_line(self, line: str, error: str) -> None:
        assert self.state_dir is not None
        self.parked += 1
        entry = {"at": datetime.now(timezone.utc).isoformat(), "write": "unreadable", "error": error, "line": line}
        with contextlib.suppress(OSError), (self.state_dir / PARKED_FILE).open("a", encoding="utf-8") as out:
            out.write(json.dumps(entry, sort_keys=True) + "\n")
        log.error("carma store: a held write could not be read back; parked (%s)", error)


__all__ = ["CAPACITY", "HELD_FILE", "PARKED_FILE", "PRUNE_BATCH", "PRUNE_EVERY_S", "StoreWriter"]
