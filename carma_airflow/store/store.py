"""The bookkeeping store: GPU samples, placements, OOM events and memory history.

One :class:`Store` per process: it opens connections lazily, and a store carried across
``fork()`` opens fresh connections in the child instead of sharing the parent's.  Everything
goes in and out as plain values or the frozen records of :mod:`carma_airflow.store.records`.

:class:`Store` is the sum of one part per concern, each a module of this package over the
shared connection of :mod:`carma_airflow.store.engine` (SQLite in WAL mode with a busy timeout,
or PostgreSQL):

- :mod:`~carma_airflow.store.samples`: GPU samples;
- :mod:`~carma_airflow.store.tries`: placements (tries) and OOM events;
- :mod:`~carma_airflow.store.history`: learned memory peaks and SM activity;
- :mod:`~carma_airflow.store.snapshots`: an executor's live view for the UI;
- :mod:`~carma_airflow.store.hosts`: GPU hosts and dispatches (multi-host);
- :mod:`~carma_airflow.store.peers`: executors' heartbeats and shared reservations (several schedulers).
"""

from __future__ import annotations

from carma_airflow.store.engine import MIGRATIONS_DIR, SUPPORTED_BACKENDS, Moment
from carma_airflow.store.history import HistoryStore
from carma_airflow.store.hosts import HostStore
from carma_airflow.store.peers import PeerStore
from carma_airflow.store.samples import SampleStore
from carma_airflow.store.snapshots import SnapshotStore
from carma_airflow.store.tries import TryStore

__all__ = ["MIGRATIONS_DIR", "SUPPORTED_BACKENDS", "Moment", "Store"]


class Store(SampleStore, TryStore, HistoryStore, SnapshotStore, HostStore, PeerStore):
    """The bookkeeping store at one database URL (SQLite or PostgreSQL).

    Nothing connects until the first call.  Call :meth:`migrate` once (it is cheap when the
    schema is current) before using a new database.
    """
