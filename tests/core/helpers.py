"""Hand-built GPU states, views and requests for the placement-core tests."""

from __future__ import annotations

from carma_airflow.core import (
    ClusterView,
    GpuHealth,
    GpuSpec,
    GpuState,
    MemoryNeed,
    MetricWindow,
    TaskRequest,
    Tenant,
    gpu_spec,
)

A100 = gpu_spec("A100-40GB")
A100_80 = gpu_spec("A100-80GB")
H100 = gpu_spec("H100-80GB")
L4 = gpu_spec("L4")

RESERVE = 512
HEADROOM = 2048

# Low activity everywhere: never high-risk.
CALM = MetricWindow.constant(0.1, 0.1, 0.1)
# SM activity 0.9 with occupancy 0.5: high-risk under the paper's rule.
HOT = MetricWindow.constant(0.9, 0.5, 0.1)


def idle_gpu(
    index: int,
    spec: GpuSpec = A100,
    *,
    host: str = "localhost",
    health: GpuHealth = GpuHealth.HEALTHY,
    used: int = 0,
    window: MetricWindow | None = None,
) -> GpuState:
    """A GPU with no tenants (idle as long as ``used`` < 1024 MiB)."""
    return GpuState(
        uuid=f"GPU-{index}",
        index=index,
        spec=spec,
        free_mib=spec.memory_mib - used,
        used_mib=used,
        window=window or MetricWindow(),
        host=host,
        health=health,
    )


def busy_gpu(
    index: int,
    free: int,
    *,
    spec: GpuSpec = A100,
    tenants: int = 1,
    window: MetricWindow | None = None,
    host: str = "localhost",
    health: GpuHealth = GpuHealth.HEALTHY,
    last_placed_at: float | None = None,
    exclusive: bool = False,
    placed_at: float = -1000.0,
    observed: bool = True,
) -> GpuState:
    """A GPU with ``tenants`` old, observed tenants holding everything that is not free."""
    used = spec.memory_mib - free
    share = used // tenants
    ts = tuple(
        Tenant(
            key=f"t{index}.{k}",
            label=f"tenant{index}-{k}",
            reserved_mib=share,
            placed_at=placed_at,
            observed_mib=share if observed else None,
            exclusive=exclusive,
        )
        for k in range(tenants)
    )
    return GpuState(
        uuid=f"GPU-{index}",
        index=index,
        spec=spec,
        free_mib=free,
        used_mib=used,
        window=window or CALM,
        tenants=ts,
        health=health,
        host=host,
        last_placed_at=last_placed_at,
    )


def view(*gpus: GpuState, now: float = 0.0) -> ClusterView:
    return ClusterView(now, tuple(gpus))


def request(
    key: str,
    mib: int,
    *,
    gpus: int = 1,
    whole_gpu: bool = False,
    add_headroom: bool = True,
    **kwargs: object,
) -> TaskRequest:
    """A request for ``mib`` MiB per GPU; ``kwargs`` go to TaskRequest."""
    memory = MemoryNeed(mib, "test", whole_gpu=whole_gpu, add_headroom=add_headroom)
    return TaskRequest(key=key, label=f"label-{key}", memory=memory, gpus=gpus, **kwargs)  # type: ignore[arg-type]
