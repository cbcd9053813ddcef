"""Build the placer's ClusterView from the monitor's samples and the executor's reservations."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from carma_airflow.core.gpu import GPU_CATALOGUE, ClusterView, GpuHealth, GpuSpec, GpuState, Tenant
from carma_airflow.core.risk import MetricWindow
from carma_airflow.monitor.base import GpuSample


def spec_of(sample: GpuSample) -> GpuSpec:
    """The catalogue spec when the name is one (simulated GPUs), else one built from the sample."""
    known = GPU_CATALOGUE.get(sample.name.lower())
    if known is not None and known.memory_mib == sample.memory_total_mib:
        return known
    return GpuSpec(sample.name, sample.memory_total_mib, 0, 0.0, 0.0)


def build_view(
    now: float,
    samples: Sequence[GpuSample],
    windows: Mapping[str, MetricWindow],
    tenants: Mapping[str, Sequence[Tenant]],
    last_placed: Mapping[str, float],
    ages: Mapping[str, float],
    stale_after_s: float,
) -> ClusterView:
    states = []
    for s in samples:
        if s.error:
            health = GpuHealth.QUARANTINED
        elif ages.get(s.uuid, 0.0) > stale_after_s:
            health = GpuHealth.STALE
        else:
            health = GpuHealth.HEALTHY
        states.append(
            GpuState(
                uuid=s.uuid,
                index=s.index,
                spec=spec_of(s),
                free_mib=s.memory_free_mib,
                used_mib=s.memory_used_mib,
                window=windows.get(s.uuid) or MetricWindow(),
                tenants=tuple(tenants.get(s.uuid, ())),
                health=health,
                host=s.host,
                last_placed_at=last_placed.get(s.uuid),
            )
        )
    return ClusterView(now, tuple(states))
