"""The completion-time policy: options priced by predicted completion times, waiting included."""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import replace

import pytest
from helpers import busy_gpu, idle_gpu, request, view
from test_deep_queue_paths import _gpus, _submit_random

from carma_airflow.core import Placer
from carma_airflow.core.cycle import SchedulingCycle
from carma_airflow.core.decision import Outcome, Reason
from carma_airflow.core.policies import make_policy
from carma_airflow.core.policies.base import GpuFacts
from carma_airflow.core.policies.completion_time import CompletionTime
from carma_airflow.core.policies.forecast import DurationBook, LearnedForecast, Occupant, finish_times, task_type
from carma_airflow.core.queueing import Backfill
from carma_airflow.core.reservations import Reservations
from carma_airflow.core.task import TaskRequest


class FixedForecast:
    """Alone: full speed; ``n`` sharing: each at ``shared[n]`` (default 0.5); work by task type."""

    def __init__(self, work: dict[str, float], shared: dict[int, float] | None = None, timed: bool = True) -> None:
        self.work = work
        self.shared = shared or {}
        self._timed = timed
        self.asked = 0

    def timed(self) -> bool:
        return self._timed

    def occupants(self, facts: GpuFacts, now: float) -> list[Occupant]:
        out = [Occupant(task_type(t.label), 0.5, self.work[task_type(t.label)]) for t in facts.state.tenants]
        return out + [Occupant(task_type(label), 0.5, self.work[task_type(label)]) for label in facts.joined or ()]

    def newcomer(self, request: TaskRequest) -> Occupant:
        return Occupant(task_type(request.label), 0.5, self.work[task_type(request.label)])

    def run_alone(self, request: TaskRequest) -> float:
        return self.work[task_type(request.label)]

    def speeds(self, spec: str, occupants: Sequence[Occupant]) -> Sequence[float]:
        self.asked += 1
        n = len(occupants)
        return [1.0] * n if n == 1 else [self.shared.get(n, 0.5)] * n


def _policy(forecast: FixedForecast) -> CompletionTime:
    policy = make_policy("completion-time")
    assert isinstance(policy, CompletionTime)
    policy.forecast = forecast
    return policy


def _floored(forecast: FixedForecast, floor: float | None = 0.3) -> CompletionTime:
    """The policy with a floor on a collocation's gain in summed speed (``min_gain``; off by default)."""
    policy = _policy(forecast)
    policy.settings = replace(policy.settings, min_gain=floor)
    return policy


def test_finish_times_replays_speeds_as_occupants_leave() -> None:
    fc = FixedForecast({})
    # both at 0.5 until the 10 s one is done at 20 s; the other then has 10 s left alone
    assert finish_times(fc, "A100-40GB", [Occupant("a", 0.5, 10.0), Occupant("b", 0.5, 20.0)]) == [20.0, 30.0]
    assert finish_times(fc, "A100-40GB", [Occupant("a", 0.5, 7.0)]) == [7.0]


def test_names_and_aliases_reach_the_policy() -> None:
    for name in ("completion-time", "jct", "ct"):
        assert isinstance(make_policy(name), CompletionTime)


def test_an_idle_gpu_comes_first() -> None:
    fc = FixedForecast({"tenant0-0": 100.0, "label-r": 100.0})
    placer = Placer(_policy(fc))
    d = placer.decide(request("r", 4000), view(busy_gpu(0, 30_000), idle_gpu(1)))
    assert d.placed and d.gpu_uuids == ("GPU-1",)


def test_shares_where_collocation_pays_and_says_what_it_was_predicted_to_cost() -> None:
    # the tenant has 1000 s left; beside it both run at 0.9: sharing beats waiting 1000 s
    fc = FixedForecast({"tenant0-0": 1000.0, "label-r": 500.0}, {2: 0.9})
    d = Placer(_policy(fc)).decide(request("r", 4000), view(busy_gpu(0, 30_000)))
    assert d.placed and d.gpu_uuids == ("GPU-0",)
    detail = d.chosen[0].detail
    assert "predicted 1.11x slower" in detail and "cost" in detail and "waiting for GPU 0" in detail


def test_waits_when_sharing_costs_more_than_the_gpu_draining() -> None:
    # the tenant is nearly done (10 s); sharing would slow both to 0.2 for the newcomer's 1000 s
    fc = FixedForecast({"tenant0-0": 10.0, "label-r": 1000.0}, {2: 0.2})
    d = Placer(_policy(fc)).decide(request("r", 4000), view(busy_gpu(0, 30_000)))
    assert d.outcome is Outcome.NOT_NOW
    assert d.summary.startswith("waiting: sharing a GPU now is predicted to cost more than waiting")
    (gpu0,) = [v for v in d.rejected if v.uuid == "GPU-0"]
    assert gpu0.reason is Reason.INTERFERENCE and "chose waiting" in gpu0.detail


def test_without_run_times_it_never_waits() -> None:
    fc = FixedForecast({"tenant0-0": 10.0, "label-r": 1000.0}, {2: 0.2}, timed=False)
    d = Placer(_policy(fc)).decide(request("r", 4000), view(busy_gpu(0, 30_000)))
    assert d.placed and "runs" in d.chosen[0].detail


def test_picks_the_cheaper_of_two_gpus() -> None:
    # GPU 0's tenant has 5000 s left, GPU 1's 50 s: joining GPU 1 delays less
    fc = FixedForecast({"tenant0-0": 5000.0, "tenant1-0": 50.0, "label-r": 300.0}, {2: 0.8})
    d = Placer(_policy(fc)).decide(request("r", 4000), view(busy_gpu(0, 30_000), busy_gpu(1, 30_000)))
    assert d.placed and d.gpu_uuids == ("GPU-1",)
    assert any(v.uuid == "GPU-0" and v.reason is Reason.INTERFERENCE for v in d.rejected)


def test_memory_is_checked_before_any_option_is_priced() -> None:
    fc = FixedForecast({"tenant0-0": 10.0, "tenant1-0": 10.0, "label-r": 100.0}, {2: 0.99})
    # GPU 0 lacks estimate + headroom; GPU 1 has it
    d = Placer(_policy(fc)).decide(request("r", 8000), view(busy_gpu(0, 9000), busy_gpu(1, 30_000)))
    assert d.placed and d.gpu_uuids == ("GPU-1",)
    assert any(v.uuid == "GPU-0" and v.reason is Reason.MEMORY for v in d.rejected)
    none_fit = Placer(_policy(fc)).decide(request("r", 8000), view(busy_gpu(0, 9000)))
    assert none_fit.outcome is Outcome.NOT_NOW
    assert [v.reason for v in none_fit.rejected] == [Reason.MEMORY]


def test_tenant_cap_holds() -> None:
    fc = FixedForecast({"tenant0-0": 10.0, "tenant0-1": 10.0, "tenant0-2": 10.0, "label-r": 100.0}, {4: 0.99})
    d = Placer(_policy(fc)).decide(request("r", 2000), view(busy_gpu(0, 30_000, tenants=3)))
    assert d.outcome is Outcome.NOT_NOW and d.rejected[0].reason is Reason.TENANT_CAP


def test_a_pass_sends_the_second_waiting_try_to_the_next_gpu_to_drain() -> None:
    # both GPUs drain soon and sharing is dear: the first try waits for GPU 0 (10 s), the second
    # is priced against GPU 1 (40 s)
    fc = FixedForecast({"tenant0-0": 10.0, "tenant1-0": 40.0, "label-a": 1000.0, "label-b": 1000.0}, {2: 0.2})
    placer = Placer(_policy(fc))
    result = placer.schedule([request("a", 4000), request("b", 4000)], view(busy_gpu(0, 30_000), busy_gpu(1, 30_000)))
    a, b = result.decisions
    assert a.outcome is b.outcome is Outcome.NOT_NOW
    assert "waiting at" in a.summary and "waiting at" in b.summary
    assert a.summary != b.summary  # b's wait is priced on the GPU that drains second


def test_duration_book_borrows_the_median_for_a_type_never_measured() -> None:
    book = DurationBook()
    assert book.expected("a") is None
    for kind, secs in (("a", 100.0), ("a", 300.0), ("b", 1000.0), ("c", 50.0)):
        book.add(kind, secs)
    assert book.expected("a") == 200.0 and book.measured("a")
    assert book.expected("zzz") == 200.0 and not book.measured("zzz")  # median of 200, 1000, 50


def test_learned_forecast_counts_work_left_from_the_run_time_and_its_age() -> None:
    fc = LearnedForecast()
    fc.learn_duration("tenant0-0", 1000.0)
    facts = Placer(make_policy("completion-time")).facts(view(busy_gpu(0, 30_000, placed_at=-400.0)))
    (occ,) = fc.occupants(facts[0], 0.0)
    assert occ.kind == "tenant0-0" and abs(occ.work - 600.0) < 1e-6  # alone at full speed for 400 s
    (late,) = fc.occupants(facts[0], 2000.0)
    assert abs(late.work - 0.1 * 2400.0) < 1e-6  # past its run time: a tenth of its age still to do
    fc.learn_duration("other", 1000.0)
    assert fc._left("never-seen", 1000.0, 3000.0) == 3000.0  # borrowed expectation: as long again


@pytest.mark.parametrize("measured", [(), ("tenant0-0",), ("tenant0-0", "tenant1-1", "tenant2-2")])
def test_the_longest_work_left_is_that_of_the_occupants_without_building_them(measured: tuple[str, ...]) -> None:
    # the drain order bounds every GPU with tenants by it each pass: the same floats as the occupants'
    fc = LearnedForecast()
    gpus = [busy_gpu(i, 10_000, tenants=i + 1, placed_at=-300.0 * (i + 1)) for i in range(4)]
    facts = Placer(make_policy("completion-time")).facts(view(*gpus))
    for now in (0.0, 500.0, 5000.0):  # before, near and past the run times (a floor, or a measured tenth)
        for f in facts:
            assert fc.longest_left(f, now) == max(o.work for o in fc.occupants(f, now))
    for k, kind in enumerate(measured):
        fc.learn_duration(kind, 400.0 * (k + 1))
    for now in (0.0, 500.0, 5000.0):
        for f in facts:
            assert fc.longest_left(f, now) == max(o.work for o in fc.occupants(f, now))


def _timed_cycle() -> SchedulingCycle:
    policy = make_policy("completion-time")
    assert isinstance(policy, CompletionTime)
    for k in range(0, 200, 3):  # run times known for a third of the task types, borrowed for the rest
        policy.learn_duration(f"task{k}", 60.0 + 37.0 * (k % 11))
    queue = Backfill(aging_s=60.0, starvation_s=150.0)
    return SchedulingCycle(Placer(policy), queue, reservations=Reservations(seen_after_s=30.0))


@pytest.mark.parametrize("seed", range(6))
def test_a_pass_without_waiting_decisions_places_the_same_when_waiting_is_priced(seed: int) -> None:
    rng = random.Random(seed)
    monitor = _gpus(rng, rng.randint(6, 20))
    plain, fast = _timed_cycle(), _timed_cycle()
    now, k, placed, by_choice = 1_000.0, 0, 0, 0
    for _ in range(12):
        k = _submit_random(rng, k, now, plain, fast)
        a = plain.run(now, monitor)
        b = fast.run(now, monitor, waiting_decisions=False)
        assert [(p.request.key, p.decision.gpu_uuids) for p in a.placed] == [
            (p.request.key, p.decision.gpu_uuids) for p in b.placed
        ]
        assert [n.request.key for n in a.never_fits] == [n.request.key for n in b.never_fits]
        placed += len(a.placed)
        by_choice += sum(1 for d in a.waiting.values() if d.summary.startswith("waiting: sharing"))
        running = sorted(r.key for r in plain.reservations)
        for key in rng.sample(running, k=min(len(running), rng.randint(0, 6))):
            plain.release(key)
            fast.release(key)
        now += rng.choice((0.0, 5.0, 31.0, 200.0))
    assert placed > 0 and by_choice > 0  # tries placed, and tries that could share but waited


def test_refuses_a_collocation_that_adds_too_little_speed_and_says_so() -> None:
    # the tenant has 5000 s left, so prices alone would share (waiting costs 5000 s, then the run);
    # beside it both run at 0.6: the GPU's summed speed goes from 1.0 to 1.2, under the 0.3 floor
    fc = FixedForecast({"tenant0-0": 5000.0, "label-r": 500.0}, {2: 0.6})
    assert _policy(fc).settings.min_gain is None  # off by default (docs/placement.md says why)
    d = Placer(_floored(fc)).decide(request("r", 4000), view(busy_gpu(0, 30_000)))
    assert d.outcome is Outcome.NOT_NOW
    (gpu0,) = [v for v in d.rejected if v.uuid == "GPU-0"]
    assert gpu0.reason is Reason.INTERFERENCE
    assert "adds +0.20 to the GPU's summed speed" in gpu0.detail and "under the 0.30" in gpu0.detail
    assert "chose waiting" in gpu0.detail
    # without the floor the same prices share the GPU
    assert Placer(_floored(fc, None)).decide(request("r", 4000), view(busy_gpu(0, 30_000))).gpu_uuids == ("GPU-0",)


def test_a_collocation_that_clears_the_floor_is_priced_as_before() -> None:
    fc = FixedForecast({"tenant0-0": 5000.0, "label-r": 500.0}, {2: 0.7})  # 1.0 -> 1.4: +0.4
    d = Placer(_floored(fc)).decide(request("r", 4000), view(busy_gpu(0, 30_000)))
    assert d.placed and d.gpu_uuids == ("GPU-0",) and "refused" not in d.chosen[0].detail


def test_the_floor_waits_for_run_times_as_waiting_does() -> None:
    # a new deployment (no run time known): nothing is learned yet, so no collocation is refused
    fc = FixedForecast({"tenant0-0": 5000.0, "label-r": 500.0}, {2: 0.6}, timed=False)
    d = Placer(_floored(fc)).decide(request("r", 4000), view(busy_gpu(0, 30_000)))
    assert d.placed and d.gpu_uuids == ("GPU-0",)


def test_refused_everywhere_and_nothing_to_wait_for_is_a_wait_not_a_placement() -> None:
    # two GPUs, both refused; choose() keeps the refused options (their texts) but picks none
    fc = FixedForecast({"tenant0-0": 5000.0, "tenant1-0": 5000.0, "label-r": 500.0}, {2: 0.55})
    policy = _floored(fc)
    policy.settings = replace(policy.settings, waits=False)  # waiting is never priced
    d = Placer(policy).decide(request("r", 4000), view(busy_gpu(0, 30_000), busy_gpu(1, 30_000)))
    assert d.outcome is Outcome.NOT_NOW
    assert {v.uuid for v in d.rejected if v.reason is Reason.INTERFERENCE} == {"GPU-0", "GPU-1"}
    assert all("refused" in v.detail for v in d.rejected if v.reason is Reason.INTERFERENCE)
