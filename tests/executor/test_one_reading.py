"""One heartbeat acts on one monitor reading: the samples, activity windows and ages the placement
pass sees were all taken at one moment, never a window newer than its sample (issue 24 item 9)."""

from __future__ import annotations

import math
import threading
import time
from pathlib import Path

from carma_airflow.core.gpu import parse_gpu_list
from carma_airflow.monitor.base import GpuSample, Reading
from carma_airflow.monitor.ledger import Ledger
from carma_airflow.monitor.sampler import Monitor
from carma_airflow.monitor.simulated import SimulatedProbe


def test_a_reading_is_one_moment_of_the_monitor(tmp_path: Path) -> None:
    probe = SimulatedProbe(Ledger(tmp_path / "gpus.json"), parse_gpu_list("2xA100-40GB"))
    monitor = Monitor(probe, period_s=60.0)
    assert monitor.reading() == {} and monitor.reading().windows == {}
    monitor.sample_once()
    first = monitor.reading()
    assert set(first) == set(monitor.latest()) and len(first) == 2
    assert all(len(first.windows[u].smact) == 1 for u in first)
    assert all(0.0 <= first.ages[u] < 5.0 for u in first)
    monitor.sample_once()  # a newer sample: the reading taken before it does not change
    assert all(len(first.windows[u].smact) == 1 for u in first)
    assert all(len(monitor.reading().windows[u].smact) == 2 for u in first)


def test_the_flows_heartbeat_builds_its_view_from_the_reading_not_from_live_windows(executor_factory) -> None:
    """The view of a pass is built from the heartbeat's reading even if the monitor moves on
    while the pass runs (the sampler thread): a window read live would be newer than the sample."""
    ex = executor_factory(gpus="1xA100-40GB")
    flow = ex.flow
    reading = flow.monitor.reading()
    (uuid,) = reading
    stale = Reading(dict(reading), {uuid: reading.windows[uuid]}, {uuid: 1e9})  # an age the reading froze
    gpus = flow.sight.gpus(time.time(), stale)
    assert gpus[0].health.name == "STALE"  # the reading's age, not the monitor's (fresh) one
    assert flow.sight.gpus(time.time(), reading)[0].health.name == "HEALTHY"
    assert not math.isinf(flow.monitor.age(uuid))
    assert isinstance(next(iter(reading.values())), GpuSample)
    assert threading.active_count() >= 1


def test_a_heartbeat_places_without_reading_a_window_or_an_age_live(executor_factory, monkeypatch) -> None:
    from executor_helpers import make_workload, run_until, submit

    ex = executor_factory(gpus="1xA100-40GB", behaviour={"t": {"seconds": 0.2}})
    live_reads: list[str] = []

    def live(name: str):  # type: ignore[no-untyped-def]
        def read(*args, **kwargs):  # type: ignore[no-untyped-def]
            live_reads.append(name)
            raise AssertionError(f"monitor.{name} read live during a heartbeat")

        return read

    monkeypatch.setattr(ex.flow.monitor, "window", live("window"))
    monkeypatch.setattr(ex.flow.monitor, "age", live("age"))
    w = make_workload("t", config={"memory": "1GiB"})
    submit(ex, w)
    run_until(ex, lambda: w.key in ex.event_buffer)
    assert live_reads == []
