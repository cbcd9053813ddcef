"""The retry policy tells an OOM past the try's cap from a full GPU (taskrun/retry.py)."""

from __future__ import annotations

import pytest

from carma_airflow.monitor.ledger import SimulatedCudaOOM
from carma_airflow.taskrun.retry import CudaOomRetryPolicy


def test_past_its_cap_retries_with_a_larger_cap(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CARMA_PRIOR_OOM_TRIES", "0")
    policy = CudaOomRetryPolicy(author_retries=0, oom_retries=2)
    capped = SimulatedCudaOOM("CUDA out of memory. Tried to allocate 22.00 GiB. 10.00 GiB allowed; past its cap")
    decision = policy.evaluate(capped, try_number=1, max_tries=1)
    assert "past its cap" in str(decision.reason) and "with a larger cap" in str(decision.reason)
    full = SimulatedCudaOOM("CUDA out of memory. Tried to allocate 22.00 GiB. GPU 0 has ... 1.00 GiB is free.")
    decision = policy.evaluate(full, try_number=1, max_tries=1)
    assert "on a GPU with more free memory" in str(decision.reason)
