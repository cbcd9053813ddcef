"""The placer: filter GPUs, order the survivors with a policy, pick N on one host.

Shape of a decision (after the Kubernetes scheduler framework): per GPU a filter verdict,
then an ordering, then a choice; the outcome separates "not now" (may fit when tenants
leave), "never fits" (no GPU set could ever take it) and errors.  A pass over a queue
updates its per-GPU facts as it places, so one pass can place many tasks consistently.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from operator import itemgetter
from typing import TYPE_CHECKING

from carma_airflow.core.decision import Decision, Outcome
from carma_airflow.core.engine_filters import MemoryFit
from carma_airflow.core.facts import GpuFacts, gpu_facts, needs_idle
from carma_airflow.core.filtering import Filter, try_stage
from carma_airflow.core.gpu import ClusterView, GpuState
from carma_airflow.core.hold_order import Holds
from carma_airflow.core.placement_drains import KeptWaits
from carma_airflow.core.placement_pass import WAITS_BY_CHOICE, PlacementPass
from carma_airflow.core.pools import PoolCache, Pools
from carma_airflow.core.reasons import waiting_summary
from carma_airflow.core.scarce import Req, ScarceKeeper, Waiting
from carma_airflow.core.settings import DEFAULT_SETTINGS, PlacementSettings
from carma_airflow.core.task import TaskRequest, task_type
from carma_airflow.core.waitlist import spread

if TYPE_CHECKING:
    from carma_airflow.core.policies.base import Policy


@dataclass(frozen=True, slots=True)
class PassResult:
    """Decisions of one scheduling pass.

    ``order`` lists the request keys in the order they were considered; ``by_key`` maps each to
    its decision.  Requests of the same shape that wait for the same reason share one Decision
    object (its ``request_key`` names the first of them): a pass over 10,000 waiting requests
    builds a few hundred decisions, not 10,000.  ``decisions`` gives one per request, in order.
    """

    order: tuple[str, ...]
    by_key: dict[str, Decision]
    placed: tuple[Decision, ...] = ()
    reserved_for: str | None = None  # key of a starving request GPUs were held back for

    @property
    def decisions(self) -> tuple[Decision, ...]:
        out = []
        for key in self.order:
            d = self.by_key[key]
            if d.request_key != key:
                d = Decision(key, d.outcome, d.gpu_uuids, d.chosen, d.rejected, d.summary, d.collocated, d.policy)
            out.append(d)
        return tuple(out)


@dataclass(frozen=True, slots=True)
class Placements:
    """What :meth:`Placer.place` decided: the placed and the never-fits, in decision order."""

    placed: tuple[Decision, ...] = ()
    never_fits: tuple[Decision, ...] = ()
    reserved_for: str | None = None  # key of a starving request GPUs were held back for
    # with ``explain``: each waiting request's decision, as :meth:`Placer.schedule` gives it
    waiting: dict[str, Decision] = field(default_factory=dict)


class Placer:
    """Decides where requests go.  Holds a policy (which may carry a cursor) and settings."""

    def __init__(self, policy: Policy, settings: PlacementSettings = DEFAULT_SETTINGS) -> None:
        self.policy = policy
        self.settings = settings
        self._cache: PoolCache | None = None
        self.holds = Holds()  # the GPUs held back for a starving request, kept from pass to pass
        # per request (by id, the request kept alive) its shape and the shape less the task type and
        # activity, as numbers, and the shape itself (:meth:`_sigs`): a pass over 10,000 waiting
        # looks each up once, and a waiting request is looked up once, not once per pass
        self._sig_of: dict[int, tuple[TaskRequest, int, int, tuple[object, ...]]] = {}
        self._sig_ids: dict[tuple[object, ...], int] = {}
        self._next_sig = itertools.count()
        self._sig_flags: tuple[bool, bool] | None = None  # the policy's flags the shapes were made with
        self._per_try: tuple[Filter, ...] | None = None  # the policy's per-try filters (:meth:`_asks`)
        self.kept = KeptWaits()  # a pricing policy's waits by choice, kept from pass to pass
        self.scarce = ScarceKeeper()  # on GPUs of several sizes: the larger kept for the tries that need them

    # -- facts -------------------------------------------------------------------------
    def facts(self, view: ClusterView, until: list[float] | None = None) -> list[GpuFacts]:
        """Per GPU the numbers the filters and orderings use.  ``until``: if given, gets per GPU
        a time before which its facts stay the same however the clock moves (a tenant's or the
        GPU's lock window ending changes them), less a margin for rounding."""
        return self._facts_of(view.gpus, view.now, until)

    def _facts_of(self, gpus: Sequence[GpuState], now: float, until: list[float] | None) -> list[GpuFacts]:
        return gpu_facts(self.policy, self.settings, gpus, now, until)

    def _pools(self, view: ClusterView) -> Pools:
        """The view's pools: the last pass's, brought up to date, while the policy's pool token
        and the settings stay the same (see :class:`~carma_airflow.core.pools.PoolCache`)."""
        token = self.policy.pool_token()
        if token is None:
            self._cache = None
            return Pools(self.policy, self.settings, self.facts(view))
        key = (token, self.settings)
        cache = self._cache
        if cache is None or cache.token != key or not cache.update(view):
            until: list[float] = []
            cache = PoolCache(key, view, Pools(self.policy, self.settings, self.facts(view, until)), until)
            self._cache = cache
        return cache.pools

    def needs_idle(self, request: TaskRequest) -> bool:
        """Whether the request must have GPUs to itself: asked exclusive, or its estimator gave
        up (a memory-aware policy then gives it a whole GPU; static sharing ignores memory)."""
        return needs_idle(self.policy, request)

    def _pass(self, view: ClusterView, waiting: int = 0, queue: Waiting = (), protected: Req = None) -> PlacementPass:
        self.policy.begin_pass(view.now, waiting, len(view.gpus))  # a pricer's tenants' work left moves with the clock
        return self.scarce.keep(PlacementPass(self._pools(view), self.kept), self.policy, queue, protected)

    # -- one request -------------------------------------------------------------------
    def _hold(self, request: TaskRequest, state: PlacementPass) -> frozenset[str]:
        """The GPUs held for ``request``, past its starvation bound and waiting: of those that could
        ever take it (the policy's per-try filters, and where the policy checks memory, a GPU
        whose memory holds its estimate and the reserve)."""
        keep = state.keep
        awaited = None if keep is None or keep.speed is None else keep.speed.awaited(request.key)
        if awaited is not None and request.gpus == 1:
            # kept from a slower idle GPU to wait for this faster one (core/speed_keep.py): held, so
            # nothing new lands on it and it drains as predicted
            return frozenset((awaited,))
        least = 0
        if self.policy.checks_memory and not request.memory.whole_gpu:
            least = request.memory.mib + self.settings.reserve_mib
        elif self.policy.checks_memory and len(state.facts) >= request.gpus > 0:
            # its memory unknown (a whole GPU): the largest GPUs, the likeliest to hold it
            least = sorted((f.state.spec.memory_mib for f in state.facts), reverse=True)[request.gpus - 1]
        return self.holds.choose(request, state.facts, state.asked(request), least)

    def decide(self, request: TaskRequest, view: ClusterView) -> Decision:
        """Decide one request against a view (no queue)."""
        return self._pass(view).decide(request, frozenset())

    # -- a pass over a queue -------------------------------------------------------------
    def schedule(
        self,
        requests: Sequence[TaskRequest],
        view: ClusterView,
        *,
        blocking: bool = False,
        protected: TaskRequest | None = None,
        limit: int | None = None,
    ) -> PassResult:
        """Decide requests in the given order, placing as it goes.

        ``blocking``: strict FIFO, nothing after the first request that must wait is placed.
        ``protected``: a request past its starvation bound; it is decided first and, if it
        must wait, the GPUs closest to fitting it are held back from everyone else.
        ``limit``: the pass ends once it has placed this many (the driver's free slots); the
        requests after that point are not decided (absent from ``order`` and ``by_key``).
        """
        _check_limit(limit)
        self._forget_sigs()
        state = self._pass(view, len(requests), ((r, 1) for r in requests), protected)
        order: list[str] = []
        by_key: dict[str, Decision] = {}
        placed: list[Decision] = []
        reserved: frozenset[str] = frozenset()
        reserved_for: str | None = None
        skip = None
        if protected is not None:
            skip = protected.key
            d = state.decide(protected, frozenset())
            order.append(protected.key)
            by_key[protected.key] = d
            if d.placed:
                state.apply(protected, d)
                placed.append(d)
            elif d.outcome is Outcome.NOT_NOW:
                reserved = self._hold(protected, state)
                reserved_for = protected.key
        # memo: a request of the same shape and memory that had to wait keeps waiting, for the
        # same reason, in this pass (placements only make GPUs fuller).  Exact memory: the
        # reason text names the memory it lacks, so a larger request gets its own decision.
        # A policy that refuses GPUs per request decides by the request's activity too.
        # A pricing policy's shapes carry the task type and activity: a try that waits though no
        # GPU set could take it (not by choice) makes every try of its shape less those two wait.
        memo: dict[int, Decision] = {}
        monotone = self.policy.checks_memory
        prices = self.policy.prices_options
        known, sigs = self._sig_of, self._sigs
        blocked: Decision | None = None
        sig = base = -1
        for req in requests:
            if limit is not None and len(placed) >= limit:
                break  # the slots are taken (the protected request's included)
            key = req.key
            if key == skip:
                continue
            order.append(key)
            if blocked is not None:
                by_key[key] = blocked
                continue
            if monotone:
                got = known.get(id(req))
                _, sig, base, _ = got if got is not None and got[0] is req else sigs(req)
                hit = memo.get(sig)
                if hit is None and prices:
                    hit = memo.get(base)
                if hit is not None:
                    by_key[key] = hit
                    continue
            d = state.decide(req, reserved)
            by_key[key] = d
            if d.placed:
                state.apply(req, d)
                placed.append(d)
                continue
            if d.outcome is Outcome.NOT_NOW:
                if monotone and not _awaits(state, key):
                    memo[sig] = d
                    if prices and d is not state.by_choice:
                        memo[base] = d
                if blocking:
                    blocked = Decision(
                        key,
                        Outcome.NOT_NOW,
                        summary=f"waiting: queued behind {req.label} (strict FIFO)",
                        policy=self.policy.name,
                    )
        return PassResult(tuple(order), by_key, tuple(placed), reserved_for)

    def _sigs(self, request: TaskRequest) -> tuple[TaskRequest, int, int, tuple[object, ...]]:
        """The request's :meth:`shape` and that shape less its last two fields (task type and
        activity), each as a number unique to its value, and the shape (kept per request object,
        ``_sig_of``; forgotten only between passes, :meth:`_forget_sigs`)."""
        got = self._sig_of.get(id(request))
        if got is not None and got[0] is request:
            return got
        shape = self.shape(request)
        ids = self._sig_ids
        sig = ids.get(shape)
        if sig is None:
            sig = ids[shape] = next(self._next_sig)
        base = ids.get(shape[:-2])
        if base is None:
            base = ids[shape[:-2]] = next(self._next_sig)
        got = self._sig_of[id(request)] = (request, sig, base, shape)
        return got

    def _forget_sigs(self) -> None:
        """Before a pass: forget the kept shapes once there are many (ids are never reused, so
        forgetting is safe; between passes, so one shape has one number through a pass), or
        when the policy's flags a shape depends on are others."""
        pol = self.policy
        flags = (pol.prices_options, pol.refuses_gpus)
        if len(self._sig_of) > 100_000 or flags != self._sig_flags:
            self._sig_of, self._sig_ids, self._sig_flags = {}, {}, flags
        self._per_try = None  # the policy's per-try filters: made again for the pass (:meth:`_asks`)

    def _asks(self, request: TaskRequest) -> tuple[Hashable, ...]:
        """What the policy's per-try filters (the memory fit aside: the shape has the memory) that
        ``request`` needs read of it."""
        per_try = self._per_try
        if per_try is None:
            per_try = self._per_try = tuple(
                f for f in try_stage(self.policy.placement_filters(self.settings)) if not isinstance(f, MemoryFit)
            )
        return tuple(flt.request_key(request) for flt in per_try if flt.applies(request))

    def shape_of(self, request: TaskRequest) -> tuple[object, ...]:
        """:meth:`shape`, kept for the passes (by request object, as a pass keeps it): a driver that
        groups its waiting tries by shape asks once, as it submits them, and the pass does not
        make the shape again."""
        if self._sig_flags is None:  # the flags the kept shapes are made with (:meth:`_forget_sigs`)
            self._sig_flags = (self.policy.prices_options, self.policy.refuses_gpus)
        return self._sigs(request)[3]

    def shape(self, request: TaskRequest) -> tuple[object, ...]:
        """What a decision of a memory-checking policy depends on besides the GPUs: in one pass,
        a request of the same shape as one that had to wait waits too, for the same reason."""
        mem = request.memory
        prices = self.policy.prices_options  # decides by each try's predicted work
        return (
            request.gpus,
            request.exclusive or mem.whole_gpu,
            self._asks(request),  # what the policy's per-try filters read of it (its GPU model)
            request.avoid_gpus,
            mem.add_headroom,
            mem.mib,
            request.activity if self.policy.refuses_gpus or prices else None,
            task_type(request.label) if prices else None,  # its task type: its work
        )

    def place(
        self,
        groups: Sequence[Sequence[TaskRequest]],
        view: ClusterView,
        *,
        order_key: Callable[[TaskRequest], tuple[object, ...]],
        blocking: bool = False,
        protected: TaskRequest | None = None,
        limit: int | None = None,
        explain: bool = False,
    ) -> Placements:
        """What :meth:`schedule` places and finds never fits, in the same order, without deciding
        the requests that wait: for a pass over thousands of waiting requests of a few shapes.

        ``groups``: the waiting requests, each group of one :meth:`shape` and sorted by
        ``order_key`` (``schedule``'s order is their merge).  The pass walks the groups' heads in
        that order and drops every group of a shape once one of its requests must wait (the memo
        of ``schedule``: the rest of that shape waits too).  Only for a policy that checks
        memory (the memo's premise).  ``limit``: as for :meth:`schedule`, the pass ends once it
        has placed this many.

        ``explain``: the heads that wait are decided with their reasons, and every waiting
        request gets what :meth:`schedule` would give it (``waiting``): the decision of the first
        request of its shape that waited, shared (schedule's memo), for the requests ``schedule``
        would have reached before its limit.  Not with ``blocking`` (schedule's own text then).
        """
        if explain and blocking:
            raise ValueError("Placer.place explains no blocking pass; use schedule")
        if not self.policy.checks_memory:
            raise ValueError("Placer.place needs a policy that checks memory; use schedule")
        _check_limit(limit)
        self._forget_sigs()
        state = self._pass(view, sum(len(g) for g in groups), ((g[0], len(g)) for g in groups if g), protected)
        placed: list[Decision] = []
        never: list[Decision] = []
        reserved: frozenset[str] = frozenset()
        reserved_for: str | None = None
        skip = None
        held: Decision | None = None  # the protected request's decision where it waits
        if protected is not None:
            skip = protected.key
            d = state.decide(protected, frozenset(), explain=explain)
            if d.placed:
                state.apply(protected, d)
                placed.append(d)
            elif d.outcome is Outcome.NOT_NOW:
                reserved = self._hold(protected, state)
                reserved_for, held = protected.key, d
            else:
                never.append(d)
        # a pricing policy's shapes carry the activity and the task type; a try that waits because
        # no GPU set can take it (not by choice: the filters know neither) makes every try of its
        # shape wait, whatever its type and activity: the shape less those two
        prices = self.policy.prices_options
        # per group its shape, and the shape and the shape less those two as numbers (kept per
        # request from pass to pass, :meth:`_sigs`): the numbers are what ``waits`` holds, so a
        # group dropped at its head costs no hash of a shape
        sig_of, sigs = self._sig_of, self._sigs
        heads: list[tuple[tuple[object, ...], int, int]] = []
        infos: list[tuple[TaskRequest, int, int, tuple[object, ...]] | None] = []  # per group its head's _sigs
        for g, group in enumerate(groups):
            if not group:
                infos.append(None)
                continue
            head = group[0]
            got = sig_of.get(id(head))
            infos.append(got if got is not None and got[0] is head else sigs(head))
            heads.append((order_key(head), g, 0))
        # the merge of the groups in ``order_key`` order: the groups' heads sorted once, and a heap
        # of the groups moved past their head (those that placed); most groups are decided, or
        # dropped, at their head, which then costs no heap operation
        heads.sort(key=_HEAD)  # by the order key alone (unique): no comparison of the whole entries
        moved: list[tuple[tuple[object, ...], int, int]] = []
        # the shapes that wait (or shapes less type and activity), with the decision that said so;
        # with ``explain``, per group that stopped: the first member still waiting, its decision
        waits: dict[int, Decision] = {}
        stops: list[tuple[int, int, Decision]] = []
        awaiting: list[tuple[TaskRequest, Decision]] = []  # with ``explain``: tries waiting on a claim (_awaits)
        last: TaskRequest | None = None  # the last request placed in the loop
        at, count = 0, len(heads)
        while (at < count or moved) and (limit is None or len(placed) < limit):
            if moved and (at >= count or moved[0] < heads[at]):
                _, g, i = heapq.heappop(moved)
            else:
                _, g, i = heads[at]
                at += 1
            info = infos[g]
            assert info is not None  # an empty group has no head
            _, sig, base, shape_g = info
            if sig in waits or (prices and base in waits):
                if explain:  # schedule's memo: by shape first
                    stops.append((g, i, waits[sig] if sig in waits else waits[base]))
                continue
            group = groups[g]
            req = group[i]
            if req.key != skip:
                d = state.decide(req, reserved, explain=explain, shape=shape_g)
                if d.outcome is Outcome.PLACED:  # ``d.placed``, without the property's call
                    state.apply(req, d)
                    placed.append(d)
                    last = req
                elif d.outcome is Outcome.NOT_NOW:
                    if blocking:
                        break
                    if _awaits(state, req.key):  # its own claim: the next of its shape is decided
                        if explain:
                            awaiting.append((req, d))
                    else:
                        waits[sig if d is WAITS_BY_CHOICE or d is state.by_choice or not prices else base] = d
                        if explain:
                            stops.append((g, i, d))
                        continue
                else:
                    never.append(d)
            i += 1
            if i < len(group):
                heapq.heappush(moved, (order_key(group[i]), g, i))
        waiting: dict[str, Decision] = {}
        if explain:  # with a limit met, nobody past the last placed (none where the protected met it)
            full = limit is not None and len(placed) >= limit
            if not full or last is not None:
                cut = order_key(last) if full and last is not None else None
                waiting = spread(groups, stops, cut, order_key)
                waiting.update((r.key, d) for r, d in awaiting if cut is None or order_key(r) <= cut)
            if skip is not None:
                waiting.pop(skip, None)
                if held is not None:
                    waiting[skip] = held
        return Placements(tuple(placed), tuple(never), reserved_for, waiting)


def _awaits(state: PlacementPass, key: str) -> bool:
    """Whether try ``key`` waits on a claim of its own in this pass: kept from a slower idle GPU to
    wait for a faster busy one that no earlier try of the pass counts on (core/speed_keep.py), or
    waited by choice where a slower idle GPU was priced for it (its claim queues the next try behind
    it: core/placement_drains.py, ``_drain_paced``).  Its wait says nothing of the next try of its
    shape, which cannot claim that GPU again, or only after it: the memo of waiting shapes must not
    take it.  Decision (issue 44): on 4xA100-80GB + 4xT4 (``table`` speeds,
    day one of s101) the first mobilenet of a deep queue claimed an A100 and every mobilenet after it
    was given its wait, so 2-3 idle T4s stayed idle while 9.8 GiB tries queued for hours (the T4s
    busy 20,000 of 35,000 s, most-free-memory's 29,000)."""
    if key in state.waited_over_idle:
        return True
    keep = state.keep
    return keep is not None and keep.speed is not None and keep.speed.awaited(key) is not None


def _check_limit(limit: int | None) -> None:
    if limit is not None and limit < 1:
        raise ValueError(f"a pass's limit must be None or at least 1 placement, got {limit!r}")


_HEAD = itemgetter(0)
_Entry = tuple[tuple[float, ...], int, GpuFacts]


__all__ = ["PassResult", "Placements", "Placer", "waiting_summary"]
