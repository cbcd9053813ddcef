"""Memory learned from ended tries in the simulator, as the executor learns it (sim/memory.py)."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from carma_airflow.core import GpuSpec
from carma_airflow.core.recovery import RecoverySettings
from carma_airflow.core.task import TaskRequest
from carma_airflow.sim import Arrival, SimConfig, Simulation, TaskType, load_trace, packaged, simulate
from carma_airflow.sim.days import warm_peaks
from carma_airflow.sim.memory import LearnedPeaks


def submitted(config: SimConfig, arrivals: list[Arrival]) -> tuple[Simulation, dict[int, TaskRequest]]:
    """Run and keep each job's first request, as the cycle received it."""
    sim = Simulation(config)
    requests: dict[int, TaskRequest] = {}
    submit = sim.cycle.submit

    def spy(request: TaskRequest, now: float, *, prior_ooms: int = 0, not_before: float | None = None) -> None:
        requests.setdefault(int(request.key[3:].split("#")[0]), request)
        submit(request, now, prior_ooms=prior_ooms, not_before=not_before)

    sim.cycle.submit = spy  # type: ignore[method-assign]
    sim.run(arrivals)
    return sim, requests


@pytest.fixture
def maskrcnn_thrice(catalog: dict[str, TaskType]) -> list[Arrival]:
    """maskrcnn (GPUMemNet 8,000 MiB, peak 28,606) at 0 s, 1 s (the first still runs) and after
    the first has ended."""
    task = catalog["maskrcnn"]
    return [Arrival(0, 0.0, task), Arrival(1, 1.0, task), Arrival(2, 3 * task.solo_s, task)]


def test_a_task_seen_before_asks_for_the_peak_its_ended_try_held(
    four_a100: tuple[GpuSpec, ...], maskrcnn_thrice: list[Arrival]
) -> None:
    sim, requests = submitted(SimConfig(gpus=four_a100, estimator="history"), maskrcnn_thrice)
    # nothing ended before jobs 0 and 1 arrived: the estimator's guess
    assert [requests[j].memory.source for j in (0, 1)] == ["gpumemnet", "gpumemnet"]
    assert requests[0].memory.mib == 8000
    # job 2: the largest learned peak (what the GPU held after the ramp) + 10 %, rounded to 256 MiB
    assert requests[2].memory.source.startswith("history (2 run(s), max 28606 MiB)")
    assert requests[2].memory.mib == math.ceil(28606 * 1.1 / 256) * 256
    assert sim.peaks.of("maskrcnn") == (28606, 28606, 28606)


def test_gpumemnet_alone_never_uses_the_learned_peaks(
    four_a100: tuple[GpuSpec, ...], maskrcnn_thrice: list[Arrival]
) -> None:
    _, requests = submitted(SimConfig(gpus=four_a100, estimator="gpumemnet"), maskrcnn_thrice)
    assert {r.memory.source for r in requests.values()} == {"gpumemnet"}


def test_a_task_that_never_ends_well_teaches_its_type_nothing(four_a100: tuple[GpuSpec, ...]) -> None:
    # larger than any free memory beside its co-tenant: it crashes at its ramp; the recovery
    # planner learns what it reached for its own next try, the type's history only learns
    # from a try that ended successfully
    big = TaskType("big", "big", "cnn", 32, 1, 30000, 1000, 1000, 1000, 600.0)
    small = TaskType("small", "small", "cnn", 32, 1, 20000, 1000, 1000, 1000, 6000.0)
    no_retry = RecoverySettings(max_oom_retries=0)
    sim = Simulation(SimConfig(gpus=four_a100[:1], estimator="history", recovery_settings=no_retry))
    result = sim.run([Arrival(0, 0.0, small), Arrival(1, 1.0, big)])
    assert result.oom_crashes == 1
    assert sim.peaks.of("big") == ()
    assert sim.peaks.of("small") == (20000,)


def test_a_warm_store_prevents_the_first_try_ooms(catalog: dict[str, TaskType], four_a100: tuple[GpuSpec, ...]) -> None:
    t2 = load_trace(packaged("trace_t2.csv"), catalog)
    # the paper's policy collocates maskrcnn where its underestimate OOMs (the premise of the test):
    # unfenced (the executor's default framework cap holds it to what the GPU has free beside its
    # co-tenants' promises, and on t2 that crash does not come)
    cold = SimConfig(gpus=four_a100, estimator="history", policy="interference-aware", isolation="none")
    assert simulate(replace(cold, estimator="gpumemnet"), t2).oom_crashes >= 1
    assert simulate(cold, t2).oom_crashes >= 1  # maskrcnn's first try: nothing learned yet
    assert simulate(replace(cold, warm_runs=1), t2).oom_crashes == 0
    store = warm_peaks(replace(cold, warm_runs=1), t2, Simulation)
    assert store.of("maskrcnn") and max(store.of("maskrcnn")) == catalog["maskrcnn"].peak_mib


def test_warm_runs_need_an_estimator_that_learns(
    four_a100: tuple[GpuSpec, ...], maskrcnn_thrice: list[Arrival]
) -> None:
    plain = SimConfig(gpus=four_a100, estimator="gpumemnet")  # the default learns (the executor's)
    assert len(warm_peaks(replace(plain, warm_runs=2), maskrcnn_thrice, Simulation)) == 0
    assert simulate(replace(plain, warm_runs=2), maskrcnn_thrice) == simulate(plain, maskrcnn_thrice)
    with pytest.raises(ValueError, match="warm_runs"):
        warm_peaks(replace(plain, estimator="history", warm_runs=-1), maskrcnn_thrice, Simulation)


def test_learned_peaks_keep_the_latest_five_as_the_executor_does() -> None:
    peaks = LearnedPeaks()
    for mib in range(1, 8):
        peaks.add("a", mib * 1000)
    peaks.add("a", 0)  # no reading: nothing learned
    assert peaks.of("a") == (3000, 4000, 5000, 6000, 7000)
    copy = peaks.copy()
    copy.add("a", 9000)
    assert peaks.of("a")[-1] == 7000 and copy.of("a")[-1] == 9000
    assert peaks.of("b") == ()
