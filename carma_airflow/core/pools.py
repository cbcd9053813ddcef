"""The placer's pools: per-GPU facts split into idle candidates, collocation candidates (each
sorted by the policy's keys) and GPUs no request can use now (with their reasons), and the cache
that keeps them from pass to pass."""

from __future__ import annotations

import bisect
from collections.abc import Hashable, Iterator
from itertools import compress, islice
from operator import is_not, itemgetter
from typing import TYPE_CHECKING

from carma_airflow.core.decision import GpuVerdict, Reason
from carma_airflow.core.drain_order import Drain
from carma_airflow.core.engine_filters import MemoryFit
from carma_airflow.core.facts import NEVER, GpuFacts, gpu_facts
from carma_airflow.core.filtering import NO_REQUEST, Filter, Rejection, first_rejection, gpu_stage, try_stage
from carma_airflow.core.gpu import ClusterView
from carma_airflow.core.reasons import count_reasons, rejected
from carma_airflow.core.settings import PlacementSettings
from carma_airflow.core.task import TaskRequest

if TYPE_CHECKING:
    from carma_airflow.core.policies.base import Policy

Entry = tuple[tuple[float, ...], int, GpuFacts]
# a pool's order: an entry's (key, place), by-memory's (usable memory, place); in C, not a lambda
# (every GPU a pass changes goes out of and into its pools by binary search)
POOL_ORDER = itemgetter(0, 1)
HEAD = 16  # candidates looked at in order before the by-memory index is asked (no Policy.free_key_at)
Scanned = list[tuple[GpuFacts, Reason, bool]]  # a scan's light records: (GPU, reason, in collocation pool)


class Walk:
    """The collocation pool in order for a scan that needs only its first ``keep`` rejections in
    full: once ``scanned`` holds that many, each run of GPUs without the memory (inside one value
    of the key's fields before its usable memory at ``at_free``: :attr:`Policy.free_key_at`) is
    skipped by binary search, since the scan would reject each of them, whatever else it checks
    first.  A scan otherwise walks past hundreds of GPUs too full for the request.  ``stop``: one
    past the place of the last entry yielded; ``skipped``: whether a run was skipped (a decision
    that lists every rejection then has them filled in: :func:`full_scan`)."""

    __slots__ = ("at_free", "keep", "need", "pool", "scanned", "skipped", "stop")

    def __init__(self, pool: list[Entry], scanned: Scanned, filter_need: int, at_free: int, keep: int) -> None:
        self.pool, self.scanned, self.need, self.at_free, self.keep = pool, scanned, filter_need, at_free, keep
        self.stop = 0
        self.skipped = False

    def __iter__(self) -> Iterator[Entry]:
        pool, scanned, keep = self.pool, self.scanned, self.keep
        at, count = 0, len(pool)
        while at < count:
            self.stop = at + 1
            yield pool[at]
            at += 1
            if len(scanned) >= keep:
                break
        need, at_free = float(self.need), self.at_free
        while at < count:
            entry = pool[at]
            key = entry[0]
            if key[at_free] < need:  # it and the GPUs after it in its run lack the memory
                at = bisect.bisect_left(pool, _probe(key, at_free, need), lo=at)
                self.skipped = True
                continue
            self.stop = at + 1
            yield entry
            at += 1
        self.stop = count  # walked to the end: every GPU after the last yielded was skipped


def _probe(key: tuple[float, ...], at_free: int, need: float) -> tuple[tuple[float, ...]]:
    """What a pool's first entry with the key's fields before ``at_free`` and at least ``need``
    usable MiB sorts after: compared with an entry ``(key, place, facts)`` it decides on the keys
    alone (in C, without a key function); a key equal to it up to its end sorts after it, as the
    longer tuple."""
    return ((*key[:at_free], need),)


def checked(
    asked: tuple[Filter, ...], f: GpuFacts, request: TaskRequest, reserved: frozenset[str], notes: dict[str, Rejection]
) -> Reason | None:
    """The first reason a scan's checks before memory give GPU ``f``: a per-try filter's (``asked``;
    its rejection goes to ``notes``), else held for a starving try; None: neither.  The scans that
    put skipped GPUs back use it (the passes' own loops check inline, their hottest path)."""
    if asked and (refused := first_rejection(asked, f, request)) is not None:
        notes[f.uuid] = refused
        return refused.reason
    if reserved and f.state.uuid in reserved:
        return Reason.RESERVED
    return None


def full_scan(
    walk: Walk,
    seen: Scanned,
    asked: tuple[Filter, ...],
    request: TaskRequest,
    reserved: frozenset[str],
    idle_only: bool,
    notes: dict[str, Rejection],
) -> Scanned:
    """The rejections a full scan of ``walk``'s pool up to its ``stop`` records: ``seen`` (what
    the walk's scan recorded, in order) with the GPUs the walk skipped put back in their places,
    each with the first reason the scan's checks give it (all lack the memory; ``asked``: the
    policy's per-try filters the try needs, whose rejections go to ``notes``)."""
    out: Scanned = []
    j, count, need = 0, len(seen), walk.need
    for _, _, f in islice(walk.pool, walk.stop):
        if j < count and seen[j][0] is f:
            out.append(seen[j])
            j += 1
        elif need > f.usable_free_mib:  # skipped: the scan's checks, in their order
            why = checked(asked, f, request, reserved, notes)
            out.append((f, why or (Reason.BUSY if idle_only else Reason.MEMORY), True))
    assert j == count, "a walk's records are the full scan's, in order"
    return out


class Pools:
    """Per-GPU facts of one view split into idle candidates, collocation candidates (each kept
    sorted by the policy's keys) and GPUs no request can use now (with their reasons): what a
    pass starts from, and what a placer keeps from pass to pass (:class:`PoolCache`)."""

    def __init__(self, pol: Policy, settings: PlacementSettings, facts: list[GpuFacts]) -> None:
        self.pol = pol
        self.settings = settings
        self.facts = facts
        # the policy's filters: per GPU (asked here, as a GPU is classified), per try (the memory
        # fit, written out in the scans, and the rest, asked per candidate of a try that needs them)
        self.filters = pol.placement_filters(settings)
        self.every_gpu, self.shared_gpu = gpu_stage(self.filters)
        # their checks as bound methods: a pool update classifies every GPU whose facts changed
        self.every_checks = [flt.check for flt in self.every_gpu]
        self.shared_checks = [flt.check for flt in self.shared_gpu]
        per_try = try_stage(self.filters)
        self.memory_fit = next((f for f in per_try if isinstance(f, MemoryFit)), None)
        self.try_filters = tuple(f for f in per_try if not isinstance(f, MemoryFit))
        self.asked_of: dict[int, tuple[TaskRequest, tuple[Filter, ...]]] = {}
        self.texts: dict[int, tuple[Rejection, str]] = {}
        self.by_uuid = {f.uuid: f for f in facts}
        # tie-break after the policy's key: the GPU's place in the view (unique across hosts,
        # where GPU indices repeat; on one host it is the index order)
        self.ordinal = {f.uuid: n for n, f in enumerate(facts)}
        self.never_cache: dict[tuple[object, ...], tuple[str | None, int]] = {}
        self.idle: list[Entry] = []
        self.shared: list[Entry] = []
        # the collocation pool again, by usable memory: finds "fits" without scanning
        self.by_free: list[tuple[int, int, Entry]] = []
        self.where: dict[str, Entry] = {}
        self.static: dict[str, GpuVerdict] = {}
        self._static_tuple: tuple[GpuVerdict, ...] | None = None
        self._static_counts: dict[Reason, int] | None = None
        # a pricing policy's GPUs with tenants by the earliest they can drain (absolute time): kept
        # from pass to pass with the pools, built by the first pass that needs it (placement_pass)
        self.drains: list[Drain] | None = None
        self.drain_of: dict[str, Drain] = {}
        self.drain_version: object = None
        self.drain_stale: set[str] = set()
        for f in facts:
            self._place_in_pool(f, sort=False)
        self.idle.sort(key=POOL_ORDER)
        self.shared.sort(key=POOL_ORDER)
        self.by_free.sort(key=POOL_ORDER)

    # pools -------------------------------------------------------------------------------
    def _classify(self, f: GpuFacts) -> GpuVerdict | bool:
        """True: idle pool, False: collocation pool, a verdict: unusable for every request (the
        first of the policy's per-GPU filters that rejects it)."""
        for check in self.every_checks:
            refused = check(f, NO_REQUEST)
            if refused is not None:
                return self._rejected(f, refused)
        if f.idle:
            return True
        for check in self.shared_checks:
            refused = check(f, NO_REQUEST)
            if refused is not None:
                return self._rejected(f, refused)
        return False

    def _rejected(self, f: GpuFacts, refused: Rejection) -> GpuVerdict:
        """:func:`~carma_airflow.core.reasons.rejected`, the text kept per rejection object (the
        filters hand out one object per number they state, such as a tenant count)."""
        texts = self.texts
        got = texts.get(id(refused))
        if got is None or got[0] is not refused:
            if len(texts) > 4096:
                texts.clear()
            got = texts[id(refused)] = (refused, refused.text())  # kept alive: its id stays its own
        return rejected(f, refused, got[1])

    def asked(self, request: TaskRequest) -> tuple[Filter, ...]:
        """The policy's per-try filters (the memory fit aside) that ``request`` needs (kept per
        request object: a deep queue's waiting tries are asked pass after pass; one filter, the
        usual case, is asked straight: cheaper than the lookup on a cold pass's new tries)."""
        mine = self.try_filters
        if len(mine) < 2:
            return mine if not mine or mine[0].applies(request) else ()
        got = self.asked_of.get(id(request))
        if got is not None and got[0] is request:
            return got[1]
        mine = tuple(flt for flt in self.try_filters if flt.applies(request))
        if len(self.asked_of) > 100_000:
            self.asked_of.clear()
        self.asked_of[id(request)] = (request, mine)  # the request kept alive: its id stays its own
        return mine

    def _place_in_pool(self, f: GpuFacts, sort: bool = True, verdict: GpuVerdict | bool | None = None) -> None:
        """Put ``f`` in its pool (``verdict``: its :meth:`_classify`, where known already)."""
        if verdict is None:
            verdict = self._classify(f)
        if isinstance(verdict, GpuVerdict):
            self.static[f.uuid] = verdict
            self._static_tuple = None
            return
        pool = self.idle if verdict else self.shared
        key = self.pol.idle_key(f, NO_REQUEST) if verdict else self.pol.key(f, NO_REQUEST)
        entry: Entry = (key, self.ordinal[f.uuid], f)
        self.where[f.uuid] = entry
        if sort:
            bisect.insort(pool, entry, key=POOL_ORDER)
        else:
            pool.append(entry)
        if not verdict:
            item = (f.usable_free_mib, entry[1], entry)
            if sort:
                bisect.insort(self.by_free, item, key=POOL_ORDER)
            else:
                self.by_free.append(item)

    def _take_out(self, f: GpuFacts) -> None:
        entry = self.where.pop(f.uuid, None)
        if entry is None:
            if self.static.pop(f.uuid, None) is not None:
                self._static_tuple = None
            return
        for pool in (self.idle, self.shared):
            i = bisect.bisect_left(pool, (entry[0], entry[1]), key=POOL_ORDER)
            if i < len(pool) and pool[i][2] is f:
                del pool[i]
                if pool is self.shared:
                    j = bisect.bisect_left(self.by_free, (f.usable_free_mib, entry[1]), key=POOL_ORDER)
                    if j < len(self.by_free) and self.by_free[j][2] is entry:
                        del self.by_free[j]
                return

    def first_fitting(self, need: int) -> int:
        """The place in the collocation pool of its first candidate in policy order with ``need``
        usable MiB (the pool's length: none has it): by binary search inside each value of the
        key's fields before its usable memory (:attr:`Policy.free_key_at`), else the head of the
        order, then the by-memory index's first in policy order."""
        pool = self.shared
        at_free = self.pol.free_key_at
        if at_free is None:
            for at, (_, _, f) in enumerate(pool[:HEAD]):
                if need <= f.usable_free_mib:
                    return at
            i = bisect.bisect_left(self.by_free, (need, -1), key=POOL_ORDER)
            if i == len(self.by_free):
                return len(pool)
            entry = min(self.by_free[i:], key=_ENTRY)[2]
            return bisect.bisect_left(pool, (entry[0], entry[1]), key=POOL_ORDER)
        at, wanted, count = 0, float(need), len(pool)
        while at < count:
            key = pool[at][0]
            if key[at_free] >= wanted:
                return at
            at = bisect.bisect_left(pool, _probe(key, at_free, wanted), lo=at)
        return count

    def static_rejections(self) -> tuple[GpuVerdict, ...]:
        if self._static_tuple is None:
            self._static_tuple = tuple(self.static.values())
            self._static_counts = None
        return self._static_tuple

    def static_counts(self) -> dict[Reason, int]:
        """The reasons of :meth:`static_rejections`, counted (kept while they stay the same)."""
        verdicts = self.static_rejections()
        if self._static_counts is None:
            self._static_counts = count_reasons(verdicts, {})
        return self._static_counts


class PoolCache:
    """The last view's pools, kept for the next pass: only the GPUs whose state is another
    object, or whose facts' time-dependence ran out (``until``), are classified again.  A pass
    works on copies (copy-on-write for the facts it places on), so the cache stays as the view."""

    def __init__(self, token: Hashable, view: ClusterView, pools: Pools, until: list[float]) -> None:
        self.token = token
        self.now = view.now
        self.states = list(view.gpus)
        self.pools = pools
        self.until = until
        self.soonest = min(until, default=NEVER)

    def update(self, view: ClusterView) -> bool:
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
        pools = self.pools
        fresh = gpu_facts(pools.pol, pools.settings, [gpus[i] for i in places], now, until)
        pools = self.pools
        static = pools.static
        reorder = False
        for i, f, u in zip(places, fresh, until, strict=True):
            old = pools.facts[i]
            st, was = f.state, old.state
            if (was.spec is not st.spec and was.spec != st.spec) or was.host != st.host:
                pools.never_cache = {}
            uuid = st.uuid
            verdict = pools._classify(f)
            pools.facts[i] = f
            pools.by_uuid[uuid] = f
            pools.drain_stale.add(uuid)  # the next pass that needs the drain order places it again
            self.until[i] = u
            if uuid in static and isinstance(verdict, GpuVerdict):
                # unusable before and after: its verdict replaced in its place (the view order kept)
                static[uuid] = verdict
                pools._static_tuple = None
                continue
            reorder = reorder or uuid in static
            pools._take_out(old)
            pools._place_in_pool(f, verdict=verdict)
            reorder = reorder or uuid in static
        if reorder:  # the GPUs no request can use, in view order (as a fresh build lists them)
            place = pools.ordinal.__getitem__
            pools.static = {u: static[u] for u in sorted(static, key=place)}
            pools._static_tuple = None
            pools._static_counts = None
        self.soonest = min(self.until, default=NEVER)
        return True


_ENTRY = itemgetter(2)

__all__ = ["HEAD", "NO_REQUEST", "POOL_ORDER", "Entry", "PoolCache", "Pools", "Scanned", "Walk", "full_scan"]
