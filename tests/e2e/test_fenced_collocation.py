"""Fenced collocation in a real Airflow on one simulated A100-40GB (issue 18's target).

A try declaring 8 GiB grows to 30 GiB beside a try that declares and uses 12 GiB.  Fenced
(``[carma] isolation = auto``: the simulated ledger holds each try to what its co-tenants were
not promised) the neighbour succeeds on its first try and the grower gets a CUDA OOM "past its
cap", then succeeds within its OOM retries.  Unfenced (``isolation = none``) the neighbour is
the one that crashes: the test can fail.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from carma_airflow.devstack import AirflowStack

pytestmark = [pytest.mark.e2e, pytest.mark.db]

DAGS = Path(__file__).with_name("fencing_dags")


@pytest.fixture
def one_gpu_stack(tmp_path: Path) -> Iterator[Callable[..., AirflowStack]]:
    made: list[AirflowStack] = []

    def start(**carma: str) -> AirflowStack:
        home = tmp_path / f"home{len(made)}"
        home.mkdir()
        stack = AirflowStack(home, DAGS, simulated_gpus="1xA100-40GB", oom_retry_delay="1", **carma)
        made.append(stack)
        stack.start()
        return stack

    yield start
    for stack in made:
        stack.stop()


def _log(stack: AirflowStack, task_id: str, try_number: int) -> str:
    logs = list((stack.home / "logs").rglob(f"task_id={task_id}/attempt={try_number}.log"))
    assert logs, f"no log for {task_id} try {try_number}"
    return logs[0].read_text()


def test_fenced_grower_gets_the_oom_and_its_neighbour_finishes(one_gpu_stack: Callable[..., AirflowStack]) -> None:
    stack = one_gpu_stack()
    run = stack.trigger("carma_fencing")
    assert stack.wait_run("carma_fencing", run, timeout=300) == "success", stack.tail("scheduler")
    states = stack.task_states("carma_fencing", run)
    print(f"fenced: {states}")
    assert states["neighbour"] == ("success", 1)
    state, tries = states["grower"]
    assert state == "success" and 2 <= tries <= 3  # within its 2 OOM retries
    first = _log(stack, "grower", 1)
    assert "past its cap" in first
    assert "memory: capped at" in first  # the listener's line: the mode in force, in the try's log
    assert stack.xcom("carma_fencing", run, "grower")["peak_mib"] == 30720


def test_unfenced_growth_crashes_the_neighbour(one_gpu_stack: Callable[..., AirflowStack]) -> None:
    stack = one_gpu_stack(isolation="none")
    run = stack.trigger("carma_fencing")
    assert stack.wait_run("carma_fencing", run, timeout=300) == "success", stack.tail("scheduler")
    states = stack.task_states("carma_fencing", run)
    print(f"unfenced: {states}")
    assert states["grower"] == ("success", 1)  # the one that grew ran through
    assert states["neighbour"][1] >= 2  # the one that kept to its 12 GiB crashed and needed another try
    first = _log(stack, "neighbour", 1)
    assert "CUDA out of memory" in first and "past its cap" not in first
    assert "unfenced" in first
