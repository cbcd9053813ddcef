"""Timeline geometry: fractions of the window, rows for tries that overlap on one GPU, ticks."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from carma_airflow.ui.timeline import MAX_TICKS, NO_GPU, Lane, TimelineBar, layout, ticks

T0 = datetime(2026, 5, 1, 12, 0, 0, tzinfo=timezone.utc)


def bar(key: str, start_s: float, end_s: float | None, lanes: tuple[str, ...] = ("g0",), outcome: str = "success"):
    return TimelineBar(
        key=key,
        label=f"dag.{key}",
        try_number=1,
        outcome=outcome,
        lanes=lanes,
        decided_at=T0 + timedelta(seconds=start_s - 1),
        started_at=T0 + timedelta(seconds=start_s) if lanes else None,
        ended_at=None if end_s is None else T0 + timedelta(seconds=end_s),
    )


def test_overlapping_tries_get_rows_and_free_rows_are_reused() -> None:
    out = layout(
        [Lane("g0", "GPU 0")],
        [bar("a", 0, 50), bar("b", 10, 30), bar("c", 40, 90), bar("d", 60, None, outcome="running")],
        T0,
        T0 + timedelta(seconds=100),
    )
    (lane,) = out["lanes"]
    rows = {b["key"]: b["row"] for b in lane["bars"]}
    assert rows == {"a": 0, "b": 1, "c": 1, "d": 0}
    assert lane["rows"] == 2
    d = next(b for b in lane["bars"] if b["key"] == "d")
    assert (d["x0"], d["x1"], d["open"]) == (0.6, 1.0, True)


def test_clipping_and_dropping_outside_the_window_and_the_no_gpu_lane() -> None:
    out = layout(
        [Lane("g0", "GPU 0"), Lane("g1", "GPU 1")],
        [
            bar("gone", -500, -100),
            bar("clipped", -50, 20),
            bar("wait", 70, None, lanes=(), outcome="waiting"),
            bar("pair", 10, 12, lanes=("g0", "g1")),
        ],
        T0,
        T0 + timedelta(seconds=100),
    )
    lanes = {lane["key"]: lane for lane in out["lanes"]}
    assert list(lanes) == ["g0", "g1", NO_GPU]
    g0 = {b["key"]: b for b in lanes["g0"]["bars"]}
    assert set(g0) == {"clipped", "pair"}
    assert g0["clipped"]["x0"] == 0.0 and g0["clipped"]["x1"] == 0.2
    assert [b["key"] for b in lanes["g1"]["bars"]] == ["pair"]
    (waiting,) = lanes[NO_GPU]["bars"]
    assert (waiting["kind"], waiting["x0"]) == ("wait", 0.69)


def test_a_try_that_never_ran_is_a_closed_bar_at_its_decision() -> None:
    # refused (never fits): no GPU, no start, no end time, but over: not an open bar up to "now"
    out = layout(
        [Lane("g0", "GPU 0")], [bar("refused", 30, None, lanes=(), outcome="failed")], T0, T0 + timedelta(seconds=100)
    )
    (refused,) = next(lane for lane in out["lanes"] if lane["key"] == NO_GPU)["bars"]
    assert refused["open"] is False and refused["x0"] == 0.29 and refused["x1"] < 0.3


def test_no_gpu_lane_only_when_needed() -> None:
    out = layout([Lane("g0", "GPU 0")], [], T0, T0 + timedelta(seconds=100))
    assert [lane["key"] for lane in out["lanes"]] == ["g0"]


def test_ticks_are_round_and_few() -> None:
    marks = ticks(T0 + timedelta(seconds=7), T0 + timedelta(minutes=10, seconds=7))
    assert 2 <= len(marks) <= MAX_TICKS
    assert [m["label"] for m in marks][:2] == ["12:02", "12:04"]
    assert all(0 <= m["x"] <= 1 for m in marks)
    short = ticks(T0, T0 + timedelta(seconds=30))
    assert [m["label"] for m in short][:2] == ["12:00:05", "12:00:10"]
