"""A fenced try's environment (taskrun/fence_env.py, launching/taskenv.py) and the mode chosen
for a host (taskrun/isolation.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from carma_airflow.core.errors import ConfigError
from carma_airflow.core.fencing import CapRule, Fence, IsolationMode
from carma_airflow.launching import gpu_task_env
from carma_airflow.taskrun.fence_env import fence_from_env
from carma_airflow.taskrun.isolation import HostIsolation, Resolved, fence_for, mps_daemon_running, resolve

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


def test_simulated_gpus_resolve_as_a_host_without_mps_or_driver_limits() -> None:
    sim = HostIsolation("simulated")
    auto = resolve(IsolationMode.AUTO, sim)  # as on most real hosts: framework, fixed at the start
    assert auto.mode is IsolationMode.FRAMEWORK and not auto.live and auto.simulated
    fence = fence_for(auto, reservation_mib=8192, totals_mib=[40960], exclusive=False, margin_mib=2048)
    assert not fence.live and fence.cap_mib == fence.promise_mib == (10240,)  # no ledger re-check
    live = resolve(IsolationMode.AUTO, sim, CapRule.LIVE)  # PyTorch's fraction re-set from its cap file
    assert live.live and live.model.reset_s > 0
    # an MPS client reads its limit once; under live PyTorch's fraction moves beneath it
    assert resolve(IsolationMode.MPS, sim, CapRule.LIVE).live
    assert not resolve(IsolationMode.MPS, sim, CapRule.PROMISE).live
    assert resolve(IsolationMode.DRIVER, sim, CapRule.LIVE).live  # the executor re-sets the hard limit
    assert "fixed at the try's start" in auto.describe() and "re-set as co-tenants" in live.describe()


def test_each_gpu_gets_its_cap_from_its_own_co_tenants() -> None:
    fence = fence_for(
        FRAMEWORK,
        reservation_mib=8192,
        totals_mib=[40960, 40960],
        exclusive=False,
        margin_mib=2048,
        rule=CapRule.PROTECTIVE,
        reserve_mib=512,
        co_tenants_by_gpu=[[14336], [22528, 4096]],
    )
    assert fence.cap_mib == (40960 - 512 - 14336, 40960 - 512 - 22528 - 4096)
    with pytest.raises(ValueError, match="2 GPUs"):
        fence_for(
            FRAMEWORK, reservation_mib=1, totals_mib=[1, 1], exclusive=False, margin_mib=0, co_tenants_by_gpu=[[]]
        )


def test_the_cuda_context_is_taken_out_of_an_allocator_cap_not_a_driver_limit() -> None:
    def capped(resolved: Resolved) -> Fence:
        return fence_for(
            resolved, reservation_mib=8192, totals_mib=[15360], exclusive=False, margin_mib=2048, context_mib=[450]
        )

    framework = capped(FRAMEWORK)
    assert framework.promise_mib == (10240,) and framework.cap_mib == (10240 - 450,)
    assert capped(resolve(IsolationMode.MPS, HostIsolation("nvml", mps_daemon=True))).cap_mib == (10240 - 450,)
    driver = capped(resolve(IsolationMode.DRIVER, HostIsolation("nvml", driver_limits=True)))
    assert driver.cap_mib == (10240,)  # the cgroup's limit counts the context itself


def test_the_cuda_context_per_gpu_model() -> None:
    from carma_airflow.core.cuda_context import DEFAULT_CONTEXT_MIB, context_source, cuda_context_mib

    assert cuda_context_mib("T4") == cuda_context_mib("Tesla T4") == 450
    assert "KAI-Scheduler" in context_source("T4")
    assert cuda_context_mib("H100-80GB") == DEFAULT_CONTEXT_MIB and "assumed" in context_source("H100-80GB")
    # measured on the kit's first real GPU: NVML's name and the catalogue's name find the same figure
    assert cuda_context_mib("NVIDIA H200") == cuda_context_mib("H200-141GB") == 768
    assert context_source("NVIDIA H200").startswith("measured")
    assert cuda_context_mib("T4", simulated=True) == 0


def _line(env: dict[str, str]) -> str:
    from carma_airflow.taskrun.fence_env import describe_try_fence

    fence = fence_from_env(env)
    assert fence is not None
    return describe_try_fence(fence, env)


def test_the_try_log_says_the_mechanism_its_cap_per_gpu_and_whether_it_follows() -> None:
    sim = {"CARMA_SIM_LEDGER": "/l"}
    fixed = {**env_of(IsolationMode.FRAMEWORK, HostIsolation("simulated")), **sim, "CARMA_MEMORY_CAP_RULE": "promise"}
    assert _line(fixed) == (
        "capped at 10240 MiB per GPU (framework: PyTorch's fraction, played by the simulated GPUs' ledger; "
        "fixed at the try's start: its promise, 10240 MiB per GPU)"
    )
    two = env_of(
        IsolationMode.FRAMEWORK, totals_mib=[40960, 40960], rule=CapRule.PROTECTIVE, co_tenants_by_gpu=[[20480], []]
    )
    two.update({"CARMA_MEMORY_CAP_RULE": "protective", "CARMA_CUDA_CONTEXT_MIB": "500,500"})
    said = _line(two)
    assert said.startswith("capped at 20480 MiB, 40960 MiB per GPU (framework: PyTorch's fraction; fixed at")
    assert "the GPU less the co-tenants placed by then" in said and "CUDA context 500 MiB per GPU" in said
    live = env_of(IsolationMode.DRIVER, HostIsolation("simulated"), rule=CapRule.LIVE)
    live.update({**sim, "CARMA_SIM_DRIVER_LEAF": "ti-1", "CARMA_MEMORY_CAP_RULE": "live"})
    said = _line(live)
    assert "driver: its leaf's hard limit, which the simulated GPUs' ledger plays (no cgroup here)" in said
    assert "re-set as co-tenants come and go" in said and "NVML limit, hard" not in said
    real = env_of(IsolationMode.DRIVER, HostIsolation("nvml", driver_limits=True))
    assert "driver: its cgroup's NVML limit, hard" in _line(real)


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
    assert "framework, cap fixed at the try's start" in _isolation_line(
        SimpleNamespace(isolation="auto", gpu_backend="simulated")
    )
    live = _isolation_line(SimpleNamespace(isolation="auto", gpu_backend="simulated", isolation_cap="live"))
    assert "re-set as co-tenants come and go" in live
    line = _isolation_line(SimpleNamespace(isolation="mps", gpu_backend="nvml"))
    assert "unavailable" in line and "nvidia-cuda-mps-control -d" in line


def test_mps_live_pins_the_limit_at_start_and_starts_pytorch_beneath_it() -> None:
    """MPS under live: ``CUDA_MPS_PINNED_DEVICE_MEM_LIMIT`` is the GPU less the co-tenants then
    plus the margin (fixed: the client reads it once), PyTorch's fraction starts at the protective
    cap and follows the cap file; both less the CUDA context."""
    from carma_airflow.taskrun.fence_env import describe_try_fence, mps_limits_from_env

    mps = resolve(IsolationMode.MPS, HostIsolation("nvml", mps_daemon=True), CapRule.LIVE)
    fence = fence_for(
        mps, reservation_mib=8192, totals_mib=[40960, 40960], exclusive=False, margin_mib=2048, reserve_mib=512,
        co_tenants_by_gpu=[[12288], [30000]], context_mib=[500, 500],
    )  # fmt: skip
    assert fence.live and fence.promise_mib == (8192, 8192)  # a live promise: no margin
    protective = (40960 - 512 - 12288, 40960 - 512 - 30000)
    assert fence.cap_mib == (protective[0] - 500, protective[1] - 500)
    assert fence.fixed_mib == (protective[0] + 2048 - 500, protective[1] + 2048 - 500)
    env = gpu_task_env(["GPU-A", "GPU-B"], result_path="/r", placement="p", fence=fence)
    assert env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == f"0={fence.fixed_mib[0]}M,1={fence.fixed_mib[1]}M"
    assert env["CARMA_MEMORY_CAP_MIB"] == f"{fence.cap_mib[0]},{fence.cap_mib[1]}"
    assert mps_limits_from_env(env, 2) == fence.fixed_mib
    read = fence_from_env(env, 2)
    assert read is not None and read.live
    words = describe_try_fence(read, env)
    assert f"pinned limit fixed at the try's start at {fence.fixed_mib[0]} MiB, {fence.fixed_mib[1]} MiB" in words
    assert "PyTorch's fraction re-set live beneath it" in words
    # an exclusive try: its whole GPU, no MPS limit, nothing moves
    alone = fence_for(mps, reservation_mib=8192, totals_mib=[40960], exclusive=True, margin_mib=2048)
    assert not alone.live and alone.fixed_mib == () and alone.cap_mib == (40960,)


def test_mps_limits_from_env_reads_only_a_whole_well_formed_list() -> None:
    from carma_airflow.taskrun.fence_env import mps_limits_from_env

    assert mps_limits_from_env({"CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": "1=20M,0=10M"}, 2) == (10, 20)
    assert mps_limits_from_env({"CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": "0=10M"}, 2) is None  # a GPU missing
    assert mps_limits_from_env({"CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": "0=10G"}, 1) is None
    assert mps_limits_from_env({}, 1) is None
