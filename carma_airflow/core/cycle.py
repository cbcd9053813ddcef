"""One scheduling cycle for every driver: plan -> schedule -> reserve, release, recover.

After the Kubernetes scheduler framework, which owns its scheduling cycle and its cache of
"assumed" pods while plugins only filter and score: the cycle owns the waiting set and the
reservation ledger (:mod:`carma_airflow.core.reservations`); the queue discipline orders, the
placer filters and scores.  The executor, the simulator and the GPU kit drive the same cycle, so a
policy and a recovery evaluated in simulation are what run in production.

A driver's part is I/O only: it submits tries, passes the time and the monitor's GPUs to
:meth:`SchedulingCycle.run`, starts the placed tries, refuses the never-fits ones, and reports
how tries end (:meth:`~SchedulingCycle.release`, :meth:`~SchedulingCycle.recover`).
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from carma_airflow.core.activity import ActivityEstimate
from carma_airflow.core.decision import Decision, Outcome
from carma_airflow.core.errors import DuplicateKeyError
from carma_airflow.core.gpu import ClusterView, GpuState
from carma_airflow.core.placer import Placer
from carma_airflow.core.queueing import QueueDiscipline, Rank
from carma_airflow.core.recovery import Failure, GiveUp, RecoverySettings, RetryMode, RetryPlan, plan_retry
from carma_airflow.core.reservations import Reservation, Reservations
from carma_airflow.core.task import TaskRequest
from carma_airflow.core.waitlist import WaitList


@dataclass(frozen=True, slots=True)
class Placed:
    """A try the pass placed; its GPUs are reserved already (``release`` it if it cannot start)."""

    request: TaskRequest
    decision: Decision
    waited_s: float  # since it was submitted to the cycle
    prior_ooms: int  # CUDA OOM tries of the same task run before this one


@dataclass(frozen=True, slots=True)
class Unplaceable:
    """A try no GPU set of this cluster could ever take; it left the waiting set."""

    request: TaskRequest
    decision: Decision
    prior_ooms: int


@dataclass(frozen=True, slots=True)
class CycleResult:
    """What one pass decided.  ``waiting`` maps each try that still waits to its decision (tries
    that wait for the same reason share one Decision; see ``PassResult``); empty after a pass
    run with ``waiting_decisions=False``."""

    now: float
    view: ClusterView  # what the placer saw, before this pass's placements
    placed: tuple[Placed, ...] = ()
    never_fits: tuple[Unplaceable, ...] = ()
    waiting: Mapping[str, Decision] = field(default_factory=dict)
    reserved_for: str | None = None  # a starving try GPUs are held back for


@dataclass(slots=True)
class _Entry:
    request: TaskRequest
    since: float
    prior_ooms: int
    not_before: float | None = None


class SchedulingCycle:
    """The waiting set, the reservation ledger and the pass over them; see the module docstring.

    ``reservations``: the ledger (by default one that counts a tenant as seen by the monitor
    after the placer's lock time, as the executor and the GPU kit assume).  ``retry_mode`` and
    ``recovery``: how :meth:`recover` plans the next try after a CUDA OOM.
    """

    def __init__(
        self,
        placer: Placer,
        queue: QueueDiscipline,
        *,
        reservations: Reservations | None = None,
        recovery: RecoverySettings | None = None,
        retry_mode: RetryMode = RetryMode.PLANNED,
    ) -> None:
        self.placer = placer
        self.queue = queue
        self.reservations = (
            reservations if reservations is not None else Reservations(seen_after_s=placer.settings.lock_s)
        )
        self.recovery = recovery if recovery is not None else RecoverySettings()
        self.retry_mode = retry_mode
        self._waiting: dict[str, TaskRequest] = {}
        # (a pass that plans: no order key or memory check, or a blocking queue's with reasons) the
        # last plan's order, and the tries put in the waiting set since: the next plan gets them
        # in that order, so its sort runs over a nearly sorted list (:meth:`_pending`)
        self._order: tuple[TaskRequest, ...] = ()
        self._fresh: list[TaskRequest] = []
        # the same tries by submission and in groups of one shape and queue class, so a pass decides
        # a few per shape (Placer.place), its waiting decisions shared by shape (but for a blocking
        # queue's pass with waiting decisions, which plans)
        self._index = WaitList(self._group_of)
        self._grouped = placer.policy.checks_memory and queue.order_key(0.0) is not None
        self._entries: dict[str, _Entry] = {}
        # tries that may not be placed before a time (a retry's back-off): kept out of the
        # waiting set, so a pass over thousands of tries does not test each one's time
        self._later: dict[str, _Entry] = {}
        # the tries that hold a reservation, for recovery: their requests and OOM counts
        self._running: dict[str, _Entry] = {}

    # -- the waiting set ---------------------------------------------------------------------
    def submit(self, request: TaskRequest, now: float, *, prior_ooms: int = 0, not_before: float | None = None) -> None:
        """Queue a try.  ``prior_ooms``: CUDA OOM tries of its task run before it (the recovery
        bound counts them); ``not_before``: no pass places it earlier."""
        key = request.key
        if key in self._entries or key in self.reservations:
            raise DuplicateKeyError(f"try {key!r} is already waiting or running; withdraw or release it first")
        entry = _Entry(request, now, prior_ooms, not_before)
        self._entries[key] = entry
        if not_before is not None and not_before > now:
            self._later[key] = entry
        else:
            self._waiting[key] = request
            self._fresh.append(request)
            self._index.add(request)

    def withdraw(self, key: str) -> TaskRequest | None:
        """Take a waiting try out (cancelled, handed elsewhere); None when it does not wait."""
        entry = self._entries.pop(key, None)
        if entry is None:
            return None
        if self._waiting.pop(key, None) is not None:
            self._index.remove(entry.request)
        self._later.pop(key, None)
        return entry.request

    def __contains__(self, key: object) -> bool:
        """Whether try ``key`` waits (a running try is in ``reservations``)."""
        return key in self._entries

    def __len__(self) -> int:
        """How many tries wait, those held back until their ``not_before`` included."""
        return len(self._entries)

    def waiting_requests(self) -> tuple[TaskRequest, ...]:
        return tuple(e.request for e in self._entries.values())

    def next_starvation_at(self, now: float) -> float | None:
        """When the next waiting try passes the queue's starvation bound (after ``now``), if the
        queue has one: a discrete-event driver wakes then, since the next pass decides differently."""
        bound: float | None = getattr(self.queue, "starvation_s", None)
        if bound is None:
            return None
        return self._index.next_bound(bound, now)

    # -- the pass ----------------------------------------------------------------------------
    def view(self, now: float, gpus: Sequence[GpuState]) -> ClusterView:
        """The placer's view of the monitor's ``gpus`` with the reservations laid over them."""
        return self.reservations.view(now, gpus)

    def run(
        self, now: float, gpus: Sequence[GpuState], *, waiting_decisions: bool = True, limit: int | None = None
    ) -> CycleResult:
        """One pass: order the waiting tries, decide them over the GPUs, reserve the placed ones,
        take the never-fits ones out.  ``gpus``: the monitor's states (their tenants are ignored,
        the ledger supplies them).

        ``waiting_decisions``: False for a driver that never shows why a try waits (the
        simulator): the pass places and refuses exactly the same tries, but ``waiting`` stays
        empty.  Where the queue orders by a key and the policy checks memory, either way the
        pass decides only a few tries per shape (:meth:`Placer.place`); a waiting try of a shape
        that waits gets the decision of the first of its shape that waited, as a pass that
        decides every try in the queue's order gives it (its memo).

        ``limit``: the pass ends once it has placed this many (the driver's free slots, Airflow's
        ``[core] parallelism``); the tries after that point in the queue's order are not decided
        (they keep their place and are absent from ``waiting``), so no pass places tries it
        would have to put back.
        """
        if self._later:
            self._admit_due(now)
        view = self.reservations.view(now, gpus)
        if not self._waiting:
            self._fresh = []
            return CycleResult(now, view)
        if self._grouped and not (waiting_decisions and self.queue.blocks):
            self._fresh, self._order = [], ()
            return self._run_placements(now, view, limit, waiting_decisions)
        plan = self.queue.plan(self._pending(), now, self._rank())
        self._order = plan.ordered
        result = self.placer.schedule(plan.ordered, view, blocking=plan.blocking, protected=plan.protected, limit=limit)
        waiting = dict(result.by_key)
        placed = []
        for d in result.placed:
            key = d.request_key
            entry = self._take(key)
            placed.append(Placed(entry.request, d, now - entry.since, entry.prior_ooms))
            self._hold(entry.request, d.gpu_uuids, now, entry.prior_ooms)
            del waiting[key]
        never = []
        for key, d in result.by_key.items():
            if d.outcome is Outcome.NEVER_FITS:
                entry = self._take(key)
                never.append(Unplaceable(entry.request, d, entry.prior_ooms))
                del waiting[key]
        return CycleResult(now, view, tuple(placed), tuple(never), waiting, result.reserved_for)

    def _pending(self) -> list[TaskRequest]:
        """The waiting tries, in the last plan's order and then those put in since.  A queue's
        order does not depend on the order it is handed (its keys end in the try's key), so this
        only spares its sort work: 10,000 waiting sort in 5.0 ms so against 7.5 ms."""
        waiting, fresh = self._waiting, self._fresh
        self._fresh = []
        get = waiting.get
        new = {id(r): r for r in fresh if get(r.key) is r}  # a try put in twice counts once
        out = [r for r in self._order if get(r.key) is r and id(r) not in new]
        out.extend(new.values())
        return out if len(out) == len(waiting) else list(waiting.values())

    def _run_placements(self, now: float, view: ClusterView, limit: int | None, explain: bool) -> CycleResult:
        """The pass over the waiting tries' groups (:meth:`Placer.place`): a few tries decided per
        shape, the rest of a shape that waits given its first waiting try's decision."""
        queue = self.queue
        order_key = queue.order_key(now, self._rank())
        assert order_key is not None
        protected = queue.protect(self._index.oldest(), now)
        result = self.placer.place(
            self._index.groups(),
            view,
            order_key=order_key,
            blocking=queue.blocks,
            protected=protected,
            limit=limit,
            explain=explain,
        )
        taken = self._take_all([d.request_key for d in (*result.placed, *result.never_fits)])
        placed = []
        for d, entry in zip(result.placed, taken[: len(result.placed)], strict=True):
            placed.append(Placed(entry.request, d, now - entry.since, entry.prior_ooms))
            self._hold(entry.request, d.gpu_uuids, now, entry.prior_ooms)
        never = [
            Unplaceable(entry.request, d, entry.prior_ooms)
            for d, entry in zip(result.never_fits, taken[len(result.placed) :], strict=True)
        ]
        return CycleResult(now, view, tuple(placed), tuple(never), result.waiting, result.reserved_for)

    def _rank(self) -> Rank | None:
        """The policy's rank of each priority's waiting tries, where it ranks them (the
        completion-time policy: shortest predicted run first, overdue tries ahead)."""
        return self.placer.policy.ranker()

    def _group_of(self, request: TaskRequest) -> Hashable:
        if not self._grouped:
            return None
        return (self.placer.shape_of(request), self.queue.class_of(request))

    def _admit_due(self, now: float) -> None:
        for key, entry in list(self._later.items()):
            assert entry.not_before is not None
            if entry.not_before <= now:
                del self._later[key]
                self._waiting[key] = entry.request
                self._fresh.append(entry.request)
                self._index.add(entry.request)

    def _take(self, key: str) -> _Entry:
        request = self._waiting.pop(key)
        self._index.remove(request)
        return self._entries.pop(key)

    def _take_all(self, keys: Sequence[str]) -> list[_Entry]:
        """:meth:`_take` of each, the index told once (a pass that places a thousand tries)."""
        requests = [self._waiting.pop(key) for key in keys]
        self._index.remove_all(requests)
        return [self._entries.pop(key) for key in keys]

    def _hold(self, request: TaskRequest, gpu_uuids: Sequence[str], now: float, prior_ooms: int) -> None:
        self.reservations.reserve(
            request.key,
            request.label,
            gpu_uuids,
            request.memory.mib,
            now,
            exclusive=self.placer.needs_idle(request),
            activity=request.activity,
            kept_margin_mib=request.kept_margin_mib,  # its own fence's promise, kept for its life
        )
        self._running[request.key] = _Entry(request, now, prior_ooms)

    # -- tries that run ----------------------------------------------------------------------
    def hold(self, request: TaskRequest, gpu_uuids: Sequence[str], since: float, *, prior_ooms: int = 0) -> None:
        """Reserve GPUs for a try placed elsewhere: one an earlier executor started whose process
        still runs (its GPUs stay reserved until it ends)."""
        if request.key in self._entries:
            raise DuplicateKeyError(f"try {request.key!r} is waiting; withdraw it before holding GPUs for it")
        self._hold(request, gpu_uuids, since, prior_ooms)

    def observe(self, key: str, mib: int) -> bool:
        """What a running try holds per GPU now (for a driver that can tell each process's memory)."""
        return self.reservations.observe(key, mib)

    def learn_activity(self, key: str, activity: ActivityEstimate) -> bool:
        """What is known now of try ``key``'s solo SM activity, waiting or running: a waiting try
        is decided with it from the next pass on, a running one counts with it as a co-tenant.
        False when the cycle has no such try."""
        entry = self._entries.get(key)
        if entry is not None:
            if entry.request.activity == activity:
                return True
            request = replace(entry.request, activity=activity)
            waiting = self._waiting.pop(key, None) is not None
            if waiting:
                self._index.remove(entry.request)
            entry.request = request
            if waiting:
                self._waiting[key] = request
                self._fresh.append(request)
                self._index.add(request)
            return True
        running = self._running.get(key)
        if running is not None:
            running.request = replace(running.request, activity=activity)
        return self.reservations.learn_activity(key, activity)

    def release(self, key: str) -> Reservation | None:
        """A try ended (or could not start): its GPUs are free for the next pass.  None when it held
        nothing (released already)."""
        self._running.pop(key, None)
        return self.reservations.release(key)

    def plan_retry(
        self,
        request: TaskRequest,
        failure: Failure,
        *,
        oom_retries_done: int,
        peak_mib: int | None,
        crashed_gpus: tuple[str, ...],
        now: float,
    ) -> RetryPlan | GiveUp:
        """The next try after a failure under this cycle's retry mode and settings, planned from a
        record (the executor plans a try Airflow hands over from the earlier tries' records)."""
        return plan_retry(
            self.retry_mode,
            request,
            failure,
            oom_retries_done=oom_retries_done,
            peak_mib=peak_mib,
            crashed_gpus=crashed_gpus,
            now=now,
            settings=self.recovery,
        )

    def recover(
        self,
        key: str,
        failure: Failure,
        *,
        now: float,
        peak_mib: int | None,
        resubmit: bool = True,
        not_before: float | None = None,
    ) -> RetryPlan | GiveUp:
        """Try ``key`` failed: release its GPUs and plan the next try (after a CUDA OOM: more memory,
        away from the GPUs it crashed on), which is submitted unless ``resubmit`` is False.

        ``peak_mib``: what the try reached before it failed, if known.  The OOM bound counts the
        try's own ``prior_ooms`` plus this one.
        """
        running = self._running.get(key)
        held = self.release(key)
        if running is None or held is None:
            return GiveUp(f"try {key!r} holds no GPUs: it was never placed by this cycle, or it ended already")
        prior = running.prior_ooms
        plan = self.plan_retry(
            running.request,
            failure,
            oom_retries_done=prior,
            peak_mib=peak_mib,
            crashed_gpus=held.gpu_uuids,
            now=now,
        )
        if resubmit and isinstance(plan, RetryPlan):
            self.submit(plan.request, now, prior_ooms=prior + (1 if failure.is_oom else 0), not_before=not_before)
        return plan


__all__ = ["CycleResult", "Placed", "SchedulingCycle", "Unplaceable"]
