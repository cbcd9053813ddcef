"""Driver caps (taskrun/driver_cap.py, executor/starting/starter.py): each try in its own cgroup leaf with
its NVML limits, with a fake NVML function and a temporary directory as the cgroup root."""

from __future__ import annotations

import functools
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from carma_airflow.config.settings import CarmaSettings
from carma_airflow.core.decision import Decision, GpuVerdict, Outcome
from carma_airflow.core.fencing import IsolationMode
from carma_airflow.core.task import MemoryNeed, TaskRequest
from carma_airflow.executor.starting import TryStarter
from carma_airflow.monitor.nvml import NvmlProbe
from carma_airflow.taskrun.driver_cap import (
    CGROUP_LEAF_ENV,
    FENCE_NOTE_ENV,
    DriverCapError,
    DriverCaps,
    enter_leaf,
    nvml_owner,
    nvml_set_limit,
    owner_folder,
)
from carma_airflow.taskrun.fence_env import describe_try_fence, fence_from_env
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
    ti = SimpleNamespace(
        id=key, try_number=1, executor_config=None, dag_id="dag", task_id=key, run_id="run", map_index=-1
    )
    config = SimpleNamespace(isolation=None)
    return SimpleNamespace(
        key=key, rkey=key, ti=ti, request=request, config=config, prior_ooms=0, taken_at=0.0, last_summary=""
    )


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


ME = f"gpuhost:{os.getpid()}:aaaa1111"  # an executor's peer id (executor/peers/peers.py): host, pid, token
PEER = f"gpuhost:{os.getppid()}:bbbb2222"  # another live executor on the same host


def driver_starter(tmp_path: Path, nvml: FakeNvml, owner: str = ME, **options: str) -> Any:
    s = starter(tmp_path, isolation="driver", **options)
    s._host = DRIVER_HOST
    s._resolved.clear()
    s.driver = DriverCaps(nvml, tmp_path / "cgroup", owner=owner)
    return s


def home(tmp_path: Path, owner: str = ME) -> Path:
    return tmp_path / "cgroup" / "carma" / owner.replace(":", "_")


def test_auto_and_driver_pick_driver_where_the_host_has_it() -> None:
    assert resolve(IsolationMode.AUTO, DRIVER_HOST).mode is IsolationMode.DRIVER
    assert "per-cgroup" in resolve(IsolationMode.DRIVER, DRIVER_HOST).describe()
    assert resolve(IsolationMode.AUTO, HostIsolation("nvml", driver_why="needs root")).mode is IsolationMode.FRAMEWORK


def test_a_driver_try_gets_its_leaf_with_soft_promise_and_hard_cap(tmp_path: Path) -> None:
    nvml = FakeNvml()
    s = driver_starter(tmp_path, nvml)
    env = s.placed_env(attempt("a", 8192), DECISION)
    leaf = home(tmp_path) / "a"  # under the executor's own id
    assert env["CARMA_ISOLATION"] == "driver" and env[CGROUP_LEAF_ENV] == str(leaf) and leaf.is_dir()
    assert nvml.calls == [(GPU, str(leaf), 10240 * MIB, 10240 * MIB)]
    s.refresh_caps(["a"])
    assert leaf.is_dir()  # still running
    s.refresh_caps([])
    assert not leaf.exists()  # ended: its leaf (and with it the limits) goes
    assert nvml.calls[-1] == (GPU, str(leaf), 0, 10240 * MIB)  # its soft limit cleared first


def test_a_leaf_still_holding_a_process_is_removed_later(tmp_path: Path) -> None:
    caps = DriverCaps(FakeNvml(), tmp_path, owner=ME)
    leaf = caps.open("a", "a", [GPU], [100], [200])
    (leaf / "cgroup.procs").write_text("123\n")  # a real leaf would be EBUSY; here: not empty
    caps.keep([])
    assert leaf.exists() and caps.stale == {leaf}
    (leaf / "cgroup.procs").unlink()
    caps.keep([])
    assert not leaf.exists() and not caps.stale


def _dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_two_executors_on_one_host_never_remove_each_others_leaves(tmp_path: Path) -> None:
    """Issue 22's target: two schedulers on one host under ``driver`` (the cgroup a temporary
    folder, NVML faked).  Each one's new leaf survives the other's heartbeats, also before its
    try has joined it; each removes its own when its try ends."""
    nvml_a, nvml_b = FakeNvml(), FakeNvml()
    a = driver_starter(tmp_path, nvml_a, owner=ME)
    b = driver_starter(tmp_path, nvml_b, owner=PEER)
    leaf_a = Path(a.placed_env(attempt("a", 8192), DECISION)[CGROUP_LEAF_ENV])
    leaf_b = Path(b.placed_env(attempt("b", 4096), DECISION)[CGROUP_LEAF_ENV])
    assert leaf_a.parent != leaf_b.parent  # each under its own executor id
    for _ in range(3):  # heartbeats of both: neither try has joined its leaf yet
        a.refresh_caps(["a"])
        b.refresh_caps(["b"])
    assert leaf_a.is_dir() and leaf_b.is_dir()
    (leaf_b / "cgroup.procs").write_text("4242\n")  # b's try joins
    a.refresh_caps([])  # a's try ended: its leaf goes, b's stays
    assert not leaf_a.exists() and leaf_b.is_dir()
    assert all(leaf == str(leaf_a) for _, leaf, _, _ in nvml_a.calls)  # a set limits on its own leaf only
    (leaf_b / "cgroup.procs").unlink()  # b's try left
    b.refresh_caps([])
    assert not leaf_b.exists()
    assert home(tmp_path, PEER).is_dir() and home(tmp_path, ME).is_dir()  # both executors still live


def test_a_gone_executors_empty_leaves_are_swept_and_busy_ones_kept(tmp_path: Path) -> None:
    nvml = FakeNvml()
    caps = DriverCaps(nvml, tmp_path, owner=ME)
    mine = caps.open("a", "a", [GPU], [100], [200])
    gone = tmp_path / "carma" / f"gpuhost_{_dead_pid()}_cccc3333"  # its process no longer exists
    empty, busy = gone / "t1", gone / "t2"
    empty.mkdir(parents=True)
    busy.mkdir()
    (busy / "cgroup.procs").write_text("77\n")  # an adopted try still runs in it
    live = tmp_path / "carma" / PEER.replace(":", "_") / "t3"  # a live peer's leaf, not joined yet
    live.mkdir(parents=True)
    other_host = tmp_path / "carma" / f"otherhost_{_dead_pid()}_dddd4444" / "t4"
    other_host.mkdir(parents=True)
    unknown = tmp_path / "carma" / "some-other-tool" / "t5"  # a name that is no executor id
    unknown.mkdir(parents=True)
    caps.keep(["a"])
    assert not empty.exists() and busy.exists() and mine.exists()
    assert (GPU, str(empty), 0, 0) in nvml.calls  # soft limit cleared before it went
    assert live.exists() and other_host.exists() and unknown.exists()
    (busy / "cgroup.procs").unlink()
    caps.keep(["a"])
    assert not gone.exists()  # the gone executor's folder, once empty


def test_a_gone_executors_leaves_get_their_soft_limits_cleared_on_every_gpu_of_the_host(tmp_path: Path) -> None:
    """Which GPUs a gone executor's leaf had limits on is recorded nowhere: the sweeper clears the
    soft limit on every GPU of its host (the monitor's), not only on those it set limits on."""
    nvml, other = FakeNvml(), GPU.replace("1111", "9999")
    caps = DriverCaps(nvml, tmp_path, owner=ME, host_gpus=lambda: [GPU, other])
    caps.open("a", "a", [GPU], [100], [200])  # this executor has set limits on GPU only
    leaf = tmp_path / "carma" / f"gpuhost_{_dead_pid()}_cccc3333" / "t1"
    leaf.mkdir(parents=True)
    caps.keep(["a"])
    assert not leaf.exists()
    assert {(u, n) for u, n, soft, hard in nvml.calls if n == str(leaf)} == {(GPU, str(leaf)), (other, str(leaf))}


def test_the_starter_gives_its_driver_caps_every_gpu_of_the_host(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from carma_airflow.executor.starting import starter as starter_module

    nvml = FakeNvml()
    monkeypatch.setattr(starter_module, "nvml_set_limit", lambda owner: nvml)
    monkeypatch.setattr(starter_module, "DriverCaps", functools.partial(DriverCaps, root=tmp_path / "cgroup"))
    s = starter(tmp_path, isolation="driver")
    s._host = DRIVER_HOST
    s._resolved.clear()
    s.driver_owner, s.host_gpus = ME, lambda: [GPU, "GPU-other"]
    s.placed_env(attempt("a", 8192), DECISION)
    assert s.driver is not None and s.driver.host_gpus is not None
    assert list(s.driver.host_gpus()) == [GPU, "GPU-other"]


def test_an_owner_id_becomes_one_folder_name() -> None:
    assert owner_folder("gpu-host.example:4242:ab12cd34") == "gpu-host.example_4242_ab12cd34"
    assert owner_folder("a/b") == "a_b"


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
    assert nvml.calls[-1][3] == (40960 - 512 - 12288) * MIB  # a live promise carries no margin
    assert nvml.calls[-1][2] == 8192 * MIB  # the soft limit stays the promise (its reservation)
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
    assert not (home(tmp_path) / "a").exists()  # no leaf left behind
    line = install_framework_caps({**env, "CUDA_VISIBLE_DEVICES": GPU}, hooks={}, report=lambda _: None)
    assert "(framework" in line and "driver caps not in force" in line


CAP_KEYS = ("CARMA_MEMORY_CAP_MIB", "XLA_CLIENT_MEM_FRACTION", "XLA_PYTHON_CLIENT_MEM_FRACTION")


@pytest.mark.parametrize("where", ["nvml refuses", "the try cannot join its leaf"])
def test_a_fallen_back_driver_try_gets_a_framework_trys_caps(tmp_path: Path, where: str) -> None:
    """The driver's cap counts the CUDA context within it; a framework's allocator does not see
    it: fallen back, the try is capped as a framework try of the same placement (A100-40GB: the
    context 768 MiB, 10240 -> 9472 MiB, JAX 0.2500 -> 0.2313), and its log says so truthfully."""
    framework = starter(tmp_path / "framework", isolation="framework").placed_env(attempt("f", 8192), DECISION)
    if where == "nvml refuses":
        env = driver_starter(tmp_path, FakeNvml(fail=True)).placed_env(attempt("a", 8192), DECISION)
    else:
        env = driver_starter(tmp_path, FakeNvml()).placed_env(attempt("a", 8192), DECISION)
        assert (env["CARMA_MEMORY_CAP_MIB"], env["XLA_CLIENT_MEM_FRACTION"]) == ("10240", "0.2500")  # the driver's
        env[CGROUP_LEAF_ENV] = str(tmp_path / "no-such-leaf")
        assert enter_leaf(env, pid=os.getpid()) is None
    assert {k: env[k] for k in CAP_KEYS} == {k: framework[k] for k in CAP_KEYS}
    assert (env["CARMA_MEMORY_CAP_MIB"], env["XLA_CLIENT_MEM_FRACTION"]) == ("9472", "0.2313")
    fence = fence_from_env(env, 1)  # what the try's log and the executor's say of it
    assert fence is not None
    line = describe_try_fence(fence, env)
    assert line.startswith("capped at 9472 MiB per GPU (framework")
    assert "CUDA context 768 MiB per GPU counted outside the allocator's cap" in line
    enter_leaf(env, pid=os.getpid())  # a second fall-back lowers nothing again
    assert env["CARMA_MEMORY_CAP_MIB"] == "9472"


def _probe_with(monkeypatch: pytest.MonkeyPatch, **functions: Any) -> NvmlProbe:
    """The monitor's NVML owner over a fake binding (pynvml is the boundary)."""
    calls = {"init": 0}

    def init() -> None:
        calls["init"] += 1

    nv = SimpleNamespace(nvmlInit=init, NVMLError=RuntimeError, **functions)
    monkeypatch.setitem(sys.modules, "pynvml", nv)
    probe = NvmlProbe()
    probe.inits = calls  # type: ignore[attr-defined]
    return probe


def test_a_wrong_binding_signature_is_a_typed_error_that_says_what_to_do(monkeypatch: pytest.MonkeyPatch) -> None:
    def set_limits(handle: object) -> None:  # the binding takes something else than (handle, limits)
        raise AssertionError("not reached")

    probe = _probe_with(monkeypatch, nvmlDeviceSetMemoryLimits_v1=set_limits, nvmlDeviceGetHandleByUUID=lambda u: "h")
    with pytest.raises(DriverCapError, match=r"TypeError.*isolation = framework"):
        nvml_set_limit(probe)(GPU, "/sys/fs/cgroup/carma/a", 1, 2)


def test_the_binding_gets_one_struct_with_the_leaf_and_both_limits_through_the_monitor(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    seen: list[Any] = []
    probe = _probe_with(
        monkeypatch,
        nvmlDeviceSetMemoryLimits_v1=lambda handle, limits: seen.append((handle, limits)),
        nvmlDeviceGetHandleByUUID=lambda u: f"handle of {u}",
    )
    set_limit = nvml_set_limit(probe)
    set_limit(GPU, "/sys/fs/cgroup/carma/a", 1 * MIB, 2 * MIB)
    set_limit(GPU, "/sys/fs/cgroup/carma/a", 0, 2 * MIB)
    handle, limits = seen[0]
    assert handle == f"handle of {GPU}"
    assert (limits.nameSpace, limits.softLimit, limits.hardLimit) == (b"/sys/fs/cgroup/carma/a", MIB, 2 * MIB)
    assert probe.inits == {"init": 1}  # type: ignore[attr-defined]  # the probe's own nvmlInit, once
    assert not probe._lock.locked()  # the call ran under the probe's lock and let it go


def test_without_a_driver_the_limit_is_a_typed_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import pynvml -> ImportError
    with pytest.raises(DriverCapError, match=r"NoGpuDriverError.*isolation = framework"):
        nvml_set_limit(NvmlProbe())(GPU, "/sys/fs/cgroup/carma/a", 1, 2)


def test_the_starter_sets_limits_through_the_monitors_probe(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The starter's own DriverCaps: under its executor id, its limits set by the NVML owner the
    flow hands it (the monitor's probe); only the cgroup root is a temporary folder."""
    seen: list[tuple[str, str, int, int]] = []

    class Owner:
        def set_memory_limits(self, uuid: str, namespace: str, soft: int, hard: int) -> None:
            seen.append((uuid, namespace, soft, hard))

    from carma_airflow.executor.starting import starter as starter_module

    monkeypatch.setattr(starter_module, "DriverCaps", functools.partial(DriverCaps, root=tmp_path / "cgroup"))
    s = starter(tmp_path, isolation="driver")
    s._host = DRIVER_HOST
    s._resolved.clear()
    s.driver_owner, s.nvml = ME, Owner()
    env = s.placed_env(attempt("a", 8192), DECISION)
    assert env[CGROUP_LEAF_ENV] == str(home(tmp_path) / "a")
    assert seen == [(GPU, env[CGROUP_LEAF_ENV], 10240 * MIB, 10240 * MIB)]
    assert nvml_owner(SimpleNamespace(probe=Owner())) is not None and nvml_owner(SimpleNamespace()) is None


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
    monkeypatch.setattr(pynvml, "nvmlInit", lambda: None)  # no driver here: only the init is skipped
    nvml_set_limit(NvmlProbe())(GPU, "/sys/fs/cgroup/carma/a", 3 * MIB, 4 * MIB)
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
