"""CarmaExecutor as Airflow 3.3's scheduler expects an executor to behave (issue 17), each
behaviour proven with a real scheduler, dag-processor and api-server.

- tries that wait for a GPU do not count against ``[core] parallelism``: a GPU backlog does not
  starve LocalExecutor;
- deadline callbacks (``SyncCallback``) handed to CarmaExecutor as the default executor run, as
  CPU processes, and the scheduler lives on;
- a scheduler stopped with SIGTERM while GPU tries wait exits within seconds, and the restarted
  one finishes every task, none run twice;
- a CarmaExecutor that cannot start (no NVML driver) leaves the scheduler and LocalExecutor
  running; its GPU tries wait with the reason in Airflow's audit log.  That deployment boots and
  its two runs are triggered on a thread while the deadline test runs (neither test's assertion
  depends on the machine's pace; booted after it, it cost the file about 45 s more).
"""

from __future__ import annotations

import json
import signal
import time
from collections.abc import Iterator
from concurrent.futures import Future
from pathlib import Path

import pytest
from beside import booted_beside

from carma_airflow.dev.devstack import AirflowStack
from carma_airflow.store import Store

pytestmark = [pytest.mark.e2e, pytest.mark.db]

SQLITE = pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
POSTGRES = pytest.mark.parametrize("backend", [pytest.param("postgres", marks=pytest.mark.postgres)], indirect=True)
GPU_TASKS = {f"gpu_{i:02d}" for i in range(12)}
DAGS = Path(__file__).with_name("dags")


@pytest.fixture(scope="module")
def driverless(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[AirflowStack, Future[tuple[str, str]]]]:
    """A deployment (SQLite) whose CarmaExecutor cannot start, ``gpu_backend = nvml`` without an
    NVML driver, booted on a thread, which then triggers a ``carma_backlog`` and a
    ``carma_cpu_six`` run (their run ids, once triggered)."""
    home = tmp_path_factory.mktemp("driverless")
    deployment = AirflowStack(home, DAGS, gpu_backend="nvml")

    def boot_and_trigger() -> tuple[str, str]:
        deployment.start()
        deployment.wait_for_dag("carma_cpu_six")
        return deployment.trigger("carma_backlog"), deployment.trigger("carma_cpu_six")

    with booted_beside(deployment, boot_and_trigger, "driverless-deployment") as triggered:
        yield deployment, triggered


def _start_beside(request: pytest.FixtureRequest, fixture: str) -> None:
    """Set up a module fixture that works on a thread now, if a selected test uses it."""
    if any(fixture in getattr(item, "fixturenames", ()) for item in request.session.items):
        request.getfixturevalue(fixture)


def _count(states: dict[str, tuple[str, int]], state: str) -> int:
    return sum(1 for s, _ in states.values() if s == state)


@SQLITE
def test_a_gpu_backlog_does_not_starve_local_executor(
    airflow_stack, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CARMA_E2E_GPU_SECONDS", "5")
    quick = tmp_path / "backlog-quick"  # made once the pace is checked: later tries work 1 s (carma_citizen.py)
    monkeypatch.setenv("CARMA_E2E_GPU_QUICK", str(quick))
    stack = airflow_stack(simulated_gpus="1xA100-40GB", AIRFLOW__CORE__PARALLELISM="8")
    stack.wait_for_dag("carma_cpu_six")
    gpu_run = stack.trigger("carma_backlog")
    deadline = time.time() + 120
    while time.time() < deadline:  # more GPU tries queued than [core] parallelism: the old failure
        states = stack.task_states("carma_backlog", gpu_run)
        if _count(states, "queued") + _count(states, "running") >= 10:
            break
        time.sleep(0.5)
    else:
        raise AssertionError(f"the backlog never built up: {states}\n" + stack.tail("scheduler"))
    cpu_run = stack.trigger("carma_cpu_six")
    started = time.time()
    assert stack.wait_run("carma_cpu_six", cpu_run, timeout=120) == "success", stack.tail("scheduler")
    took = time.time() - started
    behind = stack.task_states("carma_backlog", gpu_run)
    print(
        f"6 LocalExecutor tasks behind a 12-try GPU backlog took {took:.1f} s; GPU tries done then: "
        f"{_count(behind, 'success')} of 12"
    )
    # the CPU DAG went by the backlog: most GPU tries (5 s each, one at a time) had not even started
    assert _count(behind, "success") <= 6, behind
    # the rest of the backlog need only run, each try once: the tries that start from now on work
    # 1 s (one at a time, twelve at 5 s took 90 s of the test's 126 s)
    quick.touch()
    cpu = stack.task_states("carma_cpu_six", cpu_run)
    assert {s for s, _ in cpu.values()} == {"success"} and len(cpu) == 6
    assert stack.wait_run("carma_backlog", gpu_run, timeout=300) == "success", stack.tail("scheduler")
    assert stack.task_states("carma_backlog", gpu_run) == {t: ("success", 1) for t in GPU_TASKS}


@SQLITE
def test_a_deadline_callback_runs_with_carma_as_the_default_executor(
    airflow_stack, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest
) -> None:
    _start_beside(request, "driverless")  # the next test's deployment boots and runs beside this one
    marker = tmp_path / "deadline-missed.json"
    monkeypatch.setenv("CARMA_E2E_DEADLINE_MARKER", str(marker))
    stack = airflow_stack(
        simulated_gpus="1xA100-40GB",
        AIRFLOW__CORE__EXECUTOR="carma_airflow.executor.CarmaExecutor,LocalExecutor",
    )
    run = stack.trigger("carma_deadline")
    assert stack.wait_run("carma_deadline", run, timeout=180) == "success", stack.tail("scheduler", 8000)
    deadline = time.time() + 60
    while not marker.exists() and time.time() < deadline:
        time.sleep(0.5)
    assert marker.exists(), "the deadline callback never ran:\n" + stack.tail("scheduler", 8000)
    ran = json.loads(marker.read_text())
    assert ran["visible"] == ""  # a CPU process: no GPU visible
    assert stack.procs["scheduler"].poll() is None, stack.tail("scheduler", 8000)  # the scheduler lives on
    log = stack.tail("scheduler", 400_000)
    assert "NotImplementedError" not in log
    assert "started as a CPU process" in log
    states = [r[0] for r in stack.query("select state from callback")]
    assert states and all(s == "success" for s in states), states


def test_a_carma_executor_that_cannot_start_leaves_cpu_tasks_running(
    driverless: tuple[AirflowStack, Future[tuple[str, str]]],
) -> None:
    stack, triggered = driverless  # no NVML driver on this machine: the start fails
    gpu_run, cpu_run = triggered.result()  # the boot and the triggers raise here if they failed
    assert stack.wait_run("carma_cpu_six", cpu_run, timeout=180) == "success", stack.tail("scheduler", 8000)
    assert stack.procs["scheduler"].poll() is None
    log = stack.tail("scheduler", 400_000)
    assert "CarmaExecutor could not start" in log and "other executors run on" in log
    deadline = time.time() + 60
    reasons: list[str] = []
    while time.time() < deadline and not reasons:
        reasons = [r[0] for r in stack.query("select extra from log where event = 'carma: waiting for a GPU'") if r[0]]
        time.sleep(1)
    assert reasons and all("could not start" in r for r in reasons), reasons
    assert "NVML" in reasons[0] or "nvml" in reasons[0].lower(), reasons[0]
    states = stack.task_states("carma_backlog", gpu_run)
    assert _count(states, "success") == 0 and _count(states, "failed") == 0  # they wait, none lost


@POSTGRES
def test_sigterm_with_a_gpu_backlog_exits_fast_and_the_restart_runs_every_task_once(
    airflow_stack, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CARMA_E2E_GPU_SECONDS", "6")
    quick = tmp_path / "backlog-quick"  # made at the restart: the tries that start from then on work 1 s
    monkeypatch.setenv("CARMA_E2E_GPU_QUICK", str(quick))
    # two GPUs: two exclusive tries run, ten wait (the SIGTERM finds a backlog as with one), and
    # the restarted scheduler works it off two at a time (12 tries one at a time: 95 s of the 140 s)
    stack = airflow_stack(
        simulated_gpus="2xA100-40GB",
        AIRFLOW__SCHEDULER__ORPHANED_TASKS_CHECK_INTERVAL="5",
        AIRFLOW__SCHEDULER__SCHEDULER_HEALTH_CHECK_THRESHOLD="8",
    )
    store = Store(stack.env["AIRFLOW__CARMA__STORE_URL"])
    run = stack.trigger("carma_backlog")
    deadline = time.time() + 120
    while time.time() < deadline:  # a try runs on each GPU, the rest wait
        running = [p for p in store.placements(dag_id="carma_backlog") if p.outcome == "running" and p.pid]
        waiting = [p for p in store.placements(dag_id="carma_backlog") if p.outcome == "waiting"]
        if running and len(waiting) >= 8:
            break
        time.sleep(0.5)
    else:
        raise AssertionError("the backlog never built up:\n" + stack.tail("scheduler"))
    scheduler = stack.procs["scheduler"]
    stopped = time.time()
    scheduler.send_signal(signal.SIGTERM)
    scheduler.wait(timeout=60)
    took = time.time() - stopped
    print(f"scheduler with {len(waiting)} waiting GPU tries exited {took:.1f} s after SIGTERM")
    assert took < 30, stack.tail("scheduler", 8000)
    assert "waiting tries handed back" in stack.tail("scheduler", 200_000)

    quick.touch()  # what is left is that every task runs, once: its length is asserted nowhere
    stack.start_component("scheduler")
    assert stack.wait_run("carma_backlog", run, timeout=400) == "success", stack.tail("scheduler", 8000)
    states = stack.task_states("carma_backlog", run)
    assert {s for s, _ in states.values()} == {"success"} and set(states) == GPU_TASKS
    started = {}
    for p in store.placements(dag_id="carma_backlog"):
        if p.started_at is not None:
            started.setdefault(p.task_id, []).append(p.try_number)
    assert {t: len(tries) for t, tries in started.items()} == {t: 1 for t in GPU_TASKS}  # none ran twice


@pytest.mark.parametrize("shared_backend", ["sqlite"], indirect=True)  # on the shared deployment
def test_a_try_cleared_while_it_runs_ends_as_it_does_under_local_executor(default_stack) -> None:
    stack = default_stack
    run = stack.trigger("carma_clear")
    deadline = time.time() + 120
    while time.time() < deadline:
        states = stack.task_states("carma_clear", run)
        if [s for s, _ in states.values()] == ["running", "running"]:
            break
        time.sleep(0.5)
    else:
        raise AssertionError(f"both tasks never ran together: {states}\n" + stack.tail("scheduler"))
    status, body = stack.api(
        "/api/v2/dags/carma_clear/clearTaskInstances",
        data={"dry_run": False, "dag_run_id": run, "task_ids": ["local_long", "carma_long"], "only_failed": False},
    )
    assert status == 200, body
    assert stack.wait_run("carma_clear", run, timeout=240) in ("success", "failed")
    ended = stack.task_states("carma_clear", run)
    print(f"cleared while running: {ended}")
    assert ended["carma_long"] == ended["local_long"], ended  # CarmaExecutor ends a cleared try as LocalExecutor does
    assert ended["carma_long"][1] >= 2  # the clear took effect: a new try ran
