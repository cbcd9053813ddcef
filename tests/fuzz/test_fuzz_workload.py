"""Traces and task catalogues: generated CSV files with missing columns, bad types, empty files,
binary junk, negative times.  Each either loads into consistent values or raises WorkloadError
with a one-line message."""

from __future__ import annotations

import csv
import io
import math
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from carma_airflow.core.errors import WorkloadError
from carma_airflow.sim.workload import (
    CATALOG_COLUMNS,
    TRACE_COLUMNS,
    TaskType,
    load_catalog,
    load_trace,
    packaged,
)

FUZZ = settings.get_profile("carma-fuzz")
CATALOG = load_catalog(packaged("task_catalog.csv"))
TASKS = sorted(CATALOG)[:5]

junk_cells = (
    st.integers(min_value=-(2**70), max_value=2**70).map(str)
    | st.floats().map(repr)  # nan, inf, -inf, 1e+300, -0.0
    | st.sampled_from(["", " ", "nan", "inf", "-1", "0", "-0.5", "1e400", "True", "null", "#", '"', "1,5", "0x10"])
    | st.text(max_size=12)
)
numbers = st.integers(min_value=1, max_value=80_000).map(str) | st.floats(0.01, 5000).map(lambda x: f"{x:.3f}")
plausible = {
    "family": st.sampled_from(["cnn", "transformer", "rnn", "x"]),
    "job_id": st.integers(min_value=0, max_value=50).map(str),
    "submit_s": st.floats(0, 1e6).map(repr),
}


def cell(draw: st.DrawFn, column: str, names: st.SearchStrategy[str]) -> str:
    """Mostly a plausible value, so that the checks after the first bad cell are reached too."""
    if draw(st.integers(0, 40)) == 0:
        return draw(junk_cells)
    return draw(names if column == "task" else plausible.get(column, numbers))


def csv_text(header: list[str], rows: list[list[str]]) -> str:
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(header)
    for row in rows:
        writer.writerow(row)
    return out.getvalue()


@st.composite
def table(draw: st.DrawFn, required: tuple[str, ...], names: st.SearchStrategy[str]) -> str:
    """Mostly the required columns with plausible cells; now and then a column missing, the rest
    shuffled, junk columns, junk cells, a row too long or too short."""
    header = list(required)
    if draw(st.integers(0, 4)) == 0:
        header.remove(draw(st.sampled_from(header)))
        header = list(draw(st.permutations(header)))
    header += draw(st.lists(st.text(max_size=6), max_size=2))
    rows = []
    for _ in range(draw(st.integers(0, 6))):
        row = [cell(draw, column, names) for column in header]
        if draw(st.integers(0, 20)) == 0:
            row = [*row, "surplus"] if draw(st.booleans()) else row[:-1]
        rows.append(row)
    return csv_text(header, rows)


junk_files = st.binary(max_size=200) | st.text(max_size=200).map(str.encode) | st.just(b"")


def check_message(exc: WorkloadError) -> None:
    message = str(exc)
    assert message and len(message.splitlines()) == 1, message
    assert "Traceback" not in message


def check_catalog(catalog: dict[str, TaskType]) -> None:
    assert catalog
    for name, task in catalog.items():
        assert name == task.name and name.strip() == name and name
        assert task.gpus >= 1 and task.peak_mib >= 1 and task.batch_size >= 1
        assert math.isfinite(task.solo_s) and task.solo_s > 0
        for estimate in (task.horus_mib, task.faketensor_mib, task.gpumemnet_mib):
            assert estimate is None or estimate >= 0


@pytest.fixture(scope="module")
def csv_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("fuzz-workload") / "input.csv"


@settings(FUZZ)
@given(table(CATALOG_COLUMNS, st.sampled_from(["a", "b", " a ", "resnet", "c", "é", ""])) | junk_files)
def test_catalog_loads_consistently_or_is_a_workload_error(csv_path: Path, content: str | bytes) -> None:
    if isinstance(content, str):
        csv_path.write_text(content)
    else:
        csv_path.write_bytes(content)
    try:
        catalog = load_catalog(csv_path)
    except WorkloadError as exc:
        check_message(exc)
    else:
        check_catalog(catalog)


@settings(FUZZ)
@given(table((*TRACE_COLUMNS, "memory_mib"), st.sampled_from([*TASKS, TASKS[0].upper(), f" {TASKS[1]} "])) | junk_files)
def test_trace_loads_consistently_or_is_a_workload_error(csv_path: Path, content: str | bytes) -> None:
    if isinstance(content, str):
        csv_path.write_text(content)
    else:
        csv_path.write_bytes(content)
    try:
        arrivals = load_trace(csv_path, CATALOG)
    except WorkloadError as exc:
        check_message(exc)
    else:
        assert arrivals
        times = [a.submit_s for a in arrivals]
        assert times == sorted(times) and all(math.isfinite(t) and t >= 0 for t in times)
        ids = [a.job_id for a in arrivals]
        assert len(set(ids)) == len(ids) and all(i >= 0 for i in ids)
        assert all(a.task is CATALOG[a.task.name] for a in arrivals)
        assert all(a.declared_mib is None or a.declared_mib >= 1 for a in arrivals)


@settings(FUZZ, max_examples=max(FUZZ.max_examples // 4, 10))
@given(st.sampled_from(["", "missing.csv", ".", "/", "/dev/null", "/proc/self/mem", "dir/"]))
def test_paths_that_are_not_csv_files_are_workload_errors(tmp_path: Path, name: str) -> None:
    (tmp_path / "dir").mkdir(exist_ok=True)
    path = name if name.startswith("/") else tmp_path / name
    for load in (load_catalog, lambda p: load_trace(p, CATALOG)):
        with pytest.raises(WorkloadError) as info:
            load(path)
        check_message(info.value)


@settings(FUZZ, max_examples=max(FUZZ.max_examples // 4, 10))
@given(st.sampled_from(["gpus", "batch_size"]), st.floats(0.01, 1000).filter(lambda x: not x.is_integer()))
def test_a_fraction_where_a_count_belongs_is_refused(csv_path: Path, column: str, x: float) -> None:
    row = {c: "1" for c in CATALOG_COLUMNS} | {"task": "t", "family": "cnn", column: repr(x)}
    csv_path.write_text(csv_text(list(CATALOG_COLUMNS), [[row[c] for c in CATALOG_COLUMNS]]))
    with pytest.raises(WorkloadError, match=f"column {column} must be a whole number"):
        load_catalog(csv_path)


@settings(FUZZ, max_examples=max(FUZZ.max_examples // 4, 10))
@given(st.integers(min_value=2**54, max_value=2**80) | st.floats(2.0**54, 1e300))
def test_absurd_numbers_are_refused(csv_path: Path, n: float) -> None:
    csv_path.write_text(f"job_id,submit_s,task\n{n!r},0,{TASKS[0]}\n")
    with pytest.raises(WorkloadError, match="job_id is absurdly large"):
        load_trace(csv_path, CATALOG)
