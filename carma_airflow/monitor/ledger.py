"""A cross-process ledger of simulated GPU memory: one JSON file guarded by ``fcntl.flock``.

Simulated GPUs exist only here.  Task processes (taskrun/simulated_training.py)
allocate and release memory in it; the :class:`~carma_airflow.monitor.simulated.SimulatedProbe`
reads it once a second.  Each operation opens the lock file afresh, so forked processes and
threads exclude each other too; the JSON file is replaced atomically, so a reader never sees
half a write.

Fences: a process passes the cap its mechanism set (``cap_mib``: a framework or MPS cap, fixed
at its start or re-read from its cap file) with each allocation; the driver's hard limit is held
here, per *leaf* (the simulated cgroup of one try, :meth:`Ledger.set_limits`, written by the
executor at placement and re-set as it would re-set NVML's), and counts every process of the
leaf.  An allocation past either fails in the process that asked ("past its cap").

Entries of processes that died without releasing (killed, crashed) are dropped the next time
anyone looks.  The largest total a process held on one GPU (its *peak*) is kept for an hour
after it released or died, so an executor can read what a finished task reached.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

from carma_airflow.core.errors import CarmaError
from carma_airflow.core.gpu import GpuSpec
from carma_airflow.core.sharing import ActivityProfile
from carma_airflow.monitor.ledger_oom import SimulatedCudaOOM, cuda_oom, format_size

LEDGER_VERSION = 1
PEAK_KEEP_S = 3600.0  # a peak stays readable this long after its process released or died

_Data = dict[str, Any]


class LedgerError(CarmaError):
    """The simulated GPU ledger is missing, corrupt, or was asked about a GPU it does not have."""


class LedgerGpu(NamedTuple):
    """One simulated GPU: ``(uuid, index, spec)``."""

    uuid: str
    index: int  # type: ignore[assignment]  # shadows tuple.index on purpose: the GPU's index
    spec: GpuSpec


@dataclass(frozen=True, slots=True)
class Allocation:
    """Memory one process holds on one simulated GPU (all its allocations there, summed)."""

    pid: int
    uuid: str
    mib: int
    profile: ActivityProfile
    label: str
    at: float  # time of its first allocation on this GPU


@dataclass(frozen=True, slots=True)
class LedgerState:
    """Everything in the ledger at one moment, live processes only."""

    host: str
    gpus: tuple[LedgerGpu, ...]
    allocations: tuple[Allocation, ...]
    faults: dict[str, str]

    def on(self, uuid: str) -> list[Allocation]:
        return [a for a in self.allocations if a.uuid == uuid]


def sim_uuid(index: int, prefix: str = "GPU-SIM-") -> str:
    """UUID of the simulated GPU with this index on its host."""
    return f"{prefix}{index:04d}"


def pid_alive(pid: int) -> bool:
    """Whether a process exists and is not a zombie (a killed but unreaped child is dead)."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's process
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            stat = handle.read()
    except OSError:
        return True  # no /proc: trust os.kill
    state = stat[stat.rfind(b")") + 2 : stat.rfind(b")") + 3]
    return state not in (b"Z", b"X")


def _spec_dict(spec: GpuSpec) -> dict[str, Any]:
    return {
        "name": spec.name,
        "memory_mib": spec.memory_mib,
        "sm_count": spec.sm_count,
        "idle_power_w": spec.idle_power_w,
        "max_power_w": spec.max_power_w,
        "dense_tflops": spec.dense_tflops,  # issue 44: a ledger written before reads them as 0 (unknown)
        "memory_gbs": spec.memory_gbs,
    }


class Ledger:
    """The simulated GPUs of one host and the memory processes hold on them."""

    def __init__(self, path: str | os.PathLike[str], *, clock: Callable[[], float] = time.time) -> None:
        self.path = Path(path)
        self._lock_path = self.path.with_name(self.path.name + ".lock")
        self._tmp_path = self.path.with_name("." + self.path.name + ".tmp")
        self._clock = clock
        self._dir_ready = False

    def __repr__(self) -> str:
        return f"Ledger({str(self.path)!r})"

    # -- setup ---------------------------------------------------------------------------

    def init(self, gpus: list[GpuSpec], host: str = "localhost", uuid_prefix: str = "GPU-SIM-") -> None:
        """Create the ledger for these GPUs.  Same GPUs and host as before: keep allocations;
        anything else: start afresh.  ``uuid_prefix`` keeps the UUIDs of several simulated hosts apart."""
        wanted = [{"uuid": sim_uuid(i, uuid_prefix), "index": i, "spec": _spec_dict(s)} for i, s in enumerate(gpus)]
        with self._locked(exclusive=True):
            data = self._read(missing_ok=True)
            if data is not None and data.get("host") == host and data.get("gpus") == wanted:
                return
            self._write(
                {"version": LEDGER_VERSION, "host": host, "gpus": wanted, "allocations": [], "peaks": {}, "faults": {}}
            )

    # -- reading ---------------------------------------------------------------------------

    def state(self) -> LedgerState:
        """GPUs, live allocations and faults, read under one lock (dead processes dropped)."""
        with self._locked(exclusive=False):
            data = self._read()
        if any(not pid_alive(int(a["pid"])) for a in data["allocations"]):
            with self._locked(exclusive=True):
                data = self._read()
                if self._drop_dead(data):
                    self._write(data)
        return self._decode(data)

    def gpus(self) -> list[LedgerGpu]:
        """``(uuid, index, spec)`` of every simulated GPU."""
        with self._locked(exclusive=False):
            data = self._read()
        return list(self._decode_gpus(data))

    def allocations(self) -> list[Allocation]:
        """Live allocations; entries of dead processes are dropped from the ledger."""
        return list(self.state().allocations)

    def peak(self, pid: int) -> int | None:
        """Largest total ``pid`` held on one GPU; kept for an hour after it released or died."""
        with self._locked(exclusive=False):
            data = self._read()
        entry = data["peaks"].get(str(pid))
        if entry is None:
            return None
        released = entry.get("released_at")
        if released is not None and self._clock() - float(released) > PEAK_KEEP_S:
            return None
        return int(entry["mib"])

    def faults(self) -> dict[str, str]:
        with self._locked(exclusive=False):
            data = self._read()
        return dict(data["faults"])

    # -- writing ---------------------------------------------------------------------------

    def allocate(
        self,
        pid: int,
        uuid: str,
        mib: int,
        profile: ActivityProfile,
        label: str,
        *,
        ordinal: int | None = None,
        promise_mib: int | None = None,
        cap_mib: int | None = None,
        leaf: str | None = None,
        held_by: str = "",
    ) -> None:
        """Add ``mib`` to what ``pid`` holds on ``uuid``, or raise :class:`SimulatedCudaOOM`.

        ``ordinal`` is the GPU's number as the process sees it (its place in
        CUDA_VISIBLE_DEVICES), used in the OOM message; by default the ledger index.

        A fenced process (core/fencing.py) names its ``promise_mib`` and ``cap_mib`` (what its
        mechanism is set to now; ``held_by`` says which, for the message): an allocation that
        would take it past ``cap_mib``, or past its ``leaf``'s hard limit on this GPU
        (:meth:`set_limits`, every process of the leaf together), fails in this process with a
        CUDA OOM "past its cap" even where the GPU has room.  The ledger never re-reads the
        co-tenants itself: a live cap is the one its mechanism re-set (a cap file, a leaf's limit).
        """
        if mib < 0:
            raise LedgerError(f"cannot allocate a negative amount ({mib} MiB) on {uuid}")
        with self._locked(exclusive=True):
            data = self._read()
            gpu = self._find_gpu(data, uuid)
            changed = self._drop_dead(data)
            total = int(gpu["spec"]["memory_mib"])
            used = sum(int(a["mib"]) for a in data["allocations"] if a["uuid"] == uuid)
            free = total - used
            mine = next((a for a in data["allocations"] if a["uuid"] == uuid and a["pid"] == pid), None)
            held = int(mine["mib"]) if mine is not None else 0
            limit = (total if cap_mib is None else int(cap_mib)) if promise_mib is not None else None
            if limit is not None and held + mib > limit:
                if changed:
                    self._write(data)
                cap = (limit, promise_mib or 0)
                raise cuda_oom(gpu, uuid, ordinal, mib, free, total, held, self.path, cap, label=label, held_by=held_by)
            hard = data.get("limits", {}).get(leaf, {}).get(uuid) if leaf else None
            if hard is not None:  # [soft, hard]: the leaf's processes together
                in_leaf = sum(int(a["mib"]) for a in data["allocations"] if a["uuid"] == uuid and a.get("leaf") == leaf)
                if in_leaf + mib > int(hard[1]):
                    if changed:
                        self._write(data)
                    cap = (int(hard[1]), int(hard[0]))
                    by = "the driver's hard limit of its cgroup leaf (the ledger plays it)"
                    raise cuda_oom(gpu, uuid, ordinal, mib, free, total, held, self.path, cap, label=label, held_by=by)
            if free < mib:
                if changed:
                    self._write(data)
                raise cuda_oom(gpu, uuid, ordinal, mib, free, total, held, self.path)
            now = self._clock()
            prof = [profile.sm_activity, profile.sm_occupancy, profile.dram_activity]
            if mine is None:
                mine = {"pid": pid, "uuid": uuid, "mib": mib, "profile": prof, "label": label, "at": now}
                data["allocations"].append(mine)
            else:
                mine.update(mib=held + mib, profile=prof, label=label)
            if promise_mib is not None:
                mine["promise"] = int(promise_mib)
            if leaf:
                mine["leaf"] = leaf
            peaks: dict[str, Any] = data["peaks"]
            entry = peaks.get(str(pid))
            if entry is None or entry.get("released_at") is not None:  # new process (or a reused PID)
                entry = {"mib": 0, "released_at": None, "label": label}
                peaks[str(pid)] = entry
            entry["mib"] = max(int(entry["mib"]), int(mine["mib"]))
            self._write(data)

    def release(self, pid: int) -> None:
        """Free everything ``pid`` holds (its peak stays readable for an hour)."""
        with self._locked(exclusive=True):
            data = self._read()
            now = self._clock()
            data["allocations"] = [a for a in data["allocations"] if a["pid"] != pid]
            entry = data["peaks"].get(str(pid))
            if entry is not None and entry.get("released_at") is None:
                entry["released_at"] = now
            self._drop_dead(data)
            self._write(data)

    def set_limits(self, leaf: str, limits: dict[str, tuple[int, int]]) -> None:
        """The driver's limits of one try's leaf, per GPU: ``{uuid: (soft_mib, hard_mib)}`` (what
        NVML's per-cgroup call sets on a real host); replaces what the leaf had."""
        with self._locked(exclusive=True):
            data = self._read()
            for uuid in limits:
                self._find_gpu(data, uuid)
            data.setdefault("limits", {})[leaf] = {u: [int(s), int(h)] for u, (s, h) in limits.items()}
            self._write(data)

    def limits(self) -> dict[str, dict[str, tuple[int, int]]]:
        """Every leaf's limits: ``{leaf: {uuid: (soft_mib, hard_mib)}}``."""
        with self._locked(exclusive=False):
            data = self._read()
        return {
            leaf: {u: (int(v[0]), int(v[1])) for u, v in per.items()} for leaf, per in data.get("limits", {}).items()
        }

    def drop_limits(self, leaves: list[str]) -> None:
        """The leaves of ended tries go (the kernel clears a removed cgroup's limits with it)."""
        with self._locked(exclusive=True):
            data = self._read()
            held = data.get("limits", {})
            if any(leaf in held for leaf in leaves):
                for leaf in leaves:
                    held.pop(leaf, None)
                self._write(data)

    def set_fault(self, uuid: str, message: str | None) -> None:
        """Make ``uuid``'s samples carry ``error=message`` (None clears it): for reliability tests."""
        with self._locked(exclusive=True):
            data = self._read()
            self._find_gpu(data, uuid)
            if message is None:
                data["faults"].pop(uuid, None)
            else:
                data["faults"][uuid] = message
            self._write(data)

    # -- internals -------------------------------------------------------------------------

    @contextlib.contextmanager
    def _locked(self, *, exclusive: bool) -> Iterator[None]:
        if not self._dir_ready:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._dir_ready = True
        fd = os.open(self._lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o666)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
            yield
        finally:
            # Unlock explicitly: a process forked meanwhile (the executor forks task processes
            # while its monitor thread reads the ledger) holds a copy of this descriptor, and
            # closing ours alone would leave the lock held until that process exits.
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)

    def _read(self, *, missing_ok: bool = False) -> Any:
        try:
            with open(self.path, encoding="utf-8") as handle:
                data = json.load(handle)
        except FileNotFoundError:
            if missing_ok:
                return None
            raise LedgerError(
                f"no simulated GPU ledger at {self.path}: start the carma monitor with "
                "[carma] gpu_backend = simulated (it creates the ledger) or call Ledger.init"
            ) from None
        except json.JSONDecodeError as exc:
            raise LedgerError(f"simulated GPU ledger {self.path} is corrupt ({exc}); delete it and restart") from None
        if not isinstance(data, dict) or data.get("version") != LEDGER_VERSION:
            if missing_ok:
                return None
            raise LedgerError(f"{self.path} is not a version-{LEDGER_VERSION} ledger; delete it and restart")
        return data

    def _write(self, data: _Data) -> None:
        self._prune_peaks(data)
        with open(self._tmp_path, "w", encoding="utf-8") as handle:
            json.dump(data, handle, separators=(",", ":"))
        os.replace(self._tmp_path, self.path)

    def _find_gpu(self, data: _Data, uuid: str) -> dict[str, Any]:
        for gpu in data["gpus"]:
            if gpu["uuid"] == uuid:
                return dict(gpu)
        known = ", ".join(g["uuid"] for g in data["gpus"]) or "none"
        raise LedgerError(f"no simulated GPU {uuid!r} in ledger {self.path}; it has {known}")

    def _drop_dead(self, data: _Data) -> bool:
        """Remove allocations of dead processes, marking their peaks released.  True if any."""
        dead = {int(a["pid"]) for a in data["allocations"] if not pid_alive(int(a["pid"]))}
        if not dead:
            return False
        now = self._clock()
        data["allocations"] = [a for a in data["allocations"] if int(a["pid"]) not in dead]
        for pid in dead:
            entry = data["peaks"].get(str(pid))
            if entry is not None and entry.get("released_at") is None:
                entry["released_at"] = now
        return True

    def _prune_peaks(self, data: _Data) -> None:
        now = self._clock()
        peaks: dict[str, Any] = data["peaks"]
        for key in [k for k, e in peaks.items() if e.get("released_at") is not None]:
            if now - float(peaks[key]["released_at"]) > PEAK_KEEP_S:
                del peaks[key]

    @staticmethod
    def _decode_gpus(data: _Data) -> tuple[LedgerGpu, ...]:
        return tuple(LedgerGpu(str(g["uuid"]), int(g["index"]), GpuSpec(**g["spec"])) for g in data["gpus"])

    def _decode(self, data: _Data) -> LedgerState:
        allocations = tuple(
            Allocation(
                pid=int(a["pid"]),
                uuid=str(a["uuid"]),
                mib=int(a["mib"]),
                profile=ActivityProfile(*(float(x) for x in a["profile"])),
                label=str(a["label"]),
                at=float(a["at"]),
            )
            for a in data["allocations"]
        )
        return LedgerState(str(data["host"]), self._decode_gpus(data), allocations, dict(data["faults"]))


__all__ = [
    "LEDGER_VERSION",
    "PEAK_KEEP_S",
    "Allocation",
    "Ledger",
    "LedgerError",
    "LedgerGpu",
    "LedgerState",
    "SimulatedCudaOOM",
    "format_size",
    "pid_alive",
    "sim_uuid",
]
