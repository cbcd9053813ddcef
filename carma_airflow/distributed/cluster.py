"""The executor's view over every GPU host: a :class:`~carma_airflow.monitor.base.GpuSource`
built from the rows the hosts' agents publish in the store.

Each refresh (at most once per ``period_s``, on the caller's thread) reads every host row.  A
host is *live* while both its agent and its Celery worker are heard from: their heartbeats in
the row must have changed within ``host_timeout_s`` as measured by this process's own clock (so
clocks of other hosts do not matter, except on the very first look).  GPUs of hosts that are not
live are left out of :meth:`latest`, so the placer does not use them, and
:meth:`host_status` tells the launcher that the host's tries are lost.

Metric windows for the risk analysis are kept in memory from successive readings.  When the
store cannot be read, the view keeps its last state and declares no host lost (the store, not
the hosts, is what failed).
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime

from carma_airflow.core.errors import CarmaError
from carma_airflow.core.risk import DEFAULT_RISK, MetricWindow, RiskSettings
from carma_airflow.distributed.samples import from_json
from carma_airflow.monitor.base import GpuSample, Reading
from carma_airflow.store.records import HostRecord
from carma_airflow.store.store import Store

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class HostStatus:
    """What the view knows of one host.  ``lost``: the host's tries must be ended (``reason`` says why)."""

    host: str
    known: bool
    live: bool
    lost: bool
    agent_silent_s: float
    worker_silent_s: float
    reason: str = ""


@dataclass(slots=True)
class _Host:
    record: HostRecord
    agent_seen: float  # local time the agent's heartbeat last changed
    worker_seen: float  # local time the worker's heartbeat last changed (-inf: never / stopped)


@dataclass(slots=True)
class _Gpu:
    sample: GpuSample
    seen: float  # local time this reading was first seen
    smact: deque[float] = field(default_factory=deque)
    smocc: deque[float] = field(default_factory=deque)
    drama: deque[float] = field(default_factory=deque)


def _ts(at: datetime | None) -> float | None:
    return None if at is None else at.timestamp()


class ClusterMonitor:
    """Every GPU host's GPUs, from the store; see the module docstring."""

    def __init__(
        self,
        store: Store,
        *,
        host_timeout_s: float,
        period_s: float = 1.0,
        window: int = 30,
        risk: RiskSettings = DEFAULT_RISK,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.store = store
        self.host_timeout_s = host_timeout_s
        self.period_s = period_s
        self.window_size = window
        self.risk = risk
        self.clock = clock
        self._lock = threading.Lock()
        self._hosts: dict[str, _Host] = {}
        self._gpus: dict[str, _Gpu] = {}
        self._refreshed_at = -math.inf  # local time of the last refresh attempt
        self._read_ok_at = -math.inf  # local time of the last successful read
        self._error: str | None = None
        self.refresh_s = 0.0  # how long the last successful read took

    # -- refreshing ------------------------------------------------------------------------

    def refresh(self, force: bool = False) -> None:
        """Read every host row (at most once per ``period_s`` unless ``force``)."""
        now = self.clock()
        with self._lock:
            if not force and now - self._refreshed_at < self.period_s:
                return
            self._refreshed_at = now
        began = time.perf_counter()
        try:
            rows = self.store.hosts()
        except CarmaError as exc:
            message = str(exc)
            if message != self._error:
                log.error("carma cluster view: could not read the GPU hosts: %s", message)
            self._error = message
            return
        self.refresh_s = time.perf_counter() - began
        self._error = None
        with self._lock:
            self._read_ok_at = now
            self._merge(rows, now)

    def _merge(self, rows: list[HostRecord], now: float) -> None:
        seen_hosts = set()
        for rec in rows:
            seen_hosts.add(rec.host)
            old = self._hosts.get(rec.host)
            agent_at, worker_at = _ts(rec.heartbeat_at), _ts(rec.worker_at)
            if old is None:  # first look: trust the writer's clock, never ahead of ours
                agent_seen = min(now, agent_at) if agent_at is not None else -math.inf
                worker_seen = min(now, worker_at) if worker_at is not None else -math.inf
            else:
                agent_seen = now if rec.heartbeat_at != old.record.heartbeat_at else old.agent_seen
                if worker_at is None:
                    worker_seen = -math.inf  # the worker said it stopped
                else:
                    worker_seen = now if rec.worker_at != old.record.worker_at else old.worker_seen
            self._hosts[rec.host] = _Host(rec, agent_seen, worker_seen)
            for data in rec.gpus:
                try:
                    sample = from_json(dict(data), rec.host)
                except (KeyError, TypeError, ValueError) as exc:
                    log.warning("carma cluster view: unreadable GPU sample from %s: %s", rec.host, exc)
                    continue
                self._add_sample(sample, now)
        for gone in set(self._hosts) - seen_hosts:  # forgotten (decommissioned) hosts
            del self._hosts[gone]
        for uuid in [u for u, g in self._gpus.items() if g.sample.host not in self._hosts]:
            del self._gpus[uuid]

    def _add_sample(self, sample: GpuSample, now: float) -> None:
        gpu = self._gpus.get(sample.uuid)
        if gpu is None:
            size = self.window_size
            gpu = self._gpus[sample.uuid] = _Gpu(
                sample, min(now, sample.at), deque(maxlen=size), deque(maxlen=size), deque(maxlen=size)
            )
        elif sample.at <= gpu.sample.at and sample.host == gpu.sample.host:
            return  # the same reading again
        else:
            gpu.sample, gpu.seen = sample, now
        if sample.error is None:
            gpu.smact.append(sample.smact or 0.0)
            gpu.smocc.append(sample.smocc or 0.0)
            gpu.drama.append(sample.drama or 0.0)

    # -- hosts -----------------------------------------------------------------------------

    def _status(self, name: str, now: float) -> HostStatus:
        host = self._hosts.get(name)
        if host is None:
            return HostStatus(name, False, False, False, math.inf, math.inf, f"no agent ever published host {name!r}")
        agent_silent = max(0.0, now - host.agent_seen)
        worker_silent = max(0.0, now - host.worker_seen)
        reasons = []
        if agent_silent > self.host_timeout_s:
            reasons.append(f"its agent sent no heartbeat for {agent_silent:.0f} s")
        if worker_silent > self.host_timeout_s:
            if host.record.worker_at is None:
                reasons.append("its Celery worker is not running")
            else:
                reasons.append(f"its Celery worker sent no heartbeat for {worker_silent:.0f} s")
        live = not reasons
        # lost only when the store was read recently: an unreadable store is not a dead host
        fresh = now - self._read_ok_at <= self.period_s * 3 + 1.0
        reason = ""
        if reasons:
            reason = (
                f"GPU host {name!r} is out of service: {' and '.join(reasons)} "
                f"(host_timeout_seconds = {self.host_timeout_s:g})"
            )
        return HostStatus(name, True, live, not live and fresh, agent_silent, worker_silent, reason)

    def host_status(self, name: str, now: float | None = None, *, refresh: bool = True) -> HostStatus:
        """Whether ``name`` is live, or lost (its tries must be ended), and why.

        ``refresh=False``: from the last read only, no store I/O (a handle's poll; the executor's
        ``latest()`` refreshes the view once per heartbeat).
        """
        if refresh:
            self.refresh()
        with self._lock:
            return self._status(name, self.clock() if now is None else now)

    def queue_of(self, name: str) -> str | None:
        with self._lock:
            host = self._hosts.get(name)
            return None if host is None else host.record.queue

    # -- GpuSource -------------------------------------------------------------------------

    def latest(self) -> dict[str, GpuSample]:
        """The newest sample of every GPU of every live host, by UUID."""
        self.refresh()
        with self._lock:
            return {uuid: g.sample for uuid, g in self._live_gpus(self.clock()).items()}

    def reading(self) -> Reading:
        """``latest()`` with each GPU's window and age, read under one hold of the lock."""
        self.refresh()
        now = self.clock()
        with self._lock:
            gpus = self._live_gpus(now)
            latest = {uuid: g.sample for uuid, g in gpus.items()}
            windows = {u: self._window_of(g) for u, g in gpus.items()}
            ages = {u: math.inf if g.sample.error is not None else max(0.0, now - g.seen) for u, g in gpus.items()}
        return Reading(latest, windows, ages)

    def _live_gpus(self, now: float) -> dict[str, _Gpu]:
        """The GPUs of the hosts live at ``now`` (the caller holds the lock)."""
        live = {name for name in self._hosts if self._status(name, now).live}
        return {uuid: g for uuid, g in self._gpus.items() if g.sample.host in live}

    def _window_of(self, gpu: _Gpu) -> MetricWindow:
        return MetricWindow(tuple(gpu.smact), tuple(gpu.smocc), tuple(gpu.drama), self.risk)

    def window(self, uuid: str) -> MetricWindow:
        with self._lock:
            gpu = self._gpus.get(uuid)
            return MetricWindow(settings=self.risk) if gpu is None else self._window_of(gpu)

    def age(self, uuid: str, now: float | None = None) -> float:
        """Seconds since the GPU's newest reading reached this view (infinite when unknown)."""
        with self._lock:
            gpu = self._gpus.get(uuid)
        if gpu is None or gpu.sample.error is not None:
            return math.inf
        return max(0.0, (self.clock() if now is None else now) - gpu.seen)

    def stop(self) -> None:
        """Nothing runs in the background: the view refreshes on its readers' thread."""

    def last_error(self) -> str | None:
        return self._error
