"""Under a fence the placer keeps each tenant's promise for the tenant's life (issue 22).

Unfenced, a tenant seen past its lock window counts at what it holds (the paper), and the rest
of its reservation is offered to newcomers.  Under a fence that rest is what the tenant's cap
lets it grow into: a newcomer given it is what stops the tenant within its own promise.  So the
placer counts every tenant at its reservation plus the fence's margin (or what it holds, if more):
``PlacementSettings.kept_margin_mib`` from ``FenceModel.kept_margin_mib``.
"""

from __future__ import annotations

from helpers import A100, CALM, request

from carma_airflow.core import ClusterView, GpuState, Outcome, PlacementSettings, Placer, Tenant
from carma_airflow.core.fencing import CapRule, FenceModel, IsolationMode
from carma_airflow.core.policies import make_policy


def _gpu(reserved: int, held: int) -> GpuState:
    """One A100 with one tenant placed 1,000 s ago (seen long since) holding ``held``."""
    tenant = Tenant("xception3", "Xception3", reserved, -1000.0, observed_mib=held)
    return GpuState("GPU-0", 0, A100, A100.memory_mib - held, held, CALM, (tenant,))


def _outcome(settings: PlacementSettings, gpu: GpuState, mib: int, policy: str = "interference-aware") -> Outcome:
    placer = Placer(make_policy(policy), settings)
    return placer.schedule([request("xlnet", mib)], ClusterView(0.0, (gpu,))).decisions[0].outcome


def test_unfenced_a_seen_tenant_counts_at_what_it_holds() -> None:
    # Xception3 reserved 24,000 and holds 21,236: 19,212 usable, enough for 16,000 + headroom
    assert _outcome(PlacementSettings(), _gpu(24000, 21236), 16000) is Outcome.PLACED


def test_fenced_the_rest_of_a_reservation_is_not_offered() -> None:
    # counted at its reservation, 24,000: 16,448 usable, less than 16,000 + 2,048
    kept = PlacementSettings(kept_margin_mib=0)
    assert _outcome(kept, _gpu(24000, 21236), 16000) is Outcome.NOT_NOW
    assert _outcome(kept, _gpu(24000, 21236), 14000) is Outcome.PLACED  # what is really spare still is


def test_a_cap_fixed_at_start_is_kept_with_its_margin() -> None:
    # MPS: each try is promised reservation + 2,048; two promises must fit under the GPU
    gpu = _gpu(20480, 20480)
    assert _outcome(PlacementSettings(kept_margin_mib=0), gpu, 16384) is Outcome.PLACED
    assert _outcome(PlacementSettings(kept_margin_mib=2048), gpu, 16384) is Outcome.NOT_NOW


def test_the_margin_kept_follows_the_fence() -> None:
    assert FenceModel.of(IsolationMode.NONE).kept_margin_mib(2048) is None
    assert FenceModel.of(IsolationMode.FRAMEWORK, CapRule.LIVE).kept_margin_mib(2048) == 0
    assert FenceModel.of(IsolationMode.DRIVER, CapRule.LIVE).kept_margin_mib(2048) == 0
    assert FenceModel.of(IsolationMode.MPS, CapRule.LIVE).kept_margin_mib(2048) == 2048  # played as promise
    assert FenceModel.of(IsolationMode.FRAMEWORK, CapRule.PROTECTIVE).kept_margin_mib(2048) == 2048
