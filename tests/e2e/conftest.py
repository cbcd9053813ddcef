"""Fixtures for the end-to-end suite: real Airflow deployments on SQLite or PostgreSQL.

* ``default_stack``: one deployment per backend for the whole session (2 simulated A100-40GB,
  the DAGs of ``dags/`` and ``checkpoint_dags/``, the executor's defaults), booted when a test
  first needs it (:class:`SharedDeployments`).  Tests on it stay independent: each triggers its
  own DAG run, asserts only on that run's rows and logs (``AirflowStack.run_log``), and starts
  once the tries before it have ended (``AirflowStack.wait_quiet``).  A boot costs about 25 s of
  CPU and 30-60 s on a loaded 2-core machine (bench/stack_cpu.py); sharing it is what keeps the
  suite within its budget.
* PostgreSQL deployments get a database copied from a migrated template (``_pg_template``), as
  SQLite ones get a copied file (carma_airflow/dev/devstack.py): no ``airflow db migrate`` per boot.
* ``airflow_stack``: a throwaway Airflow per test, for tests that must own theirs (a killed or
  restarted scheduler, two schedulers, a config of their own).
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
import uuid
from collections.abc import Callable, Generator, Iterator
from importlib.metadata import version
from pathlib import Path

import pytest
import sqlalchemy as sa

from carma_airflow.dev.devstack import AirflowStack

DAGS = Path(__file__).with_name("dags")
CHECKPOINT_DAGS = Path(__file__).with_name("checkpoint_dags")
DEFAULT_CARMA = {"simulated_gpus": "2xA100-40GB"}

PG_ADMIN = os.environ.get("CARMA_TEST_PG_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres")
BACKENDS = ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
# a teardown needs no orderly hand-back: each round of SIGTERM gets this long before SIGKILL (an
# orderly stop took 10-21 s on a loaded 2-core machine, bench/stack_cpu.py; with 5 s a round the
# teardowns were 5-18 s each, 142 s of the suite's worker time, with 1 s 2-5 s: docs/measured.md)
TEARDOWN_GRACE_S = 1.0
# -- the order in which xdist hands out files -----------------------------------------------
# `--dist loadfile` gives each worker whole files, in collection order with `--no-loadscope-reorder`
# (tools/test-suites; without it xdist orders them by their number of tests): the longest first,
# so the last file a worker starts is a short one and the two workers end together (longest
# processing time first).  Seconds of a worker per file, boots and teardowns included, measured
# with `-n 2 --dist loadfile -m e2e` on a loaded 2-core machine (docs/measured.md, 2026-12-03,
# rounded); a file not listed counts as a short one.  Only the order depends on these figures,
# and only in a run of the end-to-end tests alone (`-m e2e`).
FILE_SECONDS = {
    # 2026-12-06, the three scaled by their own change measured alone at load 7-10 (before -> two
    # runs after): test_schedulers 545 -> 399, 435 s (carma_ha's work 5 s after its ramp), test_citizen
    # 442 -> 283, 314 s (the SIGTERM backlog on two GPUs, backlogs quick once their pace is checked,
    # the driverless deployment beside the deadline test), test_fenced_collocation 365 -> 275, 289 s
    # (the live-cap deployment booted and run beside the other's tests); they were 450, 360 and 355
    "test_schedulers.py": 305,  # then the kill test alone at load 3: 146 -> 99, 111 s (tries released once adopted)
    "test_fenced_collocation.py": 275,
    "test_citizen.py": 245,
    # tests/gpu: the offline install with device.sh's dry run from it, 2026-12-06: 270 s with its
    # wheelhouses in the cache outside the clone (385 s on a busier machine before the evidence's
    # `carma why` ran side by side), 349 s making them first from pip's own cache
    "test_offline_install.py": 300,
    "test_multihost_e2e.py": 230,
    "test_e2e.py": 140,  # 166 -> 122, 122 s alone at load 3 (its own deployments booted beside), 2026-12-06
    "test_mixed_fleet.py": 160,  # 155-185 s alone at a load of 10-12 on 2 cores, 2026-12-06
    "test_checkpoint_resume.py": 80,  # 146 -> 83, 93 s alone at load 2-4 (the 1-minute training), 2026-12-06
    "test_revoke.py": 90,  # 95 -> 64, 65 s alone at load 3 (the blocker released once try 2 waits), 2026-12-06
    "test_mapped.py": 115,
    "test_demo.py": 110,
    "test_newcomer.py": 60,  # 89-90 s; its test alone 47 -> 18, 22 s (the hog released once read), 2026-12-06
    "test_learned_activity.py": 80,
    "test_typos.py": 80,  # 55-100 s, 2026-12-06
    "test_restart.py": 40,  # 64 -> 26, 26 s alone at load 3-4 (the tries released once adopted), 2026-12-06
    "test_load_smoke.py": 40,  # bench/load.py stops its Airflow with 1 s grace: 26-57 -> 23-26 s alone, 2026-12-06
    "test_airflow_page.py": 40,  # 38 -> 22, 24 s alone at load 3-5 (teardown grace, no wait for a picture), 2026-12-06
    "test_oom_sizing.py": 55,  # its test alone 48 -> 12, 13 s (the fillers released at try 2), 2026-12-06
    "test_hook_in_real_try.py": 45,
    "test_retries.py": 40,
    "test_auth.py": 35,
}
SHORT_FILE_SECONDS = 30


@pytest.hookimpl(trylast=True)  # after pytest's own reordering by parametrised fixtures
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The end-to-end files longest first (FILE_SECONDS); within a file, the order pytest chose."""
    if not items or not all(item.get_closest_marker("e2e") for item in items):
        return  # not a run of the end-to-end tests alone: pytest's order

    def key(item: pytest.Item) -> tuple[int, str]:
        path = item.path.name
        return (-FILE_SECONDS.get(path, SHORT_FILE_SECONDS), str(item.path))

    items.sort(key=key)  # stable: a file's tests keep their order


# as for SQLite (carma_airflow/dev/devstack.py): set, every PostgreSQL deployment is migrated at its boot
PG_TEMPLATE = not os.environ.get("CARMA_STACK_FRESH_DB")


def _pg_url(name: str) -> str:
    return PG_ADMIN.rsplit("/", 1)[0] + f"/{name}"


def _pg_template(admin: sa.Engine) -> str:
    """A migrated Airflow metadata database on the server, one per Airflow version, made once
    (``airflow db migrate`` into a database of its own, renamed when complete, so a concurrent
    session sees a whole template or none).  ``CREATE DATABASE ... TEMPLATE`` copies it in about
    0.05 s; a migration per boot cost 9 s (5 s of CPU) on a loaded 2-core machine."""
    name = "carma_e2e_migrated_" + version("apache-airflow").replace(".", "_")
    with admin.connect() as conn:
        if conn.execute(sa.text("select 1 from pg_database where datname = :n"), {"n": name}).first():
            return name
        building = f"{name}_part_{uuid.uuid4().hex[:6]}"
        conn.execute(sa.text(f'CREATE DATABASE "{building}"'))
    try:
        with tempfile.TemporaryDirectory(prefix="carma-e2e-template-") as home:
            AirflowStack(Path(home), DAGS, db_url=_pg_url(building)).migrate()
        with admin.connect() as conn:
            conn.execute(sa.text(f'ALTER DATABASE "{building}" RENAME TO "{name}"'))
    except sa.exc.ProgrammingError:  # another session made it first (duplicate name): theirs is whole
        pass
    finally:
        with admin.connect() as conn:
            conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{building}" WITH (FORCE)'))
    return name


def _pg_database() -> Generator[str, None, None]:
    """A fresh PostgreSQL database for one deployment, a copy of the migrated template (its
    stack is made ``migrated``: no `airflow db migrate` at its boot)."""
    name = f"carma_e2e_{uuid.uuid4().hex[:10]}"
    admin = sa.create_engine(PG_ADMIN, isolation_level="AUTOCOMMIT")
    try:
        template = f' TEMPLATE "{_pg_template(admin)}"' if PG_TEMPLATE else ""
        for attempt in range(10):
            try:
                with admin.connect() as conn:
                    conn.execute(sa.text(f'CREATE DATABASE "{name}"{template}'))
                break
            except sa.exc.OperationalError as exc:  # another session copies the template right now
                if "being accessed by other users" not in str(exc.orig) or attempt == 9:
                    raise
                time.sleep(0.5)
    except sa.exc.OperationalError as exc:
        pytest.fail(f"PostgreSQL at {PG_ADMIN} is not reachable ({exc.orig}); start it (make prereqs does)")
    try:
        yield _pg_url(name)
    finally:
        with admin.connect() as conn:
            conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


def _database(kind: str) -> Generator[str | None, None, None]:
    if kind == "sqlite":
        yield None
    else:
        yield from _pg_database()


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> Iterator[str | None]:
    yield from _database(request.param)


@pytest.fixture
def airflow_stack(tmp_path: Path, backend: str | None) -> Iterator[Callable[..., AirflowStack]]:
    made: list[AirflowStack] = []

    def start(**carma: str) -> AirflowStack:
        home = tmp_path / f"home{len(made)}"
        home.mkdir()
        if backend is not None:
            carma.setdefault("store_url", backend)
        stack = AirflowStack(home, DAGS, db_url=backend, migrated=PG_TEMPLATE and backend is not None, **carma)
        made.append(stack)
        stack.start()
        return stack

    yield start
    for stack in made:
        stack.stop(grace_s=TEARDOWN_GRACE_S)


# -- the shared deployment -----------------------------------------------------------------
class SharedDeployments:
    """The shared deployment of each backend, booted when a test first asks for it and kept to
    the end of the session.  (A session fixture parametrised by backend is torn down and booted
    again whenever the order of tests switches backend; with whole files per worker,
    ``--dist loadfile``, that is about once per file: one worker booted it 8 times.)"""

    def __init__(self, tmp_path_factory: pytest.TempPathFactory) -> None:
        self.tmp = tmp_path_factory
        self.stacks: dict[str, AirflowStack] = {}
        self.failed: dict[str, str] = {}
        self.databases: list[Generator[str | None, None, None]] = []  # closed at the end: DROP DATABASE

    def get(self, kind: str) -> AirflowStack:
        if kind in self.failed:
            pytest.fail(f"the shared {kind} deployment did not start: {self.failed[kind]}")
        if kind not in self.stacks:
            try:
                self.stacks[kind] = self._boot(kind)
            except BaseException as exc:
                self.failed[kind] = f"{type(exc).__name__}: {exc}"[:4000]
                raise
        return self.stacks[kind]

    def _boot(self, kind: str) -> AirflowStack:
        database = _database(kind)
        self.databases.append(database)
        url = next(database)
        dags = self.tmp.mktemp("default-dags")
        shutil.copytree(DAGS, dags, dirs_exist_ok=True)
        shutil.copytree(CHECKPOINT_DAGS, dags, dirs_exist_ok=True)
        carma = dict(DEFAULT_CARMA)
        if url is not None:
            carma["store_url"] = url
        migrated = PG_TEMPLATE and url is not None
        stack = AirflowStack(self.tmp.mktemp("default-home"), dags, db_url=url, migrated=migrated, **carma)
        try:
            stack.start()
        except BaseException:
            stack.stop(grace_s=TEARDOWN_GRACE_S)
            raise
        return stack

    def close(self) -> None:
        for stack in self.stacks.values():
            stack.stop(grace_s=TEARDOWN_GRACE_S)
        for database in self.databases:
            database.close()  # the generator's finally drops a PostgreSQL database


@pytest.fixture(scope="session")
def shared_deployments(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SharedDeployments]:
    shared = SharedDeployments(tmp_path_factory)
    try:
        yield shared
    finally:
        shared.close()


@pytest.fixture(scope="session", params=BACKENDS)
def shared_backend(request: pytest.FixtureRequest) -> str:
    """The backend of the shared deployment a test runs on (a test that needs only one of them
    parametrises this indirectly)."""
    return str(request.param)


@pytest.fixture
def default_deployment(shared_backend: str, shared_deployments: SharedDeployments) -> AirflowStack:
    return shared_deployments.get(shared_backend)


@pytest.fixture
def default_stack(default_deployment: AirflowStack) -> AirflowStack:
    """The shared deployment, once every try an earlier test started there has ended."""
    default_deployment.wait_quiet()
    return default_deployment
