"""What a task process tells the executor about its try: a small JSON file per try.

The task process (through the listener) writes it; the executor reads it when the process has
ended.  Only the executor writes the store.  Outcomes are enums on both sides (the file holds
their values): :class:`ResultState` says how Airflow ended the try, ``failure`` (a
:class:`~carma_airflow.core.recovery.FailureKind`) what kind of failure it was.  The failure is
classified once, in the task process, by the retry policy that decides on the retry;
:func:`remember_failure` hands that same classification to the listener that writes this file.
"""

from __future__ import annotations

import enum
import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from carma_airflow.core.recovery import OOM_KINDS, EndPlan, Failure, FailureKind

# what the executor puts in a try's environment for the task side to read (launching/taskenv.py)
RESULT_ENV = "CARMA_RESULT_FILE"
PLACEMENT_ENV = "CARMA_PLACEMENT"
END_PLAN_ENV = "CARMA_END_PLAN"  # the try's retry for each way it can end (core/recovery.EndPlan), JSON
SIM_LEDGER_ENV = "CARMA_SIM_LEDGER"
# what an older executor put there instead of END_PLAN_ENV (a try it started is read so)
PRIOR_OOMS_ENV = "CARMA_PRIOR_OOM_TRIES"


def end_plan_env(plan: EndPlan) -> dict[str, str]:
    """The try's environment that hands it its plan."""
    return {END_PLAN_ENV: json.dumps(plan.as_json(), separators=(",", ":"))}


def end_plan_here() -> EndPlan | None:
    """The plan this try was handed; None where it was started without one (by an older executor,
    or outside CarmaExecutor) or the value is not one."""
    said = os.environ.get(END_PLAN_ENV)
    if not said:
        return None
    try:
        return EndPlan.from_json(json.loads(said))
    except ValueError:
        return None


class ResultState(str, enum.Enum):
    SUCCESS = "success"
    FAILED = "failed"
    UP_FOR_RETRY = "up_for_retry"


@dataclass(frozen=True, slots=True)
class TryResult:
    state: ResultState
    failure: FailureKind | None = None
    exc_type: str | None = None
    message: str | None = None
    peak_mib: int | None = None

    def __post_init__(self) -> None:  # values read from a file or written by older code: the enums
        object.__setattr__(self, "state", ResultState(self.state))
        if self.failure is not None:
            object.__setattr__(self, "failure", FailureKind(self.failure))

    @property
    def is_oom(self) -> bool:
        return self.failure in OOM_KINDS

    @property
    def past_cap(self) -> bool:
        """The try hit its own memory cap (core/fencing.py), not a full GPU."""
        return self.failure is FailureKind.CAP_OOM

    @property
    def succeeded(self) -> bool:
        return self.state is ResultState.SUCCESS

    def as_json(self) -> dict[str, Any]:
        return {
            "state": self.state.value,
            "failure_kind": None if self.failure is None else self.failure.value,
            "exc_type": self.exc_type,
            "message": self.message,
            "peak_mib": self.peak_mib,
        }

    @classmethod
    def from_json(cls, data: Any) -> TryResult | None:
        """The result a task process wrote (None if it is not one)."""
        if not isinstance(data, dict):
            return None

        def text(name: str) -> str | None:
            value = data.get(name)
            return value if isinstance(value, str) else None

        try:
            state = ResultState(data.get("state"))
            kind = text("failure_kind")
            failure = FailureKind(kind) if kind is not None else None
        except ValueError:
            return None
        peak = data.get("peak_mib")
        return cls(
            state=state,
            failure=failure,
            exc_type=text("exc_type"),
            message=text("message"),
            peak_mib=int(peak) if isinstance(peak, (int, float)) and not isinstance(peak, bool) else None,
        )


def write_result(result: TryResult, path: str | os.PathLike[str] | None = None) -> Path | None:
    """Atomically write the result where the executor asked (no-op outside CarmaExecutor)."""
    target = path or os.environ.get(RESULT_ENV)
    if not target:
        return None
    out = Path(target)
    out.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=out.parent, prefix=".result-")
    with os.fdopen(fd, "w") as fh:
        json.dump(result.as_json(), fh)
    os.replace(tmp, out)
    return out


def read_result(path: Path) -> TryResult | None:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return TryResult.from_json(data)


class _Classified:
    """The failure this task process classified last (one try per process)."""

    failure: Failure | None = None
    exception_id: int | None = None


def remember_failure(exception: BaseException, failure: Failure) -> None:
    _Classified.failure, _Classified.exception_id = failure, id(exception)


def remembered_failure(exception: object) -> Failure | None:
    """The classification of ``exception`` made by the retry policy, if it made one."""
    return _Classified.failure if _Classified.exception_id == id(exception) else None


__all__ = [
    "END_PLAN_ENV",
    "PLACEMENT_ENV",
    "PRIOR_OOMS_ENV",
    "RESULT_ENV",
    "SIM_LEDGER_ENV",
    "ResultState",
    "TryResult",
    "end_plan_env",
    "end_plan_here",
    "read_result",
    "remember_failure",
    "remembered_failure",
    "write_result",
]
