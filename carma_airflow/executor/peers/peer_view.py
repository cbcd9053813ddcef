"""What one CarmaExecutor knows of the others on its store: an immutable view, and what it says
of the executor that owns a try (alive, gone, or unknown; see peers.py's module docstring)."""

from __future__ import annotations

import enum
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from carma_airflow.store.peers import ExecutorRecord

FORGET_AFTER_S = 3600.0  # a gone executor's row (and what it still had published) is dropped after this


def beat_period(timeout_s: float) -> float:
    """Seconds between two heartbeats: several per timeout, at most every 5 s."""
    return max(0.2, min(5.0, timeout_s / 6))


class OwnerState(enum.Enum):
    """What the view says of the executor that owns a try."""

    ALIVE = "alive"
    GONE = "gone"
    UNKNOWN = "unknown"  # the view was never read, or the owner may not have registered yet: not gone


@dataclass(frozen=True, slots=True)
class PeerView:
    """The executors of the store as one read saw them; replaced whole, never changed in place."""

    known: bool  # False until a read succeeded (registration failed so far)
    at: float = 0.0  # when it was read (time.time())
    executors: Mapping[str, ExecutorRecord] = field(default_factory=lambda: MappingProxyType({}))
    peers: frozenset[str] = frozenset()  # the other executors alive when it was read
    refusal: str | None = None  # exclusive mode, not the one that places: why
    error: str | None = None  # not known: why

    @property
    def peers_alive(self) -> bool:
        return bool(self.peers)

    def owner_state(self, owner: str | None, me: str, written_at: float | None = None) -> OwnerState:
        """What this view says of ``owner`` (None: a try written before owners were kept: gone).

        ``written_at``: when the owner wrote the try (its decision time): an owner with no row is
        gone only when that is older than the hour after which rows are forgotten; before, it may
        be a live executor whose registration has not succeeded yet.
        """
        if owner is None:
            return OwnerState.GONE
        if owner == me:
            return OwnerState.ALIVE
        if not self.known:
            return OwnerState.UNKNOWN
        if owner in self.peers:
            return OwnerState.ALIVE
        if owner in self.executors:
            return OwnerState.GONE  # stopped, silent past the timeout, or its process is gone
        if written_at is not None and self.at - written_at > FORGET_AFTER_S:
            return OwnerState.GONE  # forgotten: silent for an hour
        return OwnerState.UNKNOWN


def refusal_text(other: ExecutorRecord, sqlite: bool) -> str:
    """Exclusive mode: why this executor places nothing while ``other`` (the oldest live one) does."""
    why = (
        "SQLite serves one scheduler only; use PostgreSQL ([carma] store_url) for several"
        if sqlite
        else "[carma] schedulers = one; set it to auto or several to share the GPUs"
    )
    return (
        f"waiting: another CarmaExecutor ({other.id}, pid {other.pid}, started {other.started_at:%H:%M:%S}) "
        f"places GPU tries on this store and this one does not ({why}); it places when that one stops"
    )


def lapse_text(me: str, last_beat: float | None, now: float, timeout_s: float) -> str | None:
    """What to say when executor ``me``'s own heartbeat lapsed past the peer timeout (None: it did not)."""
    if last_beat is None or now - last_beat <= timeout_s:
        return None
    return (
        f"CarmaExecutor {me} sent no heartbeat for {now - last_beat:.0f} s, over [carma] peer_timeout_seconds "
        f"({timeout_s:.0f} s): its peers may have taken it for gone and adopted its running tries, and Airflow "
        "may have reset its queued ones (a reset try's old attempt is refused by Airflow's API if it starts); "
        "a scheduler that stalls this long needs a longer peer_timeout_seconds and "
        "[scheduler] scheduler_health_check_threshold"
    )


def pid_exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


__all__ = ["FORGET_AFTER_S", "OwnerState", "PeerView", "beat_period", "lapse_text", "pid_exists", "refusal_text"]
