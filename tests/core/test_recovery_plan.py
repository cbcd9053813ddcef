"""A try's retry plan (core/recovery.plan_try_end): decided once, for each way the try can end."""

from __future__ import annotations

import json

import pytest

from carma_airflow.core.fencing import PAST_CAP
from carma_airflow.core.recovery import EndPlan, EndWay, Failure, FailureKind, oom_advice, plan_try_end

CAP = Failure(FailureKind.CAP_OOM, "exception type OutOfMemoryError, 9.5 GiB allowed")
FULL = Failure(FailureKind.CUDA_OOM, "message contains 'CUDA out of memory'")
PROBABLE = Failure(FailureKind.PROBABLE_OOM, "CUDNN_STATUS_NOT_INITIALIZED on a nearly full GPU")
FAULT = Failure(FailureKind.GPU_FAULT, "message contains 'Xid'")
KILLED = Failure(FailureKind.KILLED, "exit code -9")
OTHER = Failure(FailureKind.OTHER, "ValueError")


def test_an_oom_is_retried_while_oom_tries_remain_with_the_words_airflow_shows() -> None:
    plan = plan_try_end(2, None, author_retries=1, oom_retries=2, prior_ooms=1)
    cap, full = plan.verdict(CAP), plan.verdict(FULL)
    assert cap.retry and full.retry
    assert cap.words(CAP) == (
        f"CUDA out of memory {PAST_CAP} (exception type OutOfMemoryError, 9.5 GiB allowed); "
        "CARMA retries it with a larger cap (OOM retry 2 of 2)"
    )
    assert full.words(FULL) == (
        "CUDA out of memory (message contains 'CUDA out of memory'); "
        "CARMA retries it on a GPU with more free memory (OOM retry 2 of 2)"
    )
    assert plan.verdict(PROBABLE) == full  # a probable OOM is a full GPU's


def test_an_oom_past_its_retries_fails_with_the_advice_from_what_the_try_reached() -> None:
    plan = plan_try_end(3, None, author_retries=0, oom_retries=2, prior_ooms=2)
    verdict = plan.verdict(FULL)
    assert not verdict.retry and verdict.advice_tries == 3
    assert verdict.words(FULL, 30000) == oom_advice(3, 30000)
    assert "the last at 30000 MiB" in verdict.words(FULL, 30000) and "'memory': '37GiB'" in verdict.words(FULL, 30000)
    assert verdict.words(FULL, None) == verdict.reason == oom_advice(3, None)  # what the store keeps
    assert plan.verdict(CAP) == verdict


def test_other_failures_follow_the_authors_retries_and_oom_tries_do_not_spend_them() -> None:
    first = plan_try_end(1, None, author_retries=1, oom_retries=2, prior_ooms=0)
    assert first.verdict(OTHER).words(OTHER) == "other: author's retry 1 of 1"
    assert first.verdict(FAULT).words(FAULT) == (
        "the GPU failed under the task (message contains 'Xid'); CARMA retries it on a healthy GPU "
        "(author's retry 1 of 1)"
    )
    assert all(first.verdict(f).retry for f in (OTHER, FAULT, KILLED))
    second = plan_try_end(2, None, author_retries=1, oom_retries=2, prior_ooms=0)  # try 1 failed: spent
    for failure in (OTHER, FAULT, KILLED):
        verdict = second.verdict(failure)
        assert not verdict.retry
        assert verdict.words(failure) == f"{failure.kind.value} ({failure.evidence}); the author's 1 retries are spent"
    after_oom = plan_try_end(2, None, author_retries=1, oom_retries=2, prior_ooms=1)  # try 1 OOMed
    assert after_oom.verdict(OTHER).retry and after_oom.verdict(KILLED).retry


def test_a_raised_max_tries_recounts_the_round_and_never_the_oom_verdicts() -> None:
    # retries 1 + 2 OOM retries: max_tries 3; a restart's reset of a try that never ran raised it to 4
    planned = plan_try_end(2, None, author_retries=1, oom_retries=2, prior_ooms=0)
    assert not planned.verdict(KILLED).retry  # counted from try 1: try 1 spent the author's retry
    assert planned.with_max_tries(3) is planned  # what it was counted with
    assert planned.with_max_tries(None) is planned  # not known: the plan stands
    recounted = planned.with_max_tries(4)
    assert recounted.verdict(KILLED).retry and recounted.verdict(OTHER).words(OTHER) == "other: author's retry 1 of 1"
    assert (recounted.verdict(CAP), recounted.verdict(FULL)) == (planned.verdict(CAP), planned.verdict(FULL))


@pytest.mark.parametrize("prior_ooms", [0, 1, 2])
def test_the_plan_survives_json_as_the_store_and_the_environment_keep_it(prior_ooms: int) -> None:
    plan = plan_try_end(3, None, author_retries=1, oom_retries=2, prior_ooms=prior_ooms)
    again = EndPlan.from_json(json.loads(json.dumps(plan.as_json())))
    assert again == plan
    assert {w.value for w in EndWay} == set(plan.as_json()["verdicts"])


@pytest.mark.parametrize(
    "broken",
    [
        None,
        [],
        {"try_number": 1},
        {"try_number": "1", "max_tries": None, "author_retries": 0, "oom_retries": 2, "prior_ooms": 0, "verdicts": {}},
        {"try_number": 1, "max_tries": None, "author_retries": 0, "oom_retries": 2, "prior_ooms": 0, "verdicts": {}},
        {"try_number": 1, "max_tries": True, "author_retries": 0, "oom_retries": 2, "prior_ooms": 0, "verdicts": {}},
    ],
)
def test_what_is_not_a_plan_reads_as_none(broken: object) -> None:
    assert EndPlan.from_json(broken) is None


def test_a_plan_missing_one_way_reads_as_none() -> None:
    data = plan_try_end(1, None, 0, 2, 0).as_json()
    del data["verdicts"][EndWay.KILLED.value]
    assert EndPlan.from_json(data) is None
    data = plan_try_end(1, None, 0, 2, 0).as_json()
    data["verdicts"][EndWay.OTHER.value]["retry"] = "yes"
    assert EndPlan.from_json(data) is None


def test_each_failure_kind_has_one_way() -> None:
    assert {EndWay.of(k) for k in FailureKind} == set(EndWay)
    assert EndWay.of(FailureKind.CUDA_OOM) is EndWay.of(FailureKind.PROBABLE_OOM) is EndWay.GPU_OOM
