"""A deployment's earlier days (sim/days.py): what replays of the same trace leave for the next run."""

from __future__ import annotations

from dataclasses import replace

import pytest

from carma_airflow.core import GpuSpec
from carma_airflow.core.policies.completion_time import CompletionTime
from carma_airflow.sim import Arrival, SimConfig, Simulation, TaskType, load_trace, packaged, simulate
from carma_airflow.sim.days import start_after, warm_start


@pytest.fixture
def t2(catalog: dict[str, TaskType]) -> list[Arrival]:
    return load_trace(packaged("trace_t2.csv"), catalog)


def _day_two(config: SimConfig, arrivals: list[Arrival]) -> tuple[Simulation, Simulation]:
    """(day one, day two before it runs): day two built as ``Simulation.run`` builds it."""
    first = warm_start(replace(config, warm_runs=1), arrivals, Simulation)
    assert first is not None
    second = Simulation(config)
    start_after(second, first)
    return first, second


def test_day_two_starts_from_what_day_one_learned_of_speed(four_a100: tuple[GpuSpec, ...], t2: list[Arrival]) -> None:
    config = SimConfig(gpus=four_a100, estimator="history", policy="completion-time", warm_learning=True)
    first, second = _day_two(config, t2)
    assert first.know.activities and first.run_times and first.know.interference.fits
    assert second.know.activities == first.know.activities  # the store's activity history
    assert second.know.interference is first.know.interference  # its model document
    assert second.peaks.of("maskrcnn") == first.peaks.of("maskrcnn") != ()
    policy = second.placer.policy
    assert isinstance(policy, CompletionTime)
    assert policy.learned.model is first.know.interference
    taught = first.placer.policy
    assert isinstance(taught, CompletionTime)
    for kind, _ in first.run_times:  # the run times the policy prices with
        assert policy.learned.durations.expected(kind) == taught.learned.durations.expected(kind)
    assert second.jobs == {} and second.run_times == first.run_times  # none of day one's tries


def test_every_try_of_day_two_is_decided_with_a_learned_activity_and_day_one_differs(
    four_a100: tuple[GpuSpec, ...], t2: list[Arrival]
) -> None:
    config = SimConfig(gpus=four_a100, estimator="history", policy="completion-time")
    learning = replace(config, warm_runs=1, warm_learning=True)
    sim = Simulation(learning)
    result = sim.run(list(t2))
    assert len(result.tasks) == len(t2)
    memory_only = Simulation(replace(learning, warm_learning=False))
    memory_only.run(list(t2))
    # what each placed try's decision knew of its activity: day one measured most types alone (a type
    # it never sampled alone has its reading beside others, or is borrowed from alike ones); afresh, few
    known, afresh = sim.know.placed, memory_only.know.placed
    assert "none" not in known and afresh.get("none", 0) > 0
    assert known["learned"] > 2 * afresh["learned"] and known.get("borrowed", 0) < afresh["borrowed"] / 2
    assert result != simulate(replace(config, warm_runs=1), list(t2))  # what it knew changed decisions


def test_memory_only_days_keep_the_replays_of_before(four_a100: tuple[GpuSpec, ...], t2: list[Arrival]) -> None:
    # warm_learning False (the default): the earlier days leave memory alone, as before round 41
    config = SimConfig(gpus=four_a100, estimator="history", policy="completion-time", warm_runs=1)
    sim = Simulation(config)
    sim.run(list(t2))
    first = warm_start(config, t2, Simulation)
    assert first is not None and sim.peaks.of("maskrcnn")[: len(first.peaks.of("maskrcnn"))] == first.peaks.of(
        "maskrcnn"
    )
    assert sim.know.placed.get("none", 0) > 0  # activities started afresh
    assert warm_start(replace(config, estimator="gpumemnet"), t2, Simulation) is None  # nothing would carry over
    with pytest.raises(ValueError, match="warm_runs"):
        warm_start(replace(config, warm_runs=-1), t2, Simulation)
