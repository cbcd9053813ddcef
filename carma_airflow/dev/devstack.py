"""A real, throwaway Airflow 3 deployment: api-server, scheduler and dag-processor as separate
processes, CarmaExecutor on simulated GPUs, SQLite or PostgreSQL.  Used by the demo, the
end-to-end tests and the dispatch benchmark; it is a development tool, not a production launcher.

The api-server listens on 127.0.0.1 only and login is on: the simple auth manager with one admin
user, ``admin``, whose password is generated per stack and written where the simple auth manager
reads it (``$AIRFLOW_HOME/simple_auth_manager_passwords.json.generated``).  API calls need a token:
:meth:`AirflowStack.token` gets one from ``POST /auth/token``; :meth:`AirflowStack.api` sends it.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import sqlalchemy as sa

AIRFLOW = str(Path(sys.executable).with_name("airflow"))

EXECUTOR_LINE = "LocalExecutor,carma_airflow.executor.CarmaExecutor"

HOST = "127.0.0.1"  # the api-server listens here only: a stack is never reachable from the network
USERNAME = "admin"
PASSWORDS_FILE = "simple_auth_manager_passwords.json.generated"  # the simple auth manager's default name


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def task_processes(home: Path) -> list[int]:
    """PIDs of processes started for the Airflow at ``home``: their AIRFLOW_HOME is it, or (a process
    that sets its title may have overwritten its environment) an Airflow process working in it.

    Task processes of CarmaExecutor run in sessions of their own (they outlive an executor
    restart), so stopping the scheduler's process group does not reach them.
    """
    wanted = f"AIRFLOW_HOME={home}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if wanted in (entry / "environ").read_bytes().split(b"\0") or (
                os.readlink(entry / "cwd") == str(home) and b"airflow" in (entry / "cmdline").read_bytes()
            ):
                found.append(int(entry.name))
        except OSError:
            continue
    return found


def kill_task_processes(home: Path, grace_s: float = 5.0) -> None:
    """SIGTERM, then SIGKILL, every process of the Airflow at ``home`` still running."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        pids = task_processes(home)
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, sig)
        deadline = time.time() + grace_s
        while pids and time.time() < deadline and task_processes(home):
            time.sleep(0.2)


def _migrated_template() -> Path | None:
    """Where a migrated SQLite metadata database for this Airflow version is kept (None: not kept,
    when ``CARMA_STACK_FRESH_DB`` is set)."""
    if os.environ.get("CARMA_STACK_FRESH_DB"):
        return None
    import tempfile
    from importlib.metadata import version

    return Path(tempfile.gettempdir()) / f"carma-airflow-migrated-{version('apache-airflow')}.db"


class AirflowStack:
    def __init__(
        self,
        home: Path,
        dags: Path,
        db_url: str | None = None,
        port: int | None = None,
        *,
        migrated: bool = False,
        **carma: str,
    ) -> None:
        self.home = home
        self.migrated = migrated  # db_url is a copy of a migrated database (a template): no migration
        self.port = port or free_port()
        self.base_url = f"http://{HOST}:{self.port}"
        self.db_url = db_url or f"sqlite:///{home / 'airflow.db'}"
        dags_copy = home / "dags"
        shutil.copytree(dags, dags_copy, dirs_exist_ok=True)
        dags = dags_copy
        # the login: a known user with a fresh password, in the file the simple auth manager reads
        # (it generates and prints a password only for a user the file does not have)
        self.username = USERNAME
        self.password = secrets.token_urlsafe(12)
        self.passwords_file = home / PASSWORDS_FILE
        self.passwords_file.write_text(json.dumps({self.username: self.password}) + "\n")
        self.passwords_file.chmod(0o600)
        self.env = {
            **{k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")},
            "AIRFLOW_HOME": str(home),
            "AIRFLOW__CORE__EXECUTOR": EXECUTOR_LINE,
            "AIRFLOW__CORE__DAGS_FOLDER": str(dags),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": self.db_url,
            "AIRFLOW__API__HOST": HOST,
            "AIRFLOW__API__PORT": str(self.port),
            "AIRFLOW__API__BASE_URL": f"{self.base_url}/",
            "AIRFLOW__API_AUTH__JWT_SECRET": "carma-e2e-secret-not-for-production",
            "AIRFLOW__API__SECRET_KEY": "carma-e2e-secret-key",
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "False",
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": f"{self.username}:admin",
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(self.passwords_file),
            "AIRFLOW__SCHEDULER__SCHEDULER_HEARTBEAT_SEC": "1",
            "AIRFLOW__SCHEDULER__TASK_QUEUED_TIMEOUT_CHECK_INTERVAL": "5",
            "AIRFLOW__WORKERS__MIN_HEARTBEAT_INTERVAL": "1",
            # a stack's DAG files never change once copied and none is added after the boot: the
            # dag-processor lists the folder every 30 s and parses each file again every 60 s (a
            # first parse that failed on a loaded machine is retried within the minute); every 5 s
            # and 30 s cost an idle stack about twice the CPU (bench/stack_cpu.py, docs/measured.md)
            "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "30",
            "AIRFLOW__DAG_PROCESSOR__MIN_FILE_PROCESS_INTERVAL": "60",
            "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "False",
            "AIRFLOW__CARMA__GPU_BACKEND": "simulated",
            "AIRFLOW__CARMA__SAMPLE_PERIOD": "0.5",
            "AIRFLOW__CARMA__OOM_RETRY_DELAY": "1",
            "AIRFLOW__CARMA__LOCK_SECONDS": "2",
            # a loaded machine (a 2-core CI runner, a busy scheduler host) answers the execution
            # API slowly: Airflow's 5 s timeout fails tries there that would have run
            # (docs/deployment.md says the same for production)
            "AIRFLOW__WORKERS__EXECUTION_API_TIMEOUT": "60",
            "AIRFLOW__WORKERS__EXECUTION_API_RETRIES": "10",
            "AIRFLOW__WORKERS__EXECUTION_API_RETRY_WAIT_MAX": "10",
            # each stack its own log-server port: two stacks on one machine never collide on 8793
            "AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT": str(free_port()),
            "PYTHONUNBUFFERED": "1",
        }
        if self.db_url.startswith("postgresql+psycopg://"):
            # Airflow also needs an async driver: psycopg 3 is one
            async_url = self.db_url.replace("postgresql+psycopg://", "postgresql+psycopg_async://", 1)
            self.env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN_ASYNC"] = async_url
        for key, value in carma.items():
            self.env[key if key.startswith("AIRFLOW__") else f"AIRFLOW__CARMA__{key.upper()}"] = value
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.groups: list[int] = []  # process groups of every component ever started
        self._token: str | None = None  # the admin's JWT, kept by api()

    def airflow(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [AIRFLOW, *args], env=self.env, capture_output=True, text=True, timeout=timeout, check=False
        )

    COMPONENTS: dict[str, list[str]] = {  # noqa: RUF012
        "api-server": ["api-server"],
        "dag-processor": ["dag-processor"],
        "scheduler": ["scheduler"],
    }

    def start(self) -> None:
        self.migrate()
        for name in self.COMPONENTS:
            self.start_component(name)
        deadline = time.time() + 120
        while time.time() < deadline:
            try:
                with urllib.request.urlopen(f"{self.base_url}/api/v2/monitor/health", timeout=2):
                    return
            except OSError:
                time.sleep(1)
        raise AssertionError("api-server did not become healthy:\n" + self.tail("api-server"))

    def migrate(self) -> None:
        """``airflow db migrate``; on SQLite, once per Airflow version on this machine: a migrated
        database is kept beside the temp folder and copied for every later stack (a boot then
        costs no migration; the copy is byte for byte what the migration made).  Nothing when the
        stack was made ``migrated`` (a PostgreSQL database created from a migrated template)."""
        if self.migrated:
            return
        sqlite_path = self.db_url.removeprefix("sqlite:///") if self.db_url.startswith("sqlite:///") else None
        template = _migrated_template() if sqlite_path else None
        if sqlite_path and template and template.exists():
            shutil.copyfile(template, sqlite_path)
            return
        out = self.airflow("db", "migrate", timeout=300)
        assert out.returncode == 0, out.stderr[-3000:]
        if sqlite_path and template:
            partial = template.with_suffix(f".{os.getpid()}.part")
            shutil.copyfile(sqlite_path, partial)
            os.replace(partial, template)  # atomic: a concurrent stack copies a whole file or none

    def start_component(self, name: str) -> None:
        """Start (or start again, after a crash) one Airflow process; its log is appended to.

        ``<component>-<n>`` (``scheduler-2``) starts one more of a component under its own name
        and log: several schedulers on one metadata database, as Airflow's high availability runs.
        """
        args = list(self.COMPONENTS.get(name) or self.COMPONENTS[name.rsplit("-", 1)[0]])
        if name == "api-server":
            args += ["--host", HOST, "--port", str(self.port)]
        log = open(self.home / f"{name}.log", "ab")  # noqa: SIM115  (the process keeps it)
        self.procs[name] = subprocess.Popen(
            [AIRFLOW, *args], env=self.env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, cwd=self.home
        )
        self.groups.append(self.procs[name].pid)

    def kill(self, name: str) -> None:
        """SIGKILL one component as a service manager sees it die: the process and the children
        in its process group (a scheduler's log server and LocalExecutor workers).  Those children
        are forked from the scheduler and keep its metadata-database connections open, so killing
        the scheduler alone leaves any row lock of its open transaction held by orphans for ever
        (the run it locked is never examined again).  Try processes are in their own sessions:
        CarmaExecutor's tries outlive the kill, as they should."""
        os.killpg(self.procs[name].pid, signal.SIGKILL)
        self.procs[name].wait(timeout=30)

    # -- REST API ------------------------------------------------------------------------
    def http(self, path: str, *, headers: dict[str, str] | None = None, data: bytes | None = None) -> tuple[int, str]:
        """One request to the api-server, as it is (no token added): status and body."""
        req = urllib.request.Request(self.base_url + path, data=data, headers=headers or {})
        try:
            # generous: on a loaded 2-core machine an api-server took over 30 s to answer
            with urllib.request.urlopen(req, timeout=90) as r:
                return int(r.status), r.read().decode()
        except urllib.error.HTTPError as err:
            return err.code, err.read().decode(errors="replace")

    def token(self, username: str | None = None, password: str | None = None) -> str:
        """A JWT for the REST API, as Airflow's login page gets one: ``POST /auth/token``."""
        body = json.dumps({"username": username or self.username, "password": password or self.password})
        status, text = self.http("/auth/token", headers={"Content-Type": "application/json"}, data=body.encode())
        if status != 201:
            raise AssertionError(
                f"POST {self.base_url}/auth/token answered {status}: {text[:500]} "
                f"(the users and passwords are in {self.passwords_file})"
            )
        return str(json.loads(text)["access_token"])

    def api(self, path: str, *, data: Any = None) -> tuple[int, Any]:
        """An authenticated REST call (GET, or POST of ``data`` as JSON): status and decoded JSON."""
        if self._token is None:  # one login per stack, not one per call: half the api-server's work
            self._token = self.token()
        headers = {"Authorization": f"Bearer {self._token}"}
        body = None
        if data is not None:
            headers["Content-Type"] = "application/json"
            body = json.dumps(data).encode()
        status, text = self.http(path, headers=headers, data=body)
        if status == 401:  # the token expired: log in again, once
            self._token = self.token()
            headers["Authorization"] = f"Bearer {self._token}"
            status, text = self.http(path, headers=headers, data=body)
        try:
            return status, json.loads(text)
        except ValueError:
            return status, text

    def tail(self, name: str, n: int = 4000) -> str:
        path = self.home / f"{name}.log"
        return path.read_text(errors="replace")[-n:] if path.exists() else ""

    def stop(self, grace_s: float = 30.0) -> None:
        """Stop every process this stack started: each component's process group (also those of
        components started again after a crash), then the task processes in their own sessions.

        Each of the two rounds of SIGTERM waits up to ``grace_s`` for its components before
        SIGKILL, and the task processes' round up to ``grace_s`` too (5 s at most); a test's
        teardown, which needs no orderly hand-back, passes a few seconds (a try's process took
        over 5 s to go on SIGTERM: with the demo's tries running, a 1 s stop took 7.3 s)."""
        schedulers = sorted(n for n in self.procs if n.startswith("scheduler"))
        # the schedulers first (their executors hand their tries back), then the rest together
        for names in (schedulers, ["dag-processor", "api-server"]):
            procs = [p for p in (self.procs.get(n) for n in names) if p is not None]
            for proc in procs:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(proc.pid, signal.SIGTERM)
            deadline = time.monotonic() + grace_s
            for proc in procs:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(timeout=max(0.0, deadline - time.monotonic()))
        for group in self.groups:  # what is left: workers of a component, components of a crash
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(group, signal.SIGKILL)
        kill_task_processes(self.home, grace_s=min(grace_s, 5.0))

    # -- metadata DB ---------------------------------------------------------------------
    def query(self, sql: str, **params: Any) -> list[Any]:
        engine = sa.create_engine(self.db_url)
        try:
            with engine.connect() as conn:
                return list(conn.execute(sa.text(sql), params))
        finally:
            engine.dispose()

    def wait_for_dag(self, dag_id: str, timeout: float = 120) -> None:
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.query("select dag_id from dag where dag_id = :d", d=dag_id):
                return
            time.sleep(1)
        raise AssertionError(f"DAG {dag_id} never parsed:\n" + self.tail("dag-processor"))

    def trigger(self, dag_id: str) -> str:
        """A new run of ``dag_id`` through the REST API (``POST /api/v2/dags/{id}/dagRuns``), as
        Airflow's own system tests do: no CLI process (about 10 s of CPU each) per run."""
        self.wait_for_dag(dag_id)
        deadline = time.time() + 60
        while True:
            status, body = self.api(f"/api/v2/dags/{dag_id}/dagRuns", data={"logical_date": None})
            if status in (200, 201) and isinstance(body, dict) and body.get("dag_run_id"):
                return str(body["dag_run_id"])
            # a DAG the dag-processor has just written may not be served yet (404): ask again
            if time.time() > deadline:
                raise AssertionError(f"POST dagRuns for {dag_id} answered {status}: {str(body)[:1000]}")
            time.sleep(1)

    def trigger_cli(self, dag_id: str) -> str:
        """A new run through ``airflow dags trigger`` (for tests that need no api-server)."""
        self.wait_for_dag(dag_id)
        out = self.airflow("dags", "trigger", dag_id, "-o", "json")
        assert out.returncode == 0, out.stderr[-2000:]
        rows = self.query("select run_id from dag_run where dag_id = :d order by id desc", d=dag_id)
        return str(rows[0][0])

    def wait_run(self, dag_id: str, run_id: str, timeout: float = 300) -> str:
        deadline = time.time() + timeout
        state = None
        while time.time() < deadline:
            rows = self.query("select state from dag_run where dag_id = :d and run_id = :r", d=dag_id, r=run_id)
            state = rows[0][0] if rows else None
            if state in ("success", "failed"):
                return str(state)
            time.sleep(1)
        raise AssertionError(f"run {dag_id}/{run_id} still {state} after {timeout}s\n" + self.tail("scheduler"))

    LIVE_TI_STATES = ("scheduled", "queued", "running", "restarting", "up_for_retry", "up_for_reschedule", "deferred")

    def wait_quiet(self, timeout: float = 180) -> None:
        """Until no task instance is live in Airflow and no try holds or waits for a GPU in the
        executor's store (a run ends when its tasks report; the executor sees their processes end
        a heartbeat later): a deployment shared by several tests is then as a fresh one is."""
        from carma_airflow.store import Store

        marks = ", ".join(f"'{s}'" for s in self.LIVE_TI_STATES)
        store = Store(self.env.get("AIRFLOW__CARMA__STORE_URL") or Store.default_url(str(self.home)))
        try:
            deadline = time.time() + timeout
            while True:
                live = self.query(f"select count(*) from task_instance where state in ({marks})")[0][0]
                holding = [p for p in store.placements() if not p.outcome.finished]
                if not live and not holding:
                    return
                if time.time() > deadline:
                    raise AssertionError(f"still busy after {timeout}s: {live} live task instances, {holding}")
                time.sleep(1)
        finally:
            store.close()

    def run_log(self, dag_id: str, run_id: str, task_id: str, attempt: int | str = "*") -> list[Path]:
        """The log files of one task in one DAG run: one per try (and map index), in order."""
        root = self.home / "logs" / f"dag_id={dag_id}" / f"run_id={run_id}" / f"task_id={task_id}"
        return sorted(root.glob(f"**/attempt={attempt}.log"))

    def task_states(self, dag_id: str, run_id: str) -> dict[str, tuple[str, int]]:
        rows = self.query(
            "select task_id, state, try_number from task_instance where dag_id = :d and run_id = :r", d=dag_id, r=run_id
        )
        return {r[0]: (r[1], r[2]) for r in rows}

    def xcom(self, dag_id: str, run_id: str, task_id: str) -> Any:
        import json

        rows = self.query(
            "select value from xcom where dag_id = :d and run_id = :r and task_id = :t and key = 'return_value'",
            d=dag_id,
            r=run_id,
            t=task_id,
        )
        if not rows:
            return None
        value = rows[0][0]
        if isinstance(value, (str, bytes)):  # SQLite keeps JSON text; PostgreSQL's JSONB comes back decoded
            try:
                return json.loads(value)
            except ValueError:
                return value
        return value
