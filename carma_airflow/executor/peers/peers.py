"""Several Airflow schedulers, each with a CarmaExecutor, on one store (Airflow's high availability).

Every executor registers in the store (``carma_executor``) and beats there from a thread of its
own (one short transaction every few seconds, never in the scheduler's loop); one whose beat is
older than ``[carma] peer_timeout_seconds`` is gone.  What a placement pass does depends on the
mode (``[carma] schedulers``):

* **single** (auto, no live peer): today's pass, no store I/O in the scheduler's heartbeat.
* **shared** (PostgreSQL; auto with a live peer, or several): each pass that has tries to place
  runs in one transaction holding ``pg_advisory_xact_lock`` per GPU host.  In it the other
  executors' published reservations (try, GPUs, MiB, since, activity) are laid over the GPU view
  as tenants (:class:`~carma_airflow.executor.peers.shared_ledger.SharedLedger`), the cycle decides,
  and this pass's placements are published before the lock ends.  An executor switches to shared
  mode by publishing all it holds and marking its row ``shared``, under the same lock; a peer
  places only once every live executor is shared, so no placement escapes the other's count.
* **exclusive** (SQLite, or ``schedulers = one``): only the oldest live executor places; any
  other one keeps its GPU tries waiting with the reason, in its log and in ``carma why``.

A gone executor's published reservations keep counting until its tries are adopted or reset
(:mod:`carma_airflow.executor.flow.restart`); its row is forgotten an hour after its last beat.

**The view cannot lie.** What this executor knows of the others is one immutable :class:`PeerView` (the
executors' rows, which of them are alive, the exclusive mode's refusal), read in one transaction and
published whole under the lock, by the heartbeat thread or a shared pass; a pass reads it once. Until the
first read succeeds (registration failed: the store was unreachable at start) the view is *unknown*:
registration is retried at every beat, nothing is placed (the tries wait with the reason), and every owner
is *unknown*, never gone, so no try of a live peer is reconciled, adopted, closed or unreserved on a
guess. An owner is gone only when the view says so: it stopped, its heartbeat was older than the timeout
when the view was read, or (same host) its process is gone; an owner with no row is gone only when its try
is older than the hour after which rows are forgotten (else it may not have registered yet).
"""

from __future__ import annotations

import atexit
import functools
import logging
import os
import secrets
import threading
import time
import weakref
from collections.abc import Callable, Sequence
from datetime import datetime, timezone
from types import MappingProxyType
from typing import TYPE_CHECKING

from carma_airflow.config.settings import CarmaSettings
from carma_airflow.core.cycle import CycleResult, SchedulingCycle
from carma_airflow.core.decision import Decision, Outcome
from carma_airflow.core.errors import CarmaError
from carma_airflow.core.gpu import GpuState
from carma_airflow.executor.bookkeeping import metrics
from carma_airflow.executor.peers.peer_leftovers import count_gone_placements, reap
from carma_airflow.executor.peers.peer_view import (
    FORGET_AFTER_S,
    OwnerState,
    PeerView,
    beat_period,
    lapse_text,
    pid_exists,
    refusal_text,
)
from carma_airflow.executor.peers.shared_ledger import SharedLedger, record_of
from carma_airflow.store.peers import ExecutorRecord, ReservationPass

if TYPE_CHECKING:
    from carma_airflow.store.store import Store

log = logging.getLogger("carma_airflow.executor")
Run = Callable[[], CycleResult]  # the pass itself, once the mode allows it


def peer_id(host: str) -> str:
    """An executor's id among its peers: its host, its process, a token of its own (``<host>:<pid>:<token>``)."""
    return f"{host}:{os.getpid()}:{secrets.token_hex(4)}"


class Peers:
    """This executor's place among the CarmaExecutors of one store; see the module docstring."""

    def __init__(
        self,
        settings: CarmaSettings,
        store: Store,
        *,
        me: str | None = None,
        foreign_kept_margin_mib: int | None = None,
    ) -> None:
        """``me``: this executor's id (:func:`peer_id`; a new one if None).  ``foreign_kept_margin_mib``:
        what a peer's tenant is kept above its reservation (a peer does not publish its try's fence:
        this host's configured one's, :class:`SharedLedger`)."""
        self.store = store
        self.host = settings.host
        self.state_dir = settings.state_dir
        self.mode = settings.schedulers
        self.timeout_s = settings.peer_timeout_seconds
        self.me = me or peer_id(settings.host)
        self.sqlite = store.masked_url.startswith("sqlite")
        self.exclusive = self.sqlite or self.mode == "one"
        self.ledger = SharedLedger(seen_after_s=settings.lock_seconds, foreign_kept_margin_mib=foreign_kept_margin_mib)
        self.started_at = time.time()
        # Everything below is written under this lock only: the heartbeat thread and the
        # placement pass both publish views and switch the shared flag (an RLock: a shared pass
        # holds it while it learns the executors its transaction read).
        self._lock = threading.RLock()
        self._view = PeerView(known=False, error="not registered yet")
        self._shared = False  # all our reservations are published and our row says so
        self._takeover = False  # exclusive mode: the one that placed is gone, its running tries count
        self._registered = False
        self._reconcile_due = False  # restart.reconcile waited for a known view
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._beat_failed = False
        self._last_beat_at: float | None = None  # the last heartbeat that reached the store

    # -- what the placement pass and restart read ---------------------------------------------
    @property
    def view(self) -> PeerView:
        """The latest view (one immutable object: read it once per decision)."""
        return self._view

    @property
    def shared(self) -> bool:
        return self._shared

    @property
    def refusal(self) -> str | None:
        return self._view.refusal

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

    def defer_reconcile(self) -> None:
        """restart.reconcile found the view unknown: it runs again once the view is known."""
        with self._lock:
            self._reconcile_due = True

    def reconcile_due(self) -> bool:
        """True once, when a deferred reconciliation may run now (the view is known)."""
        with self._lock:
            due = self._reconcile_due and self._view.known
            if due:
                self._reconcile_due = False
            return due

    def refresh(self) -> PeerView:
        """The view read again from the store now (for a decision that may do I/O, such as adopting
        the tries Airflow hands over); the last view if the store is unreachable (or this executor is
        not registered yet)."""
        view = self._view
        now = time.time()
        if not self._registered:
            return view
        try:
            rows = self.store.executors()
        except CarmaError as exc:
            log.warning("carma store unreachable: the other executors are judged from the last beat (%s)", exc)
            return view
        return self._learn(rows, now)

    def _register(self) -> None:
        now = time.time()
        rec = ExecutorRecord(self.me, self.host, os.getpid(), _at(self.started_at), _at(now))
        try:
            rows = self.store.register_executor(rec)
        except CarmaError as exc:
            error = " ".join(str(exc).split())
            log.warning(
                "carma store unreachable: this executor is not registered yet, registration is retried "
                "every %.1f s and GPU tries wait until it succeeds (%s)",
                beat_period(self.timeout_s),
                error,
            )
            with self._lock:
                if not self._view.known:
                    self._view = PeerView(known=False, error=error)
            return
        self._registered, self._last_beat_at = True, now
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
        last, self._last_beat_at = self._last_beat_at, now  # stalled past the timeout: peers may have
        if (text := lapse_text(self.me, last, now, self.timeout_s)) is not None:  # taken us for gone
            log.warning("%s", text)
            metrics.peer_lapse()
        if self.me not in {r.id for r in rows}:
            self._registered = False  # forgotten by a peer (we were gone an hour): register again
        view = self._learn(rows, now)
        gone = [r.id for r in rows if r.id != self.me and now - r.heartbeat_at.timestamp() > FORGET_AFTER_S]
        if gone:
            self._forget(gone)
        if any(r.id != self.me and r.id not in view.peers for r in rows):
            reap(self, now)
        if not self.exclusive and not self._shared and (view.peers_alive or self.mode == "several"):
            self._switch_to_shared()

    def _learn(self, rows: Sequence[ExecutorRecord], now: float) -> PeerView:
        """Publish the view these rows (read at ``now``) make; returns it."""
        executors = {r.id: r for r in rows}
        alive = [r for r in rows if r.id != self.me and self.alive(r, now)]
        refusal: str | None = None
        if self.exclusive:
            mine = executors.get(self.me)
            started = mine.started_at if mine is not None else _at(self.started_at)
            first = min([(r.started_at, r.id) for r in alive] + [(started, self.me)])
            refusal = None if first[1] == self.me else refusal_text(executors[first[1]], self.sqlite)
        view = PeerView(True, now, MappingProxyType(executors), frozenset(r.id for r in alive), refusal)
        with self._lock:
            before = self._view
            if before.known and before.at > now:
                return before  # a newer read was published meanwhile (a pass beside the beat)
            self._view = view
            if self.exclusive and refusal != before.refusal:
                if refusal is not None:
                    log.error("%s", refusal)
                else:
                    log.info("CarmaExecutor %s places GPU tries: no other CarmaExecutor is alive here", self.me)
                    self._takeover = self._takeover or before.refusal is not None
        return view

    def _forget(self, ids: list[str]) -> None:
        try:
            self.store.forget_executors(ids)
        except CarmaError:
            return
        log.info("Forgot CarmaExecutors gone for over %.0f s: %s", FORGET_AFTER_S, ", ".join(ids))

    def owner_state(self, owner: str | None, written_at: float | None = None) -> OwnerState:
        """What the view says of ``owner`` (see :meth:`PeerView.owner_state`)."""
        return self._view.owner_state(owner, self.me, written_at)

    def owner_gone(self, owner: str | None, written_at: float | None = None) -> bool:
        """Whether the view says executor ``owner`` is gone; unknown is not gone (see :meth:`owner_state`)."""
        return self.owner_state(owner, written_at) is OwnerState.GONE

    def alive(self, rec: ExecutorRecord, now: float) -> bool:
        """Beat within the timeout, not stopped, and (on this host) its process still exists:
        a scheduler killed and started again at once does not wait out its predecessor's beat."""
        if not rec.alive(now, self.timeout_s):
            return False
        return rec.host != self.host or rec.pid == os.getpid() or pid_exists(rec.pid)

    # -- the placement pass -----------------------------------------------------------------
    def run_pass(
        self, cycle: SchedulingCycle, now: float, gpus: Sequence[GpuState], why: bool, limit: int | None = None
    ) -> CycleResult:
        """One scheduling pass over ``gpus`` (placing ``limit`` at most), as the mode says (module doc)."""
        run = functools.partial(cycle.run, now, gpus, waiting_decisions=why, limit=limit)
        view = self._view
        if not view.known:
            reason = (
                "waiting: this CarmaExecutor has not read the other schedulers' state from the carma store yet "
                f"(registration failed: {view.error}); it places once its registration, retried every "
                f"{beat_period(self.timeout_s):.0f} s, succeeds"
            )
            return _all_wait(cycle, now, gpus, reason)
        if self.exclusive:
            if view.refusal is not None:
                return _all_wait(cycle, now, gpus, view.refusal)
            if (self._takeover or self.ledger.foreign) and count_gone_placements(self):
                with self._lock:
                    self._takeover = False
            return run()
        with self._lock:
            if not (self._shared or view.peers_alive or self.ledger.foreign or self.mode == "several"):
                return run()  # single: no store I/O
        return self._shared_pass(cycle, now, gpus, run)

    def _shared_pass(self, cycle: SchedulingCycle, now: float, gpus: Sequence[GpuState], run: Run) -> CycleResult:
        hosts = {g.host for g in gpus} | {self.host}
        result: CycleResult | None = None
        with self._lock:
            shared_before = self._shared
            try:
                with self.store.reservation_pass(self.me, hosts) as txn:
                    result = self._decide(txn, cycle, now, gpus, run)
            except CarmaError as exc:
                self._shared = shared_before  # the row's flag did not commit either
                if result is not None:  # decided, not published: nothing of it may start
                    for p in result.placed:
                        cycle.release(p.request.key)
                        cycle.submit(p.request, now, prior_ooms=p.prior_ooms)
                log.warning("carma store unreachable in a shared placement pass: GPU tries wait (%s)", exc)
                reason = (
                    f"waiting: the carma store is unreachable, the peers' GPU reservations cannot be counted ({exc})"
                )
                return _all_wait(cycle, now, gpus, reason)
        return result

    def _decide(
        self, txn: ReservationPass, cycle: SchedulingCycle, now: float, gpus: Sequence[GpuState], run: Run
    ) -> CycleResult:
        """Under the lock and the store's transaction: the mode switches and the pass itself
        (if the transaction then fails to commit, the caller puts the shared flag back)."""
        view = self._learn(txn.executors, now)
        alive = [e for e in txn.executors if e.id in view.peers]
        self.ledger.lay_over(txn.others)
        if not alive and self.mode != "several":
            if self._shared:
                txn.set_shared(False)  # alone again: a newcomer waits until we publish everything
                self._shared = False
            return run()
        if not self._shared:  # first pass next to a peer: everything we hold goes out first
            txn.replace_mine(record_of(r, self.me) for r in self.ledger.mine())
            txn.set_shared(True)
            self._shared = True
        unshared = [e for e in alive if not e.shared]
        if unshared:
            e = unshared[0]
            reason = (
                f"waiting: the CarmaExecutor {e.id} (pid {e.pid}) has not shared its GPU reservations yet "
                "(it does at its next heartbeat)"
            )
            return _all_wait(cycle, now, gpus, reason)
        result = run()
        txn.publish(record_of(r, self.me) for p in result.placed if (r := self.ledger.get(p.request.key)) is not None)
        return result

    def _switch_to_shared(self) -> None:
        """A peer is alive: publish all we hold and mark our row shared (the beat thread); the
        flag is set only once the transaction has committed, under the lock throughout."""
        with self._lock:
            try:
                with self.store.reservation_pass(self.me, {self.host}) as txn:
                    mine = self.ledger.mine()
                    released = set(self.ledger.drain_released())
                    txn.replace_mine(record_of(r, self.me) for r in mine if r.key not in released)
                    txn.set_shared(True)
            except CarmaError as exc:
                log.warning("carma store unreachable: cannot share reservations with peers yet (%s)", exc)
                return
            self._shared = True
        log.info("CarmaExecutor %s shares its GPU reservations with peer schedulers (%d published)", self.me, len(mine))

    def publish_adopted(self, key: str) -> None:
        """A try adopted from a gone peer: its reservation is ours in the store (adopt time: I/O is fine)."""
        res = self.ledger.get(key)
        if res is None or not self._shared:
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


def _close_at_exit(ref: weakref.ref[Peers]) -> None:
    peers = ref()
    if peers is not None:
        peers.close(quiet=True)


def _at(t: float) -> datetime:
    return datetime.fromtimestamp(t, tz=timezone.utc)


__all__ = ["FORGET_AFTER_S", "OwnerState", "PeerView", "Peers", "beat_period", "peer_id"]
