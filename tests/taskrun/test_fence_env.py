"""A fenced try's environment (taskrun/fence_env.py, executor/taskenv.py) and the mode chosen
for a host (taskrun/isolation.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from carma_airflow.core.errors import ConfigError
from carma_airflow.core.fencing import CapRule, IsolationMode
from carma_airflow.executor.taskenv import gpu_task_env
from carma_airflow.taskrun.fence_env import fence_from_env
from carma_airflow.taskrun.isolation import HostIsolation, fence_for, mps_daemon_running, resolve

NVML = HostIsolation("nvml")
FRAMEWORK = resolve(IsolationMode.FRAMEWORK, NVML)


def env_of(fence_mode: IsolationMode, host: HostIsolation = NVML, **kw: object) -> dict[str, str]:
    resolved = resolve(fence_mode, host)
    args: dict[str, object] = {"reservation_mib": 8192, "totals_mib": [40960], "exclusive": False, "margin_mib": 2048}
    args.update(kw)
    fence = fence_for(resolved, **args)  # type: ignore[arg-type]
    return gpu_task_env(["GPU-SIM-0000"], result_path="/r", placement="p", fence=fence)


def test_framework_env_carries_the_cap_and_jaxs_fraction() -> None:
    env = env_of(IsolationMode.FRAMEWORK)
    assert env["CARMA_ISOLATION"] == "framework"
    assert env["CARMA_MEMORY_CAP_MIB"] == env["CARMA_MEMORY_PROMISE_MIB"] == "10240"
    assert env["XLA_CLIENT_MEM_FRACTION"] == env["XLA_PYTHON_CLIENT_MEM_FRACTION"] == "0.2500"
    assert "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT" not in env
    read = fence_from_env(env, 1)
    assert read is not None and read.cap_mib == (10240,) and not read.live


def test_mps_env_pins_each_device() -> None:
    env = env_of(IsolationMode.MPS, HostIsolation("nvml", mps_daemon=True), totals_mib=[40960, 40960])
    assert env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == "0=10240M,1=10240M"


def test_exclusive_try_is_capped_at_its_gpu_and_jax_left_alone() -> None:
    env = env_of(IsolationMode.FRAMEWORK, exclusive=True)
    assert env["CARMA_MEMORY_CAP_MIB"] == "40960"
    assert "XLA_CLIENT_MEM_FRACTION" not in env
    mps = HostIsolation("nvml", mps_daemon=True)
    for totals in ([40960], [0]):  # no MPS limit for a try with its GPU to itself, known size or not
        assert "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT" not in env_of(
            IsolationMode.MPS, mps, exclusive=True, totals_mib=totals
        )
    assert env_of(IsolationMode.MPS, mps, totals_mib=[0])["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == "0=10240M"


def test_unknown_gpu_size_keeps_the_cap_and_skips_the_fraction() -> None:
    env = env_of(IsolationMode.FRAMEWORK, totals_mib=[0])
    assert env["CARMA_MEMORY_CAP_MIB"] == "10240" and "XLA_CLIENT_MEM_FRACTION" not in env


def test_protective_rule_uses_the_co_tenants_present() -> None:
    env = env_of(IsolationMode.FRAMEWORK, rule=CapRule.PROTECTIVE, reserve_mib=512, co_tenant_promises=[14336])
    assert env["CARMA_MEMORY_CAP_MIB"] == str(40960 - 512 - 14336)


def test_none_is_stated_and_sets_no_cap() -> None:
    env = env_of(IsolationMode.NONE)
    assert env["CARMA_ISOLATION"] == "none"
    assert "CARMA_MEMORY_CAP_MIB" not in env and "XLA_CLIENT_MEM_FRACTION" not in env
    assert fence_from_env(env, 1) is None


def test_simulated_auto_is_live_and_explicit_modes_are_fixed() -> None:
    sim = HostIsolation("simulated")
    live = resolve(IsolationMode.AUTO, sim)
    assert live.live
    fence = fence_for(live, reservation_mib=8192, totals_mib=[40960], exclusive=False, margin_mib=2048)
    assert fence.live and fence.cap_mib == (40960,) and fence.promise_mib == (8192,)  # no margin: see fence_for
    assert not resolve(IsolationMode.FRAMEWORK, sim).live


def test_nvml_auto_prefers_mps_when_a_daemon_serves() -> None:
    assert resolve(IsolationMode.AUTO, NVML).mode is IsolationMode.FRAMEWORK
    assert resolve(IsolationMode.AUTO, HostIsolation("nvml", mps_daemon=True)).mode is IsolationMode.MPS


def test_missing_mechanisms_say_what_to_do() -> None:
    with pytest.raises(ConfigError, match="nvidia-cuda-mps-control -d"):
        resolve(IsolationMode.MPS, NVML)
    with pytest.raises(ConfigError, match="needs root"):
        resolve(IsolationMode.DRIVER, HostIsolation("nvml", driver_why="setting ... needs root"))
    assert resolve(IsolationMode.DRIVER, HostIsolation("nvml", driver_limits=True)).mode is IsolationMode.DRIVER


def test_mps_daemon_detected_by_its_control_pipe(tmp_path: Path) -> None:
    assert not mps_daemon_running({"CUDA_MPS_PIPE_DIRECTORY": str(tmp_path)})
    (tmp_path / "control").touch()
    assert mps_daemon_running({"CUDA_MPS_PIPE_DIRECTORY": str(tmp_path)})


def test_a_malformed_cap_is_not_enforced() -> None:
    assert (
        fence_from_env({"CARMA_ISOLATION": "framework", "CARMA_MEMORY_PROMISE_MIB": "x", "CARMA_MEMORY_CAP_MIB": "1"})
        is None
    )
    env = env_of(IsolationMode.FRAMEWORK)
    assert fence_from_env(env, 2) is None  # two GPUs visible, one cap: not this try's


def test_the_cli_line_names_the_mode_or_why_it_is_missing() -> None:
    from types import SimpleNamespace

    from carma_airflow.cli.ops import _isolation_line

    assert "unfenced" in _isolation_line(SimpleNamespace(isolation="none", gpu_backend="simulated"))
    assert "live caps" in _isolation_line(SimpleNamespace(isolation="auto", gpu_backend="simulated"))
    line = _isolation_line(SimpleNamespace(isolation="mps", gpu_backend="nvml"))
    assert "unavailable" in line and "nvidia-cuda-mps-control -d" in line
