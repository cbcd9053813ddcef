"""OOM classification (field.md signatures) and the bounded recovery planner."""

from __future__ import annotations

import pytest
from helpers import request
from hypothesis import given
from hypothesis import strategies as st

from carma_airflow.core import (
    Failure,
    FailureKind,
    GiveUp,
    RecoverySettings,
    RetryPlan,
    classify_failure,
    paper_recovery,
    plan_recovery,
)

TORCH2 = (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 170.00 MiB. GPU 0 has a total "
    "capacity of 22.30 GiB of which 14.69 MiB is free. Including non-PyTorch memory, this process has "
    "22.28 GiB memory in use."
)

OOM_MESSAGES = [
    pytest.param(None, TORCH2, id="pytorch-2.x"),
    pytest.param("RuntimeError", "CUDA out of memory. Tried to allocate 2.00 GiB", id="old-runtime-error"),
    pytest.param("RuntimeError", "CUDA error: out of memory\nCUDA kernel errors might be asynchronously", id="raw"),
    pytest.param(
        "RuntimeError", "CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`", id="cublas"
    ),
    pytest.param(
        "RuntimeError", "cusolver error: CUSOLVER_STATUS_ALLOC_FAILED, when calling `cusolverDnCreate`", id="cusolver"
    ),
    pytest.param(
        "torch.distributed.DistBackendError",
        "NCCL error in: ProcessGroupNCCL.cpp:1275, unhandled cuda error; NCCL WARN Cuda failure 'out of memory'",
        id="nccl-cuda-failure",
    ),
    pytest.param(
        "DistBackendError", "include/alloc.h:48 NCCL WARN Failed to CUDA calloc 6291456 bytes", id="nccl-calloc"
    ),
    pytest.param(
        None,
        "ResourceExhaustedError: OOM when allocating tensor with shape[256,1024,1024] and type float",
        id="tensorflow",
    ),
    pytest.param(
        "InternalError", "failed initializing StreamExecutor: CUDA_ERROR_OUT_OF_MEMORY: out of memory", id="tf-cuda"
    ),
    pytest.param(
        "jaxlib.xla_extension.XlaRuntimeError",
        "RESOURCE_EXHAUSTED: Out of memory while trying to allocate 17179869184 bytes.",
        id="jax",
    ),
]


@pytest.mark.parametrize(("exc_type", "message"), OOM_MESSAGES)
def test_oom_signatures(exc_type: str | None, message: str) -> None:
    failure = classify_failure(exc_type, message, exit_code=1)
    assert failure.kind is FailureKind.CUDA_OOM
    assert failure.is_oom


@pytest.mark.parametrize(
    "exc_type",
    [
        "torch.cuda.OutOfMemoryError",
        "torch.OutOfMemoryError",
        "tensorflow.errors.ResourceExhaustedError",
        "tf.errors.ResourceExhaustedError",
    ],
)
def test_oom_exception_types_without_message(exc_type: str) -> None:
    failure = classify_failure(exc_type, None, exit_code=1)
    assert failure.kind is FailureKind.CUDA_OOM
    assert exc_type in failure.evidence


def test_cudnn_not_initialized_probable_only_on_nearly_full_gpu() -> None:
    msg = "cuDNN error: CUDNN_STATUS_NOT_INITIALIZED"
    assert classify_failure("RuntimeError", msg).kind is FailureKind.OTHER
    assert not classify_failure("RuntimeError", msg).is_oom
    probable = classify_failure("RuntimeError", msg, gpu_nearly_full=True)
    assert probable.kind is FailureKind.PROBABLE_OOM
    assert probable.is_oom


@pytest.mark.parametrize("code", [137, -9])
def test_sigkill_is_killed_not_oom(code: int) -> None:
    failure = classify_failure(None, None, exit_code=code)
    assert failure.kind is FailureKind.KILLED
    assert not failure.is_oom
    assert str(code) in failure.evidence


def test_value_error_is_other() -> None:
    failure = classify_failure("ValueError", "invalid literal for int() with base 10: 'x'", exit_code=1)
    assert failure.kind is FailureKind.OTHER
    assert not failure.is_oom


def test_exit_code_alone_is_other() -> None:
    failure = classify_failure(exit_code=1)
    assert failure.kind is FailureKind.OTHER
    assert "1" in failure.evidence


def test_host_memory_error_is_not_cuda_oom() -> None:
    assert classify_failure("MemoryError", "Unable to allocate 8.00 GiB for an array").kind is FailureKind.OTHER


OOM = Failure(FailureKind.CUDA_OOM, "simulated")


def first_try(mib: int = 8000):
    return request("job7#1", mib, try_number=1)


def test_first_retry_asks_for_what_was_reached_and_avoids_the_gpu() -> None:
    plan = plan_recovery(first_try(), OOM, oom_retries_done=0, peak_mib=10000, crashed_gpus=("GPU-2",), now=50.0)
    assert isinstance(plan, RetryPlan)
    nxt = plan.request
    assert nxt.memory.mib >= 10000
    assert nxt.memory.mib == 12544  # 10000 * 1.25 = 12500, rounded up to 256
    assert nxt.memory.mib % 256 == 0
    assert "GPU-2" in nxt.avoid_gpus
    assert nxt.recovered
    assert nxt.try_number == 2
    assert nxt.key == "job7#2"
    assert not nxt.exclusive  # not the last allowed retry yet
    assert "retry 1 of 2" in plan.reason


def test_retry_never_asks_for_less_than_the_estimate() -> None:
    plan = plan_recovery(first_try(30000), OOM, oom_retries_done=0, peak_mib=1000, crashed_gpus=(), now=0.0)
    assert isinstance(plan, RetryPlan)
    assert plan.request.memory.mib >= 30000


def test_missing_peak_uses_the_estimate() -> None:
    plan = plan_recovery(first_try(8000), OOM, oom_retries_done=0, peak_mib=None, crashed_gpus=(), now=0.0)
    assert isinstance(plan, RetryPlan)
    assert plan.request.memory.mib == 10240  # 8000 * 1.25


def test_last_retry_is_exclusive_and_accumulates_avoided_gpus() -> None:
    first = plan_recovery(first_try(), OOM, oom_retries_done=0, peak_mib=9000, crashed_gpus=("GPU-0",), now=0.0)
    assert isinstance(first, RetryPlan)
    second = plan_recovery(first.request, OOM, oom_retries_done=1, peak_mib=15000, crashed_gpus=("GPU-1",), now=9.0)
    assert isinstance(second, RetryPlan)
    assert second.request.exclusive
    assert second.request.needs_idle_gpu
    assert second.request.avoid_gpus == frozenset({"GPU-0", "GPU-1"})
    assert second.request.key == "job7#3"
    assert second.request.memory.mib >= 15000
    assert "idle GPU" in second.reason


def test_exclusive_last_can_be_switched_off() -> None:
    settings = RecoverySettings(exclusive_last=False)
    plan = plan_recovery(
        first_try(), OOM, oom_retries_done=1, peak_mib=9000, crashed_gpus=(), now=0.0, settings=settings
    )
    assert isinstance(plan, RetryPlan)
    assert not plan.request.exclusive


def test_gives_up_after_the_bound_with_advice() -> None:
    give_up = plan_recovery(first_try(), OOM, oom_retries_done=2, peak_mib=20480, crashed_gpus=(), now=0.0)
    assert isinstance(give_up, GiveUp)
    assert "3 tries" in give_up.reason
    assert "the last at 20480 MiB" in give_up.reason  # the memory reached
    assert "25GiB" in give_up.reason  # 20 GiB * 1.25 to declare
    assert "executor_config" in give_up.reason


def test_bound_is_configurable() -> None:
    settings = RecoverySettings(max_oom_retries=4)
    plan = plan_recovery(
        first_try(), OOM, oom_retries_done=2, peak_mib=9000, crashed_gpus=(), now=0.0, settings=settings
    )
    assert isinstance(plan, RetryPlan)
    assert not plan.request.exclusive
    done = plan_recovery(
        first_try(), OOM, oom_retries_done=4, peak_mib=9000, crashed_gpus=(), now=0.0, settings=settings
    )
    assert isinstance(done, GiveUp)


@pytest.mark.parametrize("kind", [FailureKind.OTHER, FailureKind.KILLED])
def test_non_oom_gives_up(kind: FailureKind) -> None:
    result = plan_recovery(first_try(), Failure(kind, "boom"), oom_retries_done=0, peak_mib=1, crashed_gpus=(), now=0.0)
    assert isinstance(result, GiveUp)
    assert "not a CUDA OOM" in result.reason
    assert kind.value in result.reason


def test_probable_oom_is_retried() -> None:
    failure = Failure(FailureKind.PROBABLE_OOM, "cudnn")
    assert isinstance(
        plan_recovery(first_try(), failure, oom_retries_done=0, peak_mib=1, crashed_gpus=(), now=0.0), RetryPlan
    )


@given(
    estimate=st.integers(min_value=1, max_value=100_000),
    peak=st.integers(min_value=0, max_value=150_000),
    done=st.integers(min_value=0, max_value=1),
)
def test_next_need_covers_peak_reached(estimate: int, peak: int, done: int) -> None:
    plan = plan_recovery(first_try(estimate), OOM, oom_retries_done=done, peak_mib=peak, crashed_gpus=("G",), now=0.0)
    assert isinstance(plan, RetryPlan)
    assert plan.request.memory.mib >= max(peak, estimate)
    assert plan.request.memory.mib % 256 == 0


def test_paper_recovery_is_exclusive_and_unbounded() -> None:
    req = first_try()
    for _ in range(5):
        req = paper_recovery(req).request
    assert req.try_number == 6
    assert req.key == "job7#6"
    assert req.exclusive and req.recovered
    assert req.memory.mib == 8000
