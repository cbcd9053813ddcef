"""Checkpoint folders: one per GPU task instance, the same for all its tries (docs/checkpoints.md).

In the task (any framework)::

    from carma_airflow import checkpoint_dir, last_checkpoint, record_checkpoint, record_resume

    folder = checkpoint_dir()                 # Path, from CARMA_CHECKPOINT_DIR
    start = 0
    if (folder / "train.pt").exists():        # an earlier try saved: go on from there
        state = torch.load(folder / "train.pt")
        ...; start = state["step"]
        record_resume(last_checkpoint())      # the log says where it resumed
    for step in range(start, steps):
        ...
        if step % 500 == 0:
            with atomic_path(folder / "train.pt") as tmp:
                torch.save({...}, tmp)
            record_checkpoint(step)           # what `carma why` and the UI show of the next try

In the executor, :class:`CheckpointFolders` makes the folder before a try starts, says what the
try will find there, and removes the folder once the task instance succeeds (unless
``[carma] checkpoint_keep``).  Nothing here imports Airflow: tries import it.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from carma_airflow.core.checkpoints import RESUME_REASON, Progress, folder_parts, found_files, resumed_from
from carma_airflow.core.errors import CarmaError

CHECKPOINT_ENV = "CARMA_CHECKPOINT_DIR"
TRY_NUMBER_ENV = "CARMA_TRY_NUMBER"
PROGRESS_FILE = ".carma-progress.json"
SCAN_LIMIT = 2000  # entries looked at when a folder has no progress record

log = logging.getLogger(__name__)


class CheckpointError(CarmaError):
    """No checkpoint folder for this code, or a progress record that cannot be written."""


def checkpoint_dir(default: str | os.PathLike[str] | None = None) -> Path:
    """This task instance's checkpoint folder (made if missing), the same for every try.

    CarmaExecutor names it in ``CARMA_CHECKPOINT_DIR``.  Outside CarmaExecutor (a local test, the
    default executor) ``default`` is used; without one, :class:`CheckpointError` says what to do.
    """
    value = os.environ.get(CHECKPOINT_ENV) or (os.fspath(default) if default is not None else None)
    if not value:
        raise CheckpointError(
            f"no checkpoint folder: {CHECKPOINT_ENV} is not set, so this code does not run as a try of "
            "CarmaExecutor (a task with executor='CarmaExecutor', e.g. @task(**gpu_task(...))). Run it there, "
            "or pass a folder for runs outside it: checkpoint_dir(default='/tmp/my-checkpoints')"
        )
    folder = Path(value)
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise CheckpointError(f"cannot make the checkpoint folder {folder}: {exc}") from None
    return folder


def _folder(folder: str | os.PathLike[str] | None) -> Path:
    return Path(folder) if folder is not None else checkpoint_dir()


def try_number() -> int | None:
    """This try's number (1 for the first), from CarmaExecutor or Airflow's task context."""
    for name in (TRY_NUMBER_ENV, "AIRFLOW_CTX_TRY_NUMBER"):
        with contextlib.suppress(KeyError, ValueError):
            return int(os.environ[name])
    return None


@contextlib.contextmanager
def atomic_path(target: str | os.PathLike[str]) -> Iterator[Path]:
    """A temporary path beside ``target`` to write to; on leaving the block it replaces
    ``target`` in one rename (synced first), so a try killed mid-save leaves the last whole
    checkpoint.  An exception in the block removes the temporary file and leaves ``target``."""
    final = Path(target)
    tmp = final.with_name(f".{final.name}.tmp-{os.getpid()}")
    try:
        yield tmp
        if tmp.is_file():
            with open(tmp, "rb+") as written:
                os.fsync(written.fileno())
        os.replace(tmp, final)
    except BaseException:
        with contextlib.suppress(OSError):
            if tmp.is_dir():
                shutil.rmtree(tmp)
            else:
                tmp.unlink()
        raise
    with contextlib.suppress(OSError):  # the rename itself, on file systems that need it
        fd = os.open(final.parent, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def record_checkpoint(
    step: int, *, epoch: int | None = None, folder: str | os.PathLike[str] | None = None, at: float | None = None
) -> Progress:
    """Say that the checkpoint of ``step`` (and ``epoch``) is saved: call it after each save.  The
    next try's placement, ``carma why`` and the UI show it ("try 2 resumed from step N ...")."""
    try:
        progress = Progress(step=step, saved_at=time.time() if at is None else at, epoch=epoch, try_number=try_number())
    except ValueError as exc:
        raise CheckpointError(f"record_checkpoint: {exc}") from None
    path = _folder(folder) / PROGRESS_FILE
    try:
        with atomic_path(path) as tmp:
            tmp.write_text(json.dumps(progress.to_dict()))
    except OSError as exc:
        raise CheckpointError(f"cannot write the progress record {path}: {exc}") from None
    return progress


def last_checkpoint(folder: str | os.PathLike[str] | None = None) -> Progress | None:
    """What the last :func:`record_checkpoint` of this task instance said; None if nothing was
    recorded (or the record is unreadable: a warning says so)."""
    path = _folder(folder) / PROGRESS_FILE
    return _read_progress(path)


def _read_progress(path: Path) -> Progress | None:
    try:
        return Progress.from_dict(json.loads(path.read_text()))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:  # JSONDecodeError is a ValueError
        log.warning("ignoring the checkpoint progress record %s: %s", path, exc)
        return None


def record_resume(progress: Progress | None = None, *, step: int | None = None) -> str:
    """Say in the try's log where it resumed: ``[carma] try 2 resumed from step N (checkpoint of
    HH:MM:SS UTC, saved by try 1)``.  ``progress``: what :func:`last_checkpoint` returned; or
    ``step`` alone when the framework keeps its own record; neither: no step is known.  Returns
    the line (without [carma])."""
    if progress is not None:
        words = resumed_from(progress)
    elif step is not None:
        words = f"resumed from step {step}"
    else:  # the framework resumed from a file of its own, and nothing recorded its step
        words = "resumed from a checkpoint (no step recorded: call record_checkpoint(step) after each save)"
    number = try_number()
    line = f"try {number} {words}" if number is not None else words
    print(f"[carma] {line}", flush=True)
    return line


class CheckpointFolders:
    """The executor's side: every GPU task instance's folder under ``root``."""

    def __init__(self, root: str | os.PathLike[str], *, keep: bool = False) -> None:
        self.root = Path(root)
        self.keep = keep
        self._found: dict[str, str] = {}  # request key -> what its folder held when it was launched

    def for_try(self, key: str, ti: Any) -> tuple[Path | None, str | None]:
        """A try about to start (request ``key``): its task instance's folder, made, and what it
        holds from earlier tries (kept for :meth:`resume_reasons`).  The folder is None, with a
        warning, where it cannot be made: the try runs without one."""
        self._found.pop(key, None)
        try:
            path = self.prepare(ti)
        except CheckpointError as exc:
            log.warning("%s: no checkpoint folder: %s", key, exc)
            return None, None
        reason = self.resume_reason(path)
        if reason is not None:
            self._found[key] = reason
        return path, reason

    def resume_reasons(self, key: str) -> list[str]:
        """The placement reason of started try ``key`` that found a checkpoint (``checkpoint:
        resumed from step N ...``), once; [] for a try that starts from zero."""
        reason = self._found.pop(key, None)
        return [reason] if reason else []

    def folder(self, dag_id: str, run_id: str, task_id: str, map_index: int = -1) -> Path:
        path = self.root.joinpath(*folder_parts(dag_id, run_id, task_id, map_index))
        if path.parent.parent.parent != self.root:  # the names are made safe; this is the proof
            raise CheckpointError(f"checkpoint folder {path} is not three levels below {self.root}")
        return path

    def of(self, ti: Any) -> Path:
        """The folder of task instance ``ti`` (anything with dag_id, run_id, task_id, map_index)."""
        index = getattr(ti, "map_index", -1)
        return self.folder(str(ti.dag_id), str(ti.run_id), str(ti.task_id), -1 if index is None else int(index))

    def prepare(self, ti: Any) -> Path:
        """The folder of ``ti``, made if missing (tries of the same instance find what the last saved)."""
        path = self.of(ti)
        try:
            path.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise CheckpointError(
                f"cannot make the checkpoint folder {path}: {exc}; set [carma] checkpoint_root to a writable folder"
            ) from None
        return path

    def resume_reason(self, path: Path) -> str | None:
        """What a try starting with folder ``path`` will find, as a placement reason
        (``checkpoint: resumed from step N (...)``); None for an empty folder."""
        progress = _read_progress(path / PROGRESS_FILE)
        if progress is not None:
            return RESUME_REASON + resumed_from(progress)
        files, newest = _newest(path)
        return RESUME_REASON + found_files(files, newest) if files else None

    def finished(self, ti: Any) -> bool:
        """The task instance succeeded: its folder goes (and the run's and DAG's, once empty),
        unless the folders are kept.  True if it was removed."""
        if self.keep:
            return False
        path = self.of(ti)
        if not path.exists():
            return False
        try:
            shutil.rmtree(path)
        except OSError as exc:
            log.warning("could not remove the checkpoint folder %s of a task that succeeded: %s", path, exc)
            return False
        for parent in (path.parent, path.parent.parent):  # only once empty: another task's stays
            with contextlib.suppress(OSError):
                parent.rmdir()
        return True


def _newest(path: Path) -> tuple[int, float]:
    """How many files lie under ``path`` (at most SCAN_LIMIT looked at) and the newest's mtime."""
    files, newest, seen = 0, 0.0, 0
    stack = [path]
    while stack and seen < SCAN_LIMIT:
        try:
            entries = list(os.scandir(stack.pop()))
        except OSError:
            continue
        for entry in entries:
            seen += 1
            with contextlib.suppress(OSError):
                if entry.is_dir(follow_symlinks=False):
                    stack.append(Path(entry.path))
                elif entry.is_file(follow_symlinks=False) and not entry.name.startswith(".carma"):
                    files += 1
                    newest = max(newest, entry.stat(follow_symlinks=False).st_mtime)
    return files, newest


__all__ = [
    "CHECKPOINT_ENV",
    "PROGRESS_FILE",
    "TRY_NUMBER_ENV",
    "CheckpointError",
    "CheckpointFolders",
    "atomic_path",
    "checkpoint_dir",
    "last_checkpoint",
    "record_checkpoint",
    "record_resume",
    "try_number",
]
