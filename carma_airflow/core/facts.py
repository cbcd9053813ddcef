"""The placer's facts: per GPU the numbers filters and orderings use, read once from a view.

Pure functions of a view, a policy and the settings: the free memory a GPU offers after the
reservations of tenants the monitor has not seen yet (and of every fenced tenant, its own
``Tenant.kept_margin_mib`` set: at its promise, for its life), the SM activity with the prior for
those tenants,
and the paper's risk flag.  Also the structural "never fits" check (no GPU set of the
cluster could ever take a request, asked of the policy's per-try filters).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from carma_airflow.core.gpu import GpuState
from carma_airflow.core.risk import is_high_risk
from carma_airflow.core.settings import PlacementSettings
from carma_airflow.core.task import TaskRequest
from carma_airflow.core.units import format_mib

if TYPE_CHECKING:
    from carma_airflow.core.filtering import Filter
    from carma_airflow.core.policies.base import Policy


@dataclass(slots=True)
class GpuFacts:
    """Per-pass, per-GPU numbers the filters and orderings use.  Updated as a pass places."""

    state: GpuState
    usable_free_mib: int
    idle: bool
    tenants: int
    exclusive_tenant: bool
    locked: bool
    smact: float  # window score, plus the prior of tenants the window has not seen yet
    smocc: float
    drama: float
    high_risk: bool
    joined: list[str] | None = None  # labels of tenants placed on it earlier in the same pass

    @property
    def index(self) -> int:
        return self.state.index

    @property
    def uuid(self) -> str:
        return self.state.uuid


NEVER = float("inf")  # a GPU whose facts do not change with the clock


def needs_idle(policy: Policy, request: TaskRequest) -> bool:
    """Whether the request must have GPUs to itself: asked exclusive, or its estimator gave
    up (a memory-aware policy then gives it a whole GPU; static sharing ignores memory)."""
    return request.exclusive or (request.memory.whole_gpu and policy.checks_memory)


def gpu_facts(
    policy: Policy, settings: PlacementSettings, gpus: Sequence[GpuState], now: float, until: list[float] | None
) -> list[GpuFacts]:
    """Per GPU the numbers the filters and orderings use.  ``until``: if given, gets per GPU
    a time before which its facts stay the same however the clock moves (a tenant's or the
    GPU's lock window ending changes them), less a margin for rounding."""
    s = settings
    pol = policy
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
        changes = NEVER
        if tenants:
            accounted = 0
            for t in tenants:
                exclusive_tenant = exclusive_tenant or t.exclusive
                observed = t.observed_mib
                kept = t.kept_margin_mib  # its own fence's promise above its reservation; None: unfenced
                promised = t.reserved_mib + kept if kept is not None else t.reserved_mib
                if observed is None or now - t.placed_at < lock_s:
                    unseen += 1
                    accounted += promised if observed is None or observed < promised else observed
                    if observed is not None:
                        changes = min(changes, t.placed_at + lock_s)
                elif kept is not None:  # seen, but its fence lets it grow into its promise: keep that for it
                    accounted += promised if observed < promised else observed
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
            until.append(changes - 1e-9 * (abs(changes) + 1.0) if changes != NEVER else NEVER)
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


def copy_facts(f: GpuFacts) -> GpuFacts:
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


def never_fits(
    policy: Policy,
    settings: PlacementSettings,
    request: TaskRequest,
    facts: Sequence[GpuFacts],
    cache: dict[tuple[object, ...], tuple[str | None, int]],
    filters: Sequence[Filter] = (),
) -> str | None:
    """Why no GPU set of this cluster could ever take the request, or None (``cache``: the
    per-shape part, kept while the GPUs' specs and hosts stay; ``filters``: the policy's per-try
    filters that apply to the request, asked whether each GPU could ever take it)."""
    if request.gpus < 1:
        return f"asks for {request.gpus} GPUs; ask for at least 1"
    key = (request.gpus, *[flt.request_key(request) for flt in filters]) if filters else (request.gpus,)
    hit = cache.get(key)
    if hit is None:
        per_host: dict[str, list[int]] = {}
        for f in facts:
            if all(flt.ever(f.state, request) for flt in filters):
                per_host.setdefault(f.state.host, []).append(f.state.spec.memory_mib)
        if not per_host:
            states = [f.state for f in facts]
            blocking = [flt for flt in filters if not any(flt.ever(g, request) for g in states)]
            why = (blocking or list(filters))[0].never(request, states) if filters else "this cluster has no GPUs"
            hit = (why, 0)
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
    if not policy.checks_memory or request.memory.whole_gpu:
        return None
    limit = best - settings.reserve_mib
    if request.memory.mib > limit:
        return (
            f"needs {format_mib(request.memory.mib)} per GPU but the largest GPU offers "
            f"{format_mib(limit)} ({format_mib(best)} less the {settings.reserve_mib} MiB reserve)"
        )
    return None


__all__ = ["NEVER", "GpuFacts", "copy_facts", "gpu_facts", "needs_idle", "never_fits"]
