"""carma's metrics go through Airflow's real Stats to a StatsD listener on a loopback UDP socket.

Airflow configures its Stats backend from ``[metrics]`` when ``stats.initialize`` is called
(``BaseExecutor.__init__`` does it in the scheduler); the fixture sets ``statsd_on`` and the
listener's port through the environment, initialises Stats as the executor would, and restores
Airflow's default backend afterwards.
"""

from __future__ import annotations

import os
import re
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

os.environ.setdefault("AIRFLOW__API_AUTH__JWT_SECRET", "unit-test-secret")

from airflow.observability import stats
from airflow.observability.metrics import stats_utils

from carma_airflow.core.gpu import ClusterView, GpuHealth, GpuState, Tenant, gpu_spec
from carma_airflow.core.placer import Placer
from carma_airflow.core.policies import make_policy
from carma_airflow.core.risk import MetricWindow
from carma_airflow.executor.bookkeeping import metrics

ROOT = Path(__file__).resolve().parents[2]
A100 = gpu_spec("A100-40GB")


class Listener:
    """A StatsD server as small as it gets: collects the datagrams sent to one UDP port."""

    def __init__(self) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.settimeout(0.2)
        self.port: int = self.sock.getsockname()[1]

    def receive(self, count: int, timeout: float = 3.0) -> list[str]:
        """Wait for ``count`` datagrams, then give a short grace for unexpected extra ones."""
        out: list[str] = []
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                data, _ = self.sock.recvfrom(65535)
            except TimeoutError:
                if len(out) >= count:
                    break
                continue
            out.extend(data.decode().splitlines())
        return out


def _init_stats() -> None:
    stats.initialize(factory=stats_utils.get_stats_factory(), export_legacy_names=False)


@pytest.fixture
def statsd(monkeypatch: pytest.MonkeyPatch) -> Iterator[Listener]:
    listener = Listener()
    monkeypatch.setenv("AIRFLOW__METRICS__STATSD_ON", "True")
    monkeypatch.setenv("AIRFLOW__METRICS__STATSD_HOST", "127.0.0.1")
    monkeypatch.setenv("AIRFLOW__METRICS__STATSD_PORT", str(listener.port))
    monkeypatch.setenv("AIRFLOW__METRICS__STATSD_PREFIX", "airflow")
    _init_stats()
    yield listener
    listener.sock.close()
    monkeypatch.undo()
    _init_stats()  # back to whatever the environment configures (no metrics by default)


def test_counters_gauges_and_timers_arrive_as_statsd_datagrams(statsd: Listener) -> None:
    metrics.placed("interference-aware", shared=True)
    metrics.placed("interference-aware", shared=False)
    metrics.waiting(7)
    metrics.running(3)
    metrics.wait_seconds(12.5)
    metrics.oom("dag", "train")
    metrics.recovery("retried")
    metrics.recovery("gave_up")
    metrics.recovery("recovered")
    metrics.never_fits("dag", "huge")
    metrics.decision_time(3.25)
    assert statsd.receive(12) == [
        "airflow.carma.placements:1|c",
        "airflow.carma.shared_placements:1|c",
        "airflow.carma.placements:1|c",
        "airflow.carma.waiting:7|g",
        "airflow.carma.running:3|g",
        "airflow.carma.wait_time:12500.000000|ms",
        "airflow.carma.oom:1|c",
        "airflow.carma.recovery.retried:1|c",
        "airflow.carma.recovery.gave_up:1|c",
        "airflow.carma.recovery.recovered:1|c",
        "airflow.carma.never_fits:1|c",
        "airflow.carma.decision_time:3.250000|ms",
    ]


def _view() -> ClusterView:
    idle = GpuState("GPU-aaa", 0, A100, free_mib=40960, used_mib=0, window=MetricWindow())
    tenant = Tenant("k", "dag.train", reserved_mib=20000, placed_at=0.0, observed_mib=20000)
    hot = GpuState(
        "GPU-bbb",
        1,
        A100,
        free_mib=20960,
        used_mib=20000,
        window=MetricWindow.constant(0.9, 0.5, 0.2),
        tenants=(tenant,),
        host="node-1",
    )
    lost = GpuState(
        "MIG-4f1c2d3e-aaaa-bbbb-cccc-0123456789ab",
        1,
        A100,
        free_mib=0,
        used_mib=0,
        window=MetricWindow(),
        health=GpuHealth.QUARANTINED,
    )
    return ClusterView(100.0, (idle, hot, lost))


def test_per_gpu_gauges_name_each_gpu_and_carry_the_placers_view(statsd: Listener) -> None:
    facts = Placer(make_policy("interference-aware")).facts(_view())
    metrics.gpu_gauges(facts)
    got = statsd.receive(27)
    assert got[:9] == [
        "airflow.carma.gpu.0.memory_used_mib:0|g",
        "airflow.carma.gpu.0.memory_free_mib:40960|g",
        "airflow.carma.gpu.0.memory_usable_mib:40448|g",  # less the 512 MiB reserve
        "airflow.carma.gpu.0.sm_activity:0.0|g",
        "airflow.carma.gpu.0.sm_occupancy:0.0|g",
        "airflow.carma.gpu.0.dram_activity:0.0|g",
        "airflow.carma.gpu.0.tenants:0|g",
        "airflow.carma.gpu.0.high_risk:0|g",
        "airflow.carma.gpu.0.health:0|g",
    ]
    assert got[9:18] == [
        "airflow.carma.gpu.1.memory_used_mib:20000|g",
        "airflow.carma.gpu.1.memory_free_mib:20960|g",
        "airflow.carma.gpu.1.memory_usable_mib:20448|g",
        "airflow.carma.gpu.1.sm_activity:0.9|g",
        "airflow.carma.gpu.1.sm_occupancy:0.5|g",
        "airflow.carma.gpu.1.dram_activity:0.2|g",
        "airflow.carma.gpu.1.tenants:1|g",
        "airflow.carma.gpu.1.high_risk:1|g",  # 0.9 >= 0.80 and 0.5 >= 0.45: the paper's rule
        "airflow.carma.gpu.1.health:0|g",
    ]
    # a MIG instance shares its parent's index: its name gets a suffix from its UUID
    assert got[18] == "airflow.carma.gpu.1_mig_0123456789ab.memory_used_mib:0|g"
    assert got[26] == "airflow.carma.gpu.1_mig_0123456789ab.health:2|g"
    assert len(got) == 27
    for line in got:  # every name passes Airflow's validator unchanged
        name = line.split(":", 1)[0]
        assert stats.normalize_name_for_stats(name, log_warning=False) == name and len(name) <= 250


def test_tags_reach_statsd_when_influxdb_tags_are_on(statsd: Listener, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AIRFLOW__METRICS__STATSD_INFLUXDB_ENABLED", "True")
    _init_stats()
    metrics.placed("most-free-memory", shared=False)
    metrics.gpu_gauges(Placer(make_policy("interference-aware")).facts(_view())[1:2])
    got = statsd.receive(10)
    assert got[0] == "airflow.carma.placements,policy=most-free-memory,shared=false:1|c"
    assert got[1] == (
        "airflow.carma.gpu.1.memory_used_mib,gpu_index=1,gpu_uuid=GPU-bbb,gpu_model=A100-40GB,host=node-1:20000|g"
    )
    assert len(got) == 10


def test_held_store_writes_are_a_gauge(statsd: Listener) -> None:
    metrics.pending_writes(24)
    metrics.pending_writes(0)
    assert statsd.receive(2) == ["airflow.carma.store.pending_writes:24|g", "airflow.carma.store.pending_writes:0|g"]


def test_an_unknown_recovery_outcome_is_dropped_not_raised(statsd: Listener) -> None:
    metrics.recovery("exploded")  # type: ignore[arg-type]
    metrics.waiting(0)
    assert statsd.receive(1) == ["airflow.carma.waiting:0|g"]


def test_the_executors_own_initialisation_configures_the_stats_these_metrics_use(
    statsd: Listener, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No explicit initialise: building CarmaExecutor (BaseExecutor.__init__) reads [metrics]."""
    from airflow._shared.observability.metrics.base_stats_logger import NoStatsLogger

    from carma_airflow.executor import CarmaExecutor

    stats.initialize(factory=NoStatsLogger, export_legacy_names=False)
    monkeypatch.setenv("AIRFLOW_HOME", str(tmp_path))
    CarmaExecutor(parallelism=4)
    metrics.never_fits()
    assert statsd.receive(1) == ["airflow.carma.never_fits:1|c"]


def test_every_metric_is_documented() -> None:
    doc = (ROOT / "docs" / "metrics.md").read_text()
    rows = dict(re.findall(r"^\| `([a-z0-9_.<>]+)` \| (\w+) \|", doc, flags=re.MULTILINE))
    assert rows == metrics.ALL_METRICS
