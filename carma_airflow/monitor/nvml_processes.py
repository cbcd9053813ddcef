"""Per-process accounting on one NVML device: which processes hold its memory, and each one's
share of its SM time.

Memory comes from the compute and the MPS process lists (``nvmlDeviceGet[MPS]ComputeRunningProcesses``,
each with its versioned fallbacks); the share of SM time from ``nvmlDeviceGetProcessUtilization``,
read from the newest timestamp of the device's previous answer, so each reading covers one
sampling interval.  "Not found" there is an idle interval (every share 0), not a missing one.

:class:`~carma_airflow.monitor.nvml.NvmlProbe` owns the NVML session: it hands in the loaded
binding and its choke point (``call``: "not supported" -> None, logged once); every reading goes
through that choke point.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from carma_airflow.monitor.base import ProcessUsage, percent_share

log = logging.getLogger(__name__)

_MIB = 1024 * 1024
# the unversioned call needs the newest NVML: fall back to the older names
_PROCESS_LISTS = (
    ("nvmlDeviceGetComputeRunningProcesses", "nvmlDeviceGetComputeRunningProcesses_v2"),
    ("nvmlDeviceGetMPSComputeRunningProcesses", "nvmlDeviceGetMPSComputeRunningProcesses_v2"),
)


class ProcessAccounting:
    """The processes of every device one probe reads, with the per-device timestamp each
    device's next utilisation reading starts from."""

    __slots__ = ("_call", "_seen")

    def __init__(self, call: Callable[..., Any]) -> None:
        self._call = call  # the probe's choke point: call(fn, *args, name=...)
        self._seen: dict[str, int] = {}  # uuid -> newest per-process utilisation sample read (us)

    def processes(
        self, nv: Any, handle: Any, uuid: str, held: dict[int, int] | None = None
    ) -> tuple[ProcessUsage, ...]:
        """Every process holding memory on the device, by pid, with its share of SM time where
        the device reports it.  ``held``: the processes and their MiB as :meth:`held` read them
        earlier (the probe's samples between two full ones); None reads them now."""
        if held is None:
            held = self.held(nv, handle)
        if not held:
            return ()
        util = self.sm_shares(nv, handle, uuid)
        if util is None:
            return tuple(ProcessUsage(pid, mib) for pid, mib in sorted(held.items()))
        # NVML lists only processes whose kernels ran since the last reading: the others had none
        return tuple(ProcessUsage(pid, mib, util.get(pid, 0.0)) for pid, mib in sorted(held.items()))

    def held(self, nv: Any, handle: Any) -> dict[int, int]:
        """The processes holding memory on the device (compute and MPS lists): pid -> MiB."""
        held: dict[int, int] = {}
        for fn_names in _PROCESS_LISTS:
            procs = None
            for fn_name in fn_names:
                fn = getattr(nv, fn_name, None)
                if fn is not None:
                    procs = self._call(fn, handle, name=fn_name)
                if procs is not None:
                    break
            for proc in procs or ():
                used = getattr(proc, "usedGpuMemory", None)  # None where NVML cannot tell (WDDM)
                pid = int(proc.pid)
                held[pid] = max(held.get(pid, 0), int(used) // _MIB if used is not None else 0)
        return held

    def sm_shares(self, nv: Any, handle: Any, uuid: str) -> dict[int, float] | None:
        """Each process's share of SM time since this device's last reading (0..1), or None.

        ``nvmlDeviceGetProcessUtilization`` answers with the samples newer than the timestamp it
        is given (the newest one of the previous answer, kept per device).  "Not found" means no
        sample is newer: no process ran a kernel in the interval, an idle interval (``{}``: every
        process's share is 0), not a missing one; leaving it out biased activity upward, as only
        busy intervals were counted.  None where the device cannot tell (MIG instances, older
        drivers: "not supported"), or on any other NVML error: per-process readings never fail a
        sample.
        """
        fn = getattr(nv, "nvmlDeviceGetProcessUtilization", None)
        if fn is None:
            return None
        seen = self._seen.get(uuid, 0)
        not_found = getattr(nv, "NVMLError_NotFound", None)
        try:
            samples = self._call(fn, handle, seen, name="nvmlDeviceGetProcessUtilization")
        except nv.NVMLError as exc:
            if isinstance(not_found, type) and isinstance(exc, not_found):
                return {}  # no kernel of any process since the last reading: all idle
            log.debug("nvmlDeviceGetProcessUtilization on %s: %s (per-process SM time left out)", uuid, exc)
            return None
        if samples is None:
            return None
        shares: dict[int, list[float]] = {}
        for sample in samples:
            seen = max(seen, int(sample.timeStamp))
            shares.setdefault(int(sample.pid), []).append(percent_share(sample.smUtil))
        self._seen[uuid] = seen
        return {pid: sum(values) / len(values) for pid, values in shares.items()}
