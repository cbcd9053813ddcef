"""CUDA OOM gets its own bounded retries; other failures follow the author's retries."""

from __future__ import annotations

import pytest
from airflow.sdk.definitions.retry_policy import RetryAction

from carma_airflow.taskrun.retry import PRIOR_OOMS_ENV, CudaOomRetryPolicy


class OutOfMemoryError(RuntimeError):
    pass


def test_oom_is_retried_with_a_reason_while_oom_tries_remain(monkeypatch: pytest.MonkeyPatch) -> None:
    policy = CudaOomRetryPolicy(author_retries=0, oom_retries=2, oom_delay_s=3)
    monkeypatch.setenv(PRIOR_OOMS_ENV, "0")
    d = policy.evaluate(OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB"), 1, 2)
    assert d.action is RetryAction.RETRY and d.retry_delay.total_seconds() == 3
    assert "CUDA out of memory" in d.reason and "OOM retry 1 of 2" in d.reason
    monkeypatch.setenv(PRIOR_OOMS_ENV, "2")
    last = policy.evaluate(RuntimeError("CUDA error: out of memory"), 3, 2)
    assert last.action is RetryAction.FAIL and "Declare more memory in executor_config" in last.reason


def test_the_final_oom_message_says_what_memory_was_reached_and_what_to_declare(
    monkeypatch: pytest.MonkeyPatch, tmp_path
) -> None:
    import os

    from carma_airflow.core.gpu import parse_gpu_list
    from carma_airflow.core.sharing import ActivityProfile
    from carma_airflow.monitor.ledger import Ledger

    ledger = Ledger(tmp_path / "gpus.json")
    ledger.init(parse_gpu_list("1xA100-40GB"))
    uuid = ledger.gpus()[0].uuid
    ledger.allocate(os.getpid(), uuid, 30000, ActivityProfile(0.5, 0.3, 0.2), "t")
    monkeypatch.setenv("CARMA_SIM_LEDGER", str(tmp_path / "gpus.json"))
    monkeypatch.setenv(PRIOR_OOMS_ENV, "2")
    last = CudaOomRetryPolicy(author_retries=0, oom_retries=2).evaluate(RuntimeError("CUDA out of memory"), 3, 2)
    # 30000 MiB reached -> 30000 * 1.25 = 37500 MiB -> 37 GiB (the placer adds its headroom itself)
    assert last.action is RetryAction.FAIL
    assert "on 3 tries, the last at 30000 MiB" in last.reason and "'memory': '37GiB'" in last.reason


def test_a_gpu_fault_is_retried_on_a_healthy_gpu_within_the_authors_retries(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(PRIOR_OOMS_ENV, "0")
    fault = RuntimeError("CUDA error: unspecified launch failure on GPU-SIM-0001 (simulated GPU fault: Xid 79)")
    d = CudaOomRetryPolicy(author_retries=1, oom_retries=2).evaluate(fault, 1, 3)
    assert d.action is RetryAction.RETRY and "healthy GPU" in d.reason
    # not an OOM: the OOM tries the cluster policy added (max_tries 2) are not the author's
    assert CudaOomRetryPolicy(author_retries=0, oom_retries=2).evaluate(fault, 1, 2).action is RetryAction.FAIL
    assert CudaOomRetryPolicy(author_retries=1, oom_retries=2).evaluate(fault, 2, 3).action is RetryAction.FAIL


def test_a_refused_try_follows_the_authors_retries(monkeypatch: pytest.MonkeyPatch) -> None:
    from carma_airflow.core.errors import TaskRefusedError

    monkeypatch.setenv(PRIOR_OOMS_ENV, "0")
    refused = TaskRefusedError("CARMA cannot run this task: never fits: needs 100.0 GiB per GPU")
    assert CudaOomRetryPolicy(author_retries=0, oom_retries=2).evaluate(refused, 1, 2).action is RetryAction.FAIL
    assert CudaOomRetryPolicy(author_retries=1, oom_retries=2).evaluate(refused, 1, 3).action is RetryAction.RETRY


def test_other_failures_follow_the_authors_retries(monkeypatch: pytest.MonkeyPatch) -> None:
    policy = CudaOomRetryPolicy(author_retries=1, oom_retries=2)
    monkeypatch.setenv(PRIOR_OOMS_ENV, "0")
    assert policy.evaluate(ValueError("bad row"), 1, 3).action is RetryAction.RETRY  # author's retry 1 of 1
    assert policy.evaluate(ValueError("bad row"), 2, 3).action is RetryAction.FAIL  # spent
    monkeypatch.setenv(PRIOR_OOMS_ENV, "1")  # an OOM try came first: it does not use the author's retry
    assert policy.evaluate(ValueError("bad row"), 2, 3).action is RetryAction.RETRY


def test_author_retries_zero_means_other_failures_fail_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(PRIOR_OOMS_ENV, raising=False)
    d = CudaOomRetryPolicy(author_retries=0, oom_retries=2).evaluate(KeyError("x"), 1, 2)
    assert d.action is RetryAction.FAIL and "retries are spent" in d.reason


def test_policy_round_trips_through_serialization() -> None:
    p = CudaOomRetryPolicy(1, 3, 7.5)
    q = CudaOomRetryPolicy.deserialize(p.serialize())
    assert (q.author_retries, q.oom_retries, q.oom_delay_s) == (1, 3, 7.5)


def test_a_try_reset_before_it_ran_spends_none_of_the_authors_retries(monkeypatch: pytest.MonkeyPatch) -> None:
    # try 1 only waited when its scheduler stopped; Airflow reset it (try 2) and CarmaExecutor
    # raised max_tries from 3 (author 1 + OOM 2) to 4 (restart.keep_retries_of_unrun)
    policy = CudaOomRetryPolicy(author_retries=1, oom_retries=2)
    monkeypatch.setenv(PRIOR_OOMS_ENV, "0")
    first = policy.evaluate(ValueError("bad row"), 2, 4)
    assert first.action is RetryAction.RETRY and "author's retry 1 of 1" in first.reason
    assert policy.evaluate(ValueError("bad row"), 3, 4).action is RetryAction.FAIL  # spent
