"""The simulated probe: memory from the ledger, telemetry and power from the sharing model."""

from __future__ import annotations

import itertools
import os
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from monitor_helpers import A100_MIB

from carma_airflow.core import ActivityProfile, ConfigError, SharingModel, gpu_spec, parse_gpu_list
from carma_airflow.monitor import Monitor, NvmlProbe, SimulatedProbe, make_probe
from carma_airflow.monitor.ledger import Ledger

GPU0, GPU1 = "GPU-SIM-0000", "GPU-SIM-0001"
A100 = gpu_spec("A100-40GB")
HEAVY = ActivityProfile(0.6, 0.4, 0.3)


def by_uuid(probe: SimulatedProbe) -> dict[str, object]:
    return {s.uuid: s for s in probe.sample()}


def test_idle_gpus_report_total_memory_and_idle_power(ledger: Ledger) -> None:
    probe = SimulatedProbe(ledger, parse_gpu_list("2xA100-40GB"), host="node-1")
    samples = probe.sample()
    assert [s.uuid for s in samples] == [GPU0, GPU1]
    s = samples[0]
    assert (s.index, s.name, s.host) == (0, "A100-40GB", "node-1")
    assert (s.memory_total_mib, s.memory_used_mib, s.memory_free_mib) == (A100_MIB, 0, A100_MIB)
    assert (s.smact, s.smocc, s.drama, s.busy) == (0.0, 0.0, 0.0, 0.0)
    assert s.activity_source == "simulated"
    assert s.power_w == pytest.approx(A100.idle_power_w)
    assert s.processes == () and s.error is None


def test_telemetry_grows_with_tenants_and_matches_the_model(ledger: Ledger, sleepers: Callable[[], int]) -> None:
    probe = SimulatedProbe(ledger, parse_gpu_list("2xA100-40GB"))
    model = SharingModel()
    first, second = sleepers(), sleepers()
    ledger.allocate(first, GPU0, 6000, HEAVY, "a")
    one = probe.sample()[0]
    ledger.allocate(second, GPU0, 4000, HEAVY, "b")
    two = probe.sample()[0]
    assert one.memory_used_mib == 6000 and two.memory_used_mib == 10000
    assert two.memory_free_mib == A100_MIB - 10000
    assert [(p.pid, p.used_mib) for p in two.processes] == sorted([(first, 6000), (second, 4000)])
    assert 0 < one.smact < two.smact  # type: ignore[operator]
    assert one.smocc < two.smocc and one.drama < two.drama  # type: ignore[operator]
    assert one.power_w < two.power_w  # type: ignore[operator]
    rates = [1 / s for s in model.slowdowns([HEAVY, HEAVY])]
    assert (two.smact, two.smocc, two.drama) == pytest.approx(model.telemetry([HEAVY, HEAVY], rates))
    assert one.smact == pytest.approx(HEAVY.sm_activity)  # alone: its solo activity
    assert two.power_w == pytest.approx(model.power_w(A100, True, two.smact, two.drama))  # type: ignore[arg-type]
    other = probe.sample()[1]
    assert other.memory_used_mib == 0 and other.smact == 0.0


def test_energy_is_integrated_between_samples(ledger: Ledger) -> None:
    probe = SimulatedProbe(ledger, parse_gpu_list("2xA100-40GB"))
    readings = [probe.sample()[0]]
    time.sleep(0.05)
    readings.append(probe.sample()[0])
    ledger.allocate(os.getpid(), GPU0, 1000, HEAVY, "busy")
    time.sleep(0.05)
    readings += [probe.sample()[0]]
    time.sleep(0.05)
    readings += [probe.sample()[0]]
    energy = [r.energy_j for r in readings]
    assert energy[0] == 0.0
    assert all(a is not None and b is not None and a < b for a, b in itertools.pairwise(energy))
    s0, s1, s2, s3 = readings
    idle_mean = (s1.energy_j - s0.energy_j) / (s1.at - s0.at)  # type: ignore[operator]
    busy_mean = (s3.energy_j - s2.energy_j) / (s3.at - s2.at)  # type: ignore[operator]
    assert idle_mean == pytest.approx(A100.idle_power_w)
    assert busy_mean == pytest.approx(s3.power_w)  # a steady load: trapezoids are exact
    assert busy_mean > 2 * idle_mean


def test_dead_tenants_vanish_from_samples(ledger: Ledger, sleepers: Callable[[], int]) -> None:
    probe = SimulatedProbe(ledger, parse_gpu_list("2xA100-40GB"))
    pid = sleepers()
    ledger.allocate(pid, GPU1, 3000, HEAVY, "x")
    assert probe.sample()[1].memory_used_mib == 3000
    os.kill(pid, 9)
    os.waitpid(pid, 0)
    assert probe.sample()[1].memory_used_mib == 0


def test_a_fault_makes_the_gpu_report_an_error_until_cleared(ledger: Ledger) -> None:
    probe = SimulatedProbe(ledger, parse_gpu_list("2xA100-40GB"))
    ledger.set_fault(GPU1, "NVMLError_GpuIsLost: GPU is lost")
    s0, s1 = probe.sample()
    assert s0.error is None
    assert s1.error == "NVMLError_GpuIsLost: GPU is lost" and not s1.ok
    assert s1.smact is None and s1.memory_total_mib == 0
    ledger.set_fault(GPU1, None)
    assert probe.sample()[1].error is None


def test_the_probe_creates_the_ledger_itself(tmp_path: Path) -> None:
    ledger = Ledger(tmp_path / "new" / "ledger.json")
    probe = SimulatedProbe(ledger, parse_gpu_list("1xH100-80GB"))
    assert probe.sample()[0].memory_total_mib == gpu_spec("H100-80GB").memory_mib
    probe.close()


def test_make_probe_builds_both_backends_and_names_them_on_a_typo(tmp_path: Path) -> None:
    sim = make_probe("Simulated", "3xL4", tmp_path / "ledger.json", host="h")
    assert isinstance(sim, SimulatedProbe) and sim.backend == "simulated"
    assert [s.name for s in sim.sample()] == ["L4"] * 3
    real = make_probe("nvml", "", tmp_path / "unused.json")
    assert isinstance(real, NvmlProbe) and real.backend == "nvml"
    with pytest.raises(ConfigError, match=r"'nvml'.*'simulated'"):
        make_probe("dcgm", "", tmp_path / "x.json")


def test_sampling_cost_is_small(ledger: Ledger, sleepers: Callable[[], int]) -> None:
    probe = SimulatedProbe(ledger, parse_gpu_list("2xA100-40GB"))
    for _ in range(4):
        ledger.allocate(sleepers(), GPU0, 1000, HEAVY, "t")
    monitor = Monitor(probe)
    for _ in range(100):
        monitor.sample_once()
    assert monitor.cpu_seconds_per_sample() < 0.005
