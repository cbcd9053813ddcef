"""The placer: filter GPUs, order the survivors with a policy, pick N on one host.

Shape of a decision (after the Kubernetes scheduler framework): per GPU a filter verdict,
then an ordering, then a choice; the outcome separates "not now" (may fit when tenants
leave), "never fits" (no GPU set could ever take it) and errors.  A pass over a queue
updates its per-GPU facts as it places, so one pass can place many tasks consistently.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from carma_airflow.core.decision import Decision, Outcome
from carma_airflow.core.facts import gpu_facts, model_matches, needs_idle
from carma_airflow.core.gpu import ClusterView, GpuHealth, GpuState
from carma_airflow.core.placement_drains import KeptWaits
from carma_airflow.core.placement_pass import WAITS_BY_CHOICE, PlacementPass
from carma_airflow.core.policies.base import GpuFacts, Policy
from carma_airflow.core.policies.predictive import task_type
from carma_airflow.core.pools import PoolCache, Pools
from carma_airflow.core.reasons import waiting_summary
from carma_airflow.core.settings import DEFAULT_SETTINGS, PlacementSettings
from carma_airflow.core.task import TaskRequest


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


class Placer:
    """Decides where requests go.  Holds a policy (which may carry a cursor) and settings."""

    def __init__(self, policy: Policy, settings: PlacementSettings = DEFAULT_SETTINGS) -> None:
        self.policy = policy
        self.settings = settings
        self._cache: PoolCache | None = None
        # the last starvation hold: (request shape, the facts it was chosen from, the GPUs)
        self._held: tuple[tuple[object, ...], list[GpuFacts], list[int], frozenset[str]] | None = None
        # per request (by id, the request kept alive) its shape and the shape less the task type and
        # activity, as numbers (:meth:`_sigs`): a pass over 10,000 waiting looks each up once
        self._sig_of: dict[int, tuple[TaskRequest, int, int]] = {}
        self._sig_ids: dict[tuple[object, ...], int] = {}
        self._next_sig = itertools.count()
        self.kept = KeptWaits()  # a pricing policy's waits by choice, kept from pass to pass

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

    def _pass(self, view: ClusterView, waiting: int = 0) -> PlacementPass:
        self.policy.begin_pass(view.now, waiting, len(view.gpus))  # a pricer's tenants' work left moves with the clock
        return PlacementPass(self._pools(view), self.kept)

    # -- one request -------------------------------------------------------------------
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
    ) -> PassResult:
        """Decide requests in the given order, placing as it goes.

        ``blocking``: strict FIFO, nothing after the first request that must wait is placed.
        ``protected``: a request past its starvation bound; it is decided first and, if it
        must wait, the GPUs closest to fitting it are held back from everyone else.
        """
        state = self._pass(view, len(requests))
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
                reserved = self._hold_for(protected, state.facts)
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
            key = req.key
            if key == skip:
                continue
            order.append(key)
            if blocked is not None:
                by_key[key] = blocked
                continue
            if monotone:
                got = known.get(id(req))
                _, sig, base = got if got is not None and got[0] is req else sigs(req)
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
                if monotone:
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

    def _sigs(self, request: TaskRequest) -> tuple[TaskRequest, int, int]:
        """The request's :meth:`shape` and that shape less its last two fields (task type and
        activity), each as a number unique to its value (kept per request object, ``_sig_of``)."""
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
        if len(self._sig_of) > 100_000:  # ids are never reused, so forgetting is safe
            self._sig_of, self._sig_ids = {}, {}
        got = self._sig_of[id(request)] = (request, sig, base)
        return got

    def shape(self, request: TaskRequest) -> tuple[object, ...]:
        """What a decision of a memory-checking policy depends on besides the GPUs: in one pass,
        a request of the same shape as one that had to wait waits too, for the same reason."""
        mem = request.memory
        prices = self.policy.prices_options  # decides by each try's predicted work
        return (
            request.gpus,
            request.exclusive or mem.whole_gpu,
            request.gpu_model,
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
    ) -> Placements:
        """What :meth:`schedule` places and finds never fits, in the same order, without deciding
        the requests that wait: for a pass over thousands of waiting requests of a few shapes.

        ``groups``: the waiting requests, each group of one :meth:`shape` and sorted by
        ``order_key`` (``schedule``'s order is their merge).  The pass walks the groups' heads in
        that order and drops every group of a shape once one of its requests must wait (the memo
        of ``schedule``: the rest of that shape waits too).  Only for a policy that checks
        memory (the memo's premise); waiting decisions carry no reasons.
        """
        if not self.policy.checks_memory:
            raise ValueError("Placer.place needs a policy that checks memory; use schedule")
        state = self._pass(view, sum(len(g) for g in groups))
        placed: list[Decision] = []
        never: list[Decision] = []
        reserved: frozenset[str] = frozenset()
        reserved_for: str | None = None
        skip = None
        if protected is not None:
            skip = protected.key
            d = state.decide(protected, frozenset(), explain=False)
            if d.placed:
                state.apply(protected, d)
                placed.append(d)
            elif d.outcome is Outcome.NOT_NOW:
                reserved = self._hold_for(protected, state.facts)
                reserved_for = protected.key
            else:
                never.append(d)
        shape = self.shape
        heads: list[tuple[tuple[object, ...], int, int]] = []
        shapes: list[tuple[object, ...]] = []
        for g, group in enumerate(groups):
            if group:
                shapes.append(shape(group[0]))
                heads.append((order_key(group[0]), g, 0))
            else:
                shapes.append(())
        heapq.heapify(heads)
        waits: set[tuple[object, ...]] = set()
        # a pricing policy's shapes carry the activity and the task type; a try that waits because
        # no GPU set can take it (not by choice: the filters know neither) makes every try of its
        # shape wait, whatever its type and activity: the shape less those two
        prices = self.policy.prices_options
        base = [s[:-2] for s in shapes] if prices else shapes
        while heads:
            _, g, i = heads[0]
            group = groups[g]
            sig = shapes[g]
            if sig in waits or (prices and base[g] in waits):
                heapq.heappop(heads)
                continue
            req = group[i]
            if req.key != skip:
                d = state.decide(req, reserved, explain=False, shape=sig)
                if d.placed:
                    state.apply(req, d)
                    placed.append(d)
                elif d.outcome is Outcome.NOT_NOW:
                    if blocking:
                        break
                    waits.add(sig if d is WAITS_BY_CHOICE or not prices else base[g])
                    heapq.heappop(heads)
                    continue
                else:
                    never.append(d)
            i += 1
            if i < len(group):
                heapq.heapreplace(heads, (order_key(group[i]), g, i))
            else:
                heapq.heappop(heads)
        return Placements(tuple(placed), tuple(never), reserved_for)

    def _hold_for(self, request: TaskRequest, facts: list[GpuFacts]) -> frozenset[str]:
        """GPUs to keep free of new tenants so a starving request is guaranteed to start.

        The N matching GPUs on one host with the fewest tenants and most usable memory:
        nothing new lands on them, so their free memory only grows as tenants finish, and
        the choice stays put from pass to pass.  Kept while the facts are the same objects (a
        pass whose GPUs did not change reuses the last pass's facts).
        """
        shape = (request.gpus, request.gpu_model)
        ids = list(map(id, facts))
        held = self._held
        if held is not None and held[0] == shape and held[2] == ids:
            return held[3]
        out = self._choose_hold(request, facts)
        self._held = (shape, list(facts), ids, out)  # the facts kept alive: their ids stay theirs
        return out

    def _choose_hold(self, request: TaskRequest, facts: list[GpuFacts]) -> frozenset[str]:
        per_host: dict[str, list[GpuFacts]] = {}
        for f in facts:
            if f.state.health is not GpuHealth.QUARANTINED and model_matches(f.state.spec.name, request.gpu_model):
                per_host.setdefault(f.state.host, []).append(f)
        best: list[GpuFacts] = []
        best_score = -1.0e18
        n = request.gpus
        for group in per_host.values():
            if len(group) < n:
                continue
            # the n first in (fewest tenants, most usable memory, index) order; a full sort of a
            # large host per pass was the deep queue's hot spot
            order = [(f.tenants, -f.usable_free_mib, f.index, i) for i, f in enumerate(group)]
            firsts = [min(order)] if n == 1 else heapq.nsmallest(n, order)
            top = [group[t[3]] for t in firsts]
            score = float(sum(f.usable_free_mib for f in top)) - 1e9 * sum(f.tenants for f in top)
            if score > best_score:
                best, best_score = top, score
        return frozenset(f.uuid for f in best)


_Entry = tuple[tuple[float, ...], int, GpuFacts]


__all__ = ["PassResult", "Placements", "Placer", "model_matches", "waiting_summary"]
