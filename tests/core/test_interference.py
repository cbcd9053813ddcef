"""The learned interference model: the prior equals the sharing model; the fit is robust and bounded."""

from __future__ import annotations

import json
import math
import random

import pytest

from carma_airflow.core.interference import (
    DEFAULT_INTERFERENCE_SETTINGS,
    CollocationObservation,
    InterferenceFit,
    InterferenceModel,
    InterferenceSettings,
    Segment,
    predicted_stretch,
    slowdown,
)
from carma_airflow.core.sharing import ActivityProfile, SharingModel


def shrunk(fitted: float, n: int, settings: InterferenceSettings = DEFAULT_INTERFERENCE_SETTINGS) -> float:
    """What the fit reports for a data fit of ``fitted`` from ``n`` observations (the prior's pull)."""
    w = n / (n + settings.prior_weight)
    return w * fitted + (1 - w) * settings.prior_beta


def planted(
    beta: float, n: int, *, seed: int = 1, noise: float = 0.05, outliers: float = 0.0
) -> list[CollocationObservation]:
    """Observations drawn from the model at ``beta``: log-normal noise, some tries stretched 3-8x."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        own = rng.uniform(0.1, 0.8)
        co = tuple(rng.uniform(0.1, 0.8) for _ in range(rng.choice((1, 1, 2))))
        stretch = slowdown(own, co, beta) * math.exp(rng.gauss(0.0, noise))
        if rng.random() < outliers:
            stretch *= rng.uniform(3.0, 8.0)  # stalled on I/O, preempted, a noisy neighbour host
        out.append(CollocationObservation.steady(stretch, own, co))
    return out


@pytest.mark.parametrize("acts", [(0.25,), (0.25, 0.25), (0.45, 0.9), (0.9, 0.9, 0.55), (0.1, 0.2, 0.3, 0.4)], ids=str)
def test_prior_predicts_exactly_the_sharing_model(acts: tuple[float, ...]) -> None:
    fit = InterferenceFit.prior("A100-40GB")
    expected = SharingModel().slowdowns([ActivityProfile(a, 0.0, 0.0) for a in acts])
    for i, own in enumerate(acts):
        co = acts[:i] + acts[i + 1 :]
        assert fit.predict(own, co).slowdown == pytest.approx(expected[i], rel=1e-12)


def test_converges_to_a_planted_beta_despite_outliers() -> None:
    for truth in (0.1, 0.5, 0.8, 1.4):
        fit = InterferenceFit.prior("a100-40gb").observe_all(planted(truth, 120, seed=7, outliers=0.1))
        assert fit.learned
        assert fit.beta == pytest.approx(truth, abs=0.06), truth
        assert fit.beta_low <= fit.beta <= fit.beta_high


def test_outliers_would_mislead_a_least_squares_fit() -> None:
    # the same data fitted with a huge Huber delta (plain least squares in log stretch) drifts
    data = planted(0.3, 120, seed=3, outliers=0.15)
    robust = InterferenceFit.prior("x").observe_all(data)
    naive = InterferenceFit.prior("x", InterferenceSettings(huber_delta=1e9)).observe_all(data)
    assert abs(robust.beta - 0.3) < 0.06
    assert abs(naive.beta - 0.3) > 2 * abs(robust.beta - 0.3)


def test_stays_at_the_prior_below_the_minimum_count() -> None:
    settings = InterferenceSettings(min_observations=10)
    fit = InterferenceFit.prior("x", settings)
    for obs in planted(1.5, 9, seed=2):
        fit = fit.observe(obs)
    assert fit.count == 9
    assert not fit.learned
    assert fit.beta == settings.prior_beta
    assert (fit.beta_low, fit.beta_high) == (settings.lower, settings.upper)
    assert fit.confidence == settings.prior_confidence
    fit = fit.observe(planted(1.5, 1, seed=5)[0])
    assert fit.learned
    assert fit.beta > settings.prior_beta


def test_solo_tries_say_nothing() -> None:
    fit = InterferenceFit.prior("x")
    assert fit.observe(CollocationObservation.steady(1.3, 0.5, ())) is fit
    assert fit.observe(CollocationObservation.steady(math.nan, 0.5, (0.4,))) is fit


def test_stays_within_bounds() -> None:
    settings = InterferenceSettings(lower=0.05, upper=1.0)
    huge = InterferenceFit.prior("x", settings).observe_all(planted(5.0, 60))
    # the fit stops at the upper bound; the prior's pull (5 observations' worth) then applies
    assert huge.beta == pytest.approx(shrunk(settings.upper, 60, settings))
    assert huge.beta_high <= settings.upper
    faster_than_alone = [CollocationObservation.steady(0.5, 0.3, (0.3,)) for _ in range(30)]
    tiny = InterferenceFit.prior("x", settings).observe_all(faster_than_alone)
    assert tiny.beta == pytest.approx(shrunk(settings.lower, 30, settings))
    assert tiny.beta_low >= settings.lower


def test_more_observations_are_surer() -> None:
    few = InterferenceFit.prior("x").observe_all(planted(0.5, 12, seed=4, noise=0.1))
    many = InterferenceFit.prior("x").observe_all(planted(0.5, 120, seed=4, noise=0.1))
    assert 0.0 < few.confidence < many.confidence <= 1.0
    assert many.beta_high - many.beta_low < few.beta_high - few.beta_low


def test_window_forgets_old_behaviour() -> None:
    settings = InterferenceSettings(window=50)
    fit = InterferenceFit.prior("x", settings).observe_all(planted(1.2, 50, seed=1))
    fit = fit.observe_all(planted(0.2, 50, seed=2))
    assert fit.count == 100
    assert len(fit.observations) == 50
    assert fit.beta == pytest.approx(0.2, abs=0.08)


def test_segments_follow_co_tenants_that_come_and_go() -> None:
    # half the run alone, half beside a 0.5 tenant: stretch is the harmonic combination
    obs = CollocationObservation(0.0, 0.4, (Segment(0.5, ()), Segment(0.5, (0.5,))))
    expected = 1.0 / (0.5 * 1.0 + 0.5 / slowdown(0.4, (0.5,), 0.5))
    assert predicted_stretch(obs, 0.5) == pytest.approx(expected)
    data = []
    rng = random.Random(9)
    for _ in range(60):
        share = rng.uniform(0.2, 1.0)
        co = (rng.uniform(0.2, 0.9),)
        shape = CollocationObservation(1.0, rng.uniform(0.2, 0.6), (Segment(1 - share, ()), Segment(share, co)))
        data.append(CollocationObservation(predicted_stretch(shape, 0.9), shape.own_activity, shape.segments))
    # noiseless: the fit is exact, then pulled toward the prior as 5 of 65 observations
    assert InterferenceFit.prior("x").observe_all(data).beta == pytest.approx(shrunk(0.9, 60), abs=1e-6)


def test_round_trips_through_plain_data() -> None:
    model = InterferenceModel()
    for obs in planted(0.8, 30):
        model = model.observe("A100-40GB", obs)
    data = json.loads(json.dumps(model.to_dict()))
    assert set(data) == {"a100-40gb"}
    assert data["a100-40gb"]["count"] == 30
    again = InterferenceModel.from_dict(data)
    fit, back = model.fit_for("A100-40GB"), again.fit_for("a100-40GB")
    assert back.beta == pytest.approx(fit.beta)
    assert back.count == fit.count
    assert back.observations == fit.observations


def test_each_gpu_model_learns_its_own() -> None:
    model = InterferenceModel()
    for a, h in zip(planted(0.2, 40, seed=1), planted(1.2, 40, seed=2), strict=True):
        model = model.observe("A100-40GB", a).observe("H100-80GB", h)
    assert model.fit_for("a100-40gb").beta < 0.35
    assert model.fit_for("h100-80gb").beta > 1.0
    assert model.fit_for("L4").beta == InterferenceSettings().prior_beta
