"""A try's states and its one end path.

- book.py: a :class:`Try` and its typed state machine; the :class:`TryBook` that owns every try's state;
- intake.py: what a try asks of the placer (its ``TaskRequest``), a retry's included;
- ending.py: how an ended try is told (its outcome, the words kept, the store writes that follow);
- takeback.py: the tries the scheduler takes back (revoked, handed back, superseded);
- records.py: a try as the store keeps it (its placement record).
"""

from __future__ import annotations

from carma_airflow.executor.tries.book import STARTED, WAIT_RECORD_S, Try, TryBook, TryState, TryStateError
from carma_airflow.executor.tries.ending import (
    TryEnd,
    close_checkpoint,
    conclude,
    count_end,
    end_writes,
    stopped_at_cap,
)
from carma_airflow.executor.tries.intake import family_of, first_request, label_of, recovered, refused_write
from carma_airflow.executor.tries.records import placement_record
from carma_airflow.executor.tries.takeback import SUPERSEDED_GRACE_S, TakeBack

__all__ = [
    "STARTED",
    "SUPERSEDED_GRACE_S",
    "WAIT_RECORD_S",
    "TakeBack",
    "Try",
    "TryBook",
    "TryEnd",
    "TryState",
    "TryStateError",
    "close_checkpoint",
    "conclude",
    "count_end",
    "end_writes",
    "family_of",
    "first_request",
    "label_of",
    "placement_record",
    "recovered",
    "refused_write",
    "stopped_at_cap",
]
