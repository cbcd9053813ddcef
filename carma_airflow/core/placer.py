"""The placer: filter GPUs, order the survivors with a policy, pick N on one host.

Shape of a decision (after the Kubernetes scheduler framework): per GPU a filter verdict,
then an ordering, then a choice; the outcome separates "not now" (may fit when tenants
leave), "never fits" (no GPU set could ever take it) and errors.  A pass over a queue
updates its per-GPU facts as it places, so one pass can place many tasks consistently.
"""

from __future__ import annotations

import bisect
import heapq
import re
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from itertools import compress
from operator import is_not, itemgetter

from carma_airflow.core.decision import Decision, GpuVerdict, Outcome, Reason
from carma_airflow.core.gpu import ClusterView, GpuHealth, GpuState
from carma_airflow.core.policies.base import GpuFacts, Policy
from carma_airflow.core.risk import is_high_risk
from carma_airflow.core.settings import DEFAULT_SETTINGS, PlacementSettings
from carma_airflow.core.task import MemoryNeed, TaskRequest
from carma_airflow.core.units import format_mib


def _verdict(facts: GpuFacts, reason: Reason | None, detail: str) -> GpuVerdict:
    st = facts.state
    return GpuVerdict(st.uuid, st.index, st.spec.name, reason, detail)


def _describe(facts: GpuFacts, tenants: Sequence[str]) -> str:
    co = ", ".join(tenants) if tenants else "none"
    return f"{format_mib(facts.usable_free_mib)} free, SM activity {facts.smact:.2f}, co-tenants: {co}"


def _model_tokens(name: str) -> set[str]:
    return {t for t in re.split(r"[^0-9a-z]+", name.lower()) if t}


def model_matches(spec_name: str, wanted: str | None) -> bool:
    """``gpu_model`` matching, word by word in any order: "A100" and "A100-40GB" match NVML's
    "NVIDIA A100-SXM4-40GB", "H100-80GB" matches "NVIDIA H100 80GB HBM3"; "A100" does not match
    "RTX A1000"."""
    if wanted is None:
        return True
    words = _model_tokens(wanted)
    return bool(words) and words <= _model_tokens(spec_name)


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
        self._cache: _PoolCache | None = None

    # -- facts -------------------------------------------------------------------------
    def facts(self, view: ClusterView, until: list[float] | None = None) -> list[GpuFacts]:
        """Per GPU the numbers the filters and orderings use.  ``until``: if given, gets per GPU
        a time before which its facts stay the same however the clock moves (a tenant's or the
        GPU's lock window ending changes them), less a margin for rounding."""
        return self._facts_of(view.gpus, view.now, until)

    def _facts_of(self, gpus: Sequence[GpuState], now: float, until: list[float] | None) -> list[GpuFacts]:
        s = self.settings
        pol = self.policy
        lock_s = s.lock_s
        reserve = s.reserve_mib
        idle_used = s.idle_used_mib
        prior = s.activity_prior
        reservations = pol.uses_reservations
        risk = s.risk
        out: list[GpuFacts] = []
        append = out.append
        for g in gpus:
            tenants = g.tenants
            free = g.free_mib
            unseen = 0
            exclusive_tenant = False
            changes = _NEVER
            if tenants:
                accounted = 0
                for t in tenants:
                    exclusive_tenant = exclusive_tenant or t.exclusive
                    observed = t.observed_mib
                    if observed is None or now - t.placed_at < lock_s:
                        unseen += 1
                        accounted += t.reserved_mib if observed is None or observed < t.reserved_mib else observed
                        if observed is not None:
                            changes = min(changes, t.placed_at + lock_s)
                    else:  # seen long enough: trust what it holds, the free reading covers it
                        accounted += observed
                if reservations:
                    free = min(free, g.spec.memory_mib - accounted)
            w = g.window
            smact = w.smact_score
            if reservations and unseen:
                smact += prior * unseen
            last = g.last_placed_at
            if until is not None:
                if last is not None and now - last < lock_s:
                    changes = min(changes, last + lock_s)
                until.append(changes - 1e-9 * (abs(changes) + 1.0) if changes != _NEVER else _NEVER)
            append(
                GpuFacts(
                    g,
                    free - reserve,
                    not tenants and g.used_mib < idle_used,
                    len(tenants),
                    exclusive_tenant,
                    last is not None and now - last < lock_s,
                    smact,
                    w.smocc_score,
                    w.drama_score,
                    is_high_risk(smact, w.smocc_score, w.drama_score, risk),
                )
            )
        return out

    def _pools(self, view: ClusterView) -> _Pools:
        """The view's pools: the last pass's, brought up to date, while the policy's pool token
        and the settings stay the same (see :class:`_PoolCache`)."""
        token = self.policy.pool_token()
        if token is None:
            self._cache = None
            return _Pools(self.policy, self.settings, self.facts(view))
        key = (token, self.settings)
        cache = self._cache
        if cache is None or cache.token != key or not cache.update(self, view):
            until: list[float] = []
            cache = _PoolCache(key, view, _Pools(self.policy, self.settings, self.facts(view, until)), until)
            self._cache = cache
        return cache.pools

    def needs_idle(self, request: TaskRequest) -> bool:
        """Whether the request must have GPUs to itself: asked exclusive, or its estimator gave
        up (a memory-aware policy then gives it a whole GPU; static sharing ignores memory)."""
        return request.exclusive or (request.memory.whole_gpu and self.policy.checks_memory)

    # -- one request -------------------------------------------------------------------
    def decide(self, request: TaskRequest, view: ClusterView) -> Decision:
        """Decide one request against a view (no queue)."""
        return _Pass(self, view).decide(request, frozenset())

    def never_fits_reason(self, request: TaskRequest, facts: Sequence[GpuFacts]) -> str | None:
        """Why no GPU set of this cluster could ever take the request, or None."""
        return _never_fits(self, request, facts, {})

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
        state = _Pass(self, view)
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
        memo: dict[tuple[object, ...], Decision] = {}
        monotone = self.policy.checks_memory
        shape = self.shape
        blocked: Decision | None = None
        for req in requests:
            key = req.key
            if key == skip:
                continue
            order.append(key)
            if blocked is not None:
                by_key[key] = blocked
                continue
            sig: tuple[object, ...] = ()
            if monotone:
                sig = shape(req)
                hit = memo.get(sig)
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
                if blocking:
                    blocked = Decision(
                        key,
                        Outcome.NOT_NOW,
                        summary=f"waiting: queued behind {req.label} (strict FIFO)",
                        policy=self.policy.name,
                    )
        return PassResult(tuple(order), by_key, tuple(placed), reserved_for)

    def shape(self, request: TaskRequest) -> tuple[object, ...]:
        """What a decision of a memory-checking policy depends on besides the GPUs: in one pass,
        a request of the same shape as one that had to wait waits too, for the same reason."""
        mem = request.memory
        return (
            request.gpus,
            request.exclusive or mem.whole_gpu,
            request.gpu_model,
            request.avoid_gpus,
            mem.add_headroom,
            mem.mib,
            request.activity if self.policy.refuses_gpus else None,
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
        state = _Pass(self, view)
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
        while heads:
            _, g, i = heads[0]
            group = groups[g]
            sig = shapes[g]
            if sig in waits:
                heapq.heappop(heads)
                continue
            req = group[i]
            if req.key != skip:
                d = state.decide(req, reserved, explain=False)
                if d.placed:
                    state.apply(req, d)
                    placed.append(d)
                elif d.outcome is Outcome.NOT_NOW:
                    if blocking:
                        break
                    waits.add(sig)
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
        the choice stays put from pass to pass.
        """
        per_host: dict[str, list[GpuFacts]] = {}
        for f in facts:
            if f.state.health is not GpuHealth.QUARANTINED and model_matches(f.state.spec.name, request.gpu_model):
                per_host.setdefault(f.state.host, []).append(f)
        best: list[GpuFacts] = []
        best_score = -1.0e18
        for group in per_host.values():
            if len(group) < request.gpus:
                continue
            group.sort(key=lambda f: (f.tenants, -f.usable_free_mib, f.index))
            top = group[: request.gpus]
            score = float(sum(f.usable_free_mib for f in top)) - 1e9 * sum(f.tenants for f in top)
            if score > best_score:
                best, best_score = top, score
        return frozenset(f.uuid for f in best)


_Entry = tuple[tuple[float, ...], int, GpuFacts]


def _never_fits(
    placer: Placer,
    request: TaskRequest,
    facts: Sequence[GpuFacts],
    cache: dict[tuple[object, ...], tuple[str | None, int]],
) -> str | None:
    if request.gpus < 1:
        return f"asks for {request.gpus} GPUs; ask for at least 1"
    key = (request.gpus, request.gpu_model)
    hit = cache.get(key)
    if hit is None:
        per_host: dict[str, list[int]] = {}
        for f in facts:
            if model_matches(f.state.spec.name, request.gpu_model):
                per_host.setdefault(f.state.host, []).append(f.state.spec.memory_mib)
        if not per_host:
            models = sorted({f.state.spec.name for f in facts})
            hit = (f"no GPU matches gpu_model={request.gpu_model!r}; this cluster has {', '.join(models)}", 0)
        else:
            most = max(len(v) for v in per_host.values())
            if most < request.gpus:
                hit = (f"asks for {request.gpus} GPUs but the largest host has {most} matching GPUs", 0)
            else:
                best = max(
                    sorted(v, reverse=True)[request.gpus - 1] for v in per_host.values() if len(v) >= request.gpus
                )
                hit = (None, best)
        cache[key] = hit
    structural, best = hit
    if structural is not None:
        return structural
    if not placer.policy.checks_memory or request.memory.whole_gpu:
        return None
    limit = best - placer.settings.reserve_mib
    if request.memory.mib > limit:
        return (
            f"needs {format_mib(request.memory.mib)} per GPU but the largest GPU offers "
            f"{format_mib(limit)} ({format_mib(best)} less the {placer.settings.reserve_mib} MiB reserve)"
        )
    return None


class _Pools:
    """Per-GPU facts of one view split into idle candidates, collocation candidates (each kept
    sorted by the policy's keys) and GPUs no request can use now (with their reasons): what a
    pass starts from, and what a placer keeps from pass to pass (:class:`_PoolCache`)."""

    def __init__(self, pol: Policy, settings: PlacementSettings, facts: list[GpuFacts]) -> None:
        self.pol = pol
        self.settings = settings
        self.facts = facts
        self.by_uuid = {f.uuid: f for f in facts}
        # tie-break after the policy's key: the GPU's place in the view (unique across hosts,
        # where GPU indices repeat; on one host it is the index order)
        self.ordinal = {f.uuid: n for n, f in enumerate(facts)}
        self.never_cache: dict[tuple[object, ...], tuple[str | None, int]] = {}
        self.idle: list[_Entry] = []
        self.shared: list[_Entry] = []
        # the collocation pool again, by usable memory: finds "fits" without scanning
        self.by_free: list[tuple[int, int, _Entry]] = []
        self.where: dict[str, _Entry] = {}
        self.static: dict[str, GpuVerdict] = {}
        self._static_tuple: tuple[GpuVerdict, ...] | None = None
        self._static_counts: dict[Reason, int] | None = None
        for f in facts:
            self._place_in_pool(f, sort=False)
        self.idle.sort(key=lambda e: (e[0], e[1]))
        self.shared.sort(key=lambda e: (e[0], e[1]))
        self.by_free.sort(key=lambda e: (e[0], e[1]))

    # pools -------------------------------------------------------------------------------
    def _classify(self, f: GpuFacts) -> GpuVerdict | bool:
        """True: idle pool, False: collocation pool, a verdict: unusable for every request."""
        pol = self.pol
        st = f.state
        if st.health is GpuHealth.QUARANTINED:
            return _verdict(f, Reason.UNHEALTHY, "quarantined after GPU errors")
        if f.idle:
            return True
        if st.health is GpuHealth.STALE:
            return _verdict(f, Reason.STALE, "no fresh samples: collocation stopped")
        if not pol.collocates:
            return _verdict(f, Reason.BUSY, f"has {f.tenants} tenant(s); exclusive policy")
        if f.exclusive_tenant:
            return _verdict(f, Reason.EXCLUSIVE_TENANT, "held by an exclusive task")
        if pol.max_tenants is not None and f.tenants >= pol.max_tenants:
            return _verdict(f, Reason.TENANT_CAP, f"{f.tenants} tenants (cap {pol.max_tenants})")
        if pol.uses_lock and f.locked:
            return _verdict(f, Reason.LOCKED, "placed on recently; waiting for its window")
        if pol.checks_risk and f.high_risk:
            return _verdict(f, Reason.RISK, f"SM activity {f.smact:.2f}, occupancy {f.smocc:.2f}, DRAM {f.drama:.2f}")
        if not pol.admits(f, _NO_REQUEST, self.settings.activity_prior):
            return _verdict(f, Reason.INTERFERENCE, f"projected SM activity {f.smact:.2f} + newcomer over the cap")
        return False

    def _place_in_pool(self, f: GpuFacts, sort: bool = True) -> None:
        verdict = self._classify(f)
        if isinstance(verdict, GpuVerdict):
            self.static[f.uuid] = verdict
            self._static_tuple = None
            return
        pool = self.idle if verdict else self.shared
        key = self.pol.idle_key(f, _NO_REQUEST) if verdict else self.pol.key(f, _NO_REQUEST)
        entry: _Entry = (key, self.ordinal[f.uuid], f)
        self.where[f.uuid] = entry
        if sort:
            bisect.insort(pool, entry, key=lambda e: (e[0], e[1]))
        else:
            pool.append(entry)
        if not verdict:
            item = (f.usable_free_mib, entry[1], entry)
            if sort:
                bisect.insort(self.by_free, item, key=lambda e: (e[0], e[1]))
            else:
                self.by_free.append(item)

    def _take_out(self, f: GpuFacts) -> None:
        entry = self.where.pop(f.uuid, None)
        if entry is None:
            if self.static.pop(f.uuid, None) is not None:
                self._static_tuple = None
            return
        for pool in (self.idle, self.shared):
            i = bisect.bisect_left(pool, (entry[0], entry[1]), key=lambda e: (e[0], e[1]))
            if i < len(pool) and pool[i][2] is f:
                del pool[i]
                if pool is self.shared:
                    j = bisect.bisect_left(self.by_free, (f.usable_free_mib, entry[1]), key=lambda e: (e[0], e[1]))
                    if j < len(self.by_free) and self.by_free[j][2] is entry:
                        del self.by_free[j]
                return

    def static_rejections(self) -> tuple[GpuVerdict, ...]:
        if self._static_tuple is None:
            self._static_tuple = tuple(self.static.values())
            self._static_counts = None
        return self._static_tuple

    def static_counts(self) -> dict[Reason, int]:
        """The reasons of :meth:`static_rejections`, counted (kept while they stay the same)."""
        verdicts = self.static_rejections()
        if self._static_counts is None:
            self._static_counts = _count_reasons(verdicts, {})
        return self._static_counts


class _PoolCache:
    """The last view's pools, kept for the next pass: only the GPUs whose state is another
    object, or whose facts' time-dependence ran out (``until``), are classified again.  A pass
    works on copies (copy-on-write for the facts it places on), so the cache stays as the view."""

    def __init__(self, token: Hashable, view: ClusterView, pools: _Pools, until: list[float]) -> None:
        self.token = token
        self.now = view.now
        self.states = list(view.gpus)
        self.pools = pools
        self.until = until
        self.soonest = min(until, default=_NEVER)

    def update(self, placer: Placer, view: ClusterView) -> bool:
        """Bring the pools to ``view``; False where they must be built afresh (GPUs changed
        places, the clock went back)."""
        now, gpus, states = view.now, view.gpus, self.states
        n = len(gpus)
        if now < self.now or n != len(states):
            return False
        redo = set(compress(range(n), map(is_not, gpus, states)))
        if now >= self.soonest:
            redo.update(i for i, u in enumerate(self.until) if u <= now)
        if any(gpus[i].uuid != states[i].uuid for i in redo):
            return False
        self.now, self.states = now, list(gpus)
        if not redo:
            return True
        places = sorted(redo)
        until: list[float] = []
        fresh = placer._facts_of([gpus[i] for i in places], now, until)
        pools = self.pools
        static = pools.static
        reorder = False
        for i, f, u in zip(places, fresh, until, strict=True):
            old = pools.facts[i]
            if old.state.spec != f.state.spec or old.state.host != f.state.host:
                pools.never_cache = {}
            reorder = reorder or old.uuid in static
            pools._take_out(old)
            pools.facts[i] = f
            pools.by_uuid[f.uuid] = f
            pools._place_in_pool(f)
            reorder = reorder or f.uuid in static
            self.until[i] = u
        if reorder:  # the GPUs no request can use, in view order (as a fresh build lists them)
            pools.static = {f.uuid: static[f.uuid] for f in pools.facts if f.uuid in static}
            pools._static_tuple = None
            pools._static_counts = None
        self.soonest = min(self.until, default=_NEVER)
        return True


class _Pass(_Pools):
    """One pass's pools: a copy of the view's (:meth:`Placer._pools`), updated in place as the
    pass places; candidates stay sorted by the policy's keys, so a decision usually looks at
    few GPUs."""

    def __init__(self, placer: Placer, view: ClusterView) -> None:
        base = placer._pools(view)
        self.placer = placer
        self.pol = placer.policy
        self.settings = placer.settings
        self.facts = list(base.facts)
        self.by_uuid = dict(base.by_uuid)
        self.ordinal = base.ordinal
        self.never_cache = base.never_cache
        self.idle = list(base.idle)
        self.shared = list(base.shared)
        self.by_free = list(base.by_free)
        self.where = dict(base.where)
        self.static = dict(base.static)
        self._static_tuple = base.static_rejections()
        self._static_counts = base._static_counts  # shared: never changed, only replaced

    def _ordered(self, pool: list[_Entry], request: TaskRequest, idle: bool) -> list[_Entry]:
        if self.pol.stable_keys:
            return pool
        keyf = self.pol.idle_key if idle else self.pol.key
        return sorted(pool, key=lambda e: (keyf(e[2], request), e[1]))

    # decisions ---------------------------------------------------------------------------
    def decide(self, request: TaskRequest, reserved: frozenset[str], explain: bool = True) -> Decision:
        """``explain``: False for a pass that only needs what it places, a waiting request then
        gets the shared :data:`_WAITS` decision without reasons (and without the scans that
        only gather reasons)."""
        pol = self.pol
        never = _never_fits(self.placer, request, self.facts, self.never_cache)
        if never is not None:
            return Decision(request.key, Outcome.NEVER_FITS, summary=f"never fits: {never}", policy=pol.name)
        need = request.memory.mib
        filter_need = request.memory.filter_mib(self.settings.headroom_mib)
        idle_only = self.placer.needs_idle(request) or not pol.collocates
        # "could not estimate: whole GPU" takes any idle GPU; its number is a sentinel, not memory
        check_idle_memory = pol.checks_memory and not request.memory.whole_gpu
        n = request.gpus
        wanted = request.gpu_model
        avoid = request.avoid_gpus
        scanned: list[tuple[GpuFacts, Reason, bool]] = []  # (GPU, reason, in collocation pool)
        refusing = pol.refuses_gpus
        notes: dict[str, str] = {}  # a policy's refusal texts, by GPU
        avoided: list[GpuFacts] = []
        groups: dict[str, list[GpuFacts]] = {}
        chosen: list[GpuFacts] | None = None

        def take(f: GpuFacts) -> list[GpuFacts] | None:
            group = groups.setdefault(f.state.host, [])
            group.append(f)
            return group if len(group) == n else None

        for _, _, f in self._ordered(self.idle, request, True):
            if wanted is not None and not model_matches(f.state.spec.name, wanted):
                scanned.append((f, Reason.MODEL, False))
            elif reserved and f.state.uuid in reserved:
                scanned.append((f, Reason.RESERVED, False))
            elif check_idle_memory and need > f.usable_free_mib:
                scanned.append((f, Reason.MEMORY, False))
            elif avoid and f.state.uuid in avoid:
                avoided.append(f)
            else:
                chosen = take(f)
                if chosen is not None:
                    break
        fast = (
            chosen is None
            and n == 1
            and not idle_only
            and wanted is None
            and not reserved
            and not avoid
            and pol.checks_memory
            and pol.stable_keys
            and not refusing
        )
        if fast:
            # same answer as the scan below (the first candidate in policy order with enough
            # memory): look at the head of the order, then ask the by-memory index
            mark = len(scanned)
            for _, _, f in self.shared[:_HEAD]:
                if filter_need <= f.usable_free_mib:
                    chosen = [f]
                    break
                scanned.append((f, Reason.MEMORY, True))
            if chosen is None:
                i = bisect.bisect_left(self.by_free, (filter_need, -1), key=lambda e: (e[0], e[1]))
                if i < len(self.by_free):
                    chosen = [min(self.by_free[i:], key=itemgetter(2))[2][2]]
                elif not explain:
                    return _WAITS  # no collocation candidate has the memory; no avoided GPUs
                else:
                    del scanned[mark:]  # the full scan below lists them again
        if chosen is None and idle_only and not explain and not avoided:
            pass  # every collocation candidate is busy for it, no avoided GPU to fall back on: it waits
        elif chosen is None:
            for _, _, f in self._ordered(self.shared, request, False):
                if wanted is not None and not model_matches(f.state.spec.name, wanted):
                    scanned.append((f, Reason.MODEL, True))
                elif reserved and f.state.uuid in reserved:
                    scanned.append((f, Reason.RESERVED, True))
                elif idle_only:
                    scanned.append((f, Reason.BUSY, True))
                elif pol.checks_memory and filter_need > f.usable_free_mib:
                    scanned.append((f, Reason.MEMORY, True))
                elif refusing and (refusal := pol.refuses(f, request)) is not None:
                    scanned.append((f, refusal.reason, True))
                    notes[f.uuid] = refusal.detail
                elif avoid and f.state.uuid in avoid:
                    avoided.append(f)
                else:
                    chosen = take(f)
                    if chosen is not None:
                        break
        if chosen is None:
            for f in avoided:  # already in idle-then-policy order
                chosen = take(f)
                if chosen is not None:
                    break
        if chosen is None and not explain:
            return _WAITS
        if chosen is None:
            mine = self._verdicts(scanned, request, notes)
            rejected = mine + self.static_rejections()
            counts = _count_reasons(mine, dict(self.static_counts()))
            summary = _summary_of_counts(
                counts, len(self.facts), n=n, idle_only=idle_only, need=format_mib(filter_need), model=wanted
            )
            return Decision(request.key, Outcome.NOT_NOW, rejected=rejected, summary=summary, policy=pol.name)
        verdicts = tuple(_verdict(f, None, self._chosen_detail(f, request)) for f in chosen)
        where = ", ".join(f"GPU {f.index} ({f.state.spec.name})" for f in chosen)
        return Decision(
            request.key,
            Outcome.PLACED,
            gpu_uuids=tuple(f.uuid for f in chosen),
            chosen=verdicts,
            rejected=self._verdicts(scanned[:_PLACED_REJECTIONS], request, notes) + self.static_rejections(),
            summary=f"placed on {where}: " + "; ".join(v.detail for v in verdicts),
            collocated=any(not f.idle for f in chosen),
            policy=pol.name,
        )

    def _chosen_detail(self, f: GpuFacts, request: TaskRequest) -> str:
        text = _describe(f, [t.label for t in f.state.tenants] + (f.joined or []))
        extra = self.pol.describe(f, request)
        return text if extra is None else f"{text}; {extra}"

    def _verdicts(
        self,
        scanned: list[tuple[GpuFacts, Reason, bool]],
        request: TaskRequest,
        notes: dict[str, str] | None = None,
    ) -> tuple[GpuVerdict, ...]:
        """Turn the light records of a scan into verdicts with their texts (``notes``: a policy's
        own texts for the GPUs it refused)."""
        need = request.memory.mib
        filter_need = request.memory.filter_mib(self.settings.headroom_mib)
        out = []
        for f, reason, shared in scanned:
            note = notes.get(f.uuid) if notes else None
            if note is not None:
                detail = note
            elif reason is Reason.MODEL:
                detail = f"is not a {request.gpu_model}"
            elif reason is Reason.RESERVED:
                detail = "held for a task past its starvation bound"
            elif reason is Reason.BUSY:
                detail = f"has {f.tenants} tenant(s); task needs an idle GPU"
            elif shared:
                detail = f"{format_mib(f.usable_free_mib)} usable < {format_mib(filter_need)} (estimate + headroom)"
            else:
                detail = f"{format_mib(f.usable_free_mib)} usable < {format_mib(need)} needed"
            out.append(_verdict(f, reason, detail))
        return tuple(out)

    def apply(self, request: TaskRequest, decision: Decision) -> None:
        """Account a placement inside the pass and move the GPUs to their new pools."""
        chosen = []
        for uuid in decision.gpu_uuids:
            old = self.by_uuid[uuid]
            self._take_out(old)
            f = _copy(old)  # the view's facts stay as they are (the placer keeps them)
            self.by_uuid[uuid] = f
            self.facts[self.ordinal[uuid]] = f
            chosen.append(f)
            f.usable_free_mib -= request.memory.mib
            f.tenants += 1
            f.joined = [*(f.joined or []), request.label]
            f.idle = False
            f.exclusive_tenant = f.exclusive_tenant or self.placer.needs_idle(request)
            f.locked = True
            if self.pol.uses_reservations:
                f.smact += self.settings.activity_prior
                f.high_risk = is_high_risk(f.smact, f.smocc, f.drama, self.settings.risk)
            self._place_in_pool(f)
        self.pol.rotate(chosen, len(self.facts))


def _copy(f: GpuFacts) -> GpuFacts:
    return GpuFacts(
        f.state,
        f.usable_free_mib,
        f.idle,
        f.tenants,
        f.exclusive_tenant,
        f.locked,
        f.smact,
        f.smocc,
        f.drama,
        f.high_risk,
        f.joined,
    )


# the headline of a waiting decision where one reason holds every GPU back: the cause, by name
_EVERY_GPU: dict[Reason, str] = {
    Reason.UNHEALTHY: "every GPU is quarantined",
    Reason.STALE: "every GPU has stale telemetry",
    Reason.LOCKED: "every GPU was placed on moments ago",
    Reason.MEMORY: "no GPU with {need} free",
    Reason.RISK: "every GPU is too busy to share (high-risk)",
    Reason.INTERFERENCE: "every GPU would pass the interference cap",
    Reason.BUSY: "no idle GPU",
    Reason.EXCLUSIVE_TENANT: "every GPU is held by an exclusive task",
    Reason.TENANT_CAP: "every GPU is at its tenant cap",
    Reason.MODEL: "no GPU is a {model}",
    Reason.AVOID: "every GPU is avoided after an OOM",
    Reason.RESERVED: "every GPU is held for a task past its starvation bound",
    Reason.HOST: "every GPU is on a host short of GPUs",
}
_REASON_ORDER = {r: i for i, r in enumerate(Reason)}


def waiting_summary(
    rejected: Sequence[GpuVerdict], total: int, *, n: int, idle_only: bool, need: str, model: str | None = None
) -> str:
    """The text of a waiting decision (what ``carma why``, the log and the GPU page show).

    The headline names what blocks: the one reason when it holds back every GPU ("every GPU is
    at its tenant cap", "no GPU with 6.0 GiB free" only when memory is what every GPU lacks),
    else that no GPU can take the task now.  The parenthesis counts the reasons, the most
    common first with its share of the ``total`` GPUs: ``(7 of 8 GPUs tenant-cap, 1 memory)``.
    The headline's wording depends on the kinds of reasons only, not on their counts: the
    executor writes a waiting task's reason again when its headline changes.
    """
    counts: dict[Reason, int] = {}
    for v in rejected:
        if v.reason is not None:
            counts[v.reason] = counts.get(v.reason, 0) + 1
    return _summary_of_counts(counts, total, n=n, idle_only=idle_only, need=need, model=model)


def _count_reasons(verdicts: Sequence[GpuVerdict], into: dict[Reason, int]) -> dict[Reason, int]:
    for v in verdicts:
        if v.reason is not None:
            into[v.reason] = into.get(v.reason, 0) + 1
    return into


def _summary_of_counts(
    counts: dict[Reason, int], total: int, *, n: int, idle_only: bool, need: str, model: str | None
) -> str:
    """:func:`waiting_summary` from the reasons counted already (a pass counts the GPUs no
    request can use once, not once per waiting decision)."""
    ranked = sorted(counts.items(), key=lambda kv: (-kv[1], _REASON_ORDER[kv[0]]))
    if len(ranked) == 1 and ranked[0][1] >= total:
        reason = ranked[0][0]
        if reason is Reason.MEMORY and n > 1:
            lack = f"no host with {n} GPUs with {need} free"
        elif reason is Reason.BUSY and n > 1:
            lack = f"no host with {n} GPUs idle"
        else:
            lack = _EVERY_GPU[reason].format(need=need, model=model)
    elif n == 1:
        lack = "no usable idle GPU" if idle_only else f"no GPU can take {need} now"
    else:
        lack = (
            f"no host with {n} GPUs idle and usable" if idle_only else f"no host with {n} GPUs that can take {need} now"
        )
    if not ranked:
        return f"waiting: {lack} (too few candidates on one host)"
    (top, k), rest = ranked[0], ranked[1:]
    parts = [f"{k} of {total} GPU{'s' if total != 1 else ''} {top.value}"] + [f"{c} {r.value}" for r, c in rest]
    return f"waiting: {lack} ({', '.join(parts)})"


_PLACED_REJECTIONS = 8  # a placed decision keeps this many passed-over GPUs as its reasons
_HEAD = 16  # candidates looked at in order before the by-memory index is asked
_NO_REQUEST = TaskRequest(key="", label="", memory=MemoryNeed(1, "none"))
_NEVER = float("inf")
# a waiting decision without reasons, for a pass that only needs what it places (Placer.place)
_WAITS = Decision("", Outcome.NOT_NOW, summary="waiting", policy="")


def _first_host_with(ordered: list[GpuFacts], n: int) -> list[GpuFacts] | None:
    if n == 1:
        return ordered[:1] or None
    per_host: dict[str, list[GpuFacts]] = {}
    for f in ordered:
        group = per_host.setdefault(f.state.host, [])
        group.append(f)
        if len(group) == n:
            return group
    return None
