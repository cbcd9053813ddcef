"""Loading and checking the workload: a task catalogue and a trace of arrivals (pandas)."""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import pandas as pd

from carma_airflow.core.errors import WorkloadError, brief
from carma_airflow.core.estimators import TaskMemoryInfo
from carma_airflow.core.sharing import ActivityProfile, activity_profile

CATALOG_COLUMNS = (
    "task",
    "family",
    "batch_size",
    "gpus",
    "peak_mem_mib",
    "horus_mib",
    "faketensor_mib",
    "gpumemnet_mib",
    "solo_minutes",
)
TRACE_COLUMNS = ("job_id", "submit_s", "task")


@dataclass(frozen=True, slots=True)
class TaskType:
    name: str
    script: str
    family: str
    batch_size: int
    gpus: int
    peak_mib: int
    horus_mib: int | None
    faketensor_mib: int | None
    gpumemnet_mib: int | None
    solo_s: float

    @property
    def profile(self) -> ActivityProfile:
        small = "cifar" in self.script.lower() or "cifar" in self.name.lower()
        return activity_profile(self.family, self.batch_size, small_inputs=small)

    def memory_info(self, declared_mib: int | None = None, history: tuple[int, ...] = ()) -> TaskMemoryInfo:
        return TaskMemoryInfo(
            declared_mib=declared_mib,
            measured_peak_mib=self.peak_mib,
            horus_mib=self.horus_mib,
            faketensor_mib=self.faketensor_mib,
            gpumemnet_mib=self.gpumemnet_mib,
            history_mib=history,
        )


@dataclass(frozen=True, slots=True)
class Arrival:
    job_id: int
    submit_s: float
    task: TaskType
    declared_mib: int | None = None
    # a hand-built trace's truths for this job (optional trace columns; sim/fencing.py):
    load_s: float | None = None  # seconds on the CPU before its first allocation (None: the ramp, ramp_s)
    grows_to_mib: int | None = None  # the true peak it reaches (None: the seeded --memory-growth draw)
    grows_after_s: float | None = None  # ... after this many seconds of solo work past its first allocation


def packaged(name: str) -> Path:
    """Path of a workload file shipped with the package (task_catalog.csv, trace_t1.csv, ...)."""
    return Path(str(resources.files("carma_airflow") / "data" / "workloads" / name))


def _read_csv(path: str | Path, what: str, required: tuple[str, ...]) -> pd.DataFrame:
    p = Path(path)
    if not p.is_file():
        raise WorkloadError(f"{what} file {str(p)!r} not found; give the path of a CSV file")
    try:
        frame = pd.read_csv(p, skipinitialspace=True)
    except (ValueError, OSError) as exc:  # ParserError, EmptyDataError, UnicodeDecodeError, EIO, EACCES
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise WorkloadError(f"{what} file {str(p)!r} is not a readable CSV ({first[:120]})") from None
    missing = [c for c in required if c not in frame.columns]
    if missing:
        raise WorkloadError(
            f"{what} file {str(p)!r} lacks column(s) {', '.join(missing)}; expected at least {', '.join(required)}"
        )
    if frame.empty:
        raise WorkloadError(f"{what} file {str(p)!r} has no rows")
    return frame


_MAX_NUMBER = 2**53  # above it a float no longer holds every integer


def _number_or_none(value: object, where: str, column: str) -> float | None:
    """A cell as a float (None if empty), or a clear error where it is no number."""
    if value is None or (isinstance(value, float) and pd.isna(value)):
        return None
    try:
        return float(str(value))
    except ValueError:
        raise WorkloadError(f"{where}: column {column} must be a number, got {brief(value)}") from None


def _int_or_none(value: object, where: str, column: str, whole: bool = False) -> int | None:
    """A cell as a non-negative int (None if empty); ``whole``: a fraction is an error, not cut off."""
    number = _number_or_none(value, where, column)
    if number is None:
        return None
    if not math.isfinite(number) or number < 0:
        raise WorkloadError(f"{where}: column {column} must be >= 0, got {brief(value)}")
    if number > _MAX_NUMBER:
        raise WorkloadError(f"{where}: column {column} is absurdly large ({brief(value)}); write at most 2**53")
    if whole and not number.is_integer():
        raise WorkloadError(f"{where}: column {column} must be a whole number, got {brief(value)}")
    return int(number)


def _seconds_or_none(value: object, where: str, column: str) -> float | None:
    """An optional cell as a finite number >= 0 (None if empty)."""
    number = _number_or_none(value, where, column)
    if number is not None and (not math.isfinite(number) or number < 0 or number > _MAX_NUMBER):
        raise WorkloadError(f"{where}: column {column} must be a finite number >= 0, got {brief(value)}")
    return number


def load_catalog(path: str | Path) -> dict[str, TaskType]:
    """Read a task catalogue (see shared/workloads/README.md for the columns)."""
    frame = _read_csv(path, "catalog", CATALOG_COLUMNS)
    out: dict[str, TaskType] = {}
    for i, row in enumerate(frame.to_dict("records"), start=2):
        where = f"catalog line {i}"
        name = str(row["task"]).strip()
        if not name or name == "nan":
            raise WorkloadError(f"{where}: empty task name")
        gpus = _int_or_none(row["gpus"], where, "gpus", whole=True)
        peak = _int_or_none(row["peak_mem_mib"], where, "peak_mem_mib")
        batch = _int_or_none(row["batch_size"], where, "batch_size", whole=True)
        minutes = row["solo_minutes"]
        try:
            solo_s = float(minutes) * 60.0
        except (TypeError, ValueError):
            raise WorkloadError(f"{where}: solo_minutes must be a number, got {brief(minutes)}") from None
        if gpus is None or gpus < 1:
            raise WorkloadError(f"{where}: gpus must be an integer >= 1")
        if peak is None or peak < 1:
            raise WorkloadError(f"{where}: peak_mem_mib must be a positive number of MiB")
        if not math.isfinite(solo_s) or solo_s <= 0:
            raise WorkloadError(f"{where}: solo_minutes must be > 0")
        if name in out:
            raise WorkloadError(f"{where}: task {brief(name)} appears twice")
        out[name] = TaskType(
            name=name,
            script=str(row.get("script", name)),
            family=str(row["family"]).strip(),
            batch_size=batch or 32,
            gpus=gpus,
            peak_mib=peak,
            horus_mib=_int_or_none(row["horus_mib"], where, "horus_mib"),
            faketensor_mib=_int_or_none(row["faketensor_mib"], where, "faketensor_mib"),
            gpumemnet_mib=_int_or_none(row["gpumemnet_mib"], where, "gpumemnet_mib"),
            solo_s=solo_s,
        )
    return out


def load_trace(path: str | Path, catalog: dict[str, TaskType]) -> list[Arrival]:
    """Read a trace of arrivals; every task must be in the catalogue.

    Optional columns: ``memory_mib`` (what the DAG declares), and a hand-built trace's truths:
    ``load_s`` (seconds the try spends on the CPU, loading data, before its first allocation),
    ``grows_to_mib`` and ``grows_after_s`` (the true peak it grows to, that many seconds of solo
    work after its first allocation; instead of the seeded ``--memory-growth`` draw)."""
    frame = _read_csv(path, "trace", TRACE_COLUMNS)
    has_declared = "memory_mib" in frame.columns
    optional = [c for c in ("load_s", "grows_to_mib", "grows_after_s") if c in frame.columns]
    out: list[Arrival] = []
    for i, row in enumerate(frame.to_dict("records"), start=2):
        where = f"trace line {i}"
        name = str(row["task"]).strip()
        task = catalog.get(name)
        if task is None:
            raise WorkloadError(f"{where}: unknown task type {brief(name)}; add it to the catalog or fix the trace")
        job = _int_or_none(row["job_id"], where, "job_id", whole=True)
        submit = row["submit_s"]
        try:
            submit_s = float(submit)
        except (TypeError, ValueError):
            raise WorkloadError(f"{where}: submit_s must be a number of seconds, got {brief(submit)}") from None
        if job is None or not math.isfinite(submit_s) or submit_s < 0:
            raise WorkloadError(f"{where}: job_id and submit_s must be numbers >= 0")
        declared = _int_or_none(row["memory_mib"], where, "memory_mib") if has_declared else None
        truths = {c: _seconds_or_none(row[c], where, c) for c in optional}
        grows_to = truths.get("grows_to_mib")
        if grows_to is not None and grows_to < task.peak_mib:
            raise WorkloadError(f"{where}: grows_to_mib {grows_to:g} is below the task's peak ({task.peak_mib} MiB)")
        out.append(
            Arrival(
                job,
                submit_s,
                task,
                declared or None,
                load_s=truths.get("load_s"),
                grows_to_mib=None if grows_to is None else int(grows_to),
                grows_after_s=truths.get("grows_after_s"),
            )
        )
    ids = [a.job_id for a in out]
    if len(set(ids)) != len(ids):
        raise WorkloadError("trace has duplicate job_id values; each arrival needs its own id")
    out.sort(key=lambda a: (a.submit_s, a.job_id))
    return out


def synthetic_trace(
    catalog: dict[str, TaskType], tasks: int, gpus: int, load: float = 1.2, seed: int = 0
) -> list[Arrival]:
    """A Poisson trace drawn from the catalogue, with offered load ``load`` x exclusive capacity."""
    rng = random.Random(seed)
    types = sorted(catalog.values(), key=lambda t: t.name)
    mean_work = sum(t.solo_s * t.gpus for t in types) / len(types)
    rate = load * gpus / mean_work  # arrivals per second
    now = 0.0
    out = []
    for job in range(tasks):
        out.append(Arrival(job, round(now, 3), rng.choice(types)))
        now += rng.expovariate(rate)
    return out
