"""``carma agent``: one per GPU host.  Samples the host's GPUs and publishes them with a heartbeat.

Every ``[carma] sample_period`` the agent reads every GPU of its host (NVML or simulated) and
rewrites the host's row in the shared store (``carma_host``): the heartbeat, the Celery queue
its worker consumes (``[carma] queue_prefix`` + ``[carma] host``) and the newest reading of each
GPU.  The executor builds its cluster view from these rows; a host whose heartbeat stops for
``[carma] host_timeout_seconds`` leaves placement and its running tries are ended as lost.

A probe that fails (a driver gone) or a store that does not answer is logged once per distinct
message and retried the next period: the agent itself keeps running.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone

from carma_airflow.config.settings import CarmaSettings
from carma_airflow.distributed.samples import to_json
from carma_airflow.distributed.simgpus import host_probe
from carma_airflow.monitor.base import GpuSample, Probe
from carma_airflow.store.records import HostRecord
from carma_airflow.store.store import Store

log = logging.getLogger(__name__)

AGENT_VERSION = "carma-agent/1"


def queue_for(settings: CarmaSettings, host: str | None = None) -> str:
    """The Celery queue of a GPU host: ``[carma] queue_prefix`` followed by its name."""
    return f"{settings.queue_prefix}{host or settings.host}"


def _utc(ts: float) -> datetime:
    return datetime.fromtimestamp(ts, tz=timezone.utc)


@dataclass
class Agent:
    """Publishes one host's GPUs; :meth:`beat` is one round, :meth:`run` loops until stopped."""

    settings: CarmaSettings
    store: Store
    probe: Probe
    clock: Callable[[], float] = time.time
    started_at: float = field(default_factory=time.time)
    beats: int = 0
    _logged: set[str] = field(default_factory=set)

    @classmethod
    def from_settings(cls, settings: CarmaSettings, store: Store | None = None) -> Agent:
        """The agent of this host as ``[carma]`` describes it; the probe's own error if it cannot start."""
        probe = host_probe(
            settings.gpu_backend,
            settings.simulated_gpus,
            settings.state_dir,
            settings.host,
            nvml_detail_every=settings.nvml_detail_every,
        )
        if store is None:
            store = Store(settings.store_url)
            store.migrate()
        return cls(settings, store, probe)

    @property
    def queue(self) -> str:
        return queue_for(self.settings)

    def record(self, samples: list[GpuSample], now: float) -> HostRecord:
        return HostRecord(
            host=self.settings.host,
            queue=self.queue,
            heartbeat_at=_utc(now),
            started_at=_utc(self.started_at),
            backend=self.probe.backend,
            agent_version=AGENT_VERSION,
            pid=os.getpid(),
            gpus=tuple(to_json(s) for s in samples),
        )

    def beat(self) -> HostRecord:
        """Sample every GPU once and publish; probe and store errors propagate."""
        samples = self.probe.sample()
        rec = self.record(samples, self.clock())
        self.store.publish_host(rec)
        self.beats += 1
        return rec

    def run(self, stop: threading.Event | None = None, rounds: int | None = None) -> None:
        """Beat every ``sample_period`` until ``stop`` is set (or ``rounds`` beats were tried)."""
        stop = stop or threading.Event()
        tried = 0
        log.info(
            "carma agent for host %s: %s GPUs, queue %s, store %s",
            self.settings.host,
            self.probe.backend,
            self.queue,
            self.store.masked_url,
        )
        while not stop.is_set() and (rounds is None or tried < rounds):
            began = time.monotonic()
            tried += 1
            try:
                self.beat()
            except Exception as exc:  # the agent outlives a failing probe or an unreachable store
                message = f"{type(exc).__name__}: {exc}"
                if message not in self._logged:
                    self._logged.add(message)
                    log.error("carma agent %s could not publish: %s", self.settings.host, message)
            stop.wait(max(0.0, self.settings.sample_period - (time.monotonic() - began)))

    def close(self) -> None:
        self.probe.close()
