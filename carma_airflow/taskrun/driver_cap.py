"""Driver caps (``isolation = driver``): each try in its own cgroup leaf, held there by NVML.

Two halves, one module, so that the cgroup root and the NVML call are injected in one place:

* the executor (scheduler side, where NVML lives) makes the try's leaf
  ``<cgroup root>/carma/<executor id>/<try id>`` and sets its limits on each of the try's GPUs
  before the try starts (:class:`DriverCaps`), re-sets them when live caps move
  (``TryStarter.refresh_caps``), and, once the try has ended, clears the leaf's soft limit and
  removes it;
* the try's process (the launcher's child) moves itself into the leaf named by
  ``CARMA_CGROUP_LEAF`` before Airflow's supervisor starts (:func:`enter_leaf`): the supervisor
  and the task it forks inherit it.

**Whose leaf is it?** Each executor makes its leaves under a folder of its own, named by its
peer id (``<host>:<pid>:<token>``, executor/peers/peers.py, with ``:`` written ``_``), and removes only
those: two schedulers on one host (Airflow HA) never remove each other's leaves, not even a new
leaf whose try has not joined it yet.  The folder of an executor that is gone from this host (its
process no longer exists) is swept by the next executor that looks: its empty leaves (soft limits
cleared on every GPU of this host, since which of them a gone executor's leaf had limits on is
recorded nowhere a cgroup folder can hold) and then the folder.  A leaf still holding a process is
never removed (the kernel refuses: EBUSY) and is tried again.

NVIDIA's notes on per-cgroup GPU memory say to clear the soft limit before removing a cgroup, or
its parents keep a stale reservation: :meth:`DriverCaps.keep` sets it to 0 first.

The NVML call, as NVML documents it: ``nvmlDeviceSetMemoryLimits_v1(device, nvmlSetMemoryLimits_v1_t
*limits)``, the struct holding ``nameSpace`` (the cgroup's full sysfs path), ``softLimit`` (bytes
guaranteed before allocations may fail under memory pressure) and ``hardLimit`` (the most that may
be allocated).  It is made only by the monitor's NVML owner (``NvmlProbe.set_memory_limits`` in
carma_airflow/monitor/nvml.py: its ``nvmlInit``, under its lock, beside its sampling), never here.
**Assumed**, not run against a driver: that ``nameSpace`` is the leaf's directory (NVML says "full
path to sysfs cgroup file name").  A call that fails raises :class:`DriverCapError`; the try then
runs with framework caps (its cap less the CUDA context, as a framework try's) and its log says why.

We set soft = the try's promise, hard = its cap (docs/isolation.md).  Standard library and core
only at import: the try's process imports it.
"""

from __future__ import annotations

import errno
import logging
import os
import re
import socket
import sys
from collections.abc import Callable, Iterable, Mapping, MutableMapping, Sequence
from pathlib import Path
from typing import Protocol

from carma_airflow.core.errors import CarmaError

log = logging.getLogger("carma_airflow.executor")

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


class MemoryLimitOwner(Protocol):
    """The one owner of NVML in the executor: the monitor's probe (monitor/nvml.py)."""

    def set_memory_limits(self, uuid: str, namespace: str, soft: int, hard: int) -> None: ...


def nvml_owner(monitor: object) -> MemoryLimitOwner | None:
    """The monitor's NVML probe when it has one (``gpu_backend = nvml``), else None."""
    probe = getattr(monitor, "probe", None)
    return probe if callable(getattr(probe, "set_memory_limits", None)) else None


def nvml_set_limit(owner: MemoryLimitOwner | None = None) -> SetLimit:
    """The NVML call behind :data:`SetLimit`, made by ``owner`` (the monitor's ``NvmlProbe``);
    without one, a probe of its own is made on the first call (its own ``nvmlInit``)."""
    held: list[MemoryLimitOwner] = [owner] if owner is not None else []

    def set_limit(uuid: str, leaf: str, soft: int, hard: int) -> None:
        try:
            if not held:
                from carma_airflow.monitor.nvml import NvmlProbe

                held.append(NvmlProbe())
            held[0].set_memory_limits(uuid, leaf, soft, hard)
        except Exception as exc:  # a wrong signature (TypeError, ArgumentError), no driver, or an NVML error
            raise DriverCapError(
                f"nvmlDeviceSetMemoryLimits_v1(<{uuid}>, {{nameSpace={leaf}, soft={soft}, hard={hard}}}) failed: "
                f"{type(exc).__name__}: {exc}; driver caps need an r615+ driver, root and cgroup v2, and the call "
                "shape docs/isolation.md assumes; set [carma] isolation = framework to silence this"
            ) from exc

    return set_limit


def owner_folder(owner: str) -> str:
    """An executor id as a cgroup folder name (``host:4242:ab12cd34`` -> ``host_4242_ab12cd34``)."""
    return re.sub(r"[^A-Za-z0-9._-]", "_", owner) or "executor"


_OWNER = re.compile(r"^(?P<host>.+)_(?P<pid>\d+)_(?P<token>[0-9a-f]+)$")


def _gone(folder: str, host: str) -> bool:
    """Whether the executor of ``folder`` is gone from this host: its name says this host and a
    process id that no longer exists.  Anything else (another name, a live or unknowable
    process, this very process) is not ours to sweep."""
    match = _OWNER.match(folder)
    if match is None or match["host"] != host:
        return False
    pid = int(match["pid"])
    if pid == os.getpid():
        return False  # another executor in this process (tests, an in-process restart): alive
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except OSError:  # EPERM: a process of another user has that pid
        return False
    return False


Leaf = tuple[Path, tuple[str, ...], tuple[int, ...], tuple[int, ...]]  # path, GPUs, promises, caps


class DriverCaps:
    """One executor's leaves: one per driver-capped try, keyed by the try's request key, under
    ``<root>/carma/<owner>``."""

    def __init__(
        self,
        set_limit: SetLimit | None = None,
        root: str | os.PathLike[str] = DEFAULT_CGROUP_ROOT,
        owner: str | None = None,
        host_gpus: Callable[[], Iterable[str]] | None = None,
    ) -> None:
        self.set_limit = set_limit or nvml_set_limit()
        self.host_gpus = host_gpus  # every GPU of this host (the monitor's), for a gone owner's leaves
        self.root = Path(root)
        self.host = owner_folder(socket.gethostname())
        if owner is None:
            owner = f"{socket.gethostname()}:{os.getpid()}:{os.urandom(4).hex()}"
        self.owner = owner_folder(owner)
        self.home = self.root / LEAF_PARENT / self.owner
        match = _OWNER.match(self.owner)
        if match is not None:
            self.host = match["host"]  # the host as the executor ids of this host spell it
        self.leaves: dict[str, Leaf] = {}
        self.stale: set[Path] = set()  # ended tries' leaves whose processes have not all left yet
        self.gpus: set[str] = set()  # every GPU a limit was set on

    def leaf(self, try_id: str) -> Path:
        return self.home / try_id

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
            self._clear(path, uuids, cap_mib, quiet=True)  # the GPUs set before the one that failed
            self._remove(path)
            raise
        self.leaves[key] = (path, tuple(uuids), tuple(promise_mib), tuple(cap_mib))
        return path

    def _set(self, path: Path, uuids: Sequence[str], promise_mib: Sequence[int], cap_mib: Sequence[int]) -> None:
        for uuid, promise, cap in zip(uuids, promise_mib, cap_mib, strict=True):
            self.gpus.add(uuid)
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
        """Remove the leaves of this executor's tries that ended (their soft limits cleared first;
        a leaf still holding a process is tried again), and sweep what executors gone from this
        host left.  Never a leaf of a live executor."""
        alive = set(running)
        for key in [k for k in self.leaves if k not in alive]:
            path, uuids, _promise, caps = self.leaves.pop(key)
            self._clear(path, uuids, caps)
            self.stale.add(path)
        for path in list(self.stale):
            if self._remove(path):
                self.stale.discard(path)
        self._sweep_gone()

    def _clear(self, path: Path, uuids: Sequence[str], caps: Sequence[int], quiet: bool = False) -> None:
        """Soft limit 0 on each GPU before the leaf goes (NVIDIA: else its parents keep a stale
        reservation); the hard limit stays, for a process that has not left yet."""
        for uuid, cap in zip(uuids, caps, strict=False):
            try:
                self.set_limit(uuid, str(path), 0, cap * MIB)
            except DriverCapError as exc:
                say = log.debug if quiet else log.warning
                say("cgroup leaf %s: soft limit on %s not cleared before removal: %s", path, uuid, exc)

    def _sweep_gone(self) -> None:
        try:
            folders = [p for p in (self.root / LEAF_PARENT).iterdir() if p.is_dir() and p != self.home]
        except OSError:
            return
        gpus: list[str] | None = None
        for folder in folders:
            if not _gone(folder.name, self.host):
                continue
            if gpus is None:  # the gone owner's GPUs are not recorded: every GPU of this host
                gpus = sorted(self.gpus.union(self.host_gpus() if self.host_gpus is not None else ()))
            try:
                leaves = [p for p in folder.iterdir() if p.is_dir()]
            except OSError:
                continue
            for leaf in leaves:
                if _holds_processes(leaf):
                    continue  # an adopted try still runs in it
                for uuid in gpus:
                    try:
                        self.set_limit(uuid, str(leaf), 0, 0)
                    except DriverCapError as exc:
                        log.debug("cgroup leaf %s of a gone executor: soft limit on %s: %s", leaf, uuid, exc)
                self._remove(leaf)
            self._remove(folder)

    @staticmethod
    def _remove(path: Path) -> bool:
        try:
            path.rmdir()  # the kernel clears its limits with it (NVML documents as much)
        except FileNotFoundError:
            return True
        except OSError as exc:
            return exc.errno not in (errno.EBUSY, errno.ENOTEMPTY)
        return True


def _holds_processes(leaf: Path) -> bool:
    try:
        return bool((leaf / "cgroup.procs").read_text().strip())
    except FileNotFoundError:
        return False
    except OSError:
        return True  # cannot tell: keep it


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
    """Turn a driver-capped try's environment into a framework-capped one, with the reason: its
    caps (and JAX's fraction) those a framework try of the same placement gets, the CUDA context
    taken out as a framework's allocator needs (fence_env.lower_to_framework_caps)."""
    from carma_airflow.taskrun.fence_env import ISOLATION_ENV, lower_to_framework_caps

    if environ.get(ISOLATION_ENV) == "driver":  # once: a second fall-back must not lower them again
        lower_to_framework_caps(environ)
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
    "MemoryLimitOwner",
    "SetLimit",
    "enter_leaf",
    "fall_back",
    "note",
    "nvml_owner",
    "nvml_set_limit",
    "owner_folder",
]
