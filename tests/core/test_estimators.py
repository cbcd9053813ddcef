"""Memory estimators: the catalogue values, the chain, the floor and the history learner."""

from __future__ import annotations

import math
from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from carma_airflow.core import TaskMemoryInfo, UnknownPolicyError, estimator_names, make_estimator
from carma_airflow.core.estimators import outgrew_declaration, outgrown_peaks

INFO = TaskMemoryInfo(
    declared_mib=None,
    measured_peak_mib=6684,
    horus_mib=21525,
    faketensor_mib=3121,
    gpumemnet_mib=16000,
)


def test_estimator_names() -> None:
    assert set(estimator_names()) == {"declared", "oracle", "horus", "faketensor", "gpumemnet", "floor", "history"}


@pytest.mark.parametrize(
    ("name", "mib"),
    [("oracle", 6684), ("horus", 21525), ("faketensor", 3121), ("gpumemnet", 16000)],
)
def test_named_estimator_returns_catalogue_value(name: str, mib: int) -> None:
    need = make_estimator(name).estimate(INFO)
    assert need is not None
    assert need.mib == mib
    assert name in need.source
    assert not need.whole_gpu
    assert need.add_headroom
    assert need.filter_mib(2048) == mib + 2048


def test_oracle_peak_of_40000_is_memory_not_the_sentinel() -> None:
    need = make_estimator("oracle").estimate(TaskMemoryInfo(measured_peak_mib=40000))
    assert need is not None
    assert (need.mib, need.whole_gpu) == (40000, False)


@pytest.mark.parametrize("name", ["horus", "faketensor", "gpumemnet"])
def test_gave_up_value_means_whole_gpu(name: str) -> None:
    info = TaskMemoryInfo(measured_peak_mib=40000, horus_mib=40000, faketensor_mib=40000, gpumemnet_mib=40000)
    need = make_estimator(name).estimate(info)
    assert need is not None
    assert need.whole_gpu
    assert "whole GPU" in need.source


def test_just_below_gave_up_is_an_estimate() -> None:
    need = make_estimator("horus").estimate(TaskMemoryInfo(horus_mib=39999))
    assert need is not None and not need.whole_gpu and need.mib == 39999


@pytest.mark.parametrize("name", ["oracle", "horus", "faketensor", "gpumemnet", "history", "floor"])
def test_declared_wins(name: str) -> None:
    info = TaskMemoryInfo(
        declared_mib=12345,
        measured_peak_mib=6684,
        horus_mib=40000,
        faketensor_mib=3121,
        gpumemnet_mib=16000,
        history_mib=(5000,),
    )
    need = make_estimator(name).estimate(info)
    assert need is not None
    assert need.mib == 12345
    assert need.source == "declared"
    assert not need.whole_gpu


def test_floor_demands_fixed_free_memory_without_headroom() -> None:
    need = make_estimator("floor").estimate(INFO)
    assert need is not None
    assert need.mib == 5120
    assert need.add_headroom is False
    assert need.filter_mib(2048) == 5120


def test_floor_is_configurable() -> None:
    need = make_estimator("floor", floor_mib=8192).estimate(INFO)
    assert need is not None and need.mib == 8192


@pytest.mark.parametrize("name", ["oracle", "horus", "faketensor", "gpumemnet"])
def test_unknown_task_falls_back_to_floor(name: str) -> None:
    need = make_estimator(name, floor_mib=6000).estimate(TaskMemoryInfo())
    assert need is not None
    assert need.mib == 6000
    assert not need.add_headroom


def test_history_uses_max_of_recent_peaks_plus_margin() -> None:
    est = make_estimator("history")
    need = est.estimate(TaskMemoryInfo(gpumemnet_mib=16000, history_mib=(1000, 5000, 3000)))
    assert need is not None
    # 5000 * 1.1 = 5500 -> rounded up to a multiple of 256 -> 5632
    assert need.mib == 5632
    assert need.source.startswith("history")


def test_history_only_looks_at_the_last_five_runs() -> None:
    est = make_estimator("history")
    need = est.estimate(TaskMemoryInfo(history_mib=(30000, 1000, 1000, 1000, 1000, 2000)))
    assert need is not None
    assert need.mib == 2304  # 2000 * 1.1 = 2200 -> 2304; the old 30000 peak is out of the window


def test_history_falls_back_to_gpumemnet() -> None:
    need = make_estimator("history").estimate(TaskMemoryInfo(gpumemnet_mib=16000))
    assert need is not None
    assert need.mib == 16000
    assert need.source == "gpumemnet"


def test_history_falls_back_to_floor_last() -> None:
    need = make_estimator("history").estimate(TaskMemoryInfo())
    assert need is not None
    assert need.mib == 5120 and not need.add_headroom


@given(st.lists(st.integers(min_value=1, max_value=150_000), min_size=1, max_size=10))
def test_history_estimate_covers_recent_peaks(history: list[int]) -> None:
    need = make_estimator("history").estimate(TaskMemoryInfo(history_mib=tuple(history)))
    assert need is not None
    recent = max(history[-5:])
    assert need.mib % 256 == 0
    assert need.mib >= recent * 1.1 - 1e-6
    assert need.mib <= recent * 1.1 + 256 + 1e-6


@pytest.mark.parametrize("peak", [12800, 25600])
def test_history_exact_multiple_is_not_bumped(peak: int) -> None:
    need = make_estimator("history").estimate(TaskMemoryInfo(history_mib=(peak,)))
    exact = math.ceil(Fraction(peak) * Fraction(11, 10) / 256) * 256
    assert need is not None
    assert need.mib == exact  # 12800 * 1.1 = 14080 = 55 * 256


def test_explicit_chain() -> None:
    est = make_estimator("faketensor+horus")
    assert est.name == "faketensor+horus"
    need = est.estimate(TaskMemoryInfo(horus_mib=7000))
    assert need is not None and need.mib == 7000  # faketensor knew nothing
    need = est.estimate(TaskMemoryInfo())
    assert need is not None and need.mib == 5120  # floor appended


def test_name_is_normalised() -> None:
    assert make_estimator("  Oracle ").name == "oracle"


@pytest.mark.parametrize("bad", ["psychic", "", "oracle+psychic", "+"])
def test_unknown_estimator(bad: str) -> None:
    with pytest.raises(UnknownPolicyError, match="unknown estimator") as info:
        make_estimator(bad)
    assert "gpumemnet" in str(info.value)  # lists the known names


# -- learning past a wrong declaration (issue 22) -------------------------------------------------


def test_a_task_that_outgrew_its_declaration_is_reserved_by_its_history() -> None:
    """Declared 8 GiB, peaked at 30000 MiB on its last two runs: the next run reserves the peak."""
    info = TaskMemoryInfo(declared_mib=8192, history_mib=(30000, 30000))
    need = make_estimator("history").estimate(info)
    assert need is not None
    assert need.mib == math.ceil(30000 * 1.1 / 256) * 256 == 33024
    assert need.source == (
        "outgrew its declaration: declared 8192 MiB; its last 2 runs peaked at 30000, 30000 MiB: "
        "reserving 33024 MiB (30000 + 10 %); to keep the declaration instead, write memory_policy='declared'"
    )
    assert outgrew_declaration(need.source)


def test_the_author_may_keep_the_declaration_and_is_told_it_was_outgrown() -> None:
    info = TaskMemoryInfo(declared_mib=8192, history_mib=(30000, 30000), keep_declared=True)
    need = make_estimator("history").estimate(info)
    assert need is not None and need.mib == 8192
    assert need.source == (
        "outgrew its declaration, kept: declared 8192 MiB (memory_policy='declared'); "
        "its last 2 runs peaked at 30000, 30000 MiB"
    )
    assert outgrew_declaration(need.source)


@pytest.mark.parametrize(
    ("history", "outgrown"),
    [
        ((30000, 30000), True),
        ((30000,), True),  # the only run it has: a success above its declaration
        ((30000, 8000), False),  # the latest run kept to it
        ((8000, 30000, 30000), True),  # the last two
        ((9000, 9000), False),  # within 10 % of 8192: a CUDA context, the allocator's jitter
        ((9100, 9100), True),
        ((), False),
    ],
)
def test_which_histories_outgrow_a_declaration(history: tuple[int, ...], outgrown: bool) -> None:
    info = TaskMemoryInfo(declared_mib=8192, history_mib=history)
    assert bool(outgrown_peaks(info)) is outgrown
    need = make_estimator("history").estimate(info)
    assert need is not None
    assert (need.source != "declared") is outgrown
    assert (need.mib > 8192) is outgrown


def test_a_declaration_above_the_history_is_kept() -> None:
    """Over-declaring is the author's choice (headroom): history only raises a reservation."""
    need = make_estimator("history").estimate(TaskMemoryInfo(declared_mib=20000, history_mib=(5000, 6000)))
    assert need is not None and (need.mib, need.source) == (20000, "declared")


@pytest.mark.parametrize("name", ["floor", "gpumemnet", "declared"])
def test_without_history_in_the_chain_a_declaration_is_never_overridden(name: str) -> None:
    need = make_estimator(name).estimate(TaskMemoryInfo(declared_mib=8192, history_mib=(30000, 30000)))
    assert need is not None and (need.mib, need.source) == (8192, "declared")


def test_a_map_index_that_outgrew_its_declaration_says_whose_runs() -> None:
    info = TaskMemoryInfo(declared_mib=4096, history_mib=(9000, 9500), history_of="map index 3")
    need = make_estimator("history").estimate(info)
    assert need is not None and need.mib == math.ceil(9500 * 1.1 / 256) * 256
    assert "its last 2 runs of map index 3 peaked at 9000, 9500 MiB" in need.source
    assert "(9500 + 10 %)" in need.source
    assert not outgrew_declaration("declared") and not outgrew_declaration(None)


def test_a_learned_margin_never_lifts_a_peak_that_fit_past_the_largest_gpu() -> None:
    """Issue 41: a task that ran on an L4 (22,522 MiB for an idle try) at 21,000 MiB would ask
    23,296 MiB (+10 %, rounded) and never run again; its margin is cut to what the GPU offers."""
    capped = make_estimator("history+floor", largest_mib=22_522)
    need = capped.estimate(TaskMemoryInfo(history_mib=(20_000, 21_000)))
    assert need is not None and need.mib == 22_522
    assert "margin cut to the largest GPU's 22522 MiB" in need.source
    uncapped = make_estimator("history+floor").estimate(TaskMemoryInfo(history_mib=(20_000, 21_000)))
    assert uncapped is not None and uncapped.mib == 23_296
    small = capped.estimate(TaskMemoryInfo(history_mib=(12_800,)))
    assert small is not None and small.mib == 14_080  # well within: the margin as before
    beyond = capped.estimate(TaskMemoryInfo(history_mib=(30_000,)))  # ran on a GPU no longer here
    assert beyond is not None and beyond.mib == 33_024
