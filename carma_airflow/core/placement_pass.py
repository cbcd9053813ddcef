"""One placement pass: decisions against a copy of the view's pools, updated in place as the
pass places (candidates stay sorted by the policy's keys, so a decision usually looks at few GPUs).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Hashable, Iterable
from operator import itemgetter
from typing import TYPE_CHECKING

from carma_airflow.core.decision import Decision, GpuVerdict, Outcome, Reason
from carma_airflow.core.facts import GpuFacts, copy_facts, needs_idle, never_fits
from carma_airflow.core.filtering import Filter, Rejection, first_rejection
from carma_airflow.core.gpu_sets import first_set, set_key, spare_sets
from carma_airflow.core.placement_drains import DrainPass, KeptWaits
from carma_airflow.core.pools import HEAD, Entry, Pools, Scanned, Walk, checked, full_scan
from carma_airflow.core.reasons import (
    describe,
    rejected,
    scan_rejection,
    scan_verdicts,
    summary_of_counts,
    verdict,
    waiting_by_choice,
)
from carma_airflow.core.risk import is_high_risk
from carma_airflow.core.scarce import ScarceKeep, size_class
from carma_airflow.core.speed_keep import IdleIndex
from carma_airflow.core.task import TaskRequest
from carma_airflow.core.units import format_mib

if TYPE_CHECKING:
    from carma_airflow.core.policies.priced import Choice

PLACED_REJECTIONS = 8  # a placed decision keeps this many passed-over GPUs as its reasons
# a waiting decision without reasons, for a pass that only needs what it places (Placer.place)
WAITS = Decision("", Outcome.NOT_NOW, summary="waiting", policy="")
# the same where a GPU set could take the try but waiting was priced cheaper (a pricing policy):
# unlike WAITS, a try of another task type and the same shape may still be placed
WAITS_BY_CHOICE = Decision("", Outcome.NOT_NOW, summary="waiting (by choice)", policy="")


class PlacementPass(DrainPass):
    """One pass's pools: a copy of ``base`` (the view's pools, which stay as they are), updated in
    place as the pass places.  ``kept``: a pricing policy's waits kept from pass to pass (the
    placer's; :mod:`carma_airflow.core.placement_drains`)."""

    def __init__(self, base: Pools, kept: KeptWaits | None = None) -> None:
        self.base = base
        self.pol = base.pol
        self.settings = base.settings
        # the view's pools themselves until the pass places (most passes of a deep queue place
        # nothing): the first placement copies them (:meth:`_own`), the view's stay as they are
        self.facts = base.facts
        self.by_uuid = base.by_uuid
        self.ordinal = base.ordinal
        self.never_cache = base.never_cache
        self.idle = base.idle
        self.shared = base.shared
        self.by_free = base.by_free
        self.where = base.where
        self.static = base.static
        self.filters, self.every_gpu, self.shared_gpu = base.filters, base.every_gpu, base.shared_gpu
        self.every_checks, self.shared_checks, self.texts = base.every_checks, base.shared_checks, base.texts
        self.memory_fit, self.try_filters, self.asked_of = base.memory_fit, base.try_filters, base.asked_of
        self._owned = False
        self._static_tuple = base.static_rejections()
        self._static_counts = base._static_counts  # shared: never changed, only replaced
        # a policy that prices its options (completion-time): drain times by request shape, this pass
        self.chooser = self.pol.pricer()
        self.kept = kept if self.chooser is not None else None
        self._drains = {}
        self._scans = {}  # one-GPU drain walks, resumed after a claim or a placement (placement_drains)
        self._placed_on: list[str] = []  # the GPUs placed on in this pass, in turn (the walks replay them)
        self._claimed: set[str] = set()  # GPUs an earlier try of this pass waits to drain
        self._queued: dict[str, float] = {}  # per GPU claimed with a run, when the next could start there
        self._queue_heads: dict[str, list[tuple[float, str]]] = {}  # the same per model, soonest first
        self._runs_queued: dict[str, float] = {}  # per GPU claimed with a run, the claimants' runs there
        self._models_of: tuple[str, ...] | None = None  # the pass's GPU models (placement_drains)
        # tries that waited though a slower idle GPU was priced for them: the next of their shape
        # prices its own wait (behind their claims), so the memo of waiting shapes does not take it
        self.waited_over_idle: set[str] = set()
        self._order = None  # GPUs with tenants, by drain bound
        self._order_of = {}
        self._applied: set[str] = set()  # GPUs this pass placed on since its drain order counted them
        self.by_choice: Decision | None = None  # the last decision that waited by choice (explained)
        # the verdicts of this pass's scans by what their texts say (:meth:`_verdicts`): a pass's
        # decisions pass over the same full GPUs at the head of the order, request after request
        self._said: dict[tuple[object, ...], tuple[GpuFacts, GpuVerdict]] = {}
        # on a cluster of several GPU sizes, for a policy that keeps scarce GPUs: the waiting tries
        # the larger idle GPUs are kept for (the placer sets it; core/scarce.py)
        self.keep: ScarceKeep | None = None
        self._idle_index: IdleIndex | None = None  # the keep's count of the idle GPUs (asked first: made)
        self._room_after: dict[str, int] | None = None  # :meth:`_idle_room` (asked first: made)

    def _ordered(self, pool: list[Entry], request: TaskRequest, idle: bool) -> list[Entry]:
        if self.pol.stable_keys:
            return pool
        keyf = self.pol.idle_key if idle else self.pol.key
        return sorted(pool, key=lambda e: (keyf(e[2], request), e[1]))

    # decisions ---------------------------------------------------------------------------
    def decide(
        self, request: TaskRequest, reserved: frozenset[str], explain: bool = True, shape: Hashable | None = None
    ) -> Decision:
        """``explain``: False for a pass that only needs what it places, a waiting request then
        gets the shared :data:`WAITS` decision without reasons (and without the scans that
        only gather reasons).  ``shape``: the request's shape (the placer's), for a pricing
        policy's kept waits (only where ``explain`` is False)."""
        pol = self.pol
        # the policy's per-try filters this try needs (the memory fit aside: written out below)
        asked = self.asked(request)
        never = never_fits(pol, self.settings, request, self.facts, self.never_cache, asked)
        if never is not None:
            return Decision(request.key, Outcome.NEVER_FITS, summary=f"never fits: {never}", policy=pol.name)
        need = request.memory.mib
        filter_need = request.memory.filter_mib(self.settings.headroom_mib)
        idle_only = needs_idle(self.pol, request) or not pol.collocates
        checks_memory = self.memory_fit is not None
        # "could not estimate: whole GPU" takes any idle GPU; its number is a sentinel, not memory
        check_idle_memory = checks_memory and not request.memory.whole_gpu
        n = request.gpus
        avoid = request.avoid_gpus
        scanned: Scanned = []  # (GPU, reason, in collocation pool)
        refusing = pol.refuses_gpus
        notes: dict[str, Rejection] = {}  # the rejections of the policy's filters and refusals, by GPU
        avoided: list[GpuFacts] = []
        groups: dict[Hashable, list[GpuFacts]] = {}
        chosen: list[GpuFacts] | None = None
        chooser = self.chooser
        feasible: list[GpuFacts] = []  # a chooser's collocation candidates, to be priced
        limit = 0 if chooser is None else max(1, chooser.settings.candidates) * n
        choice: Choice | None = None
        scarce = self.keep if check_idle_memory else None  # a whole-GPU try's need is a sentinel

        # a multi-GPU try on a fleet priced per model: idle sets of one model first, then a mixed
        # one priced at its pace, or (the try a starvation hold protects) taken (core/gpu_sets.py)
        by_model = n > 1 and chooser is not None and chooser.paces()
        taken: list[GpuFacts] = []  # the idle GPUs grouped, in the idle order
        spare: list[GpuFacts] = []  # idle GPUs to price (not taken): a slower model's, or mixed sets
        # a one-GPU try on a fleet priced per model: an idle GPU of a model it runs slower on than
        # another model's is priced beside the collocations and waiting (core/speed_keep.py, slower)
        speed = None if scarce is None or n != 1 else scarce.speed
        slow = speed if speed is not None and speed.models is not None else None
        spare_slow: Callable[[str], bool] | None = None  # then: whether a model runs it faster

        def take(f: GpuFacts) -> list[GpuFacts] | None:
            if by_model:
                taken.append(f)
            group = groups.setdefault(set_key(f, by_model), [])
            group.append(f)
            return group if len(group) == n else None

        # the idle GPUs in order; the scan below stops early where every GPU after it lacks the
        # memory (on a mixed fleet: the small models' idle GPUs, last in the order) once it holds
        # what a placed decision keeps: a waiting decision that lists them all resumes it
        idle_left = iter(self._ordered(self.idle, request, True))
        room_after = self._idle_room() if check_idle_memory and pol.stable_keys else None
        idle_cut = False
        for _, _, f in idle_left:
            if asked and (refused := first_rejection(asked, f, request)) is not None:
                scanned.append((f, refused.reason, False))
                notes[f.uuid] = refused
            elif reserved and f.state.uuid in reserved:
                scanned.append((f, Reason.RESERVED, False))
            elif check_idle_memory and need > f.usable_free_mib:
                scanned.append((f, Reason.MEMORY, False))
                if room_after is not None and len(scanned) >= PLACED_REJECTIONS and need > room_after[f.uuid]:
                    idle_cut = True
                    break
            elif avoid and f.state.uuid in avoid:
                avoided.append(f)
            elif scarce is not None and (held := scarce.kept(f, request.key, need, self._idle_now())) is not None:
                scanned.append((f, held.reason, False))
                notes[f.uuid] = held
            else:
                if slow is not None and slow.slower(request, f.state.spec.name, need):
                    spare.append(f)
                    spare_slow = slow.faster_than(request, f.state.spec.name)
                    break
                chosen = take(f)
                if chosen is not None:
                    break
        idle_end = len(scanned)  # where a cut idle scan's records end (the rest go in there)
        if chosen is None and taken:
            if self.keep is not None and self.keep.protected == request.key:
                chosen = first_set(taken, n)
            else:
                spare = spare_sets(groups, n)
        fast = (
            chosen is None
            and n == 1
            and not idle_only
            and not asked
            and not reserved
            and not avoid
            and checks_memory
            and pol.stable_keys
            and not refusing
            and chooser is None
            and scarce is None
        )
        if fast:
            # same answer as the scan below: the first candidate in policy order with enough memory
            shared = self.shared
            at = self.first_fitting(filter_need)
            if at < len(shared):
                chosen = [shared[at][2]]
                # every GPU before it lacks the memory: the first of them are a placed decision's reasons
                keep = max(0, min(at, PLACED_REJECTIONS - len(scanned)))
                scanned.extend((f, Reason.MEMORY, True) for _, _, f in shared[:keep])
            elif not explain:
                return WAITS  # no collocation candidate has the memory; no avoided GPUs
        # no scan where it could only reject: every collocation candidate is busy for it, or none
        # has the memory (the by-memory index's largest has less), and no avoided GPU to fall back
        # on, so the request waits (a deep queue's large requests skip the scan)
        skip_scan = (
            not explain
            and not avoided
            and (idle_only or (checks_memory and (not self.by_free or self.by_free[-1][0] < filter_need)))
        )
        walk: Walk | None = None  # a scan that skips GPUs without the memory (:class:`Walk`)
        walked = walk_end = 0  # its records' places in ``scanned``
        if chosen is None and not skip_scan:
            pool: Iterable[Entry] = self._ordered(self.shared, request, False)
            # skipping where some candidate has the memory: else the scan rejects every GPU, and a
            # decision that lists them (``explain``) would have the walk's skipped ones put back
            has_room = bool(self.by_free) and self.by_free[-1][0] >= filter_need
            if checks_memory and pol.stable_keys and pol.free_key_at is not None and (has_room or not explain):
                pool = walk = Walk(self.shared, scanned, filter_need, pol.free_key_at, PLACED_REJECTIONS)
                walked = len(scanned)
            for _, _, f in pool:
                if asked and (refused := first_rejection(asked, f, request)) is not None:
                    scanned.append((f, refused.reason, True))
                    notes[f.uuid] = refused
                elif reserved and f.state.uuid in reserved:
                    scanned.append((f, Reason.RESERVED, True))
                elif idle_only:
                    scanned.append((f, Reason.BUSY, True))
                elif checks_memory and filter_need > f.usable_free_mib:
                    scanned.append((f, Reason.MEMORY, True))
                elif refusing and (refusal := pol.refuses(f, request)) is not None:
                    scanned.append((f, refusal.reason, True))
                    notes[f.uuid] = refusal
                elif avoid and f.state.uuid in avoid:
                    avoided.append(f)
                elif chooser is not None:
                    if spare_slow is not None and not spare_slow(f.state.spec.name):
                        continue  # the idle GPU priced runs it no slower: only faster models' compete
                    feasible.append(f)
                    if len(feasible) >= limit:
                        break
                else:
                    chosen = take(f)
                    if chosen is not None:
                        break
            walk_end = len(scanned)
        if chooser is not None and chosen is None and (feasible or avoided or spare):
            priced = feasible + spare if feasible or spare else avoided
            if not feasible and n > 1 and groups and avoided:
                # the avoided GPUs priced with the idle GPUs taken above (fewer than n on their host):
                # a multi-GPU retry that avoids one GPU of the only pair that holds it takes that pair
                # with the other (the fallback below does the same for a policy that does not price)
                priced = [f for group in groups.values() for f in group] + avoided
            kept = None if explain or shape is None or self.kept is None else (shape, reserved)
            if kept is not None and self._kept_wait_holds(kept, request, reserved, priced):
                if spare_slow is not None:
                    self.waited_over_idle.add(request.key)
                return WAITS_BY_CHOICE
            choice = chooser.choose(request, priced, lambda: self._drain(request, reserved), n)
            if choice.best is None:  # every GPU set refused (and waiting not priced): it waits
                for f in priced:
                    if explain and (note := choice.note(f)) is not None:
                        notes[f.uuid] = Rejection.said(pol.name, Reason.INTERFERENCE, note)
                        scanned.append((f, Reason.INTERFERENCE, True))
                choice = None
            elif choice.best.waits:
                if spare_slow is not None:
                    self.waited_over_idle.add(request.key)
                if choice.best.drained is not None:  # the next waiting try waits for the next GPU
                    if kept is not None:
                        self._keep_wait(kept, request, reserved, priced, choice)
                    self._claim(choice.best.drained, choice.best.taken if self._queues(request) else None)
                if not explain:
                    return WAITS_BY_CHOICE
                if walk is not None and walk.skipped:
                    scanned[walked:walk_end] = full_scan(
                        walk, scanned[walked:walk_end], asked, request, reserved, idle_only, notes
                    )
                if idle_cut:
                    scanned[idle_end:idle_end] = _idle_rest(idle_left, asked, request, reserved, notes)
                return self._waits_by_choice(request, choice, scanned, notes, filter_need)
            else:
                chosen = list(choice.best.gpus)
                # the priced GPUs' texts, after the scan's rejections: only those a placed decision keeps
                for f in priced:
                    if len(scanned) >= PLACED_REJECTIONS:
                        break
                    if (note := choice.note(f)) is not None:
                        notes[f.uuid] = Rejection.said(pol.name, Reason.INTERFERENCE, note)
                    if f.uuid in notes:
                        scanned.append((f, Reason.INTERFERENCE, True))
            avoided = []  # priced already: the avoided GPUs were the candidates where nothing else fits
        if chosen is None:
            for f in avoided:  # already in idle-then-policy order
                chosen = take(f)
                if chosen is not None:
                    break
        if chosen is None and not explain:
            return WAITS
        if chosen is None:
            if walk is not None and walk.skipped:  # a waiting decision lists every rejection
                scanned[walked:walk_end] = full_scan(
                    walk, scanned[walked:walk_end], asked, request, reserved, idle_only, notes
                )
            if idle_cut:  # (after the walk's: its records come after these)
                scanned[idle_end:idle_end] = _idle_rest(idle_left, asked, request, reserved, notes)
            mine = self._verdicts(scanned, request, notes)
            rejected = mine + self.static_rejections()
            counts = self._counts(scanned)
            headlines = {flt.reason: flt.headline(request) for flt in asked}
            summary = summary_of_counts(
                counts, len(self.facts), n=n, idle_only=idle_only, need=format_mib(filter_need), headlines=headlines
            )
            return Decision(request.key, Outcome.NOT_NOW, rejected=rejected, summary=summary, policy=pol.name)
        verdicts = tuple(verdict(f, None, self._chosen_detail(f, request, choice)) for f in chosen)
        where = ", ".join(f"GPU {f.index} ({f.state.spec.name})" for f in chosen)
        return Decision(
            request.key,
            Outcome.PLACED,
            gpu_uuids=tuple(f.uuid for f in chosen),
            chosen=verdicts,
            rejected=self._verdicts(scanned[:PLACED_REJECTIONS], request, notes) + self.static_rejections(),
            summary=f"placed on {where}: " + "; ".join(v.detail for v in verdicts),
            collocated=any(not f.idle for f in chosen),
            policy=pol.name,
        )

    def _idle_now(self) -> IdleIndex:
        index = self._idle_index
        if index is None:
            index = self._idle_index = IdleIndex((e[2] for e in self.idle), size_class)
        return index

    def _idle_room(self) -> dict[str, int]:
        """Per idle GPU (by UUID) the most usable memory of an idle GPU after it in the idle pool's
        order, as the pool is when first asked in the pass (-1 for the last): a bound from then on,
        since GPUs only leave the idle pool in a pass (:meth:`apply`)."""
        room = self._room_after
        if room is None:
            room = self._room_after = {}
            most = -1
            for _, _, f in reversed(self.idle):
                room[f.uuid] = most
                most = max(most, f.usable_free_mib)
        return room

    def _chosen_detail(self, f: GpuFacts, request: TaskRequest, choice: Choice | None = None) -> str:
        text = describe(f, [t.label for t in f.state.tenants] + (f.joined or []))
        if choice is not None and choice.best is not None:
            waiting = choice.wait_option()
            extra: str | None = choice.best.text(choice.timed)
            if waiting is not None:
                extra = f"{extra}; {waiting.text(choice.timed)}"
        else:
            extra = self.pol.describe(f, request)
        return text if extra is None else f"{text}; {extra}"

    def _waits_by_choice(
        self,
        request: TaskRequest,
        choice: Choice,
        scanned: list[tuple[GpuFacts, Reason, bool]],
        notes: dict[str, Rejection],
        filter_need: int,
    ) -> Decision:
        """A try that could share a GPU now but is predicted to finish sooner, slowing nobody, if it waits."""
        for o in choice.options:
            for f in o.gpus:
                note = choice.note(f)
                if note is not None and f.uuid not in notes:
                    notes[f.uuid] = Rejection.said(self.pol.name, Reason.INTERFERENCE, note)
                    scanned.append((f, Reason.INTERFERENCE, True))
        mine = self._verdicts(scanned, request, notes)
        counts = self._counts(scanned)
        summary = waiting_by_choice(
            counts, len(self.facts), n=request.gpus, need=format_mib(filter_need), wait=choice.best_text()
        )
        self.by_choice = Decision(
            request.key,
            Outcome.NOT_NOW,
            rejected=mine + self.static_rejections(),
            summary=summary,
            policy=self.pol.name,
        )
        return self.by_choice

    def _counts(self, scanned: Scanned) -> dict[Reason, int]:
        """The reasons of a scan's verdicts and of the GPUs no request can use, counted (as
        :func:`~carma_airflow.core.reasons.count_reasons` counts them)."""
        counts = dict(self.static_counts())
        for reason, count in Counter(map(_REASON, scanned)).items():
            counts[reason] = counts.get(reason, 0) + count
        return counts

    def _verdicts(
        self, scanned: Scanned, request: TaskRequest, notes: dict[str, Rejection] | None = None
    ) -> tuple[GpuVerdict, ...]:
        """:func:`~carma_airflow.core.reasons.scan_verdicts`, each verdict kept for the pass by
        what its text says: the GPU (its facts object, with the fields the text reads), the reason
        and the request's number the text names (a policy's own notes are not kept)."""
        said = self._said
        headroom = self.settings.headroom_mib
        need, filter_need = request.memory.mib, request.memory.filter_mib(headroom)
        out: list[GpuVerdict] = []
        for record in scanned:
            f, reason, shared = record
            if notes and notes.get(f.state.uuid) is not None:
                out.extend(scan_verdicts((record,), request, headroom, notes))
                continue
            if reason in _UNNAMED:
                named: object = None
            else:
                named = filter_need if shared else need
            # a reason by its id: the members are singletons, and an enum's hash is a Python call
            key = (id(f), f.usable_free_mib, f.tenants, id(reason), shared, named)
            got = said.get(key)
            if got is None or got[0] is not f:
                got = said[key] = (f, rejected(f, scan_rejection(f, reason, shared, request, headroom, None)))
            out.append(got[1])
        return tuple(out)

    def _own(self) -> None:
        """The pass's own copies of the view's pools, to change as it places."""
        if self._owned:
            return
        base = self.base
        self.facts = list(base.facts)
        self.by_uuid = dict(base.by_uuid)
        self.idle = list(base.idle)
        self.shared = list(base.shared)
        self.by_free = list(base.by_free)
        self.where = dict(base.where)
        self.static = dict(base.static)
        self._owned = True

    def apply(self, request: TaskRequest, decision: Decision) -> None:
        """Account a placement inside the pass and move the GPUs to their new pools."""
        self._own()
        chosen = []
        index = self._idle_index
        self._drains = {}
        for uuid in decision.gpu_uuids:
            old = self.by_uuid[uuid]
            if index is not None:
                index.take(old)
            self._take_out(old)
            f = copy_facts(old)  # the view's facts stay as they are (the placer keeps them)
            self.by_uuid[uuid] = f
            self.facts[self.ordinal[uuid]] = f
            chosen.append(f)
            f.usable_free_mib -= request.memory.mib
            f.tenants += 1
            f.joined = [*(f.joined or []), request.label]
            f.idle = False
            f.exclusive_tenant = f.exclusive_tenant or needs_idle(self.pol, request)
            f.locked = True
            if self.pol.uses_reservations:
                f.smact += self.settings.activity_prior
                f.high_risk = is_high_risk(f.smact, f.smocc, f.drama, self.settings.risk)
            self._place_in_pool(f)
            if self.chooser is not None:
                self._applied.add(uuid)  # placed in the drain order again when a decision asks for it
                self._placed_on.append(uuid)  # and played again by the drain walks that passed it
                if uuid in self._queued:  # tries of the pass wait for it: they start after its new drain
                    self._requeue(f)
        self.pol.rotate(chosen, len(self.facts))
        if self.keep is not None:
            self.keep.placed(request.memory.mib, request.gpus)


def _idle_rest(
    rest: Iterable[Entry],
    asked: tuple[Filter, ...],
    request: TaskRequest,
    reserved: frozenset[str],
    notes: dict[str, Rejection],
) -> Scanned:
    """The records the idle scan of :meth:`PlacementPass.decide` gives the idle GPUs it stopped
    before, each lacking the memory: the first reason of its checks, in their order (``asked``:
    the policy's per-try filters the try needs, whose rejections go to ``notes``)."""
    out: Scanned = []
    for _, _, f in rest:
        out.append((f, checked(asked, f, request, reserved, notes) or Reason.MEMORY, False))
    return out


_REASON = itemgetter(1)
# reasons whose texts name no memory figure of the try (their verdicts are kept alike whatever it asks)
_UNNAMED = frozenset((Reason.RESERVED, Reason.BUSY, Reason.KEPT, Reason.KEPT_FASTER))

__all__ = ["HEAD", "PLACED_REJECTIONS", "WAITS", "WAITS_BY_CHOICE", "PlacementPass"]
