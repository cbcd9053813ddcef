"""A waiting try's place among the tries that wait for the same executor's GPUs (queue_place.py)."""

from __future__ import annotations

from carma_airflow.views.queue_place import place_of


def _entry(key: str, priority: int, tie_break: int = 0) -> dict[str, object]:
    return {"key": key, "label": f"d.{key}", "priority": priority, "tie_break": tie_break}


def test_an_urgent_try_is_first_by_priority() -> None:
    body = {"waiting": [_entry("a", 1), _entry("urgent", 50), _entry("b", 1)]}
    place = place_of("urgent", [body])
    assert place is not None and place.ahead == () and place.waiting == 3
    assert place.line() == "priority 50; first by priority; 3 waiting for the GPUs of its executor in all"


def test_higher_priorities_are_named_highest_first_and_equals_counted_beside() -> None:
    body = {"waiting": [_entry("low", 0), _entry("mid", 5), _entry("top", 9), _entry("peer", 0), _entry("tb", 0, 2)]}
    place = place_of("low", [{"waiting": []}, body])
    assert place is not None
    assert place.ahead == ("d.top (9)", "d.mid (5)", "d.tb (0, tie-break 2)") and place.beside == 1
    assert place.line() == (
        "priority 0; 3 waiting tries of a higher priority go first: d.top (9), d.mid (5), d.tb (0, tie-break 2);"
        " then 1 of the same priority (the policy orders those); 5 waiting for the GPUs of its executor in all"
    )


def test_no_place_where_no_snapshot_lists_it_or_priorities_are_missing() -> None:
    assert place_of("x", [{"waiting": [_entry("a", 1)]}]) is None
    assert place_of("a", [{"waiting": [{"key": "a", "label": "d.a"}]}]) is None  # an executor before priorities
    assert place_of("a", [{"waiting": "junk"}, {}]) is None
