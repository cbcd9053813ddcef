"""The simulator learns a try's activity as the executor does (issue 41): from what the monitor
reads while the try is alone; a try that has co-tenants before it was sampled alone adds nothing
to a type read alone, so what such a type learns does not depend on whom its tries ran beside.  A
type whose tries only ever ran shared learns their reading beside their co-tenants (low: they held
the SMs less), as the executor's telemetry keeps it, marked shared (round 48)."""

from __future__ import annotations

import pytest

from carma_airflow.core import parse_gpu_list
from carma_airflow.core.activity import ActivityEstimate
from carma_airflow.sim import Arrival, SimConfig, Simulation
from carma_airflow.sim.learning import Knowledge
from carma_airflow.sim.workload import TaskType

TASK = TaskType("resnet", "resnet.py", "cnn", 64, 1, 8000, None, None, None, 600.0)


def _tell(key: str, est: ActivityEstimate) -> None:
    return None


def test_a_task_type_alone_then_beside_others_learns_the_same_activity() -> None:
    know = Knowledge(noise=0.0, sample_s=10.0)
    know.alone("a#1", TASK, 0.5, since=0.0, ramped_at=0.0)
    know.tick(15.0, _tell)  # alone for 15 s: sampled
    alone = know.activities["resnet"].sm_activity
    assert alone == 0.5
    know.alone("b#1", TASK, 0.5, since=100.0, ramped_at=100.0)
    know.shared("b#1", 103.0, _tell)  # co-tenants after 3 s alone: no sample of it
    know.tick(200.0, _tell)
    assert abs(know.activities["resnet"].sm_activity - alone) <= 0.05
    assert know.activities["resnet"].count == 1


LONG = TaskType("bert", "bert.py", "transformer", 32, 1, 6000, None, None, None, 900.0)
SHORT = TaskType("small", "small.py", "cnn", 32, 1, 4000, None, None, None, 300.0)


def _short_learned(shared_readings: bool, *arrivals: Arrival) -> tuple[Simulation, float | None]:
    cfg = SimConfig(gpus=tuple(parse_gpu_list("1xA100-40GB")), shared_readings=shared_readings, telemetry_noise=0.0)
    sim = Simulation(cfg)
    result = sim.run(list(arrivals))
    assert all(t.outcome == "success" for t in result.tasks)
    est = sim.know.activities.get("small")
    return sim, None if est is None else est.sm_activity


@pytest.mark.parametrize("readings", [True, False])
def test_a_type_only_ever_shared_learns_its_reading_beside_others_as_the_executor_does(readings: bool) -> None:
    # one GPU, both at once: they share from the first second, and the short one ends before it is alone
    both = (Arrival(1, 0.0, LONG, declared_mib=8000), Arrival(2, 0.0, SHORT, declared_mib=6000))
    sim, shared = _short_learned(readings, *both)
    if not readings:  # the simulator before round 48: such a type learned nothing
        assert shared is None
        return
    est = sim.know.activities["small"]
    assert est.count == 1 and "shared" in est.source
    _, alone = _short_learned(readings, Arrival(1, 0.0, SHORT, declared_mib=6000))
    assert shared is not None and alone is not None
    assert shared < 0.95 * alone  # it held the SMs less beside its co-tenant than alone
    assert "shared" not in sim.know.activities["bert"].source  # the long one was read alone once it was


def test_a_try_whose_progress_timed_no_shared_segment_is_learned_from_its_whole_run() -> None:
    """Round 49, as the executor (executor/learning/learning.py): a reporting try whose shared
    segments were too short to time is observed against its type's solo runs, not dropped."""
    from carma_airflow.core.activity import hinted_activity
    from carma_airflow.sim.learning import TrySegment

    know = Knowledge(noise=0.0, sample_s=10.0)
    know.activities["resnet"] = hinted_activity(0.5)
    know.activities["bert"] = hinted_activity(0.7)
    know._solo_runs[("resnet", "A100-40GB")] = [100.0]  # its type's run alone there, measured earlier
    segments = [TrySegment(5.0, 5.0, ()), TrySegment(130.0, 95.0, ("bert",))]
    know.ended("r#2", TASK, 135.0, segments, "A100-40GB")  # alone 5 s only: no stretch timed
    (obs,) = know._pending["A100-40GB"]
    assert obs.stretch == pytest.approx(1.35) and obs.task == "resnet"
