"""A policy's rank inside one priority: the completion-time policy's shortest predicted run first,
overdue tries ahead, priority order untouched."""

from __future__ import annotations

import pytest
from helpers import idle_gpu, request
from test_completion_time import FixedForecast

from carma_airflow.core import Backfill, Fifo, Placer
from carma_airflow.core.cycle import SchedulingCycle
from carma_airflow.core.policies import make_policy
from carma_airflow.core.policies.completion_time import CompletionSettings, CompletionTime
from carma_airflow.core.reservations import Reservations
from carma_airflow.core.task import TaskRequest

WORK = {"label-huge": 4000.0, "label-long": 1000.0, "label-short": 100.0, "label-mid": 300.0}


def _rank(request: TaskRequest, waited: float) -> float | None:
    """Shortest first, overdue after half its run (the completion-time policy's default rule)."""
    work = WORK[request.label]
    return None if waited > 0.5 * work else work


def keys(ordered: tuple[TaskRequest, ...]) -> list[str]:
    return [r.key for r in ordered]


def test_a_rank_orders_one_priority_shortest_first() -> None:
    pending = [
        request("long", 1000, submitted_at=0.0),
        request("mid", 1000, submitted_at=10.0),
        request("short", 1000, submitted_at=20.0),
    ]
    q = Backfill()
    assert keys(q.plan(pending, now=30.0).ordered) == ["long", "mid", "short"]  # no rank: arrival
    assert keys(q.plan(pending, now=30.0, rank=_rank).ordered) == ["short", "mid", "long"]


def test_priority_order_holds_over_the_rank() -> None:
    pending = [
        request("short", 1000, submitted_at=0.0, priority=0),
        request("long", 1000, submitted_at=10.0, priority=1),
    ]
    # the long try's higher priority_weight wins, however much shorter the other is
    assert keys(Backfill().plan(pending, now=20.0, rank=_rank).ordered) == ["long", "short"]


def test_an_overdue_try_goes_ahead_of_shorter_ones_and_ages() -> None:
    q = Backfill(aging_s=600.0, starvation_s=1e9)
    long = request("long", 1000, submitted_at=0.0)
    short = request("short", 1000, submitted_at=480.0)
    # at 490 s the long try has waited 490 s < 500 s (half its run): ranked behind the short one
    assert keys(q.plan([long, short], now=490.0, rank=_rank).ordered) == ["short", "long"]
    # at 510 s it is overdue: ahead of every ranked try of its priority
    assert keys(q.plan([long, short], now=510.0, rank=_rank).ordered) == ["long", "short"]
    # an overdue try ages past a higher priority as backfill's aging does (2 points at 1300 s);
    # a ranked try does not: the huge one waited 1300 s too (2 points without a rank) yet stays behind
    huge = request("huge", 1000, submitted_at=0.0)  # ranked until 2000 s
    high = request("mid", 1000, submitted_at=1290.0, priority=1)
    assert keys(q.plan([huge, high], now=1300.0).ordered) == ["huge", "mid"]
    assert keys(q.plan([long, huge, high], now=1300.0, rank=_rank).ordered) == ["long", "mid", "huge"]


def test_the_starvation_bound_makes_a_try_overdue_whatever_its_rank() -> None:
    q = Backfill(aging_s=1e9, starvation_s=100.0)
    long = request("long", 1000, submitted_at=0.0)  # by its own bound ranked until 500 s
    mid = request("mid", 1000, submitted_at=50.0)  # ranked until 200 s
    assert keys(q.plan([long, mid], now=90.0, rank=_rank).ordered) == ["mid", "long"]
    assert keys(q.plan([long, mid], now=110.0, rank=_rank).ordered) == ["long", "mid"]  # waited > 100 s


def test_fifo_keeps_the_papers_order_with_a_rank() -> None:
    pending = [request("long", 1000, submitted_at=0.0), request("short", 1000, submitted_at=1.0)]
    assert keys(Fifo().plan(pending, now=2.0, rank=_rank).ordered) == ["long", "short"]


def _cycle(settings: CompletionSettings) -> SchedulingCycle:
    policy = make_policy("completion-time")
    assert isinstance(policy, CompletionTime)
    policy.settings = settings
    policy.forecast = FixedForecast(WORK, {2: 0.1})  # sharing is ruinous: each try waits for a GPU alone
    return SchedulingCycle(Placer(policy), Backfill(), reservations=Reservations(seen_after_s=30.0))


@pytest.mark.parametrize("decisions", [True, False])
def test_the_freed_gpu_goes_to_the_shortest_waiting_try(decisions: bool) -> None:
    ranked = _cycle(CompletionSettings())
    plain = _cycle(CompletionSettings(shortest_first=False))
    gpu = [idle_gpu(0)]
    for cycle in (ranked, plain):
        cycle.submit(request("long", 4000), 0.0)
        cycle.submit(request("short", 4000), 10.0)
    placed = [c.run(20.0, gpu, waiting_decisions=decisions).placed for c in (ranked, plain)]
    assert [p.request.key for p in placed[0]] == ["short"]  # summed completions: 100 + 1100 < 1000 + 1100
    assert [p.request.key for p in placed[1]] == ["long"]  # the queue's plain order: arrival


def test_without_run_times_the_policy_does_not_rank() -> None:
    policy = make_policy("completion-time")
    assert isinstance(policy, CompletionTime)
    assert policy.ranker() is None  # nothing measured: every try is one unit of work
    policy.learn_duration("label-short", 100.0)
    rank = policy.ranker()
    assert rank is not None
    assert rank(request("short", 1), 40.0) == 100.0
    assert rank(request("short", 1), 60.0) is None  # overdue after half its predicted run


@pytest.mark.parametrize("bad", [0.0, -1.0, float("inf"), float("nan")])
def test_the_overdue_bound_is_validated(bad: float) -> None:
    with pytest.raises(ValueError, match="overdue_runs"):
        CompletionSettings(overdue_runs=bad)
