"""The placer: filter GPUs, order the survivors with a policy, pick N on one host.

Shape of a decision (after the Kubernetes scheduler framework): per GPU a filter verdict,
then an ordering, then a choice; the outcome separates "not now" (may fit when tenants
leave), "never fits" (no GPU set could ever take it) and errors.  A pass over a queue
updates its per-GPU facts as it places, so one pass can place many tasks consistently.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass

from carma_airflow.core.decision import Decision, GpuVerdict, Outcome, Reason
from carma_airflow.core.gpu import ClusterView, GpuHealth
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


def model_matches(spec_name: str, wanted: str | None) -> bool:
    return wanted is None or wanted.strip().lower() in spec_name.lower()


@dataclass(frozen=True, slots=True)
class PassResult:
    """Decisions of one scheduling pass, in the order the requests were considered."""

    decisions: tuple[Decision, ...]
    reserved_for: str | None = None  # key of a starving request GPUs were held back for

    @property
    def placed(self) -> list[Decision]:
        return [d for d in self.decisions if d.placed]


class Placer:
    """Decides where requests go.  Holds a policy (which may carry a cursor) and settings."""

    def __init__(self, policy: Policy, settings: PlacementSettings = DEFAULT_SETTINGS) -> None:
        self.policy = policy
        self.settings = settings

    # -- facts -------------------------------------------------------------------------
    def facts(self, view: ClusterView) -> list[GpuFacts]:
        s = self.settings
        pol = self.policy
        out: list[GpuFacts] = []
        for g in view.gpus:
            tenants = g.tenants
            free = g.free_mib
            unseen = 0
            exclusive_tenant = False
            if tenants:
                accounted = 0
                for t in tenants:
                    exclusive_tenant = exclusive_tenant or t.exclusive
                    if t.observed_mib is None or view.now - t.placed_at < s.lock_s:
                        unseen += 1
                        accounted += t.accounted_mib
                    else:  # seen long enough: trust what it holds, the free reading covers it
                        accounted += t.observed_mib
                if pol.uses_reservations:
                    free = min(free, g.spec.memory_mib - accounted)
            w = g.window
            smact = w.smact_score
            if pol.uses_reservations and unseen:
                smact += s.activity_prior * unseen
            locked = g.last_placed_at is not None and view.now - g.last_placed_at < s.lock_s
            out.append(
                GpuFacts(
                    state=g,
                    usable_free_mib=free - s.reserve_mib,
                    idle=not tenants and g.used_mib < s.idle_used_mib,
                    tenants=len(tenants),
                    exclusive_tenant=exclusive_tenant,
                    locked=locked,
                    smact=smact,
                    smocc=w.smocc_score,
                    drama=w.drama_score,
                    high_risk=is_high_risk(smact, w.smocc_score, w.drama_score, s.risk),
                )
            )
        return out

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
        decisions: list[Decision] = []
        reserved: frozenset[str] = frozenset()
        reserved_for: str | None = None
        if protected is not None:
            d = state.decide(protected, frozenset())
            decisions.append(d)
            if d.placed:
                state.apply(protected, d)
            elif d.outcome is Outcome.NOT_NOW:
                reserved = self._hold_for(protected, state.facts)
                reserved_for = protected.key
        memo: dict[tuple[object, ...], tuple[int, Decision]] = {}
        monotone = self.policy.checks_memory
        blocked_by: str | None = None
        name = self.policy.name
        for req in requests:
            if protected is not None and req.key == protected.key:
                continue
            if blocked_by is not None:
                decisions.append(
                    Decision(
                        req.key,
                        Outcome.NOT_NOW,
                        summary=f"waiting: queued behind {blocked_by} (strict FIFO)",
                        policy=name,
                    )
                )
                continue
            sig = (req.gpus, req.needs_idle_gpu, req.gpu_model, req.avoid_gpus, req.memory.add_headroom)
            hit = memo.get(sig) if monotone else None
            if hit is not None and _never_fits(self, req, state.facts, state.never_cache) is not None:
                hit = None
            if hit is not None and req.memory.mib >= hit[0]:
                first = hit[1]
                decisions.append(
                    Decision(req.key, Outcome.NOT_NOW, rejected=first.rejected, summary=first.summary, policy=name)
                )
                continue
            d = state.decide(req, reserved)
            decisions.append(d)
            if d.placed:
                state.apply(req, d)
                continue
            if d.outcome is Outcome.NOT_NOW:
                if monotone and (hit is None or req.memory.mib < hit[0]):
                    memo[sig] = (req.memory.mib, d)
                if blocking:
                    blocked_by = req.label
        return PassResult(tuple(decisions), reserved_for)

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


class _Pass:
    """One pass's view: per-GPU facts split once into idle candidates, collocation candidates
    and GPUs no request can use now (with their reasons).  Placements update it in place;
    candidates stay sorted by the policy's keys, so a decision usually looks at few GPUs."""

    def __init__(self, placer: Placer, view: ClusterView) -> None:
        self.placer = placer
        self.pol = placer.policy
        self.settings = placer.settings
        self.facts = placer.facts(view)
        self.by_uuid = {f.uuid: f for f in self.facts}
        self.never_cache: dict[tuple[object, ...], tuple[str | None, int]] = {}
        self.idle: list[_Entry] = []
        self.shared: list[_Entry] = []
        self.where: dict[str, _Entry] = {}
        self.static: dict[str, GpuVerdict] = {}
        self._static_tuple: tuple[GpuVerdict, ...] | None = None
        for f in self.facts:
            self._place_in_pool(f, sort=False)
        self.idle.sort(key=lambda e: (e[0], e[1]))
        self.shared.sort(key=lambda e: (e[0], e[1]))

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
        entry: _Entry = (key, f.index, f)
        self.where[f.uuid] = entry
        if sort:
            bisect.insort(pool, entry, key=lambda e: (e[0], e[1]))
        else:
            pool.append(entry)

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
                return

    def _ordered(self, pool: list[_Entry], request: TaskRequest, idle: bool) -> list[_Entry]:
        if self.pol.stable_keys:
            return pool
        keyf = self.pol.idle_key if idle else self.pol.key
        return sorted(pool, key=lambda e: (keyf(e[2], request), e[1]))

    def static_rejections(self) -> tuple[GpuVerdict, ...]:
        if self._static_tuple is None:
            self._static_tuple = tuple(self.static.values())
        return self._static_tuple

    # decisions ---------------------------------------------------------------------------
    def decide(self, request: TaskRequest, reserved: frozenset[str]) -> Decision:
        pol = self.pol
        never = _never_fits(self.placer, request, self.facts, self.never_cache)
        if never is not None:
            return Decision(request.key, Outcome.NEVER_FITS, summary=f"never fits: {never}", policy=pol.name)
        need = request.memory.mib
        filter_need = request.memory.filter_mib(self.settings.headroom_mib)
        idle_only = request.needs_idle_gpu or not pol.collocates
        # "could not estimate: whole GPU" takes any idle GPU; its number is a sentinel, not memory
        check_idle_memory = pol.checks_memory and not request.memory.whole_gpu
        n = request.gpus
        wanted = request.gpu_model
        avoid = request.avoid_gpus
        scanned: list[GpuVerdict] = []
        avoided: list[GpuFacts] = []
        groups: dict[str, list[GpuFacts]] = {}
        chosen: list[GpuFacts] | None = None

        def take(f: GpuFacts) -> list[GpuFacts] | None:
            group = groups.setdefault(f.state.host, [])
            group.append(f)
            return group if len(group) == n else None

        for _, _, f in self._ordered(self.idle, request, True):
            if wanted is not None and not model_matches(f.state.spec.name, wanted):
                scanned.append(_verdict(f, Reason.MODEL, f"is not a {wanted}"))
            elif f.uuid in reserved:
                scanned.append(_verdict(f, Reason.RESERVED, "held for a task past its starvation bound"))
            elif check_idle_memory and need > f.usable_free_mib:
                scanned.append(
                    _verdict(f, Reason.MEMORY, f"{format_mib(f.usable_free_mib)} usable < {format_mib(need)} needed")
                )
            elif f.uuid in avoid:
                avoided.append(f)
            else:
                chosen = take(f)
                if chosen is not None:
                    break
        if chosen is None:
            for _, _, f in self._ordered(self.shared, request, False):
                if wanted is not None and not model_matches(f.state.spec.name, wanted):
                    scanned.append(_verdict(f, Reason.MODEL, f"is not a {wanted}"))
                elif f.uuid in reserved:
                    scanned.append(_verdict(f, Reason.RESERVED, "held for a task past its starvation bound"))
                elif idle_only:
                    scanned.append(_verdict(f, Reason.BUSY, f"has {f.tenants} tenant(s); task needs an idle GPU"))
                elif pol.checks_memory and filter_need > f.usable_free_mib:
                    scanned.append(
                        _verdict(
                            f,
                            Reason.MEMORY,
                            f"{format_mib(f.usable_free_mib)} usable < {format_mib(filter_need)} (estimate + headroom)",
                        )
                    )
                elif f.uuid in avoid:
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
        if chosen is None:
            rejected = tuple(scanned) + self.static_rejections()
            counts: dict[str, int] = {}
            for v in rejected:
                label = v.reason.value if v.reason else "?"
                counts[label] = counts.get(label, 0) + 1
            short = ", ".join(f"{c} {r}" for r, c in sorted(counts.items(), key=lambda kv: -kv[1]))
            if n == 1:
                lack = "no idle GPU" if idle_only else f"no GPU with {format_mib(filter_need)} free"
            else:
                what = "idle" if idle_only else f"with {format_mib(filter_need)} free"
                lack = f"no host with {n} GPUs {what}"
            summary = f"waiting: {lack} ({short or 'too few candidates on one host'})"
            return Decision(request.key, Outcome.NOT_NOW, rejected=rejected, summary=summary, policy=pol.name)
        verdicts = tuple(_verdict(f, None, _describe(f, [t.label for t in f.state.tenants])) for f in chosen)
        where = ", ".join(f"GPU {f.index} ({f.state.spec.name})" for f in chosen)
        return Decision(
            request.key,
            Outcome.PLACED,
            gpu_uuids=tuple(f.uuid for f in chosen),
            chosen=verdicts,
            rejected=tuple(scanned) + self.static_rejections(),
            summary=f"placed on {where}: " + "; ".join(v.detail for v in verdicts),
            collocated=any(not f.idle for f in chosen),
            policy=pol.name,
        )

    def apply(self, request: TaskRequest, decision: Decision) -> None:
        """Account a placement inside the pass and move the GPUs to their new pools."""
        chosen = [self.by_uuid[u] for u in decision.gpu_uuids]
        for f in chosen:
            self._take_out(f)
            f.usable_free_mib -= request.memory.mib
            f.tenants += 1
            f.idle = False
            f.exclusive_tenant = f.exclusive_tenant or request.needs_idle_gpu
            f.locked = True
            if self.pol.uses_reservations:
                f.smact += self.settings.activity_prior
                f.high_risk = is_high_risk(f.smact, f.smocc, f.drama, self.settings.risk)
            self._place_in_pool(f)
        self.pol.rotate(chosen, len(self.facts))


_NO_REQUEST = TaskRequest(key="", label="", memory=MemoryNeed(1, "none"))


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
