"""The placer: filter GPUs, order the survivors with a policy, pick N on one host.

Shape of a decision (after the Kubernetes scheduler framework): per GPU a filter verdict,
then an ordering, then a choice; the outcome separates "not now" (may fit when tenants
leave), "never fits" (no GPU set could ever take it) and errors.  A pass over a queue
updates its per-GPU facts as it places, so one pass can place many tasks consistently.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from carma_airflow.core.decision import Decision, GpuVerdict, Outcome, Reason
from carma_airflow.core.gpu import ClusterView, GpuHealth
from carma_airflow.core.policies.base import GpuFacts, Policy
from carma_airflow.core.risk import is_high_risk
from carma_airflow.core.settings import DEFAULT_SETTINGS, PlacementSettings
from carma_airflow.core.task import TaskRequest
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
        return self._decide(request, self.facts(view), frozenset())

    def never_fits_reason(self, request: TaskRequest, facts: Sequence[GpuFacts]) -> str | None:
        """Why no GPU set of this cluster could ever take the request, or None."""
        if request.gpus < 1:
            return f"asks for {request.gpus} GPUs; ask for at least 1"
        per_host: dict[str, list[int]] = {}
        for f in facts:
            if model_matches(f.state.spec.name, request.gpu_model):
                per_host.setdefault(f.state.host, []).append(f.state.spec.memory_mib)
        if not per_host:
            models = sorted({f.state.spec.name for f in facts})
            return f"no GPU matches gpu_model={request.gpu_model!r}; this cluster has {', '.join(models)}"
        most = max(len(v) for v in per_host.values())
        if most < request.gpus:
            return f"asks for {request.gpus} GPUs but the largest host has {most} matching GPUs"
        if not self.policy.checks_memory:
            return None
        best = max(sorted(v, reverse=True)[request.gpus - 1] for v in per_host.values() if len(v) >= request.gpus)
        limit = best - self.settings.reserve_mib
        if request.memory.mib > limit:
            return (
                f"needs {format_mib(request.memory.mib)} per GPU but the largest GPU offers "
                f"{format_mib(limit)} ({format_mib(best)} less the {self.settings.reserve_mib} MiB reserve)"
            )
        return None

    def _decide(self, request: TaskRequest, facts: list[GpuFacts], reserved: frozenset[str]) -> Decision:
        pol = self.policy
        never = self.never_fits_reason(request, facts)
        if never is not None:
            return Decision(request.key, Outcome.NEVER_FITS, summary=f"never fits: {never}", policy=pol.name)
        need = request.memory.mib
        filter_need = request.memory.filter_mib(self.settings.headroom_mib)
        idle_only = request.needs_idle_gpu or not pol.collocates
        idle: list[GpuFacts] = []
        shared: list[GpuFacts] = []
        avoided: list[GpuFacts] = []
        rejected: list[GpuVerdict] = []
        for f in facts:
            st = f.state
            if not model_matches(st.spec.name, request.gpu_model):
                rejected.append(_verdict(f, Reason.MODEL, f"is not a {request.gpu_model}"))
            elif st.health is GpuHealth.QUARANTINED:
                rejected.append(_verdict(f, Reason.UNHEALTHY, "quarantined after GPU errors"))
            elif st.uuid in reserved:
                rejected.append(_verdict(f, Reason.RESERVED, "held for a task past its starvation bound"))
            elif f.idle:
                if pol.checks_memory and need > f.usable_free_mib:
                    rejected.append(
                        _verdict(
                            f, Reason.MEMORY, f"{format_mib(f.usable_free_mib)} usable < {format_mib(need)} needed"
                        )
                    )
                elif st.uuid in request.avoid_gpus:
                    avoided.append(f)
                else:
                    idle.append(f)
            elif st.health is GpuHealth.STALE:
                rejected.append(_verdict(f, Reason.STALE, "no fresh samples: collocation stopped"))
            elif idle_only:
                why = "task needs an idle GPU" if pol.collocates else "exclusive policy"
                rejected.append(_verdict(f, Reason.BUSY, f"has {f.tenants} tenant(s); {why}"))
            elif f.exclusive_tenant:
                rejected.append(_verdict(f, Reason.EXCLUSIVE_TENANT, "held by an exclusive task"))
            elif pol.max_tenants is not None and f.tenants >= pol.max_tenants:
                rejected.append(_verdict(f, Reason.TENANT_CAP, f"{f.tenants} tenants (cap {pol.max_tenants})"))
            elif pol.uses_lock and f.locked:
                rejected.append(_verdict(f, Reason.LOCKED, "placed on recently; waiting for its window"))
            elif pol.checks_memory and filter_need > f.usable_free_mib:
                rejected.append(
                    _verdict(
                        f,
                        Reason.MEMORY,
                        f"{format_mib(f.usable_free_mib)} usable < {format_mib(filter_need)} (estimate + headroom)",
                    )
                )
            elif pol.checks_risk and f.high_risk:
                rejected.append(
                    _verdict(
                        f,
                        Reason.RISK,
                        f"SM activity {f.smact:.2f}, occupancy {f.smocc:.2f}, DRAM {f.drama:.2f}",
                    )
                )
            elif not pol.admits(f, request, self.settings.activity_prior):
                rejected.append(
                    _verdict(f, Reason.INTERFERENCE, f"projected SM activity {f.smact:.2f} + newcomer over the cap")
                )
            elif st.uuid in request.avoid_gpus:
                avoided.append(f)
            else:
                shared.append(f)
        idle.sort(key=lambda f: pol.idle_key(f, request))
        shared.sort(key=lambda f: pol.key(f, request))
        avoided.sort(key=lambda f: (not f.idle, pol.key(f, request)))
        chosen = _first_host_with(idle + shared + avoided, request.gpus)
        if chosen is None:
            counts: dict[str, int] = {}
            for v in rejected:
                counts[v.reason.value if v.reason else "?"] = counts.get(v.reason.value if v.reason else "?", 0) + 1
            short = ", ".join(f"{n} {r}" for r, n in sorted(counts.items(), key=lambda kv: -kv[1]))
            what = "an idle GPU" if idle_only else f"{format_mib(filter_need)} free"
            n = f"{request.gpus} GPUs" if request.gpus > 1 else "a GPU"
            summary = f"waiting: no {n} with {what} ({short or 'too few candidates on one host'})"
            return Decision(request.key, Outcome.NOT_NOW, rejected=tuple(rejected), summary=summary, policy=pol.name)
        verdicts = tuple(_verdict(f, None, _describe(f, [t.label for t in f.state.tenants])) for f in chosen)
        collocated = any(not f.idle for f in chosen)
        where = ", ".join(f"GPU {f.index} ({f.state.spec.name})" for f in chosen)
        detail = "; ".join(v.detail for v in verdicts)
        return Decision(
            request.key,
            Outcome.PLACED,
            gpu_uuids=tuple(f.uuid for f in chosen),
            chosen=verdicts,
            rejected=tuple(rejected),
            summary=f"placed on {where}: {detail}",
            collocated=collocated,
            policy=pol.name,
        )

    def _apply(self, request: TaskRequest, decision: Decision, facts_by_uuid: dict[str, GpuFacts]) -> None:
        """Account a placement inside the pass."""
        chosen = [facts_by_uuid[u] for u in decision.gpu_uuids]
        for f in chosen:
            f.usable_free_mib -= request.memory.mib
            f.tenants += 1
            f.idle = False
            f.exclusive_tenant = f.exclusive_tenant or request.needs_idle_gpu
            f.locked = True
            if self.policy.uses_reservations:
                f.smact += self.settings.activity_prior
                f.high_risk = is_high_risk(f.smact, f.smocc, f.drama, self.settings.risk)
        self.policy.rotate(chosen, len(facts_by_uuid))

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
        facts = self.facts(view)
        by_uuid = {f.uuid: f for f in facts}
        decisions: list[Decision] = []
        reserved: frozenset[str] = frozenset()
        reserved_for: str | None = None
        if protected is not None:
            d = self._decide(protected, facts, frozenset())
            decisions.append(d)
            if d.placed:
                self._apply(protected, d, by_uuid)
            elif d.outcome is Outcome.NOT_NOW:
                reserved = self._hold_for(protected, facts)
                reserved_for = protected.key
        memo: dict[tuple[object, ...], tuple[int, Decision]] = {}
        monotone = self.policy.checks_memory
        blocked_by: str | None = None
        for req in requests:
            if protected is not None and req.key == protected.key:
                continue
            if blocked_by is not None:
                decisions.append(
                    Decision(
                        req.key,
                        Outcome.NOT_NOW,
                        summary=f"waiting: queued behind {blocked_by} (strict FIFO)",
                        policy=self.policy.name,
                    )
                )
                continue
            sig = (req.gpus, req.needs_idle_gpu, req.gpu_model, req.avoid_gpus, req.memory.add_headroom)
            hit = memo.get(sig) if monotone else None
            if hit is not None and req.memory.mib >= hit[0]:
                decisions.append(replace(hit[1], request_key=req.key))
                continue
            d = self._decide(req, facts, reserved)
            decisions.append(d)
            if d.placed:
                self._apply(req, d, by_uuid)
                continue
            if d.outcome is Outcome.NOT_NOW:
                if monotone and (hit is None or req.memory.mib < hit[0]):
                    memo[sig] = (req.memory.mib, d)
                if blocking:
                    blocked_by = req.label
        return PassResult(tuple(decisions), reserved_for)

    def _hold_for(self, request: TaskRequest, facts: list[GpuFacts]) -> frozenset[str]:
        """GPUs to keep free of new tenants so a starving request is guaranteed to start.

        The N matching GPUs on one host with the most usable memory: nothing new lands on
        them, so their free memory only grows as tenants finish, and the choice stays put.
        """
        per_host: dict[str, list[GpuFacts]] = {}
        for f in facts:
            if f.state.health is not GpuHealth.QUARANTINED and model_matches(f.state.spec.name, request.gpu_model):
                per_host.setdefault(f.state.host, []).append(f)
        best: list[GpuFacts] = []
        best_score = -1.0
        for group in per_host.values():
            if len(group) < request.gpus:
                continue
            group.sort(key=lambda f: (f.tenants, -f.usable_free_mib, f.index))
            top = group[: request.gpus]
            score = float(sum(f.usable_free_mib for f in top)) - 1e9 * sum(f.tenants for f in top)
            if score > best_score:
                best, best_score = top, score
        return frozenset(f.uuid for f in best)


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
