"""A deployment's earlier days: what replays of the same trace leave for the run after them.

``SimConfig.warm_runs`` earlier replays of the trace (same configuration) ran before this one: a
DAG that runs every day.  What carries over is what the executor keeps between runs of the same
Airflow tasks:

* always, with an estimator that learns memory, the peaks their successful tries held
  (:mod:`carma_airflow.sim.memory`): the store's learned peaks;
* with ``SimConfig.warm_learning`` as well, what the executor learns of speed: each task type's
  activity samples, its solo run times and the interference fit per GPU model (the store's
  activity history and its ``model:interference`` document; solo run times as an executor that
  ran the earlier days holds them), and the completion-time rule's track record (with
  ``track_record`` on: an executor that kept running between the days holds it in memory).
  Without it (the default, and the replays before round 41) activities, run times, the fit and
  the record start afresh, as after a new deployment.

Nothing of the earlier runs' tries carries over: every task is new on the run's own day.
Decision: the earlier days are replayed under the run's own configuration, so a policy's day
one is the day one it would have had, not a stand-in's.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

from carma_airflow.core.policies.completion_time import CompletionTime
from carma_airflow.sim.memory import MAX_WARM_RUNS, LearnedPeaks, learns_memory

WARM_PIECES = frozenset({"peaks", "activities", "runs", "fit", "record"})

if TYPE_CHECKING:
    from carma_airflow.sim.config import SimConfig
    from carma_airflow.sim.engine import Simulation
    from carma_airflow.sim.workload import Arrival


def warm_start(
    config: SimConfig, arrivals: Sequence[Arrival], simulation: Callable[[SimConfig], Simulation]
) -> Simulation | None:
    """The last of ``config.warm_runs`` replays of ``arrivals``, each a ``simulation`` of the
    day's configuration starting after the one before (:func:`start_after`); None where nothing
    would carry over (no replay, or only memory and an estimator that learns none).

    Decision: the engine hands itself in (``simulation``), so this module, which the engine
    imports, never imports the engine: no circle."""
    if config.warm_runs < 0 or config.warm_runs > MAX_WARM_RUNS:
        raise ValueError(f"warm_runs must be between 0 and {MAX_WARM_RUNS}, got {config.warm_runs}")
    if not config.warm_learning and not learns_memory(config.estimator):
        return None
    day = replace(config, warm_runs=0)
    last: Simulation | None = None
    for _ in range(config.warm_runs):
        sim = simulation(day)
        start_after(sim, last)
        sim.run(list(arrivals))
        last = sim
    return last


def start_after(sim: Simulation, earlier: Simulation | None) -> None:
    """``sim`` starts from what ``earlier`` (a run of the same configuration) left: its peaks,
    and with ``warm_learning`` its activities, solo run times and interference fit (those of
    ``SimConfig.warm_pieces``)."""
    if earlier is None:
        return
    pieces = sim.cfg.warm_pieces
    unknown = pieces - WARM_PIECES
    if unknown:
        raise ValueError(f"warm_pieces may hold {', '.join(sorted(WARM_PIECES))}; got {', '.join(sorted(unknown))}")
    if learns_memory(sim.cfg.estimator) and "peaks" in pieces:
        sim.peaks = earlier.peaks.copy()
    if not sim.cfg.warm_learning:
        return
    sim.know.carry_from(earlier.know, activities="activities" in pieces, runs="runs" in pieces, fit="fit" in pieces)
    policy = sim.predictive
    if "runs" in pieces:
        sim.run_times = list(earlier.run_times)
        sim.run_models = list(earlier.run_models)
        sim.run_bounds = list(earlier.run_bounds)
    if policy is not None and sim.know.learn_interference and "fit" in pieces:
        policy.use_model(sim.know.interference)
    if isinstance(policy, CompletionTime) and "runs" in pieces:
        for (kind, seconds), model in zip(earlier.run_times, earlier.run_models, strict=True):
            policy.learn_duration(kind, seconds, model)
        for kind, seconds, model, estimate in earlier.run_bounds:  # the tries that ran shared all along
            policy.learn_bound(kind, seconds, model, estimate)
    if isinstance(policy, CompletionTime) and isinstance(earlier.predictive, CompletionTime) and "record" in pieces:
        policy.record.carry_from(earlier.predictive.record)  # the executor keeps running between days


def warm_peaks(
    config: SimConfig, arrivals: Sequence[Arrival], simulation: Callable[[SimConfig], Simulation]
) -> LearnedPeaks:
    """What ``config.warm_runs`` earlier replays of ``arrivals`` (each a ``simulation``) leave in
    the store's learned peaks (empty when the estimator learns nothing)."""
    last = warm_start(replace(config, warm_learning=False), arrivals, simulation)
    return last.peaks.copy() if last is not None else LearnedPeaks()


__all__ = ["WARM_PIECES", "start_after", "warm_peaks", "warm_start"]
