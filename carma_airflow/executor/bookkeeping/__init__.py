"""What the executor writes down: the store writes as typed commands (writes.py) made in order off
the heartbeat by the writer (writer.py) with its on-disk journal (journal.py), the live snapshot and
telemetry history the UI reads (liveview.py, snapshot.py), and the metrics sent through Airflow's
Stats (metrics.py).  It knows nothing of tries: the other sub-packages build the writes."""

from __future__ import annotations

from carma_airflow.executor.bookkeeping import metrics
from carma_airflow.executor.bookkeeping.liveview import LiveView
from carma_airflow.executor.bookkeeping.writer import StoreWriter
from carma_airflow.executor.bookkeeping.writes import (
    AddActivity,
    AddPeak,
    MarkEnded,
    PutSnapshot,
    RecordOom,
    RecordSamples,
    SaveDocument,
    StoreWrite,
    UpsertPlacement,
    decode_write,
    encode_write,
    utc,
)

__all__ = [
    "AddActivity",
    "AddPeak",
    "LiveView",
    "MarkEnded",
    "PutSnapshot",
    "RecordOom",
    "RecordSamples",
    "SaveDocument",
    "StoreWrite",
    "StoreWriter",
    "UpsertPlacement",
    "decode_write",
    "encode_write",
    "metrics",
    "utc",
]
