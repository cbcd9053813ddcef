"""The bookkeeping store: GPU samples, placements, OOM events and memory history (SQLAlchemy).

The only package that imports SQLAlchemy.  :class:`Store` is loaded lazily, so importing the
records, the errors or :func:`default_url` from here does not load SQLAlchemy.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from carma_airflow.store.errors import RecordError, StoreError, StoreRefusedError, StoreUnreachableError
from carma_airflow.store.records import (
    ACTIVE_OUTCOMES,
    FINISHED_OUTCOMES,
    ActivityRecord,
    OomRecord,
    PlacementRecord,
    SampleRecord,
    TryOutcome,
    try_outcome,
)
from carma_airflow.store.url import default_url

if TYPE_CHECKING:
    from carma_airflow.store.store import Store

__all__ = [
    "ACTIVE_OUTCOMES",
    "FINISHED_OUTCOMES",
    "ActivityRecord",
    "OomRecord",
    "PlacementRecord",
    "RecordError",
    "SampleRecord",
    "Store",
    "StoreError",
    "StoreRefusedError",
    "StoreUnreachableError",
    "TryOutcome",
    "default_url",
    "try_outcome",
]


def __getattr__(name: str) -> Any:
    if name == "Store":
        from carma_airflow.store.store import Store

        return Store
    raise AttributeError(f"module 'carma_airflow.store' has no attribute {name!r}")
