"""A retry after a full-GPU OOM is sized from what the try held plus what it asked for (issue 41).

An executor with its real parts (simulated GPUs, placer, SQLite store): a filler holds most of the
one GPU, a try that holds 5000 MiB then asks 13003 MiB more finds the GPU full and crashes.  Its
next try is planned for at least 18003 MiB (plus the headroom), not for the 5000 MiB it held: sized
from what it held, it would crash the same way (in the issue, try 2 was planned at 6400 MiB).
"""

from __future__ import annotations

from collections.abc import Callable

from executor_helpers import make_workload, run_until, submit

from carma_airflow.executor import CarmaExecutor
from carma_airflow.store.records import TryOutcome

FILLER = {"peak_mib": 26000, "seconds": 30, "ramp_s": 0.1}
GROWER = {"peak_mib": 5000, "seconds": 1.0, "ramp_s": 0.1, "grow_to_mib": 18003, "grow_after_s": 0.2}


def test_a_retry_after_a_full_gpu_oom_asks_for_what_the_try_held_plus_asked(
    executor_factory: Callable[..., CarmaExecutor],
) -> None:
    ex = executor_factory(
        gpus="1xA100-40GB",
        behaviour={"filler": {"train": FILLER}, "grower": {"train": GROWER}},
        isolation="none",  # unfenced: the growth meets a full GPU, not a cap
    )
    filler = make_workload("filler", config={"memory": "26000MiB"})
    submit(ex, filler)
    run_until(ex, lambda: filler.key in ex.active)
    grower = make_workload("grower", config={"memory": "5000MiB"})
    submit(ex, grower)
    run_until(ex, lambda: grower.key in ex.active, timeout=30)
    run_until(ex, lambda: grower.key not in ex.active, timeout=30)
    (first,) = [p for p in ex.store.latest_for("dag", "grower") if p.try_number == 1]
    assert first.outcome is TryOutcome.OOM
    # held + asked as the message words them (4.88 GiB + 12.70 GiB: 18002 MiB), not the 5000 held
    assert first.peak_mib is not None and first.peak_mib >= 5000 + 13003 - 8
    submit(ex, make_workload("grower", try_number=2, config={"memory": "5000MiB"}))
    retry = next(t.request for t in [*ex.waiting.values(), *ex.active.values()] if t.ti.task_id == "grower")
    assert retry is not None and retry.recovered
    assert retry.memory.mib >= 5000 + 13003  # and the placer's headroom on top (add_headroom)
    assert retry.memory.add_headroom
