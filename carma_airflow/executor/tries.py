"""A try is one object with a typed state machine (issue 12).

    DEFERRED --> WAITING --> RUNNING --> ENDED
        \\           \\  \\ (withdrawn)      ^
         +-----------+--> REFUSED -------+
    ORPHAN (an earlier executor's, still running) --> RUNNING (adopted) | ENDED

DEFERRED: its previous try's process is still ending (its outcome decides this try's plan).
WAITING: planned, in the placer's queue.  RUNNING: placed on GPUs, its process started.
REFUSED: runs without GPUs as a process that fails at once with the reason (never fits, bad
config).  ORPHAN: started by an earlier executor on this host, not handed over by the scheduler
yet.  A :class:`TryBook` keeps every try of the executor, indexed by state.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from carma_airflow.core.errors import CarmaError

if TYPE_CHECKING:
    from carma_airflow.core.task import TaskRequest
    from carma_airflow.executor.launch import TaskHandle
    from carma_airflow.task_config import GpuTaskConfig


WAIT_RECORD_S = 60.0  # a waiting try's unchanged kind of reason is written at most this often
_NUMBERS = re.compile(r"\d+(?:\.\d+)?")


class TryState(enum.Enum):
    DEFERRED = "deferred"
    WAITING = "waiting"
    RUNNING = "running"
    REFUSED = "refused"
    ORPHAN = "orphan"
    ENDED = "ended"


_MOVES: dict[TryState, frozenset[TryState]] = {
    TryState.DEFERRED: frozenset({TryState.WAITING, TryState.REFUSED, TryState.ENDED}),  # ENDED: withdrawn
    TryState.WAITING: frozenset({TryState.RUNNING, TryState.REFUSED, TryState.ENDED}),  # ENDED: withdrawn
    TryState.RUNNING: frozenset({TryState.ENDED}),
    TryState.REFUSED: frozenset({TryState.ENDED}),
    TryState.ORPHAN: frozenset({TryState.RUNNING, TryState.ENDED}),
    TryState.ENDED: frozenset(),
}


class TryStateError(CarmaError):
    """A try was asked to move where its state machine does not go (a bug in the executor)."""


@dataclass(slots=True, eq=False)
class Try:
    """One try of one task instance, from the scheduler's hand-over to its end."""

    key: Any  # the TaskInstanceKey (None for an orphan the scheduler has not handed over)
    rkey: str  # request key: dag/task/run/map_index/try_number (store, placer)
    ti: Any  # the workload's TaskInstanceDTO, an adopted TaskInstance, or a stored identity
    state: TryState
    workload: Any = None
    config: GpuTaskConfig | None = None
    request: TaskRequest | None = None
    prior_ooms: int = 0
    gpu_uuids: tuple[str, ...] = ()
    handle: TaskHandle | None = None
    started_at: float = 0.0
    fault: str | None = None  # why the executor stopped it (its GPU failed)
    last_summary: str = ""  # the placer's latest word on it while it waits
    recorded_shape: str = ""  # that word as last written to the store, numbers left out
    recorded_at: float = 0.0
    activity_told: bool = False  # its measured activity was given to the cycle while it runs
    taken_at: float = 0.0  # when the scheduler handed it over
    revoked: bool = False  # the scheduler took it back (stuck in queued): its end is not reported

    def worth_recording(self, summary: str, now: float) -> bool:
        """Whether a new waiting reason goes to the store and log: its kind changed (the
        headline, numbers left out: which GPUs said no, and why, changes with every placement on
        a busy cluster), or the last write is ``WAIT_RECORD_S`` old.  Remembers the write if so."""
        shape = _NUMBERS.sub("#", summary.split(" (", 1)[0])
        if shape == self.recorded_shape and now - self.recorded_at < WAIT_RECORD_S:
            return False
        self.recorded_shape, self.recorded_at = shape, now
        return True


class TryBook:
    """Every try of the executor by key and by state; moves go through :meth:`move`."""

    def __init__(self) -> None:
        self._by_key: dict[Any, Try] = {}
        self._orphans: dict[str, Try] = {}  # by request key: they have no TaskInstanceKey yet
        self._by_state: dict[TryState, dict[Any, Try]] = {s: {} for s in TryState}

    def add(self, attempt: Try) -> Try:
        if attempt.state is TryState.ORPHAN:
            self._orphans[attempt.rkey] = attempt
            self._by_state[TryState.ORPHAN][attempt.rkey] = attempt
            return attempt
        if attempt.key in self._by_key:
            raise TryStateError(f"try {attempt.key} is already known")
        self._by_key[attempt.key] = attempt
        self._by_state[attempt.state][attempt.key] = attempt
        return attempt

    def move(self, attempt: Try, to: TryState) -> None:
        if to not in _MOVES[attempt.state]:
            raise TryStateError(f"try {attempt.rkey}: {attempt.state.value} -> {to.value} is not a move")
        index = attempt.rkey if attempt.state is TryState.ORPHAN else attempt.key
        del self._by_state[attempt.state][index]
        if attempt.state is TryState.ORPHAN:
            del self._orphans[attempt.rkey]
            if to is not TryState.ENDED:  # adopted: now known by its TaskInstanceKey
                self._by_key[attempt.key] = attempt
        attempt.state = to
        if to is TryState.ENDED:
            self._by_key.pop(attempt.key, None)
            return
        self._by_state[to][attempt.key] = attempt

    def get(self, key: Any) -> Try | None:
        return self._by_key.get(key)

    def orphan(self, rkey: str) -> Try | None:
        return self._orphans.get(rkey)

    def __contains__(self, key: object) -> bool:
        return key in self._by_key

    def __len__(self) -> int:
        return len(self._by_key) + len(self._orphans)

    def in_state(self, state: TryState) -> Mapping[Any, Try]:
        """A read-only live view of the tries in ``state`` (ORPHAN: by request key)."""
        return MappingProxyType(self._by_state[state])

    def all(self) -> Iterator[Try]:
        yield from list(self._by_key.values())
        yield from list(self._orphans.values())

    def holding_gpus(self) -> Iterator[Try]:
        """Tries whose processes run on GPUs (adopted or not)."""
        yield from list(self._by_state[TryState.RUNNING].values())
        yield from list(self._orphans.values())

    def forget_all(self) -> None:
        """Drop every try (a test's way of killing an executor; tries' processes run on)."""
        self.__init__()  # type: ignore[misc]


__all__ = ["WAIT_RECORD_S", "Try", "TryBook", "TryState", "TryStateError"]
