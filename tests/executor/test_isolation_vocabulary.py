"""One vocabulary for isolation, normalised or refused where it is parsed (issue 22): the task's
``executor_config`` (and ``gpu_task``), and ``[carma] isolation`` / ``isolation_cap``; and the
``memory_policy`` option beside them."""

from __future__ import annotations

from pathlib import Path

import pytest

from carma_airflow.config.settings import CarmaSettings
from carma_airflow.config.task_config import gpu_task, parse_task_config
from carma_airflow.core.errors import ConfigError

MODES = "auto, framework, mps, driver, none"


@pytest.mark.parametrize("written", ["MPS", "mps ", " Mps\t", "mps"])
def test_a_task_isolation_is_normalised(written: str) -> None:
    assert parse_task_config({"carma": {"isolation": written}}).isolation == "mps"
    assert gpu_task(isolation=written)["executor_config"]["carma"]["isolation"] == written  # checked, kept as written


@pytest.mark.parametrize("written", ["caps", "fixed", "", 3])
def test_a_task_isolation_outside_the_vocabulary_is_refused_with_the_allowed_values(written: object) -> None:
    with pytest.raises(ConfigError) as err:
        parse_task_config({"carma": {"isolation": written}}, where="task 't': executor_config")
    message = str(err.value)
    assert message.startswith("task 't': executor_config['carma']['isolation']: is not an isolation mode")
    assert MODES in message


@pytest.mark.parametrize(("written", "mode", "rule"), [("MPS ", "mps", "promise"), (" Driver", "driver", "live")])
def test_the_settings_isolation_is_normalised(tmp_path: Path, written: str, mode: str, rule: str) -> None:
    values = {"gpu_backend": "simulated", "isolation": written, "isolation_cap": rule.upper() + " "}
    settings = CarmaSettings.load(values.get, str(tmp_path))
    assert (settings.isolation, settings.isolation_cap) == (mode, rule)


def test_the_settings_refuse_a_value_outside_the_vocabulary_naming_the_allowed_ones(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"\[carma\] isolation = 'caps'; use one of auto \| framework \| mps"):
        CarmaSettings.load({"gpu_backend": "simulated", "isolation": "caps"}.get, str(tmp_path))
    refused = r"\[carma\] isolation_cap = 'fixed'; use one of promise \| protective \| live"
    with pytest.raises(ConfigError, match=refused):
        CarmaSettings.load({"gpu_backend": "simulated", "isolation_cap": "fixed"}.get, str(tmp_path))


def test_memory_policy_is_learn_by_default_and_declared_keeps_the_declaration() -> None:
    assert parse_task_config({"carma": {"memory": "8GiB"}}).memory_policy == "learn"
    kept = parse_task_config(gpu_task(memory="8GiB", memory_policy=" Declared")["executor_config"])
    assert kept.memory_policy == "declared" and kept.keeps_declared
    assert not parse_task_config({"carma": {"memory_policy": "learn"}}).keeps_declared


@pytest.mark.parametrize("written", ["keep", "history", None, 1])
def test_a_bad_memory_policy_says_what_to_write(written: object) -> None:
    with pytest.raises(ConfigError) as err:
        parse_task_config({"carma": {"memory_policy": written}})
    message = str(err.value)
    assert "['memory_policy']: is not a memory policy; write memory_policy='learn'" in message
    assert "'declared'" in message
    if written is not None:  # gpu_task(memory_policy=None): not given, the default
        with pytest.raises(ConfigError, match="memory_policy"):
            gpu_task(memory_policy=written)  # type: ignore[arg-type]  # where the DAG is written
