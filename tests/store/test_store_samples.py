"""GPU samples: downsampling per GPU, round trips, latest per GPU, pruning."""

from __future__ import annotations

import dataclasses

import pytest
from store_helpers import at

from carma_airflow.store import RecordError, SampleRecord, Store

pytestmark = pytest.mark.db


def sample(uuid: str = "GPU-aaaa", seconds: float = 0.0, **fields: object) -> SampleRecord:
    index = {"GPU-aaaa": 0, "GPU-bbbb": 1}.get(uuid, 7)
    values: dict[str, object] = {
        "host": "gpu-01",
        "gpu_uuid": uuid,
        "gpu_index": index,
        "name": "NVIDIA A100-SXM4-40GB",
        "at": at(seconds),
        "memory_total_mib": 40960,
        "memory_used_mib": 1234,
        "smact": 0.25,
        "smocc": 0.125,
        "drama": 0.0625,
        "power_w": 87.5,
        "energy_j": 123456789.25,
        "error": None,
    }
    values.update(fields)
    return SampleRecord(**values)  # type: ignore[arg-type]


def test_sample_round_trips_every_field(store: Store) -> None:
    full = sample()
    empty = sample(
        "GPU-bbbb",
        memory_total_mib=None,
        memory_used_mib=None,
        smact=None,
        smocc=None,
        drama=None,
        power_w=None,
        energy_j=None,
        error="NVML: GPU is lost",
    )
    assert store.record_samples([full, empty]) == 2
    assert store.samples() == [full, empty]
    assert store.samples(gpu_uuid="GPU-bbbb") == [empty]


def test_downsampling_keeps_one_row_per_gpu_per_interval(store: Store) -> None:
    # One GPU every 10 s for 2 minutes, another every 20 s: 30 s keeps 0, 30, 60, 90, 120.
    batch = [sample("GPU-aaaa", s) for s in range(0, 121, 10)]
    batch += [sample("GPU-bbbb", s) for s in range(0, 121, 20)]
    assert store.record_samples(batch, min_interval_s=30) == 5 + 4
    assert [s.at for s in store.samples(gpu_uuid="GPU-aaaa")] == [at(s) for s in (0, 30, 60, 90, 120)]
    assert [s.at for s in store.samples(gpu_uuid="GPU-bbbb")] == [at(s) for s in (0, 40, 80, 120)]


def test_downsampling_counts_from_the_last_stored_sample(store: Store) -> None:
    assert store.record_samples([sample(seconds=0)]) == 1
    assert store.record_samples([sample(seconds=29.9)]) == 0
    assert store.record_samples([sample(seconds=-60)]) == 0  # older than what is stored
    assert store.record_samples([sample(seconds=30), sample("GPU-bbbb", 1)]) == 2
    assert [s.at for s in store.samples(gpu_uuid="GPU-aaaa")] == [at(0), at(30)]


def test_downsampling_sorts_a_batch_by_time(store: Store) -> None:
    batch = [sample(seconds=s) for s in (90, 0, 45, 60, 15)]
    assert store.record_samples(batch, min_interval_s=30) == 3
    assert [s.at for s in store.samples()] == [at(0), at(45), at(90)]


def test_interval_zero_keeps_every_sample(store: Store) -> None:
    assert store.record_samples([sample(seconds=s) for s in (0, 0.5, 1)], min_interval_s=0) == 3


def test_no_samples_and_a_negative_interval(store: Store) -> None:
    assert store.record_samples([]) == 0
    with pytest.raises(RecordError, match="min_interval_s"):
        store.record_samples([sample()], min_interval_s=-1)


def test_samples_filters_since_and_keeps_the_latest_limit(store: Store) -> None:
    store.record_samples([sample(seconds=s) for s in range(0, 300, 30)])
    assert [s.at for s in store.samples(since=at(200))] == [at(210), at(240), at(270)]
    assert [s.at for s in store.samples(limit=2)] == [at(240), at(270)]
    assert [s.at for s in store.samples(since=at(200).timestamp(), limit=1)] == [at(270)]


def test_latest_samples_one_per_gpu(store: Store) -> None:
    store.record_samples([sample("GPU-aaaa", s, memory_used_mib=s) for s in (0, 30, 60)])
    store.record_samples([sample("GPU-bbbb", s, memory_used_mib=1000 + s) for s in (0, 30)])
    latest = store.latest_samples()
    assert [(s.gpu_uuid, s.memory_used_mib, s.at) for s in latest] == [
        ("GPU-aaaa", 60, at(60)),
        ("GPU-bbbb", 1030, at(30)),
    ]


def test_prune_samples_deletes_older_rows(store: Store) -> None:
    store.record_samples([sample(seconds=s) for s in (0, 30, 60, 90)])
    assert store.prune_samples(at(60)) == 2
    assert [s.at for s in store.samples()] == [at(60), at(90)]
    assert store.prune_samples(at(0)) == 0


def test_prune_samples_in_batches_takes_the_oldest_first(store: Store) -> None:
    store.record_samples([sample(uuid, seconds=s) for s in range(0, 300, 30) for uuid in ("GPU-aaaa", "GPU-bbbb")])
    assert store.count_samples() == 20
    assert store.prune_samples(at(150), limit=4) == 4  # of the 10 older than 150 s: the 4 oldest
    assert store.count_samples() == 16 and min(s.at for s in store.samples()) == at(60)
    assert store.prune_samples(at(150), limit=100) == 6
    assert store.count_samples() == 10 and min(s.at for s in store.samples()) == at(150)
    with pytest.raises(RecordError):
        store.prune_samples(at(150), limit=0)


def test_samples_with_non_utc_times_compare_in_utc(store: Store) -> None:
    from datetime import timedelta, timezone

    tokyo = timezone(timedelta(hours=9))
    first = sample(seconds=0)
    second = dataclasses.replace(sample(seconds=10), at=at(10).astimezone(tokyo))
    third = dataclasses.replace(sample(seconds=40), at=at(40).astimezone(tokyo))
    assert store.record_samples([first, second, third]) == 2
    assert [s.at for s in store.samples()] == [at(0), at(40)]
