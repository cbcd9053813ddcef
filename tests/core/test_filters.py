"""Placement filters (core/filtering.py, core/filters/, core/engine_filters.py): each states its
rejection with its numbers, the policies compose them, and the engine's scans decide as the
filters do, one by one."""

from __future__ import annotations

import random

import pytest
from helpers import A100, CALM, H100, HOT, L4, busy_gpu, idle_gpu, request, view

from carma_airflow.core import GpuHealth, Outcome, Placer, Reason, TaskRequest
from carma_airflow.core.engine_filters import MemoryFit, NeedsIdle
from carma_airflow.core.facts import GpuFacts
from carma_airflow.core.filtering import NO_REQUEST, Filter, Rejection, first_rejection, gpu_stage, try_stage
from carma_airflow.core.filters.health import FreshTelemetry, Healthy
from carma_airflow.core.filters.lock import RecentPlacementLock
from carma_airflow.core.filters.risk_rule import RiskRule
from carma_airflow.core.filters.sharing import ExclusiveTenant, NoSharing, TenantCap
from carma_airflow.core.filters.utilisation_cap import UtilisationCap
from carma_airflow.core.gpu import GpuState
from carma_airflow.core.policies import make_policy
from carma_airflow.core.policies.interference_aware import InterferenceAware
from carma_airflow.core.settings import DEFAULT_SETTINGS, PlacementSettings


def facts_of(*gpus: GpuState, policy: str = "interference-aware", now: float = 0.0) -> list[GpuFacts]:
    return Placer(make_policy(policy)).facts(view(*gpus, now=now))


def test_the_tenant_cap_states_its_numbers() -> None:
    f = facts_of(busy_gpu(0, 20000, tenants=3))[0]
    assert TenantCap(4).check(f, NO_REQUEST) is None
    refused = TenantCap(3).check(f, NO_REQUEST)
    assert refused == Rejection(
        "tenant-cap", Reason.TENANT_CAP, "{have} tenants (cap {limit})", "tenants", requested=1, have=3, limit=3
    )
    assert refused.text() == "3 tenants (cap 3)"


def test_the_risk_rule_states_the_activity_and_its_thresholds() -> None:
    calm, hot = facts_of(busy_gpu(0, 20000, window=CALM), busy_gpu(1, 20000, window=HOT))
    rule = RiskRule(DEFAULT_SETTINGS.risk)
    assert rule.check(calm, NO_REQUEST) is None
    refused = rule.check(hot, NO_REQUEST)
    assert refused is not None and refused.reason is Reason.RISK
    assert refused.have == pytest.approx(hot.smact) and refused.limit == DEFAULT_SETTINGS.risk.smact_threshold
    assert dict(refused.more)["occupancy_limit"] == DEFAULT_SETTINGS.risk.smocc_threshold
    assert refused.text() == f"SM activity {hot.smact:.2f}, occupancy {hot.smocc:.2f}, DRAM {hot.drama:.2f}"


def test_the_health_sharing_and_lock_filters_say_what_the_table_in_docs_says() -> None:
    sick = facts_of(idle_gpu(0, health=GpuHealth.QUARANTINED))[0]
    stale = facts_of(busy_gpu(0, 20000, health=GpuHealth.STALE))[0]
    mine = facts_of(busy_gpu(0, 20000, exclusive=True))[0]
    locked = facts_of(busy_gpu(0, 20000, last_placed_at=-5.0), policy="first-fit")[0]
    texts = {
        "quarantined after GPU errors": Healthy().check(sick, NO_REQUEST),
        "no fresh samples: collocation stopped": FreshTelemetry().check(stale, NO_REQUEST),
        "has 1 tenant(s); exclusive policy": NoSharing().check(stale, NO_REQUEST),
        "held by an exclusive task": ExclusiveTenant().check(mine, NO_REQUEST),
        "placed on recently; waiting for its window": RecentPlacementLock(30.0).check(locked, NO_REQUEST),
    }
    for text, refused in texts.items():
        assert refused is not None and refused.text() == text
    calm = facts_of(busy_gpu(0, 20000))[0]
    for flt in (Healthy(), FreshTelemetry(), ExclusiveTenant(), RecentPlacementLock(30.0)):
        assert flt.check(calm, NO_REQUEST) is None, flt.name


def test_the_utilisation_cap_adds_the_newcomers_prior() -> None:
    f = facts_of(busy_gpu(0, 20000))[0]  # CALM: SM activity 0.1
    assert UtilisationCap(0.6, 0.5).check(f, NO_REQUEST) is None
    refused = UtilisationCap(0.5, 0.5).check(f, NO_REQUEST)
    assert refused is not None and (refused.requested, refused.limit) == (0.5, 0.5)
    assert refused.text() == "projected SM activity 0.10 + newcomer over the cap"


def test_the_memory_fit_states_the_need_with_headroom_on_a_shared_gpu() -> None:
    idle, shared = facts_of(idle_gpu(0), busy_gpu(1, 10000))
    fit = MemoryFit(2048)
    asks = request("r", 9000)
    assert fit.check(idle, asks) is None  # 40 GiB less the reserve
    refused = fit.check(shared, asks)
    assert refused is not None
    assert (refused.requested, refused.have, refused.capacity, refused.unit) == (
        9000 + 2048,
        shared.usable_free_mib,
        A100.memory_mib,
        "MiB",
    )
    assert refused.text() == "9.3 GiB usable < 10.8 GiB (estimate + headroom)"
    assert fit.check(idle, request("r", 1, whole_gpu=True)) is None  # a whole GPU: no memory check


def test_a_policy_is_its_filters() -> None:
    settings = PlacementSettings()
    names = {
        name: [f.name for f in make_policy(name).placement_filters(settings)]
        for name in ("exclusive", "first-fit", "interference-aware", "static-2", "round-robin")
    }
    assert names["exclusive"][:3] == ["healthy", "fresh-telemetry", "no-sharing"]
    assert "placement-lock" in names["first-fit"] and "risk-rule" in names["first-fit"]
    assert "tenant-cap" in names["interference-aware"] and "placement-lock" not in names["interference-aware"]
    assert "memory-fit" not in names["static-2"] and "tenant-cap" in names["static-2"]
    assert "memory-fit" not in names["round-robin"] and "risk-rule" not in names["round-robin"]
    capped = InterferenceAware(activity_cap=0.8).placement_filters(settings)
    assert [f.name for f in capped][-3] == "utilisation-cap"
    # the settings deployments set after construction still choose the filters
    policy = make_policy("interference-aware")
    policy.max_tenants = 5
    caps = [f for f in policy.placement_filters(settings) if isinstance(f, TenantCap)]
    assert [c.cap for c in caps] == [5]


# -- the engine decides as the filters do ---------------------------------------------------------


def reference(filters: tuple[Filter, ...], f: GpuFacts, request: TaskRequest, collocates: bool) -> Rejection | None:
    """The filters asked one by one, in the scans' order (module doc of core/engine_filters.py)."""
    every, shared = gpu_stage(filters)
    refused = first_rejection(every, f, request)
    if refused is None and not f.idle:
        refused = first_rejection(shared, f, request)
    if refused is not None:
        return refused
    per_try = try_stage(filters)
    asked = [flt for flt in per_try if not isinstance(flt, MemoryFit) and flt.applies(request)]
    memory = [flt for flt in per_try if isinstance(flt, MemoryFit)]
    idle_only = NeedsIdle(bool(memory)) if collocates else None
    return first_rejection([*asked, *([idle_only] if idle_only else []), *memory], f, request)


def random_gpu(rng: random.Random, index: int) -> GpuState:
    spec = rng.choice([A100, H100, L4])
    if rng.random() < 0.3:
        return idle_gpu(index, spec, health=rng.choice([GpuHealth.HEALTHY] * 5 + [GpuHealth.QUARANTINED]))
    return busy_gpu(
        index,
        rng.randrange(500, spec.memory_mib),
        spec=spec,
        tenants=rng.randint(1, 4),
        window=rng.choice([CALM, HOT]),
        health=rng.choice([GpuHealth.HEALTHY] * 6 + [GpuHealth.STALE, GpuHealth.QUARANTINED]),
        last_placed_at=rng.choice([None, None, -5.0]),
        exclusive=rng.random() < 0.1,
    )


@pytest.mark.parametrize("policy", ["interference-aware", "first-fit", "exclusive", "static-2", "most-free-memory"])
def test_every_rejection_of_a_waiting_try_is_the_first_filter_that_refuses_the_gpu(policy: str) -> None:
    rng = random.Random(policy)
    checked = 0
    for trial in range(60):
        gpus = [random_gpu(rng, i) for i in range(rng.randint(1, 10))]
        v = view(*gpus)
        placer = Placer(make_policy(policy))
        asks = request(
            f"r{trial}",
            rng.choice([2000, 9000, 30000, 60000]),
            gpu_model=rng.choice([None, None, "H100", "A100"]),
            exclusive=rng.random() < 0.15,
        )
        d = placer.decide(asks, v)
        if d.outcome is Outcome.NEVER_FITS:
            continue
        filters = make_policy(policy).placement_filters(DEFAULT_SETTINGS)
        facts = {f.uuid: f for f in placer.facts(v)}
        collocates = make_policy(policy).collocates
        for verdict in d.rejected:
            expected = reference(filters, facts[verdict.uuid], asks, collocates)
            assert expected is not None, (trial, verdict)
            assert (verdict.reason, verdict.detail) == (expected.reason, expected.text()), (trial, verdict)
            assert verdict.rejection == expected
            checked += 1
        for uuid in d.gpu_uuids:
            assert reference(filters, facts[uuid], asks, collocates) is None, (trial, uuid)
        if d.outcome is Outcome.NOT_NOW:  # a waiting try lists every GPU
            assert {v.uuid for v in d.rejected} == set(facts)
    assert checked > 50


def test_a_rejection_known_by_its_text_keeps_it_as_written() -> None:
    said = Rejection.said("completion-time", Reason.INTERFERENCE, "cost {x} 6.4 min}")
    assert said.text() == "cost {x} 6.4 min}" and said.requested is None
