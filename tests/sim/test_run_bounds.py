"""A try that ran shared all along still says something of its run alone: at most its duration
(issue 41: day two priced such types at the median over the measured ones, up to 13x too long)."""

from __future__ import annotations

import math
from dataclasses import replace

from carma_airflow.core import parse_gpu_list
from carma_airflow.core.policies.completion_time import CompletionTime
from carma_airflow.core.sharing import SharingModel
from carma_airflow.sim import SimConfig, Simulation, TaskType, synthetic_trace


def test_day_two_knows_a_shared_tries_duration_as_a_bound_of_its_run_alone(catalog: dict[str, TaskType]) -> None:
    gpus = tuple(parse_gpu_list("2xA100-40GB"))
    arrivals = synthetic_trace(catalog, 30, gpus=2, load=2.0, seed=7)
    solo = {a.task.name: a.task.solo_s for a in arrivals}
    cfg = SimConfig(gpus=gpus, sharing=SharingModel(beta=0.8))
    day1 = Simulation(cfg)
    day1.run(list(arrivals))
    assert day1.run_bounds, "no try ran shared all along: the premise is gone"
    for kind, seconds, model, estimate in day1.run_bounds:
        assert seconds >= solo[kind] - 1e-6, f"{kind}: a shared try ({seconds} s) faster than alone ({solo[kind]} s)"
        assert model == "A100-40GB"
        assert estimate is None or 0 < estimate <= seconds
    day2 = Simulation(replace(cfg, warm_runs=1, warm_learning=True))
    policy = day2.placer.policy
    assert isinstance(policy, CompletionTime)
    day2.run(list(arrivals))  # starts from day one's lessons (sim/days.py), bounds included
    book = policy.learned.durations
    assert len(book) > 0
    for kind, seconds, _, _ in day1.run_bounds:
        if not book.measured(kind):
            expected = book.expected(kind)
            assert expected is not None and expected <= seconds


def test_a_shared_tries_estimate_alone_is_closer_to_its_run_alone_than_its_bound(catalog: dict[str, TaskType]) -> None:
    # issue 44: its duration over the slowdown the rule priced it at (core/policies/durations.py)
    gpus = tuple(parse_gpu_list("2xA100-40GB"))
    arrivals = synthetic_trace(catalog, 30, gpus=2, load=2.0, seed=7)
    solo = {a.task.name: a.task.solo_s for a in arrivals}
    day1 = Simulation(SimConfig(gpus=gpus, sharing=SharingModel(beta=0.8)))
    day1.run(list(arrivals))
    estimated = [(kind, seconds, e) for kind, seconds, _, e in day1.run_bounds if e is not None]
    assert len(estimated) >= 3, "too few shared tries priced to share: the premise is gone"
    bound_err = sum(abs(math.log(seconds / solo[kind])) for kind, seconds, _ in estimated)
    estimate_err = sum(abs(math.log(e / solo[kind])) for kind, _, e in estimated)
    assert estimate_err < bound_err
    policy = day1.placer.policy
    assert isinstance(policy, CompletionTime)
    assert not policy._placed_slowdown, "a try's slowdown outlived its end"
