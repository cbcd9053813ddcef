"""``SimConfig.learned_floor``: the completion-time floor on learned GPU models, switched per run, so a
bench can run the rule beside itself without it (``bench/learning.py --knobs learned_floor=off``)."""

from __future__ import annotations

import pytest

from carma_airflow.core import parse_gpu_list
from carma_airflow.core.policies.completion_time import CompletionSettings, CompletionTime
from carma_airflow.sim import SimConfig


def _floor(**knobs: object) -> float | None:
    policy = SimConfig(gpus=tuple(parse_gpu_list("2xA100-40GB")), **knobs).built_policy()  # type: ignore[arg-type]
    assert isinstance(policy, CompletionTime)
    return policy.settings.learned_floor


def test_the_policys_own_unless_a_run_says_otherwise() -> None:
    assert _floor() == CompletionSettings().learned_floor == 0.0
    assert _floor(learned_floor="off") is None
    assert _floor(learned_floor=0.2) == 0.2


@pytest.mark.parametrize("bad", ["some", 3.0])
def test_a_bad_learned_floor_says_what_it_takes(bad: object) -> None:
    with pytest.raises(ValueError, match="learned_floor must be None, off or a number between -1 and 1"):
        SimConfig(gpus=tuple(parse_gpu_list("2xA100-40GB")), learned_floor=bad)  # type: ignore[arg-type]
