# ruff: noqa: N802  (the fake mirrors pynvml's function names)
"""NvmlProbe: the real no-driver path on this machine, and the success paths against a fake pynvml.

Only the success paths use a fake: pynvml is the true boundary (a C library behind it), so the
fake copies pynvml's own error classes, constants and GPM structs and replaces the functions.
"""

from __future__ import annotations

import ctypes
import importlib
import logging
import sys
import threading
import types
from dataclasses import dataclass, field, replace
from typing import Any

import pytest

from carma_airflow.core.errors import ConfigError
from carma_airflow.monitor import Monitor, NoGpuDriverError, NvmlProbe

real: Any = importlib.import_module("pynvml")
GIB = 1024**3


def driver_present() -> bool:
    try:
        real.nvmlInit()
    except real.NVMLError:
        return False
    real.nvmlShutdown()
    return True


# -- without a driver (for real) --------------------------------------------------------------


def test_without_a_driver_sampling_raises_one_clear_line() -> None:
    if driver_present():
        pytest.skip("an NVIDIA driver is present on this machine")
    probe = NvmlProbe()
    with pytest.raises(NoGpuDriverError) as info:
        probe.sample()
    message = str(info.value)
    assert message == (
        "NVML could not start: no NVIDIA driver found (NVMLError_LibraryNotFound). "
        "On a machine without a GPU set [carma] gpu_backend = simulated."
    )
    assert "\n" not in message
    with pytest.raises(NoGpuDriverError):  # and again: nothing half-initialised
        probe.sample()
    probe.close()


def test_without_pynvml_installed_the_message_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import pynvml -> ImportError
    with pytest.raises(NoGpuDriverError, match=r"pip install nvidia-ml-py\)\. On a machine without a GPU"):
        NvmlProbe().sample()


# -- a fake pynvml ------------------------------------------------------------------------------


@dataclass
class FakeGpu:
    uuid: str
    name: str
    total_gib: int
    used_gib: int
    util: int | None = 50  # None: not supported (MIG instances)
    power_mw: int | None = 100_000
    energy_mj: int | None = 5_000_000
    gpm: tuple[float, float, float] | None = None  # percents; None: no GPM
    procs: list[tuple[int, int | None]] = field(default_factory=list)  # (pid, bytes)
    mig_mode: int | None = 0  # None: MIG not supported
    instances: list[FakeGpu] = field(default_factory=list)
    gpu_instance_id: int = 0
    memory_v2: bool = True
    procs_v3: bool = True
    lost: str | None = None  # "memory": memory reads fail; "all": every call fails
    # per-process utilisation samples NVML holds: (pid, timestamp in us, smUtil %); None: not supported
    util_samples: list[tuple[int, int, int]] | None = None
    parent: FakeGpu | None = None


class FakeNvml(types.ModuleType):
    """pynvml with pynvml's own errors, constants and GPM structs, and scripted devices."""

    def __init__(self, gpus: list[FakeGpu]) -> None:
        super().__init__("pynvml")
        for name in dir(real):
            if (
                name.startswith(("NVMLError", "NVML_", "c_nvmlGpm", "nvmlMemory_v"))
                or name == "NVMLLibraryMismatchError"
            ):
                setattr(self, name, getattr(real, name))
        self.gpus = gpus
        self.init_calls = 0
        self.shutdown_calls = 0
        self.gpm_live: dict[int, ctypes.Array[ctypes.c_char]] = {}
        self.gpm_readings: dict[int, tuple[str, int]] = {}
        self.gpm_allocs = 0
        self.gpm_frees = 0
        self.tick = 0
        self.util_asked: list[tuple[str, int]] = []  # (uuid, lastSeenTimeStamp) of each call

    def _err(self, code: int) -> Exception:
        return real.NVMLError(code)  # type: ignore[no-any-return]

    def _check(self, gpu: FakeGpu, what: str = "") -> None:
        if gpu.lost == "all" or (gpu.lost == what and what):
            raise self._err(real.NVML_ERROR_GPU_IS_LOST)

    def nvmlInit(self) -> None:
        self.init_calls += 1

    def nvmlShutdown(self) -> None:
        self.shutdown_calls += 1

    def nvmlDeviceGetCount(self) -> int:
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> FakeGpu:
        gpu = self.gpus[index]
        self._check(gpu)
        return gpu

    def nvmlDeviceGetUUID(self, gpu: FakeGpu) -> str:
        self._check(gpu)
        return gpu.uuid

    def nvmlDeviceGetName(self, gpu: FakeGpu) -> str:
        self._check(gpu)
        return gpu.name

    def nvmlDeviceGetMigMode(self, gpu: FakeGpu) -> list[int]:
        self._check(gpu)
        if gpu.mig_mode is None:
            raise self._err(real.NVML_ERROR_NOT_SUPPORTED)
        return [gpu.mig_mode, gpu.mig_mode]

    def nvmlDeviceGetMaxMigDeviceCount(self, gpu: FakeGpu) -> int:
        return 7

    def nvmlDeviceGetMigDeviceHandleByIndex(self, gpu: FakeGpu, index: int) -> FakeGpu:
        self._check(gpu)
        if index >= len(gpu.instances):
            raise self._err(real.NVML_ERROR_NOT_FOUND)
        return gpu.instances[index]

    def nvmlDeviceGetGpuInstanceId(self, gpu: FakeGpu) -> int:
        return gpu.gpu_instance_id

    def nvmlDeviceGetMemoryInfo(self, gpu: FakeGpu, version: int | None = None) -> Any:
        self._check(gpu, "memory")
        if version is not None and not gpu.memory_v2:
            raise self._err(real.NVML_ERROR_FUNCTION_NOT_FOUND)
        total, used = gpu.total_gib * GIB, gpu.used_gib * GIB
        return types.SimpleNamespace(total=total, used=used, free=total - used, reserved=0)

    def nvmlDeviceGetUtilizationRates(self, gpu: FakeGpu) -> Any:
        self._check(gpu)
        if gpu.util is None:
            raise self._err(real.NVML_ERROR_NOT_SUPPORTED)
        return types.SimpleNamespace(gpu=gpu.util, memory=10)

    def nvmlDeviceGetPowerUsage(self, gpu: FakeGpu) -> int:
        if gpu.power_mw is None:
            raise self._err(real.NVML_ERROR_NOT_SUPPORTED)
        return gpu.power_mw

    def nvmlDeviceGetTotalEnergyConsumption(self, gpu: FakeGpu) -> int:
        if gpu.energy_mj is None:
            raise self._err(real.NVML_ERROR_NOT_SUPPORTED)
        return gpu.energy_mj

    def _procs(self, gpu: FakeGpu) -> list[Any]:
        return [types.SimpleNamespace(pid=pid, usedGpuMemory=used) for pid, used in gpu.procs]

    def nvmlDeviceGetComputeRunningProcesses(self, gpu: FakeGpu) -> list[Any]:
        if not gpu.procs_v3:  # what pynvml does when the driver lacks the _v3 symbol
            raise real.NVMLLibraryMismatchError("use a versioned function such as ..._v2")
        return self._procs(gpu)

    def nvmlDeviceGetComputeRunningProcesses_v2(self, gpu: FakeGpu) -> list[Any]:
        return self._procs(gpu)

    def nvmlDeviceGetMPSComputeRunningProcesses(self, gpu: FakeGpu) -> list[Any]:
        return []

    def nvmlDeviceGetProcessUtilization(self, gpu: FakeGpu, last_seen: int) -> list[Any]:
        # pynvml's behaviour: samples newer than last_seen; none -> NVMLError_NotFound
        self.util_asked.append((gpu.uuid, last_seen))
        if gpu.util_samples is None:
            raise self._err(real.NVML_ERROR_NOT_SUPPORTED)
        newer = [(pid, ts, sm) for pid, ts, sm in gpu.util_samples if ts > last_seen]
        if not newer:
            raise self._err(real.NVML_ERROR_NOT_FOUND)
        return [
            types.SimpleNamespace(pid=pid, timeStamp=ts, smUtil=sm, memUtil=0, encUtil=0, decUtil=0)
            for pid, ts, sm in newer
        ]

    # GPM
    def nvmlGpmQueryDeviceSupport(self, gpu: FakeGpu) -> Any:
        support = real.c_nvmlGpmSupport_t()
        support.isSupportedDevice = 1 if gpu.gpm is not None else 0
        return support

    def nvmlGpmSampleAlloc(self) -> Any:
        raw = ctypes.create_string_buffer(16)
        ptr = ctypes.cast(raw, real.c_nvmlGpmSample_t)
        self.gpm_live[ctypes.addressof(raw)] = raw
        self.gpm_allocs += 1
        return ptr

    def _addr(self, ptr: Any) -> int:
        return ctypes.cast(ptr, ctypes.c_void_p).value or 0

    def nvmlGpmSampleFree(self, ptr: Any) -> None:
        del self.gpm_live[self._addr(ptr)]
        self.gpm_frees += 1

    def nvmlGpmSampleGet(self, gpu: FakeGpu, ptr: Any) -> Any:
        self._check(gpu)
        self.tick += 1
        self.gpm_readings[self._addr(ptr)] = (gpu.uuid, self.tick)
        return ptr

    def nvmlGpmMigSampleGet(self, parent: FakeGpu, gpu_instance_id: int, ptr: Any) -> Any:
        child = next(c for c in parent.instances if c.gpu_instance_id == gpu_instance_id)
        return self.nvmlGpmSampleGet(child, ptr)

    def nvmlGpmMetricsGet(self, request: Any) -> Any:
        assert request.version == real.NVML_GPM_METRICS_GET_VERSION
        uuid1, t1 = self.gpm_readings[self._addr(request.sample1)]
        uuid2, t2 = self.gpm_readings[self._addr(request.sample2)]
        assert uuid1 == uuid2 and t1 < t2, "GPM metrics need two readings of one device, oldest first"
        gpu = next(g for g in self._all() if g.uuid == uuid1)
        assert gpu.gpm is not None
        values = dict(zip((2, 3, 10), gpu.gpm, strict=True))
        for i in range(request.numMetrics):
            metric = request.metrics[i]
            metric.value = values[metric.metricId]
            metric.nvmlReturn = real.NVML_SUCCESS
        return request

    def _all(self) -> list[FakeGpu]:
        return [*self.gpus, *(c for g in self.gpus for c in g.instances)]


def four_gpus() -> list[FakeGpu]:
    """An H100 with GPM, an A100 without, an H100 split into two MIG instances, and an A100 that
    is lost (its memory cannot be read)."""
    mig_parent = FakeGpu("GPU-cccc", "NVIDIA H100 80GB HBM3", 80, 0, mig_mode=1, gpm=(0.0, 0.0, 0.0))
    mig_parent.instances = [
        FakeGpu("MIG-1111", "NVIDIA H100 80GB HBM3 MIG 3g.40gb", 40, 10, util=None, power_mw=None,
                energy_mj=None, gpm=(20.0, 10.0, 5.0), gpu_instance_id=1, procs=[(501, 10 * GIB)]),
        FakeGpu("MIG-2222", "NVIDIA H100 80GB HBM3 MIG 3g.40gb", 40, 0, util=None, power_mw=None,
                energy_mj=None, gpm=(0.0, 0.0, 0.0), gpu_instance_id=2),
    ]  # fmt: skip
    return [
        FakeGpu("GPU-aaaa", "NVIDIA H100 80GB HBM3", 80, 20, util=95, power_mw=350_500, energy_mj=9_876_543,
                gpm=(62.5, 48.0, 41.0), procs=[(101, 12 * GIB), (102, 8 * GIB), (101, 12 * GIB)],
                util_samples=[(101, 1_000, 40), (101, 2_000, 50), (999, 2_000, 30)]),
        FakeGpu("GPU-bbbb", "NVIDIA A100-SXM4-40GB", 40, 4, util=73, energy_mj=None, memory_v2=False,
                procs_v3=False, procs=[(201, 4 * GIB), (202, None)]),
        mig_parent,
        FakeGpu("GPU-dddd", "NVIDIA A100-SXM4-40GB", 40, 0, lost="memory"),
    ]  # fmt: skip


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> FakeNvml:
    module = FakeNvml(four_gpus())
    monkeypatch.setitem(sys.modules, "pynvml", module)
    return module


def test_init_is_lazy_and_happens_once(fake: FakeNvml) -> None:
    probe = NvmlProbe()
    assert fake.init_calls == 0
    threads = [threading.Thread(target=probe.sample) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert fake.init_calls == 1
    probe.sample()
    assert fake.init_calls == 1


def test_first_sample_reads_every_gpu_and_mig_instance(fake: FakeNvml) -> None:
    samples = {s.uuid: s for s in NvmlProbe(host="gpu-node-3").sample()}
    assert list(samples) == ["GPU-aaaa", "GPU-bbbb", "MIG-1111", "MIG-2222", "GPU-dddd"]  # no MIG parent
    h100 = samples["GPU-aaaa"]
    assert (h100.index, h100.name, h100.host) == (0, "NVIDIA H100 80GB HBM3", "gpu-node-3")
    assert (h100.memory_total_mib, h100.memory_used_mib, h100.memory_free_mib) == (81920, 20480, 61440)
    assert h100.busy == pytest.approx(0.95)
    # one GPM reading so far: busy time stands in until the next sample
    assert (h100.smact, h100.smocc, h100.drama, h100.activity_source) == (0.95, None, None, "utilization")
    assert h100.power_w == pytest.approx(350.5) and h100.energy_j == pytest.approx(9876.543)
    assert [(p.pid, p.used_mib) for p in h100.processes] == [(101, 12288), (102, 8192)]
    assert h100.error is None


def test_second_sample_has_gpm_activity_on_hopper_and_utilization_elsewhere(fake: FakeNvml) -> None:
    probe = NvmlProbe()
    probe.sample()
    samples = {s.uuid: s for s in probe.sample()}
    h100 = samples["GPU-aaaa"]
    assert h100.activity_source == "gpm"
    assert (h100.smact, h100.smocc, h100.drama) == pytest.approx((0.625, 0.48, 0.41))
    a100 = samples["GPU-bbbb"]  # no GPM, no energy counter, old driver (memory v1, processes v2)
    assert (a100.smact, a100.smocc, a100.drama, a100.activity_source) == (0.73, None, None, "utilization")
    assert a100.energy_j is None and a100.power_w == pytest.approx(100.0)
    assert (a100.memory_total_mib, a100.memory_used_mib) == (40960, 4096)
    assert [(p.pid, p.used_mib) for p in a100.processes] == [(201, 4096), (202, 0)]
    mig = samples["MIG-1111"]  # GPM through the parent, no utilization or power on MIG
    assert (mig.index, mig.memory_total_mib, mig.memory_used_mib) == (2, 40960, 10240)
    assert mig.busy is None and mig.power_w is None and mig.energy_j is None
    assert mig.activity_source == "gpm" and mig.smact == pytest.approx(0.2)
    assert [(p.pid, p.used_mib) for p in mig.processes] == [(501, 10240)]
    assert samples["MIG-2222"].memory_used_mib == 0


def test_mig_instances_without_gpm_have_no_activity_on_the_first_sample(fake: FakeNvml) -> None:
    mig = {s.uuid: s for s in NvmlProbe().sample()}["MIG-1111"]
    assert (mig.smact, mig.activity_source) == (None, "none")


def test_a_lost_gpu_is_an_error_sample_not_an_exception(fake: FakeNvml) -> None:
    probe = NvmlProbe(detail_every=1)  # every sample asks the MIG parent (lost below) for its instances
    lost = {s.uuid: s for s in probe.sample()}["GPU-dddd"]
    assert lost.error == "NVMLError_GpuIsLost: GPU is lost" and not lost.ok
    assert lost.index == 3 and lost.name == "NVIDIA A100-SXM4-40GB"
    # a GPU that fails completely keeps the UUID it had; a MIG parent reports its instances
    fake.gpus[0].lost = "all"
    fake.gpus[2].lost = "all"
    samples = {s.uuid: s for s in probe.sample()}
    assert list(samples) == ["GPU-aaaa", "GPU-bbbb", "MIG-1111", "MIG-2222", "GPU-dddd"]
    assert {u for u, s in samples.items() if s.error} == {"GPU-aaaa", "MIG-1111", "MIG-2222", "GPU-dddd"}
    assert samples["GPU-bbbb"].error is None
    # it comes back: GPM starts over (one reading, then metrics)
    fake.gpus[0].lost = None
    back = {s.uuid: s for s in probe.sample()}["GPU-aaaa"]
    assert back.error is None and back.activity_source == "utilization"
    assert {s.uuid: s for s in probe.sample()}["GPU-aaaa"].activity_source == "gpm"


def test_missing_functions_are_logged_once_each(fake: FakeNvml, caplog: pytest.LogCaptureFixture) -> None:
    probe = NvmlProbe()
    with caplog.at_level(logging.INFO, logger="carma_airflow.monitor.nvml"):
        for _ in range(3):
            probe.sample()
    messages = [r.getMessage() for r in caplog.records]
    for fn in ("nvmlDeviceGetUtilizationRates", "nvmlDeviceGetTotalEnergyConsumption",
               "nvmlDeviceGetComputeRunningProcesses", "nvmlDeviceGetMemoryInfo_v2"):  # fmt: skip
        assert sum(f"NVML {fn} " in m for m in messages) == 1, (fn, messages)


def test_close_frees_gpm_buffers_and_shuts_nvml_down(fake: FakeNvml) -> None:
    probe = NvmlProbe()
    probe.sample()
    probe.sample()
    assert fake.gpm_allocs == 2 * 3  # the H100 and both MIG instances
    probe.close()
    probe.close()
    assert fake.gpm_frees == fake.gpm_allocs and not fake.gpm_live
    assert fake.shutdown_calls == 1
    probe.sample()  # reopens lazily
    assert fake.init_calls == 2


def test_monitor_over_nvml_fills_windows_and_measures_cost(fake: FakeNvml) -> None:
    monitor = Monitor(NvmlProbe(), window=10)
    for _ in range(50):
        monitor.sample_once()
    assert monitor.window("GPU-aaaa").smact[-1] == pytest.approx(0.625)
    assert monitor.window("GPU-dddd").smact == ()
    assert monitor.latest()["GPU-dddd"].error is not None
    assert monitor.cpu_seconds_per_sample() < 0.01


def test_each_process_has_its_share_of_sm_time_where_the_gpu_reports_it(fake: FakeNvml) -> None:
    probe = NvmlProbe()
    samples = {s.uuid: s for s in probe.sample()}
    h100 = samples["GPU-aaaa"]
    # 101: the mean of its two samples; 102 ran no kernel since the last reading; 999 holds no memory
    assert [(p.pid, p.used_mib, p.sm_util) for p in h100.processes] == [
        (101, 12288, pytest.approx(0.45)),
        (102, 8192, 0.0),
    ]
    # not supported (the A100's driver, MIG instances): left out, the sample is fine
    assert [p.sm_util for p in samples["GPU-bbbb"].processes] == [None, None] and samples["GPU-bbbb"].ok
    assert [p.sm_util for p in samples["MIG-1111"].processes] == [None] and samples["MIG-1111"].ok


def test_per_process_utilisation_reads_only_what_is_new_since_the_last_sample(fake: FakeNvml) -> None:
    probe = NvmlProbe()
    probe.sample()
    # nothing new on the next sample: NVML says "not found": no kernel ran, an idle interval
    again = {s.uuid: s for s in probe.sample()}["GPU-aaaa"]
    assert again.ok and [p.sm_util for p in again.processes] == [0.0, 0.0]
    fake.gpus[0].util_samples = [(101, 2_000, 50), (102, 3_000, 90), (101, 3_000, 100)]
    third = {s.uuid: s for s in probe.sample()}["GPU-aaaa"]
    assert [(p.pid, p.sm_util) for p in third.processes] == [(101, 1.0), (102, pytest.approx(0.9))]
    asked = [ts for uuid, ts in fake.util_asked if uuid == "GPU-aaaa"]
    assert asked == [0, 2_000, 2_000]  # each device's newest timestamp is kept between samples
    assert {uuid for uuid, _ in fake.util_asked} == {"GPU-aaaa", "GPU-bbbb", "MIG-1111"}  # only GPUs with processes


def test_an_nvml_error_in_per_process_utilisation_never_fails_the_sample(
    fake: FakeNvml, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(gpu: FakeGpu, last_seen: int) -> list[Any]:
        raise real.NVMLError(real.NVML_ERROR_UNKNOWN)

    monkeypatch.setattr(fake, "nvmlDeviceGetProcessUtilization", broken)
    h100 = {s.uuid: s for s in NvmlProbe().sample()}["GPU-aaaa"]
    assert h100.ok and [(p.pid, p.sm_util) for p in h100.processes] == [(101, None), (102, None)]
    monkeypatch.setattr(fake, "nvmlDeviceGetProcessUtilization", None)  # a pynvml too old to have it
    h100 = {s.uuid: s for s in NvmlProbe().sample()}["GPU-aaaa"]
    assert h100.ok and [p.sm_util for p in h100.processes] == [None, None]


def test_idle_intervals_count_in_a_tries_measured_activity(fake: FakeNvml) -> None:
    """Issue 24 item 8: a try busy in one interval of four and idle ("not found") in three is
    measured at a quarter of its busy share, not at the busy share (only busy intervals counted)."""
    from carma_airflow.executor.learning import Attribution
    from carma_airflow.executor.tries import Try, TryState

    class Handle:
        pid = 101

    probe = NvmlProbe()
    attempt = Try(None, "dag/t/r/-1/1", None, TryState.RUNNING, gpu_uuids=("GPU-aaaa",), handle=Handle())  # type: ignore[arg-type]
    seen = Attribution(session=lambda pid: 101 if pid == 101 else pid)  # 101 is the try's own process
    fake.gpus[0].util_samples = [(101, 1_000, 80)]  # busy: 80 % of SM time in the first interval
    fake.gpus[0].procs = [(101, 12 * GIB)]
    for i in range(4):  # then three readings with no kernel since the last one: "not found"
        gpu = {s.uuid: s for s in probe.sample()}["GPU-aaaa"]
        assert gpu.processes[0].sm_util == (0.8 if i == 0 else 0.0)
        seen.observe({"GPU-aaaa": replace(gpu, at=float(i))}, [attempt], lambda uuid: [])
    measured = seen.conclude("dag/t/r/-1/1").activity
    assert measured is not None and measured.source == "process"
    assert measured.sm_activity == pytest.approx(0.2)  # 0.8 once in four intervals


# -- what each sample reads: the risk window's inputs every period, the rest every detail_every --

EXPENSIVE = (
    "nvmlDeviceGetCount",
    "nvmlDeviceGetHandleByIndex",
    "nvmlDeviceGetUUID",
    "nvmlDeviceGetMigMode",
    "nvmlDeviceGetComputeRunningProcesses",
    "nvmlDeviceGetComputeRunningProcesses_v2",
    "nvmlDeviceGetMPSComputeRunningProcesses",
    "nvmlDeviceGetPowerUsage",
    "nvmlDeviceGetTotalEnergyConsumption",
    "nvmlDeviceGetMaxMigDeviceCount",
    "nvmlDeviceGetMigDeviceHandleByIndex",
)
PER_PERIOD = ("nvmlDeviceGetMemoryInfo", "nvmlGpmSampleGet", "nvmlGpmMigSampleGet", "nvmlGpmMetricsGet")


def _sampled(fake: FakeNvml, detail_every: int, periods: int) -> tuple[dict[str, int], list[dict[str, Any]]]:
    """Sample ``periods`` times, the H100's memory and GPM activity changing every period; the
    calls per NVML function (counted at the binding) and what each sample said of the H100.
    The lost A100 is left out: a GPU that fails is looked up afresh at every sample."""
    del fake.gpus[3]
    probe = NvmlProbe(detail_every=detail_every, count_calls=True)
    seen: list[dict[str, Any]] = []
    for i in range(periods):
        fake.gpus[0].used_gib = 10 + i
        fake.gpus[0].gpm = (float(i), 2.0 * i, 3.0 * i)
        fake.gpus[0].power_mw = 100_000 + 1000 * i
        h100 = {s.uuid: s for s in probe.sample()}["GPU-aaaa"]
        seen.append({"used": h100.memory_used_mib, "smact": h100.smact, "power": h100.power_w, "procs": h100.processes})
    calls = {name: cost.calls for name, cost in probe.call_costs().items()}
    return calls, seen


def test_expensive_calls_are_made_every_detail_every_samples_and_memory_and_activity_every_period(
    fake: FakeNvml,
) -> None:
    periods = 20
    calls5, seen5 = _sampled(fake, 5, periods)
    fake.gpus[:] = four_gpus()
    calls1, seen1 = _sampled(fake, 1, periods)
    for name in EXPENSIVE:
        if calls1.get(name):
            # 4 full samples of 20 (the 1st, 6th, 11th, 16th), so a fifth of the calls
            assert calls5.get(name, 0) * 5 == calls1[name], (name, calls5.get(name), calls1[name])
    for name in PER_PERIOD:
        assert calls5.get(name) == calls1.get(name), name
    # every device (2 GPUs, 2 MIG instances), every period (v2, and v1 where v2 is missing)
    assert calls5["nvmlDeviceGetMemoryInfo"] >= periods * 4
    # GPM where the GPU has it, busy time where it has not: the A100's utilisation every period
    assert calls5["nvmlDeviceGetUtilizationRates"] >= periods
    assert calls5["nvmlDeviceGetUtilizationRates"] < calls1["nvmlDeviceGetUtilizationRates"]
    # per-process SM shares measure an interval: every period where a GPU has processes
    assert calls5["nvmlDeviceGetProcessUtilization"] == calls1["nvmlDeviceGetProcessUtilization"]
    assert sum(calls5.values()) < 0.6 * sum(calls1.values())
    # the risk window's and the placer's inputs are exact every period, whatever detail_every
    assert [s["used"] for s in seen5] == [s["used"] for s in seen1] == [(10 + i) * 1024 for i in range(periods)]
    assert [s["smact"] for s in seen5] == [s["smact"] for s in seen1]
    assert [s["smact"] for s in seen5][1:] == pytest.approx([i / 100 for i in range(1, periods)])
    # power is carried between full samples: read at samples 0, 5, 10, 15
    assert [s["power"] for s in seen5] == [100.0 + 5 * (i // 5) for i in range(periods)]
    assert [s["power"] for s in seen1] == [100.0 + i for i in range(periods)]
    # the process list is carried, each process's share of SM time is read every period
    assert all([(p.pid, p.used_mib) for p in s["procs"]] == [(101, 12288), (102, 8192)] for s in seen5)


def test_between_full_samples_a_lost_gpu_is_reported_at_once_and_looked_up_again(fake: FakeNvml) -> None:
    probe = NvmlProbe(detail_every=10)
    probe.sample()
    fake.gpus[0].lost = "all"
    assert {s.uuid: s for s in probe.sample()}["GPU-aaaa"].error == "NVMLError_GpuIsLost: GPU is lost"
    fake.gpus[0].lost = None
    back = {s.uuid: s for s in probe.sample()}["GPU-aaaa"]  # not a full sample: looked up afresh all the same
    assert back.ok and back.power_w == pytest.approx(350.5)
    assert [(p.pid, p.used_mib) for p in back.processes] == [(101, 12288), (102, 8192)]


def test_detail_every_must_be_at_least_one() -> None:
    with pytest.raises(ConfigError, match=r"nvml_detail_every must be >= 1"):
        NvmlProbe(detail_every=0)


def test_call_costs_are_empty_unless_counted(fake: FakeNvml) -> None:
    probe = NvmlProbe()
    probe.sample()
    assert probe.call_costs() == {}
    counted = NvmlProbe(count_calls=True)
    counted.sample()
    costs = counted.call_costs()
    assert costs["nvmlDeviceGetCount"].calls == 1 and costs["nvmlDeviceGetHandleByIndex"].calls == 4
    assert all(c.cpu_s >= 0 and c.wall_s >= 0 for c in costs.values())
