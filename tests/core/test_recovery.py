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
from carma_airflow.core.fencing import IsolationMode
from carma_airflow.core.oom_figures import KnownFence

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


# -- past its cap or a full GPU: by figures against the try's fence --------------------------------


def torch_oom(tried: str, free: str, in_use: str, allowed: str, allocated: str, unallocated: str) -> str:
    """A PyTorch 2.x OOM with a fraction set, as its caching allocator words it."""
    return (
        f"CUDA out of memory. Tried to allocate {tried}. GPU 0 has a total capacity of 39.49 GiB of which {free} "
        f"is free. Including non-PyTorch memory, this process has {in_use} memory in use. {allowed} allowed; Of the "
        f"allocated memory {allocated} is allocated by PyTorch, and {unallocated} is reserved by PyTorch but "
        "unallocated. If reserved but unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF="
        "expandable_segments:True to avoid fragmentation."
    )


TF_OOM = (
    "OOM when allocating tensor with shape[256,1024,1024] and type float on /job:localhost/replica:0/task:0/"
    "device:GPU:0 by allocator GPU_0_bfc"
)  # 1024 MiB asked
JAX_OOM = "RESOURCE_EXHAUSTED: Out of memory while trying to allocate 4294967296 bytes."  # 4096 MiB asked
DRIVER = KnownFence(IsolationMode.DRIVER, (10240,), (500,))
MPS = KnownFence(IsolationMode.MPS, (9740,), (500,))


def test_a_pytorch_oom_within_its_fraction_is_a_full_gpu_though_it_says_allowed() -> None:
    """PyTorch writes "allowed" in every OOM once a fraction is set: what it held (6344 MiB) and
    asked (2.00 GiB) fit its 9.51 GiB, so its cudaMalloc failed: the GPU was full."""
    message = torch_oom("2.00 GiB", "1.06 GiB", "6.70 GiB", "9.51 GiB", "6.00 GiB", "200.00 MiB")
    failure = classify_failure("OutOfMemoryError", message)
    assert failure.kind is FailureKind.CUDA_OOM and failure.is_oom
    assert failure.evidence == (
        "exception type OutOfMemoryError, held 6344 MiB and asked 2048 MiB, within PyTorch's cap at the OOM "
        "(9739 MiB): the GPU was full; 1086 MiB free on the GPU"
    )


def test_a_pytorch_oom_past_its_fraction_is_a_cap_oom_whatever_the_gpu_had_free() -> None:
    message = torch_oom("2.00 GiB", "20.00 GiB", "9.00 GiB", "9.51 GiB", "8.00 GiB", "500.00 MiB")
    failure = classify_failure("OutOfMemoryError", message)
    assert failure.kind is FailureKind.CAP_OOM
    assert "past its cap: held 8692 MiB and asked 2048 MiB, past PyTorch's cap at the OOM (9739 MiB)" in (
        failure.evidence
    )


def test_a_driver_limit_counts_the_context_that_pytorchs_fraction_does_not_see() -> None:
    """Under ``driver`` PyTorch's fraction is the cap itself (10 GiB) and the cgroup counts the
    CUDA context too: 9.25 GiB reserved + 0.75 GiB asked fit the fraction, not the limit."""
    message = torch_oom("768.00 MiB", "20.00 GiB", "9.75 GiB", "10.00 GiB", "9.00 GiB", "256.00 MiB")
    assert classify_failure("OutOfMemoryError", message).kind is FailureKind.CUDA_OOM  # the fraction alone
    failure = classify_failure("OutOfMemoryError", message, fence=DRIVER)
    assert failure.kind is FailureKind.CAP_OOM and "past its driver limit (10240 MiB)" in failure.evidence


@pytest.mark.parametrize(("message", "fence"), [(TF_OOM, DRIVER), (JAX_OOM, MPS)], ids=["tensorflow", "jax"])
def test_a_tensorflow_or_jax_try_stopped_by_its_limit_is_past_its_cap(message: str, fence: KnownFence) -> None:
    """Their messages say what they asked, not what they held: the caller's measure of it
    (the framework's own counters) against the try's fence decides."""
    assert classify_failure("ResourceExhaustedError", message).kind is FailureKind.CUDA_OOM  # nothing known
    failure = classify_failure("ResourceExhaustedError", message, fence=fence, held_mib=9000)
    assert failure.kind is FailureKind.CAP_OOM and failure.past_cap
    assert f"past its {fence.mode.value} " in failure.evidence
    full = classify_failure("ResourceExhaustedError", message, fence=fence, held_mib=2000)
    assert full.kind is FailureKind.CUDA_OOM and "the GPU was full" in full.evidence


def test_a_fenced_oom_whose_figures_do_not_decide_says_so() -> None:
    failure = classify_failure("ResourceExhaustedError", TF_OOM, fence=DRIVER)  # what it held: not known
    assert failure.kind is FailureKind.CUDA_OOM
    assert "told as a full GPU: the message does not say what it held against its driver cap of 10240 MiB" in (
        failure.evidence
    )
    asked_past = JAX_OOM.replace("4294967296", str(12 << 30))  # 12 GiB asked: past the cap whatever it held
    assert classify_failure("XlaRuntimeError", asked_past, fence=MPS).kind is FailureKind.CAP_OOM


def test_the_retry_is_planned_the_same_past_its_cap_or_on_a_full_gpu() -> None:
    plans = [
        plan_recovery(first_try(), Failure(kind, "x"), oom_retries_done=0, peak_mib=10000, crashed_gpus=("G",), now=0)
        for kind in (FailureKind.CAP_OOM, FailureKind.CUDA_OOM)
    ]
    assert isinstance(plans[0], RetryPlan) and isinstance(plans[1], RetryPlan)
    assert plans[0].request == plans[1].request
    assert "past its cap" in plans[0].reason and "past its cap" not in plans[1].reason


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


def test_a_whole_gpu_try_is_retried_at_what_it_reached_not_the_estimators_sentinel() -> None:
    """A try whose estimator gave up asked the sentinel (40,000 MiB), not memory: its retry asks what
    it reached, grown, and is bounded by the largest GPU like any other.  Sized from the sentinel, a
    pair that reached 27.7 GiB on a 23 GiB L4 asked 40,192 MiB, which no V100-32GB holds, and the
    bound (30,208 MiB there, below the sentinel) did not apply: the retry never fitted."""
    gave_up = request("job7#1", 40000, gpus=2, whole_gpu=True, try_number=1)
    plan = plan_recovery(gave_up, OOM, oom_retries_done=0, peak_mib=28356, crashed_gpus=("G",), now=0.0)
    assert isinstance(plan, RetryPlan)
    assert plan.request.memory.mib == 35584  # 28356 * 1.25 = 35445, rounded up to 256
    assert not plan.request.memory.whole_gpu and plan.request.gpus == 2
    bounded = RecoverySettings(max_request_mib=32768 - 512 - 2048)  # a V100-32GB's
    plan = plan_recovery(
        gave_up, OOM, oom_retries_done=0, peak_mib=28356, crashed_gpus=("G",), now=0.0, settings=bounded
    )
    assert isinstance(plan, RetryPlan)
    assert (plan.request.memory.mib, plan.request.exclusive) == (30208, True)  # a GPU to itself


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
