"""The ``executor_config={"carma": {...}}`` contract of a GPU task, validated with pydantic.

DAG authors write::

    from carma_airflow import gpu_task

    @task(**gpu_task(memory="12GiB"))
    def train(): ...

which expands to ``executor="CarmaExecutor", executor_config={"carma": {"gpus": 1, "memory": "12GiB"}}``.
The cluster policy validates the block when the DAG is parsed, so a bad value is a DAG import
error that names the field and what to write instead.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from carma_airflow.core.errors import ConfigError, brief
from carma_airflow.core.units import parse_mib

EXECUTOR_NAME = "CarmaExecutor"
CONFIG_KEY = "carma"
_HINTS = {
    "gpus": "an integer from 1 to 64, e.g. gpus=2",
    "memory": "per-GPU memory such as '12GiB', '800MiB' or an int of MiB, or leave it out to estimate",
    "exclusive": "true or false",
    "gpu_model": "a GPU model name such as 'A100' or 'H100-80GB'",
    "priority": "an integer from -2147483648 to 2147483647 (higher runs first)",
    "activity": "a number between 0 and 1 (expected SM activity, used by simulated GPUs)",
}
_MAX_PROBLEMS = 5
_KEYS_HINT = "string keys only: gpus, memory, exclusive, gpu_model, priority"


class GpuTaskConfig(BaseModel):
    """What a GPU task asks of CarmaExecutor.  Extra keys are kept (forward compatible)."""

    model_config = ConfigDict(extra="allow", frozen=True, strict=False)

    gpus: int = Field(default=1, ge=1, le=64)
    memory: int | None = None  # MiB per GPU, None = estimate it
    exclusive: bool = False
    gpu_model: str | None = None
    priority: int = Field(default=0, ge=-(2**31), le=2**31 - 1)  # Airflow's priority_weight range

    @field_validator("gpus", "priority", mode="before")
    @classmethod
    def _whole_number(cls, value: Any) -> Any:
        if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
            raise ValueError("must be a whole number")
        return value

    @field_validator("memory", mode="before")
    @classmethod
    def _memory(cls, value: Any) -> Any:
        if value is None:
            return None
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        if not isinstance(value, (int, str)) or isinstance(value, bool):
            raise ValueError("must be a size such as '12GiB' or an int of MiB")
        try:
            return parse_mib(value)
        except ConfigError as exc:
            raise ValueError(str(exc)) from None

    @field_validator("exclusive", mode="before")
    @classmethod
    def _exclusive(cls, value: Any) -> Any:
        if not isinstance(value, bool):
            raise ValueError("must be true or false")
        return value

    @field_validator("gpu_model", mode="before")
    @classmethod
    def _model(cls, value: Any) -> Any:
        if value is None:
            return None
        if not isinstance(value, str) or not value.strip() or len(value) > 64:
            raise ValueError("must be a non-empty GPU model name")
        if any(not (c.isalnum() or c in "-_. ") for c in value):
            raise ValueError("may contain letters, digits, '-', '_', '.' and spaces only")
        return value.strip()


def parse_task_config(executor_config: Any, where: str = "executor_config") -> GpuTaskConfig:
    """Validate an executor_config; raise ConfigError with one line per problem otherwise."""
    if executor_config is None:
        return GpuTaskConfig()
    if not isinstance(executor_config, dict):
        raise ConfigError(
            f"{where} must be a dict, got {type(executor_config).__name__}; write e.g. {{'carma': {{'gpus': 1}}}}"
        )
    block = executor_config.get(CONFIG_KEY, {})
    if block is None:
        block = {}
    if not isinstance(block, dict):
        raise ConfigError(
            f"{where}['carma'] must be a dict, got {type(block).__name__}; write e.g. {{'gpus': 1, 'memory': '12GiB'}}"
        )
    try:
        return GpuTaskConfig.model_validate(block)
    except ValidationError as exc:
        problems = []
        for err in exc.errors():
            # every key as a short repr: ['gpus'], [1] for a non-string key; one line whatever the key
            field = "".join(f"[{brief(p, 40)}]" for p in err["loc"])
            first = err["loc"][0] if err["loc"] else None
            hint = _HINTS.get(first, _KEYS_HINT) if isinstance(first, str) else _KEYS_HINT
            msg = err["msg"].removeprefix("Value error, ")
            advice = "" if "write " in msg else f"; write {hint}"
            problems.append(f"{where}['carma']{field}: {msg} (got {brief(err.get('input'))}){advice}")
        if len(problems) > _MAX_PROBLEMS:  # e.g. thousands of non-string keys: keep the message short
            problems[_MAX_PROBLEMS:] = [f"and {len(problems) - _MAX_PROBLEMS} more problem(s)"]
        raise ConfigError("; ".join(problems)) from None


def gpu_task(
    gpus: int = 1,
    memory: int | str | None = None,
    *,
    exclusive: bool = False,
    gpu_model: str | None = None,
    priority: int = 0,
    **extra: Any,
) -> dict[str, Any]:
    """Operator kwargs that send a task to CarmaExecutor: ``@task(**gpu_task(memory="12GiB"))``.

    Validates at once, so a mistake fails where the DAG is written.
    """
    block: dict[str, Any] = {"gpus": gpus, "exclusive": exclusive, "priority": priority, **extra}
    if memory is not None:
        block["memory"] = memory
    if gpu_model is not None:
        block["gpu_model"] = gpu_model
    parse_task_config({CONFIG_KEY: block})
    return {"executor": EXECUTOR_NAME, "executor_config": {CONFIG_KEY: block}}
