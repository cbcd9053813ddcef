"""A pricing policy's waits kept from pass to pass, the shape memo of a pass, and the policy flag
the placer reads instead of the policy's class."""

from __future__ import annotations

from helpers import busy_gpu, request, view
from test_completion_time import FixedForecast, _policy

from carma_airflow.core import Placer
from carma_airflow.core.decision import Outcome
from carma_airflow.core.gpu import GpuState
from carma_airflow.core.placement_drains import MAX_AGE
from carma_airflow.core.policies import make_policy
from carma_airflow.core.policies.base import Policy
from carma_airflow.core.task import TaskRequest


def _place(placer: Placer, requests: list[TaskRequest], gpus: tuple[GpuState, ...], now: float) -> int:
    """How many of ``requests`` one pass without waiting decisions placed."""
    got = placer.place([[r] for r in requests], view(*gpus, now=now), order_key=lambda r: (r.submitted_at, r.key))
    return len(got.placed)


def _waiting_placer() -> tuple[Placer, TaskRequest, FixedForecast]:
    # GPU 0's tenant is nearly done (10 s); sharing would slow both to 0.2: the try waits by choice
    fc = FixedForecast({"tenant0-0": 10.0, "tenant1-0": 10.0, "label-r": 1000.0}, {2: 0.2})
    return Placer(_policy(fc)), request("r", 4000), fc


def test_a_wait_by_choice_is_kept_while_nothing_changed_on_its_gpus() -> None:
    placer, r, _ = _waiting_placer()
    gpus = (busy_gpu(0, 30_000),)
    assert _place(placer, [r], gpus, now=0.0) == 0
    assert placer.kept.reused == 0
    assert _place(placer, [r], gpus, now=1.0) == 0  # the same GPU states: the wait is kept
    assert placer.kept.reused == 1


def test_a_wait_is_priced_again_when_its_gpu_changed_or_the_clock_moved_on() -> None:
    placer, r, _ = _waiting_placer()
    assert _place(placer, [r], (busy_gpu(0, 30_000),), now=0.0) == 0
    # another state of the GPU it waits for (a monitor reading): priced afresh
    assert _place(placer, [r], (busy_gpu(0, 30_000),), now=1.0) == 0
    assert placer.kept.reused == 0
    gpus = (busy_gpu(0, 30_000),)
    assert _place(placer, [r], gpus, now=2.0) == 0
    # the wait costs 1010 s: past MAX_AGE of that the clock has moved on too far
    assert _place(placer, [r], gpus, now=2.0 + MAX_AGE * 1010.0 + 1.0) == 0
    assert placer.kept.reused == 0


def test_a_new_candidate_is_priced_beside_the_kept_ones() -> None:
    placer, r, _ = _waiting_placer()
    gpu0 = busy_gpu(0, 30_000)
    assert _place(placer, [r], (gpu0, busy_gpu(1, 5_000)), now=0.0) == 0  # GPU 1 lacks the memory
    # GPU 1's tenant shrank: a new candidate, as dear to share and draining no sooner; the wait is kept
    assert _place(placer, [r], (gpu0, busy_gpu(1, 30_000)), now=1.0) == 0
    assert placer.kept.reused == 1


def test_a_kept_wait_gives_way_to_a_new_candidate_that_pays() -> None:
    # GPU 0's two tenants have 3000 s left and three at a time crawl (0.2): the try waits for it;
    # then GPU 1 (a long tenant, two at a time at 0.9) gets the memory: sharing it pays
    work = {"tenant0-0": 3000.0, "tenant0-1": 3000.0, "tenant1-0": 5000.0, "label-r": 1000.0}
    placer = Placer(_policy(FixedForecast(work, {2: 0.9, 3: 0.2})))
    gpu0 = busy_gpu(0, 30_000, tenants=2)
    assert _place(placer, [request("r", 4000)], (gpu0, busy_gpu(1, 5_000)), now=0.0) == 0
    assert _place(placer, [request("r", 4000)], (gpu0, busy_gpu(1, 30_000)), now=1.0) == 1
    assert placer.kept.reused == 0


def test_a_pass_shares_one_decision_among_task_types_that_no_gpu_can_take() -> None:
    fc = FixedForecast({"tenant0-0": 10.0, "label-a": 100.0, "label-b": 100.0})
    placer = Placer(_policy(fc))
    v = view(busy_gpu(0, 5_000))  # too little memory for either
    result = placer.schedule([request("a", 8000), request("b", 8000)], v)
    assert result.by_key["b"] is result.by_key["a"]  # b was not decided: its shape less the type waits
    alone = Placer(_policy(fc)).decide(request("b", 8000), v)
    assert alone.outcome is Outcome.NOT_NOW and result.decisions[1].summary == alone.summary


def test_the_placer_asks_the_policy_not_its_class() -> None:
    ct = make_policy("completion-time")
    assert ct.prices_options and ct.pricer() is ct
    ia = make_policy("interference-aware")
    assert not ia.prices_options and ia.pricer() is None

    class Counting(Policy):
        name = "counting"

        def __init__(self) -> None:
            self.passes: list[tuple[float, int, int]] = []

        def begin_pass(self, now: float, waiting: int = 0, gpus: int = 1) -> None:
            self.passes.append((now, waiting, gpus))

    policy = Counting()
    Placer(policy).schedule([request("a", 1000), request("b", 1000)], view(busy_gpu(0, 30_000), now=7.0))
    assert policy.passes == [(7.0, 2, 1)]
