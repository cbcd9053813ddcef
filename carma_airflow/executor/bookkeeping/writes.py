"""The executor's store writes as typed commands (the writer makes them in order, off the loop).

Each command is a frozen dataclass that knows the one Store method it calls: a changed
signature is a type error here, not a write silently dropped on the writer thread.
"""

from __future__ import annotations

import enum
import json
from dataclasses import dataclass, fields, is_dataclass
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, Protocol

from carma_airflow.store import records

if TYPE_CHECKING:
    from carma_airflow.store.records import OomRecord, PlacementRecord, SampleRecord, TryOutcome
    from carma_airflow.store.store import Store


def utc(ts: float) -> datetime:
    """A clock reading (``time.time()``) as the store keeps it."""
    return datetime.fromtimestamp(ts, tz=timezone.utc)


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
    co_tasks: tuple[str, ...] | None = None  # the task types the try shared its GPUs with (issue 23)
    solo_s: float | None = None  # its run time, where it ran alone throughout (a solo run time)
    gpu_model: str | None = None  # the GPU model the solo (or shared) run time was measured on (issue 44)
    shared_s: float | None = None  # a first try's run time where it shared all along (issue 41)
    shared_alone_s: float | None = None  # its run alone estimated from it (issue 44)
    name: str = "add_activity"
    best_effort: bool = False

    def apply(self, store: Store) -> None:
        store.add_activity(
            self.dag_id,
            self.task_id,
            self.sm_activity,
            self.source,
            self.at,
            self.run_id,
            self.map_index,
            co_tasks=self.co_tasks,
            solo_s=self.solo_s,
            gpu_model=self.gpu_model,
            shared_s=self.shared_s,
            shared_alone_s=self.shared_alone_s,
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


# -- held writes on disk (writer.py: what the store had not taken when the executor stopped) ----


class UnreadableWriteError(ValueError):
    """A line of a held-writes file that is not a write this version knows."""


def encode_write(write: StoreWrite) -> str:
    """One line of JSON for ``write`` (a dataclass of this module), read back by :func:`decode_write`."""
    return json.dumps(_encode(write), separators=(",", ":"), sort_keys=True)


def decode_write(line: str) -> StoreWrite:
    """The write :func:`encode_write` wrote; :class:`UnreadableWriteError` if it is not one."""
    try:
        value = _decode(json.loads(line))
    except (ValueError, TypeError, KeyError) as exc:
        raise UnreadableWriteError(f"not a held store write ({exc}): {line[:200]!r}") from None
    if type(value).__name__ not in _WRITES:
        raise UnreadableWriteError(f"not a held store write: {line[:200]!r}")
    return value  # type: ignore[no-any-return]


def _encode(value: Any) -> Any:
    if is_dataclass(value) and not isinstance(value, type):
        return {"__t": type(value).__name__, "f": {f.name: _encode(getattr(value, f.name)) for f in fields(value)}}
    if isinstance(value, datetime):
        return {"__dt": value.isoformat()}
    if isinstance(value, enum.Enum):
        return {"__e": type(value).__name__, "v": value.value}
    if isinstance(value, tuple):
        return {"__tup": [_encode(v) for v in value]}
    if isinstance(value, list):
        return [_encode(v) for v in value]
    if isinstance(value, dict):
        return {"__d": {str(k): _encode(v) for k, v in value.items()}}
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    raise TypeError(f"a store write cannot hold a {type(value).__name__} ({value!r})")


def _decode(value: Any) -> Any:
    if isinstance(value, list):
        return [_decode(v) for v in value]
    if not isinstance(value, dict):
        return value
    if "__t" in value:
        cls = _KNOWN[value["__t"]]
        return cls(**{name: _decode(v) for name, v in value["f"].items()})
    if "__dt" in value:
        return datetime.fromisoformat(value["__dt"])
    if "__e" in value:
        return _ENUMS[value["__e"]](value["v"])
    if "__tup" in value:
        return tuple(_decode(v) for v in value["__tup"])
    return {k: _decode(v) for k, v in value["__d"].items()}


__all__ = [
    "AddActivity",
    "AddPeak",
    "MarkEnded",
    "PutSnapshot",
    "RecordOom",
    "RecordSamples",
    "SaveDocument",
    "StoreWrite",
    "UnreadableWriteError",
    "UpsertPlacement",
    "decode_write",
    "encode_write",
    "utc",
]


# what a held-writes file may name: the writes of this module and the records they carry
_WRITES: dict[str, type] = {
    name: obj for name, obj in list(globals().items()) if isinstance(obj, type) and is_dataclass(obj)
}
_KNOWN: dict[str, type] = {
    **_WRITES,
    **{name: obj for name, obj in vars(records).items() if isinstance(obj, type) and is_dataclass(obj)},
}
_ENUMS: dict[str, type[enum.Enum]] = {"TryOutcome": records.TryOutcome}
