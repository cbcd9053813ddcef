"""After a restart: the tries an earlier executor on this host left in the store.

Only tries whose owner is gone are taken (:meth:`Restart.reconcile`): a live peer scheduler's tries are
its own.  A peer that dies later leaves its tries to Airflow's adoption, which reads the store at
that moment (:meth:`Restart.adopt`).

A try whose process still runs keeps its GPUs reserved (an ORPHAN until the scheduler hands it
over through ``try_adopt_task_instances``, or until it ends); one whose process is gone is
ended from its result file; one that never started is closed (the scheduler queues its task
again).  The flow hands :class:`Restart` what it works with (the store, the peers, how to follow
a try, how to write) and takes each orphan into its book through :meth:`TryFlow.keep_orphan`.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from carma_airflow.core.errors import CarmaError
from carma_airflow.core.recovery import EndPlan
from carma_airflow.core.task import MemoryNeed, TaskRequest
from carma_airflow.executor.bookkeeping import MarkEnded
from carma_airflow.executor.tries import Try, TryState
from carma_airflow.keys import request_key
from carma_airflow.launching import PidHandle, TaskHandle
from carma_airflow.store.records import PlacementRecord, TryOutcome, kept_margin_of

if TYPE_CHECKING:
    from carma_airflow.executor.bookkeeping import StoreWrite
    from carma_airflow.executor.peers import Peers
    from carma_airflow.launching import Launcher
    from carma_airflow.store.store import Store

log = logging.getLogger("carma_airflow.executor")


@dataclass(frozen=True, slots=True)
class StoredTi:
    """The identity of a try known only from the store (an orphan not handed over yet)."""

    dag_id: str
    task_id: str
    run_id: str
    map_index: int
    try_number: int
    id: None = None


def request_of(rec: PlacementRecord, default_kept_margin_mib: int | None = None) -> TaskRequest:
    """The try's request as its record keeps it; the margin its fence keeps is the stored one, or
    ``default_kept_margin_mib`` (the host's configured fence) where none was stored (before 0008)."""
    return TaskRequest(
        key=rec.key,
        label=rec.label or f"{rec.dag_id}.{rec.task_id}",
        memory=MemoryNeed(rec.estimate_mib or 0, rec.estimate_source or "store"),
        gpus=max(1, len(rec.gpu_uuids)),
        submitted_at=rec.decided_at.timestamp(),
        try_number=rec.try_number,
        kept_margin_mib=kept_margin_of(rec.fence, default_kept_margin_mib),
    )


def reattach(rec: PlacementRecord, host: str, result_file: Path, launcher: Any) -> TaskHandle | None:
    """A handle on a try an earlier executor started: its process here, or its dispatch elsewhere."""
    if rec.host in (host, None) and rec.pid is not None and rec.ti_id is not None:
        return PidHandle(rec.pid, rec.pid_start, result_file)
    again = getattr(launcher, "reattach", None)
    return again(rec) if again is not None else None


def orphan_of(rec: PlacementRecord, handle: TaskHandle, now: float, default_kept_margin_mib: int | None) -> Try:
    plan = EndPlan.from_json(rec.end_plan)
    return Try(
        key=None,
        rkey=rec.key,
        ti=StoredTi(rec.dag_id, rec.task_id, rec.run_id, rec.map_index, rec.try_number),
        state=TryState.ORPHAN,
        request=request_of(rec, default_kept_margin_mib),
        gpu_uuids=tuple(rec.gpu_uuids),
        handle=handle,
        started_at=rec.started_at.timestamp() if rec.started_at else now,
        # the retry plan it was launched with: its end is told by it (tries/ending.py), with its OOM count
        plan=plan,
        prior_ooms=plan.prior_ooms if plan is not None else 0,
    )


def closed_at_restart(rec: PlacementRecord, now: float) -> MarkEnded:
    """A try that was not running when the executor restarted: the scheduler queues it again."""
    return MarkEnded(rec.key, now, TryOutcome.FAILED, None, "not running when the executor restarted; requeued")


class Restart:
    """The tries earlier executors left, taken over through what the flow hands it: the store and
    the peers to read them from, how to follow one (``launcher``, ``result_file``), and ``keep``,
    the flow's way to take an orphan into its book (:meth:`TryFlow.keep_orphan`)."""

    def __init__(
        self,
        store: Store,
        peers: Peers,
        *,
        host: str,
        launcher: Launcher,
        result_file: Callable[[str], Path],
        kept_margin_mib: Callable[[], int | None],
        write: Callable[[StoreWrite], None],
        keep: Callable[[Try], None],
    ) -> None:
        self.store, self.peers, self.host, self.launcher = store, peers, host, launcher
        self.result_file, self.kept_margin_mib, self.write, self.keep = result_file, kept_margin_mib, write, keep

    def _orphan(self, rec: PlacementRecord, handle: TaskHandle, now: float) -> Try:
        orphan = orphan_of(rec, handle, now, self.kept_margin_mib())
        self.keep(orphan)
        return orphan

    def reconcile(self) -> None:
        """At start: the tries whose owner is gone (this host's earlier executor, a dead peer), read once.

        One whose process runs keeps its GPUs reserved as an ORPHAN and becomes this executor's;
        one that ended is concluded; one that never started is closed.  A live peer's are left alone.
        """
        try:
            left = self.store.running()
        except CarmaError:
            log.exception("carma store unreachable at start: no reconciliation of earlier tries")
            return
        now = time.time()
        peers = self.peers
        if not peers.view.known:  # registration failed: an owner not known is not gone (peers.py)
            log.warning(
                "carma store: the other executors are not known yet; earlier tries are reconciled once they are"
            )
            peers.defer_reconcile()
            return
        claimed, closed = [], []
        for rec in left:
            if not peers.owner_gone(rec.owner, rec.decided_at.timestamp()):
                continue  # a live peer placed it (or its owner is not known yet): its own
            handle = None
            if rec.outcome == TryOutcome.RUNNING:
                handle = reattach(rec, self.host, self.result_file(rec.ti_id or ""), self.launcher)
            if handle is None:
                self.write(closed_at_restart(rec, now))
                closed.append(rec.key)
                continue
            orphan = self._orphan(rec, handle, now)
            claimed.append(rec.key)
            if orphan.state is TryState.ORPHAN:
                log.info("Try %s on %s outlived the previous executor; its GPUs stay reserved", rec.key, rec.host)
        try:
            self.store.claim_tries(claimed, peers.me)
            self.store.drop_reservations(closed + claimed)  # ours now: published again when shared
        except CarmaError as exc:
            log.warning("carma store unreachable: reconciled tries not claimed (%s)", exc)

    def adopt(self, ti: Any) -> Try | None:
        """A try Airflow hands over (its scheduler is gone) that this executor did not reconcile at
        start: a peer that died later.  Read from the store now, its owner judged from the peers' view
        as ``try_adopt_task_instances`` refreshed it; None when its process is not here."""
        rkey = request_key(ti.key)
        peers = self.peers
        try:
            rec = self.store.placement(rkey)
        except CarmaError as exc:
            log.warning("carma store unreachable: %s not adopted (%s)", ti.key, exc)
            return None
        now = time.time()
        gone = rec is not None and peers.owner_gone(rec.owner, rec.decided_at.timestamp())
        if rec is not None and rec.outcome == TryOutcome.WAITING and gone:
            self.write(closed_at_restart(rec, now))  # it waited in a dead executor: Airflow resets it
        if rec is None or rec.outcome != TryOutcome.RUNNING:
            return None
        if not gone:  # its owner beats (or is not known yet): its try, whatever Airflow thinks
            log.warning(
                "Airflow hands over %s of CarmaExecutor %s, which is %s to this one; not adopted (Airflow resets "
                "it). Keep [carma] peer_timeout_seconds at most [scheduler] scheduler_health_check_threshold",
                ti.key,
                rec.owner,
                peers.owner_state(rec.owner, rec.decided_at.timestamp()).value,
            )
            return None
        handle = reattach(rec, self.host, self.result_file(rec.ti_id or ""), self.launcher)
        peers.ledger.forget_foreign(rkey)
        if handle is None or handle.poll() is not None:
            with contextlib.suppress(CarmaError):  # reset by Airflow: what its owner published stops counting
                self.store.drop_reservations([rkey])
            return None
        orphan = self._orphan(rec, handle, now)
        try:
            self.store.claim_tries([rkey], peers.me)
        except CarmaError as exc:
            log.warning("carma store unreachable: adopted %s still shows its old owner (%s)", ti.key, exc)
        peers.publish_adopted(rkey)
        return orphan


def keep_retries_of_unrun(ti: Any) -> bool:
    """A try Airflow resets rather than adopts, seen before the reset (``try_adopt_task_instances``
    declined it): one still QUEUED never ran (its task had not reported that it runs, which moves it
    to RUNNING), yet the reset gives the task instance its next try number, which counts against
    ``max_tries``.  Raise ``max_tries`` by one, as Airflow itself does for a try that did not end by
    the task's own doing (``clear``, a cleared try terminated: ``max_tries = try_number + retries``),
    so a restart spends none of the task's retries, its OOM retries included.  The scheduler
    commits the change with the reset, in its own transaction.  True when raised."""
    if getattr(ti, "state", None) != "queued" or getattr(ti, "max_tries", None) is None:
        return False
    ti.max_tries = max(ti.max_tries, 0) + 1
    log.info("%s never ran before the reset: max_tries raised to %d, so the reset spends no retry", ti, ti.max_tries)
    return True


def declined_keeping_retries(tis: Iterable[Any], adopt: Callable[[Any], bool] | None) -> list[Any]:
    """``try_adopt_task_instances``: the tries not adopted (``adopt`` None: on standby, none is),
    which Airflow resets; each that never ran keeps its retries (:func:`keep_retries_of_unrun`)."""
    reset = [ti for ti in tis if adopt is None or not adopt(ti)]
    for ti in reset:
        keep_retries_of_unrun(ti)
    return reset


__all__ = [
    "Restart",
    "StoredTi",
    "closed_at_restart",
    "declined_keeping_retries",
    "keep_retries_of_unrun",
    "orphan_of",
    "reattach",
    "request_of",
]
