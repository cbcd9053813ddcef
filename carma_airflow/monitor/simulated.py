"""Simulated GPUs: memory from the ledger, activity, power and energy from the sharing model.

Each :meth:`SimulatedProbe.sample` reads the ledger once.  On every GPU the live allocations
are its tenants: used memory is their sum, each process is listed with what it holds, and SM
activity, occupancy and DRAM activity come from :meth:`SharingModel.telemetry` with each
tenant progressing at ``1 / slowdown`` (:meth:`SharingModel.slowdowns`); each process's
``sm_util`` is its part of that SM activity (:func:`process_sm_utils`).  Power follows
:meth:`SharingModel.power_w`; energy is integrated between samples (trapezoids), starting at
zero when the probe starts.  The simulated GPU reports ``busy`` equal to its SM activity (it
models no partly filled kernels).

``Ledger.set_fault(uuid, message)`` makes that GPU's samples carry ``error=message`` and no
readings, as an NVML failure would.
"""

from __future__ import annotations

import threading
import time
from collections import defaultdict

from carma_airflow.core.gpu import GpuSpec
from carma_airflow.core.sharing import SharingModel
from carma_airflow.monitor.base import GpuSample, ProcessUsage
from carma_airflow.monitor.ledger import Allocation, Ledger, LedgerGpu


def gpu_telemetry(model: SharingModel, tenants: list[Allocation]) -> tuple[float, float, float]:
    """(SM activity, SM occupancy, DRAM activity) of one GPU with these tenants."""
    if not tenants:
        return 0.0, 0.0, 0.0
    profiles = [t.profile for t in tenants]
    rates = [1.0 / s for s in model.slowdowns(profiles)]
    return model.telemetry(profiles, rates)


def process_sm_utils(model: SharingModel, tenants: list[Allocation]) -> list[float]:
    """Each tenant's share of the GPU's SM activity (0..1, in ``tenants``' order): what it got.

    A tenant's part is the GPU's SM activity with only that tenant progressing (the sharing
    model's own telemetry, its rate slowed by its co-tenants); an oversubscribed GPU cannot give
    more than all of its SM time, so the parts are scaled to sum to the GPU's SM activity.
    Alone on a GPU a tenant reads its profile's SM activity.
    """
    if not tenants:
        return []
    profiles = [t.profile for t in tenants]
    rates = [1.0 / s for s in model.slowdowns(profiles)]
    parts = []
    for i in range(len(tenants)):
        only = [r if j == i else 0.0 for j, r in enumerate(rates)]
        parts.append(model.telemetry(profiles, only)[0])
    total = sum(parts)
    smact = model.telemetry(profiles, rates)[0]
    scale = smact / total if total > smact > 0.0 else 1.0
    return [min(1.0, p * scale) for p in parts]


class SimulatedProbe:
    """Reads the simulated GPUs of one host from a :class:`Ledger` (creating it if needed)."""

    backend: str = "simulated"

    def __init__(
        self,
        ledger: Ledger,
        gpus: list[GpuSpec],
        host: str = "localhost",
        model: SharingModel | None = None,
    ) -> None:
        self.ledger = ledger
        self.host = host
        self.model = model if model is not None else SharingModel()
        ledger.init(list(gpus), host)
        self._lock = threading.Lock()
        self._energy: dict[str, float] = {}
        self._last: dict[str, tuple[float, float]] = {}  # uuid -> (time, power) of the last reading

    def sample(self) -> list[GpuSample]:
        with self._lock:
            state = self.ledger.state()
            now = time.time()
            by_gpu: dict[str, list[Allocation]] = defaultdict(list)
            for alloc in state.allocations:
                by_gpu[alloc.uuid].append(alloc)
            return [self._one(gpu, by_gpu.get(gpu.uuid, []), state.faults.get(gpu.uuid), now) for gpu in state.gpus]

    def close(self) -> None:
        """Nothing to release: the ledger belongs to every process that uses it."""

    def _one(self, gpu: LedgerGpu, tenants: list[Allocation], fault: str | None, now: float) -> GpuSample:
        name = gpu.spec.name
        if fault is not None:
            self._last.pop(gpu.uuid, None)
            return GpuSample(gpu.uuid, gpu.index, name, self.host, 0, 0, 0, now, error=fault)
        total = gpu.spec.memory_mib
        used = sum(t.mib for t in tenants)
        held: dict[int, int] = defaultdict(int)
        sm_util: dict[int, float] = defaultdict(float)
        for t, util in zip(tenants, process_sm_utils(self.model, tenants), strict=True):
            held[t.pid] += t.mib
            sm_util[t.pid] = min(1.0, sm_util[t.pid] + util)
        smact, smocc, drama = gpu_telemetry(self.model, tenants)
        power = self.model.power_w(gpu.spec, bool(tenants), smact, drama)
        energy = self._energy.get(gpu.uuid, 0.0)
        last = self._last.get(gpu.uuid)
        if last is not None and now > last[0]:
            energy += (now - last[0]) * (last[1] + power) / 2.0
        self._energy[gpu.uuid] = energy
        self._last[gpu.uuid] = (now, power)
        return GpuSample(
            uuid=gpu.uuid,
            index=gpu.index,
            name=name,
            host=self.host,
            memory_total_mib=total,
            memory_used_mib=used,
            memory_free_mib=max(0, total - used),
            at=now,
            busy=smact,
            smact=smact,
            smocc=smocc,
            drama=drama,
            activity_source="simulated",
            power_w=power,
            energy_j=energy,
            processes=tuple(ProcessUsage(pid, mib, sm_util[pid]) for pid, mib in sorted(held.items())),
        )
