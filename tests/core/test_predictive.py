"""The predictive policy: summed progress rate, the newcomer's slowdown, confidence, fallback."""

from __future__ import annotations

import math
import random
from dataclasses import replace

import pytest
from helpers import busy_gpu, idle_gpu, request, view

from carma_airflow.core import GpuState, MetricWindow, Placer, TaskRequest
from carma_airflow.core.activity import ActivityEstimate, estimate_activity, hinted_activity
from carma_airflow.core.decision import Outcome, Reason
from carma_airflow.core.interference import (
    CollocationObservation,
    InterferenceFit,
    InterferenceModel,
    slowdown,
    speed,
)
from carma_airflow.core.policies import DEFAULT_POLICY, make_policy
from carma_airflow.core.policies.predictive import Predictive, PredictiveSettings


def learned(beta: float = 0.5, scale: float = 1.0, noise: float = 0.03) -> InterferenceModel:
    """A model whose A100 fit has learned ``beta`` from 200 tries (no task names: the pooled fit)."""
    rng = random.Random(17)
    tries = []
    for _ in range(200):
        own, co = rng.uniform(0.1, 0.8), tuple(rng.uniform(0.1, 0.8) for _ in range(rng.choice((1, 2))))
        tries.append(
            CollocationObservation.steady(slowdown(own, co, beta, scale) * math.exp(rng.gauss(0, noise)), own, co)
        )
    return InterferenceModel({"a100-40gb": InterferenceFit.prior("a100-40gb").observe_all(tries)})


LEARNED = learned()


def sure(a: float) -> ActivityEstimate:
    """An activity learned from ten steady tries."""
    return estimate_activity([a] * 10)


def with_tenants(gpu: GpuState, *activities: float | None) -> GpuState:
    """``gpu`` with its tenants' activities set (None: unknown) and labels naming them."""
    assert len(gpu.tenants) == len(activities)
    tenants = tuple(
        replace(t, label=f"job{gpu.index}-{a}", activity=None if a is None else sure(a))
        for t, a in zip(gpu.tenants, activities, strict=True)
    )
    return replace(gpu, tenants=tenants)


def newcomer(a: ActivityEstimate | None, mib: int = 4000) -> TaskRequest:
    return request("new", mib, activity=a)


def chosen_index(policy: Predictive, req: TaskRequest, *gpus: GpuState) -> int:
    d = Placer(policy).decide(req, view(*gpus))
    assert d.placed, d.summary
    return int(d.gpu_uuids[0].split("-")[1])


def test_registered_but_not_the_default() -> None:
    assert make_policy("predictive").name == "predictive"
    assert make_policy("learned").name == "predictive"
    assert DEFAULT_POLICY != "predictive"


def test_prefers_the_gpu_whose_summed_rate_rises_most() -> None:
    # GPU 0 has the most free memory but a heavy tenant; GPU 1 a light one
    heavy = with_tenants(busy_gpu(0, 30000), 0.9)
    light = with_tenants(busy_gpu(1, 20000), 0.25)
    assert chosen_index(Predictive(LEARNED), newcomer(sure(0.5)), heavy, light) == 1
    # most-free-memory, and the predictive policy without the newcomer's activity and with
    # most-free-memory as its fallback, take GPU 0
    assert Placer(make_policy("most-free-memory")).decide(newcomer(None), view(heavy, light)).gpu_uuids == ("GPU-0",)
    magm_fallback = Predictive(settings=PredictiveSettings(fallback="most-free-memory"))
    assert chosen_index(magm_fallback, newcomer(None), heavy, light) == 0


def test_gain_is_the_change_in_summed_speed() -> None:
    gpu = with_tenants(busy_gpu(0, 20000, tenants=2), 0.3, 0.6)
    policy = Predictive(LEARNED)
    facts = Placer(policy).facts(view(gpu))[0]
    a = policy.assess(facts, newcomer(sure(0.5)))
    fit = LEARNED.fit_for("A100-40GB")
    beta, k = fit.beta, fit.activity_scale
    assert beta == pytest.approx(0.5, abs=0.05)
    before = speed(0.3, [0.6], beta, k) + speed(0.6, [0.3], beta, k)
    after = speed(0.3, [1.1], beta, k) + speed(0.6, [0.8], beta, k) + speed(0.5, [0.9], beta, k)
    assert a.rate_before == pytest.approx(before)
    assert a.rate_after == pytest.approx(after)
    assert a.gain == pytest.approx(after - before)
    assert a.newcomer.speed == pytest.approx(speed(0.5, [0.9], beta, k))
    assert a.newcomer.low < a.newcomer.speed < a.newcomer.high
    assert a.gain_low < a.gain  # every speed at the low end of its interval
    assert a.neighbour == "job0-0.6"


def test_choice_maximises_gain_on_random_clusters() -> None:
    rng = random.Random(11)
    policy = Predictive(LEARNED, PredictiveSettings(min_gain=-10.0, max_slowdown=100.0))
    for _ in range(200):
        gpus = []
        for i in range(8):
            k = rng.choice((1, 1, 2))
            g = busy_gpu(i, rng.randrange(8000, 30000), tenants=k)
            gpus.append(with_tenants(g, *(round(rng.uniform(0.05, 0.9), 2) for _ in range(k))))
        req = newcomer(sure(round(rng.uniform(0.1, 0.9), 2)))
        facts = Placer(policy).facts(view(*gpus))
        gains = {f.index: policy.assess(f, req).gain_low for f in facts}
        pick = chosen_index(policy, req, *gpus)
        # the lower ends of the gains are compared in steps of gain_step; memory decides within a
        # step, so the pick is within one step of the best
        assert gains[pick] >= max(gains.values()) - PredictiveSettings().gain_step


def test_collocation_that_does_not_pay_sorts_last_and_is_refused() -> None:
    crowded = with_tenants(busy_gpu(0, 30000, tenants=2), 0.7, 0.7)  # a third heavy task lowers the sum
    roomy = with_tenants(busy_gpu(1, 9000), 0.3)
    policy = Predictive(LEARNED)
    req = newcomer(sure(0.7))
    facts = {f.index: f for f in Placer(policy).facts(view(crowded, roomy))}
    assert policy.assess(facts[0], req).gain < 0 < policy.assess(facts[1], req).gain
    assert policy.refuses(facts[1], req) is None
    refusal = policy.refuses(facts[0], req)
    assert refusal is not None
    assert refusal.reason is Reason.INTERFERENCE
    assert "beside job0-0.7" in refusal.text()
    assert "gain may be under" in refusal.text() or "slowdown limit" in refusal.text()
    # the rejection states its numbers: the floor or the slowdown limit it fell short of
    assert refusal.filter in ("collocation-floor", "slowdown-limit")
    assert refusal.limit in (policy.settings.min_gain, policy.settings.max_slowdown)
    assert chosen_index(policy, req, crowded, roomy) == 1
    # nowhere else to go: the placer asks refuses() and the request waits, saying why
    d = Placer(policy).decide(req, view(crowded))
    assert d.outcome is Outcome.NOT_NOW
    assert [v.reason for v in d.rejected] == [Reason.INTERFERENCE]
    assert d.rejected[0].detail == refusal.text() and d.rejected[0].rejection == refusal
    assert "1 of 1 GPU interference" in d.summary


def test_newcomer_slowdown_limit() -> None:
    gpu = with_tenants(busy_gpu(0, 30000), 0.9)
    policy = Predictive(LEARNED, PredictiveSettings(min_gain=-10.0, max_slowdown=1.2))
    facts = Placer(policy).facts(view(gpu))[0]
    a = policy.assess(facts, newcomer(sure(0.6)))
    assert a.newcomer.slowdown > 1.2
    assert not a.pays
    refusal = policy.refuses(facts, newcomer(sure(0.6)))
    assert refusal is not None and "slowdown limit" in refusal.text()
    assert refusal.filter == "slowdown-limit" and refusal.limit == 1.2
    assert isinstance(refusal.have, float) and refusal.have > 1.2  # the slowdown at the low end


def test_says_how_sure_it_is() -> None:
    known = with_tenants(busy_gpu(0, 20000), 0.4)
    unknown = with_tenants(busy_gpu(1, 20000), None)
    policy = Predictive(learned(noise=0.005))  # tries within +-5 % of the fit: the activity decides
    facts = Placer(policy).facts(view(known, unknown))
    firm = policy.assess(facts[0], newcomer(sure(0.4)))
    vague = policy.assess(facts[1], newcomer(sure(0.4)))
    hinted = policy.assess(facts[0], newcomer(hinted_activity(0.4)))
    assert vague.confidence == 0.0 < hinted.confidence < firm.confidence
    # the newcomer's speed caps confidence: the share of tries within +-5 % of its prediction
    assert firm.newcomer.confidence > 0.9
    assert Predictive(learned(noise=0.1)).assess(facts[0], newcomer(sure(0.4))).confidence < 0.6  # 10 % scatter
    assert Predictive().assess(facts[0], newcomer(sure(0.4))).confidence == InterferenceFit.prior("x").confidence
    text = policy.describe(facts[0], newcomer(sure(0.4)))
    assert text.startswith("predicted ") and "x slower beside job0-0.4" in text and "confidence" in text
    assert policy.describe(facts[0], newcomer(None)).startswith("model unsure")


def test_a_fit_at_its_cold_prior_falls_back_to_the_fallback_order() -> None:
    heavy = with_tenants(busy_gpu(0, 30000), 0.9)
    light = with_tenants(busy_gpu(1, 20000), 0.25)
    req = newcomer(sure(0.5))
    magm = PredictiveSettings(fallback="most-free-memory")
    assert chosen_index(Predictive(settings=magm), req, heavy, light) == 0  # cold prior: most free memory
    assert chosen_index(Predictive(LEARNED, magm), req, heavy, light) == 1  # learned: the prediction
    facts = Placer(Predictive()).facts(view(heavy, light))
    crowded = with_tenants(busy_gpu(0, 30000, tenants=2), 0.9, 0.9)
    assert Predictive().refuses(Placer(Predictive()).facts(view(crowded))[0], req) is None  # no refusals while unsure
    assert Predictive().refuses(facts[0], req) is None


def test_wide_intervals_refuse_what_the_point_would_take() -> None:
    # the same point prediction, with tries scattered widely: the lower end of the gain is lower
    gpu = with_tenants(busy_gpu(0, 30000), 0.3)
    req = newcomer(sure(0.3))
    tight_model, loose_model = learned(noise=0.02), learned(noise=0.35)
    probe = Predictive(tight_model), Predictive(loose_model)
    f = Placer(probe[0]).facts(view(gpu))[0]
    a_tight, a_loose = probe[0].assess(f, req), probe[1].assess(f, req)
    assert a_tight.gain == pytest.approx(a_loose.gain, abs=0.1)
    assert a_tight.gain_low > a_loose.gain_low
    settings = PredictiveSettings(min_gain=(a_tight.gain_low + a_loose.gain_low) / 2)
    tight, loose = Predictive(tight_model, settings), Predictive(loose_model, settings)
    assert tight.assess(f, req).pays and not loose.assess(f, req).pays
    assert loose.refuses(f, req) is not None and tight.refuses(f, req) is None


def test_unsure_it_orders_as_its_fallback_interference_aware() -> None:
    rng = random.Random(3)
    default = make_policy(PredictiveSettings().fallback)
    for _ in range(100):
        gpus = []
        for i in range(8):
            k = rng.choice((1, 2))
            window = MetricWindow.constant(round(rng.uniform(0.0, 0.7), 2), 0.1, 0.1)
            gpus.append(with_tenants(busy_gpu(i, rng.randrange(8000, 30000), tenants=k, window=window), *([None] * k)))
        req = newcomer(None, mib=rng.randrange(1000, 6000))
        assert chosen_index(Predictive(), req, *gpus) == int(
            Placer(default).decide(req, view(*gpus)).gpu_uuids[0].split("-")[1]
        )
    with pytest.raises(ValueError, match="fallback"):
        PredictiveSettings(fallback="round-robin")


def test_idle_gpus_still_come_first() -> None:
    light = with_tenants(busy_gpu(0, 30000), 0.05)
    assert chosen_index(Predictive(LEARNED), newcomer(sure(0.5)), light, idle_gpu(1)) == 1


def test_memory_check_still_applies() -> None:
    light_but_full = with_tenants(busy_gpu(0, 5000), 0.1)
    heavy_roomy = with_tenants(busy_gpu(1, 30000), 0.6)  # busier, but collocating there still pays
    anything_pays = Predictive(LEARNED, PredictiveSettings(min_gain=-10.0, max_slowdown=100.0))
    assert chosen_index(anything_pays, newcomer(sure(0.5), mib=8000), light_but_full, heavy_roomy) == 1


def test_tenants_placed_in_the_same_pass_count_at_the_prior() -> None:
    a = with_tenants(busy_gpu(0, 30000), 0.3)
    b = with_tenants(busy_gpu(1, 30000), 0.3)
    reqs = [request(f"r{i}", 4000, activity=sure(0.5)) for i in range(2)]
    result = Placer(Predictive(LEARNED)).schedule(reqs, view(a, b))
    # the first lands on one GPU; that GPU now has an extra tenant, so the second takes the other
    assert sorted(d.gpu_uuids[0] for d in result.placed) == ["GPU-0", "GPU-1"]


def test_the_prediction_may_override_the_risk_rule_only_when_learned_and_it_pays() -> None:
    # the GPU's counters say high-risk (SM activity 0.85, occupancy 0.5), its one tenant is light
    risky = with_tenants(busy_gpu(0, 30000, window=MetricWindow.constant(0.85, 0.5, 0.2)), 0.2)
    req = newcomer(sure(0.3))
    assert Placer(Predictive(LEARNED)).decide(req, view(risky)).rejected[0].reason is Reason.RISK
    override = PredictiveSettings(override_risk=True)
    assert Placer(Predictive(LEARNED, override)).decide(req, view(risky)).placed
    unsure = Placer(Predictive(settings=override)).decide(req, view(risky))  # cold prior: the rule holds
    assert not unsure.placed and unsure.rejected[0].reason is Reason.RISK
    assert "model unsure" in unsure.rejected[0].detail
    strict = PredictiveSettings(override_risk=True, min_gain=5.0)  # learned, but the gain does not pay
    assert Placer(Predictive(LEARNED, strict)).decide(req, view(risky)).rejected[0].reason is Reason.RISK
