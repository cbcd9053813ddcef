"""Several Airflow schedulers, each with a CarmaExecutor, on one store (Airflow's high availability).

Every executor registers in the store (``carma_executor``) and beats there from a thread of its
own (one short transaction every few seconds, never in the scheduler's loop); one whose beat is
older than ``[carma] peer_timeout_seconds`` is gone.  What a placement pass does depends on the
mode (``[carma] schedulers``):

* **single** (auto, no live peer): today's pass, no store I/O in the scheduler's heartbeat.
* **shared** (PostgreSQL; auto with a live peer, or several): each pass that has tries to place
  runs in one transaction holding ``pg_advisory_xact_lock`` per GPU host.  In it the other
  executors' published reservations (try, GPUs, MiB, since, activity) are laid over the GPU view
  as tenants (:class:`~carma_airflow.executor.shared_ledger.SharedLedger`), the cycle decides,
  and this pass's placements are published before the lock ends.  An executor switches to shared
  mode by publishing all it holds and marking its row ``shared``, under the same lock; a peer
  places only once every live executor is shared, so no placement escapes the other's count.
* **exclusive** (SQLite, or ``schedulers = one``): only the oldest live executor places; any
  other one keeps its GPU tries waiting with the reason, in its log and in ``carma why``.

A gone executor's published reservations keep counting until its tries are adopted or reset
(:mod:`carma_airflow.executor.adoption`); its row is forgotten an hour after its last beat.
"""

from __future__ import annotations

import atexit
import logging
import os
import secrets
import threading
import time
import weakref
from collections.abc import Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING

from carma_airflow.core.cycle import CycleResult, SchedulingCycle
from carma_airflow.core.decision import Decision, Outcome
from carma_airflow.core.errors import CarmaError
from carma_airflow.core.gpu import GpuState
from carma_airflow.executor.shared_ledger import SharedLedger, record_of
from carma_airflow.settings import CarmaSettings
from carma_airflow.store.peers import ExecutorRecord, ReservationPass, ReservationRecord
from carma_airflow.store.records import PlacementRecord, TryOutcome
from carma_airflow.taskrun.outcome import read_result

if TYPE_CHECKING:
    from carma_airflow.store.store import Store

log = logging.getLogger("carma_airflow.executor")

FORGET_AFTER_S = 3600.0  # a gone executor's row (and what it still had published) is dropped after this


def beat_period(timeout_s: float) -> float:
    """Seconds between two heartbeats: several per timeout, at most every 5 s."""
    return max(0.2, min(5.0, timeout_s / 6))


class Peers:
    """This executor's place among the CarmaExecutors of one store; see the module docstring."""

    def __init__(self, settings: CarmaSettings, store: Store) -> None:
        self.store = store
        self.host = settings.host
        self.state_dir = settings.state_dir
        self.mode = settings.schedulers
        self.timeout_s = settings.peer_timeout_seconds
        self.me = f"{settings.host}:{os.getpid()}:{secrets.token_hex(4)}"
        self.sqlite = store.masked_url.startswith("sqlite")
        self.exclusive = self.sqlite or self.mode == "one"
        self.ledger = SharedLedger(seen_after_s=settings.lock_seconds)
        self.shared = False  # all our reservations are published and our row says so
        self.peers_alive = False
        self.refusal: str | None = None  # exclusive mode, not the one that places: why
        self.executors: dict[str, ExecutorRecord] = {}  # as of the last beat or pass
        self.started_at = time.time()
        self._lock = threading.Lock()  # a pass against a switch to shared mode by the beat thread
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._registered = False
        self._beat_failed = False
        self._takeover = False  # exclusive mode: the one that placed is gone, its running tries count

    # -- life cycle -------------------------------------------------------------------------
    def start(self) -> None:
        """Register (the store's tries this executor writes are its own from now on) and beat."""
        self.store.owner = self.me
        if self.sqlite and self.mode == "several":
            log.error(
                "[carma] schedulers = several needs PostgreSQL: SQLite (%s) serves one scheduler; "
                "this executor places only while no other CarmaExecutor uses the store",
                self.store.masked_url,
            )
        self._register()
        self._thread = threading.Thread(target=self._run, name="carma-peers", daemon=True)
        self._thread.start()
        atexit.register(_close_at_exit, weakref.ref(self))

    def close(self, *, quiet: bool = False) -> None:
        """Stop beating and mark this executor stopped (its running tries wait for adoption)."""
        if self._stop.is_set():
            return
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5.0)
        if self._registered:
            try:
                self.store.stop_executor(self.me, time.time())
            except CarmaError as exc:
                if not quiet:  # at interpreter exit logging may be gone already
                    log.warning("carma store unreachable when stopping: peers see this one gone later (%s)", exc)

    def _register(self) -> None:
        now = time.time()
        rec = ExecutorRecord(self.me, self.host, os.getpid(), _at(self.started_at), _at(now))
        try:
            rows = self.store.register_executor(rec)
        except CarmaError as exc:
            log.warning("carma store unreachable: this executor is not registered yet (%s)", exc)
            return
        self._registered = True
        self._learn(rows, now)

    def _run(self) -> None:
        period = beat_period(self.timeout_s)
        while not self._stop.wait(period):
            self.beat()

    def beat(self) -> None:
        """One heartbeat: ours in the store, our released reservations out, the peers' state in."""
        if not self._registered:
            self._register()
            if not self._registered:
                return
        released = self.ledger.drain_released()
        now = time.time()
        try:
            rows = self.store.beat_executor(self.me, now, released)
        except CarmaError as exc:
            for key in released:
                self.ledger.release_later(key)  # again at the next beat
            if not self._beat_failed:
                log.warning("carma store unreachable: no heartbeat, peers may see this executor gone (%s)", exc)
            self._beat_failed = True
            return
        self._beat_failed = False
        if self.me not in {r.id for r in rows}:
            self._registered = False  # forgotten by a peer (we were gone an hour): register again
        self._learn(rows, now)
        gone = [r.id for r in rows if r.id != self.me and now - r.heartbeat_at.timestamp() > FORGET_AFTER_S]
        if gone:
            self._forget(gone)
        if any(r.id != self.me and not self.alive(r, now) for r in rows):
            self._reap(now)
        if not self.exclusive and not self.shared and (self.peers_alive or self.mode == "several"):
            self._switch_to_shared()

    def _learn(self, rows: Sequence[ExecutorRecord], now: float) -> None:
        self.executors = {r.id: r for r in rows}
        alive = [r for r in rows if r.id != self.me and self.alive(r, now)]
        self.peers_alive = bool(alive)
        if not self.exclusive:
            return
        mine = self.executors.get(self.me)
        started = mine.started_at if mine is not None else _at(self.started_at)
        first = min([(r.started_at, r.id) for r in alive] + [(started, self.me)])
        refusal = None if first[1] == self.me else self._refusal_text(self.executors[first[1]])
        if refusal != self.refusal:
            if refusal is not None:
                log.error("%s", refusal)
            else:
                log.info("CarmaExecutor %s places GPU tries: no other CarmaExecutor is alive on this store", self.me)
                self._takeover = self.refusal is not None
        self.refusal = refusal

    def _refusal_text(self, other: ExecutorRecord) -> str:
        why = (
            "SQLite serves one scheduler only; use PostgreSQL ([carma] store_url) for several"
            if self.sqlite
            else "[carma] schedulers = one; set it to auto or several to share the GPUs"
        )
        return (
            f"waiting: another CarmaExecutor ({other.id}, pid {other.pid}, started {other.started_at:%H:%M:%S}) "
            f"places GPU tries on this store and this one does not ({why}); it places when that one stops"
        )

    def _forget(self, ids: list[str]) -> None:
        try:
            self.store.forget_executors(ids)
        except CarmaError:
            return
        log.info("Forgot CarmaExecutors gone for over %.0f s: %s", FORGET_AFTER_S, ", ".join(ids))

    def _count_gone_placements(self, now: float) -> None:
        """Exclusive mode, after the executor that placed is gone: its tries that still run (it
        published nothing) count as tenants until they are adopted or end; read while any does."""
        try:
            rows = self.store.running()
        except CarmaError as exc:
            log.warning("carma store unreachable: the gone executor's tries are not counted (%s)", exc)
            return
        self._takeover = False
        held = [
            ReservationRecord(r.key, r.owner or "", r.label, r.gpu_uuids, r.estimate_mib or 0, r.decided_at.timestamp())
            for r in rows
            if r.outcome is TryOutcome.RUNNING
            and r.owner not in (None, self.me)
            and r.gpu_uuids
            and self.owner_gone(r.owner, now)
            and (r.host not in (self.host, None) or r.pid is None or _pid_exists(r.pid))
        ]
        self.ledger.lay_over([r for r in held if r.key not in self.ledger or r.key in self.ledger.foreign])

    def _reap(self, now: float) -> None:
        """Reservations of gone executors whose try is over (its process on this host has ended,
        it never started, or its end is recorded) stop counting: the peers' passes drop them."""
        try:
            others = [r for r in self.store.shared_reservations() if r.owner != self.me]
            over = []
            for res in others:
                if not self.owner_gone(res.owner, now):
                    continue
                rec = self.store.placement(res.key)
                if rec is None or rec.outcome.finished:
                    over.append(res.key)
                elif rec.pid is None:
                    if now - res.since > 4 * self.timeout_s:  # placed, never launched: its owner died between
                        over.append(res.key)
                elif rec.host in (self.host, None) and not _pid_exists(rec.pid):
                    over.append(res.key)
                    self._conclude(rec, now)
            if over:
                self.store.drop_reservations(over)
                log.info("Reservations of gone CarmaExecutors released (their tries ended): %s", ", ".join(over))
        except CarmaError as exc:
            log.debug("carma store unreachable while reaping gone executors' reservations: %s", exc)

    def _conclude(self, rec: PlacementRecord, now: float) -> None:
        """A gone executor's try whose process ended before any executor adopted it: its end,
        from its result file, in the store (Airflow has the try's outcome from the task itself)."""
        result = read_result(Path(self.state_dir) / "results" / f"{rec.ti_id}.json") if rec.ti_id else None
        if result is None:
            outcome, summary = TryOutcome.FAILED, "ended while its executor was gone; no result file"
        elif result.is_oom:
            outcome, summary = TryOutcome.OOM, "CUDA out of memory (ended while its executor was gone)"
        else:
            outcome = TryOutcome.SUCCESS if result.succeeded else TryOutcome.FAILED
            summary = f"{outcome.value} (ended while its executor was gone)"
        peak = result.peak_mib if result is not None else None
        self.store.mark_ended(rec.key, now, outcome, peak, summary)

    def owner_gone(self, owner: str | None, now: float) -> bool:
        """Whether the executor ``owner`` is gone (None: a try written before owners were kept)."""
        if owner is None or owner == self.me:
            return owner is None
        rec = self.executors.get(owner)
        return rec is None or not self.alive(rec, now)

    def alive(self, rec: ExecutorRecord, now: float) -> bool:
        """Beat within the timeout, not stopped, and (on this host) its process still exists:
        a scheduler killed and started again at once does not wait out its predecessor's beat."""
        if not rec.alive(now, self.timeout_s):
            return False
        return rec.host != self.host or rec.pid == os.getpid() or _pid_exists(rec.pid)

    # -- the placement pass -----------------------------------------------------------------
    def run_pass(self, cycle: SchedulingCycle, now: float, gpus: Sequence[GpuState], why: bool) -> CycleResult:
        """One scheduling pass over ``gpus``, as the mode says (see the module docstring)."""
        if self.exclusive:
            if self.refusal is not None:
                return _all_wait(cycle, now, gpus, self.refusal)
            if self._takeover or self.ledger.foreign:
                self._count_gone_placements(now)
            return cycle.run(now, gpus, waiting_decisions=why)
        with self._lock:
            if not (self.shared or self.peers_alive or self.ledger.foreign or self.mode == "several"):
                return cycle.run(now, gpus, waiting_decisions=why)  # single: no store I/O
        return self._shared_pass(cycle, now, gpus, why)

    def _shared_pass(self, cycle: SchedulingCycle, now: float, gpus: Sequence[GpuState], why: bool) -> CycleResult:
        hosts = {g.host for g in gpus} | {self.host}
        result: CycleResult | None = None
        try:
            with self._lock, self.store.reservation_pass(self.me, hosts) as txn:
                result = self._decide(txn, cycle, now, gpus, why)
        except CarmaError as exc:
            if result is not None:  # decided, not published: nothing of it may start
                for p in result.placed:
                    cycle.release(p.request.key)
                    cycle.submit(p.request, now, prior_ooms=p.prior_ooms)
            log.warning("carma store unreachable in a shared placement pass: GPU tries wait (%s)", exc)
            reason = f"waiting: the carma store is unreachable, the peers' GPU reservations cannot be counted ({exc})"
            return _all_wait(cycle, now, gpus, reason)
        return result

    def _decide(
        self, txn: ReservationPass, cycle: SchedulingCycle, now: float, gpus: Sequence[GpuState], why: bool
    ) -> CycleResult:
        self._learn(txn.executors, now)
        alive = [e for e in txn.executors if e.id != self.me and self.alive(e, now)]
        self.ledger.lay_over(txn.others)
        if not alive and self.mode != "several":
            if self.shared:
                txn.set_shared(False)  # alone again: a newcomer waits until we publish everything
                self.shared = False
            return cycle.run(now, gpus, waiting_decisions=why)
        if not self.shared:  # first pass next to a peer: everything we hold goes out first
            txn.replace_mine(record_of(r, self.me) for r in self.ledger.mine())
            txn.set_shared(True)
            self.shared = True
        unshared = [e for e in alive if not e.shared]
        if unshared:
            e = unshared[0]
            reason = (
                f"waiting: the CarmaExecutor {e.id} (pid {e.pid}) has not shared its GPU reservations yet "
                "(it does at its next heartbeat)"
            )
            return _all_wait(cycle, now, gpus, reason)
        result = cycle.run(now, gpus, waiting_decisions=why)
        txn.publish(record_of(r, self.me) for p in result.placed if (r := self.ledger.get(p.request.key)) is not None)
        return result

    def _switch_to_shared(self) -> None:
        """A peer is alive: publish all we hold and mark our row shared (the beat thread)."""
        try:
            with self._lock, self.store.reservation_pass(self.me, {self.host}) as txn:
                mine = self.ledger.mine()
                released = set(self.ledger.drain_released())
                txn.replace_mine(record_of(r, self.me) for r in mine if r.key not in released)
                txn.set_shared(True)
                self.shared = True
        except CarmaError as exc:
            self.shared = False
            log.warning("carma store unreachable: cannot share reservations with peers yet (%s)", exc)
            return
        log.info("CarmaExecutor %s shares its GPU reservations with peer schedulers (%d published)", self.me, len(mine))

    def publish_adopted(self, key: str) -> None:
        """A try adopted from a gone peer: its reservation is ours in the store (adopt time: I/O is fine)."""
        res = self.ledger.get(key)
        if res is None or not self.shared:
            return
        try:
            with self._lock, self.store.reservation_pass(self.me, ()) as txn:
                txn.publish([record_of(res, self.me)])
        except CarmaError as exc:
            log.warning("carma store unreachable: adopted try %s not published (%s)", key, exc)


def _all_wait(cycle: SchedulingCycle, now: float, gpus: Sequence[GpuState], reason: str) -> CycleResult:
    """A pass that places nothing: every waiting try waits with ``reason``."""
    view = cycle.view(now, gpus)
    waiting = {r.key: Decision(r.key, Outcome.NOT_NOW, summary=reason) for r in cycle.waiting_requests()}
    return CycleResult(now, view, waiting=waiting)


def _pid_exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _close_at_exit(ref: weakref.ref[Peers]) -> None:
    peers = ref()
    if peers is not None:
        peers.close(quiet=True)


def _at(t: float) -> datetime:
    return datetime.fromtimestamp(t, tz=timezone.utc)


__all__ = ["FORGET_AFTER_S", "Peers", "beat_period"]
