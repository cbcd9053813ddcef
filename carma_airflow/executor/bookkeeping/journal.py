"""The store writer's journal: every ordered write on disk from the moment it is put until the
store has taken it, so that a scheduler killed outright (SIGKILL, the OOM killer, a lost host)
loses none of the writes it had queued.

Decision: one append-only file per living writer, ``<state_dir>/journal/<pid>-<id>.jsonl``, held
under an exclusive ``flock`` for the writer's life.  The kernel drops the lock when the process
dies however it dies, so a lock that can be taken marks a journal whose writer is gone: the next
writer to start on the host (:func:`recover`) takes its writes, in their order, before anything
else.  A living peer's journal is never touched (its lock is held).

Lines: ``+<seq> <write as JSON>`` when a write is put, ``-<seq>`` once the store took it (or it
was parked); the file is emptied whenever the queue is.  Each line is one ``write(2)``: a killed
process leaves whole lines in the page cache, which the kernel writes out (only a power cut can
lose the tail, and a torn last line is parked, not lost silently).

At least once, not exactly once: a write the store committed just before the kill, whose ``-``
line was not written yet, is made again.  Placements and ends are upserts and an OOM event is
recorded once per try (``Store.record_oom``); a memory peak or activity sample may then count
twice, which moves a learned estimate by one observation among many.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from carma_airflow.executor.bookkeeping.writes import StoreWrite, UnreadableWriteError, decode_write, encode_write

log = logging.getLogger(__name__)

FOLDER = "journal"
UNBORN_AGE_S = 60.0  # a hidden journal older than this whose lock can be taken was never named


@dataclass
class Recovered:
    """What the journals of gone writers held: their writes not made, oldest journal first, and
    the lines that could not be read back (parked by the caller)."""

    writes: list[StoreWrite] = field(default_factory=list)
    unreadable: list[tuple[str, str]] = field(default_factory=list)  # (line, why)
    files: list[tuple[Path, IO[str]]] = field(default_factory=list)  # each still locked: see forget()


class WriteJournal:
    """This writer's journal, locked for its life (see the module's text)."""

    def __init__(self, state_dir: Path) -> None:
        folder = state_dir / FOLDER
        folder.mkdir(parents=True, exist_ok=True)
        tag = f"{os.getpid()}-{uuid.uuid4().hex[:8]}"
        # locked before it gets a name recover() looks at: a new journal is never taken for a gone one's
        hidden = folder / f".new-{tag}"
        self._file: IO[str] | None = hidden.open("a+", buffering=1, encoding="utf-8")
        fcntl.flock(self._file.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        self.path = folder / f"{tag}.jsonl"
        hidden.rename(self.path)
        self._lines = 0

    def add(self, seq: int, write: StoreWrite) -> None:
        self._line(f"+{seq} {encode_write(write)}\n")

    def done(self, seq: int) -> None:
        self._line(f"-{seq}\n")

    def clear(self) -> None:
        """Nothing is pending: the file starts again empty."""
        if self._file is None or not self._lines:
            return
        try:
            self._file.seek(0)
            self._file.truncate()
        except OSError as exc:
            self._broken(exc)
        self._lines = 0

    def close(self, *, remove: bool) -> None:
        """Release the lock; ``remove``: nothing was pending, the file goes too (else the next
        writer on this host makes what it holds)."""
        if self._file is None:
            return
        if remove:
            with contextlib.suppress(OSError):
                self.path.unlink()
        else:
            with contextlib.suppress(OSError):
                self._file.flush()
                os.fsync(self._file.fileno())
        self._file.close()  # the lock goes with the descriptor
        self._file = None

    def _line(self, text: str) -> None:
        if self._file is None:
            return
        try:
            self._file.write(text)
        except OSError as exc:
            self._broken(exc)
            return
        self._lines += 1

    def _broken(self, exc: OSError) -> None:
        log.error(
            "carma store journal %s not writable (%s): from now on this scheduler keeps its queued writes "
            "in memory only (a kill loses them); restart it once the state folder is writable",
            self.path,
            exc,
        )
        assert self._file is not None
        with contextlib.suppress(OSError):
            self._file.close()
        self._file = None


def recover(state_dir: Path, legacy: str | None = None) -> Recovered:
    """The pending writes of every journal under ``state_dir`` whose writer is gone (its lock can
    be taken), oldest file first, after those of ``legacy`` (a file of encoded writes, one a line:
    what a writer before the journal saved at its close).  The files stay locked and in place:
    :func:`forget` removes them once the caller has journaled their writes itself."""
    found = Recovered()
    if legacy is not None:
        _read_legacy(state_dir / legacy, found)
    folder = state_dir / FOLDER
    _drop_unborn(folder)
    try:
        paths = sorted(folder.glob("*.jsonl"), key=lambda p: (p.stat().st_mtime, p.name))
    except OSError:
        return found
    for path in paths:
        try:
            handle = path.open("r", encoding="utf-8")
        except OSError:
            continue
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:  # a living writer's
            handle.close()
            continue
        pending: dict[int, str] = {}
        try:
            for raw in handle.read().splitlines():
                _read_line(raw, pending, found)
        except (OSError, UnicodeDecodeError) as exc:
            found.unreadable.append((str(path), f"journal not readable: {exc}"))
        for line in pending.values():
            try:
                found.writes.append(decode_write(line))
            except UnreadableWriteError as exc:
                found.unreadable.append((line, str(exc)))
        found.files.append((path, handle))
    return found


def _drop_unborn(folder: Path, now: float | None = None) -> None:
    """Remove the hidden files of writers killed between creating their journal and naming it:
    such a file holds no line (a journal is named before its first), so only its lock matters.
    One younger than a minute may be a writer starting right now, and is left alone."""
    now = time.time() if now is None else now
    for path in folder.glob(".new-*"):
        with contextlib.suppress(OSError):
            if now - path.stat().st_mtime < UNBORN_AGE_S:
                continue
            with path.open("r", encoding="utf-8") as handle:
                fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)  # raises while its writer lives
                path.unlink()


def _read_legacy(path: Path, found: Recovered) -> None:
    try:
        handle = path.open("r", encoding="utf-8")
    except FileNotFoundError:
        return
    except OSError as exc:
        log.error("carma store: held writes in %s not read (%s)", path, exc)
        return
    for line in handle.read().splitlines():
        if not line.strip():
            continue
        try:
            found.writes.append(decode_write(line))
        except UnreadableWriteError as exc:
            found.unreadable.append((line, str(exc)))
    found.files.append((path, handle))


def forget(found: Recovered) -> None:
    """The recovered journals removed (their writes are in the caller's journal now), their locks released."""
    for path, handle in found.files:
        with contextlib.suppress(OSError):
            path.unlink()
        handle.close()
    found.files.clear()


def _read_line(raw: str, pending: dict[int, str], found: Recovered) -> None:
    if not raw.strip():
        return
    head, _, body = raw.partition(" ")
    try:
        seq = int(head[1:])
    except ValueError:
        found.unreadable.append((raw, "not a journal line"))
        return
    if head.startswith("+") and body:
        pending[seq] = body
    elif head.startswith("-"):
        pending.pop(seq, None)
    else:
        found.unreadable.append((raw, "not a journal line"))


__all__ = ["FOLDER", "Recovered", "WriteJournal", "forget", "recover"]
