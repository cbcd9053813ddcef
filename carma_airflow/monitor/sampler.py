"""The monitor: samples a probe every ``period_s`` on a daemon thread and keeps metric windows.

:meth:`Monitor.sample_once` does one round (the thread calls it; tests call it directly).  For
every GPU the monitor keeps the latest sample (errors included, so the caller can quarantine
the GPU), the last ``window`` good readings of SM activity, SM occupancy and DRAM activity as a
:class:`MetricWindow` for the risk analysis, and the time of its last good sample, from which
:meth:`Monitor.age` tells how stale the GPU is.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections import deque
from pathlib import Path

from carma_airflow.core.errors import ConfigError
from carma_airflow.core.gpu import parse_gpu_list
from carma_airflow.core.risk import DEFAULT_RISK, MetricWindow, RiskSettings
from carma_airflow.monitor.base import GpuSample, Probe, Reading

log = logging.getLogger(__name__)

BACKENDS = ("nvml", "simulated")


class _Series:
    """The last N readings of the three risk metrics of one GPU."""

    __slots__ = ("drama", "smact", "smocc")

    def __init__(self, size: int) -> None:
        self.smact: deque[float] = deque(maxlen=size)
        self.smocc: deque[float] = deque(maxlen=size)
        self.drama: deque[float] = deque(maxlen=size)

    def add(self, sample: GpuSample) -> None:
        self.smact.append(sample.smact or 0.0)
        self.smocc.append(sample.smocc or 0.0)
        self.drama.append(sample.drama or 0.0)


class Monitor:
    """Samples one probe periodically; thread-safe readers for the latest state."""

    def __init__(
        self,
        probe: Probe,
        period_s: float = 1.0,
        window: int = 30,
        risk: RiskSettings = DEFAULT_RISK,
    ) -> None:
        if period_s <= 0:
            raise ConfigError(f"monitor period must be positive, got {period_s} s")
        if window < 1:
            raise ConfigError(f"monitor window must hold at least one sample, got {window}")
        self.probe = probe
        self.period_s = period_s
        self.window_size = window
        self.risk = risk
        self._lock = threading.Lock()
        self._latest: dict[str, GpuSample] = {}
        self._windows: dict[str, _Series] = {}
        self._last_good: dict[str, float] = {}
        self._cpu_s = 0.0
        self._rounds = 0
        self._last_error: str | None = None
        self._logged_errors: set[str] = set()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # -- sampling --------------------------------------------------------------------------

    def sample_once(self) -> list[GpuSample]:
        """Read the probe once and record what it saw.  Probe errors propagate."""
        # CPU time of this thread only: other threads of the host process (a scheduler) are not ours.
        start = time.thread_time()
        try:
            samples = self.probe.sample()
        finally:
            spent = time.thread_time() - start
            with self._lock:
                self._cpu_s += spent
                self._rounds += 1
        with self._lock:
            for s in samples:
                self._latest[s.uuid] = s
                if s.error is not None:
                    continue
                series = self._windows.get(s.uuid)
                if series is None:
                    series = self._windows[s.uuid] = _Series(self.window_size)
                series.add(s)
                self._last_good[s.uuid] = max(s.at, self._last_good.get(s.uuid, s.at))
            self._last_error = None
        return samples

    def start(self) -> None:
        """Start the sampling thread (idempotent)."""
        if self._thread is not None and self._thread.is_alive():
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name=f"carma-monitor-{self.probe.backend}", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        """Stop the sampling thread and wait for it; the probe stays open (``probe.close()``)."""
        self._stop.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)
        self._thread = None

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def _run(self) -> None:
        while not self._stop.is_set():
            began = time.monotonic()
            try:
                self.sample_once()
            except Exception as exc:  # the thread must survive a failing probe; GPUs go stale
                message = f"{type(exc).__name__}: {exc}"
                with self._lock:
                    self._last_error = message
                if message not in self._logged_errors:
                    self._logged_errors.add(message)
                    log.error("GPU monitor (%s) could not sample: %s", self.probe.backend, message)
            self._stop.wait(max(0.0, self.period_s - (time.monotonic() - began)))

    # -- readers ---------------------------------------------------------------------------

    def latest(self) -> dict[str, GpuSample]:
        """The last sample of every GPU seen so far, by UUID (error samples included)."""
        with self._lock:
            return dict(self._latest)

    def reading(self) -> Reading:
        """The last sample of every GPU with its window and age, under one hold of the lock."""
        now = time.time()
        with self._lock:
            latest = dict(self._latest)
            windows = {u: self._window_locked(u) for u in latest}
            good = dict(self._last_good)
        ages = {u: max(0.0, now - good[u]) if u in good else math.inf for u in latest}
        return Reading(latest, windows, ages)

    def window(self, uuid: str) -> MetricWindow:
        """The last ``window`` good readings of the GPU (missing values as 0.0); empty if none."""
        with self._lock:
            return self._window_locked(uuid)

    def _window_locked(self, uuid: str) -> MetricWindow:
        series = self._windows.get(uuid)
        if series is None:
            return MetricWindow(settings=self.risk)
        return MetricWindow(tuple(series.smact), tuple(series.smocc), tuple(series.drama), self.risk)

    def age(self, uuid: str, now: float | None = None) -> float:
        """Seconds since the GPU's last good sample; infinity if it never had one."""
        with self._lock:
            last = self._last_good.get(uuid)
        if last is None:
            return math.inf
        return max(0.0, (time.time() if now is None else now) - last)

    def cpu_seconds_per_sample(self) -> float:
        """CPU seconds the sampling thread spent per probe call, on average (0.0 before any)."""
        with self._lock:
            return self._cpu_s / self._rounds if self._rounds else 0.0

    def last_error(self) -> str | None:
        """Why the last round on the thread failed (e.g. no NVIDIA driver), None once one succeeds."""
        with self._lock:
            return self._last_error


def make_probe(
    backend: str, simulated_gpus: str, ledger_path: Path, host: str = "localhost", nvml_detail_every: int = 5
) -> Probe:
    """The probe for ``[carma] gpu_backend``: ``nvml`` (real GPUs) or ``simulated``.

    ``simulated_gpus`` (e.g. ``4xA100-40GB``) and ``ledger_path`` matter only for ``simulated``,
    ``nvml_detail_every`` (``[carma] nvml_detail_every``) only for ``nvml``.
    """
    kind = backend.strip().lower()
    if kind == "nvml":
        from carma_airflow.monitor.nvml import NvmlProbe

        return NvmlProbe(host, detail_every=nvml_detail_every)
    if kind == "simulated":
        from carma_airflow.monitor.ledger import Ledger
        from carma_airflow.monitor.simulated import SimulatedProbe

        return SimulatedProbe(Ledger(ledger_path), parse_gpu_list(simulated_gpus), host)
    raise ConfigError(f"unknown gpu_backend {backend!r}; use 'nvml' (real GPUs) or 'simulated'")
