"""One placement pass: decisions against a copy of the view's pools, updated in place as the
pass places (candidates stay sorted by the policy's keys, so a decision usually looks at few GPUs).
"""

from __future__ import annotations

import bisect
from operator import itemgetter

from carma_airflow.core.decision import Decision, GpuVerdict, Outcome, Reason
from carma_airflow.core.facts import copy_facts, model_matches, needs_idle, never_fits
from carma_airflow.core.policies.base import GpuFacts
from carma_airflow.core.pools import Entry, Pools
from carma_airflow.core.reasons import count_reasons, describe, scan_verdicts, summary_of_counts, verdict
from carma_airflow.core.risk import is_high_risk
from carma_airflow.core.task import TaskRequest
from carma_airflow.core.units import format_mib

PLACED_REJECTIONS = 8  # a placed decision keeps this many passed-over GPUs as its reasons
HEAD = 16  # candidates looked at in order before the by-memory index is asked
# a waiting decision without reasons, for a pass that only needs what it places (Placer.place)
WAITS = Decision("", Outcome.NOT_NOW, summary="waiting", policy="")


class PlacementPass(Pools):
    """One pass's pools: a copy of ``base`` (the view's pools, which stay as they are), updated in
    place as the pass places."""

    def __init__(self, base: Pools) -> None:
        self.pol = base.pol
        self.settings = base.settings
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

    def _ordered(self, pool: list[Entry], request: TaskRequest, idle: bool) -> list[Entry]:
        if self.pol.stable_keys:
            return pool
        keyf = self.pol.idle_key if idle else self.pol.key
        return sorted(pool, key=lambda e: (keyf(e[2], request), e[1]))

    # decisions ---------------------------------------------------------------------------
    def decide(self, request: TaskRequest, reserved: frozenset[str], explain: bool = True) -> Decision:
        """``explain``: False for a pass that only needs what it places, a waiting request then
        gets the shared :data:`WAITS` decision without reasons (and without the scans that
        only gather reasons)."""
        pol = self.pol
        never = never_fits(pol, self.settings, request, self.facts, self.never_cache)
        if never is not None:
            return Decision(request.key, Outcome.NEVER_FITS, summary=f"never fits: {never}", policy=pol.name)
        need = request.memory.mib
        filter_need = request.memory.filter_mib(self.settings.headroom_mib)
        idle_only = needs_idle(self.pol, request) or not pol.collocates
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
            for _, _, f in self.shared[:HEAD]:
                if filter_need <= f.usable_free_mib:
                    chosen = [f]
                    break
                scanned.append((f, Reason.MEMORY, True))
            if chosen is None:
                i = bisect.bisect_left(self.by_free, (filter_need, -1), key=lambda e: (e[0], e[1]))
                if i < len(self.by_free):
                    chosen = [min(self.by_free[i:], key=itemgetter(2))[2][2]]
                elif not explain:
                    return WAITS  # no collocation candidate has the memory; no avoided GPUs
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
            return WAITS
        if chosen is None:
            mine = self._verdicts(scanned, request, notes)
            rejected = mine + self.static_rejections()
            counts = count_reasons(mine, dict(self.static_counts()))
            summary = summary_of_counts(
                counts, len(self.facts), n=n, idle_only=idle_only, need=format_mib(filter_need), model=wanted
            )
            return Decision(request.key, Outcome.NOT_NOW, rejected=rejected, summary=summary, policy=pol.name)
        verdicts = tuple(verdict(f, None, self._chosen_detail(f, request)) for f in chosen)
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

    def _chosen_detail(self, f: GpuFacts, request: TaskRequest) -> str:
        text = describe(f, [t.label for t in f.state.tenants] + (f.joined or []))
        extra = self.pol.describe(f, request)
        return text if extra is None else f"{text}; {extra}"

    def _verdicts(
        self,
        scanned: list[tuple[GpuFacts, Reason, bool]],
        request: TaskRequest,
        notes: dict[str, str] | None = None,
    ) -> tuple[GpuVerdict, ...]:
        return scan_verdicts(scanned, request, self.settings.headroom_mib, notes)

    def apply(self, request: TaskRequest, decision: Decision) -> None:
        """Account a placement inside the pass and move the GPUs to their new pools."""
        chosen = []
        for uuid in decision.gpu_uuids:
            old = self.by_uuid[uuid]
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
        self.pol.rotate(chosen, len(self.facts))


__all__ = ["HEAD", "PLACED_REJECTIONS", "WAITS", "PlacementPass"]
