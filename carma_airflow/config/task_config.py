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

from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from carma_airflow.config.unknown_keys import section_problems, unknown_key_problems
from carma_airflow.core.errors import ConfigError, brief
from carma_airflow.core.fencing import IsolationMode
from carma_airflow.core.units import parse_mib

EXECUTOR_NAME = "CarmaExecutor"
CONFIG_KEY = "carma"
_HINTS = {
    "gpus": "an integer from 1 to 64, e.g. gpus=2",
    "memory": "per-GPU memory such as '12GiB', '800MiB' or an int of MiB, or leave it out to estimate",
    "memory_by_index": "a list with one per-GPU size per map index, e.g. memory_by_index=['4GiB', '12GiB']",
    "exclusive": "true or false",
    "gpu_model": "a GPU model name such as 'A100' or 'H100-80GB'",
    "priority": "an integer from -2147483648 to 2147483647 (breaks ties among equal priority_weight)",
    "priority_weight": "an integer: replaces the task's Airflow priority_weight in the GPU queue only",
    "activity": "a number between 0 and 1: the task's expected SM activity, a prior until its tries are measured",
    "isolation": "one of auto, framework, mps, driver, none (how the try is held to its memory; docs/isolation.md)",
    "memory_policy": "learn (the default: history once the task's runs outgrow its memory) or declared (keep it)",
}
_MAX_PROBLEMS = 5
_KEYS_HINT = (
    "string keys only: gpus, memory, memory_by_index, exclusive, gpu_model, priority, priority_weight, "
    "activity, isolation, memory_policy"
)
# memory_policy: what a declared memory is once the task's runs outgrow it (core/estimators.py)
MEMORY_POLICIES = ("learn", "declared")
MAX_MAPPED = 100_000  # entries of memory_by_index (Airflow's [core] max_map_length is 1024 by default)


def _size(value: Any) -> int | None:
    """A memory size as MiB (None stays None); ValueError saying what to write otherwise."""
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


class GpuTaskConfig(BaseModel):
    """What a GPU task asks of CarmaExecutor.  Unknown keys are refused by :func:`parse_task_config`
    unless ``[carma] allow_unknown_keys`` is on; then the model keeps them (``model_extra``)."""

    model_config = ConfigDict(extra="allow", frozen=True, strict=False)

    gpus: int = Field(default=1, ge=1, le=64)
    memory: int | None = None  # MiB per GPU, None = estimate it
    # MiB per GPU of each instance of a mapped task, by map index; None entries (and map indexes
    # past the end) fall back to ``memory``, then to the learned estimate (``memory_for``)
    memory_by_index: tuple[int | None, ...] | None = None
    exclusive: bool = False
    gpu_model: str | None = None
    # the GPU queue orders by Airflow's priority_weight (its weight rule included); ``priority``
    # breaks ties among equal weights, ``priority_weight`` replaces the weight explicitly
    priority: int = Field(default=0, ge=-(2**31), le=2**31 - 1)
    priority_weight: int | None = Field(default=None, ge=-(2**31), le=2**31 - 1)
    # expected solo SM activity (0..1): the placer's prior until the task's own tries are measured
    activity: float | None = Field(default=None, ge=0.0, le=1.0)
    # how this task's tries are held to their memory; None: [carma] isolation (docs/isolation.md)
    isolation: str | None = None
    # "learn": a declared memory its runs outgrew gives way to their history; "declared": it is kept
    memory_policy: str = "learn"

    @field_validator("gpus", "priority", "priority_weight", mode="before")
    @classmethod
    def _whole_number(cls, value: Any) -> Any:
        if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
            raise ValueError("must be a whole number")
        return value

    @field_validator("memory", mode="before")
    @classmethod
    def _memory(cls, value: Any) -> Any:
        return _size(value)

    @field_validator("memory_by_index", mode="before")
    @classmethod
    def _memory_by_index(cls, value: Any) -> Any:
        if value is None:
            return None
        if not isinstance(value, (list, tuple)):
            raise ValueError("must be a list with one size per map index")
        if len(value) > MAX_MAPPED:
            raise ValueError(f"has {len(value)} entries, more than {MAX_MAPPED}")
        sizes: list[int | None] = []
        for index, entry in enumerate(value):
            try:
                sizes.append(_size(entry))
            except ValueError as exc:
                raise ValueError(f"entry {index}: {exc}") from None
        return tuple(sizes)

    def memory_for(self, map_index: int) -> int | None:
        """The declared MiB per GPU of one instance (``map_index`` -1: an unmapped task).

        ``memory_by_index[map_index]`` when the list has that entry and it is not None, else
        ``memory``; None means nothing is declared (the executor estimates it).
        """
        if self.memory_by_index is not None and 0 <= map_index < len(self.memory_by_index):
            entry = self.memory_by_index[map_index]
            if entry is not None:
                return entry
        return self.memory

    @field_validator("exclusive", mode="before")
    @classmethod
    def _exclusive(cls, value: Any) -> Any:
        if not isinstance(value, bool):
            raise ValueError("must be true or false")
        return value

    @field_validator("isolation", mode="before")
    @classmethod
    def _isolation(cls, value: Any) -> Any:
        if value is None:
            return None
        if not isinstance(value, str) or value.strip().lower() not in {m.value for m in IsolationMode}:
            raise ValueError(f"is not an isolation mode; write one of {', '.join(m.value for m in IsolationMode)}")
        return value.strip().lower()

    @field_validator("memory_policy", mode="before")
    @classmethod
    def _memory_policy(cls, value: Any) -> Any:
        if not isinstance(value, str) or value.strip().lower() not in MEMORY_POLICIES:
            raise ValueError(
                "is not a memory policy; write memory_policy='learn' (the default: the reservation follows the"
                " task's history once its runs outgrow the declared memory) or 'declared' (always the declared"
                " memory)"
            )
        return value.strip().lower()

    @property
    def keeps_declared(self) -> bool:
        """Whether a declared memory holds even where the task's runs outgrew it."""
        return self.memory_policy == "declared"

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


FIELDS: tuple[str, ...] = tuple(GpuTaskConfig.model_fields)  # the keys of the 'carma' section


def parse_task_config(
    executor_config: Any, where: str = "executor_config", *, mapped: bool | None = None, allow_unknown: bool = False
) -> GpuTaskConfig:
    """Validate an executor_config; raise ConfigError with one line per problem otherwise.

    ``mapped``: whether the task is mapped (its instances have a map index); False refuses
    ``memory_by_index``, None (not known) does not check.  ``allow_unknown``: keep keys carma
    does not know (``[carma] allow_unknown_keys``) instead of refusing each with the nearest
    valid one (unknown_keys.py).
    """
    config = _parse_block(executor_config, where, allow_unknown)
    if mapped is False and config.memory_by_index is not None:
        raise ConfigError(
            f"{where}['carma']['memory_by_index']: only a mapped task (.partial(...).expand(...)) has"
            " instances to size, and this task is not mapped; write memory='12GiB' instead"
        )
    return config


def _parse_block(executor_config: Any, where: str, allow_unknown: bool) -> GpuTaskConfig:
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
    problems: list[str] = []
    if not allow_unknown:  # a typo would otherwise run on the floor, in silence
        problems += section_problems(executor_config, FIELDS, where) + unknown_key_problems(block, FIELDS, where)
    try:
        config = GpuTaskConfig.model_validate(block)
    except ValidationError as exc:
        for err in exc.errors():
            # every key as a short repr: ['gpus'], [1] for a non-string key; one line whatever the key
            field = "".join(f"[{brief(p, 40)}]" for p in err["loc"])
            first = err["loc"][0] if err["loc"] else None
            hint = _HINTS.get(first, _KEYS_HINT) if isinstance(first, str) else _KEYS_HINT
            msg = err["msg"].removeprefix("Value error, ")
            advice = "" if "write " in msg else f"; write {hint}"
            problems.append(f"{where}['carma']{field}: {msg} (got {brief(err.get('input'))}){advice}")
    else:
        if not problems:
            return config
    if len(problems) > _MAX_PROBLEMS:  # e.g. thousands of non-string keys: keep the message short
        problems[_MAX_PROBLEMS:] = [f"and {len(problems) - _MAX_PROBLEMS} more problem(s)"]
    raise ConfigError("; ".join(problems)) from None


def gpu_task(
    gpus: int = 1,
    memory: int | str | None = None,
    *,
    memory_by_index: Sequence[int | str | None] | None = None,
    exclusive: bool = False,
    gpu_model: str | None = None,
    priority: int = 0,
    priority_weight: int | None = None,
    activity: float | None = None,
    isolation: str | None = None,
    memory_policy: str | None = None,
    **extra: Any,
) -> dict[str, Any]:
    """Operator kwargs that send a task to CarmaExecutor: ``@task(**gpu_task(memory="12GiB"))``.

    ``memory_by_index``: for a mapped task, the memory of each instance by map index
    (``BashOperator.partial(task_id="ft", **gpu_task(memory_by_index=["4GiB", "12GiB"])).expand(...)``).
    ``memory_policy="declared"``: keep ``memory`` even once the task's runs peak above it (by
    default the next run's reservation then follows their peaks; docs/authoring.md).
    Validates the values at once, so a bad value fails where the DAG is written.  An unknown
    keyword (``memroy=``) is carried into the block, where the cluster policy refuses it with
    the nearest valid one: that task fails, the rest of the DAG runs (docs/authoring.md).
    """
    block: dict[str, Any] = {"gpus": gpus, "exclusive": exclusive, "priority": priority, **extra}
    if memory is not None:
        block["memory"] = memory
    if memory_by_index is not None:
        block["memory_by_index"] = list(memory_by_index) if isinstance(memory_by_index, tuple) else memory_by_index
    if priority_weight is not None:
        block["priority_weight"] = priority_weight
    if gpu_model is not None:
        block["gpu_model"] = gpu_model
    if activity is not None:
        block["activity"] = activity
    if isolation is not None:
        block["isolation"] = isolation
    if memory_policy is not None:
        block["memory_policy"] = memory_policy
    parse_task_config({CONFIG_KEY: block}, allow_unknown=True)
    return {"executor": EXECUTOR_NAME, "executor_config": {CONFIG_KEY: block}}


def is_mapped_task(task: Any) -> bool:
    """Whether the instances of ``task`` have a map index: a mapped operator, or a task in a mapped task group."""
    if getattr(task, "is_mapped", False) is True:
        return True
    closest = getattr(task, "get_closest_mapped_task_group", None)
    return callable(closest) and closest() is not None


def check_task(task: Any, *, allow_unknown: bool = False) -> GpuTaskConfig:
    """What the cluster policy checks of a CarmaExecutor task when its DAG is parsed.

    The executor_config (with ``memory_by_index`` only on a mapped task), and that no literal
    ``expand_kwargs`` entry sets ``executor_config``: Airflow gives every instance of a mapped
    task the executor_config of ``.partial()`` and fails such an instance at run time with
    ``TypeError: unmappable or already specified argument: executor_config``.
    """
    where = f"task {getattr(task, 'task_id', '?')!r}: executor_config"
    expand_input = getattr(task, "expand_input", None) if is_mapped_task(task) else None
    entries = getattr(expand_input, "value", None)
    if isinstance(entries, (list, tuple)):
        for index, entry in enumerate(entries):
            if isinstance(entry, Mapping) and ("executor_config" in entry or "executor" in entry):
                field = "executor_config" if "executor_config" in entry else "executor"
                raise ConfigError(
                    f"{where}: expand_kwargs entry {index} sets {field!r}, which Airflow does not map (every"
                    " instance gets the executor and executor_config of .partial()); size each instance in"
                    " .partial() instead: write **gpu_task(memory_by_index=['4GiB', '12GiB', ...]), entry i for"
                    " map index i"
                )
    return parse_task_config(
        getattr(task, "executor_config", None), where=where, mapped=is_mapped_task(task), allow_unknown=allow_unknown
    )
