"""Checkpoint folders, pure parts: where a task instance's folder lies under the root, the
progress record its tries leave there, and the words that say where a try resumed.

A task instance (dag_id, run_id, task_id, map_index) has one folder for all its tries: an OOM
retry, a GPU-fault retry and the new try after a scheduler restart find what the last try
saved.  The names are made safe for any run_id: only ``A-Z a-z 0-9 - _ .`` pass as they are,
every other character is percent-encoded (UTF-8), a leading dot is encoded (no ``.``, ``..`` or
hidden name), and a name too long for a file system is cut and ends with a hash of the whole.
No I/O and no clock here (carma_airflow/checkpoint.py does the files).
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

SAFE = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_.")
MAX_PART = 120  # characters of one folder name (file systems allow 255 bytes)
RESUME_REASON = "checkpoint: "  # a placement reason that says what the try resumes from


def safe_part(text: str) -> str:
    """``text`` as one folder name: readable where it can be, never a path, one-to-one."""
    out = "".join(c if c in SAFE else "".join(f"%{b:02X}" for b in c.encode()) for c in text)
    if not out:
        return "%"  # no encoding yields a lone '%': the empty name stays distinct
    if out.startswith("."):
        out = "%2E" + out[1:]
    if len(out) > MAX_PART:  # '~' is always encoded, so a cut name cannot equal an uncut one
        out = out[: MAX_PART - 17] + "~" + hashlib.sha256(text.encode()).hexdigest()[:16]
    return out


def folder_parts(dag_id: str, run_id: str, task_id: str, map_index: int = -1) -> tuple[str, str, str]:
    """The folder of a task instance below the root: ``<dag>/<run>/<task>``, ``<task>@<i>`` for
    the instance of a mapped task with map index ``i`` ('@' is always encoded in a name)."""
    task = safe_part(task_id)
    if map_index >= 0:
        task = f"{task}@{map_index}"
    return safe_part(dag_id), safe_part(run_id), task


@dataclass(frozen=True, slots=True)
class Progress:
    """What a try saved last: its step (and epoch), when, and which try it was."""

    step: int
    saved_at: float  # seconds since the epoch
    epoch: int | None = None
    try_number: int | None = None

    def __post_init__(self) -> None:
        if isinstance(self.step, bool) or not isinstance(self.step, int) or self.step < 0:
            raise ValueError(f"step must be an int >= 0, got {self.step!r}")
        if self.epoch is not None and (isinstance(self.epoch, bool) or not isinstance(self.epoch, int)):
            raise ValueError(f"epoch must be an int or None, got {self.epoch!r}")
        if not isinstance(self.saved_at, (int, float)) or not math.isfinite(self.saved_at):
            raise ValueError(f"saved_at must be seconds since the epoch, got {self.saved_at!r}")

    def to_dict(self) -> dict[str, Any]:
        return {"step": self.step, "epoch": self.epoch, "saved_at": self.saved_at, "try_number": self.try_number}

    @classmethod
    def from_dict(cls, data: Any) -> Progress:
        """ValueError if ``data`` is not a progress record."""
        if not isinstance(data, dict):
            raise ValueError(f"a progress record is a JSON object, got {type(data).__name__}")
        try_number = data.get("try_number")
        if try_number is not None and (isinstance(try_number, bool) or not isinstance(try_number, int)):
            raise ValueError(f"try_number must be an int, got {try_number!r}")
        return cls(step=data.get("step"), saved_at=data.get("saved_at"), epoch=data.get("epoch"), try_number=try_number)  # type: ignore[arg-type]


def clock_time(at: float) -> str:
    """``HH:MM:SS UTC`` of a moment given in seconds since the epoch."""
    return datetime.fromtimestamp(at, tz=timezone.utc).strftime("%H:%M:%S UTC")


def resumed_from(progress: Progress) -> str:
    """``resumed from step 1800 (epoch 3; checkpoint of 02:53:10 UTC, saved by try 1)``."""
    epoch = f"epoch {progress.epoch}; " if progress.epoch is not None else ""
    by = f", saved by try {progress.try_number}" if progress.try_number is not None else ""
    return f"resumed from step {progress.step} ({epoch}checkpoint of {clock_time(progress.saved_at)}{by})"


def found_files(files: int, newest_at: float) -> str:
    """What a folder without a progress record holds, in the words of a resume line."""
    return (
        f"found a checkpoint of {clock_time(newest_at)} ({files} file(s), no progress record: "
        "call carma_airflow.record_checkpoint(step) after each save to have its step shown)"
    )


def resume_line(try_number: int, reasons: tuple[str, ...] | list[str]) -> str | None:
    """``try 2 resumed from step N (checkpoint of HH:MM:SS UTC ...)`` from a placement's reasons,
    None if the try started with an empty checkpoint folder."""
    for reason in reasons:
        if reason.startswith(RESUME_REASON):
            return f"try {try_number} {reason[len(RESUME_REASON) :]}"
    return None


__all__ = [
    "MAX_PART",
    "RESUME_REASON",
    "SAFE",
    "Progress",
    "clock_time",
    "folder_parts",
    "found_files",
    "resume_line",
    "resumed_from",
    "safe_part",
]
