"""Driver caps (``isolation = driver``): each try in its own cgroup leaf, held there by NVML.

Two halves, one module, so that the cgroup root and the NVML call are injected in one place:

* the executor (scheduler side, where NVML lives) makes the try's leaf
  ``<cgroup root>/carma/<try id>`` and sets its limits on each of the try's GPUs before the try
  starts (:class:`DriverCaps`), re-sets them when live caps move (``TryStarter.refresh_caps``), and
  removes the leaf when the try has ended;
* the try's process (the launcher's child) moves itself into the leaf named by
  ``CARMA_CGROUP_LEAF`` before Airflow's supervisor starts (:func:`enter_leaf`): the supervisor
  and the task it forks inherit it.

The NVML call, as NVML documents it: ``nvmlDeviceSetMemoryLimits_v1(device, nvmlSetMemoryLimits_v1_t
*limits)``, the struct holding ``nameSpace`` (the cgroup's full sysfs path), ``softLimit`` (bytes
guaranteed before allocations may fail under memory pressure) and ``hardLimit`` (the most that may
be allocated).  nvidia-ml-py 13.615.71 (the venv's) has exactly that: ``(handle, limits)``, passing
``byref(limits)`` of its ``c_nvmlSetMemoryLimits_v1_t`` (those three fields, in that order; our
own struct of the same shape where a binding lacks the class).  **Assumed**, not run against a
driver: that ``nameSpace`` is the leaf's directory (NVML says "full path to sysfs cgroup file
name").  A call that fails raises :class:`DriverCapError`; the try then runs with framework caps
and its log says why.

We set soft = the try's promise, hard = its cap (docs/isolation.md).  Standard library and core
only: the try's process imports it.
"""

from __future__ import annotations

import ctypes
import errno
import importlib
import os
import sys
from collections.abc import Callable, Iterable, Mapping, MutableMapping, Sequence
from pathlib import Path
from typing import Any

from carma_airflow.core.errors import CarmaError

CGROUP_LEAF_ENV = "CARMA_CGROUP_LEAF"  # the leaf the try moves itself into
FENCE_NOTE_ENV = "CARMA_FENCE_NOTE"  # a line for the try's log about how it is held (a fallback)
DEFAULT_CGROUP_ROOT = "/sys/fs/cgroup"
LEAF_PARENT = "carma"
MIB = 1 << 20

# (gpu uuid, the leaf's full path, soft limit in bytes, hard limit in bytes); raises on failure
SetLimit = Callable[[str, str, int, int], None]


class DriverCapError(CarmaError):
    """A driver cap could not be set or joined: the try runs with framework caps instead.  Check
    the driver (r615+), that the executor runs as root on cgroup v2, or set isolation = framework."""


class _Limits(ctypes.Structure):  # nvmlSetMemoryLimits_v1_t as NVML documents it
    _fields_ = [("nameSpace", ctypes.c_char_p), ("softLimit", ctypes.c_ulonglong), ("hardLimit", ctypes.c_ulonglong)]


def nvml_set_limit(module: Any = None) -> SetLimit:
    """The NVML call behind :data:`SetLimit` (pynvml is imported on the first call)."""

    def set_limit(uuid: str, leaf: str, soft: int, hard: int) -> None:
        try:
            nv = module if module is not None else importlib.import_module("pynvml")
            fn = nv.nvmlDeviceSetMemoryLimits_v1
            handle = nv.nvmlDeviceGetHandleByUUID(uuid)
            struct = getattr(nv, "c_nvmlSetMemoryLimits_v1_t", _Limits)
            limits = struct(nameSpace=leaf.encode(), softLimit=soft, hardLimit=hard)
            fn(handle, limits)
        except Exception as exc:  # a wrong signature (TypeError, ArgumentError) or an NVML error
            raise DriverCapError(
                f"nvmlDeviceSetMemoryLimits_v1(<{uuid}>, {{nameSpace={leaf}, soft={soft}, hard={hard}}}) failed: "
                f"{type(exc).__name__}: {exc}; driver caps need an r615+ driver, root and cgroup v2, and the call "
                "shape docs/isolation.md assumes; set [carma] isolation = framework to silence this"
            ) from exc

    return set_limit


class DriverCaps:
    """The executor's leaves: one per driver-capped try, keyed by the try's request key."""

    def __init__(self, set_limit: SetLimit | None = None, root: str | os.PathLike[str] = DEFAULT_CGROUP_ROOT) -> None:
        self.set_limit = set_limit or nvml_set_limit()
        self.root = Path(root)
        self.leaves: dict[str, tuple[Path, tuple[str, ...], tuple[int, ...], tuple[int, ...]]] = {}
        self.stale: set[Path] = set()  # leaves whose processes have not all left yet

    def leaf(self, try_id: str) -> Path:
        return self.root / LEAF_PARENT / try_id

    def open(
        self, key: str, try_id: str, uuids: Sequence[str], promise_mib: Sequence[int], cap_mib: Sequence[int]
    ) -> Path:
        """Make the try's leaf and set its limits on each GPU; DriverCapError (and no leaf) if not."""
        path = self.leaf(try_id)
        try:
            path.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise DriverCapError(
                f"cannot create the cgroup leaf {path}: {exc}; driver caps need root on cgroup v2"
            ) from exc
        try:
            self._set(path, uuids, promise_mib, cap_mib)
        except DriverCapError:
            self._remove(path)
            raise
        self.leaves[key] = (path, tuple(uuids), tuple(promise_mib), tuple(cap_mib))
        return path

    def _set(self, path: Path, uuids: Sequence[str], promise_mib: Sequence[int], cap_mib: Sequence[int]) -> None:
        for uuid, promise, cap in zip(uuids, promise_mib, cap_mib, strict=True):
            self.set_limit(uuid, str(path), min(promise, cap) * MIB, cap * MIB)

    def update(self, key: str, cap_mib: Sequence[int]) -> bool:
        """Raise or tighten a running try's hard limits; True when they changed.  A failure is
        logged by the caller; the leaf keeps its last limits."""
        if key not in self.leaves:
            return False
        path, uuids, promise, caps = self.leaves[key]
        if tuple(cap_mib) == caps:
            return False
        self._set(path, uuids, promise, cap_mib)
        self.leaves[key] = (path, uuids, promise, tuple(cap_mib))
        return True

    def keep(self, running: Iterable[str]) -> None:
        """Remove the leaves of tries that ended (a leaf still holding a process is tried again)."""
        alive = set(running)
        for key in [k for k in self.leaves if k not in alive]:
            self.stale.add(self.leaves.pop(key)[0])
        for path in list(self.stale):
            if self._remove(path):
                self.stale.discard(path)
        ours = {leaf for leaf, *_ in self.leaves.values()}
        try:  # leaves of tries an earlier executor started (adopted, or ended while it was gone)
            found = [p for p in (self.root / LEAF_PARENT).iterdir() if p.is_dir() and p not in ours]
        except OSError:
            return
        for path in found:  # one still holding a process is busy and stays
            self._remove(path)

    @staticmethod
    def _remove(path: Path) -> bool:
        try:
            path.rmdir()  # the kernel clears its limits with it (NVML documents as much)
        except FileNotFoundError:
            return True
        except OSError as exc:
            return exc.errno not in (errno.EBUSY, errno.ENOTEMPTY)
        return True


def enter_leaf(environ: MutableMapping[str, str] = os.environ, pid: int | None = None) -> str | None:
    """In the try's process: move into the leaf ``CARMA_CGROUP_LEAF`` names.  Where it cannot, the
    try falls back to framework caps (its environment says so, and its log says why).  Returns the
    leaf joined, or None."""
    leaf = environ.get(CGROUP_LEAF_ENV)
    if not leaf:
        return None
    try:
        (Path(leaf) / "cgroup.procs").write_text(f"{pid or os.getpid()}\n")
    except OSError as exc:
        fall_back(environ, f"could not join its cgroup leaf {leaf}: {exc}")
        print(f"[carma] {environ[FENCE_NOTE_ENV]}", file=sys.stderr, flush=True)
        return None
    return leaf


def fall_back(environ: MutableMapping[str, str], why: str) -> None:
    """Turn a driver-capped try's environment into a framework-capped one, with the reason."""
    from carma_airflow.taskrun.fence_env import ISOLATION_ENV

    environ[ISOLATION_ENV] = "framework"
    environ.pop(CGROUP_LEAF_ENV, None)
    environ[FENCE_NOTE_ENV] = f"driver caps not in force ({why}); held by framework caps only"


def note(environ: Mapping[str, str]) -> str:
    return f"; {environ[FENCE_NOTE_ENV]}" if environ.get(FENCE_NOTE_ENV) else ""


__all__ = [
    "CGROUP_LEAF_ENV",
    "DEFAULT_CGROUP_ROOT",
    "FENCE_NOTE_ENV",
    "DriverCapError",
    "DriverCaps",
    "SetLimit",
    "enter_leaf",
    "fall_back",
    "note",
    "nvml_set_limit",
]
