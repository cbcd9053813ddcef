"""Launching is safe whatever the scheduler's threads hold (issue 12): the scheduler process never
forks a try; its launcher (a single-threaded process of its own) does.

A background thread holds the logging module's lock while it keeps SQLite busy inside a query,
nearly all the time: the two kinds of lock that hung forked tries before (121 of 2,000 in a load run; a try forked
inside SQLite), while 100 tries launch; each try logs and opens SQLite itself.  No try may hang.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
import time

from executor_helpers import make_workload, run_until, submit

TRIES = 100
COUNT = "with recursive c(x) as (select 1 union all select x + 1 from c limit 200000) select count(*) from c"


def _hold_locks(stop: threading.Event, holding: threading.Event) -> None:
    """Inside the logging module's lock and inside SQLite nearly all the time, as a busy logging
    or store thread is: a process forked now would inherit both held."""
    db = sqlite3.connect(":memory:", check_same_thread=False)
    holding.set()
    try:
        while not stop.is_set():
            with logging._lock:  # type: ignore[attr-defined]  # the module lock every logger set-up takes
                db.execute(COUNT).fetchone()
            time.sleep(0.0005)  # let the scheduler's own thread log now and then
    finally:
        db.close()


def test_a_hundred_tries_launch_while_a_thread_holds_the_logging_and_sqlite_locks(executor_factory) -> None:
    names = [f"t{i:03d}" for i in range(TRIES)]
    ex = executor_factory(
        gpus="4xA100-40GB",
        parallelism=TRIES,
        behaviour={name: {"seconds": 0.05, "touch_locks": True} for name in names},
        max_tenants="8",
        lock_seconds="0.1",
    )
    stop, holding = threading.Event(), threading.Event()
    holder = threading.Thread(target=_hold_locks, args=(stop, holding), daemon=True)
    holder.start()
    assert holding.wait(10)
    try:
        workloads = [make_workload(name, config={"memory": "1GiB"}) for name in names]
        submit(ex, *workloads)
        started = time.monotonic()
        run_until(ex, lambda: not ex.waiting and not ex.active, timeout=240, flush=False)
        assert holder.is_alive()  # the locks were held the whole time
    finally:
        stop.set()
        holder.join(10)
    assert ex.writer is not None and ex.writer.flush()
    outcomes = [ex.store.latest_for("dag", name)[0].outcome.value for name in names]
    assert outcomes == ["success"] * TRIES, f"not all tries ended well after {time.monotonic() - started:.0f} s"


def test_tries_launch_when_the_scheduler_holds_more_than_1024_descriptors(executor_factory) -> None:
    # found by the load run: with thousands of LocalExecutor workers the scheduler's descriptors
    # pass 1024, and select() cannot watch the launcher's pipe there (poll() can)
    import os

    held = [os.open(os.devnull, os.O_RDONLY) for _ in range(1100)]
    try:
        ex = executor_factory(gpus="1xA100-40GB", behaviour={"t": {"seconds": 0.05}})
        w = make_workload("t", config={"memory": "1GiB"})
        submit(ex, w)
        run_until(ex, lambda: not ex.active, timeout=60)
        assert ex.store.latest_for("dag", "t")[0].outcome.value == "success"
    finally:
        for fd in held:
            os.close(fd)
