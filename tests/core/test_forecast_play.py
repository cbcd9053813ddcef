"""One play loop for every forecast (core/policies/forecast.py, ``play``): the learned forecast's
kept rate tables give the same floats as asking its speeds at every step."""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import cast

import pytest

from carma_airflow.core.policies.forecast import MIN_SPEED, Forecast, LearnedForecast, Occupant, finish_times, play


def _stepwise(speeds: object, spec: str, occupants: Sequence[Occupant]) -> list[float]:
    """The loop as written out before: speeds asked at every step, no table."""
    ask = speeds.speeds  # type: ignore[attr-defined]
    left = [max(0.0, o.work) for o in occupants]
    alive = list(range(len(occupants)))
    out = [0.0] * len(occupants)
    t = 0.0
    while alive:
        rates = [max(MIN_SPEED, s) for s in ask(spec, [occupants[i] for i in alive])]
        best_j, best_dt = 0, float("inf")
        for j, i in enumerate(alive):
            dt = left[i] / rates[j]
            if dt < best_dt:
                best_j, best_dt = j, dt
        t += best_dt
        for j, i in enumerate(alive):
            left[i] -= rates[j] * best_dt
        out[alive[best_j]] = t
        del alive[best_j]
    return out


class Counting:
    """Speeds that fall with the others' activities, counting the asks (all :func:`finish_times`
    asks of a forecast that is not the learned one)."""

    def __init__(self) -> None:
        self.asked = 0

    def speeds(self, spec: str, occupants: Sequence[Occupant]) -> Sequence[float]:
        self.asked += 1
        total = sum(o.activity for o in occupants)
        return [max(0.0, 1.0 - 0.4 * (total - o.activity)) for o in occupants]


@pytest.mark.parametrize("seed", range(5))
def test_learned_and_plain_plays_give_the_same_floats(seed: int) -> None:
    rng = random.Random(seed)
    learned = LearnedForecast(caution=0.5)
    for _ in range(40):
        occ = [
            Occupant(rng.choice("abc"), rng.choice((0.2, 0.5, 0.9)), rng.uniform(-5.0, 3000.0))
            for _ in range(rng.randint(0, 4))
        ]
        want = _stepwise(learned, "A100-40GB", occ)
        assert learned.finish_times("A100-40GB", occ) == want  # its rates kept per set of occupants
        assert learned.finish_times("A100-40GB", occ) == want  # and looked up the second time
        assert play(learned.speeds, "A100-40GB", occ) == want  # no table: speeds at every step


def test_a_table_is_asked_once_per_set_of_who_runs() -> None:
    fc = Counting()
    occ = [Occupant("a", 0.5, 10.0), Occupant("b", 0.3, 20.0), Occupant("c", 0.9, 5.0)]
    want = _stepwise(fc, "X", occ)
    steps = fc.asked
    assert finish_times(cast(Forecast, fc), "X", occ) == want and fc.asked == 2 * steps  # a plain forecast: every step
    table: dict[int, list[float]] = {}
    assert play(fc.speeds, "X", occ, table) == want and fc.asked == 3 * steps
    assert play(fc.speeds, "X", occ, table) == want and fc.asked == 3 * steps  # all kept in the table
    assert sorted(table) == [0b010, 0b011, 0b111]  # c goes first (5 s), then a, then b alone


def test_kept_speeds_shared_by_unknown_types_are_what_each_would_be_predicted() -> None:
    """Types the fit has no term for share one kept prediction per activities (a new deployment's
    GPUs); each is still the fit's own prediction for it, and a known type keeps its own."""
    from carma_airflow.core.interference import CollocationObservation, InterferenceFit, InterferenceModel

    rng = random.Random(3)
    names = ["a", "b", "c"]
    obs = [
        CollocationObservation.steady(rng.uniform(1.1, 2.5), 0.5, (0.5,), task=rng.choice(names), co_tasks=("b",))
        for _ in range(60)
    ]
    model = InterferenceModel({"a100-40gb": InterferenceFit.prior("a100-40gb").observe_all(obs)})
    shared = LearnedForecast(model, caution=0.5)
    for _ in range(300):
        occ = [
            Occupant(rng.choice([*names, f"new{rng.randint(0, 50)}"]), rng.choice((0.3, 0.6)), 100.0)
            for _ in range(rng.randint(1, 3))
        ]
        fresh = LearnedForecast(model, caution=0.5)  # nothing kept
        assert shared.speeds("A100-40GB", occ) == fresh.speeds("A100-40GB", occ)
        assert shared.finish_times("A100-40GB", occ) == fresh.finish_times("A100-40GB", occ)
    new = LearnedForecast(model, caution=0.5)
    for i in range(100):  # types never seen, one activity: one prediction per number of tenants
        new.finish_times("A100-40GB", [Occupant(f"new{i}-{k}", 0.6, 100.0 * (k + 1)) for k in range(1 + i % 3)])
    assert len(new._memo) == 3
