"""How an ended try is told: an OOM at its own cap says so, a full GPU says so (issue 18)."""

from __future__ import annotations

import pytest

from carma_airflow.core.recovery import RecoverySettings
from carma_airflow.executor.ending import conclude
from carma_airflow.executor.launch import Ended
from carma_airflow.executor.tries import Try, TryState
from carma_airflow.store.records import TryOutcome
from carma_airflow.taskrun.outcome import TryResult


@pytest.mark.parametrize(
    ("kind", "says"),
    [("cap-oom", "past its cap at 30000 MiB on G0; retried with a larger cap"), ("cuda-oom", "more free memory")],
)
def test_an_oom_past_its_cap_is_told_apart_from_a_full_gpu(kind: str, says: str) -> None:
    attempt = Try(None, "d/t/r/-1#1", None, TryState.RUNNING, gpu_uuids=("G0",))
    result = TryResult("up_for_retry", kind, "OutOfMemoryError", "CUDA out of memory", peak_mib=30000)  # type: ignore[arg-type]
    end = conclude(attempt, Ended(0, result), RecoverySettings(max_oom_retries=2))
    assert end.outcome is TryOutcome.OOM and says in end.summary
