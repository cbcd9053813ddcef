"""Launching is safe whatever the scheduler's threads hold (issue 12): the scheduler process never
forks a try; its launcher (a single-threaded process of its own) does.

A background thread holds the logging module's lock and keeps SQLite busy inside a query, the
two kinds of lock that hung forked tries before (121 of 2,000 in a load run; a try forked
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
    db = sqlite3.connect(":memory:", check_same_thread=False)
    logging._lock.acquire()  # type: ignore[attr-defined]  # the module lock every handler set-up takes
    holding.set()
    try:
        while not stop.is_set():  # inside SQLite nearly all the time
            db.execute(
                "with recursive c(x) as (select 1 union all select x + 1 from c limit 200000) select count(*) from c"
            )
    finally:
        logging._lock.release()  # type: ignore[attr-defined]
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
