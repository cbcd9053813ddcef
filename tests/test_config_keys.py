"""Keys carma would otherwise ignore: each refused by name, with the nearest valid key (config_keys.py)."""

from __future__ import annotations

import pytest

from carma_airflow.config.task_config import FIELDS, gpu_task, parse_task_config
from carma_airflow.config.unknown_keys import nearest
from carma_airflow.core.errors import ConfigError

WHERE = "task 'train': executor_config"


@pytest.mark.parametrize(
    ("typed", "meant"),
    [
        ("memroy", "memory"),
        ("Memory", "memory"),
        ("memory_limit", "memory"),  # a valid key it starts with, before a closer spelling
        ("mem", "memory"),
        ("prio", "priority"),
        ("gpu", "gpus"),
        ("num_gpus", "gpus"),
        ("exclusve", "exclusive"),
        ("gpu-model", "gpu_model"),
        ("queue", None),
        ("", None),
    ],
)
def test_nearest_names_what_was_meant(typed: str, meant: str | None) -> None:
    assert nearest(typed, FIELDS) == meant


def test_an_unknown_key_in_the_section_is_refused_with_the_nearest_one() -> None:
    with pytest.raises(ConfigError) as caught:
        parse_task_config({"carma": {"memroy": "20GiB"}}, where=WHERE)
    message = str(caught.value)
    assert message.startswith("task 'train': executor_config['carma']: unknown key 'memroy'; did you mean 'memory'?")
    assert "allow_unknown_keys" in message  # what a team that must keep them writes


@pytest.mark.parametrize("section", ["crama", "Carma", "CARMA", "karma", "carma "])
def test_a_near_miss_of_the_section_is_refused(section: str) -> None:
    with pytest.raises(ConfigError, match=rf"unknown section {section!r}; did you mean 'carma'\?"):
        parse_task_config({section: {"memory": "20GiB"}}, where=WHERE)


def test_a_field_outside_the_section_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"'memory' is outside the 'carma' section.*write executor_config=\{'carma'"):
        parse_task_config({"memory": "20GiB"}, where=WHERE)


def test_keys_of_other_executors_and_of_the_policy_pass() -> None:
    config = parse_task_config(
        {"carma": {"memory": "2GiB"}, "pod_override": {}, "camera": 1, "carma_author_retries": 0}, where=WHERE
    )
    assert config.memory == 2048


def test_every_problem_is_named_together() -> None:
    with pytest.raises(ConfigError) as caught:
        parse_task_config({"carma": {"memroy": "20GiB", "gpus": 0, "exclusve": True}}, where=WHERE)
    message = str(caught.value)
    assert "'memroy'; did you mean 'memory'" in message and "'exclusve'; did you mean 'exclusive'" in message
    assert "['gpus']: Input should be greater than or equal to 1" in message


def test_allow_unknown_keeps_them() -> None:
    config = parse_task_config({"carma": {"memroy": "20GiB"}, "crama": {}}, allow_unknown=True)
    assert config.model_extra == {"memroy": "20GiB"} and config.memory is None


def test_gpu_task_carries_an_unknown_keyword_to_the_policy_which_refuses_it() -> None:
    kwargs = gpu_task(memroy="20GiB")  # values are checked at once; the key is refused where the DAG is parsed
    assert kwargs["executor_config"]["carma"]["memroy"] == "20GiB"
    with pytest.raises(ConfigError, match=r"unknown key 'memroy'; did you mean 'memory'\?"):
        parse_task_config(kwargs["executor_config"], where=WHERE)
    with pytest.raises(ConfigError, match=r"\['gpus'\]"):
        gpu_task(gpus=0, memroy="20GiB")  # a bad value still fails where the DAG is written
