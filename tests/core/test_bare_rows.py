"""The forecast keeps a GPU's bare rows (its tenants' types, activities, expected work and start)
by its tenants across a model's hand-over (core/policies/forecast.py, ``_bare_kept``): what it
predicts after the hand-over is what a forecast that only ever knew the new model predicts, and a
run time that moves still moves the rows' work."""

from __future__ import annotations

import math
import random

import pytest
from helpers import busy_gpu, view

from carma_airflow.core import Placer
from carma_airflow.core.interference import CollocationObservation, InterferenceModel
from carma_airflow.core.interference_form import slowdown
from carma_airflow.core.policies.completion_time import CompletionTime
from carma_airflow.core.policies.forecast import LearnedForecast


def _model(beta: float) -> InterferenceModel:
    """A fit learned on A100-40GB from tries planted at ``beta``."""
    rng = random.Random(7)
    model = InterferenceModel()
    for _ in range(40):
        own = rng.uniform(0.1, 0.8)
        co = tuple(rng.uniform(0.1, 0.8) for _ in range(rng.choice((1, 2))))
        stretch = slowdown(own, co, beta) * math.exp(rng.gauss(0.0, 0.03))
        model = model.observe("A100-40GB", CollocationObservation.steady(stretch, own, co))
    assert model.fit_for("A100-40GB").learned
    return model


def _forecast(model: InterferenceModel) -> LearnedForecast:
    fc = LearnedForecast(model=model)
    for kind, seconds in (("tenant0-0", 900.0), ("tenant0-1", 1_600.0), ("tenant1-0", 2_500.0)):
        fc.learn_duration(kind, seconds)
    return fc


def _facts() -> list[object]:
    gpus = [busy_gpu(i, 10_000, tenants=2 + i % 2, placed_at=-200.0 * (i + 1)) for i in range(4)]
    return list(Placer(CompletionTime()).facts(view(*gpus)))


def test_after_a_hand_over_the_forecast_predicts_as_one_that_only_knew_the_new_model() -> None:
    light, heavy = _model(0.1), _model(0.9)
    facts = _facts()
    handed = _forecast(light)
    before = [handed.longest_left(f, 100.0) for f in facts]  # type: ignore[arg-type]
    handed.use_model(heavy)
    after = [handed.longest_left(f, 100.0) for f in facts]  # type: ignore[arg-type]
    fresh = _forecast(heavy)
    assert after == [fresh.longest_left(f, 100.0) for f in facts]  # type: ignore[arg-type]
    assert [handed.occupants(f, 100.0) for f in facts] == [fresh.occupants(f, 100.0) for f in facts]  # type: ignore[arg-type]
    assert after != before  # the heavier fit slows the tenants: their work left is longer
    assert all(a >= b for a, b in zip(after, before, strict=True))


def test_the_bare_rows_are_kept_across_a_hand_over(monkeypatch: pytest.MonkeyPatch) -> None:
    facts = _facts()
    fc = _forecast(_model(0.1))
    made: list[int] = []
    bare = LearnedForecast._bare_rows

    def counted(self: LearnedForecast, f: object) -> object:
        made.append(1)
        return bare(self, f)  # type: ignore[arg-type]

    monkeypatch.setattr(LearnedForecast, "_bare_rows", counted)
    for f in facts:
        fc.longest_left(f, 50.0)  # type: ignore[arg-type]
    assert len(made) == len(facts)
    fc.use_model(_model(0.9))
    for f in facts:
        fc.longest_left(f, 50.0)  # type: ignore[arg-type]
    assert len(made) == len(facts)  # the rows were kept: only the speeds were predicted afresh


def test_a_run_time_that_moves_moves_the_kept_rows_work() -> None:
    facts = _facts()
    fc = _forecast(_model(0.5))
    before = [fc.longest_left(f, 0.0) for f in facts]  # type: ignore[arg-type]
    for _ in range(5):
        fc.learn_duration("tenant1-0", 9_000.0)  # that type runs far longer than first measured
    after = [fc.longest_left(f, 0.0) for f in facts]  # type: ignore[arg-type]
    fresh = LearnedForecast(model=_model(0.5))
    for kind, seconds in (("tenant0-0", 900.0), ("tenant0-1", 1_600.0), ("tenant1-0", 2_500.0)):
        fresh.learn_duration(kind, seconds)
    for _ in range(5):
        fresh.learn_duration("tenant1-0", 9_000.0)
    assert after == [fresh.longest_left(f, 0.0) for f in facts]  # type: ignore[arg-type]
    assert after != before
