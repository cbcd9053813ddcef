"""Errors of the bookkeeping store.  Messages name the (masked) URL and say what to check."""

from __future__ import annotations

from carma_airflow.core.errors import CarmaError


class StoreError(CarmaError):
    """The store's database could not be reached, read or written."""


class RecordError(StoreError, ValueError):
    """A record or an argument given to the store is invalid (a bug in the caller)."""
