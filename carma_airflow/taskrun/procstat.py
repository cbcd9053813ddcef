"""What /proc says of a process: its start time (to tell a PID reused by another process)."""

from __future__ import annotations

from pathlib import Path


def process_start_ticks(pid: int) -> int | None:
    """When ``pid`` started, in clock ticks since boot (field 22 of /proc/PID/stat); None if gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # the command name (field 2) may contain spaces and parentheses: split after the last ')'
    fields = stat.rsplit(")", 1)[-1].split()
    try:
        if fields[0] == "Z":  # a zombie has ended
            return None
        return int(fields[19])
    except (IndexError, ValueError):
        return None


__all__ = ["process_start_ticks"]
