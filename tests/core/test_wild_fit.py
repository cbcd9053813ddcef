"""A fit learned from wild tries (stretches of e**-6 to e**9 among ordinary ones: a try timed
against another model's run, a stall) still predicts: a finite speed and range holding it, never
an error in the placement pass.  Found by ``bench/mixed_fleet.py`` (round 55): an H100 fit with a
residual scatter of 24 raised OverflowError in ``InterferenceFit.predict``."""

from __future__ import annotations

import math
import random

import pytest

from carma_airflow.core.interference import MAX_LOG_RANGE, CollocationObservation, InterferenceModel

TYPES = [f"t{i}" for i in range(12)]


@pytest.mark.parametrize("seed", [96, 102, 120])  # each of these raised before the range was held
def test_a_fit_on_wild_tries_predicts_finite_speeds_within_their_range(seed: int) -> None:
    rng = random.Random(seed)
    model = InterferenceModel()
    for _ in range(31):
        own = rng.uniform(0.1, 0.9)
        k = rng.choice((1, 2))
        co = tuple(rng.uniform(0.1, 0.9) for _ in range(k))
        stretch = math.exp(rng.choice((rng.gauss(0.3, 0.2), rng.uniform(-6.0, 9.0))))
        task = rng.choice(TYPES)
        partners = tuple(rng.choice(TYPES) for _ in range(k))
        model = model.observe("H100", CollocationObservation.steady(stretch, own, co, task=task, co_tasks=partners))
    fit = model.fit_for("H100")
    assert fit.learned and fit.terms is not None and fit.terms.scatter > 10.0  # wild indeed
    widest = 0.0
    for _ in range(200):
        k = rng.choice((1, 2))
        co = [rng.uniform(0.1, 0.9) for _ in range(k)]
        p = fit.predict(
            rng.uniform(0.1, 0.9), co, rng.choice([*TYPES, "new"]), [rng.choice([*TYPES, "new2"]) for _ in co]
        )
        assert all(math.isfinite(x) for x in p)
        assert 0.0 <= p.low <= p.speed <= p.high and 0.0 <= p.confidence <= 1.0
        widest = max(widest, math.log(p.high / p.speed))
    assert widest == pytest.approx(MAX_LOG_RANGE)  # the range was held, not merely never reached
