"""The simulator learns a try's activity as the executor does (issue 41): from what the monitor
reads while the try is alone; a try that has co-tenants before it was sampled alone teaches none,
so what a task type learns does not depend on whom its tries ran beside."""

from __future__ import annotations

from carma_airflow.core.activity import ActivityEstimate
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
