"""A try that grew past what it was placed with and was not stopped is said so (core/grown.py)."""

from __future__ import annotations

from carma_airflow.core.grown import grown_line


def test_a_grown_try_under_the_live_cap_is_said_with_both_sizes() -> None:
    line = grown_line("success", 30720, 8192, declared=True)
    assert line is not None and line.startswith("grew to 30.0 GiB past its declared 8.0 GiB and was not stopped:")
    assert "alone on its GPU (or the first to grow)" in line and "a neighbour placed beside it would have" in line
    running = grown_line("running", 30720, 8192, declared=False)
    assert running is not None and "past its reserved 8.0 GiB" in running and "a neighbour placed now would" in running


def test_nothing_is_said_of_a_try_that_kept_near_its_placement_or_was_stopped() -> None:
    assert grown_line("success", 8192 + 800, 8192, declared=True) is None  # within 10 %
    assert grown_line("oom", 30720, 8192, declared=True) is None  # stopped: its OOM says it
    assert grown_line("failed", 30720, 8192, declared=True) is None
    assert grown_line("running", None, 8192, declared=True) is None  # not measured yet


def test_another_cap_rule_is_named() -> None:
    line = grown_line("success", 30720, 8192, declared=True, cap_rule="none")
    assert line is not None and "isolation none" in line and "live cap" not in line
