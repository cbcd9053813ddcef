"""Two GPU hosts behind Airflow's Celery workers, a real scheduler: placement spreads tries over
both hosts, and killing one host's worker mid-run loses no task (retried on the other host).

Run twice: Redis as broker and result backend, and RabbitMQ as broker with Celery's results in
PostgreSQL (the database result backend, ``db+postgresql+psycopg://``)."""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from dist_helpers import drop_pg_database, make_pg_database

from carma_airflow.dev.devstack import AirflowStack
from carma_airflow.monitor.ledger import Ledger
from carma_airflow.store.store import Store

pytestmark = [pytest.mark.e2e, pytest.mark.postgres]

DAGS = Path(__file__).with_name("dags")
BIN = Path(sys.executable).parent
# GPUs and worker concurrency: a worker must take every try its host can hold (GPUs x max_tenants)
HOSTS = {"gpu-a": ("2xA100-40GB", 6), "gpu-b": ("4xH100-80GB", 12)}
TASKS = [f"train_{i}" for i in range(6)] + ["train_pair"]


def session_processes(sid: int) -> list[int]:
    """PIDs of every process in session ``sid`` (a worker started in its own session and all it
    forked: pool processes, task supervisors, tasks).  Found by session, not by environment:
    setproctitle overwrites /proc/PID/environ."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError, IndexError, ValueError):
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            if int(fields[3]) == sid and fields[0] not in ("Z", "X"):
                found.append(int(entry.name))
    return found


class Host:
    """One simulated GPU host on this machine: `carma agent` + `airflow celery worker`."""

    def __init__(self, stack: AirflowStack, name: str, gpus: str, concurrency: int) -> None:
        self.name = name
        self.concurrency = concurrency
        self.state = stack.home / name
        self.env = {
            **stack.env,
            "AIRFLOW__CARMA__HOST": name,
            "AIRFLOW__CARMA__STATE_DIR": str(self.state),
            "AIRFLOW__CARMA__SIMULATED_GPUS": gpus,
        }
        self.queue = stack.env["AIRFLOW__CARMA__QUEUE_PREFIX"] + name
        self.home = stack.home
        self.procs: dict[str, subprocess.Popen[bytes]] = {}

    def _start(self, what: str, argv: list[str]) -> None:
        log = open(self.home / f"{self.name}-{what}.log", "wb")  # noqa: SIM115  (lives as long as the process)
        self.procs[what] = subprocess.Popen(
            argv, env=self.env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )

    def start(self) -> None:
        self._start("agent", [str(BIN / "carma"), "agent"])
        self._start(
            "worker",
            [
                str(BIN / "airflow"), "celery", "worker", "--queues", self.queue,
                "--concurrency", str(self.concurrency), "--celery-hostname", f"{self.name}@%h",
                "--skip-serve-logs", "--without-mingle", "--without-gossip",
            ],
        )  # fmt: skip

    def _signal(self, what: str, sig: int) -> list[int]:
        pids = session_processes(self.procs[what].pid)
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
        return pids

    def kill_worker(self) -> None:
        """SIGKILL the worker, its pool processes and the tries it runs (the agent lives on)."""
        killed = self._signal("worker", signal.SIGKILL)
        assert killed, "the worker of this host was not running"

    def stop(self) -> None:
        """A teardown's stop: SIGTERM, 1 s, then SIGKILL (no orderly hand-back needed)."""
        for what in self.procs:
            for sig, grace_s in ((signal.SIGTERM, 1), (signal.SIGKILL, 10)):
                self._signal(what, sig)
                deadline = time.time() + grace_s
                while session_processes(self.procs[what].pid) and time.time() < deadline:
                    time.sleep(0.3)
        for proc in self.procs.values():
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=5)

    def tail(self, what: str) -> str:
        path = self.home / f"{self.name}-{what}.log"
        return path.read_text(errors="replace")[-3000:] if path.exists() else ""


def _celery_urls(request: pytest.FixtureRequest, db: str) -> tuple[str, str]:
    """Broker and result backend: Redis for both, or RabbitMQ with results in PostgreSQL."""
    if request.param == "redis":
        url = request.getfixturevalue("redis_url")
        return url, url
    return request.getfixturevalue("rabbitmq_url"), "db+" + db


def _delete_queues(broker: str, names: list[str]) -> None:
    """RabbitMQ keeps a declared queue after its consumers leave: remove this test's."""
    if not broker.startswith("amqp"):
        return
    from kombu import Connection

    with Connection(broker, connect_timeout=5) as conn:
        channel = conn.default_channel
        for name in names:
            with contextlib.suppress(Exception):
                channel.queue_delete(name)


@pytest.fixture(params=["redis", "rabbitmq"])
def cluster(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[AirflowStack, dict[str, Host], Store]]:
    db = make_pg_database("carma_mh")
    broker, results = _celery_urls(request, db)
    tag = secrets.token_hex(3)
    stack = AirflowStack(
        tmp_path / "home",
        DAGS,
        db_url=db,
        dispatch="celery",
        store_url=db,
        host="scheduler",
        queue_prefix=f"carma-{tag}-",
        host_timeout_seconds="15",  # a loaded 2-core machine can delay a heartbeat by several seconds
        sample_period="0.5",
        AIRFLOW__CELERY__BROKER_URL=broker,
        AIRFLOW__CELERY__RESULT_BACKEND=results,
        AIRFLOW__CELERY__EXTRA_CELERY_CONFIG=json.dumps({"imports": ["carma_airflow.distributed.celery_tasks"]}),
        AIRFLOW__CELERY_BROKER_TRANSPORT_OPTIONS__VISIBILITY_TIMEOUT="3600",
    )
    hosts = {name: Host(stack, name, gpus, concurrency) for name, (gpus, concurrency) in HOSTS.items()}
    store = Store(db)
    try:
        (tmp_path / "home").mkdir(exist_ok=True)
        stack.start()
        for host in hosts.values():
            host.start()
        yield stack, hosts, store
    finally:
        for host in hosts.values():
            host.stop()
        stack.stop(grace_s=1.0)  # a teardown: no orderly hand-back needed (the 30 s default: ~20 s a run)
        store.close()
        _delete_queues(broker, [h.queue for h in hosts.values()])
        drop_pg_database(db)


def _wait(what: str, check: Callable[[], bool], timeout: float, diag: Callable[[], str]) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if check():
            return
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what}\n{diag()}")


def test_tries_spread_over_two_hosts_and_survive_a_killed_worker(
    cluster: tuple[AirflowStack, dict[str, Host], Store],
) -> None:
    stack, hosts, store = cluster

    def both_live() -> bool:
        rows = {h.host: h for h in store.hosts()}
        return all(name in rows and rows[name].worker_at is not None for name in hosts)

    _wait(
        "both hosts' agents and workers",
        both_live,
        90,
        lambda: hosts["gpu-a"].tail("worker") + hosts["gpu-a"].tail("agent"),
    )
    gpus_of = {h.host: {str(g["uuid"]) for g in h.gpus} for h in store.hosts()}
    assert len(gpus_of["gpu-a"]) == 2 and len(gpus_of["gpu-b"]) == 4
    assert not gpus_of["gpu-a"] & gpus_of["gpu-b"]  # simulated UUIDs name their host

    run_id = stack.trigger("carma_multihost")

    def first_tries_running_on_a() -> bool:
        on_a = [d for d in store.dispatches(host="gpu-a") if d.state == "sent"]
        return bool(on_a) and bool(Ledger(hosts["gpu-a"].state / "simulated-gpus.json").allocations())

    _wait("a try running on gpu-a", first_tries_running_on_a, 120, lambda: stack.tail("scheduler"))
    time.sleep(2)
    doomed = {d.key for d in store.dispatches(host="gpu-a") if d.state == "sent"}
    hosts["gpu-a"].kill_worker()

    state = stack.wait_run("carma_multihost", run_id, timeout=150)
    states = stack.task_states("carma_multihost", run_id)
    assert state == "success", (states, stack.tail("scheduler"))
    assert all(s == "success" for s, _ in states.values()), states

    # a task reports its own success to the api-server; the executor records the end of its
    # dispatch when it next polls the Celery result, a moment later
    _wait(
        "the executor to record the end of every dispatch",
        lambda: all(d.state != "sent" for d in store.dispatches()),
        60,
        lambda: "\n".join(map(str, store.dispatches())) + stack.tail("scheduler"),
    )
    dispatches = {d.key: d for d in store.dispatches()}
    placements = {p.key: p for p in store.placements(dag_id="carma_multihost")}
    # every try went to the host that owns its GPUs; a multi-GPU try stays on one host
    for key, d in dispatches.items():
        assert set(placements[key].gpu_uuids) <= gpus_of[d.host], (key, d.host, placements[key].gpu_uuids)
    first = {k: d for k, d in dispatches.items() if k.endswith("/1")}
    assert {d.host for d in first.values()} == {"gpu-a", "gpu-b"}  # the placer used both hosts

    # the tries on the killed worker were declared lost with the reason, then retried on gpu-b
    assert doomed and all(dispatches[k].state == "lost" for k in doomed), {k: dispatches[k] for k in doomed}
    assert all("gpu-a" in (dispatches[k].reason or "") and "worker" in (dispatches[k].reason or "") for k in doomed)
    # only the tries of the killed worker failed: every other task succeeded at its first try
    doomed_tasks = {k.split("/")[1] for k in doomed}
    assert {t for t, (_, n) in states.items() if n > 1} == doomed_tasks, states
    not_ended = {k: d for k, d in dispatches.items() if k not in doomed and d.state != "ended"}
    assert not not_ended, not_ended
    for key in doomed:
        task_id = key.split("/")[1]
        later = [d for k, d in dispatches.items() if k.split("/")[1] == task_id and k != key]
        assert later and all(d.host == "gpu-b" for d in later), (key, later)

    # the task saw exactly the chosen GPUs of its host, and that host's own ledger
    for task_id in TASKS:
        out = stack.xcom("carma_multihost", run_id, task_id)
        key = f"carma_multihost/{task_id}/{run_id}/-1/{states[task_id][1]}"
        host = dispatches[key].host
        assert out["visible"] == ",".join(placements[key].gpu_uuids), (task_id, out, placements[key])
        assert set(out["visible"].split(",")) <= gpus_of[host]
        assert out["carma_host"] == host
        assert out["ledger"] == str(hosts[host].state / "simulated-gpus.json")
    pair = placements[f"carma_multihost/train_pair/{run_id}/-1/{states['train_pair'][1]}"]
    assert len(pair.gpu_uuids) == 2
