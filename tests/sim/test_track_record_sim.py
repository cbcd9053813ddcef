"""The simulator tells completion-time how each try ended, as the executor does (core/track_record.py)."""

from __future__ import annotations

from dataclasses import replace

from carma_airflow.core import parse_gpu_list
from carma_airflow.core.policies.completion_time import CompletionTime
from carma_airflow.core.track_record import SHARE, WAIT
from carma_airflow.sim import SimConfig, Simulation, TaskType, synthetic_trace
from carma_airflow.sim.days import start_after


def test_off_by_default_nothing_is_recorded(catalog: dict[str, TaskType]) -> None:
    gpus = tuple(parse_gpu_list("2xA100-40GB"))
    sim = Simulation(SimConfig(gpus=gpus, warm_runs=1, warm_learning=True))
    policy = sim.placer.policy
    assert isinstance(policy, CompletionTime) and not policy.settings.track_record
    sim.run(synthetic_trace(catalog, 30, gpus=2, load=2.0, seed=7))
    assert len(policy.record) == 0


def test_a_congested_day_fills_the_track_record_with_the_tries_that_were_priced(catalog: dict[str, TaskType]) -> None:
    gpus = tuple(parse_gpu_list("2xA100-40GB"))
    arrivals = synthetic_trace(catalog, 30, gpus=2, load=2.0, seed=7)
    # a day two: run times known, so the options are priced in seconds (its record afresh: this day's ends only)
    cfg = SimConfig(gpus=gpus, warm_runs=1, warm_learning=True, track_record=True)
    sim = Simulation(replace(cfg, warm_pieces=cfg.warm_pieces - {"record"}))
    policy = sim.placer.policy
    assert isinstance(policy, CompletionTime)
    result = sim.run(arrivals)
    ended = policy.record.ended_of(WAIT) + policy.record.ended_of(SHARE)
    assert ended > 0, "no priced try ended: the simulator does not tell the policy of ends"
    # every recorded end is a try that completed: no more than the day's successes
    assert ended <= sum(t.outcome == "success" for t in result.tasks)
    predicted, actual = policy.record.sums(SHARE if policy.record.ended_of(SHARE) else WAIT)
    assert predicted > 0 and actual > 0


def test_day_two_starts_from_the_record_day_one_left_as_a_running_executor_does(catalog: dict[str, TaskType]) -> None:
    gpus = tuple(parse_gpu_list("2xA100-40GB"))
    cfg = SimConfig(gpus=gpus, warm_runs=1, warm_learning=True, track_record=True)
    first = Simulation(cfg)
    first.run(synthetic_trace(catalog, 30, gpus=2, load=2.0, seed=7))
    one = first.placer.policy
    assert isinstance(one, CompletionTime) and len(one.record) > 0
    second = Simulation(cfg)
    start_after(second, first)
    two = second.placer.policy
    assert isinstance(two, CompletionTime)
    assert [two.record.sums(k) for k in (WAIT, SHARE)] == [one.record.sums(k) for k in (WAIT, SHARE)]
    # the piece switched off (bench/learning.py --pieces): the record starts afresh
    third = Simulation(replace(cfg, warm_pieces=cfg.warm_pieces - {"record"}))
    start_after(third, first)
    assert isinstance(third.placer.policy, CompletionTime) and len(third.placer.policy.record) == 0
