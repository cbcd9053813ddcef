"""The cap a fenced try is held to (core/fencing.py)."""

from __future__ import annotations

import pytest

from carma_airflow.core.errors import ConfigError
from carma_airflow.core.fencing import (
    CapRule,
    Fence,
    IsolationMode,
    promise_mib,
    protective_cap_mib,
    start_cap_mib,
)


def test_promise_is_reservation_plus_margin_within_the_gpu() -> None:
    assert promise_mib(8192, 2048, 40960) == 10240
    assert promise_mib(40000, 2048, 40960) == 40960
    assert promise_mib(8192, -5, 40960) == 8192


def test_protective_cap_leaves_each_co_tenant_the_larger_of_promise_and_held() -> None:
    # a 12 GiB tenant promised 14 GiB holding 3 GiB: its 14 GiB stay out of reach
    assert protective_cap_mib(40960, 512, [(14336, 3072)]) == 40960 - 512 - 14336
    # a tenant that holds more than its promise keeps what it holds
    assert protective_cap_mib(40960, 0, [(14336, 20000)]) == 20960
    assert protective_cap_mib(10000, 0, [(20000, 0)]) == 0


def test_start_cap_by_rule_never_below_the_promise_and_whole_gpu_when_exclusive() -> None:
    common = {"promise": 10240, "total_mib": 40960, "reserve_mib": 512}
    assert start_cap_mib(CapRule.PROMISE, **common, co_tenant_promises=[14336]) == 10240
    assert start_cap_mib(CapRule.PROTECTIVE, **common, co_tenant_promises=[14336]) == 40960 - 512 - 14336
    assert start_cap_mib(CapRule.PROTECTIVE, **common, co_tenant_promises=[40000]) == 10240
    assert start_cap_mib(CapRule.PROMISE, **common, exclusive=True) == 40960


def test_mode_parse_names_the_modes() -> None:
    assert IsolationMode.parse(" MPS ") is IsolationMode.MPS
    with pytest.raises(ConfigError, match="auto \\| framework \\| mps \\| driver \\| none"):
        IsolationMode.parse("caps")


def test_fence_fractions_and_words() -> None:
    fence = Fence(IsolationMode.FRAMEWORK, (10240,), (10240,), (40960,))
    assert fence.fractions() == (0.25,)
    assert "capped at 10240 MiB" in fence.describe()
    assert "unfenced" in Fence(IsolationMode.NONE, (0,), (0,), (40960,)).describe()
    with pytest.raises(ValueError):
        Fence(IsolationMode.FRAMEWORK, (1,), (1, 2), (3,))


def test_a_cap_oom_retry_grows_to_what_it_asked_bounded_by_the_gpu() -> None:
    from carma_airflow.core.recovery import Failure, FailureKind, RecoverySettings, plan_recovery
    from carma_airflow.core.task import MemoryNeed, TaskRequest

    request = TaskRequest("t#1", "t", MemoryNeed(8192, "declared"))
    failure = Failure(FailureKind.CAP_OOM, "past its cap")
    plan = plan_recovery(request, failure, oom_retries_done=0, peak_mib=30720, crashed_gpus=("g",), now=0.0)
    assert not isinstance(plan, str) and hasattr(plan, "request")
    assert plan.request.memory.mib == 38400 and not plan.request.exclusive  # type: ignore[union-attr]
    assert "past its cap" in plan.reason  # type: ignore[union-attr]
    bounded = RecoverySettings(max_request_mib=38400 - 1024)
    plan = plan_recovery(
        request, failure, oom_retries_done=0, peak_mib=30720, crashed_gpus=("g",), now=0.0, settings=bounded
    )
    assert plan.request.memory.mib == 37376 and plan.request.exclusive  # type: ignore[union-attr]


def test_an_mps_servers_fault_is_a_gpu_fault_for_every_client() -> None:
    from carma_airflow.core.recovery import FailureKind, classify_failure

    for text in (
        "CUDA error: CUDA_ERROR_MPS_RPC_FAILURE",
        "RuntimeError: CUDA error: cudaErrorMpsClientTerminated",
        "MPS client terminated by the server",
    ):
        assert classify_failure("RuntimeError", text).kind is FailureKind.GPU_FAULT, text
    assert classify_failure("RuntimeError", "CUDA_ERROR_MPS_SERVER_NOT_READY").kind is FailureKind.GPU_FAULT
