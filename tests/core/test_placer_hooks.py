"""The placer's policy hooks: a policy may refuse a collocation candidate per request, add to the
chosen GPU's reason, and the pass's same-shape cache then tells requests apart by activity."""

from __future__ import annotations

from helpers import busy_gpu, idle_gpu, request, view

from carma_airflow.core import Placer, TaskRequest
from carma_airflow.core.activity import ActivityEstimate, estimate_activity
from carma_airflow.core.decision import Outcome, Reason
from carma_airflow.core.policies import make_policy
from carma_airflow.core.policies.base import GpuFacts, Refusal
from carma_airflow.core.policies.most_free_memory import MostFreeMemory


class HeavyRefuser(MostFreeMemory):
    """Most free memory, but no collocation for a request whose activity is above a limit."""

    name = "heavy-refuser"
    refuses_gpus = True

    def __init__(self, limit: float = 0.6) -> None:
        self.limit = limit
        self.asked = 0

    def refuses(self, facts: GpuFacts, request: TaskRequest) -> Refusal | None:
        self.asked += 1
        a = request.activity
        if a is not None and a.sm_activity > self.limit:
            return Refusal(Reason.INTERFERENCE, f"too heavy ({a.sm_activity:.2f}) to join {facts.tenants} tenant(s)")
        return None

    def describe(self, facts: GpuFacts, request: TaskRequest) -> str | None:
        return f"described for {request.label}"


def act(a: float) -> ActivityEstimate:
    return estimate_activity([a] * 10)


def test_a_refused_gpu_is_skipped_with_the_policys_reason_and_text() -> None:
    gpus = (busy_gpu(0, 30000), busy_gpu(1, 20000))
    policy = HeavyRefuser()
    d = Placer(policy).decide(request("r", 4000, activity=act(0.8)), view(*gpus))
    assert d.outcome is Outcome.NOT_NOW
    assert {v.reason for v in d.rejected} == {Reason.INTERFERENCE}
    assert all(v.detail == "too heavy (0.80) to join 1 tenant(s)" for v in d.rejected)
    assert d.summary.startswith("waiting: sharing any GPU is predicted not to pay (interference)")
    # a light request passes the same GPUs, most free memory first
    light = Placer(policy).decide(request("l", 4000, activity=act(0.3)), view(*gpus))
    assert light.gpu_uuids == ("GPU-0",)


def test_refusal_only_on_collocation_idle_gpus_are_never_asked() -> None:
    policy = HeavyRefuser()
    d = Placer(policy).decide(request("r", 4000, activity=act(0.9)), view(busy_gpu(0, 30000), idle_gpu(1)))
    assert d.gpu_uuids == ("GPU-1",)
    assert policy.asked == 0


def test_a_refusal_passes_over_to_the_next_candidate() -> None:
    class RefuseGpu0(MostFreeMemory):
        refuses_gpus = True

        def refuses(self, facts: GpuFacts, request: TaskRequest) -> Refusal | None:
            return Refusal(Reason.INTERFERENCE, "not GPU 0") if facts.index == 0 else None

    d = Placer(RefuseGpu0()).decide(request("r", 4000), view(busy_gpu(0, 30000), busy_gpu(1, 20000)))
    assert d.gpu_uuids == ("GPU-1",)
    assert [(v.index, v.reason, v.detail) for v in d.rejected] == [(0, Reason.INTERFERENCE, "not GPU 0")]


def test_the_chosen_gpus_reason_carries_the_policys_description() -> None:
    d = Placer(HeavyRefuser()).decide(request("r", 4000, activity=act(0.3)), view(busy_gpu(0, 30000)))
    assert d.placed
    assert d.chosen[0].detail.endswith("; described for label-r")
    assert "described for label-r" in d.summary
    # policies without the hook keep their texts as they were
    plain = Placer(make_policy("most-free-memory")).decide(request("r", 4000), view(busy_gpu(0, 30000)))
    assert "described" not in plain.chosen[0].detail and ";" not in plain.chosen[0].detail


def test_same_shape_cache_tells_requests_apart_by_activity() -> None:
    gpus = view(busy_gpu(0, 30000), busy_gpu(1, 20000))
    heavy = request("h", 4000, activity=act(0.9))
    light = request("l", 4000, activity=act(0.2))
    result = Placer(HeavyRefuser()).schedule([heavy, light], gpus)
    # same memory, same shape: without the activity in the cache key the light one would
    # inherit the heavy one's "waiting"
    assert result.by_key["h"].outcome is Outcome.NOT_NOW
    assert result.by_key["l"].placed
    # requests of the same activity still share one decision
    twins = [request(f"h{i}", 4000, activity=act(0.9)) for i in range(5)]
    shared = Placer(HeavyRefuser()).schedule(twins, gpus)
    assert len({id(shared.by_key[r.key]) for r in twins}) == 1


def test_predictive_refuses_through_the_placer_and_explains_its_choice() -> None:
    from carma_airflow.core.policies.predictive import Predictive

    policy = Predictive()
    d = Placer(policy).decide(request("r", 4000, activity=act(0.5)), view(busy_gpu(0, 30000)))
    assert d.placed
    assert "predicted " in d.chosen[0].detail and "x slower beside tenant0-0" in d.chosen[0].detail


def test_a_placed_tries_activity_reaches_its_tenant_through_the_cycle() -> None:
    from carma_airflow.core import SchedulingCycle, make_queue

    cycle = SchedulingCycle(Placer(make_policy("predictive")), make_queue("backfill"))
    cycle.submit(request("r", 4000, activity=act(0.7)), 0.0)
    result = cycle.run(0.0, [idle_gpu(0)])
    assert [p.request.key for p in result.placed] == ["r"]
    (tenant,) = cycle.view(1.0, [idle_gpu(0)]).gpus[0].tenants
    assert tenant.activity == act(0.7)
