"""A pricing policy's side of a placement pass: when GPUs drain, and the waits kept from pass to pass.

:class:`DrainPass` is the part of :class:`~carma_airflow.core.placement_pass.PlacementPass` that
prices waiting for the completion-time policy: the GPUs with tenants in the order of the earliest
they can drain (kept with the view's pools from pass to pass), the drain time of a request's shape,
and the GPUs earlier waiting tries of the pass count on (claimed).

**Kept waits.**  A try that waited by choice waits again in a later pass without being priced
again while what its prices rest on stayed (:meth:`DrainPass._kept_wait_holds`): the same forecast
(its version); the collocation candidates at their prices then where they are the same facts
objects (nothing changed on them but the clock), the others priced now; the GPU it waits for
unchanged and not claimed by an earlier try of the pass; no GPU that could drain before it other
than those it looked at then; the clock moved on by less than :data:`MAX_AGE` (2 %) of the waiting
option's cost; and waiting still the cheapest at the queue's weight now (each option's cost is
kept as its own part plus the GPU-seconds it takes, which the queue's weight multiplies).  A try
decided for its reasons (``carma why``) is always priced afresh.

**Refused tries.**  A try whose every candidate completion-time's floor (``min_gain``) refuses waits
for the soonest drain without being played forward (:meth:`DrainPass._refused_waits`).
"""

from __future__ import annotations

import bisect
import heapq
from collections.abc import Callable, Collection, Hashable, Iterator
from dataclasses import dataclass, field
from operator import is_, itemgetter
from typing import TYPE_CHECKING

from carma_airflow.core.drain_order import Drain, drop, entry, settle
from carma_airflow.core.drain_order import place as place_in_order
from carma_airflow.core.facts import GpuFacts
from carma_airflow.core.gpu import GpuState
from carma_airflow.core.pools import Pools
from carma_airflow.core.task import TaskRequest

if TYPE_CHECKING:
    from carma_airflow.core.policies.completion_time import CompletionTime
    from carma_airflow.core.policies.priced import Choice

Ever = Callable[[GpuState], bool] | None  # whether a GPU could ever take the try (None: any could)

MAX_AGE = 0.02  # a kept wait is priced again once the clock moved by this share of its cost
KEPT = 4096  # kept waits at most (then forgotten, all at once)


@dataclass(slots=True)
class _Scan:
    """A one-GPU drain walk of a pass (:meth:`DrainPass._drain_one`): the usable GPUs it played,
    not claimed or placed on since, by id and by uuid, with their totals as a heap of (drain plus
    the try's run there, or the drain; the entry's time and place, which order the walk; the count
    of entries pushed before it; facts; drain) (those no longer played leave it when they come up),
    the last entry of the order it looked at (None: none), and how many of the pass's placements
    it has replayed."""

    seen: dict[int, GpuFacts] = field(default_factory=dict)
    by_uuid: dict[str, GpuFacts] = field(default_factory=dict)
    ranked: list[tuple[float, float, int, int, GpuFacts, float]] = field(default_factory=list)
    last: tuple[float, int] | None = None
    replayed: int = 0
    # entries pushed, the heap's last key (never equal): a GPU placed on keeps its place and may keep
    # its time and total, and its stale entry and its new one would otherwise tie up to the facts
    played: int = 0


def _play(
    scan: _Scan, f: GpuFacts, at: float, place: int, drain: float, run: Callable[[str], float] | None
) -> tuple[float, float]:
    """Play a usable GPU into a drain walk (its entry's time ``at`` and ``place``, its drain), the
    one place a walk's heap entry is made (the walk and :meth:`DrainPass._replay` alike); (its
    total, its drain)."""
    total = drain if run is None else drain + run(f.state.spec.name)
    scan.seen[id(f)] = f
    scan.by_uuid[f.state.uuid] = f
    scan.played += 1
    heapq.heappush(scan.ranked, (total, at, place, scan.played, f, drain))
    return total, drain


@dataclass(frozen=True, slots=True)
class KeptWait:
    """What a wait by choice rested on (see the module doc)."""

    at: float
    version: object
    priced: tuple[GpuFacts, ...]  # the collocation candidates priced, in order
    drained: GpuFacts  # the GPU it waits for
    drain_at: float  # when that GPU drains (absolute)
    early: dict[int, GpuFacts]  # the usable GPUs the drain looked at, by id
    wait: tuple[float, float]  # waiting: (cost less the queue's share, GPU-seconds taken)
    shares: tuple[tuple[float, float], ...]  # each collocation likewise


class KeptWaits:
    """The waits by choice kept from pass to pass, by request shape and reserved GPUs (a placer's)."""

    def __init__(self) -> None:
        self.by_key: dict[Hashable, KeptWait] = {}
        self.reused = 0  # waits kept instead of priced (a count for benches)
        self.refused = 0  # tries every candidate of which the floor refused, not played forward (likewise)

    def keep(self, key: Hashable, wait: KeptWait) -> None:
        if len(self.by_key) >= KEPT:
            self.by_key = {}
        self.by_key[key] = wait


class DrainPass(Pools):
    """The drain order and kept waits of one pass (the attributes are set by the pass)."""

    base: Pools
    chooser: CompletionTime | None
    kept: KeptWaits | None
    _drains: dict[tuple[object, ...], tuple[float, GpuFacts | None, dict[int, GpuFacts]]]
    _claimed: set[str]
    _queued: dict[str, float]  # per GPU claimed with a run: when a try queued behind its claims could start
    _runs_queued: dict[str, float]  # and the runs there of the tries that claimed it
    _queue_heads: dict[str, list[tuple[float, str]]]  # per model, those starts (a heap; stale ones dropped late)
    _models_of: tuple[str, ...] | None
    _order: list[Drain] | None
    _order_of: dict[str, Drain]
    _applied: set[str]
    _scans: dict[tuple[object, ...], _Scan]
    _placed_on: list[str]

    def _ever(self, request: TaskRequest) -> tuple[Ever, Hashable]:
        """Whether a GPU could ever take ``request`` as the policy's per-try filters that the try
        needs see it (None: every GPU could), and what of the request they read."""
        asked = self.base.asked(request)
        if not asked:
            return None, ()
        key = tuple(flt.request_key(request) for flt in asked)
        if len(asked) == 1:
            ever = asked[0].ever
            return (lambda st: ever(st, request)), key
        return (lambda st: all(flt.ever(st, request) for flt in asked)), key

    def _usable(self, f: GpuFacts, need: int, ever: Ever, reserved: frozenset[str]) -> bool:
        return (
            f.state.spec.memory_mib >= need
            and (ever is None or ever(f.state))
            and not (reserved and f.uuid in reserved)
            and f.uuid not in self._claimed
        )

    def _drain(self, request: TaskRequest, reserved: frozenset[str]) -> tuple[float, GpuFacts | None]:
        """The chooser's drain time for a request of this shape (kept until the pass places): the
        GPUs with tenants in the order of their lower bound (the longest work left), played
        forward only while the bound beats the soonest drain found."""
        seconds, where, _ = self._drain_seen(request, reserved)
        return seconds, where

    def _drain_seen(
        self, request: TaskRequest, reserved: frozenset[str]
    ) -> tuple[float, GpuFacts | None, dict[int, GpuFacts]]:
        """:meth:`_drain`, with the usable GPUs it looked at (by id)."""
        chooser = self.chooser
        assert chooser is not None
        need = request.memory.mib + self.settings.reserve_mib
        wanted, asks = self._ever(request)
        key = (asks, request.gpus, need, reserved)
        got = self._drains.get(key)
        if got is not None:
            return got
        n = request.gpus
        if self._queues(request):
            # its drain is the soonest drain plus run at the drained GPU's model's pace, queued behind
            # the pass's claims (:meth:`_drain_paced`): kept by the try's runs per model as well
            pace = chooser.runs_by_model(request)
            by_pace = (*key, *(pace(m) for m in self._models()))
            got = self._drains.get(by_pace)
            if got is None:
                got = self._drains[by_pace] = self._drain_paced(by_pace, need, wanted, reserved, pace)
            return got
        if n == 1:
            drain, where, seen = self._drain_one(key, need, wanted, reserved)[1:]
            got = self._drains[key] = (drain, where, seen)
            return got
        run = chooser.runs_by_model(request) if chooser.paces() else None
        got = self._drains[key] = self._drain_sets(n, need, wanted, reserved, run)
        return got

    def _models(self) -> tuple[str, ...]:
        """The pass's GPU models (asked first: made)."""
        models = self._models_of
        if models is None:
            models = self._models_of = tuple(sorted({f.state.spec.name for f in self.facts}))
        return models

    def _drain_paced(
        self,
        key: tuple[object, ...],
        need: int,
        wanted: Ever,
        reserved: frozenset[str],
        run: Callable[[str], float],
    ) -> tuple[float, GpuFacts | None, dict[int, GpuFacts]]:
        """:meth:`_drain_seen` of a one-GPU try on a fleet priced per model (``run``: its run per
        model): the GPU whose drain plus the try's run on its model ends soonest (:meth:`_drain_one`
        with ``run``: its walk resumed after a claim as well); then the GPUs earlier tries of the
        pass wait for, each after those tries' runs there (:meth:`_claim`), the soonest per model.
        The wait returned is the time until it could start there."""
        best_total, best, where, seen = self._drain_one(key, need, wanted, reserved, run)
        for model, heap in self._queue_heads.items():  # behind the claims, the soonest start per model
            ahead = run(model)
            for start, uuid in self._valid(heap):
                if start + ahead >= best_total:
                    break
                g = self.by_uuid[uuid]
                st = g.state
                if (
                    st.spec.memory_mib < need
                    or (wanted is not None and not wanted(st))
                    or (reserved and uuid in reserved)
                ):
                    continue
                best_total, best, where = start + ahead, start, g
                break
        return best, where, seen

    def _valid(self, heap: list[tuple[float, str]]) -> Iterator[tuple[float, str]]:
        """A model's claimed GPUs by when a try queued behind their claims could start, soonest first
        (entries a later claim made stale dropped)."""
        queued = self._queued
        while heap and heap[0][0] != queued.get(heap[0][1]):
            heapq.heappop(heap)
        if not heap:
            return
        yield heap[0]
        for later in sorted(heap[1:]):  # the first did not fit: the rest in order (rare)
            if later[0] == queued.get(later[1]):
                yield later

    def _drain_sets(
        self, n: int, need: int, wanted: Ever, reserved: frozenset[str], run: Callable[[str], float] | None
    ) -> tuple[float, GpuFacts | None, dict[int, GpuFacts]]:
        """:meth:`_drain_seen` of a request for ``n`` GPUs: the GPUs with tenants in drain order, per
        host, the set whose ``n``-th drain is soonest.  On a fleet priced per model (``run``: the
        try's run per model; core/gpu_sets.py) sets are counted per host and model and per host,
        and the soonest drain plus run at the set's pace (its slowest model's) wins; the GPU
        returned is then the set's slowest (whose model the chooser prices the run on)."""
        chooser = self.chooser
        assert chooser is not None
        best_total, best, where = float("inf"), float("inf"), None
        seen: dict[int, GpuFacts] = {}
        groups: dict[Hashable, list[tuple[float, int, GpuFacts]]] = {}
        now, claimed, drained = chooser.now, self._claimed, chooser.drained
        order, order_of, k = self._drain_order(), self._order_of, 0
        fastest = 0.0 if run is None else min(run(m) for m in self._models())
        while k < len(order):
            at, place, f, made = order[k]
            if at - now + fastest >= best_total:  # every set after this one drains later (and runs no faster)
                break
            st = f.state  # :meth:`_usable`, written out: a pass walks thousands of these
            if (
                st.spec.memory_mib < need
                or (wanted is not None and not wanted(st))
                or (reserved and st.uuid in reserved)
                or st.uuid in claimed
            ):
                k += 1
                continue
            if made is not None:  # a loose bound: the GPU to its place, and look at this place again
                settle(order, order_of, k, chooser)
                continue
            k += 1
            seen[id(f)] = f
            drain = drained(f)
            for gkey in (st.host,) if run is None else ((st.host, st.spec.name), st.host):
                group = groups.setdefault(gkey, [])
                bisect.insort(group, (drain, place, f), key=itemgetter(0, 1))
                if len(group) < n:
                    continue
                if run is None:
                    slow, total = group[n - 1][2], group[n - 1][0]
                else:
                    slow = max(group[:n], key=lambda t: run(t[2].state.spec.name))[2]
                    total = group[n - 1][0] + run(slow.state.spec.name)
                if total < best_total:
                    best_total, best, where = total, group[n - 1][0], slow
        return best, where, seen

    def _drain_one(
        self,
        key: tuple[object, ...],
        need: int,
        wanted: Ever,
        reserved: frozenset[str],
        run: Callable[[str], float] | None = None,
    ) -> tuple[float, float, GpuFacts | None, dict[int, GpuFacts]]:
        """(soonest total, its drain, its GPU, the GPUs looked at) of a one-GPU request: the usable
        GPU whose drain (plus, with ``run``, the try's run on its model) ends soonest, walking the
        drain order while its bound (plus the try's fastest run) beats the soonest found.

        Resumed when the next waiting try of this shape asks: the GPUs it played keep their drains
        and places, less those claimed since (a claim only takes GPUs out of the order) and those
        placed on since, and the walk goes on where it stopped.  A GPU placed on has new facts and
        a new entry, no earlier where it had tenants (a tenant more drains no sooner), anywhere
        where it was idle: where the entry is at or before the walk's last, the walk plays it now
        (:meth:`_replay`), as walking afresh would have come to it; later ones the walk meets as it
        goes on.  So the GPUs played up to the last entry are those a walk afresh plays, and the
        soonest total among them, the first in the order of equal ones, is the same; a walk afresh
        could stop sooner (a new entry early with a short drain), and what it looked at is then a
        part of what the resumed walk returns."""
        chooser = self.chooser
        assert chooser is not None
        now, claimed, drained = chooser.now, self._claimed, chooser.drained
        fastest = 0.0 if run is None else min(run(m) for m in self._models())
        order = self._drain_order()
        scan = self._scans.get(key)
        placed_on = self._placed_on
        if scan is None:
            scan = self._scans[key] = _Scan(replayed=len(placed_on))
            start = 0
        else:
            seen, by_uuid = scan.seen, scan.by_uuid
            for uuid in by_uuid.keys() & claimed:  # claimed since: out of what it played
                del seen[id(by_uuid.pop(uuid))]
            if scan.replayed < len(placed_on):
                self._replay(scan, need, wanted, reserved, run)
            start = 0 if scan.last is None else bisect.bisect_right(order, scan.last, key=itemgetter(0, 1))
        seen, by_uuid, ranked = scan.seen, scan.by_uuid, scan.ranked
        while ranked and by_uuid.get(ranked[0][4].state.uuid) is not ranked[0][4]:  # claimed or placed on since
            heapq.heappop(ranked)
        # the soonest total played, the first in the order of equal ones (places are unique)
        best, drain_at, where = (ranked[0][0], ranked[0][5], ranked[0][4]) if ranked else (float("inf"), 0.0, None)
        order_of, k = self._order_of, start
        while k < len(order):
            at, place, f, made = order[k]
            if at - now + fastest >= best:  # every GPU after this one drains later still
                break
            st = f.state  # :meth:`_usable`, written out: a pass walks thousands of these
            usable = not (
                st.spec.memory_mib < need
                or (wanted is not None and not wanted(st))
                or (reserved and st.uuid in reserved)
                or st.uuid in claimed
            )
            if usable and made is not None:  # a loose bound: the GPU to its place, this place again
                settle(order, order_of, k, chooser)
                continue
            scan.last = (at, place)
            k += 1
            if not usable:
                continue
            total, drain = _play(scan, f, at, place, drained(f), run)
            if total < best:
                best, drain_at, where = total, drain, f
        if where is None:
            drain_at = float("inf")
        return best, drain_at, where, dict(seen)

    def _replay(
        self, scan: _Scan, need: int, wanted: Ever, reserved: frozenset[str], run: Callable[[str], float] | None
    ) -> None:
        """Bring a resumed walk up to date with the GPUs placed on since it last walked: each out of
        what it played, and played again where its entry now lies at or before the walk's last (a
        loose entry settled first, as the walk would have)."""
        chooser = self.chooser
        assert chooser is not None
        placed_on, seen, by_uuid, last = self._placed_on, scan.seen, scan.by_uuid, scan.last
        fresh = dict.fromkeys(placed_on[scan.replayed :])  # in turn: a pass decides the same each run
        scan.replayed = len(placed_on)
        order, order_of = self._order or [], self._order_of
        for uuid in fresh:
            if (old := by_uuid.pop(uuid, None)) is not None:
                del seen[id(old)]
            e = order_of.get(uuid)
            if e is None or last is None or (e[0], e[1]) > last or not self._usable(e[2], need, wanted, reserved):
                continue
            if e[3] is not None:  # a loose bound: to its place first, which may be past the walk's last
                settle(order, order_of, bisect.bisect_left(order, (e[0], e[1]), key=itemgetter(0, 1)), chooser)
                e = order_of[uuid]
                if (e[0], e[1]) > last:
                    continue
            at, place, f, _ = e
            _play(scan, f, at, place, chooser.drained(f), run)

    def _drain_order(self) -> list[Drain]:
        """The GPUs with tenants by the earliest they can drain (absolute time, a lower bound):
        kept with the view's pools from pass to pass (the GPUs whose facts changed placed again),
        copied for this pass and brought up to date with its placements only when asked."""
        if self._order is None:
            chooser = self.chooser
            assert chooser is not None
            base = self.base
            version = chooser.forecast_version()
            stale: Collection[str] = base.drain_stale
            if base.drains is None or base.drain_version != version:  # every GPU placed anew
                base.drains, base.drain_of, base.drain_version, stale = [], {}, version, list(base.by_uuid)
            if 4 * len(stale) > len(base.facts):
                # most facts new (each heartbeat's reading): sorted once, as placing each would order them
                for uuid in stale:
                    base.drain_of.pop(uuid, None)
                    if (got := entry(base.by_uuid[uuid], base.ordinal, chooser)) is not None:
                        base.drain_of[uuid] = got
                base.drains = sorted(base.drain_of.values(), key=itemgetter(0, 1))
            else:
                for uuid in stale:
                    place_in_order(base.drains, base.drain_of, base.by_uuid[uuid], base.ordinal, chooser)
            base.drain_stale = set()
            self._order, self._order_of = list(base.drains), dict(base.drain_of)
            for uuid in self._claimed:
                self._claim(self.by_uuid[uuid])
        while self._applied:  # placed on since it was last asked: placed again, by their facts now
            self._reorder(self.by_uuid[self._applied.pop()])
        return self._order

    def _requeue(self, f: GpuFacts) -> None:
        """When a try queued behind the claims on ``f`` could start: its drain plus the claimants' runs."""
        assert self.chooser is not None
        at = self._queued[f.uuid] = self.chooser.drained(f) + self._runs_queued[f.uuid]
        heapq.heappush(self._queue_heads.setdefault(f.state.spec.name, []), (at, f.uuid))

    def _queues(self, request: TaskRequest) -> bool:
        """Whether a one-GPU try's wait queues behind earlier claims (:meth:`_drain_paced`)."""
        chooser = self.chooser
        return request.gpus == 1 and chooser is not None and chooser.settings.price_slow_idle and chooser.paces()

    def _claim(self, f: GpuFacts, run: float | None = None) -> None:
        """A waiting try counts on this GPU draining: later tries of the pass count on others (or,
        ``run``: its run there, on this GPU after it: :meth:`_drain_paced`)."""
        self._claimed.add(f.uuid)
        if run is not None:
            self._runs_queued[f.uuid] = self._runs_queued.get(f.uuid, 0.0) + run
            self._requeue(f)
        self._drains = {}
        if (gone := self._order_of.pop(f.uuid, None)) is not None and self._order is not None:
            drop(self._order, gone)

    def _reorder(self, f: GpuFacts) -> None:
        """A GPU's facts changed (a placement): its place in this pass's drain order."""
        if self._order is not None and f.uuid not in self._claimed:
            assert self.chooser is not None
            place_in_order(self._order, self._order_of, f, self.ordinal, self.chooser)

    # -- kept waits ---------------------------------------------------------------------------
    def _keep_wait(
        self, key: Hashable, request: TaskRequest, reserved: frozenset[str], priced: list[GpuFacts], choice: Choice
    ) -> None:
        """Keep a one-GPU wait by choice for the next passes (before its GPU is claimed)."""
        chooser, kept, best = self.chooser, self.kept, choice.best
        if chooser is None or kept is None or best is None or best.drained is None or request.gpus != 1:
            return
        if len(priced) != sum(1 for o in choice.options if not o.waits):
            return
        seconds, where, seen = self._drain_seen(request, reserved)
        if where is not best.drained:
            return
        shares = tuple((o.cost - o.queue, o.taken) for o in choice.options if not o.waits)
        wait = KeptWait(
            chooser.now,
            chooser.wait_version(),
            tuple(priced),
            where,
            chooser.now + seconds,
            seen,
            (best.cost - best.queue, best.taken),
            shares,
        )
        kept.keep(key, wait)

    def _kept_wait_holds(
        self, key: Hashable, request: TaskRequest, reserved: frozenset[str], priced: list[GpuFacts]
    ) -> bool:
        """Whether a kept wait of this shape still holds (the module doc), or else every candidate
        is refused by the floor (:meth:`_refused_waits`); if so the GPU it waits for is claimed."""
        chooser, kept = self.chooser, self.kept
        if chooser is None or kept is None:
            return False
        if request.gpus == 1 and self._kept_wait_still(key, request, reserved, priced, chooser, kept):
            return True
        return self._refused_waits(key, request, reserved, priced, chooser, kept)

    def _kept_wait_still(
        self,
        key: Hashable,
        request: TaskRequest,
        reserved: frozenset[str],
        priced: list[GpuFacts],
        chooser: CompletionTime,
        kept: KeptWaits,
    ) -> bool:
        k = kept.by_key.get(key)
        if k is None:
            return False
        now = chooser.now
        drained = k.drained
        if (
            now - k.at > MAX_AGE * k.wait[0]
            or k.version != chooser.wait_version()
            or self.by_uuid.get(drained.uuid) is not drained
            or drained.uuid in self._claimed
        ):
            return False
        qw = chooser.queue_weight
        wait = k.wait[0] + qw * k.wait[1]  # the costs as priced then, at the queue's weight now
        if len(priced) == len(k.priced) and all(map(is_, priced, k.priced)):  # the same candidates
            if any(own + qw * taken <= wait for own, taken in k.shares):
                return False
        else:
            then = {id(f): (f, share) for f, share in zip(k.priced, k.shares, strict=True)}
            for f in priced:  # a candidate that changed (or is new) is priced now, the others kept
                got = then.get(id(f))
                own, taken = got[1] if got is not None and got[0] is f else chooser.price_one(request, f)
                if own + qw * taken <= wait:
                    return False
        need = request.memory.mib + self.settings.reserve_mib
        ever = self._ever(request)[0]
        order, order_of, early, i = self._drain_order(), self._order_of, k.early, 0
        while i < len(order):  # the GPUs that could drain no later
            at, _, f, made = order[i]
            if at >= k.drain_at:
                break
            if early.get(id(f)) is f or f is drained or not self._usable(f, need, ever, reserved):
                i += 1
            elif made is not None:  # a loose bound: the GPU to its place, this place again
                settle(order, order_of, i, chooser)
            else:
                return False  # a GPU not looked at then could drain first
        self._claim(drained, k.wait[1] if self._queues(request) else None)
        kept.reused += 1
        return True

    def _refused_waits(
        self,
        key: Hashable,
        request: TaskRequest,
        reserved: frozenset[str],
        priced: list[GpuFacts],
        chooser: CompletionTime,
        kept: KeptWaits,
    ) -> bool:
        """A try whose every candidate the floor refuses waits for the soonest drain, as
        :meth:`CompletionTime.choose` would decide (every GPU set refused: waiting is the only
        option), without playing the candidates forward with it (what dominates a deep queue's
        pass with the floor on); its wait is kept as :meth:`_keep_wait` keeps it.  Where no GPU
        could drain for it (waiting not priced) the policy decides."""
        if not chooser.has_floor() or not chooser.settings.waits:
            return False
        fc = chooser.forecast
        if not fc.timed():
            return False
        new = fc.newcomer(request)  # what choose would ask first (it learns a request's activity)
        for f in priced:
            if chooser.floor_refuses(f, new) is None:
                return False
        for f in priced:  # what pricing them would keep (the drains the order is built by)
            chooser.drained(f)
        seconds, where, seen = self._drain_seen(request, reserved)
        if where is None or not seconds < float("inf"):
            return False
        n = request.gpus
        if n == 1:
            # _keep_wait's wait, its figures worked out as choose's waiting option has them
            work = max(new.work, 1e-9)
            q = chooser.queue_weight * work * n
            total = (seconds + work) * chooser.factors()[0]  # as choose prices it (its track record)
            refused = tuple((float("inf"), 0.0) for _ in priced)  # never cheaper than waiting
            version = chooser.wait_version()
            wait = (total + q - q, work * n)
            kept.keep(
                key, KeptWait(chooser.now, version, tuple(priced), where, chooser.now + seconds, seen, wait, refused)
            )
        self._claim(where)
        kept.refused += 1
        return True


__all__ = ["KEPT", "MAX_AGE", "DrainPass", "KeptWait", "KeptWaits"]
