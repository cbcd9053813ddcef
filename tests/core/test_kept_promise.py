"""Under a fence the placer keeps each tenant's promise for the tenant's life (issue 22).

Unfenced, a tenant seen past its lock window counts at what it holds (the paper), and the rest
of its reservation is offered to newcomers.  Under a fence that rest is what the tenant's cap
lets it grow into: a newcomer given it is what stops the tenant within its own promise.  So the
placer counts every fenced tenant at its reservation plus its fence's margin (or what it holds, if
more): each tenant's own ``Tenant.kept_margin_mib`` (from its request's, ``FenceModel.kept_margin_mib``
of the fence it runs under), so tenants under different fences on one GPU are each counted by theirs.
"""

from __future__ import annotations

from helpers import A100, CALM, request

from carma_airflow.core import ClusterView, GpuState, Outcome, PlacementSettings, Placer, Tenant
from carma_airflow.core.fencing import CapRule, FenceModel, IsolationMode
from carma_airflow.core.policies import make_policy


def _tenant(key: str, reserved: int, held: int, kept: int | None) -> Tenant:
    """A tenant placed 1,000 s ago (seen long since) holding ``held``, its fence keeping ``kept``."""
    return Tenant(key, key, reserved, -1000.0, observed_mib=held, kept_margin_mib=kept)


def _gpu(reserved: int, held: int, kept: int | None = None, *others: Tenant) -> GpuState:
    """One A100 with Xception3 (and ``others``) on it."""
    tenants = (_tenant("xception3", reserved, held, kept), *others)
    used = sum(t.observed_mib or 0 for t in tenants)
    return GpuState("GPU-0", 0, A100, A100.memory_mib - used, used, CALM, tenants)


def _outcome(gpu: GpuState, mib: int, policy: str = "interference-aware") -> Outcome:
    placer = Placer(make_policy(policy), PlacementSettings())
    return placer.schedule([request("xlnet", mib)], ClusterView(0.0, (gpu,))).decisions[0].outcome


def test_unfenced_a_seen_tenant_counts_at_what_it_holds() -> None:
    # Xception3 reserved 24,000 and holds 21,236: 19,212 usable, enough for 16,000 + headroom
    assert _outcome(_gpu(24000, 21236, None), 16000) is Outcome.PLACED


def test_fenced_the_rest_of_a_reservation_is_not_offered() -> None:
    # counted at its reservation, 24,000: 16,448 usable, less than 16,000 + 2,048
    assert _outcome(_gpu(24000, 21236, 0), 16000) is Outcome.NOT_NOW
    assert _outcome(_gpu(24000, 21236, 0), 14000) is Outcome.PLACED  # what is really spare still is


def test_a_cap_fixed_at_start_is_kept_with_its_margin() -> None:
    # MPS: each try is promised reservation + 2,048; two promises must fit under the GPU
    assert _outcome(_gpu(20480, 20480, 0), 16384) is Outcome.PLACED
    assert _outcome(_gpu(20480, 20480, 2048), 16384) is Outcome.NOT_NOW


def test_each_tenant_is_counted_by_its_own_fence() -> None:
    # two tenants reserved 12,000 each and hold 8,000 each: both fenced, 16,448 usable (< 15,000 +
    # 2,048); one unfenced (it asked `none`), counted at its 8,000: 20,448 usable
    fenced, unfenced = _tenant("b", 12000, 8000, 0), _tenant("b", 12000, 8000, None)
    assert _outcome(_gpu(12000, 8000, 0, fenced), 15000) is Outcome.NOT_NOW
    assert _outcome(_gpu(12000, 8000, 0, unfenced), 15000) is Outcome.PLACED
    assert _outcome(_gpu(12000, 8000, None, fenced), 15000) is Outcome.PLACED  # whichever of them it is


def test_the_margin_kept_follows_the_fence() -> None:
    assert FenceModel.of(IsolationMode.NONE).kept_margin_mib(2048) is None
    assert FenceModel.of(IsolationMode.FRAMEWORK, CapRule.LIVE).kept_margin_mib(2048) == 0
    assert FenceModel.of(IsolationMode.DRIVER, CapRule.LIVE).kept_margin_mib(2048) == 0
    # MPS live: the live cap beneath the pinned limit keeps later tenants' reservations, no margin
    assert FenceModel.of(IsolationMode.MPS, CapRule.LIVE).kept_margin_mib(2048) == 0
    assert FenceModel.of(IsolationMode.MPS, CapRule.PROMISE).kept_margin_mib(2048) == 2048
    assert FenceModel.of(IsolationMode.FRAMEWORK, CapRule.PROTECTIVE).kept_margin_mib(2048) == 2048
