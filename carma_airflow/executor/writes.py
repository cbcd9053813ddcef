"""The executor's store writes as typed commands (the writer makes them in order, off the loop).

Each command is a frozen dataclass that knows the one Store method it calls: a changed
signature is a type error here, not a write silently dropped on the writer thread.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from carma_airflow.store.records import OomRecord, PlacementRecord, SampleRecord, TryOutcome
    from carma_airflow.store.store import Store


class StoreWrite(Protocol):
    @property
    def name(self) -> str: ...

    @property
    def best_effort(self) -> bool:
        """True: dropped, not held, while the store is unreachable (telemetry, snapshots)."""
        ...

    def apply(self, store: Store) -> None: ...


@dataclass(frozen=True, slots=True)
class UpsertPlacement:
    record: PlacementRecord
    name: str = "upsert_placement"
    best_effort: bool = False

    def apply(self, store: Store) -> None:
        store.upsert_placement(self.record)


@dataclass(frozen=True, slots=True)
class MarkEnded:
    key: str
    at: float
    outcome: TryOutcome
    peak_mib: int | None = None
    summary: str | None = None
    name: str = "mark_ended"
    best_effort: bool = False

    def apply(self, store: Store) -> None:
        store.mark_ended(self.key, self.at, self.outcome, self.peak_mib, self.summary)


@dataclass(frozen=True, slots=True)
class AddPeak:
    dag_id: str
    task_id: str
    peak_mib: int
    at: datetime
    run_id: str | None = None
    map_index: int | None = None
    name: str = "add_peak"
    best_effort: bool = False

    def apply(self, store: Store) -> None:
        store.add_peak(self.dag_id, self.task_id, self.peak_mib, self.at, self.run_id, self.map_index)


@dataclass(frozen=True, slots=True)
class RecordOom:
    record: OomRecord
    name: str = "record_oom"
    best_effort: bool = False

    def apply(self, store: Store) -> None:
        store.record_oom(self.record)


@dataclass(frozen=True, slots=True)
class AddActivity:
    dag_id: str
    task_id: str
    sm_activity: float
    source: str
    at: datetime
    run_id: str | None = None
    map_index: int | None = None
    name: str = "add_activity"
    best_effort: bool = False

    def apply(self, store: Store) -> None:
        store.add_activity(
            self.dag_id, self.task_id, self.sm_activity, self.source, self.at, self.run_id, self.map_index
        )


@dataclass(frozen=True, slots=True)
class SaveDocument:
    """A JSON document that must persist (the learned interference model), unlike a snapshot."""

    document: str
    at: float
    body: dict[str, Any]
    name: str = "save_document"
    best_effort: bool = False

    def apply(self, store: Store) -> None:
        store.put_snapshot(self.document, self.at, self.body)


@dataclass(frozen=True, slots=True)
class RecordSamples:
    records: tuple[SampleRecord, ...]
    min_interval_s: float
    name: str = "record_samples"
    best_effort: bool = True  # telemetry history may have gaps; nothing is owed to anyone

    def apply(self, store: Store) -> None:
        store.record_samples(list(self.records), min_interval_s=self.min_interval_s)


@dataclass(frozen=True, slots=True)
class PutSnapshot:
    snapshot: str
    at: float
    body: dict[str, Any]
    name: str = "put_snapshot"
    best_effort: bool = True  # the next one replaces it

    def apply(self, store: Store) -> None:
        store.put_snapshot(self.snapshot, self.at, self.body)


__all__ = [
    "AddActivity",
    "AddPeak",
    "MarkEnded",
    "PutSnapshot",
    "RecordOom",
    "RecordSamples",
    "SaveDocument",
    "StoreWrite",
    "UpsertPlacement",
]
