"""The completion-time rule's track record (core/track_record.py): each kind of option (wait, share)
priced by how this deployment's tries that chose it completed against their predictions."""

from __future__ import annotations

from dataclasses import replace

import pytest
from helpers import busy_gpu, idle_gpu, request, view
from test_completion_time import FixedForecast, _policy

from carma_airflow.core import Placer
from carma_airflow.core.decision import Outcome
from carma_airflow.core.track_record import MAX_FACTOR, MIN_FACTOR, PRIOR, SHARE, WAIT, WINDOW, TrackRecord


def _ended(record: TrackRecord, kind: str, n: int, predicted: float, actual: float) -> None:
    for k in range(n):
        key = f"{kind}-{len(record)}-{k}"
        record.chose(key, kind, 0.0, predicted)
        record.ended(key, actual)


def test_a_factor_is_one_until_tries_end_and_the_ratio_of_sums_with_the_prior_after() -> None:
    record = TrackRecord()
    assert record.factor(WAIT) == record.factor(SHARE) == 1.0
    _ended(record, WAIT, 4, predicted=2000.0, actual=4000.0)
    assert record.factor(WAIT) == pytest.approx((PRIOR + 16_000.0) / (PRIOR + 8_000.0))
    assert record.factor(SHARE) == 1.0  # per kind
    # a try predicted at a few seconds cannot swing it (sums, not a mean of ratios)
    small = TrackRecord()
    _ended(small, SHARE, 4, predicted=5.0, actual=600.0)
    assert small.factor(SHARE) < 1.7


def test_factors_go_both_ways_within_bounds_and_only_the_recent_window_counts() -> None:
    record = TrackRecord()
    _ended(record, SHARE, WINDOW, predicted=10_000.0, actual=1_000.0)
    assert record.factor(SHARE) == MIN_FACTOR
    _ended(record, WAIT, WINDOW, predicted=1_000.0, actual=100_000.0)
    assert record.factor(WAIT) == MAX_FACTOR
    _ended(record, WAIT, WINDOW, predicted=1_000.0, actual=1_000.0)
    assert record.factor(WAIT) == 1.0


def test_a_carried_record_keeps_the_ended_tries_and_not_the_open_decisions() -> None:
    day_one = TrackRecord()
    _ended(day_one, WAIT, 3, predicted=1_000.0, actual=4_000.0)
    day_one.chose("still-waiting", SHARE, 0.0, 500.0)
    day_two = TrackRecord()
    day_two.carry_from(day_one)
    assert day_two.sums(WAIT) == day_one.sums(WAIT) and day_two.factor(WAIT) == day_one.factor(WAIT) > 1.0
    assert day_two.version > 0  # kept waits re-price
    day_two.ended("still-waiting", 900.0)  # day one's open decision is not day two's
    assert day_two.ended_of(SHARE) == 0
    _ended(day_two, WAIT, WINDOW, predicted=1_000.0, actual=1_000.0)  # the window still slides
    assert day_two.factor(WAIT) == 1.0 and day_one.ended_of(WAIT) == 3


def test_only_a_tries_first_choice_counts_and_a_crash_is_forgotten() -> None:
    record = TrackRecord()
    record.ended("never-priced", 50.0)
    assert len(record) == 0
    record.chose("a", WAIT, 0.0, 1000.0)
    record.chose("a", SHARE, 500.0, 10.0)  # re-priced later: its first choice is kept
    record.ended("a", 3000.0)
    assert record.ended_of(WAIT) == 1 and record.ended_of(SHARE) == 0
    assert record.sums(WAIT) == (1000.0, 3000.0)
    record.chose("b", SHARE, 0.0, 1000.0)
    record.ended("b", 9000.0, ok=False)  # crashed: its time measures the crash, not the option
    assert record.ended_of(SHARE) == 0
    with pytest.raises(ValueError, match="kind must be"):
        record.chose("c", "idle", 0.0, 1.0)


def test_the_policy_records_its_choices_and_prices_waiting_by_how_waits_came_out() -> None:
    # the tenant has 1000 s left; beside it both run at 0.4: waiting (1000 + 500 s) beats sharing (2000 s)
    fc = FixedForecast({"tenant0-0": 1000.0, "label-r": 500.0, "label-s": 500.0, "label-t": 500.0}, {2: 0.4})
    policy = _policy(fc)
    assert not policy.settings.track_record  # opt-in
    # no floor: at 0.4 each sharing lowers the GPU's summed speed, which the learned floor refuses;
    # here the record alone is to turn waiting into sharing
    policy.settings = replace(policy.settings, track_record=True, learned_floor=None)
    d = Placer(policy).decide(request("r", 4000), view(busy_gpu(0, 30_000)))
    assert d.outcome is Outcome.NOT_NOW
    # the driver tells it the try ended 4500 s later, not the 1500 s predicted
    policy.try_ended("r", 4500.0, True)
    assert policy.record.sums(WAIT) == (1500.0, 4500.0)
    for k in range(3):  # three more such waits: waiting is now priced ~2.3x, dearer than sharing
        policy.record.chose(f"old{k}", WAIT, 0.0, 1500.0)
        policy.record.ended(f"old{k}", 4500.0)
    d = Placer(policy).decide(request("s", 4000), view(busy_gpu(0, 30_000), now=4500.0))
    assert d.placed and d.gpu_uuids == ("GPU-0",)
    assert "waits here took longer than predicted" in d.chosen[0].detail
    assert policy.record.ended_of(SHARE) == 0 and policy.record.sums(SHARE) == (0.0, 0.0)
    policy.try_ended("s", 6000.0, True)  # its share: predicted 2000 s (1250 s done), took 1500 s
    assert policy.record.ended_of(SHARE) == 1
    # the knob off: as predicted, and it waits again
    policy.settings = replace(policy.settings, track_record=False)
    d = Placer(policy).decide(request("t", 4000), view(busy_gpu(0, 30_000), now=6000.0))
    assert d.outcome is Outcome.NOT_NOW


def test_an_idle_placement_is_not_priced_and_not_recorded() -> None:
    fc = FixedForecast({"tenant0-0": 1000.0, "label-r": 500.0})
    policy = _policy(fc)
    policy.settings = replace(policy.settings, track_record=True)
    d = Placer(policy).decide(request("r", 4000), view(busy_gpu(0, 30_000), idle_gpu(1)))
    assert d.gpu_uuids == ("GPU-1",)
    policy.try_ended("r", 500.0, True)
    assert len(policy.record) == 0
