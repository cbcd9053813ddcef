"""One view of the tries waiting for a GPU and of the executors, read from the store.

Each CarmaExecutor records its waiting tries in ``carma_placement`` (outcome ``waiting``, its id
as ``owner``) and beats in ``carma_executor``.  The GPU page, ``carma gpus`` and ``carma why``
read both from there, every executor's rows together, not one process's memory; the live
snapshots (one per executor, store/live_snapshots.py) add what only they know (GPUs, tenants, the
latest reason) to these rows.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

from carma_airflow.store.records import PlacementRecord, TryOutcome

if TYPE_CHECKING:
    from carma_airflow.store.peers import ExecutorRecord
    from carma_airflow.store.store import Store


@dataclass(frozen=True, slots=True)
class ExecutorState:
    """One CarmaExecutor as the store knows it, judged at ``now``."""

    id: str
    host: str
    alive: bool
    heartbeat_age_s: float
    stopped: bool


@dataclass(frozen=True, slots=True)
class WaitingTry:
    """A try some executor recorded as waiting for a GPU; ``owner_alive`` False: that executor
    stopped or stopped beating, so nothing places the try (Airflow resets it once it adopts the
    executor's task instances); None: written by an executor the store has no row of."""

    record: PlacementRecord
    owner_alive: bool | None


@dataclass(frozen=True, slots=True)
class WaitView:
    executors: tuple[ExecutorState, ...]
    waiting: tuple[WaitingTry, ...]

    @property
    def running(self) -> tuple[ExecutorState, ...]:
        return tuple(e for e in self.executors if e.alive)

    def not_running_line(self) -> str | None:
        """What to say when no executor beats: None while one does."""
        if self.running:
            return None
        if not self.executors:
            return "no CarmaExecutor has registered in this store (is a scheduler with CarmaExecutor running?)"
        last = min(self.executors, key=lambda e: e.heartbeat_age_s)
        how = "stopped" if last.stopped else "stopped beating"
        return (
            f"no CarmaExecutor is running: the last one ({last.id}) {how} {_ago(last.heartbeat_age_s)} ago; "
            "nothing is placed until one runs (a CarmaExecutor that cannot start holds its tasks and says why "
            "in its scheduler's log)"
        )

    def lines(self, now: datetime, most: int = 5) -> list[str]:
        """What ``carma gpus`` prints under its table: whether an executor runs, what waits."""
        out = [f"note: {line}"] if (line := self.not_running_line()) is not None else []
        if not self.waiting:
            return [*out, "no try waits for a GPU"]
        out.append(f"{len(self.waiting)} tries wait for a GPU (carma why DAG.TASK says why):")
        for w in self.waiting[:most]:
            p = w.record
            waited = _ago(max(0.0, (now - p.decided_at).total_seconds()))
            gone = " [its CarmaExecutor is not running]" if w.owner_alive is False else ""
            out.append(f"  {p.label or p.dag_id + '.' + p.task_id} try {p.try_number}, {waited}{gone}: {p.summary}")
        if len(self.waiting) > most:
            out.append(f"  ... and {len(self.waiting) - most} more (carma placements)")
        return out


def judge(executors: Iterable[ExecutorRecord], now: datetime, timeout_s: float) -> tuple[ExecutorState, ...]:
    at = now.timestamp()
    return tuple(
        ExecutorState(
            id=e.id,
            host=e.host,
            alive=e.alive(at, timeout_s),
            heartbeat_age_s=max(0.0, at - e.heartbeat_at.timestamp()),
            stopped=e.stopped_at is not None,
        )
        for e in executors
    )


def build(
    executors: Iterable[ExecutorRecord], active: Sequence[PlacementRecord], now: datetime, timeout_s: float
) -> WaitView:
    """``active``: the store's waiting and running tries (``Store.running``)."""
    states = judge(executors, now, timeout_s)
    alive = {e.id: e.alive for e in states}
    waiting = tuple(
        WaitingTry(p, alive.get(p.owner) if p.owner else None)
        for p in sorted(active, key=lambda p: p.decided_at)
        if p.outcome == TryOutcome.WAITING
    )
    return WaitView(states, waiting)


def read(store: Store, now: datetime, timeout_s: float) -> WaitView:
    """The view as the store has it now (two reads)."""
    return build(store.executors(), store.running(), now, timeout_s)


def _ago(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


__all__ = ["ExecutorState", "WaitView", "WaitingTry", "build", "judge", "read"]
