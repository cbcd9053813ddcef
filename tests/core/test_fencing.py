"""The cap a fenced try is held to (core/fencing.py)."""

from __future__ import annotations

import pytest

from carma_airflow.core.errors import ConfigError
from carma_airflow.core.fencing import (
    CapRule,
    Fence,
    FenceModel,
    IsolationMode,
    Tenant,
    promise_mib,
    protective_cap_mib,
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
    common = {"promise_mib": 10240, "total_mib": 40960, "reserve_mib": 512}
    promise = FenceModel.of(IsolationMode.FRAMEWORK, CapRule.PROMISE)
    protective = FenceModel.of(IsolationMode.FRAMEWORK, CapRule.PROTECTIVE)
    assert promise.start_cap_mib(**common, co_tenants=[Tenant(14336)]) == 10240
    assert protective.start_cap_mib(**common, co_tenants=[Tenant(14336)]) == 40960 - 512 - 14336
    assert protective.start_cap_mib(**common, co_tenants=[Tenant(40000)]) == 10240
    assert promise.start_cap_mib(**common, exclusive=True) == 40960


def test_one_margin_rule_for_every_promise() -> None:
    # a cap fixed at the start carries the margin; a live cap none (measured: docs/isolation.md)
    fixed = FenceModel.of(IsolationMode.FRAMEWORK, CapRule.PROMISE)
    live = FenceModel.of(IsolationMode.FRAMEWORK, CapRule.LIVE)
    assert fixed.promise_mib(8192, 2048, 40960) == 10240
    assert live.promise_mib(8192, 2048, 40960) == 8192 and live.margin_mib(2048) == 0
    # MPS live: a live promise too (the pinned limit fixed at the start carries the margin instead)
    assert FenceModel.of(IsolationMode.MPS, CapRule.LIVE).promise_mib(8192, 2048, 40960) == 8192
    assert FenceModel.of(IsolationMode.MPS, CapRule.PROMISE).promise_mib(8192, 2048, 40960) == 10240


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


def test_cap_rule_parse_normalises_or_names_the_rules() -> None:
    assert CapRule.parse(" Live ") is CapRule.LIVE
    with pytest.raises(ConfigError, match="promise \\| protective \\| live"):
        CapRule.parse("fixed")


def test_fence_model_of_each_mechanism() -> None:
    from carma_airflow.core.fencing import RESET_S, FenceModel

    # MPS reads its limit once: under live the framework's live cap moves beneath it
    mps = FenceModel.of(IsolationMode.MPS, CapRule.LIVE)
    assert mps.rule is CapRule.LIVE and mps.live and mps.start_bound
    assert mps.reset_s == RESET_S[IsolationMode.FRAMEWORK]  # PyTorch's follower, as under framework
    assert not FenceModel.of(IsolationMode.MPS, CapRule.PROMISE).start_bound
    assert not FenceModel.of(IsolationMode.FRAMEWORK, CapRule.LIVE).start_bound
    assert "pinned limit fixed at the try's start" in mps.describe() and "PyTorch's fraction re-set" in mps.describe()
    live = FenceModel.of(IsolationMode.FRAMEWORK, CapRule.LIVE)
    assert live.live and live.reset_s == RESET_S[IsolationMode.FRAMEWORK]
    assert FenceModel.of(IsolationMode.DRIVER, CapRule.LIVE).reset_s < live.reset_s  # no follower thread
    assert FenceModel.of(IsolationMode.NONE, CapRule.LIVE).fenced is False
    with pytest.raises(ValueError, match="resolve auto"):
        FenceModel(IsolationMode.AUTO)
    assert "framework" in live.describe() and "re-set" in live.describe()


def test_fence_model_start_cap_and_what_a_try_may_hold() -> None:
    from carma_airflow.core.fencing import FenceModel, Tenant

    neighbour = [Tenant(22528, 0)]  # placed, not allocated yet: its promise counts
    common = {"promise_mib": 10240, "total_mib": 40960, "reserve_mib": 0}
    promise = FenceModel.of(IsolationMode.FRAMEWORK, CapRule.PROMISE)
    assert promise.start_cap_mib(**common, co_tenants=neighbour) == 10240
    assert promise.may_hold_mib(start_cap_mib=10240, **common, co_tenants=[]) == 10240  # fixed: never moves
    protective = FenceModel.of(IsolationMode.MPS, CapRule.PROTECTIVE)
    alone = protective.start_cap_mib(**common, co_tenants=[])
    assert alone == 40960 and protective.may_hold_mib(start_cap_mib=alone, **common, co_tenants=neighbour) == 40960
    live = FenceModel.of(IsolationMode.DRIVER, CapRule.LIVE)
    assert live.may_hold_mib(start_cap_mib=40960, **common, co_tenants=neighbour) == 40960 - 22528
    assert live.may_hold_mib(start_cap_mib=40960, **common, co_tenants=[Tenant(40000, 0)]) == 10240  # its floor
    assert live.may_hold_mib(start_cap_mib=None, **common, co_tenants=neighbour, exclusive=True) == 40960
    none = FenceModel.of(IsolationMode.NONE)
    assert none.start_cap_mib(**common) is None and none.may_hold_mib(start_cap_mib=None, **common) is None


def test_a_co_tenant_counts_at_its_promise_until_its_placer_trusts_what_it_holds() -> None:
    from carma_airflow.core.fencing import counted_mib

    assert counted_mib(22528, 0, allocated=False, age_s=100.0, lock_s=30.0) == 22528  # loading data on the CPU
    assert counted_mib(22528, 12288, allocated=True, age_s=10.0, lock_s=30.0) == 22528
    assert counted_mib(22528, 30000, allocated=True, age_s=10.0, lock_s=30.0) == 30000
    assert counted_mib(22528, 12288, allocated=True, age_s=31.0, lock_s=30.0) == 12288
    assert counted_mib(22528, 12288, allocated=True, age_s=1e9, lock_s=float("inf")) == 22528


def test_mps_live_holds_a_try_to_the_lower_of_its_pinned_limit_and_its_live_cap() -> None:
    """MPS live: the pinned limit fixed at the try's start (the GPU less the co-tenants then, plus
    the margin) and PyTorch's fraction re-set beneath it as co-tenants come and go."""
    from carma_airflow.core.fencing import FenceModel, Tenant

    mps = FenceModel.of(IsolationMode.MPS, CapRule.LIVE)
    common = {"promise_mib": 8192, "total_mib": 40960, "reserve_mib": 512}
    start = mps.start_cap_mib(**common, co_tenants=[Tenant(12288)], margin_mib=2048)
    assert start == 40960 - 512 - 12288 + 2048  # the pinned limit: protective, plus the margin
    # at the start PyTorch's fraction is the protective cap, beneath the pinned limit
    assert mps.may_hold_mib(start_cap_mib=start, **common, co_tenants=[Tenant(12288)]) == 40960 - 512 - 12288
    # the co-tenant left: the try grows past reservation + margin (10,240), up to the pinned limit
    assert mps.may_hold_mib(start_cap_mib=start, **common, co_tenants=[]) == start > 10240
    # a neighbour placed later: the live fraction keeps its 20,480, which the pinned limit could not
    assert mps.may_hold_mib(start_cap_mib=start, **common, co_tenants=[Tenant(20480)]) == 40960 - 512 - 20480
    # alone at its start: the pinned limit is the whole GPU; exclusive: the whole GPU
    assert mps.start_cap_mib(**common, co_tenants=[], margin_mib=2048) == 40960
    assert mps.start_cap_mib(**common, co_tenants=[Tenant(12288)], exclusive=True, margin_mib=2048) == 40960
    # the margin is only the fixed limit's: framework live starts at the protective cap
    framework = FenceModel.of(IsolationMode.FRAMEWORK, CapRule.LIVE)
    assert framework.start_cap_mib(**common, co_tenants=[Tenant(12288)], margin_mib=2048) == 40960 - 512 - 12288
