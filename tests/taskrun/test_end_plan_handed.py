"""The task side applies the retry plan the executor handed it (CARMA_END_PLAN); without one (a try
an older executor started) it decides as before, from CARMA_PRIOR_OOM_TRIES and the kill budget."""

from __future__ import annotations

import itertools

import pytest
from airflow.sdk.definitions.retry_policy import RetryAction

from carma_airflow.core.recovery import author_retry_left, plan_try_end
from carma_airflow.taskrun.killguard import KILL_BUDGET_ENV, RETRY_ON_KILL_ENV, may_retry_killed, retry_on_kill_env
from carma_airflow.taskrun.outcome import END_PLAN_ENV, PRIOR_OOMS_ENV, end_plan_env, end_plan_here
from carma_airflow.taskrun.retry import CudaOomRetryPolicy


class OutOfMemoryError(RuntimeError):
    pass


FAILURES = (
    OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB"),
    RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB; past its cap"),
    RuntimeError("CUDA error: unspecified launch failure (simulated GPU fault: Xid 79)"),
    ValueError("bad row"),
)


@pytest.fixture(autouse=True)
def bare_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (END_PLAN_ENV, PRIOR_OOMS_ENV, KILL_BUDGET_ENV, RETRY_ON_KILL_ENV, "CARMA_SIM_LEDGER"):
        monkeypatch.delenv(name, raising=False)


def _hand(monkeypatch: pytest.MonkeyPatch, *args: int) -> None:
    for name, value in end_plan_env(plan_try_end(args[0], None, *args[1:])).items():
        monkeypatch.setenv(name, value)


@pytest.mark.parametrize(
    ("author", "oom", "prior", "try_number", "raised"),
    [
        (a, o, p, n, r)
        for a, o, p, n, r in itertools.product((0, 1, 2), (0, 2), (0, 1, 2), (1, 2, 3, 4), (0, 1))
        if p <= min(o, n - 1)
    ],
)
def test_a_handed_plan_decides_as_the_task_decided_before(
    monkeypatch: pytest.MonkeyPatch, author: int, oom: int, prior: int, try_number: int, raised: int
) -> None:
    """Every failure, every count, a max_tries raised by a reset or not: the same verdict and the
    same words whether the executor's plan is handed or the old environment count is read."""
    policy = CudaOomRetryPolicy(author, oom, oom_delay_s=3)
    max_tries = author + oom + raised
    for exc in FAILURES:
        monkeypatch.setenv(PRIOR_OOMS_ENV, str(prior))
        before = policy.evaluate(exc, try_number, max_tries)
        monkeypatch.delenv(PRIOR_OOMS_ENV)
        _hand(monkeypatch, try_number, author, oom, prior)
        after = policy.evaluate(exc, try_number, max_tries)
        monkeypatch.delenv(END_PLAN_ENV)
        assert (after.action, after.reason, after.retry_delay) == (before.action, before.reason, before.retry_delay)


def test_the_handed_plan_is_the_decision_not_the_old_count(monkeypatch: pytest.MonkeyPatch) -> None:
    # an environment that would still allow an OOM retry: the plan (OOM retries spent) decides
    monkeypatch.setenv(PRIOR_OOMS_ENV, "0")
    _hand(monkeypatch, 3, 0, 2, 2)
    assert end_plan_here() is not None
    d = CudaOomRetryPolicy(author_retries=0, oom_retries=2).evaluate(OutOfMemoryError("CUDA out of memory"), 3, 2)
    assert d.action is RetryAction.FAIL and "CUDA OOM on 3 tries" in d.reason


def test_a_plan_that_is_not_one_falls_back_to_the_old_count(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(END_PLAN_ENV, "{not json")
    monkeypatch.setenv(PRIOR_OOMS_ENV, "2")
    assert end_plan_here() is None
    d = CudaOomRetryPolicy(author_retries=0, oom_retries=2).evaluate(OutOfMemoryError("CUDA out of memory"), 3, 2)
    assert d.action is RetryAction.FAIL


@pytest.mark.parametrize(("author", "prior", "try_number", "max_tries"), [(1, 0, 2, 4), (1, 0, 2, 3), (1, 1, 2, 3)])
def test_the_kill_guard_applies_the_handed_plan_as_it_applied_the_budget(
    monkeypatch: pytest.MonkeyPatch, author: int, prior: int, try_number: int, max_tries: int
) -> None:
    estimate = author_retry_left(try_number, prior, author)  # what the older executor sent, counted from try 1
    for name, value in retry_on_kill_env(estimate, author, 2, prior).items():
        monkeypatch.setenv(name, value)
    before = (may_retry_killed(try_number, max_tries), may_retry_killed(try_number, None))
    monkeypatch.delenv(KILL_BUDGET_ENV)
    monkeypatch.delenv(RETRY_ON_KILL_ENV)
    _hand(monkeypatch, try_number, author, 2, prior)
    assert (may_retry_killed(try_number, max_tries), may_retry_killed(try_number, None)) == before


def test_without_a_plan_or_a_budget_airflow_decides_a_kill() -> None:
    assert may_retry_killed(2, 3) is None
