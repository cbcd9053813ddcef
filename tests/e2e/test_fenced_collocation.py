"""Fenced collocation in a real Airflow on one simulated A100-40GB (issues 18 and 22).

One deployment with ``[carma] isolation = auto`` (on simulated GPUs, as on a host without an MPS
daemon or driver limits: framework caps) and ``isolation_cap = promise`` (the cap fixed at the
try's start, what a framework-capped try gets on a real host with that rule), one DAG run at a
time on its single GPU:

* ``carma_fencing``: a try declaring 8 GiB grows to 30 GiB beside a try that declares and uses
  12 GiB: the grower gets a CUDA OOM "past its cap" and succeeds within its OOM retries; the
  neighbour succeeds on its first try.
* the "load data, then allocate" pattern (fencing_dags/carma_fencing_loading.py): a neighbour
  declaring 20 GiB that spends 15 s on the CPU before it allocates 12 GiB keeps its promise from
  its placement on, whether it was placed after the grower or before it: the grower is the one
  stopped, its OOM names it, the neighbour succeeds on try 1.  The same with both tasks asking
  for ``isolation = driver`` (the simulated GPUs' ledger plays the cgroup's hard limit), and
  unfenced (``isolation = none``): there the loading neighbour is the one that crashes, so the
  other assertions can fail.

A second deployment with the defaults (``isolation_cap = live``, chosen by bench/fencing.py) runs
the pattern with the grower placed first:
its PyTorch-style cap, set at its start to the GPU less the reserve, is re-set from its cap file
when the neighbour is placed, and stops it.  That deployment boots and its one run is triggered on
a thread beside the first deployment's tests (its own GPU ledger: nothing is shared but the
machine's cores); its test, the last, waits for the run's end.  Booted and run after the others
it cost the file about 70 s more.

Each try's log says the fence in force: the mechanism, its cap per GPU, fixed or live.
"""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import Future
from pathlib import Path

import pytest
from beside import booted_beside

from carma_airflow.dev.devstack import AirflowStack

pytestmark = [pytest.mark.e2e, pytest.mark.db]

DAGS = Path(__file__).with_name("fencing_dags")
RUN_TIMEOUT_S = 480  # a loaded 2-core machine: the grower's retry waits for the GPU to empty
FIXED_CAP_LINE = (
    "memory: capped at 10240 MiB per GPU (framework: PyTorch's fraction, played by the simulated GPUs' ledger; "
    "fixed at the try's start: its promise, 10240 MiB per GPU)"
)


LIVE_DAG = "carma_fencing_live"


@pytest.fixture(scope="module")
def stack(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[AirflowStack]:
    if any("live_run" in getattr(item, "fixturenames", ()) for item in request.session.items):
        request.getfixturevalue("live_run")  # its boot and run beside this deployment's tests
    home = tmp_path_factory.mktemp("fenced")
    deployment = AirflowStack(home, DAGS, simulated_gpus="1xA100-40GB", oom_retry_delay="1", isolation_cap="promise")
    try:
        deployment.start()
        yield deployment
    finally:
        deployment.stop(grace_s=1.0)  # a teardown: no orderly hand-back needed


@pytest.fixture(scope="module")
def live_run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[AirflowStack, Future[str]]]:
    """The deployment with the defaults and its ``carma_fencing_live`` run: booted and triggered
    on a thread (the run id, once triggered), so that both overlap the other deployment's tests."""
    home = tmp_path_factory.mktemp("live")
    deployment = AirflowStack(home, DAGS, simulated_gpus="1xA100-40GB", oom_retry_delay="1")  # the defaults

    def boot_and_trigger() -> str:
        deployment.start()
        return deployment.trigger(LIVE_DAG)

    with booted_beside(deployment, boot_and_trigger, "live-deployment") as triggered:
        yield deployment, triggered


def _log(stack: AirflowStack, dag_id: str, task_id: str, try_number: int) -> str:
    logs = list((stack.home / "logs").glob(f"dag_id={dag_id}/**/task_id={task_id}/attempt={try_number}.log"))
    assert logs, f"no log for {dag_id}.{task_id} try {try_number}"
    return logs[0].read_text()


def _run(stack: AirflowStack, dag_id: str) -> tuple[str, dict[str, tuple[str, int]]]:
    stack.wait_for_dag(dag_id)
    run = stack.trigger(dag_id)
    assert stack.wait_run(dag_id, run, timeout=RUN_TIMEOUT_S) == "success", stack.tail("scheduler")
    states = stack.task_states(dag_id, run)
    print(f"{dag_id}: {states}")
    return run, states


def test_fenced_grower_gets_the_oom_and_its_neighbour_finishes(stack: AirflowStack) -> None:
    run, states = _run(stack, "carma_fencing")
    assert states["neighbour"] == ("success", 1)
    state, tries = states["grower"]
    assert state == "success" and 2 <= tries <= 3  # within its 2 OOM retries
    first = _log(stack, "carma_fencing", "grower", 1)
    assert "past its cap" in first
    assert FIXED_CAP_LINE in first  # the listener's line: the fence in force, in the try's log
    assert stack.xcom("carma_fencing", run, "grower")["peak_mib"] == 30720


@pytest.mark.parametrize("dag_id", ["carma_fencing_grower_first", "carma_fencing_neighbour_first"])
def test_a_loading_neighbour_keeps_its_promise_from_placement(stack: AirflowStack, dag_id: str) -> None:
    run, states = _run(stack, dag_id)
    assert states["neighbour"] == ("success", 1), states
    state, tries = states["grower"]
    assert state == "success" and 2 <= tries <= 3, states
    first = _log(stack, dag_id, "grower", 1)
    assert "this try (" in first and ".grower) is past its cap of 10.00 GiB" in first
    assert "framework cap, fixed at the try's start" in first
    assert FIXED_CAP_LINE in first
    neighbour = _log(stack, dag_id, "neighbour", 1)
    assert "memory: capped at 22528 MiB per GPU (framework" in neighbour and "out of memory" not in neighbour
    assert stack.xcom(dag_id, run, "neighbour")["peak_mib"] == 12288


def test_simulated_driver_limits_hold_the_grower(stack: AirflowStack) -> None:
    _, states = _run(stack, "carma_fencing_driver")
    assert states["neighbour"] == ("success", 1), states
    assert states["grower"][0] == "success" and states["grower"][1] >= 2, states
    first = _log(stack, "carma_fencing_driver", "grower", 1)
    assert "driver: its leaf's hard limit, which the simulated GPUs' ledger plays (no cgroup here)" in first
    assert "the driver's hard limit of its cgroup leaf" in first and "past its cap" in first
    assert "NVML limit, hard" not in first  # no cgroup holds a simulated try


def test_unfenced_growth_crashes_the_loading_neighbour(stack: AirflowStack) -> None:
    _, states = _run(stack, "carma_fencing_unfenced")
    assert states["grower"] == ("success", 1), states  # the one that grew ran through
    assert states["neighbour"][0] == "success" and states["neighbour"][1] >= 2, states  # the one that kept its word
    first = _log(stack, "carma_fencing_unfenced", "neighbour", 1)
    assert "CUDA out of memory" in first and "past its cap" not in first
    assert "unfenced" in first


def test_a_live_cap_is_re_set_when_the_neighbour_is_placed(live_run: tuple[AirflowStack, Future[str]]) -> None:
    live_stack, triggered = live_run
    run = triggered.result()  # the boot and the trigger raise here if they failed
    assert live_stack.wait_run(LIVE_DAG, run, timeout=RUN_TIMEOUT_S) == "success", live_stack.tail("scheduler")
    states = live_stack.task_states(LIVE_DAG, run)
    print(f"{LIVE_DAG}: {states}")
    assert states["neighbour"] == ("success", 1), states
    assert states["grower"][0] == "success" and states["grower"][1] >= 2, states
    first = _log(live_stack, "carma_fencing_live", "grower", 1)
    # alone at its start: the GPU less the reserve; re-set to 40960 - 512 - 20480 = 19968 (a live
    # promise carries no margin: core/fencing.FenceModel.margin_mib)
    assert "memory: capped at 40448 MiB per GPU (framework: PyTorch's fraction, played by" in first
    assert "re-set as co-tenants come and go" in first
    assert "19.50 GiB allowed; this try (" in first and "framework cap, re-set as co-tenants come and go" in first
