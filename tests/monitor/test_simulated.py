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


LIGHT = ActivityProfile(0.2, 0.15, 0.1)


def test_each_process_reports_the_sm_time_it_got(ledger: Ledger, sleepers: Callable[[], int]) -> None:
    probe = SimulatedProbe(ledger, parse_gpu_list("2xA100-40GB"))
    heavy, light = sleepers(), sleepers()
    ledger.allocate(heavy, GPU0, 6000, HEAVY, "heavy")
    alone = probe.sample()[0]
    assert [p.pid for p in alone.processes] == [heavy]
    assert alone.processes[0].sm_util == pytest.approx(HEAVY.sm_activity)  # alone: its solo activity
    ledger.allocate(light, GPU0, 2000, LIGHT, "light")
    shared = probe.sample()[0]
    util = {p.pid: p.sm_util or -1.0 for p in shared.processes}  # -1: missing, which would fail below
    assert 0 < util[heavy] < HEAVY.sm_activity and 0 < util[light] < LIGHT.sm_activity  # slowed by each other
    assert util[heavy] > util[light]  # the heavier job keeps more SMs busy
    assert util[heavy] + util[light] == pytest.approx(shared.smact)  # the parts make up the GPU's activity
    assert probe.sample()[1].processes == ()


@pytest.mark.parametrize("model", [SharingModel(), SharingModel(beta=1.0, stall_visibility=3.0)])
def test_an_oversubscribed_gpu_shares_out_no_more_than_its_sm_time(
    ledger: Ledger, sleepers: Callable[[], int], model: SharingModel
) -> None:
    # Three jobs that each want 90 % of the SMs.  The default model's counters already stay
    # below 100 %; one whose counters see every stall (stall_visibility 3) would read more than
    # the GPU has, so its parts are cut to the GPU's 100 %.
    probe = SimulatedProbe(ledger, parse_gpu_list("2xA100-40GB"), model=model)
    full = ActivityProfile(0.9, 0.6, 0.5)
    for pid in [sleepers() for _ in range(3)]:
        ledger.allocate(pid, GPU0, 3000, full, "full")
    sample = probe.sample()[0]
    utils = [p.sm_util for p in sample.processes]
    assert sample.smact is not None and all(u is not None for u in utils)
    assert sum(u for u in utils if u is not None) == pytest.approx(sample.smact)
    assert utils[0] == pytest.approx(utils[1]) == pytest.approx(utils[2])  # equal jobs, equal shares
    assert all(u is not None and u <= 1 / 3 + 1e-9 for u in utils)  # nobody gets more than its share
    if model.stall_visibility > 1:
        assert sample.smact == 1.0  # saturated: the parts were scaled down to fit


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
