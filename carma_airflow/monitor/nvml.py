"""Real GPUs through NVML (``nvidia-ml-py``, import name ``pynvml``): the only code that touches it.

Modelled on nvitop's ``libnvml``: NVML is imported and initialised lazily, under a lock, at the
first :meth:`NvmlProbe.sample` (never at import, never CUDA); every optional reading goes
through one choke point, :meth:`NvmlProbe._call`, which turns "not supported" and "function
not found" into ``None`` and logs it once per function.

Per GPU: memory (``nvmlDeviceGetMemoryInfo``, v2 without driver-reserved memory where the driver
has it), busy time (``nvmlDeviceGetUtilizationRates``), SM activity, SM occupancy and DRAM
bandwidth activity from GPM on Hopper and later (two ``nvmlGpmSampleGet`` readings, one sample
period apart, then ``nvmlGpmMetricsGet``), power (mW) and total energy (mJ), processes (compute
and MPS) with each one's share of SM time where the device reports it
(``nvmlDeviceGetProcessUtilization``).  Without GPM, SM activity falls back to busy time
(``activity_source="utilization"``) and occupancy and DRAM activity are missing.  A GPU in MIG
mode is replaced by its MIG instances, each with its own UUID and memory (their ``index`` is the parent's).

This module owns the NVML session and walks the devices; two helpers read for it, through its
binding and its choke point, never on their own: GPM's two-buffer activity readings
(:mod:`~carma_airflow.monitor.nvml_gpm`) and each device's processes with their shares of SM
time (:mod:`~carma_airflow.monitor.nvml_processes`).

**What each sample reads.**  NVML calls are not free (6-7 ms of CPU per sample of one H200
under gVisor, 2026-12-04), so a sample reads every period only what the placer and the risk
window read every period: memory, and SM activity, occupancy and DRAM activity (GPM; busy time
where the GPU has no GPM).  Every ``detail_every``-th sample (``[carma] nvml_detail_every``; the
first sample always) also reads the rest: the GPU count, handles, UUIDs and MIG mode again, the
process lists (compute and MPS: who holds how much memory), power, the energy counter and,
beside GPM, busy time.  In between, a sample carries those readings from the last full one (at
most ``detail_every`` periods old).  Each process's share of SM time stays a reading of every
sample where the GPU has processes: it measures one interval, and reading it less often would
count a busy interval for the idle ones after it (issue 24 item 8).  ``detail_every=1`` reads everything every
time.  ``count_calls=True`` counts and times every NVML call by name (:meth:`NvmlProbe.call_costs`;
:mod:`~carma_airflow.monitor.nvml_calls`).

A GPU NVML cannot read (lost, fallen off the bus, Xid) becomes a sample with ``error`` set and
the UUID it had; it never makes :meth:`NvmlProbe.sample` raise.  Without a driver,
:meth:`NvmlProbe.sample` raises :class:`NoGpuDriverError` with one line saying what to do.
"""

from __future__ import annotations

import ctypes
import importlib
import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from carma_airflow.core.errors import CarmaError, ConfigError
from carma_airflow.monitor.base import GpuSample, NoGpuDriverError, percent_share
from carma_airflow.monitor.nvml_calls import CallCost, CountedBinding
from carma_airflow.monitor.nvml_gpm import GpmActivity, MigParent
from carma_airflow.monitor.nvml_processes import ProcessAccounting

log = logging.getLogger(__name__)

_MIB = 1024 * 1024
_SIMULATED_HINT = "On a machine without a GPU set [carma] gpu_backend = simulated."
# NVML errors that mean "this reading does not exist here", not "this GPU is broken"
_MISSING_ERRORS = (
    "NVMLError_NotSupported",
    "NVMLError_FunctionNotFound",
    "NVMLError_ArgumentVersionMismatch",
    "NVMLLibraryMismatchError",
)


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _init_message(nv: Any, exc: BaseException) -> str:
    kind = type(exc).__name__
    if isinstance(exc, getattr(nv, "NVMLError_LibraryNotFound", ())):
        why = "no NVIDIA driver found"
    elif isinstance(exc, getattr(nv, "NVMLError_DriverNotLoaded", ())):
        why = "the NVIDIA driver is not loaded"
    elif isinstance(exc, getattr(nv, "NVMLError_NoPermission", ())):
        why = "no permission to use the NVIDIA driver"
    else:
        why = str(exc).replace("\n", " ")
    return f"NVML could not start: {why} ({kind}). {_SIMULATED_HINT}"


MEMORY_LIMITS_FN = "nvmlDeviceSetMemoryLimits_v1"  # per-cgroup GPU memory limits (NVML r615+)


@dataclass(frozen=True, slots=True)
class DriverLimits:
    supported: bool
    why: str


def driver_memory_limits(module: Any = None, cgroup_root: str = "/sys/fs/cgroup") -> DriverLimits:
    """Whether this host could hold a cgroup to a GPU memory limit: the binding has
    nvmlDeviceSetMemoryLimits_v1, cgroup v2 is mounted, and we are root.  (A driver older than
    r615 still answers FunctionNotFound when called; MIG devices have no such limits.)"""
    try:
        nv = module if module is not None else importlib.import_module("pynvml")
    except ImportError:
        return DriverLimits(False, "nvidia-ml-py is not installed (pip install nvidia-ml-py)")
    if not callable(getattr(nv, MEMORY_LIMITS_FN, None)):
        return DriverLimits(False, f"this nvidia-ml-py has no {MEMORY_LIMITS_FN} (per-cgroup limits need NVML r615+)")
    if not os.path.exists(os.path.join(cgroup_root, "cgroup.controllers")):
        return DriverLimits(False, f"no cgroup v2 at {cgroup_root} (per-cgroup GPU memory limits need cgroup v2)")
    if os.geteuid() != 0:
        return DriverLimits(False, "setting per-cgroup GPU memory limits needs root")
    return DriverLimits(True, f"{MEMORY_LIMITS_FN} present, cgroup v2, root")


class _MemoryLimits(ctypes.Structure):  # nvmlSetMemoryLimits_v1_t as NVML documents it (a binding without it)
    _fields_ = [("nameSpace", ctypes.c_char_p), ("softLimit", ctypes.c_ulonglong), ("hardLimit", ctypes.c_ulonglong)]


@dataclass(frozen=True, slots=True)
class _Detail:
    """The readings of one device a full sample took, carried by the samples between two."""

    busy: float | None
    power_w: float | None
    energy_j: float | None
    held: dict[int, int]  # pid -> MiB: the process lists


@dataclass(frozen=True, slots=True)
class _MigInstance:
    handle: Any
    uuid: str
    name: str
    gpm_via: MigParent | None


DEFAULT_DETAIL_EVERY = 5


class NvmlProbe:
    """Samples every GPU (and MIG instance) NVML sees on this host."""

    backend: str = "nvml"

    def __init__(
        self, host: str = "localhost", detail_every: int = DEFAULT_DETAIL_EVERY, count_calls: bool = False
    ) -> None:
        if detail_every < 1:
            raise ConfigError(
                f"[carma] nvml_detail_every must be >= 1 (1: every reading every sample), got {detail_every}"
            )
        self.host = host
        self.detail_every = int(detail_every)
        self._count_calls = count_calls
        self._counted: CountedBinding | None = None
        self._round = 0  # samples taken; round 0, detail_every, 2*detail_every, ... are full
        self._count = 0  # GPUs NVML counted at the last full sample
        self._handle_by_index: dict[int, Any] = {}
        self._mig_on: dict[int, bool] = {}
        self._mig_instances: dict[int, list[_MigInstance]] = {}
        self._detail: dict[str, _Detail] = {}
        self._lock = threading.Lock()
        self._nv: Any = None
        self._missing: tuple[type[BaseException], ...] = ()
        self._logged: set[str] = set()
        self._gpm = GpmActivity(self._call)
        self._uuid_by_index: dict[int, str] = {}
        self._mig_by_index: dict[int, list[str]] = {}
        self._name_by_uuid: dict[str, str] = {}
        self._accounting = ProcessAccounting(self._call)

    # -- life cycle ------------------------------------------------------------------------

    def sample(self) -> list[GpuSample]:
        with self._lock:
            nv = self._ensure_init()
            now = time.time()
            full = self._round % self.detail_every == 0
            self._round += 1
            if full:
                try:
                    self._count = int(nv.nvmlDeviceGetCount())
                except nv.NVMLError as exc:
                    why = f"{type(exc).__name__}: {exc}"
                    raise CarmaError(f"NVML could not count the GPUs ({why}); check nvidia-smi") from None
            samples: list[GpuSample] = []
            for index in range(self._count):
                samples.extend(self._read_gpu(nv, index, now, full))
            return samples

    def call_costs(self) -> dict[str, CallCost]:
        """Calls and time per NVML function so far (empty unless built with ``count_calls=True``)."""
        with self._lock:
            if self._counted is None:
                return {}
            return {name: CallCost(c.calls, c.cpu_s, c.wall_s) for name, c in self._counted.costs.items()}

    def close(self) -> None:
        with self._lock:
            nv = self._nv
            if nv is None:
                return
            self._gpm.close(nv)
            try:
                nv.nvmlShutdown()
            except nv.NVMLError as exc:
                log.debug("nvmlShutdown failed: %s", exc)
            self._nv = None
            self._round = 0
            self._handle_by_index.clear()
            self._mig_on.clear()
            self._mig_instances.clear()
            self._detail.clear()

    # -- driver caps (taskrun/driver_cap.py): NVML's one write, made here, under the lock ------

    def set_memory_limits(self, uuid: str, namespace: str, soft: int, hard: int) -> None:
        """Hold the processes of the cgroup ``namespace`` (its full sysfs path) to ``soft`` /
        ``hard`` bytes on GPU ``uuid``: ``nvmlDeviceSetMemoryLimits_v1(handle, limits)`` (r615+),
        with this probe's ``nvmlInit``, under its lock.  Raises what the binding raises
        (AttributeError where it has no such function); the caller says what to do."""
        with self._lock:
            nv = self._ensure_init()
            fn = getattr(nv, MEMORY_LIMITS_FN)
            handle = nv.nvmlDeviceGetHandleByUUID(uuid)
            struct = getattr(nv, "c_nvmlSetMemoryLimits_v1_t", None) or _MemoryLimits
            fn(handle, struct(nameSpace=namespace.encode(), softLimit=soft, hardLimit=hard))

    def _ensure_init(self) -> Any:
        if self._nv is not None:
            return self._nv
        try:
            nv: Any = importlib.import_module("pynvml")
        except ImportError:
            raise NoGpuDriverError(
                f"NVML could not start: the nvidia-ml-py package is not installed (pip install nvidia-ml-py). "
                f"{_SIMULATED_HINT}"
            ) from None
        try:
            nv.nvmlInit()
        except nv.NVMLError as exc:
            raise NoGpuDriverError(_init_message(nv, exc)) from None
        self._missing = tuple(cls for name in _MISSING_ERRORS if isinstance(cls := getattr(nv, name, None), type))
        if self._count_calls:
            self._counted = CountedBinding(nv)
            nv = self._counted
        self._nv = nv
        return nv

    # -- the choke point -------------------------------------------------------------------

    def _call(self, fn: Callable[..., Any], *args: Any, name: str | None = None) -> Any:
        """Call an NVML function; "not supported"/"function not found" -> None, logged once.

        Any other NVML error propagates: the caller turns it into an error sample.
        """
        try:
            return fn(*args)
        except self._missing as exc:
            key = name or str(getattr(fn, "__name__", fn))
            if key not in self._logged:
                self._logged.add(key)
                log.info("NVML %s is not available on at least one GPU (%s); that reading is missing", key, exc)
            return None

    # -- one physical GPU ------------------------------------------------------------------

    def _read_gpu(self, nv: Any, index: int, now: float, full: bool = True) -> list[GpuSample]:
        # A sample between two full ones reuses the handle, UUID and MIG layout the last full
        # one found (a GPU that was lost since fails its first reading and is looked up afresh).
        handle = None if full else self._handle_by_index.get(index)
        try:
            if handle is None:
                full = True  # nothing known of this GPU yet (or it failed): read all of it
                handle = nv.nvmlDeviceGetHandleByIndex(index)
                uuid = _text(nv.nvmlDeviceGetUUID(handle))
                self._uuid_by_index[index] = uuid
                name = self._name(nv, handle, uuid)
                mode = self._call(nv.nvmlDeviceGetMigMode, handle)
                self._mig_on[index] = mode is not None and int(mode[0]) == int(nv.NVML_DEVICE_MIG_ENABLE)
                self._handle_by_index[index] = handle
            uuid = self._uuid_by_index[index]
            name = self._name_by_uuid.get(uuid) or self._name(nv, handle, uuid)
            if self._mig_on.get(index):
                return self._read_mig(nv, handle, index, name, now, full)
            self._mig_by_index.pop(index, None)
            self._mig_instances.pop(index, None)
            return [self._read_device(nv, handle, uuid, index, name, now, full=full)]
        except nv.NVMLError as exc:
            # Report the failure under the UUIDs the placer knows: the MIG instances last
            # seen, or the GPU itself.  The next sample looks the GPU up afresh.
            self._handle_by_index.pop(index, None)
            self._mig_instances.pop(index, None)
            uuids = self._mig_by_index.get(index) or [self._uuid_by_index.get(index, f"GPU-UNKNOWN-{index}")]
            return [self._error_sample(nv, u, index, exc, now) for u in uuids]

    def _read_mig(
        self, nv: Any, parent: Any, index: int, parent_name: str, now: float, full: bool = True
    ) -> list[GpuSample]:
        instances = None if full else self._mig_instances.get(index)
        if instances is None:
            instances = self._mig_instances[index] = self._find_mig(nv, parent)
        samples: list[GpuSample] = []
        for inst in instances:
            try:
                samples.append(
                    self._read_device(nv, inst.handle, inst.uuid, index, inst.name, now, inst.gpm_via, full=full)
                )
            except nv.NVMLError as exc:
                self._mig_instances.pop(index, None)  # the next sample enumerates the instances again
                samples.append(self._error_sample(nv, inst.uuid, index, exc, now))
        self._mig_by_index[index] = [s.uuid for s in samples]
        if not samples:
            log.info("GPU %d (%s) is in MIG mode with no instances: nothing to place on", index, parent_name)
        return samples

    def _find_mig(self, nv: Any, parent: Any) -> list[_MigInstance]:
        slots = self._call(nv.nvmlDeviceGetMaxMigDeviceCount, parent) or 0
        found: list[_MigInstance] = []
        for slot in range(int(slots)):
            try:
                handle = nv.nvmlDeviceGetMigDeviceHandleByIndex(parent, slot)
            except (nv.NVMLError_NotFound, nv.NVMLError_InvalidArgument):
                continue  # no instance in this slot
            uuid = _text(nv.nvmlDeviceGetUUID(handle))
            name = self._name(nv, handle, uuid)
            instance = self._call(nv.nvmlDeviceGetGpuInstanceId, handle)
            found.append(_MigInstance(handle, uuid, name, (parent, int(instance)) if instance is not None else None))
        return found

    def _read_device(
        self,
        nv: Any,
        handle: Any,
        uuid: str,
        index: int,
        name: str,
        now: float,
        mig_parent: MigParent | None = None,
        full: bool = True,
    ) -> GpuSample:
        memory = self._memory(nv, handle)
        if memory is None:
            return GpuSample(
                uuid, index, name, self.host, 0, 0, 0, now, error="NVML reports no memory information for this GPU"
            )
        total, used, free = memory
        gpm = self._gpm.read(nv, handle, uuid, mig_parent)
        detail = None if full else self._detail.get(uuid)
        if detail is None or gpm is None:  # busy time: the activity itself where GPM gives none
            util = self._call(nv.nvmlDeviceGetUtilizationRates, handle)
            busy = percent_share(util.gpu) if util is not None else None
        else:
            busy = detail.busy
        if detail is None:
            power = self._call(nv.nvmlDeviceGetPowerUsage, handle)
            energy = self._call(nv.nvmlDeviceGetTotalEnergyConsumption, handle)
            detail = self._detail[uuid] = _Detail(
                busy,
                float(power) / 1000.0 if power is not None else None,
                float(energy) / 1000.0 if energy is not None else None,
                self._accounting.held(nv, handle),
            )
        smocc = drama = None
        if gpm is not None:
            smact, smocc, drama = gpm
            source = "gpm"
        elif busy is not None:
            smact, source = busy, "utilization"
        else:
            smact, source = None, "none"
        return GpuSample(
            uuid=uuid,
            index=index,
            name=name,
            host=self.host,
            memory_total_mib=total,
            memory_used_mib=used,
            memory_free_mib=free,
            at=now,
            busy=busy,
            smact=smact,
            smocc=smocc,
            drama=drama,
            activity_source=source,
            power_w=detail.power_w,
            energy_j=detail.energy_j,
            # each process's share of SM time: every sample (an interval's reading, issue 24 item 8)
            processes=self._accounting.processes(nv, handle, uuid, detail.held),
        )

    def _error_sample(self, nv: Any, uuid: str, index: int, exc: BaseException, now: float) -> GpuSample:
        self._gpm.forget(nv, uuid)
        self._detail.pop(uuid, None)
        name = self._name_by_uuid.get(uuid, "unknown")
        return GpuSample(uuid, index, name, self.host, 0, 0, 0, now, error=f"{type(exc).__name__}: {exc}")

    # -- readings --------------------------------------------------------------------------

    def _name(self, nv: Any, handle: Any, uuid: str) -> str:
        name = self._name_by_uuid.get(uuid)
        if name is None:
            name = _text(nv.nvmlDeviceGetName(handle))
            self._name_by_uuid[uuid] = name
        return name

    def _memory(self, nv: Any, handle: Any) -> tuple[int, int, int] | None:
        info = None
        version = getattr(nv, "nvmlMemory_v2", None)
        if version is not None:  # v2: "used" leaves out memory the driver reserves
            info = self._call(nv.nvmlDeviceGetMemoryInfo, handle, version, name="nvmlDeviceGetMemoryInfo_v2")
        if info is None:
            info = self._call(nv.nvmlDeviceGetMemoryInfo, handle)
        if info is None:
            return None
        return int(info.total) // _MIB, int(info.used) // _MIB, int(info.free) // _MIB
