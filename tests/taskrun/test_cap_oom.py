"""A try classifies its own OOM with its fence and what its framework holds (taskrun/cap_oom.py):
the retry policy and the listener pass what the try's process knows to core/recovery.py."""

from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from carma_airflow.core.fencing import IsolationMode
from carma_airflow.core.oom_figures import KnownFence
from carma_airflow.core.recovery import FailureKind
from carma_airflow.taskrun.cap_oom import classify_here, fence_in_force, framework_held_mib
from carma_airflow.taskrun.retry import CudaOomRetryPolicy

GPU = "GPU-11111111-2222-3333-4444-555555555555"
DRIVER_ENV = {
    "CUDA_VISIBLE_DEVICES": GPU,
    "CARMA_ISOLATION": "driver",
    "CARMA_MEMORY_PROMISE_MIB": "10240",
    "CARMA_MEMORY_CAP_MIB": "10240",
    "CARMA_CUDA_CONTEXT_MIB": "500",
}
TF_OOM = (
    "OOM when allocating tensor with shape[256,1024,1024] and type float on /job:localhost/replica:0/task:0/"
    "device:GPU:0 by allocator GPU_0_bfc"
)  # 1024 MiB asked


class ResourceExhaustedError(RuntimeError):
    """TensorFlow's OOM, by name (the classification keys on it)."""


def fake_tensorflow(held_mib: int) -> SimpleNamespace:
    info = {"current": held_mib << 20, "peak": held_mib << 20}
    return SimpleNamespace(config=SimpleNamespace(experimental=SimpleNamespace(get_memory_info=lambda d: info)))


def test_the_fence_in_force_is_the_environments_or_the_live_cap_files(tmp_path: Path) -> None:
    assert fence_in_force({}) is None  # unfenced, or outside CarmaExecutor
    assert fence_in_force(DRIVER_ENV) == KnownFence(IsolationMode.DRIVER, (10240,), (500,))
    cap_file = tmp_path / "a.cap"
    cap_file.write_text("15860")  # the executor re-set it: PyTorch's cap, the context taken out
    live = {**DRIVER_ENV, "CARMA_MEMORY_CAP_FILE": str(cap_file)}
    assert fence_in_force(live) == KnownFence(IsolationMode.DRIVER, (16360,), (500,))  # the leaf's limit: + context
    framework = {**live, "CARMA_ISOLATION": "framework", "CARMA_MEMORY_CAP_MIB": "9740"}
    assert fence_in_force(framework) == KnownFence(IsolationMode.FRAMEWORK, (9740,), (500,))  # TF/JAX: set once
    simulated = {**framework, "CARMA_SIM_LEDGER": str(tmp_path / "ledger.json")}
    assert fence_in_force(simulated) == KnownFence(IsolationMode.FRAMEWORK, (15860,), (500,))  # the ledger follows
    mps = {**simulated, "CARMA_ISOLATION": "mps", "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": "0=12000M"}
    assert fence_in_force(mps) == KnownFence(IsolationMode.MPS, (12000,), (500,))  # beneath the pinned limit


def test_what_the_framework_holds_is_read_from_the_loaded_one(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("torch", "tensorflow", "jax"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    assert framework_held_mib() is None
    monkeypatch.setitem(sys.modules, "tensorflow", fake_tensorflow(9000))
    assert framework_held_mib() == 9000


def test_a_tensorflow_try_stopped_by_its_driver_limit_is_retried_past_its_cap(monkeypatch: pytest.MonkeyPatch) -> None:
    """Its message says only what it asked (1 GiB); what it held (9,000 MiB, TensorFlow's own
    counter) and the CUDA context (500 MiB) are past its 10,240 MiB limit with it."""
    for name, value in {**DRIVER_ENV, "CARMA_PRIOR_OOM_TRIES": "0"}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setitem(sys.modules, "tensorflow", fake_tensorflow(9000))
    failure = classify_here("ResourceExhaustedError", TF_OOM)
    assert failure.kind is FailureKind.CAP_OOM
    assert "held 9500 MiB and asked 1024 MiB, past its driver limit (10240 MiB)" in failure.evidence
    decision = CudaOomRetryPolicy(author_retries=0, oom_retries=2).evaluate(ResourceExhaustedError(TF_OOM), 1, 1)
    assert "CUDA out of memory past its cap" in str(decision.reason) and "with a larger cap" in str(decision.reason)
    monkeypatch.setitem(sys.modules, "tensorflow", fake_tensorflow(2000))  # far within: the GPU was full
    decision = CudaOomRetryPolicy(author_retries=0, oom_retries=2).evaluate(ResourceExhaustedError(TF_OOM), 1, 1)
    assert "on a GPU with more free memory" in str(decision.reason) and "the GPU was full" in str(decision.reason)
