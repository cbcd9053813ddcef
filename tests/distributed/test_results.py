"""Remote try states read in bulk: one backend round trip per heartbeat for N live tries, none in
poll, and a try's end read after an outage of the result backend (real Redis, real databases)."""

from __future__ import annotations

import contextlib
import secrets
import select
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import pytest
import sqlalchemy as sa
from celery import Celery
from dist_helpers import Workload, carma_settings, live_host

from carma_airflow.distributed.cluster import ClusterMonitor
from carma_airflow.distributed.dispatch import CeleryHandle, CeleryLauncher
from carma_airflow.distributed.results import Chores, read_path
from carma_airflow.store.store import Store

pytestmark = pytest.mark.db

TRIES = 25
REPLY = {"host": "gpu-a", "exitcode": 0, "result": None, "visible_devices": "GPU-1"}


@pytest.fixture
def prefix(redis_url: str) -> Iterator[str]:
    """A queue prefix of this test; its Redis queues (never consumed: no worker runs) are removed after."""
    import redis

    name = f"carma-test-{secrets.token_hex(3)}-"
    yield name
    client = redis.Redis.from_url(redis_url)
    for key in [*client.scan_iter(f"{name}*"), *client.scan_iter(f"_kombu.binding*.{name}*")]:
        client.delete(key)
    client.close()


def _launch(launcher: CeleryLauncher, tmp_path: Path, n: int) -> list[CeleryHandle]:
    handles = [launcher.launch(Workload(task_id=f"t{i}"), {}, tmp_path / "r.json", "gpu-a") for i in range(n)]  # type: ignore[arg-type]
    assert all(isinstance(h, CeleryHandle) and h.poll() is None for h in handles)
    return handles  # type: ignore[return-value]


def _count_redis_commands(app: Celery, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every command the result backend's Redis client sends (the boundary: passed through, counted)."""
    sent: list[str] = []
    client = app.backend.client
    real = client.execute_command

    def counted(*args: Any, **kwargs: Any) -> Any:
        sent.append(str(args[0]))
        return real(*args, **kwargs)

    monkeypatch.setattr(client, "execute_command", counted)
    return sent


@contextlib.contextmanager
def _count_result_selects() -> Iterator[list[str]]:
    """Every SELECT on Celery's result table, on any engine (Celery's database backend makes one per session)."""
    sent: list[str] = []

    def seen(_conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        if statement.lstrip().upper().startswith("SELECT") and "celery_taskmeta" in statement:
            sent.append(statement)

    sa.event.listen(sa.Engine, "before_cursor_execute", seen)
    try:
        yield sent
    finally:
        sa.event.remove(sa.Engine, "before_cursor_execute", seen)


def test_n_live_tries_cost_one_redis_mget_per_refresh_and_none_in_poll(
    tmp_path: Path, store: Store, redis_url: str, prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    app = Celery("carma-test", broker=redis_url, backend=redis_url)
    live_host(store, "gpu-a")
    s = carma_settings(tmp_path, queue_prefix=prefix)
    launcher = CeleryLauncher(app, store, ClusterMonitor(store, host_timeout_s=60), s, background=False)
    handles = _launch(launcher, tmp_path, TRIES)
    # the hosts' workers: one try done, one failed, one running
    app.backend.store_result(handles[0].celery_id, REPLY, "SUCCESS")
    app.backend.store_result(handles[1].celery_id, RuntimeError("worker pool died"), "FAILURE")
    app.backend.store_result(handles[2].celery_id, {"pid": 1}, "STARTED")
    sent = _count_redis_commands(app, monkeypatch)

    launcher.refresh()
    assert sent == ["MGET"]  # one round trip for 25 tries, not 25 GETs
    del sent[:]
    ended = [h.poll() for h in handles]
    assert sent == ["DEL", "DEL"]  # poll reads the snapshot; only the two ended tries' results are forgotten
    assert ended[0] is not None and ended[0].exitcode == 0 and ended[0].lost is None
    assert ended[1] is not None and "failed on host 'gpu-a'" in (ended[1].lost or "")
    assert "worker pool died" in (ended[1].lost or "")
    assert all(e is None for e in ended[2:]) and handles[2].state == "STARTED" and handles[3].state == "PENDING"

    del sent[:]
    launcher.refresh()
    assert sent == ["MGET"]
    assert launcher.results.watched == TRIES - 2
    launcher.close()
    assert store.dispatch("d/t0/r/-1/1").state == "ended"  # type: ignore[union-attr]
    assert app.backend.get(app.backend.get_key_for_task(handles[0].celery_id)) is None  # forgotten
    for h in handles:
        app.backend.forget(h.celery_id)


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def db_backend(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """Celery's database result backend (``db+...``) on SQLite or on a throwaway PostgreSQL database."""
    if request.param == "sqlite":
        return f"db+sqlite:///{tmp_path / 'celery-results.db'}"
    pg_url: str = request.getfixturevalue("pg_url")
    return "db+" + pg_url


def test_n_live_tries_cost_one_select_per_refresh_on_the_database_backend(
    tmp_path: Path, store: Store, redis_url: str, db_backend: str, prefix: str
) -> None:
    app = Celery("carma-test", broker=redis_url, backend=db_backend)
    assert read_path(app.backend) == "select"
    live_host(store, "gpu-a")
    s = carma_settings(tmp_path, queue_prefix=prefix)
    launcher = CeleryLauncher(app, store, ClusterMonitor(store, host_timeout_s=60), s, background=False)
    handles = _launch(launcher, tmp_path, TRIES)
    app.backend.store_result(handles[5].celery_id, REPLY, "SUCCESS")  # also creates Celery's tables
    with _count_result_selects() as sent:
        launcher.refresh()
        assert len(sent) == 1 and " IN " in sent[0].upper()  # one SELECT ... WHERE task_id IN (25 ids)
        ended = [h.poll() for h in handles]
        assert len(sent) == 1
    assert ended[5] is not None and ended[5].exitcode == 0
    assert sum(e is not None for e in ended) == 1
    launcher.close()


class FlakyProxy:
    """A TCP proxy in front of a real server that can cut every connection (and refuse to carry
    new ones) or stall (hold the bytes, as a hung network does), then carry traffic again."""

    def __init__(self, target: str) -> None:
        where = urlparse(target)
        self.target = (where.hostname or "127.0.0.1", where.port or 6379)
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        self.url = where._replace(netloc=f"127.0.0.1:{self.port}").geturl()
        self.mode = "up"
        self.socks: list[socket.socket] = []
        self.lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.server.accept()
            except OSError:
                return
            if self.mode == "cut":
                client.close()
                continue
            upstream = socket.create_connection(self.target)
            with self.lock:
                self.socks += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        with contextlib.suppress(OSError, ValueError):
            while True:
                if self.mode == "stall":
                    time.sleep(0.02)
                    continue
                if not select.select([src], [], [], 0.05)[0]:
                    continue
                data = src.recv(65536)
                while self.mode == "stall":  # bytes that arrive while stalled are held
                    time.sleep(0.02)
                if not data or self.mode == "cut":
                    break
                dst.sendall(data)
        for sock in (src, dst):
            with contextlib.suppress(OSError):
                sock.close()

    def cut(self) -> None:
        self.mode = "cut"
        with self.lock:
            socks, self.socks = self.socks, []
        for sock in socks:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
                sock.close()

    def stall(self) -> None:
        self.mode = "stall"

    def up(self) -> None:
        self.mode = "up"

    def close(self) -> None:
        self.cut()
        self.server.close()


def _until(check: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


@pytest.mark.parametrize("outage", ["cut", "stall"])
def test_a_try_that_ends_during_a_backend_outage_is_read_when_the_backend_is_back(
    tmp_path: Path, store: Store, redis_url: str, prefix: str, outage: str
) -> None:
    proxy = FlakyProxy(redis_url)
    app = Celery("carma-test", broker=redis_url, backend=proxy.url)  # results go through the proxy
    worker = Celery("carma-test-worker", backend=redis_url)  # a host's worker reaches Redis directly
    live_host(store, "gpu-a")
    s = carma_settings(tmp_path, queue_prefix=prefix, host_timeout_seconds="60")
    cluster = ClusterMonitor(store, host_timeout_s=60)
    launcher = CeleryLauncher(app, store, cluster, s, period_s=0.1, stale_s=1.0)  # the background reader
    handles = _launch(launcher, tmp_path, 3)
    try:
        _until(lambda: launcher.results.state_of(handles[2].celery_id) is not None, 10, "a first read")

        getattr(proxy, outage)()
        worker.backend.store_result(handles[0].celery_id, REPLY, "SUCCESS")  # ends while nobody can read it
        worker.backend.store_result(handles[1].celery_id, {"pid": 1}, "STARTED")
        began = time.monotonic()
        slowest = 0.0
        while time.monotonic() - began < 2.5:  # heartbeats through the outage, past stale_s
            t0 = time.perf_counter()
            launcher.refresh()
            ended = [h.poll() for h in handles]
            slowest = max(slowest, time.perf_counter() - t0)
            assert ended == [None, None, None]
            time.sleep(0.1)
        assert slowest < 0.05, f"a heartbeat took {slowest:.3f} s during the outage"
        assert launcher.results.state_of(handles[2].celery_id) is None  # old news is not used
        if outage == "cut":
            assert launcher.results.last_error is not None

        proxy.up()
        _until(lambda: handles[0].poll() is not None, 15, "the end of the try once the backend is back")
        ended0 = handles[0].poll()
        assert ended0 is not None and ended0.exitcode == 0 and ended0.lost is None
        assert handles[1].poll() is None and handles[1].state == "STARTED"
        assert handles[2].poll() is None  # PENDING, well within its start timeout: not declared lost
        assert launcher.results.last_error is None
    finally:
        launcher.close()
        proxy.close()
        for h in handles:
            worker.backend.forget(h.celery_id)
    assert store.dispatch("d/t0/r/-1/1").state == "ended"  # type: ignore[union-attr]
    assert store.dispatch("d/t1/r/-1/1").state == "sent"  # type: ignore[union-attr]


def test_a_failed_store_write_is_retried_until_it_succeeds() -> None:
    chores = Chores(retry_s=0.05)
    attempts: list[float] = []

    def flaky_write() -> None:
        attempts.append(time.monotonic())
        if len(attempts) < 3:
            raise ConnectionError("store unreachable")

    chores.put("recording a dispatch end", flaky_write, until_done=True)
    chores.put("revoking a task", lambda: (_ for _ in ()).throw(ConnectionError("broker down")))  # tried once
    _until(lambda: chores.pending == 0, 5, "the chores")
    assert len(attempts) == 3
    assert attempts[2] - attempts[1] >= 0.04  # retried after retry_s, not in a busy loop
    chores.close()
