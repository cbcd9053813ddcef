"""Queue disciplines: FIFO (the paper) and backfill with aging and a starvation bound."""

from __future__ import annotations

import pytest
from helpers import request

from carma_airflow.core import Backfill, Fifo, UnknownPolicyError, make_queue


def keys(plan_ordered: tuple) -> list[str]:
    return [r.key for r in plan_ordered]


def test_fifo_submit_order_and_blocking() -> None:
    pending = [
        request("c", 1000, submitted_at=30.0),
        request("a", 1000, submitted_at=10.0),
        request("b", 1000, submitted_at=20.0),
    ]
    plan = Fifo().plan(pending, now=100.0)
    assert keys(plan.ordered) == ["a", "b", "c"]
    assert plan.blocking is True
    assert plan.protected is None


def test_fifo_recovered_first() -> None:
    pending = [
        request("a", 1000, submitted_at=10.0),
        request("r", 1000, submitted_at=50.0, recovered=True),
        request("b", 1000, submitted_at=20.0),
        request("q", 1000, submitted_at=40.0, recovered=True),
    ]
    plan = Fifo().plan(pending, now=100.0)
    assert keys(plan.ordered) == ["q", "r", "a", "b"]


def test_fifo_ignores_priority() -> None:
    pending = [request("low", 1, submitted_at=1.0, priority=0), request("high", 1, submitted_at=2.0, priority=100)]
    assert keys(Fifo().plan(pending, now=10.0).ordered) == ["low", "high"]


def test_backfill_orders_by_priority() -> None:
    pending = [
        request("low", 1000, submitted_at=0.0, priority=0),
        request("high", 1000, submitted_at=5.0, priority=3),
        request("mid", 1000, submitted_at=1.0, priority=1),
    ]
    plan = Backfill().plan(pending, now=10.0)
    assert keys(plan.ordered) == ["high", "mid", "low"]
    assert plan.blocking is False
    assert plan.protected is None


def test_backfill_aging_lifts_old_requests() -> None:
    q = Backfill(aging_s=100.0, starvation_s=1e9)
    old = request("old", 1000, submitted_at=0.0, priority=0)
    new = request("new", 1000, submitted_at=950.0, priority=5)
    # old: 0 + 1000/100 = 10 points; new: 5 + 50/100 = 5.5 points
    assert keys(q.plan([new, old], now=1000.0).ordered) == ["old", "new"]
    # earlier the old request had aged only 4 points, under the new one's priority 5
    assert keys(q.plan([new, old], now=400.0).ordered) == ["new", "old"]
    # with slower aging the priority wins
    slow = Backfill(aging_s=10_000.0, starvation_s=1e9)
    assert keys(slow.plan([new, old], now=1000.0).ordered) == ["new", "old"]


def test_backfill_recovery_boost() -> None:
    q = Backfill(aging_s=1e9, starvation_s=1e9, recovery_boost=5.0)
    pending = [
        request("p4", 1000, submitted_at=0.0, priority=4),
        request("rec", 1000, submitted_at=0.0, priority=0, recovered=True),
        request("p6", 1000, submitted_at=0.0, priority=6),
    ]
    assert keys(q.plan(pending, now=1.0).ordered) == ["p6", "rec", "p4"]


def test_backfill_ties_broken_by_submit_time() -> None:
    q = Backfill(aging_s=1e12)
    pending = [request("b", 1, submitted_at=2.0), request("a", 1, submitted_at=1.0)]
    assert keys(q.plan(pending, now=2.0).ordered) == ["a", "b"]


def test_backfill_protects_the_oldest_past_starvation() -> None:
    q = Backfill(starvation_s=3600.0)
    pending = [
        request("young", 1000, submitted_at=3000.0, priority=9),
        request("oldest", 1000, submitted_at=100.0),
        request("older", 1000, submitted_at=200.0),
    ]
    assert q.plan(pending, now=3700.0).protected is None  # waited exactly 3600 s: not past it
    plan = q.plan(pending, now=3700.5)
    assert plan.protected is not None
    assert plan.protected.key == "oldest"
    assert plan.blocking is False


def test_backfill_empty() -> None:
    plan = Backfill().plan([], now=0.0)
    assert plan.ordered == ()
    assert plan.protected is None


@pytest.mark.parametrize(
    ("name", "cls"), [("fifo", Fifo), ("FIFO", Fifo), ("backfill", Backfill), ("priority", Backfill)]
)
def test_make_queue(name: str, cls: type) -> None:
    assert isinstance(make_queue(name), cls)


def test_make_queue_unknown() -> None:
    with pytest.raises(UnknownPolicyError, match="fifo or backfill"):
        make_queue("lifo")
