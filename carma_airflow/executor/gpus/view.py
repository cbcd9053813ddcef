"""Build the placer's ClusterView of the monitor's samples (health, staleness, metric windows)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from carma_airflow.core.gpu import GPU_CATALOGUE, ClusterView, GpuHealth, GpuSpec, GpuState
from carma_airflow.core.risk import MetricWindow
from carma_airflow.monitor.base import GpuSample, Reading


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
    ages: Mapping[str, float],
    stale_after_s: float,
) -> ClusterView:
    """The monitor's GPUs, without tenants: the scheduling cycle lays its reservations over them
    (core/reservations.py)."""
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
                health=health,
                host=s.host,
            )
        )
    return ClusterView(now, tuple(states))


class GpuSight:
    """The GPUs of one monitor sample as the placer sees them, and what the flow keeps of each GPU
    it has seen: its host (where its tries start) and its model (the interference fit's key)."""

    def __init__(self, stale_after_s: float) -> None:
        self.stale_after_s = stale_after_s
        self.host_of: dict[str, str] = {}  # GPU UUID -> its host
        self.spec_of: dict[str, str] = {}  # GPU UUID -> its model

    def gpus(self, now: float, reading: Reading) -> tuple[GpuState, ...]:
        """The GPUs of ``reading`` (the heartbeat's: samples, windows and ages of one moment)."""
        samples = list(reading.values())
        self.host_of.update((s.uuid, s.host) for s in samples)
        gpus = build_view(now, samples, reading.windows, reading.ages, self.stale_after_s).gpus
        self.spec_of.update((g.uuid, g.spec.name) for g in gpus)
        return gpus
