"""core/vouch.py: learned peaks below the estimate without them wait for a learned interference fit."""

from carma_airflow.core.task import MemoryNeed
from carma_airflow.core.vouch import vouched_need

LEARNED = MemoryNeed(3_000, "history (2 run(s), max 2700 MiB)")
COLD = MemoryNeed(8_000, "gpumemnet (bin 8000 MiB)")


def test_a_lower_learned_estimate_waits_while_the_fit_is_not_learned() -> None:
    need = vouched_need(LEARNED, COLD, vouched=False)
    assert need.mib == 8_000
    assert need.source.startswith("gpumemnet (bin 8000 MiB); learned peaks (3000 MiB)")
    assert "interference model has learned" in need.source


def test_a_learned_fit_takes_the_learned_estimate() -> None:
    assert vouched_need(LEARNED, COLD, vouched=True) is LEARNED


def test_a_learned_estimate_above_the_cold_one_is_safety_and_taken_at_once() -> None:
    grown = MemoryNeed(12_000, "outgrew its declaration")
    assert vouched_need(grown, COLD, vouched=False) is grown


def test_whole_gpu_estimates_and_a_missing_cold_one_are_left_alone() -> None:
    assert vouched_need(LEARNED, None, vouched=False) is LEARNED
    whole = MemoryNeed(0, "unknown", whole_gpu=True)
    assert vouched_need(LEARNED, whole, vouched=False) is LEARNED
    assert vouched_need(whole, COLD, vouched=False) is whole
