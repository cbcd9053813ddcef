"""Driver caps (taskrun/driver_cap.py, executor/starter.py): each try in its own cgroup leaf with
its NVML limits, with a fake NVML function and a temporary directory as the cgroup root."""

from __future__ import annotations

import os
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from carma_airflow.core.decision import Decision, GpuVerdict, Outcome
from carma_airflow.core.fencing import IsolationMode
from carma_airflow.core.task import MemoryNeed, TaskRequest
from carma_airflow.executor.starter import TryStarter
from carma_airflow.settings import CarmaSettings
from carma_airflow.taskrun.driver_cap import (
    CGROUP_LEAF_ENV,
    FENCE_NOTE_ENV,
    DriverCapError,
    DriverCaps,
    enter_leaf,
    nvml_set_limit,
)
from carma_airflow.taskrun.framework_hook import install_framework_caps
from carma_airflow.taskrun.isolation import HostIsolation, resolve

MIB = 1 << 20
GPU = "GPU-11111111-2222-3333-4444-555555555555"
DECISION = Decision(
    "k", Outcome.PLACED, (GPU,), (GpuVerdict(GPU, 0, "A100-40GB", None, "ok"),), summary="placed on GPU 0"
)


def starter(tmp_path: Path, **options: str) -> TryStarter:
    values = {"gpu_backend": "nvml", "state_dir": str(tmp_path), **options}
    settings = CarmaSettings.load(values.get, str(tmp_path))
    return TryStarter(settings, None, lambda ti: "", tmp_path / "ledger.json")  # type: ignore[arg-type]


def attempt(key: str, mib: int) -> Any:
    request = TaskRequest(key, key, MemoryNeed(mib, "declared"))
    ti = SimpleNamespace(id=key, try_number=1, executor_config=None)
    config = SimpleNamespace(isolation=None)
    return SimpleNamespace(rkey=key, ti=ti, request=request, config=config, prior_ooms=0, taken_at=0.0, last_summary="")


DRIVER_HOST = HostIsolation(
    "nvml", driver_limits=True, driver_why="nvmlDeviceSetMemoryLimits_v1 present, cgroup v2, root"
)


class FakeNvml:
    def __init__(self, fail: bool = False) -> None:
        self.calls: list[tuple[str, str, int, int]] = []
        self.fail = fail

    def __call__(self, uuid: str, leaf: str, soft: int, hard: int) -> None:
        if self.fail:
            raise DriverCapError("nvmlDeviceSetMemoryLimits_v1 failed: NVMLError_NotSupported")
        self.calls.append((uuid, leaf, soft, hard))


def driver_starter(tmp_path: Path, nvml: FakeNvml, **options: str) -> Any:
    s = starter(tmp_path, isolation="driver", **options)
    s._host = DRIVER_HOST
    s._resolved.clear()
    s.driver = DriverCaps(nvml, tmp_path / "cgroup")
    return s


def test_auto_and_driver_pick_driver_where_the_host_has_it() -> None:
    assert resolve(IsolationMode.AUTO, DRIVER_HOST).mode is IsolationMode.DRIVER
    assert "per-cgroup" in resolve(IsolationMode.DRIVER, DRIVER_HOST).describe()
    assert resolve(IsolationMode.AUTO, HostIsolation("nvml", driver_why="needs root")).mode is IsolationMode.FRAMEWORK


def test_a_driver_try_gets_its_leaf_with_soft_promise_and_hard_cap(tmp_path: Path) -> None:
    nvml = FakeNvml()
    s = driver_starter(tmp_path, nvml)
    env = s.placed_env(attempt("a", 8192), DECISION)
    leaf = tmp_path / "cgroup" / "carma" / "a"
    assert env["CARMA_ISOLATION"] == "driver" and env[CGROUP_LEAF_ENV] == str(leaf) and leaf.is_dir()
    assert nvml.calls == [(GPU, str(leaf), 10240 * MIB, 10240 * MIB)]
    s.refresh_caps(["a"])
    assert leaf.is_dir()  # still running
    s.refresh_caps([])
    assert not leaf.exists()  # ended: its leaf (and with it the limits) goes


def test_a_leaf_still_holding_a_process_is_removed_later(tmp_path: Path) -> None:
    caps = DriverCaps(FakeNvml(), tmp_path)
    leaf = caps.open("a", "a", [GPU], [100], [200])
    (leaf / "cgroup.procs").write_text("123\n")  # a real leaf would be EBUSY; here: not empty
    caps.keep([])
    assert leaf.exists() and caps.stale == {leaf}
    (leaf / "cgroup.procs").unlink()
    caps.keep([])
    assert not leaf.exists() and not caps.stale


def test_an_earlier_executors_empty_leaves_are_swept_and_busy_ones_kept(tmp_path: Path) -> None:
    caps = DriverCaps(FakeNvml(), tmp_path)
    empty, busy = tmp_path / "carma" / "old-1", tmp_path / "carma" / "old-2"
    empty.mkdir(parents=True)
    busy.mkdir()
    (busy / "cgroup.procs").write_text("77\n")
    mine = caps.open("a", "a", [GPU], [100], [200])
    caps.keep(["a"])
    assert not empty.exists() and busy.exists() and mine.exists()


def test_live_driver_caps_are_raised_and_tightened(tmp_path: Path) -> None:
    nvml = FakeNvml()
    s = driver_starter(tmp_path, nvml, isolation_cap="live")
    tenants: dict[str, list[int]] = {"a": []}
    s.co_tenants = lambda uuid, key: [mib for k, mibs in tenants.items() if k != key for mib in mibs]
    env = s.placed_env(attempt("a", 8192), DECISION)
    assert nvml.calls[-1][3] == (40960 - 512) * MIB  # alone: the GPU less the reserve
    assert "CARMA_MEMORY_CAP_FILE" in env  # the framework cap inside the leaf follows as well
    tenants["b"] = [12288]
    s.refresh_caps(["a", "b"])
    assert nvml.calls[-1][3] == (40960 - 512 - 12288 - 2048) * MIB
    assert nvml.calls[-1][2] == (8192 + 2048) * MIB  # the soft limit stays the promise
    n = len(nvml.calls)
    s.refresh_caps(["a", "b"])
    assert len(nvml.calls) == n  # unchanged: not set again
    del tenants["b"]
    s.refresh_caps(["a"])
    assert nvml.calls[-1][3] == (40960 - 512) * MIB


def test_an_nvml_refusal_falls_back_to_framework_caps_and_says_so(tmp_path: Path) -> None:
    s = driver_starter(tmp_path, FakeNvml(fail=True))
    env = s.placed_env(attempt("a", 8192), DECISION)
    assert env["CARMA_ISOLATION"] == "framework" and CGROUP_LEAF_ENV not in env
    assert "NotSupported" in env[FENCE_NOTE_ENV] and "framework caps only" in env[FENCE_NOTE_ENV]
    assert not (tmp_path / "cgroup" / "carma" / "a").exists()  # no leaf left behind
    line = install_framework_caps({**env, "CUDA_VISIBLE_DEVICES": GPU}, hooks={}, report=lambda _: None)
    assert "(framework)" in line and "driver caps not in force" in line


def test_a_wrong_binding_signature_is_a_typed_error_that_says_what_to_do() -> None:
    def set_limits(handle: object) -> None:  # the binding takes something else than (handle, limits)
        raise AssertionError("not reached")

    nv = SimpleNamespace(nvmlDeviceSetMemoryLimits_v1=set_limits, nvmlDeviceGetHandleByUUID=lambda u: "h")
    with pytest.raises(DriverCapError, match=r"TypeError.*isolation = framework"):
        nvml_set_limit(nv)(GPU, "/sys/fs/cgroup/carma/a", 1, 2)


def test_the_binding_gets_one_struct_with_the_leaf_and_both_limits() -> None:
    seen: list[Any] = []
    nv = SimpleNamespace(
        nvmlDeviceSetMemoryLimits_v1=lambda handle, limits: seen.append((handle, limits)),
        nvmlDeviceGetHandleByUUID=lambda u: f"handle of {u}",
    )
    nvml_set_limit(nv)(GPU, "/sys/fs/cgroup/carma/a", 1 * MIB, 2 * MIB)
    handle, limits = seen[0]
    assert handle == f"handle of {GPU}"
    assert (limits.nameSpace, limits.softLimit, limits.hardLimit) == (b"/sys/fs/cgroup/carma/a", MIB, 2 * MIB)


def test_the_try_moves_itself_into_its_leaf_or_falls_back(tmp_path: Path) -> None:
    leaf = tmp_path / "carma" / "t1"
    leaf.mkdir(parents=True)
    env = {CGROUP_LEAF_ENV: str(leaf), "CARMA_ISOLATION": "driver"}
    assert enter_leaf(env, pid=4242) == str(leaf)
    assert (leaf / "cgroup.procs").read_text() == "4242\n"
    assert enter_leaf({}) is None  # not driver-capped: nothing to do
    gone = {CGROUP_LEAF_ENV: str(tmp_path / "nowhere"), "CARMA_ISOLATION": "driver"}
    assert enter_leaf(gone, pid=os.getpid()) is None
    assert gone["CARMA_ISOLATION"] == "framework" and "could not join" in gone[FENCE_NOTE_ENV]


def test_a_simulated_host_makes_no_leaves(tmp_path: Path) -> None:
    s = starter(tmp_path, isolation="driver", gpu_backend="simulated")
    s.driver = DriverCaps(FakeNvml(), tmp_path / "cgroup")
    env = s.placed_env(attempt("a", 8192), DECISION)
    assert CGROUP_LEAF_ENV not in env and not (tmp_path / "cgroup").exists()


def test_the_installed_binding_takes_our_call(monkeypatch: pytest.MonkeyPatch) -> None:
    # nvidia-ml-py's own nvmlDeviceSetMemoryLimits_v1, with only the C function underneath faked
    pynvml = pytest.importorskip("pynvml")
    if not hasattr(pynvml, "nvmlDeviceSetMemoryLimits_v1"):
        pytest.skip("this nvidia-ml-py predates per-cgroup limits")
    seen: list[Any] = []

    def c_function(device: object, limits: Any) -> int:
        seen.append((device, limits._obj))  # byref(struct)
        return 0  # NVML_SUCCESS

    monkeypatch.setattr(pynvml, "_nvmlGetFunctionPointer", lambda name: c_function)
    monkeypatch.setattr(pynvml, "nvmlDeviceGetHandleByUUID", lambda uuid: "handle")
    nvml_set_limit(pynvml)(GPU, "/sys/fs/cgroup/carma/a", 3 * MIB, 4 * MIB)
    device, limits = seen[0]
    assert device == "handle" and type(limits).__name__ == "c_nvmlSetMemoryLimits_v1_t"
    name = limits.nameSpace  # the binding's structs read a char* back as str
    assert (name if isinstance(name, str) else name.decode()) == "/sys/fs/cgroup/carma/a"
    assert (limits.softLimit, limits.hardLimit) == (3 * MIB, 4 * MIB)


def test_tries_sent_to_other_hosts_fall_back_to_framework_caps(tmp_path: Path) -> None:
    nvml = FakeNvml()
    s = driver_starter(tmp_path, nvml, dispatch="celery")
    env = s.placed_env(attempt("a", 8192), DECISION)
    assert env["CARMA_ISOLATION"] == "framework" and "dispatch = celery" in env[FENCE_NOTE_ENV]
    assert nvml.calls == [] and CGROUP_LEAF_ENV not in env
