"""Snapshots: named JSON documents rewritten in place (an executor's live view, read by the UI page)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import select

from carma_airflow.store.engine import Moment, StoreBase, utc
from carma_airflow.store.errors import RecordError
from carma_airflow.store.schema import SnapshotRow


class SnapshotStore(StoreBase):
    """The store's calls on snapshots (part of :class:`~carma_airflow.store.store.Store`)."""

    def put_snapshot(self, name: str, at: Moment, body: dict[str, Any]) -> None:
        """Write (or replace) the JSON document ``name``."""
        if not name:
            raise RecordError("a snapshot needs a non-empty name")
        self._write(self._upsert(SnapshotRow, "name", {"name": name, "at": utc(at), "body": body}))

    def snapshots(self, prefix: str = "") -> dict[str, tuple[datetime, dict[str, Any]]]:
        """Every snapshot whose name starts with ``prefix``: name -> (written at, document)."""
        stmt = (
            select(SnapshotRow).where(SnapshotRow.name.startswith(prefix, autoescape=True)).order_by(SnapshotRow.name)
        )
        with self._session() as session:
            return {row.name: (row.at, dict(row.body)) for row in session.scalars(stmt)}
