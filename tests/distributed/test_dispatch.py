"""The Celery launcher against a real Redis broker, and the worker's checks before running a try."""

from __future__ import annotations

import time
import uuid
from datetime import datetime, timezone
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from celery import Celery
from dist_helpers import Workload, carma_settings, live_host

from carma_airflow.config.settings import CarmaSettings
from carma_airflow.distributed import celery_tasks
from carma_airflow.distributed.cluster import ClusterMonitor
from carma_airflow.distributed.dispatch import CeleryLauncher
from carma_airflow.distributed.errors import WrongHostError
from carma_airflow.store.records import DispatchRecord
from carma_airflow.store.store import Store

pytestmark = pytest.mark.db


settings = carma_settings


def test_a_try_no_worker_takes_is_lost_with_what_to_start(tmp_path: Path, store: Store, redis_url: str) -> None:
    app = Celery("carma-test", broker=redis_url, backend=redis_url)
    s = settings(tmp_path, host_timeout_seconds="1", queue_prefix="carma-test-")
    live_host(store, "gpu-a")
    launcher = CeleryLauncher(app, store, ClusterMonitor(store, host_timeout_s=60), s)
    handle = launcher.launch(Workload(), {"CUDA_VISIBLE_DEVICES": "GPU-1"}, tmp_path / "r.json", "gpu-a")  # type: ignore[arg-type]
    assert handle.pid is None and handle.poll() is None
    assert store.dispatch("d/t/r/-1/1").state == "sent"  # type: ignore[union-attr]
    deadline = time.time() + 10
    ended = None
    while ended is None and time.time() < deadline:
        time.sleep(0.3)
        ended = handle.poll()
    assert ended is not None and ended.exitcode is None and ended.result is None
    assert "no Celery worker took the try from queue 'carma-test-gpu-a'" in (ended.lost or "")
    launcher.close()  # the store write is made off the heartbeat: close finishes it
    assert store.dispatch("d/t/r/-1/1").state == "lost"  # type: ignore[union-attr]


def test_rabbitmq_as_the_broker_carries_the_try_to_the_hosts_queue(
    tmp_path: Path, store: Store, rabbitmq_url: str, redis_url: str
) -> None:
    # RabbitMQ as Celery's broker (results in Redis): the try lands in the host's own queue
    app = Celery("carma-test", broker=rabbitmq_url, backend=redis_url)
    s = settings(tmp_path, queue_prefix=f"carma-test-{uuid.uuid4().hex[:6]}-")
    live_host(store, "gpu-a")
    launcher = CeleryLauncher(app, store, ClusterMonitor(store, host_timeout_s=60), s)
    handle = launcher.launch(Workload(), {"CUDA_VISIBLE_DEVICES": "GPU-1"}, tmp_path / "r.json", "gpu-a")  # type: ignore[arg-type]
    assert handle.poll() is None and store.dispatch("d/t/r/-1/1").state == "sent"  # type: ignore[union-attr]
    queue = f"{s.queue_prefix}gpu-a"
    with app.connection_for_read() as conn:
        message = conn.SimpleQueue(queue, no_ack=True).get(timeout=10)
    assert message.headers["task"] == "carma.run_try" and message.headers["id"] == handle.celery_id  # type: ignore[attr-defined]
    payload = message.decode()[0][0]
    assert payload["host"] == "gpu-a" and payload["env"] == {"CUDA_VISIBLE_DEVICES": "GPU-1"}
    with app.connection_for_write() as conn:
        conn.default_channel.queue_delete(queue)


def test_a_restarted_executor_follows_tries_still_in_flight(tmp_path: Path, store: Store, redis_url: str) -> None:
    app = Celery("carma-test", broker=redis_url, backend=redis_url)
    s = settings(tmp_path, queue_prefix="carma-test-")
    live_host(store, "gpu-a")
    first = CeleryLauncher(app, store, ClusterMonitor(store, host_timeout_s=60), s)
    sent = first.launch(Workload(), {"CUDA_VISIBLE_DEVICES": "GPU-1"}, tmp_path / "r.json", "gpu-a")  # type: ignore[arg-type]
    # the executor restarts: a new launcher finds the dispatch in the store and follows the same Celery task
    second = CeleryLauncher(app, store, ClusterMonitor(store, host_timeout_s=60), s)
    again = second.reattach(SimpleNamespace(key="d/t/r/-1/1"))
    assert again is not None and again.celery_id == sent.celery_id and again.host == "gpu-a"  # type: ignore[attr-defined]
    assert again.poll() is None  # still in the queue: in flight
    store.end_dispatch("d/t/r/-1/1", time.time(), "ended")
    assert second.reattach(SimpleNamespace(key="d/t/r/-1/1")) is None  # ended: nothing to follow
    assert second.reattach(SimpleNamespace(key="never/sent")) is None


def test_an_unreachable_broker_ends_the_try_at_once(tmp_path: Path, store: Store) -> None:
    app = Celery("carma-test", broker="redis://127.0.0.1:1/0", backend="redis://127.0.0.1:1/0")
    app.conf.broker_connection_retry = False
    app.conf.broker_connection_max_retries = 0
    app.conf.broker_connection_timeout = 1
    # the Redis result backend, also unreachable, would try again 20 times a second apart (Celery's
    # default retry policy) before send_task gives up: 19 s of this test's 20; once is enough here
    app.conf.result_backend_transport_options = {"retry_policy": {"max_retries": 0}}
    launcher = CeleryLauncher(app, store, ClusterMonitor(store, host_timeout_s=60), settings(tmp_path))
    handle = launcher.launch(Workload(2), {}, tmp_path / "r.json", "gpu-a")  # type: ignore[arg-type]
    ended = handle.poll()
    assert ended is not None and "could not send the try to Celery queue 'carma-gpu-a'" in (ended.lost or "")
    assert store.dispatch("d/t/r/-1/2").state == "lost"  # type: ignore[union-attr]


@pytest.fixture
def worker_side(tmp_path: Path, store: Store, monkeypatch: pytest.MonkeyPatch) -> CarmaSettings:
    s = settings(tmp_path, host="gpu-b")
    monkeypatch.setattr(celery_tasks, "_settings", lambda: s)
    monkeypatch.setattr(celery_tasks, "_store", lambda: store)
    return s


def payload(host: str) -> dict[str, Any]:
    return {"key": "d/t/r/-1/1", "host": host, "workload": "{}", "env": {}, "result_name": "x.json"}


def test_the_worker_refuses_a_try_placed_on_another_host(worker_side: CarmaSettings) -> None:
    with pytest.raises(WrongHostError, match="placed on host 'gpu-a' but reached the worker of 'gpu-b'"):
        celery_tasks.run_try(payload("gpu-a"))


def test_the_worker_skips_a_try_declared_lost(worker_side: CarmaSettings, store: Store) -> None:
    now = datetime.now(tz=timezone.utc)
    store.record_dispatch(DispatchRecord("d/t/r/-1/1", "gpu-b", "carma-gpu-b", "c", now))
    store.end_dispatch("d/t/r/-1/1", now, "lost", "host gpu-b is out of service")
    reply = celery_tasks.run_try(payload("gpu-b"))
    assert "lost (host gpu-b is out of service)" in reply["skipped"]


def test_paths_in_the_env_are_the_worker_hosts_own(worker_side: CarmaSettings) -> None:
    env = celery_tasks.host_env(
        {"CUDA_VISIBLE_DEVICES": "GPU-SIM-gpu-b-0001", "CARMA_RESULT_FILE": "/scheduler/r.json"}, "ti.json", worker_side
    )
    state = Path(worker_side.state_dir)
    assert env["CARMA_RESULT_FILE"] == str(state / "results" / "ti.json")
    assert env["CARMA_SIM_LEDGER"] == str(state / "simulated-gpus.json")
    assert env["CUDA_VISIBLE_DEVICES"] == "GPU-SIM-gpu-b-0001"


def test_dispatch_imports_neither_the_executor_nor_airflow() -> None:
    # no import circle executor <-> distributed: the request key comes from carma_airflow.keys
    import subprocess
    import sys

    code = (
        "import sys, carma_airflow.distributed.dispatch as d\n"
        "from types import SimpleNamespace as N\n"
        "assert d.placement_key(N(ti=N(key=N(dag_id='d', task_id='t', run_id='r', map_index=2, try_number=3))))"
        " == 'd/t/r/2/3'\n"
        "print(sorted(m for m in ('carma_airflow.executor.airflow.executor', 'airflow') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr
