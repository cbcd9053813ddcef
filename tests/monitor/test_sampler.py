"""The monitor: windows, staleness, the sampling thread, CPU accounting."""

from __future__ import annotations

import logging
import math
import os
import time
from collections.abc import Callable

import pytest

from carma_airflow.core import ActivityProfile, ConfigError, MetricWindow, RiskSettings, parse_gpu_list
from carma_airflow.monitor import GpuSample, Monitor, NoGpuDriverError, NvmlProbe, SimulatedProbe
from carma_airflow.monitor.ledger import Ledger


def sample(uuid: str, at: float, smact: float | None, *, error: str | None = None, **kw: float | None) -> GpuSample:
    return GpuSample(uuid, 0, "T4", "h", 15360, 0, 15360, at, smact=smact, error=error, **kw)  # type: ignore[arg-type]


class ScriptedProbe:
    """Returns the next scripted list of samples on each call (an Exception is raised)."""

    backend = "scripted"

    def __init__(self, script: list[list[GpuSample] | Exception]) -> None:
        self.script = script
        self.calls = 0

    def sample(self) -> list[GpuSample]:
        item = self.script[min(self.calls, len(self.script) - 1)]
        self.calls += 1
        if isinstance(item, Exception):
            raise item
        return item

    def close(self) -> None:
        pass


def test_window_keeps_the_last_n_good_readings_with_missing_values_as_zero() -> None:
    readings = [sample("A", 100.0 + i, 0.1 * i, smocc=0.05 * i, drama=None) for i in range(5)]
    probe = ScriptedProbe([[r] for r in readings])
    risk = RiskSettings(smact_threshold=0.3)
    monitor = Monitor(probe, window=3, risk=risk)
    for _ in readings:
        monitor.sample_once()
    win = monitor.window("A")
    assert win.smact == pytest.approx((0.2, 0.3, 0.4))
    assert win.smocc == pytest.approx((0.1, 0.15, 0.2))
    assert win.drama == (0.0, 0.0, 0.0)
    assert win.settings is risk
    assert win == MetricWindow(win.smact, win.smocc, win.drama, risk)
    assert monitor.window("unknown") == MetricWindow(settings=risk)


def test_error_samples_are_latest_but_not_in_the_window_and_the_gpu_goes_stale() -> None:
    probe = ScriptedProbe(
        [
            [sample("A", 1000.0, 0.5), sample("B", 1000.0, 0.2)],
            [sample("A", 1001.0, None, error="NVMLError_GpuIsLost: GPU is lost"), sample("B", 1001.0, 0.3)],
        ]
    )
    monitor = Monitor(probe)
    monitor.sample_once()
    monitor.sample_once()
    latest = monitor.latest()
    assert latest["A"].error == "NVMLError_GpuIsLost: GPU is lost"
    assert monitor.window("A").smact == (0.5,)
    assert monitor.window("B").smact == (0.2, 0.3)
    assert monitor.age("A", now=1010.0) == pytest.approx(10.0)
    assert monitor.age("B", now=1010.0) == pytest.approx(9.0)
    assert monitor.age("never-seen") == math.inf


def test_age_of_a_fresh_simulated_gpu_is_small_and_grows(ledger: Ledger) -> None:
    monitor = Monitor(SimulatedProbe(ledger, parse_gpu_list("2xA100-40GB")))
    monitor.sample_once()
    first = monitor.age("GPU-SIM-0000")
    time.sleep(0.05)
    assert first < 0.05 <= monitor.age("GPU-SIM-0000")


def test_the_thread_samples_periodically_and_stops(ledger: Ledger) -> None:
    ledger.allocate(os.getpid(), "GPU-SIM-0000", 100, ActivityProfile(0.5, 0.3, 0.2), "test")
    monitor = Monitor(SimulatedProbe(ledger, parse_gpu_list("2xA100-40GB")), period_s=0.02, window=5)
    monitor.start()
    monitor.start()  # idempotent
    try:
        assert _wait(lambda: len(monitor.window("GPU-SIM-0000").smact) == 5)
        assert monitor.running
    finally:
        monitor.stop()
    assert not monitor.running
    assert monitor.latest()["GPU-SIM-0000"].memory_used_mib == 100
    assert 0 < monitor.cpu_seconds_per_sample() < 0.01


def test_the_thread_survives_a_failing_probe_and_logs_once(caplog: pytest.LogCaptureFixture) -> None:
    good = [sample("A", time.time(), 0.4)]
    probe = ScriptedProbe([NoGpuDriverError("NVML could not start: x"), NoGpuDriverError("NVML could not start: x")])
    probe.script += [good]
    monitor = Monitor(probe, period_s=0.01)
    with caplog.at_level(logging.ERROR, logger="carma_airflow.monitor.sampler"):
        monitor.start()
        try:
            assert _wait(lambda: probe.calls >= 2 and monitor.last_error() is None and "A" in monitor.latest())
        finally:
            monitor.stop()
    assert [r.getMessage().count("NVML could not start") for r in caplog.records] == [1]


def test_sample_once_propagates_probe_errors_and_still_counts_cpu() -> None:
    monitor = Monitor(NvmlProbe())  # this machine has no NVIDIA driver (skipped below if it has)
    try:
        monitor.sample_once()
    except NoGpuDriverError:
        assert monitor.cpu_seconds_per_sample() > 0
    else:
        pytest.skip("an NVIDIA driver is present")


def test_invalid_settings_are_refused() -> None:
    with pytest.raises(ConfigError):
        Monitor(ScriptedProbe([[]]), period_s=0)
    with pytest.raises(ConfigError):
        Monitor(ScriptedProbe([[]]), window=0)


def _wait(predicate: Callable[[], bool], timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.01)
    return False
