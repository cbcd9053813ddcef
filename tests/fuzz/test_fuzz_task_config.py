"""executor_config, gpu_task and GpuTaskConfig under arbitrary JSON-like input.

Every input either parses to a config that satisfies the contract or raises ConfigError whose
message is one line, names the field and says what to write.  Nothing else may escape: the
executor turns ConfigError (and only that) into a failed task instead of a crashed scheduler.
"""

from __future__ import annotations

import math
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from carma_airflow.config.task_config import EXECUTOR_NAME, GpuTaskConfig, gpu_task, parse_task_config
from carma_airflow.config.task_config import FIELDS as ALL_FIELDS
from carma_airflow.core.errors import ConfigError, brief
from carma_airflow.core.units import MAX_MIB
from carma_airflow.launching import check_task_env

FUZZ = settings.get_profile("carma-fuzz")
FIELDS = ("gpus", "memory", "memory_by_index", "exclusive", "gpu_model", "priority")

scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.integers(min_value=-(2**200), max_value=2**200)
    | st.floats()  # NaN and infinities included
    | st.text()
    | st.text(alphabet="0123456789.eE+-_ xXgGiImMbBtT\x00\n\u0663\u2028", max_size=40)
    | st.binary(max_size=8)
)
json_like = st.recursive(
    scalars,
    lambda children: (
        st.lists(children, max_size=4)
        | st.tuples(children, children)
        | st.dictionaries(st.text(max_size=8) | st.integers(), children, max_size=4)
    ),
    max_leaves=12,
)
keys = st.sampled_from(FIELDS) | st.text(max_size=12) | st.integers() | st.none() | st.tuples(st.text(max_size=3))
blocks = st.dictionaries(keys, json_like, max_size=6)
executor_configs = (
    json_like
    | st.builds(lambda b: {"carma": b}, blocks)
    | st.builds(
        lambda b, other: {**other, "carma": b}, blocks | json_like, st.dictionaries(st.text(max_size=8), json_like)
    )
)

valid_blocks = st.fixed_dictionaries(
    {},
    optional={
        "gpus": st.integers(1, 64),
        "memory": st.integers(1, MAX_MIB) | st.sampled_from(["12GiB", "800MiB", "1.5 GB", " 2t "]),
        "memory_by_index": st.lists(st.none() | st.integers(1, MAX_MIB) | st.sampled_from(["4GiB", "1.5 GB"])),
        "exclusive": st.booleans(),
        "gpu_model": st.sampled_from(["A100", "H100-80GB", "l4", "V100 32GB"]),
        "priority": st.integers(-(2**31), 2**31 - 1),
    },
)


def check_contract(cfg: GpuTaskConfig) -> None:
    assert type(cfg.gpus) is int and 1 <= cfg.gpus <= 64
    assert cfg.memory is None or (type(cfg.memory) is int and 1 <= cfg.memory <= MAX_MIB)
    sizes = cfg.memory_by_index
    assert sizes is None or all(m is None or (type(m) is int and 1 <= m <= MAX_MIB) for m in sizes)
    assert all(m is None or (type(m) is int and 1 <= m <= MAX_MIB) for m in map(cfg.memory_for, range(-1, 6)))
    assert type(cfg.exclusive) is bool
    assert cfg.gpu_model is None or (isinstance(cfg.gpu_model, str) and 0 < len(cfg.gpu_model) <= 64)
    assert type(cfg.priority) is int and -(2**31) <= cfg.priority < 2**31
    # what was accepted is accepted again unchanged (a DAG re-parsed, a retry re-read)
    again = parse_task_config({"carma": cfg.model_dump()}, allow_unknown=True)
    assert [getattr(again, f) for f in FIELDS] == [getattr(cfg, f) for f in FIELDS]


def check_message(exc: ConfigError, where: str, block: Any) -> str:
    message = str(exc)
    assert message.startswith(where), message
    assert "write" in message, message  # says what to write instead
    # one line without NUL: it travels to the task process as CARMA_CONFIG_ERROR
    assert check_task_env({"CARMA_CONFIG_ERROR": message}) == {"CARMA_CONFIG_ERROR": message}
    problems = len(block) if isinstance(block, dict) else 1
    assert len(message) <= 400 * max(problems, 1), len(message)
    return message


@settings(FUZZ)
@given(executor_configs)
def test_any_executor_config_parses_or_is_a_config_error(executor_config: Any) -> None:
    try:
        cfg = parse_task_config(executor_config)
    except ConfigError as exc:
        block = executor_config.get("carma") if isinstance(executor_config, dict) else None
        # each key of the block and each top-level key (a near miss of 'carma') may be a problem
        keys = (len(block) if isinstance(block, dict) else 0) + (
            len(executor_config) if isinstance(executor_config, dict) else 0
        )
        check_message(exc, "executor_config", dict.fromkeys(range(keys)))
    else:
        check_contract(cfg)


@settings(FUZZ)
@given(valid_blocks, st.sampled_from(FIELDS), json_like)
def test_one_bad_field_is_named_in_the_message(base: dict[str, Any], field: str, junk: Any) -> None:
    assert parse_task_config({"carma": base}) is not None  # the base is valid
    where = "task 't': executor_config"
    try:
        cfg = parse_task_config({"carma": {**base, field: junk}}, where=where)
    except ConfigError as exc:
        message = check_message(exc, where, {field: junk})
        assert f"['{field}']" in message
    else:
        check_contract(cfg)


@settings(FUZZ)
@given(st.integers(min_value=-(2**70), max_value=2**70))
def test_integer_fields_accept_exactly_their_range(n: int) -> None:
    for field, low, high in (("gpus", 1, 64), ("memory", 1, MAX_MIB), ("priority", -(2**31), 2**31 - 1)):
        try:
            cfg = parse_task_config({"carma": {field: n}})
        except ConfigError as exc:
            assert not low <= n <= high, (field, n, exc)
            assert f"['{field}']" in str(exc)
        else:
            assert low <= n <= high, (field, n)
            assert getattr(cfg, field) == n


@settings(FUZZ)
@given(st.floats() | st.booleans())
def test_floats_and_bools_are_whole_numbers_or_refused(x: float | bool) -> None:
    for field in ("gpus", "priority"):
        try:
            cfg = parse_task_config({"carma": {field: x}})
        except ConfigError:
            continue
        assert not isinstance(x, bool), f"{field}={x!r} taken as a number"
        assert math.isfinite(x) and x.is_integer() and getattr(cfg, field) == int(x)


gpu_task_extra = st.dictionaries(st.text(max_size=10).filter(lambda k: k not in ALL_FIELDS), json_like, max_size=3)


@settings(FUZZ)
@given(
    gpus=json_like,
    memory=json_like,
    exclusive=json_like,
    gpu_model=json_like,
    priority=json_like,
    extra=gpu_task_extra,
)
def test_gpu_task_validates_where_the_dag_is_written(
    gpus: Any, memory: Any, exclusive: Any, gpu_model: Any, priority: Any, extra: dict[str, Any]
) -> None:
    try:
        kwargs = gpu_task(gpus, memory, exclusive=exclusive, gpu_model=gpu_model, priority=priority, **extra)
    except ConfigError as exc:
        check_message(exc, "executor_config", {"a": 1, "b": 2, "c": 3, "d": 4, "e": 5, **extra})
    else:
        assert kwargs["executor"] == EXECUTOR_NAME
        check_contract(parse_task_config(kwargs["executor_config"], allow_unknown=True))
        if extra:  # an unknown keyword is carried to the cluster policy, which refuses it by name
            try:
                parse_task_config(kwargs["executor_config"])
            except ConfigError as exc:
                assert all(f"unknown key {brief(key, 40)}" in str(exc) for key in list(extra)[:5])
            else:
                raise AssertionError(f"unknown gpu_task() keywords {sorted(extra)} were accepted")


@settings(FUZZ)
@given(valid_blocks, gpu_task_extra)
def test_valid_blocks_with_unknown_keys_are_refused_by_name_or_kept_when_allowed(
    block: dict[str, Any], extra: dict[str, Any]
) -> None:
    cfg = parse_task_config({"carma": {**block, **extra}}, allow_unknown=True)  # [carma] allow_unknown_keys
    check_contract(cfg)
    for key in ("gpus", "exclusive", "priority"):
        if key in block:
            assert getattr(cfg, key) == block[key]
    assert set(cfg.model_extra or {}) == set(extra)
    if not extra:
        return
    try:
        parse_task_config({"carma": {**block, **extra}}, where="task 't': executor_config")
    except ConfigError as exc:
        message = check_message(exc, "task 't': executor_config", extra)
        assert all(f"unknown key {brief(key, 40)}" in message for key in list(extra)[:5])
    else:
        raise AssertionError(f"unknown keys {sorted(extra)} were accepted")


@settings(FUZZ, max_examples=max(FUZZ.max_examples // 10, 5))
@given(st.integers(min_value=6, max_value=5000))
def test_many_bad_keys_still_give_a_short_message(n: int) -> None:
    block: dict[Any, Any] = {i: "x" * 1000 for i in range(n)}
    try:
        parse_task_config({"carma": block})
    except ConfigError as exc:
        message = str(exc)
        assert "[0]: Keys should be strings" in message and f"and {n - 5} more problem(s)" in message
        assert len(message) < 2000
    else:
        raise AssertionError("integer keys were accepted")
