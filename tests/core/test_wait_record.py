"""The wait option's track record (core/wait_record.py): waits that ran longer than their predicted
drains make waiting dearer; waits that ended early never make it cheaper."""

from __future__ import annotations

from dataclasses import replace

from helpers import busy_gpu, idle_gpu, request, view
from test_completion_time import FixedForecast, _policy

from carma_airflow.core import Placer
from carma_airflow.core.decision import Outcome
from carma_airflow.core.wait_record import MAX_TRUST, PRIOR, WINDOW, WaitRecord


def _ended(record: WaitRecord, n: int, predicted: float, actual: float, model: str | None = "A100-40GB") -> None:
    for k in range(n):
        key = f"w{len(record)}-{k}"
        record.waits(key, 0.0, predicted, model)
        record.placed(key, actual)


def test_trust_starts_at_one_and_never_drops_below_it() -> None:
    record = WaitRecord()
    assert record.trust("A100-40GB") == 1.0 and record.trust(None) == 1.0
    _ended(record, 10, predicted=1000.0, actual=100.0)  # every wait ended early
    assert record.trust("A100-40GB") == 1.0


def test_waits_that_overran_raise_trust_by_the_ratio_of_sums_with_the_prior() -> None:
    record = WaitRecord()
    _ended(record, 4, predicted=1000.0, actual=3000.0)
    want = (PRIOR + 12_000.0) / (PRIOR + 4_000.0)
    assert abs(record.trust("A100-40GB") - want) < 1e-9
    # a drain predicted at 5 s that took one 60 s pass moves it little (sums, not a mean of ratios)
    small = WaitRecord()
    _ended(small, 4, predicted=5.0, actual=60.0)
    assert small.trust(None) < 1.4  # a mean of ratios would say 12
    # bounded, and only the recent window counts
    _ended(record, WINDOW, predicted=10.0, actual=100_000.0)
    assert record.trust("A100-40GB") == MAX_TRUST
    _ended(record, WINDOW, predicted=1000.0, actual=1000.0)
    assert record.trust("A100-40GB") == 1.0


def test_a_model_with_few_ended_waits_uses_the_deployments_record() -> None:
    record = WaitRecord()
    _ended(record, 8, predicted=1000.0, actual=2000.0, model="A100-40GB")
    _ended(record, 2, predicted=1000.0, actual=1000.0, model="T4")
    assert record.trust("T4") == record.trust(None) > 1.0  # 2 of its own: too few
    _ended(record, 4, predicted=1000.0, actual=1000.0, model="T4")
    assert record.trust("T4") == 1.0


def test_only_a_tries_first_wait_counts_and_a_try_that_never_waited_changes_nothing() -> None:
    record = WaitRecord()
    record.placed("never-waited", 50.0)
    assert len(record) == 0
    record.waits("a", 0.0, 100.0, None)
    record.waits("a", 80.0, 10.0, None)  # re-priced later: the first wait is kept
    record.placed("a", 300.0)
    assert len(record) == 1
    assert abs(record.trust(None) - (PRIOR + 300.0) / (PRIOR + 100.0)) < 1e-9


def test_the_policy_learns_from_its_own_passes_and_shares_once_waits_ran_long() -> None:
    # the tenant has 1000 s left; beside it both run at 0.4: waiting (1000 + 500 s) beats sharing (2000 s)
    fc = FixedForecast({"tenant0-0": 1000.0, "label-r": 500.0, "label-s": 500.0, "label-t": 500.0}, {2: 0.4})
    policy = _policy(fc)
    placer = Placer(policy)
    d = placer.schedule([request("r", 4000)], view(busy_gpu(0, 30_000), now=0.0)).by_key["r"]
    assert d.outcome is Outcome.NOT_NOW
    # it waited 3000 s, not the 1000 s predicted, before an idle GPU took it
    placed = placer.schedule([request("r", 4000)], view(busy_gpu(0, 30_000), idle_gpu(1), now=3000.0))
    assert placed.by_key["r"].gpu_uuids == ("GPU-1",)
    assert len(policy.waits) == 1
    assert abs(policy.waits.trust(None) - (PRIOR + 3000.0) / (PRIOR + 1000.0)) < 1e-9
    # three more such waits: trust ~2.7, waiting now costs 2.7 x 1000 + 500 s, more than sharing
    for k in range(3):
        policy.waits.waits(f"old{k}", 0.0, 1000.0, "A100-40GB")
        policy.waits.placed(f"old{k}", 3000.0)
    d = Placer(policy).decide(request("s", 4000), view(busy_gpu(0, 30_000), now=3000.0))
    assert d.placed and d.gpu_uuids == ("GPU-0",)
    assert "waits here ran longer" in d.chosen[0].detail
    # the knob off: the predicted drain as it is, and it waits again

    policy.settings = replace(policy.settings, wait_record=False)
    d = Placer(policy).decide(request("t", 4000), view(busy_gpu(0, 30_000), now=3000.0))
    assert d.outcome is Outcome.NOT_NOW
