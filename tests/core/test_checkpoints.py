"""Checkpoint folder names and resume words (core/checkpoints.py): pure, no files."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from carma_airflow.core.checkpoints import (
    MAX_PART,
    RESUME_REASON,
    SAFE,
    Progress,
    folder_parts,
    resume_line,
    resumed_from,
    safe_part,
)

AT = datetime(2026, 12, 2, 2, 53, 10, tzinfo=timezone.utc).timestamp()


def test_plain_names_stay_readable() -> None:
    assert folder_parts("nightly", "scheduled__2026-12-01", "train_bert") == (
        "nightly",
        "scheduled__2026-12-01",
        "train_bert",
    )


@pytest.mark.parametrize(
    "odd",
    [
        "..",
        ".",
        "../../etc",
        "a/b",
        "/abs",
        "manual__2026-12-02T02:50:15.123+00:00",
        "x\x00y",
        "ü-ß",
        "%41",
        "",
        "@1",
        "~x",
        "x" * 400,
    ],
)
def test_any_name_becomes_one_safe_folder_name(odd: str) -> None:
    part = safe_part(odd)
    assert part not in ("", ".", "..") and not part.startswith(".")
    assert "/" not in part and "\x00" not in part
    assert len(part) <= MAX_PART
    assert set(part) <= SAFE | {"%", "~"}


def test_names_are_one_to_one() -> None:
    names = ["a:b", "a%3Ab", "a_b", "a.b", ".ab", "%2Eab", "", "%", "x" * 300, "x" * 301, "x" * 299 + "y"]
    parts = [safe_part(n) for n in names]
    assert len(set(parts)) == len(names)


def test_map_indexes_and_runs_get_their_own_folders() -> None:
    folders = {
        folder_parts("d", "r1", "t"),
        folder_parts("d", "r1", "t", 0),
        folder_parts("d", "r1", "t", 1),
        folder_parts("d", "r2", "t", 1),
        folder_parts("d", "r1", "t@1"),  # a task literally named t@1 is not map index 1 of t
    }
    assert len(folders) == 5
    assert folder_parts("d", "r1", "t", 3)[2] == "t@3"


def test_progress_round_trips_and_refuses_junk() -> None:
    p = Progress(step=1800, saved_at=AT, epoch=3, try_number=1)
    assert Progress.from_dict(p.to_dict()) == p
    for junk in (
        [],
        {"step": -1, "saved_at": AT},
        {"step": "5", "saved_at": AT},
        {"step": 1, "saved_at": "x"},
        {"step": True, "saved_at": AT},
        {"step": 1, "saved_at": float("nan")},
        {"step": 1, "saved_at": AT, "try_number": "2"},
    ):
        with pytest.raises(ValueError):
            Progress.from_dict(junk)


def test_the_resume_words() -> None:
    p = Progress(step=1800, saved_at=AT, epoch=3, try_number=1)
    assert resumed_from(p) == "resumed from step 1800 (epoch 3; checkpoint of 02:53:10 UTC, saved by try 1)"
    assert resumed_from(Progress(step=7, saved_at=AT)) == "resumed from step 7 (checkpoint of 02:53:10 UTC)"
    reasons = ("GPU 0: chosen", RESUME_REASON + resumed_from(p), "activity: unknown (prior)")
    assert resume_line(2, reasons) == (
        "try 2 resumed from step 1800 (epoch 3; checkpoint of 02:53:10 UTC, saved by try 1)"
    )
    assert resume_line(1, ("GPU 0: chosen",)) is None
