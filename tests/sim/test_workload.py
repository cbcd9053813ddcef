"""Loading and checking workloads: the packaged files, errors, synthetic traces."""

from __future__ import annotations

import random
from collections.abc import Callable
from pathlib import Path

import pytest
from sim_helpers import CATALOG_HEADER, TRACE_HEADER, catalog_row

from carma_airflow.core import WorkloadError
from carma_airflow.sim import TaskType, load_catalog, load_trace, packaged, synthetic_trace

Write = Callable[[str, str], Path]


def test_packaged_catalog_has_50_task_types(catalog: dict[str, TaskType]) -> None:
    assert len(catalog) == 50
    vgg = catalog["vgg"]
    assert vgg.peak_mib == 6684
    assert vgg.horus_mib == 21525
    assert vgg.faketensor_mib == 3121
    assert vgg.gpumemnet_mib == 16000
    assert vgg.solo_s == pytest.approx(50.77 * 60)
    assert vgg.batch_size == 32 and vgg.gpus == 1 and vgg.family == "cnn"
    assert catalog["gpt2_large_2"].gpus == 2
    assert all(t.peak_mib > 0 and t.solo_s > 0 and t.gpus >= 1 for t in catalog.values())


def test_catalog_memory_info_carries_every_estimate(catalog: dict[str, TaskType]) -> None:
    info = catalog["maskrcnn"].memory_info(declared_mib=30000, history=(28000,))
    assert info.measured_peak_mib == 28606
    assert info.gpumemnet_mib == 8000
    assert info.declared_mib == 30000
    assert info.history_mib == (28000,)


def test_cifar_tasks_get_lighter_profiles(catalog: dict[str, TaskType]) -> None:
    cifar = catalog["resnet18_cifar100_20e_1"].profile
    imagenet = catalog["resnet"].profile
    assert cifar.sm_activity < imagenet.sm_activity


@pytest.mark.parametrize("name", ["trace_t1.csv", "trace_t2.csv"])
def test_packaged_traces_have_60_arrivals(catalog: dict[str, TaskType], name: str) -> None:
    trace = load_trace(packaged(name), catalog)
    assert len(trace) == 60
    assert len({a.job_id for a in trace}) == 60
    times = [a.submit_s for a in trace]
    assert times == sorted(times)
    assert times[0] == 0.0
    assert all(a.task.name in catalog for a in trace)
    assert all(a.declared_mib is None for a in trace)


def test_trace_t1_first_arrivals(trace_t1: list) -> None:
    assert (trace_t1[0].job_id, trace_t1[0].task.name) == (0, "Xception")
    assert (trace_t1[1].job_id, trace_t1[1].submit_s) == (1, 181.0)


def test_packaged_path_exists() -> None:
    assert packaged("task_catalog.csv").is_file()


def test_trace_sorted_by_submit_time(write: Write, catalog: dict[str, TaskType]) -> None:
    path = write("t.csv", f"{TRACE_HEADER}\n5,30,vgg\n3,10,resnet\n4,10,vgg\n")
    trace = load_trace(path, catalog)
    assert [(a.job_id, a.submit_s) for a in trace] == [(3, 10.0), (4, 10.0), (5, 30.0)]


def test_trace_declared_memory_column(write: Write, catalog: dict[str, TaskType]) -> None:
    path = write("t.csv", f"{TRACE_HEADER},memory_mib\n0,0,vgg,9000\n1,5,vgg,\n")
    trace = load_trace(path, catalog)
    assert [a.declared_mib for a in trace] == [9000, None]


def test_trace_tolerates_spaces_after_commas(write: Write, catalog: dict[str, TaskType]) -> None:
    trace = load_trace(write("t.csv", "job_id, submit_s, task\n0, 12, vgg\n"), catalog)
    assert trace[0].task.name == "vgg" and trace[0].submit_s == 12.0


# -- errors -----------------------------------------------------------------------------------------


def test_missing_file(tmp_path: Path, catalog: dict[str, TaskType]) -> None:
    missing = tmp_path / "nope.csv"
    with pytest.raises(WorkloadError, match="not found") as info:
        load_trace(missing, catalog)
    assert "nope.csv" in str(info.value)
    with pytest.raises(WorkloadError, match=r"catalog file .* not found"):
        load_catalog(missing)


def test_directory_is_not_a_file(tmp_path: Path) -> None:
    with pytest.raises(WorkloadError, match="not found"):
        load_catalog(tmp_path)


def test_missing_trace_column(write: Write, catalog: dict[str, TaskType]) -> None:
    with pytest.raises(WorkloadError) as info:
        load_trace(write("t.csv", "job_id,task\n0,vgg\n"), catalog)
    message = str(info.value)
    assert "lacks column(s) submit_s" in message
    assert "job_id, submit_s, task" in message


def test_missing_catalog_column(write: Write) -> None:
    header = CATALOG_HEADER.replace(",peak_mem_mib", "")
    with pytest.raises(WorkloadError, match="peak_mem_mib"):
        load_catalog(write("c.csv", f"{header}\nx,x,cnn,32,1,1,1,1,1,1\n"))


def test_unknown_task_type_in_trace(write: Write, catalog: dict[str, TaskType]) -> None:
    path = write("t.csv", f"{TRACE_HEADER}\n0,0,vgg\n1,5,alexnet\n")
    with pytest.raises(WorkloadError) as info:
        load_trace(path, catalog)
    message = str(info.value)
    assert "trace line 3" in message
    assert "'alexnet'" in message
    assert "add it to the catalog" in message


@pytest.mark.parametrize("value", ["soon", "12s", "NaN", "", "-1", "inf"])
def test_bad_submit_s(write: Write, catalog: dict[str, TaskType], value: str) -> None:
    path = write("t.csv", f"{TRACE_HEADER}\n0,{value},vgg\n")
    with pytest.raises(WorkloadError, match="submit_s") as info:
        load_trace(path, catalog)
    assert "trace line 2" in str(info.value)


def test_non_numeric_submit_s_message(write: Write, catalog: dict[str, TaskType]) -> None:
    with pytest.raises(WorkloadError, match="submit_s must be a number of seconds, got 'soon'"):
        load_trace(write("t.csv", f"{TRACE_HEADER}\n0,soon,vgg\n"), catalog)


def test_non_numeric_job_id(write: Write, catalog: dict[str, TaskType]) -> None:
    with pytest.raises(WorkloadError, match="job_id must be a number"):
        load_trace(write("t.csv", f"{TRACE_HEADER}\nfirst,0,vgg\n"), catalog)


def test_duplicate_job_ids(write: Write, catalog: dict[str, TaskType]) -> None:
    path = write("t.csv", f"{TRACE_HEADER}\n0,0,vgg\n1,5,vgg\n0,9,resnet\n")
    with pytest.raises(WorkloadError, match="duplicate job_id") as info:
        load_trace(path, catalog)
    assert "own id" in str(info.value)


@pytest.mark.parametrize("text", ["", "\n\n"])
def test_empty_file(write: Write, catalog: dict[str, TaskType], text: str) -> None:
    with pytest.raises(WorkloadError, match="not a readable CSV"):
        load_trace(write("t.csv", text), catalog)


def test_header_only(write: Write, catalog: dict[str, TaskType]) -> None:
    with pytest.raises(WorkloadError, match="has no rows"):
        load_trace(write("t.csv", f"{TRACE_HEADER}\n"), catalog)
    with pytest.raises(WorkloadError, match="has no rows"):
        load_catalog(write("c.csv", f"{CATALOG_HEADER}\n"))


@pytest.mark.parametrize("seed", range(6))
def test_garbage_binary_file(tmp_path: Path, catalog: dict[str, TaskType], seed: int) -> None:
    rng = random.Random(seed)
    path = tmp_path / "garbage.csv"
    path.write_bytes(b"\x89PNG\r\n\x1a\n\x00\xff" + bytes(rng.randrange(256) for _ in range(2000)))
    with pytest.raises(WorkloadError) as info:
        load_trace(path, catalog)
    assert "garbage.csv" in str(info.value)
    with pytest.raises(WorkloadError):
        load_catalog(path)


@pytest.mark.parametrize(
    ("overrides", "fragment"),
    [
        ({"gpus": 0}, "gpus must be an integer >= 1"),
        ({"peak_mem_mib": 0}, "peak_mem_mib must be a positive"),
        ({"peak_mem_mib": "lots"}, "peak_mem_mib must be a number"),
        ({"solo_minutes": 0}, "solo_minutes must be > 0"),
        ({"solo_minutes": "long"}, "solo_minutes must be a number"),
        ({"horus_mib": -5}, "horus_mib must be >= 0"),
    ],
)
def test_bad_catalog_rows(write: Write, overrides: dict, fragment: str) -> None:
    path = write("c.csv", f"{CATALOG_HEADER}\n{catalog_row(**overrides)}\n")
    with pytest.raises(WorkloadError, match=fragment) as info:
        load_catalog(path)
    assert "catalog line 2" in str(info.value)


def test_duplicate_catalog_task(write: Write) -> None:
    path = write("c.csv", f"{CATALOG_HEADER}\n{catalog_row()}\n{catalog_row()}\n")
    with pytest.raises(WorkloadError, match="appears twice"):
        load_catalog(path)


def test_missing_estimates_are_none(write: Write) -> None:
    path = write("c.csv", f"{CATALOG_HEADER}\n{catalog_row(horus_mib='', faketensor_mib='')}\n")
    t = load_catalog(path)["t"]
    assert t.horus_mib is None and t.faketensor_mib is None and t.gpumemnet_mib == 8000


# -- synthetic traces ---------------------------------------------------------------------------------


def test_synthetic_trace_length_and_ids(catalog: dict[str, TaskType]) -> None:
    trace = synthetic_trace(catalog, tasks=200, gpus=4, seed=1)
    assert len(trace) == 200
    assert [a.job_id for a in trace] == list(range(200))
    times = [a.submit_s for a in trace]
    assert times[0] == 0.0
    assert times == sorted(times)
    assert all(a.task.name in catalog for a in trace)


def test_synthetic_trace_deterministic_by_seed(catalog: dict[str, TaskType]) -> None:
    a = synthetic_trace(catalog, tasks=50, gpus=4, seed=7)
    b = synthetic_trace(catalog, tasks=50, gpus=4, seed=7)
    c = synthetic_trace(catalog, tasks=50, gpus=4, seed=8)
    assert a == b
    assert a != c


def test_synthetic_trace_load_sets_the_rate(catalog: dict[str, TaskType]) -> None:
    light = synthetic_trace(catalog, tasks=300, gpus=4, load=0.5, seed=3)
    heavy = synthetic_trace(catalog, tasks=300, gpus=4, load=2.0, seed=3)
    assert heavy[-1].submit_s < light[-1].submit_s
    assert heavy[-1].submit_s == pytest.approx(light[-1].submit_s / 4, rel=1e-6, abs=0.01)


def test_synthetic_trace_empty(catalog: dict[str, TaskType]) -> None:
    assert synthetic_trace(catalog, tasks=0, gpus=4) == []
