"""The learned floor (``CompletionSettings.learned_floor``, issue 41): once the interference model
has learned a GPU model, a collocation there that it predicts to lower what the GPU gets done per
second is refused; under the cold prior, which is mild by design and cannot say so, it is priced."""

from __future__ import annotations

import math
import random
from dataclasses import replace

import pytest
from helpers import busy_gpu, request, view

from carma_airflow.core import Placer
from carma_airflow.core.activity import ActivityEstimate
from carma_airflow.core.decision import Outcome, Reason
from carma_airflow.core.gpu import GpuState, MetricWindow
from carma_airflow.core.interference import CollocationObservation, InterferenceModel
from carma_airflow.core.interference_form import slowdown
from carma_airflow.core.policies import make_policy
from carma_airflow.core.policies.completion_time import CompletionSettings, CompletionTime
from carma_airflow.core.policies.floor import floor_for

HEAVY = 0.85  # the planted beta: two tenants at SM activity 0.8 each run at about 0.37 of solo


def _heavy_model(n: int = 40) -> InterferenceModel:
    """A fit learned on A100-40GB from ``n`` tries planted at beta ``HEAVY`` (a little noise)."""
    rng = random.Random(3)
    model = InterferenceModel()
    for _ in range(n):
        own = rng.uniform(0.1, 0.8)
        co = tuple(rng.uniform(0.1, 0.8) for _ in range(rng.choice((1, 1, 2))))
        stretch = slowdown(own, co, HEAVY) * math.exp(rng.gauss(0.0, 0.03))
        model = model.observe("A100-40GB", CollocationObservation.steady(stretch, own, co))
    assert model.fit_for("A100-40GB").learned
    return model


def _policy(model: InterferenceModel | None, tenant_s: float = 20_000.0) -> CompletionTime:
    policy = make_policy("completion-time")
    assert isinstance(policy, CompletionTime)
    if model is not None:
        policy.use_model(model)
    # the tenant has 19,000 s left (placed 1,000 s ago) and the newcomer 1,000 s: by the prices
    # alone it shares at once
    policy.learn_duration("tenant0-0", tenant_s)
    policy.learn_duration("label-r", 1_000.0)
    return policy


def _decide(policy: CompletionTime) -> tuple[Outcome, str, Reason | None]:
    busy = busy_gpu(0, 30_000, window=MetricWindow.constant(0.8, 0.3, 0.2))
    known = ActivityEstimate(0.8, 5, 0.02, 0.76, 0.84, 0.9, "learned")
    d = Placer(policy).decide(request("r", 4000, activity=known), view(busy))
    gpu0 = [v for v in d.rejected if v.uuid == "GPU-0"]
    return d.outcome, d.explain(), gpu0[0].reason if gpu0 else None


def test_a_learned_fit_refuses_a_collocation_that_lowers_the_gpus_summed_speed() -> None:
    assert CompletionSettings().learned_floor == 0.0 and CompletionSettings().min_gain is None  # the defaults
    outcome, text, reason = _decide(_policy(_heavy_model()))
    assert outcome is Outcome.NOT_NOW and reason is Reason.INTERFERENCE
    assert "under the 0.00 a collocation must add: refused" in text
    assert "adds -0." in text  # what it would have taken from the GPU's summed speed


def test_the_cold_prior_prices_the_same_collocation_and_takes_it() -> None:
    outcome, text, _ = _decide(_policy(None))  # a new deployment: the mild prior
    assert outcome is Outcome.PLACED and "refused" not in text


def test_the_learned_floor_off_prices_it_as_before() -> None:
    policy = _policy(_heavy_model())
    policy.settings = replace(policy.settings, learned_floor=None)
    outcome, text, _ = _decide(policy)
    assert outcome is Outcome.PLACED and "refused" not in text


def test_min_gain_applies_instead_on_every_gpu_learned_or_not() -> None:
    for model in (None, _heavy_model()):
        policy = _policy(model)
        policy.settings = replace(policy.settings, min_gain=0.5)
        assert floor_for(policy, "A100-40GB") == 0.5
        outcome, text, _ = _decide(policy)
        assert outcome is Outcome.NOT_NOW and "under the 0.50 a collocation must add: refused" in text
    learned, cold = _policy(_heavy_model()), _policy(None)
    assert floor_for(learned, "A100-40GB") == 0.0 and floor_for(cold, "A100-40GB") is None
    assert floor_for(learned, "V100-32GB") is None  # another model of the fleet: still its prior


def test_the_floor_is_validated() -> None:
    with pytest.raises(ValueError, match="learned_floor must be None or between -1 and 1"):
        CompletionSettings(learned_floor=2.0)


def _known(activity: float) -> ActivityEstimate:
    return ActivityEstimate(activity, 5, 0.02, activity - 0.04, activity + 0.04, 0.9, "learned")


def _tenant_at(gpu: GpuState, activity: float) -> GpuState:
    """``gpu`` with its tenants' learned activity ``activity``."""
    return replace(gpu, tenants=tuple(replace(t, activity=_known(activity)) for t in gpu.tenants))


def test_the_floor_asked_cheapest_first_decides_as_asking_every_option() -> None:
    # GPU 0: a heavy tenant about to finish (cheapest to share, but sharing now lowers the GPU's
    # summed speed: refused); GPU 1: a light tenant with a long run (clears the floor)
    def decide(tolerance: float) -> tuple[tuple[str, ...], str]:
        policy = _policy(_heavy_model(), tenant_s=1_010.0)  # placed 1,000 s ago: 10 s left
        policy.learn_duration("tenant1-0", 50_000.0)
        policy.settings = replace(policy.settings, tolerance=tolerance, waits=False)
        heavy = _tenant_at(busy_gpu(0, 30_000, window=MetricWindow.constant(0.8, 0.3, 0.2)), 0.8)
        light = _tenant_at(busy_gpu(1, 30_000, window=MetricWindow.constant(0.1, 0.1, 0.1)), 0.1)
        d = Placer(policy).decide(request("r", 4000, activity=_known(0.8)), view(heavy, light))
        return d.gpu_uuids, d.explain()

    lazy, every = decide(0.0), decide(1e-12)  # a tolerance asks every option (floor.py's other path)
    assert lazy[0] == every[0] == ("GPU-1",)
    assert "refused" in lazy[1] and "refused" in every[1]  # GPU 0, the cheapest, asked and refused
