"""What /proc/PID/stat says of a process: its start time (to tell a PID reused by another
process) and its session (which try a process belongs to)."""

from __future__ import annotations

from pathlib import Path


def _fields(pid: int) -> list[str] | None:
    """The fields after the command name (field 3 on), or None if the process is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # the command name (field 2) may contain spaces and parentheses: split after the last ')'
    return stat.rsplit(")", 1)[-1].split()


def process_start_ticks(pid: int) -> int | None:
    """When ``pid`` started, in clock ticks since boot (field 22); None if gone or a zombie."""
    fields = _fields(pid)
    try:
        if fields is None or fields[0] == "Z":  # a zombie has ended
            return None
        return int(fields[19])
    except (IndexError, ValueError):
        return None


def session_of(pid: int) -> int | None:
    """The session id of process ``pid`` (field 6), None if it is gone."""
    fields = _fields(pid)
    try:
        return int(fields[3]) if fields is not None else None
    except (IndexError, ValueError):
        return None


__all__ = ["process_start_ticks", "session_of"]
