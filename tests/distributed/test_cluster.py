"""The cluster view: hosts in and out of placement by their agent's and worker's heartbeats."""

from __future__ import annotations

import math
from datetime import datetime, timezone
from pathlib import Path

import pytest

from carma_airflow.distributed.cluster import ClusterMonitor
from carma_airflow.distributed.samples import from_json, to_json
from carma_airflow.monitor.base import GpuSample, ProcessUsage
from carma_airflow.store.records import HostRecord
from carma_airflow.store.store import Store

pytestmark = pytest.mark.db


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def utc(ts: float) -> datetime:
    return datetime.fromtimestamp(ts, tz=timezone.utc)


def sample(host: str, index: int, at: float, smact: float = 0.2) -> GpuSample:
    return GpuSample(f"GPU-{host}-{index}", index, "A100-40GB", host, 40960, 1000, 39960, at, smact=smact, smocc=0.1)


def publish(store: Store, host: str, at: float, worker_at: float | None, smact: float = 0.2) -> None:
    store.publish_host(
        HostRecord(
            host,
            f"carma-{host}",
            utc(at),
            utc(0),
            "simulated",
            gpus=tuple(to_json(sample(host, i, at, smact)) for i in range(2)),
        )
    )
    store.worker_beat(host, None if worker_at is None else utc(worker_at))


def test_sample_round_trip() -> None:
    s = GpuSample("GPU-1", 3, "H100-80GB", "h", 81920, 10, 81910, 5.5, busy=0.5, processes=(ProcessUsage(9, 10),))
    assert from_json(to_json(s), "h") == s
    shared = GpuSample("GPU-2", 0, "A100-40GB", "h", 40960, 10, 40950, 6.0,
                       processes=(ProcessUsage(7, 5, 0.42), ProcessUsage(8, 5, None)))  # fmt: skip
    assert from_json(to_json(shared), "h") == shared  # each process's share of SM time travels too
    older = {**to_json(shared), "processes": [[7, 5], [8, 5]]}  # an agent from before sm_util
    assert [(p.pid, p.sm_util) for p in from_json(older, "h").processes] == [(7, None), (8, None)]


def test_hosts_leave_and_rejoin_placement_by_heartbeats(store: Store) -> None:
    clock = Clock(1000.0)
    view = ClusterMonitor(store, host_timeout_s=10, period_s=1, clock=clock)
    publish(store, "a", 1000, 1000)
    publish(store, "b", 1000, 1000)
    assert sorted(view.latest()) == ["GPU-a-0", "GPU-a-1", "GPU-b-0", "GPU-b-1"]
    assert view.host_status("a").live

    # b's agent goes on beating but its worker goes silent: b leaves placement, its tries are lost
    for t in range(1001, 1013):
        clock.now = float(t)
        publish(store, "a", t, t, smact=0.3)
        publish(store, "b", t, 1000)
        view.refresh(force=True)
    status = view.host_status("b")
    assert not status.live and status.lost and "Celery worker sent no heartbeat" in status.reason
    assert sorted(view.latest()) == ["GPU-a-0", "GPU-a-1"]
    assert len(view.window("GPU-a-0").smact) == 13  # every new reading, in memory
    assert view.age("GPU-a-0") == 0.0 and view.age("GPU-x") == math.inf

    # its worker comes back: b is placed on again
    clock.now = 1013.0
    publish(store, "b", 1013, 1013)
    view.refresh(force=True)
    assert view.host_status("b").live and "GPU-b-0" in view.latest()

    # a worker that stopped cleanly takes its host out at once
    clock.now = 1014.0
    publish(store, "a", 1014, None)
    view.refresh(force=True)
    assert "its Celery worker is not running" in view.host_status("a").reason


def test_silence_is_measured_on_this_clock_not_the_hosts(store: Store) -> None:
    clock = Clock(1000.0)
    view = ClusterMonitor(store, host_timeout_s=10, period_s=1, clock=clock)
    ahead = 3600.0  # the GPU host's clock runs an hour fast
    for t in range(1000, 1030, 5):
        clock.now = float(t)
        publish(store, "a", t + ahead, t + ahead)
        view.refresh(force=True)
        assert view.host_status("a").live
    clock.now = 1045.0  # nothing new for 20 s of our time
    view.refresh(force=True)
    assert view.host_status("a").lost and "agent sent no heartbeat for 20 s" in view.host_status("a").reason


def test_an_unreadable_store_declares_no_host_lost(tmp_path: Path) -> None:
    good = Store(f"sqlite:///{tmp_path / 'carma.db'}")
    good.migrate()
    clock = Clock(1000.0)
    view = ClusterMonitor(good, host_timeout_s=5, period_s=1, clock=clock)
    publish(good, "a", 1000, 1000)
    view.refresh(force=True)
    view.store = Store(f"sqlite:///{tmp_path / 'missing' / 'x.db'}")
    clock.now = 1100.0
    view.refresh(force=True)
    status = view.host_status("a")
    assert view.last_error() is not None and not status.live and not status.lost
