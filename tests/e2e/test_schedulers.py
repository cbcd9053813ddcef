"""Two Airflow schedulers (high availability) on PostgreSQL share one simulated 40 GB GPU.

Eight tries of 16 GiB whose memory ramps over 10 s: two fit at a time.  Each scheduler's
CarmaExecutor must count the other's reservations, so no GPU is booked twice: no CUDA OOM, at
most two tries on the GPU at any moment, every task succeeds on its first try and no try runs
twice; the same when one scheduler is SIGKILLed mid-run and the other adopts its tries.  An OOM
retry taken by the other scheduler is placed by the recovery plan in the store.
"""

from __future__ import annotations

import os
import signal
import time
from datetime import datetime
from pathlib import Path

import pytest
from oom_checks import oom_retried_elsewhere

from carma_airflow.dev.devstack import AirflowStack
from carma_airflow.store import PlacementRecord, Store

pytestmark = [pytest.mark.e2e, pytest.mark.db, pytest.mark.postgres]

RUNS = 8
HA = {
    "simulated_gpus": "1xA100-40GB",
    "peer_timeout_seconds": "8",
    "snapshot_period": "0.5",
    "AIRFLOW__SCHEDULER__ORPHANED_TASKS_CHECK_INTERVAL": "5",
    # above the seconds a loaded 2-core machine may stall a scheduler's heartbeat at start-up
    "AIRFLOW__SCHEDULER__SCHEDULER_HEALTH_CHECK_THRESHOLD": "15",
}
ON_POSTGRES = pytest.mark.parametrize("backend", [pytest.param("postgres", marks=pytest.mark.postgres)], indirect=True)


def _most_at_once(tries: list[PlacementRecord]) -> int:
    """The most tries that ran on the GPU at one moment (from their start and end)."""
    edges: list[tuple[datetime, int]] = []
    for p in tries:
        if p.started_at is not None:
            edges += [(p.started_at, 1), (p.ended_at or datetime.max.replace(tzinfo=p.started_at.tzinfo), -1)]
    most = now = 0
    for _, step in sorted(edges, key=lambda e: (e[0], e[1])):
        now += step
        most = max(most, now)
    return most


def _start_second(stack: AirflowStack) -> None:
    """scheduler-2 next to the first, both executors up and sharing before the run is triggered."""
    stack.start_component("scheduler-2")
    deadline = time.time() + 120
    while time.time() < deadline:
        if all("shares its GPU reservations" in stack.tail(n, 400_000) for n in ("scheduler", "scheduler-2")):
            return
        time.sleep(1)
    raise AssertionError("the two executors did not meet:\n" + stack.tail("scheduler-2"))


def _trigger(stack: AirflowStack) -> list[str]:
    """Eight runs a moment apart: each scheduler's loop queues what it finds, so both get some."""
    runs = []
    for _ in range(RUNS):
        runs.append(stack.trigger("carma_ha"))
        time.sleep(0.7)
    return runs


def _check(stack: AirflowStack, store: Store, runs: list[str], log: str) -> list[PlacementRecord]:
    for run in runs:
        assert stack.wait_run("carma_ha", run, timeout=420) == "success", log[-8000:]
    tries = store.placements(dag_id="carma_ha")
    ran = [p for p in tries if p.started_at is not None]
    summary = sorted((p.run_id[-15:], p.try_number, p.outcome.value, p.owner) for p in tries)
    print("tries:", summary, "most at once:", _most_at_once(ran))
    assert store.ooms(dag_id="carma_ha") == [], summary
    assert sorted(p.run_id for p in ran) == sorted(runs), f"a try ran twice or not at all: {summary}"
    assert _most_at_once(ran) <= 2, f"the 40 GB GPU was booked for more than two 16 GiB tries: {summary}"
    return tries


NUDGE_S = 20.0  # a stopped scheduler is let run 0.3 s once its half waited this long (a row lock it holds)
EXTRA_BATCHES = 2  # more runs, each with the scheduler that queued everything stopped, if a nudge let it queue


def _scheduler_jobs(stack: AirflowStack) -> dict[int, str]:
    """Each running scheduler's job id: the first started first, so its id is the lower."""
    rows = stack.query("select id from job where job_type = 'SchedulerJob' and state = 'running' order by id")
    assert len(rows) == 2, f"two running schedulers expected, the job table has {rows}"
    return {rows[0][0]: "scheduler", rows[1][0]: "scheduler-2"}


def _queue_while_stopped(stack: AirflowStack, paused: str, count: int) -> list[str]:
    """``count`` runs triggered while ``paused`` is stopped; returns once all are queued."""
    pid = stack.procs[paused].pid
    os.kill(pid, signal.SIGSTOP)
    try:
        batch = []
        for _ in range(count):  # the REST API: a run in milliseconds, not a CLI start-up
            status, body = stack.api("/api/v2/dags/carma_ha/dagRuns", data={"logical_date": None})
            assert status == 200, body
            batch.append(str(body["dag_run_id"]))
        deadline = time.time() + 60
        # the nudge lets the stopped one run 0.3 s: it may queue (and so place) the batch itself, as
        # it did under load (one scheduler placed every try); the caller then asks for another batch
        nudge_at = time.time() + NUDGE_S
        while time.time() < deadline:
            rows = stack.query(
                "select run_id from task_instance where dag_id = 'carma_ha' and state is not null "
                "and state not in ('scheduled', 'none')"
            )
            if set(batch) <= {r[0] for r in rows}:
                return batch
            if time.time() > nudge_at:  # stopped inside a transaction that holds a row lock: let it commit
                os.kill(pid, signal.SIGCONT)
                time.sleep(0.3)
                os.kill(pid, signal.SIGSTOP)
                nudge_at = time.time() + NUDGE_S
            time.sleep(0.2)
        raise AssertionError(f"{batch} not queued while {paused} was stopped")
    finally:
        os.kill(pid, signal.SIGCONT)


def _queued_by(stack: AirflowStack, jobs: dict[int, str]) -> dict[str, str]:
    """Which scheduler queued each carma_ha run (task_instance.queued_by_job_id)."""
    rows = stack.query("select run_id, queued_by_job_id from task_instance where dag_id = 'carma_ha'")
    return {r[0]: jobs.get(r[1], str(r[1])) for r in rows if r[1] is not None}


def _trigger_on_each(stack: AirflowStack) -> list[str]:
    """Half the runs while only the first scheduler loops, half while only the second does (the
    other stopped for the few seconds its half takes to be queued): on a loaded machine one
    scheduler may otherwise queue every run, and nothing would be shared.  Where a nudge let the
    stopped one queue its batch after all (CI once: one scheduler placed all eight tries), a
    smaller batch follows with the scheduler that queued everything stopped."""
    stack.wait_for_dag("carma_ha")
    jobs = _scheduler_jobs(stack)
    runs: list[str] = []
    for paused in ("scheduler-2", "scheduler"):
        runs += _queue_while_stopped(stack, paused, RUNS // 2)
    for _ in range(EXTRA_BATCHES):
        queuers = set(_queued_by(stack, jobs).values())
        if len(queuers) >= 2:
            break
        print(f"only {queuers} queued the runs (a nudge): two more runs with it stopped")
        runs += _queue_while_stopped(stack, next(iter(queuers)), 2)
    return runs


@ON_POSTGRES
def test_two_schedulers_share_one_gpu_without_double_booking(airflow_stack) -> None:
    # A stopped scheduler sends no heartbeat while its half is queued (up to the 60 s the loop
    # below waits on a loaded machine): Airflow's health threshold and the peer timeout are above
    # that, so it is a paused scheduler, never a gone one whose queued tries Airflow resets (at
    # 15 s and 20 s a pause under load was taken for a death and a run got a second try).
    stack = airflow_stack(
        **{**HA, "peer_timeout_seconds": "75", "AIRFLOW__SCHEDULER__SCHEDULER_HEALTH_CHECK_THRESHOLD": "75"}
    )
    _start_second(stack)
    store = Store(stack.env["AIRFLOW__CARMA__STORE_URL"])
    runs = _trigger_on_each(stack)
    tries = _check(stack, store, runs, stack.tail("scheduler", 20_000) + stack.tail("scheduler-2", 20_000))
    states = [stack.task_states("carma_ha", run) for run in runs]
    assert states == [{"train": ("success", 1)}] * len(runs), states  # each on its first try
    assert stack.query("select count(*) from task_instance_history where dag_id = 'carma_ha'")[0][0] == 0
    owners = {p.owner for p in tries}
    assert len(owners) == 2, f"one scheduler placed every try: {owners}"  # both took part
    store.close()


@ON_POSTGRES
def test_a_scheduler_killed_mid_run_leaves_its_tries_to_the_other(airflow_stack, tmp_path: Path) -> None:
    # tries that outlive Airflow's finding the killed scheduler dead (health threshold + check
    # interval): those that start before the kill train until the survivor has adopted the killed
    # one's tries (the file `released`; 300 s at most), those after it 5 s (carma_ha.py).  They
    # trained a fixed 45 s: longer than needed on a quiet machine, maybe too short on a loaded one
    killed = tmp_path / "killed"
    released = tmp_path / "released"
    stack = airflow_stack(**HA, ha_train_seconds="300", ha_killed=str(killed), ha_released=str(released))
    _start_second(stack)
    store = Store(stack.env["AIRFLOW__CARMA__STORE_URL"])
    runs = _trigger(stack)
    pids = {name: stack.procs[name].pid for name in ("scheduler-2", "scheduler")}
    deadline = time.time() + 180
    victim = None
    while victim is None and time.time() < deadline:
        # kill a scheduler while a try it placed runs: scheduler-2 if it has one, else the first
        # (one scheduler's loop may queue every run, so which of the two runs a try first is chance)
        running = [p.owner for p in store.placements(dag_id="carma_ha") if p.outcome == "running" and p.pid]
        victim = next((n for n, pid in pids.items() if any(o and f":{pid}:" in o for o in running)), None)
        time.sleep(0.5)
    if victim is None:
        raise AssertionError("no scheduler placed a try:\n" + stack.tail("scheduler-2") + stack.tail("scheduler"))
    survivor = "scheduler" if victim == "scheduler-2" else "scheduler-2"
    stack.kill(victim)  # its executor dies with it, its task processes do not
    killed.touch()
    deadline = time.time() + 240
    while time.time() < deadline and "Adopted" not in stack.tail(survivor, 400_000):
        time.sleep(0.5)
    released.touch()
    _check(stack, store, runs, stack.tail(survivor, 40_000))
    states = [stack.task_states("carma_ha", run) for run in runs]
    print("states:", states)
    assert all(s["train"][0] == "success" for s in states), states
    # a try that only waited in the killed executor is reset by Airflow (try 2); none that ran
    assert "Adopted" in stack.tail(survivor, 400_000)
    store.close()


def _owner_of(tries: list[PlacementRecord], pids: dict[str, int]) -> str | None:
    """The scheduler whose executor placed (owns) one of ``tries``, by its process id."""
    owners = [p.owner for p in tries if p.owner]
    return next((n for n, pid in pids.items() if any(f":{pid}:" in o for o in owners)), None)


def _oom_then_stop_placer(stack: AirflowStack, store: Store, pids: dict[str, int]) -> tuple[str, str, bool]:
    """A ``carma_oom`` run whose underdeclared try 1 OOMed; the scheduler that placed it is then
    stopped until try 2 is queued.  The run, that scheduler, and whether it had to be let run for
    a moment (a nudge: it was stopped inside a transaction that holds a row lock), in which it may
    have queued try 2 itself."""
    run = stack.trigger("carma_oom")
    deadline = time.time() + 240
    first: list[PlacementRecord] = []
    while time.time() < deadline and not first:
        first = [
            p for p in store.latest_for("carma_oom", "underdeclared", run) if p.try_number == 1 and p.outcome == "oom"
        ]
        time.sleep(0.2)
    assert first, "try 1 did not OOM:\n" + stack.tail("scheduler") + stack.tail("scheduler-2")
    placer = _owner_of(first, pids)
    assert placer is not None, f"try 1's owner {first[0].owner} is neither scheduler {pids}"
    nudged = False
    os.kill(pids[placer], signal.SIGSTOP)
    try:
        deadline = time.time() + 30
        nudge_at = time.time() + 8
        while time.time() < deadline:
            rows = stack.query(
                "select try_number, state from task_instance where dag_id = 'carma_oom' "
                "and task_id = 'underdeclared' and run_id = :r",
                r=run,
            )
            if rows and rows[0][0] >= 2 and rows[0][1] in ("queued", "running", "success"):
                break
            if time.time() > nudge_at:
                os.kill(pids[placer], signal.SIGCONT)
                nudged = True
                time.sleep(0.3)
                os.kill(pids[placer], signal.SIGSTOP)
                nudge_at = time.time() + 8
            time.sleep(0.2)
        else:
            raise AssertionError(f"try 2 was not queued while {placer} was stopped: {rows}")
    finally:
        os.kill(pids[placer], signal.SIGCONT)
    return run, placer, nudged


@ON_POSTGRES
def test_the_next_try_after_an_oom_follows_the_plan_on_the_other_scheduler(airflow_stack) -> None:
    # issue 24: the OOM retry plan lives in the store, whichever scheduler takes the next try.
    # carma_oom on 2 GPUs: the underdeclared task OOMs beside a big tenant on try 1; the scheduler
    # that placed it is then stopped until the other one has queued try 2 (a 5 s OOM retry delay
    # leaves the time), so try 2 is placed by the other executor, from the plan in the store: on
    # the other GPU, with at least what the crash reached.  (Stopped below Airflow's health
    # threshold and the peer timeout: a paused scheduler, not a gone one.)
    stack = airflow_stack(
        **{
            **HA,
            "simulated_gpus": "2xA100-40GB",
            "peer_timeout_seconds": "40",
            "oom_retry_delay": "5",
            "AIRFLOW__SCHEDULER__SCHEDULER_HEALTH_CHECK_THRESHOLD": "40",
        }
    )
    _start_second(stack)
    store = Store(stack.env["AIRFLOW__CARMA__STORE_URL"])
    pids = {name: stack.procs[name].pid for name in ("scheduler", "scheduler-2")}
    stack.wait_for_dag("carma_oom")
    for attempt in range(3):
        run, placer, nudged = _oom_then_stop_placer(stack, store, pids)
        other = "scheduler-2" if placer == "scheduler" else "scheduler"
        assert stack.wait_run("carma_oom", run, timeout=300) == "success", stack.tail(other, 20_000)
        plan_first, plan_second = oom_retried_elsewhere(stack, run)
        second = [p for p in store.latest_for("carma_oom", "underdeclared", run) if p.try_number == 2]
        owner = _owner_of(second, pids)
        if owner == placer and nudged:
            # the stopped scheduler ran for one of the test's 0.3 s nudges and queued try 2 itself:
            # the plan held (checked above) but not across schedulers; another run, not a verdict
            print(f"attempt {attempt + 1}: {placer} took try 2 during a nudge; again")
            continue
        assert owner == other, ([p.owner for p in second], pids, placer)
        print(f"try 1 on {plan_first['gpu_uuids']} by {placer}, try 2 on {plan_second['gpu_uuids']} by {other}")
        break
    else:
        raise AssertionError("in three runs the stopped scheduler queued try 2 itself during a nudge")
    store.close()
