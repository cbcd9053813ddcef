"""A try's progress reports teach the executor its slowdown beside each set of co-tenants and its run
alone (executor/learning/telemetry.py, learning.py; issue 41: the simulator's tries report progress,
the executor's did not read it)."""

from __future__ import annotations

from executor_helpers import running_try

from carma_airflow.core.activity import ActivitySample, hinted_activity
from carma_airflow.core.gpu import Tenant
from carma_airflow.core.interference import Segment
from carma_airflow.executor.learning import Attribution, Learned, Seen, learn_from_success
from carma_airflow.executor.learning.telemetry import MIN_STRETCH_S, ProgressStretch
from carma_airflow.executor.tries import Try
from carma_airflow.monitor.base import GpuSample
from carma_airflow.taskrun.progress import ProgressReport


class _Handle:
    pid = 100


def _sample(at: float) -> GpuSample:
    return GpuSample("G0", 0, "A100-40GB", "h", 40960, 1000, 39960, at, smact=0.5)


B = Tenant("b", "dag.b[2]", 1000, 0.0, activity=hinted_activity(0.7))


def _run(reports: list[tuple[float, float, bool]], total: float | None = 100.0) -> Seen:
    """A try sampled once per report ``(at, done, beside b)``: its progress read at each sample."""
    attempt = running_try("a", 0.0)
    attempt.handle = _Handle()  # type: ignore[assignment]
    attempt.gpu_uuids = ("G0",)
    now: dict[str, ProgressReport] = {}
    seen = Attribution(session=lambda pid: None, progress=lambda t: now.get(t.rkey))
    for at, done, shared in reports:
        now[attempt.rkey] = ProgressReport(done, total, at)
        seen.observe({"G0": _sample(at)}, [attempt], lambda u, s=shared: [B] if s else [])  # type: ignore[misc]
    return seen.conclude(attempt.rkey)


def test_its_speed_alone_over_its_speed_beside_co_tenants_is_its_slowdown_there() -> None:
    # 20 s alone at 1 unit/s, then 20 s beside b at 0.5 unit/s
    reports = [(float(t), float(t), False) for t in range(0, 21, 5)]
    reports += [(20.0 + t, 20.0 + t / 2, True) for t in range(5, 21, 5)]
    got = _run(reports)
    assert got.reported
    assert got.stretches == (ProgressStretch(2.0, (0.7,), ("dag.b",)),)
    # 40 s for 30 units of work, 30 s alone: b cost it 10 s
    assert got.slowed_s == 10.0
    assert _run(reports, total=None) == got  # a total is not needed


def test_too_short_a_stretch_or_one_whose_co_tenants_changed_between_reports_teaches_nothing() -> None:
    short = [(0.0, 0.0, False), (MIN_STRETCH_S - 1, MIN_STRETCH_S - 1, False), (30.0, 20.0, True), (40.0, 25.0, True)]
    assert _run(short).stretches == () and _run(short).slowed_s is None  # alone for 9 s only
    # the co-tenants changed between each pair of reports: no stretch is timed
    flip = [(float(t), float(t), t % 10 == 5) for t in range(0, 60, 5)]
    assert _run(flip).stretches == () and _run(flip).reported


def test_a_try_without_reports_is_learned_as_before() -> None:
    attempt: Try = running_try("a", 0.0)
    attempt.handle = _Handle()  # type: ignore[assignment]
    attempt.gpu_uuids = ("G0",)
    seen = Attribution(session=lambda pid: None, progress=lambda t: None)
    for at in range(3):
        seen.observe({"G0": _sample(float(at))}, [attempt], lambda u: [B])
    got = seen.conclude(attempt.rkey)
    assert not got.reported and got.stretches == () and got.segments


def test_the_executor_learns_the_slowdown_and_the_run_alone_from_the_reports() -> None:
    learned = Learned()
    before = learned.model.fit_for("A100-40GB").count
    seen = Seen(
        ActivitySample(0.5, "process"),
        False,
        (Segment(0.5, ()), Segment(0.5, (0.7,), ("dag.b",))),
        ("dag.b",),
        (ProgressStretch(2.0, (0.7,), ("dag.b",)),),
        40.0,
        True,
    )
    writes = learn_from_success(learned, running_try("a", 0.0), seen, 140.0, "A100-40GB")
    # no solo run of dag.a was needed: its own progress gave both
    assert learned.model.fit_for("A100-40GB").count == before + 1
    (obs,) = learned.model.fit_for("A100-40GB").observations[-1:]
    assert obs.stretch == 2.0 and obs.task == "dag.a" and obs.segments[0].co_tasks == ("dag.b",)
    assert learned.solo_seconds("dag", "a") == 100.0  # its 140 s less the 40 s its co-tenant cost it
    assert any(type(w).__name__ == "SaveDocument" for w in writes)


def test_reports_that_time_no_shared_stretch_fall_back_to_the_whole_run_against_its_run_alone() -> None:
    """Alone long enough to time, beside b too briefly: its run alone from its reports, and one
    observation of the whole try against it (the simulator's fallback, sim/learning.py)."""
    learned = Learned()
    before = learned.model.fit_for("A100-40GB").count
    segments = (Segment(0.8, ()), Segment(0.2, (0.7,), ("dag.b",)))
    seen = Seen(ActivitySample(0.5, "process"), False, segments, ("dag.b",), (), 10.0, True)
    learn_from_success(learned, running_try("a", 0.0), seen, 110.0, "A100-40GB")
    assert learned.solo_seconds("dag", "a") == 100.0
    fit = learned.model.fit_for("A100-40GB")
    assert fit.count == before + 1 and fit.observations[-1].stretch == 1.1
