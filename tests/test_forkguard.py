"""A fork waits for carma's threads to leave their library calls (``carma_airflow.forkguard``).

The bug it prevents, found by the demo: the scheduler forked a task while the store writer
thread was inside SQLite, and the task later blocked for good on SQLite's mutex.
"""

from __future__ import annotations

import os
import signal
import threading
import time

from carma_airflow.forkguard import no_fork


def _fork_and_report(flag: list[bool]) -> bool:
    """Fork; the child exits 0 if ``flag[0]`` was already True when it was forked."""
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        signal.alarm(10)  # a child stuck on a lock its parent's thread held dies instead of hanging
        with no_fork():  # the child's guard is usable: none of the parent's threads hold it
            pass
        os._exit(0 if flag[0] else 1)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status) == 0


def test_a_fork_waits_until_a_thread_leaves_no_fork() -> None:
    inside = threading.Event()
    left = [False]

    def library_call() -> None:
        with no_fork():
            inside.set()
            time.sleep(0.3)  # a store write in progress
            left[0] = True

    t = threading.Thread(target=library_call)
    t.start()
    inside.wait(5)
    assert not left[0]
    assert _fork_and_report(left)  # the child saw the call finished: the fork waited for it
    t.join()


def test_a_fork_does_not_wait_without_a_thread_inside() -> None:
    assert _fork_and_report([True])
    with no_fork(), no_fork():  # reentrant for the thread that holds it
        pass
