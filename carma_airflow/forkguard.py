"""Forks wait until carma's background threads are between calls.

A process forked while another of its threads is inside a library holds that library's locks
in the child for ever: the thread that would release them does not exist there.  Found by the
demo: the scheduler forked a task while the store writer thread was inside SQLite; the task's
garbage collector later finalised the inherited SQLite connection and blocked for good on
SQLite's mutex.  The earlier ``flock`` hang of the simulated ledger was the same kind of bug.

Decision: carma's threads (store writer, GPU monitor) make each library call inside
``no_fork()``; an ``os.register_at_fork`` hook takes the same lock before any fork of the
process (ours, Airflow's LocalExecutor, multiprocessing) and releases it after.  A fork thus
waits for at most one store write or one GPU sample, never for a queue.  The hook is registered
after the logging module's, so it runs before it: a thread inside ``no_fork()`` can still log.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager


class _Guard:
    lock = threading.RLock()


def _before_fork() -> None:
    _Guard.lock.acquire()


def _after_fork_in_parent() -> None:
    _Guard.lock.release()


def _after_fork_in_child() -> None:
    _Guard.lock = threading.RLock()  # the child has none of the parent's other threads


os.register_at_fork(before=_before_fork, after_in_parent=_after_fork_in_parent, after_in_child=_after_fork_in_child)


@contextmanager
def no_fork() -> Iterator[None]:
    """No fork of this process starts while the block runs."""
    with _Guard.lock:
        yield


__all__ = ["no_fork"]
