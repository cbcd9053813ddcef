"""A try is one object with a typed state machine, and the book that owns every try's state (issue 12, 24).

    DEFERRED --> WAITING --> RUNNING ------------> ENDED
        \\           \\  \\ (withdrawn)    \\            ^
         +-----------+--> REFUSED ----+--> STOPPING --+
    ORPHAN (an earlier executor's, still running) --> RUNNING (adopted) | STOPPING | ENDED

DEFERRED: an earlier try of its task instance (or the same try, revoked) is still ending: its
outcome decides this try's plan.  WAITING: planned, in the placer's queue.  RUNNING: placed on
GPUs, its process started.  REFUSED: runs without GPUs as a process that fails at once with the
reason (never fits, bad config).  ORPHAN: started by an earlier executor on this host, not handed
over by the scheduler yet.  STOPPING: the scheduler took it back (revoked, or superseded by a
newer try): its process is being killed and reaped, its GPUs stay reserved until then, its end is
not reported, and its key is free: the scheduler may hand the same key over again (a new try of
the book, DEFERRED until this one has ended).

A :class:`TryBook` keeps every try of the executor, indexed by state; every move goes through
:meth:`TryBook.move`.  What Airflow sees (``has_task``, ``running``) is read from it.
"""

from __future__ import annotations

import enum
import functools
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from carma_airflow.core.errors import CarmaError

if TYPE_CHECKING:
    from carma_airflow.config.task_config import GpuTaskConfig
    from carma_airflow.core.recovery import EndPlan
    from carma_airflow.core.task import TaskRequest
    from carma_airflow.launching import TaskHandle


WAIT_RECORD_S = 60.0  # a waiting try's unchanged kind of reason is written at most this often
_NUMBERS = re.compile(r"\d+(?:\.\d+)?")


@functools.lru_cache(maxsize=4096)
def _headline(summary: str) -> str:
    """A waiting reason's kind: its headline with the numbers left out.  Kept per text: a reason
    pass over thousands of waiting tries meets the few texts of their shapes' shared decisions."""
    return _NUMBERS.sub("#", summary.split(" (", 1)[0])


class TryState(enum.Enum):
    DEFERRED = "deferred"
    WAITING = "waiting"
    RUNNING = "running"
    REFUSED = "refused"
    ORPHAN = "orphan"
    STOPPING = "stopping"
    ENDED = "ended"


_MOVES: dict[TryState, frozenset[TryState]] = {
    TryState.DEFERRED: frozenset({TryState.WAITING, TryState.REFUSED, TryState.ENDED}),  # ENDED: withdrawn
    TryState.WAITING: frozenset({TryState.RUNNING, TryState.REFUSED, TryState.ENDED}),  # ENDED: withdrawn
    TryState.RUNNING: frozenset({TryState.STOPPING, TryState.ENDED}),
    TryState.REFUSED: frozenset({TryState.STOPPING, TryState.ENDED}),
    TryState.ORPHAN: frozenset({TryState.RUNNING, TryState.STOPPING, TryState.ENDED}),
    TryState.STOPPING: frozenset({TryState.ENDED}),
    TryState.ENDED: frozenset(),
}
# known by request key, not by TaskInstanceKey: an orphan has none yet, a stopping try gave its up
_BY_RKEY = frozenset({TryState.ORPHAN, TryState.STOPPING})
# what Airflow counts in the executor's ``running``: started for the scheduler, not taken back
STARTED = (TryState.RUNNING, TryState.REFUSED)


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
    prior_ooms: int = 0  # CUDA OOM tries of its run before it: the store's count (intake.recovered)
    plan: EndPlan | None = None  # its retry for each way it can end, decided at its launch (starter.py)
    gpu_uuids: tuple[str, ...] = ()
    handle: TaskHandle | None = None
    started_at: float = 0.0
    fault: str | None = None  # why the executor stopped it (its GPU failed)
    last_summary: str = ""  # the placer's latest word on it while it waits
    recorded_shape: str = ""  # that word as last written to the store, numbers left out
    recorded_at: float = 0.0
    activity_told: bool = False  # its measured activity was given to the cycle while it runs
    taken_at: float = 0.0  # when the scheduler handed it over

    def worth_recording(self, summary: str, now: float) -> bool:
        """Whether a new waiting reason goes to the store and log: its kind changed (the
        headline, numbers left out: which GPUs said no, and why, changes with every placement on
        a busy cluster), or the last write is ``WAIT_RECORD_S`` old.  Remembers the write if so."""
        shape = _headline(summary)
        if shape == self.recorded_shape and now - self.recorded_at < WAIT_RECORD_S:
            return False
        self.recorded_shape, self.recorded_at = shape, now
        return True


class TryBook:
    """Every try of the executor by key and by state; moves go through :meth:`move`."""

    def __init__(self) -> None:
        self._by_key: dict[Any, Try] = {}  # what the scheduler handed over and has not taken back
        self._handed: dict[str, Try] = {}  # the same tries by request key (what the placer names them by)
        self._by_rkey: dict[str, Try] = {}  # ORPHAN and STOPPING tries, by request key
        self._by_state: dict[TryState, dict[Any, Try]] = {s: {} for s in TryState}

    def add(self, attempt: Try) -> Try:
        """A try handed over (DEFERRED), or an orphan an earlier executor left (ORPHAN)."""
        if attempt.state is TryState.ORPHAN:
            if attempt.rkey in self._by_rkey:
                raise TryStateError(f"try {attempt.rkey} is already known")
            self._by_rkey[attempt.rkey] = attempt
            self._by_state[TryState.ORPHAN][attempt.rkey] = attempt
            return attempt
        if attempt.key in self._by_key:
            raise TryStateError(f"try {attempt.key} is already known")
        self._by_key[attempt.key] = attempt
        self._handed[attempt.rkey] = attempt
        self._by_state[attempt.state][attempt.key] = attempt
        return attempt

    def move(self, attempt: Try, to: TryState) -> None:
        if to not in _MOVES[attempt.state]:
            raise TryStateError(f"try {attempt.rkey}: {attempt.state.value} -> {to.value} is not a move")
        if to is TryState.STOPPING and attempt.rkey in self._by_rkey and attempt.state is not TryState.ORPHAN:
            raise TryStateError(f"try {attempt.rkey} is stopping already")  # a bug: the same key started twice
        frm = attempt.state
        if frm in _BY_RKEY:
            del self._by_state[frm][attempt.rkey]
            del self._by_rkey[attempt.rkey]
        else:
            del self._by_state[frm][attempt.key]
            if to in _BY_RKEY or to is TryState.ENDED:
                del self._by_key[attempt.key]  # the scheduler may hand this key over again
                del self._handed[attempt.rkey]
        attempt.state = to
        if to is TryState.ENDED:
            return
        if to in _BY_RKEY:
            self._by_rkey[attempt.rkey] = attempt
            self._by_state[to][attempt.rkey] = attempt
            return
        if frm is TryState.ORPHAN:  # adopted: now known by its TaskInstanceKey
            self._by_key[attempt.key] = attempt
            self._handed[attempt.rkey] = attempt
        self._by_state[to][attempt.key] = attempt

    def get(self, key: Any) -> Try | None:
        """The try the scheduler handed over as ``key`` and has not taken back."""
        return self._by_key.get(key)

    def handed(self, rkey: str) -> Try | None:
        """The try the scheduler handed over (or that was adopted) whose request key is ``rkey``,
        while the scheduler has not taken it back: how the placer's results name tries."""
        return self._handed.get(rkey)

    def orphan(self, rkey: str) -> Try | None:
        attempt = self._by_rkey.get(rkey)
        return attempt if attempt is not None and attempt.state is TryState.ORPHAN else None

    def __contains__(self, key: object) -> bool:
        """Whether the scheduler's ``key`` is a try of this executor (``has_task``)."""
        return key in self._by_key

    def __len__(self) -> int:
        return len(self._by_key) + len(self._by_rkey)

    def in_state(self, state: TryState) -> Mapping[Any, Try]:
        """A read-only live view of the tries in ``state`` (ORPHAN, STOPPING: by request key)."""
        return MappingProxyType(self._by_state[state])

    def started(self) -> Iterator[Any]:
        """The keys Airflow counts as running here: started for it, not taken back."""
        for state in STARTED:
            yield from self._by_state[state]

    def all(self) -> Iterator[Try]:
        yield from list(self._by_key.values())
        yield from list(self._by_rkey.values())

    def earlier(self, attempt: Try) -> list[Try]:
        """The earlier tries of ``attempt``'s task instance (same run) whose processes still run
        here: running, adopted or not, and being stopped, in that order."""
        from carma_airflow.executor.tries.intake import family_of  # intake -> ending -> tries: no circle at import

        family, number = family_of(attempt.ti), attempt.ti.try_number
        return [t for t in self.holding_gpus() if t.ti.try_number < number and family_of(t.ti) == family]

    def waits_for_earlier(self, attempt: Try) -> bool:
        """Whether an earlier try of ``attempt``'s task instance still runs here, or the same try the
        scheduler took back is still being stopped: ``attempt`` is planned once that one has ended."""
        return attempt.rkey in self._by_state[TryState.STOPPING] or bool(self.earlier(attempt))

    def holding_gpus(self) -> Iterator[Try]:
        """Tries whose processes run on GPUs (adopted or not), and those being stopped."""
        yield from list(self._by_state[TryState.RUNNING].values())
        yield from list(self._by_state[TryState.ORPHAN].values())
        yield from list(self._by_state[TryState.STOPPING].values())


__all__ = ["STARTED", "WAIT_RECORD_S", "Try", "TryBook", "TryState", "TryStateError"]
