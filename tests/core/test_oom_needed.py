"""What a crash says it needed (issue 41): a retry after a full-GPU OOM is sized from what the try
held plus what it asked for, not from what it held."""

from __future__ import annotations

import pytest
from helpers import request

from carma_airflow.core import Failure, FailureKind, RetryPlan, plan_recovery
from carma_airflow.core.oom_figures import needed_mib, oom_figures
from carma_airflow.core.recovery import asked_mib, oom_reached

# a try that held 4998 MiB and asked 13005 MiB more on a full GPU, as PyTorch 2.x words it
FULL_GPU = (
    "CUDA out of memory. Tried to allocate 12.70 GiB. GPU 0 has a total capacity of 40.00 GiB of which 3.10 GiB "
    "is free. Including non-PyTorch memory, this process has 4.88 GiB memory in use. Of the allocated memory "
    "4.50 GiB is allocated by PyTorch, and 100.00 MiB is reserved by PyTorch but unallocated."
)
# the same, as PyTorch before 2.1 words it (no "this process has")
OLD_TORCH = (
    "CUDA out of memory. Tried to allocate 12.70 GiB (GPU 0; 39.59 GiB total capacity; 4.50 GiB already "
    "allocated; 3.10 GiB free; 4.88 GiB reserved in total by PyTorch)"
)
GIB = 1024


@pytest.mark.parametrize("message", [FULL_GPU, OLD_TORCH], ids=["pytorch-2", "pytorch-1"])
def test_a_full_gpu_oom_says_it_needed_what_it_held_plus_what_it_asked(message: str) -> None:
    needed = needed_mib(message)
    assert needed == pytest.approx((4.88 + 12.70) * GIB, abs=1)
    assert asked_mib(message) == needed


def test_the_old_message_says_what_was_free_too() -> None:
    assert oom_figures(OLD_TORCH).free == pytest.approx(3.10 * GIB)


def test_what_the_caller_measured_stands_in_where_the_message_does_not_say_what_it_held() -> None:
    message = "CUDA out of memory. Tried to allocate 13005.00 MiB"
    assert needed_mib(message) is None
    assert needed_mib(message, held_mib=4998) == 4998 + 13005
    assert oom_reached(4998, message) == 18003
    assert oom_reached(4998, "CUDA out of memory") == 4998  # nothing asked said: what it held
    assert oom_reached(None, None) is None
    assert oom_reached(30000, FULL_GPU) == 30000  # it measured more than the message says: that


def test_a_retry_after_a_full_gpu_oom_is_sized_from_held_plus_asked() -> None:
    """Issue 41: try 1 held 4998 MiB and asked 13005 MiB on a full GPU; try 2 was planned at 6400 MiB
    (its 4998 held, grown) and crashed the same way.  Sized from held + asked it asks at least 18 GiB
    free beside its headroom."""
    message = "CUDA out of memory. Tried to allocate 13005.00 MiB. this process has 4998.00 MiB memory in use."
    first = request("job#1", 5120, try_number=1)
    reached = oom_reached(4998, message)
    plan = plan_recovery(
        first,
        Failure(FailureKind.CUDA_OOM, "held 4998 MiB and asked 13005 MiB: the GPU was full"),
        oom_retries_done=0,
        peak_mib=reached,
        crashed_gpus=("G0",),
        now=0.0,
    )
    assert isinstance(plan, RetryPlan)
    assert plan.request.memory.mib >= 4998 + 13005 >= 17 * GIB
    assert plan.request.memory.filter_mib(2048) >= 4998 + 13005 + 2048  # and the placer's headroom on top
    assert not plan.request.exclusive  # an ordinary retry, not yet the last one's idle GPU
