"""Simulated GPUs of one host among several: UUIDs that name the host.

The ledger names simulated GPUs ``GPU-SIM-0000``, ``GPU-SIM-0001``, ... on every host, so two
simulated hosts would share UUIDs and the cluster view (keyed by UUID) would mix them up.
:class:`HostLedger` creates the ledger with ``GPU-SIM-<host>-0000`` instead; everything that
reads the ledger afterwards (the probe, :func:`carma_airflow.testing.simulated_training`) takes
the UUIDs from the file, so nothing else changes.
"""

from __future__ import annotations

import re
from pathlib import Path

from carma_airflow.core.gpu import GpuSpec, parse_gpu_list
from carma_airflow.monitor.base import Probe
from carma_airflow.monitor.ledger import Ledger

_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]+")


def host_prefix(host: str) -> str:
    """UUID prefix of the simulated GPUs of ``host`` (characters a UUID list cannot hold become ``_``)."""
    return f"GPU-SIM-{_UNSAFE.sub('_', host)}-"


class HostLedger(Ledger):
    """A simulated GPU ledger whose UUIDs name the host (see the module docstring)."""

    def init(self, gpus: list[GpuSpec], host: str = "localhost", uuid_prefix: str | None = None) -> None:
        super().init(gpus, host, uuid_prefix or host_prefix(host))


def ledger_path(state_dir: str) -> Path:
    """Where a host keeps its simulated GPU ledger (the same file the executor uses on one host)."""
    return Path(state_dir) / "simulated-gpus.json"


def host_probe(backend: str, simulated_gpus: str, state_dir: str, host: str, nvml_detail_every: int = 5) -> Probe:
    """The probe of one GPU host: NVML, or simulated GPUs with host-qualified UUIDs."""
    if backend.strip().lower() == "simulated":
        from carma_airflow.monitor.simulated import SimulatedProbe

        return SimulatedProbe(HostLedger(ledger_path(state_dir)), parse_gpu_list(simulated_gpus), host)
    from carma_airflow.monitor.sampler import make_probe

    return make_probe(backend, simulated_gpus, ledger_path(state_dir), host=host, nvml_detail_every=nvml_detail_every)
