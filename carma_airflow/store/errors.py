"""Errors of the bookkeeping store.  Messages name the (masked) URL and say what to check.

Two kinds, so that a caller knows whether to try again:

- :class:`StoreUnreachableError` (transient): the connection was lost or refused, a lock was not
  granted in time, a serialisation failure or deadlock made the database roll back.  The same
  call, made again later, may succeed; the executor's writer retries it with backoff.
- :class:`StoreRefusedError` (permanent): the database answered and said no: a constraint broke,
  a value did not fit its column, the schema is missing or older than the code.  The same call
  fails again however often it is made; the writer parks it (for an operator to see) and goes on.

Both are :class:`StoreError`, which callers that only need "the store failed" keep catching.
"""

from __future__ import annotations

from carma_airflow.core.errors import CarmaError


class StoreError(CarmaError):
    """The store's database could not be reached, read or written."""


class StoreUnreachableError(StoreError):
    """A transient failure: the same call may succeed if made again later (connection, lock, rollback)."""


class StoreRefusedError(StoreError):
    """A permanent failure: the database refused this call (constraint, data, schema); retrying cannot help."""


class RecordError(StoreRefusedError, ValueError):
    """A record or an argument given to the store is invalid (a bug in the caller)."""


__all__ = ["RecordError", "StoreError", "StoreRefusedError", "StoreUnreachableError"]
