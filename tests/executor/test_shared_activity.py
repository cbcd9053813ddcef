"""Activity learned while shared reads low (issue 41): a task's learned activity must not depend on
whom it ran beside.  A try's own per-process readings while it shared its GPUs are kept apart from
those while it was alone (executor/learning/telemetry.py); a task's tries that never shared win over its
shared ones (core/activity.py); the store keeps which were shared (``co_tasks``), so a restarted
executor learns the same."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from executor_helpers import make_workload, run_until, submit

from carma_airflow.core.activity import ActivitySample, estimate_activity, hinted_activity
from carma_airflow.core.gpu import Tenant
from carma_airflow.executor import CarmaExecutor
from carma_airflow.executor.learning import Attribution, Learned
from carma_airflow.executor.tries import Try, TryState
from carma_airflow.monitor.base import GpuSample, ProcessUsage
from carma_airflow.store import Store


class _Handle:
    def __init__(self, pid: int) -> None:
        self.pid = pid


def _try(rkey: str, pid: int, gpu: str) -> Try:
    return Try(key=rkey, rkey=rkey, ti=None, state=TryState.RUNNING, gpu_uuids=(gpu,), handle=_Handle(pid))  # type: ignore[arg-type]


def _sample(at: float, own: float) -> GpuSample:
    procs = (ProcessUsage(101, 500, sm_util=own),)
    return GpuSample("G0", 0, "A100-40GB", "h", 40960, 1000, 39960, at, smact=0.9, processes=procs)


SESSIONS = {101: 100}
HEAVY = Tenant("b", "dag.b", 1000, 0.0, activity=hinted_activity(0.5))


def test_a_tries_readings_while_it_shared_do_not_count_where_it_was_also_alone() -> None:
    seen = Attribution(session=SESSIONS.get)
    a = _try("a", 100, "G0")
    for i in range(3):
        seen.observe({"G0": _sample(float(i), 0.5)}, [a], lambda u: [])  # alone: 0.50
    for i in range(3, 9):
        seen.observe({"G0": _sample(float(i), 0.28)}, [a], lambda u: [HEAVY])  # beside others: 0.28
    got = seen.conclude("a")
    assert got.activity is not None and got.activity.sm_activity == 0.5  # not (3 x 0.5 + 6 x 0.28) / 9
    assert got.activity.shared and not got.alone and got.co_tasks == ("dag.b",)


def test_a_try_never_alone_gives_its_shared_reading_marked_shared() -> None:
    seen = Attribution(session=SESSIONS.get)
    a = _try("a", 100, "G0")
    for i in range(6):
        seen.observe({"G0": _sample(float(i), 0.28)}, [a], lambda u: [HEAVY])
    assert seen.so_far("a", 5) == ActivitySample(0.28, "process", True)
    got = seen.conclude("a")
    assert got.activity == ActivitySample(0.28, "process", True)


def test_a_task_run_alone_then_beside_others_learns_the_same_activity() -> None:
    alone = estimate_activity([ActivitySample(0.5, "process")])
    then = estimate_activity([ActivitySample(0.5, "process"), ActivitySample(0.28, "process", True)])
    assert abs(then.sm_activity - alone.sm_activity) <= 0.05
    assert then.count == 1 and "1 shared left out" in then.source
    # only ever seen shared: that is what it learns from (the best there is)
    assert estimate_activity([ActivitySample(0.28, "process", True)]).sm_activity == 0.28


def test_a_restarted_executor_knows_which_tries_shared(tmp_path: Path) -> None:
    store = Store(f"sqlite:///{tmp_path / 'carma.db'}")
    store.migrate()
    store.add_activity("dag", "t", 0.5, "process", 1_900_000_000.0, co_tasks=[])
    store.add_activity("dag", "t", 0.28, "process", 1_900_000_100.0, co_tasks=["dag.b", "dag.c"])
    learned = Learned()
    learned.load(store)
    store.close()
    assert learned.activity("dag", "t").sm_activity == 0.5


def test_in_the_executor_a_task_run_alone_then_beside_others_learns_the_same_activity(
    executor_factory: Callable[..., CarmaExecutor],
) -> None:
    """Issue 41's target, on simulated GPUs: the same workload alone, then beside two others on
    the one GPU (where its own reading is about 0.28), learns the same activity within 0.05."""
    train = {"peak_mib": 2000, "seconds": 1.5, "activity": 0.5, "ramp_s": 0.1}
    other = {"peak_mib": 2000, "seconds": 4.0, "activity": 0.5, "ramp_s": 0.1}
    ex = executor_factory(
        gpus="1xA100-40GB", behaviour={"t": {"train": train}, "o1": {"train": other}, "o2": {"train": other}}
    )
    submit(ex, make_workload("t", config={"memory": "3GiB"}, run_id="alone"))
    run_until(ex, lambda: not ex.active and not ex.waiting, timeout=30)
    first = ex.flow.learned.activity("dag", "t")
    assert first.count == 1 and abs(first.sm_activity - 0.5) <= 0.05
    submit(
        ex,
        make_workload("o1", config={"memory": "3GiB"}, run_id="shared"),
        make_workload("o2", config={"memory": "3GiB"}, run_id="shared"),
        make_workload("t", config={"memory": "3GiB"}, run_id="shared"),
    )
    run_until(ex, lambda: not ex.active and not ex.waiting, timeout=60)
    rows = ex.flow.store.activity_records("dag", "t")
    assert [r.run_id for r in rows] == ["alone", "shared"] and rows[1].co_tasks  # it did run beside them
    assert rows[1].sm_activity < first.sm_activity - 0.1  # what it read there: low
    assert abs(ex.flow.learned.activity("dag", "t").sm_activity - first.sm_activity) <= 0.05
