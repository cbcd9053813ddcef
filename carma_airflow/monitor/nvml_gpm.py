"""GPU activity from NVML's GPM (Hopper and later): SM activity, SM occupancy and DRAM bandwidth
activity over one sampling period.

Each device gets two GPM sample buffers, used in turn: every reading fills one
(``nvmlGpmSampleGet``, or ``nvmlGpmMigSampleGet`` for a MIG instance through its parent) and
asks ``nvmlGpmMetricsGet`` for the metrics between it and the other, so the first reading of a
device measures nothing yet.  A device without GPM, or one whose reading failed, gets no buffers
and no GPM readings (the probe falls back to busy time).  Buffers are freed when a device is
lost and when the probe closes.

:class:`~carma_airflow.monitor.nvml.NvmlProbe` owns the NVML session: it hands in the loaded
binding and its choke point (``call``: "not supported" -> None, logged once).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from carma_airflow.monitor.base import percent_share

log = logging.getLogger(__name__)

GPM_SM_UTIL = 2
GPM_SM_OCCUPANCY = 3
GPM_DRAM_BW_UTIL = 10
_GPM_METRICS = (GPM_SM_UTIL, GPM_SM_OCCUPANCY, GPM_DRAM_BW_UTIL)

# (the parent GPU's handle, the MIG instance's GPU instance id): how GPM reads a MIG instance
MigParent = tuple[Any, int]


class _Buffers:
    """GPM sample buffers of one device: two, used in turn, so each reading spans one period."""

    __slots__ = ("bufs", "current", "primed")

    def __init__(self, bufs: tuple[Any, Any] | None) -> None:
        self.bufs = bufs  # None: the device has no GPM
        self.current = 0
        self.primed = False


class GpmActivity:
    """The GPM buffers of every device one probe reads, by UUID."""

    __slots__ = ("_call", "_devices")

    def __init__(self, call: Callable[..., Any]) -> None:
        self._call = call  # the probe's choke point: call(fn, *args, name=...)
        self._devices: dict[str, _Buffers] = {}

    def read(
        self, nv: Any, handle: Any, uuid: str, mig_parent: MigParent | None = None
    ) -> tuple[float, float | None, float | None] | None:
        """SM activity, SM occupancy, DRAM activity over the last period, or None without GPM."""
        state = self._devices.get(uuid)
        if state is None:
            state = self._devices[uuid] = _Buffers(self._buffers(nv, handle if mig_parent is None else mig_parent[0]))
        if state.bufs is None:
            return None
        buf = state.bufs[state.current]
        if mig_parent is None:
            got = self._call(nv.nvmlGpmSampleGet, handle, buf)
        else:
            got = self._call(nv.nvmlGpmMigSampleGet, mig_parent[0], mig_parent[1], buf)
        if got is None:
            self._free(nv, state)
            self._devices[uuid] = _Buffers(None)
            return None
        previous = state.bufs[state.current ^ 1]
        state.current ^= 1
        if not state.primed:  # one reading so far: the next sample has a period to measure
            state.primed = True
            return None
        request = nv.c_nvmlGpmMetricsGet_t()
        request.version = nv.NVML_GPM_METRICS_GET_VERSION
        request.numMetrics = len(_GPM_METRICS)
        request.sample1 = previous
        request.sample2 = buf
        for i, metric in enumerate(_GPM_METRICS):
            request.metrics[i].metricId = metric
        result = self._call(nv.nvmlGpmMetricsGet, request)
        if result is None:
            return None
        values: list[float | None] = []
        for i in range(len(_GPM_METRICS)):
            metric = result.metrics[i]
            values.append(percent_share(metric.value) if int(metric.nvmlReturn) == int(nv.NVML_SUCCESS) else None)
        smact, smocc, drama = values
        if smact is None:
            return None
        return smact, smocc, drama

    def forget(self, nv: Any, uuid: str) -> None:
        """Free the buffers of a device that could not be read: it starts over when it is back."""
        state = self._devices.pop(uuid, None)
        if state is not None:
            self._free(nv, state)

    def close(self, nv: Any) -> None:
        """Free every device's buffers (before ``nvmlShutdown``)."""
        for state in self._devices.values():
            self._free(nv, state)
        self._devices.clear()

    def _buffers(self, nv: Any, handle: Any) -> tuple[Any, Any] | None:
        support = self._call(nv.nvmlGpmQueryDeviceSupport, handle)
        if support is None or not int(support.isSupportedDevice):
            return None
        bufs: list[Any] = []
        try:
            for _ in range(2):
                bufs.append(nv.nvmlGpmSampleAlloc())
        except nv.NVMLError as exc:
            log.warning("GPM sample buffers could not be allocated (%s); using utilization instead", exc)
            for buf in bufs:
                nv.nvmlGpmSampleFree(buf)
            return None
        return bufs[0], bufs[1]

    @staticmethod
    def _free(nv: Any, state: _Buffers) -> None:
        for buf in state.bufs or ():
            try:
                nv.nvmlGpmSampleFree(buf)
            except nv.NVMLError as exc:
                log.debug("nvmlGpmSampleFree failed: %s", exc)
        state.bufs = None
