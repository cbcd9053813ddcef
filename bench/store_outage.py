"""A store outage of 60 s with 200 writes queued: the executor's writer loses none.

A fresh PostgreSQL database on the shared server (``--pg``, default 127.0.0.1:5432), reached
through a TCP forwarder (tests/executor/tcp_proxy.py) that the script cuts: every open connection
is closed and new ones are refused, as a network partition would.  During the cut ``--writes``
learned-peak writes are put (what four tries' records per try look like in volume); after
``--outage`` seconds the path is restored.  Prints: writes held during the cut, retries the
writer made, seconds from the restore until the queue was empty, and whether every write landed
in order (read back directly, not through the proxy).  ``tests/executor/test_writer.py`` runs
the same with a 6 s cut.

    .venv/bin/python bench/store_outage.py                 # 60 s, 200 writes
    .venv/bin/python bench/store_outage.py --outage 10 --writes 1000
"""

from __future__ import annotations

import argparse
import sys
import time
import uuid
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "executor"))  # the TCP forwarder the tests cut

import sqlalchemy as sa  # noqa: E402
from tcp_proxy import TcpProxy  # noqa: E402

from carma_airflow.executor.bookkeeping import AddPeak, StoreWriter  # noqa: E402
from carma_airflow.store.store import Store  # noqa: E402


class Counting(Store):
    """The real store, counting the peak writes the writer attempted."""

    attempts = 0

    def add_peak(self, *args: Any, **kwargs: Any) -> None:
        type(self).attempts += 1
        super().add_peak(*args, **kwargs)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pg", default="postgresql+psycopg://postgres@127.0.0.1:5432/postgres")
    parser.add_argument("--outage", type=float, default=60.0, help="seconds the path to PostgreSQL is cut")
    parser.add_argument("--writes", type=int, default=200, help="writes put during the cut")
    args = parser.parse_args()

    name = f"carma_outage_bench_{uuid.uuid4().hex[:8]}"
    admin = sa.create_engine(args.pg, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.exec_driver_sql(f'CREATE DATABASE "{name}"')
    url = sa.engine.make_url(args.pg).set(database=name)
    direct = Store(url.render_as_string(hide_password=False))
    direct.migrate()
    proxy = TcpProxy(url.host or "127.0.0.1", url.port or 5432)
    proxy.up()
    store = Counting(url.set(port=proxy.port).render_as_string(hide_password=False) + "?connect_timeout=2")
    writer = StoreWriter(store)
    try:
        writer.put(AddPeak("bench", "t", 1, datetime.now(timezone.utc)))
        assert writer.flush(10), "the store did not take the first write"
        proxy.down()
        cut = time.monotonic()
        base = time.time()
        for i in range(args.writes):
            writer.put(AddPeak("bench", "t", 10_000 + i, datetime.fromtimestamp(base + i, tz=timezone.utc)))
        time.sleep(max(0.0, args.outage - (time.monotonic() - cut)))
        held, attempts = writer.pending, Counting.attempts - 1
        proxy.up()
        restored = time.monotonic()
        drained = writer.flush(120)
        drain_s = time.monotonic() - restored
        got = direct.peaks("bench", "t", limit=args.writes + 10)
        expected = [1] + [10_000 + i for i in range(args.writes)]
        print(f"outage: {args.outage:.0f} s with {args.writes} writes put during it")
        print(f"held during the outage: {held}; writer attempts while cut: {attempts} (backoff 1 s doubling to 8 s)")
        print(f"after the restore: queue empty in {drain_s:.1f} s ({'drained' if drained else 'NOT drained'})")
        print(f"in the store, in order: {len(got) - 1} of {args.writes}; lost: {args.writes - (len(got) - 1)}")
        ok = drained and got == expected and writer.parked == 0
        print("OK: none lost" if ok else "FAILED: writes lost or out of order")
        return 0 if ok else 1
    finally:
        writer.close(timeout_s=1)
        proxy.down()
        store.close()
        direct.close()
        with admin.connect() as conn:
            conn.exec_driver_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.dispose()


if __name__ == "__main__":
    raise SystemExit(main())
