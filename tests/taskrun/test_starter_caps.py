"""The executor's side of the caps (executor/starting/starter.py): each placed try's fence in its
environment, each GPU's cap from that GPU's co-tenants, ``isolation_cap = live`` keeping a
PyTorch try's cap file current from the moment a co-tenant is placed, the driver's limits on
simulated GPUs, the CUDA context counted, and the line that says so in the scheduler's log."""

from __future__ import annotations

import logging
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from carma_airflow.config.settings import CarmaSettings
from carma_airflow.core.cuda_context import DEFAULT_CONTEXT_MIB
from carma_airflow.core.decision import Decision, GpuVerdict, Outcome
from carma_airflow.core.gpu import gpu_spec
from carma_airflow.core.task import MemoryNeed, TaskRequest
from carma_airflow.executor.starting import TryStarter
from carma_airflow.monitor.ledger import Ledger, sim_uuid
from carma_airflow.taskrun.live_cap import read_caps

GPU = "GPU-11111111-2222-3333-4444-555555555555"
GPU_B = "GPU-66666666-2222-3333-4444-555555555555"
CONTEXT = DEFAULT_CONTEXT_MIB  # an A100's CUDA context as core/cuda_context.py counts it (assumed, not measured)


def starter(tmp_path: Path, **options: str) -> TryStarter:
    values = {"gpu_backend": "nvml", "state_dir": str(tmp_path), **options}
    settings = CarmaSettings.load(values.get, str(tmp_path))
    return TryStarter(settings, None, lambda ti: "", tmp_path / "ledger.json")  # type: ignore[arg-type]


def attempt(key: str, mib: int, isolation: str | None = None) -> Any:
    request = TaskRequest(key, key, MemoryNeed(mib, "declared"))
    ti = SimpleNamespace(
        id=key.replace("/", "-"), try_number=1, executor_config=None, dag_id="d", task_id=key, run_id="r", map_index=-1
    )
    config = SimpleNamespace(isolation=isolation)
    return SimpleNamespace(
        rkey=key, key=key, ti=ti, request=request, config=config, prior_ooms=0, taken_at=0.0, last_summary=""
    )


def decision(*uuids: str) -> Decision:
    verdicts = tuple(GpuVerdict(u, i, "A100-40GB", None, "ok") for i, u in enumerate(uuids))
    return Decision("k", Outcome.PLACED, tuple(uuids), verdicts, summary="placed on GPU 0")


DECISION = decision(GPU)


def test_a_placed_try_carries_its_cap_and_a_task_can_opt_out(tmp_path: Path) -> None:
    s = starter(tmp_path, isolation="framework")
    env = s.placed_env(attempt("a", 8192), DECISION)
    # its promise is what the GPU counts (context included); PyTorch's allocator gets the promise
    # less the CUDA context it cannot see
    assert env["CARMA_ISOLATION"] == "framework" and env["CARMA_MEMORY_PROMISE_MIB"] == "10240"
    assert env["CARMA_MEMORY_CAP_MIB"] == str(10240 - CONTEXT) and env["CARMA_CUDA_CONTEXT_MIB"] == str(CONTEXT)
    assert env["XLA_CLIENT_MEM_FRACTION"] == f"{(10240 - CONTEXT) / 40960:.4f}"
    assert env["CARMA_MEMORY_CAP_RULE"] == "promise" and env["CARMA_MEMORY_CAP_LIVE"] == "0"
    assert "CARMA_MEMORY_CAP_FILE" not in env  # isolation_cap = promise: fixed
    env = s.placed_env(attempt("b", 8192, isolation="none"), DECISION)
    assert env["CARMA_ISOLATION"] == "none" and "CARMA_MEMORY_CAP_MIB" not in env


def test_live_caps_follow_the_co_tenants(tmp_path: Path) -> None:
    s = starter(tmp_path, isolation="framework", isolation_cap="live")
    tenants: dict[str, list[int]] = {"a": []}
    s.co_tenants = lambda uuid, key: [mib for k, mibs in tenants.items() if k != key for mib in mibs]
    env = s.placed_env(attempt("a", 8192), DECISION)
    path = env["CARMA_MEMORY_CAP_FILE"]
    alone = 40960 - 512 - CONTEXT  # the GPU less the reserve, the allocator's share
    assert read_caps(path) == (alone,) and env["CARMA_MEMORY_CAP_MIB"] == str(alone)
    assert env["CARMA_MEMORY_CAP_LIVE"] == "1"
    tenants["b"] = [12288]  # a 12 GiB try placed beside it
    s.refresh_caps(["a", "b"])
    assert read_caps(path) == (alone - 12288,)  # a live promise carries no margin (FenceModel.margin_mib)
    del tenants["b"]
    s.refresh_caps(["a"])
    assert read_caps(path) == (alone,)
    s.refresh_caps([])  # it ended: its file goes
    assert not Path(path).exists()


def test_a_newcomers_promise_tightens_live_caps_when_it_is_placed(tmp_path: Path) -> None:
    """The promise holds from placement: the running try's cap file counts the newcomer before
    the next heartbeat and before the newcomer's process has touched the GPU."""
    s = starter(tmp_path, isolation="framework", isolation_cap="live")
    placed: dict[str, int] = {}
    s.co_tenants = lambda uuid, key: [mib for k, mib in placed.items() if k != key]
    placed["grower"] = 8192
    path = s.placed_env(attempt("grower", 8192), DECISION)["CARMA_MEMORY_CAP_FILE"]
    placed["neighbour"] = 20480  # the placer reserved it; its process will load data for a while
    s.placed_env(attempt("neighbour", 20480), DECISION)
    assert read_caps(path) == (40960 - 512 - 20480 - CONTEXT,)  # no refresh_caps call needed
    other = s.placed_env(attempt("elsewhere", 1024), decision(GPU_B))  # another GPU: leaves it alone
    assert read_caps(other["CARMA_MEMORY_CAP_FILE"]) is not None and read_caps(path) == (40960 - 512 - 20480 - CONTEXT,)


@pytest.mark.parametrize("rule", ["protective", "live"])
def test_a_multi_gpu_try_gets_each_gpus_cap_from_that_gpus_co_tenants(tmp_path: Path, rule: str) -> None:
    s = starter(tmp_path, isolation="framework", isolation_cap=rule)
    beside = {GPU: [20480], GPU_B: [4096]}
    s.co_tenants = lambda uuid, key: beside[uuid] if key == "wide" else []
    env = s.placed_env(attempt("wide", 8192), decision(GPU, GPU_B))
    caps = tuple(int(c) for c in env["CARMA_MEMORY_CAP_MIB"].split(","))
    margin = 2048 if rule == "protective" else 0  # a fixed cap's promises carry the margin, live ones none
    assert caps == (40960 - 512 - 20480 - margin - CONTEXT, 40960 - 512 - 4096 - margin - CONTEXT)
    if rule == "live":
        assert read_caps(env["CARMA_MEMORY_CAP_FILE"]) == caps
        beside[GPU_B] = []  # GPU 1's co-tenant left; GPU 0's did not
        s.refresh_caps(["wide"])
        assert read_caps(env["CARMA_MEMORY_CAP_FILE"]) == (caps[0], 40960 - 512 - CONTEXT)


def test_the_try_record_gets_its_own_fence_per_gpu(tmp_path: Path) -> None:
    """The fence a try started under goes into its placement record (``carma why``, the UI), once."""
    from carma_airflow.core.fencing import FENCE_REASON, fence_line

    s = starter(tmp_path, isolation="framework", isolation_cap="live")
    beside = {GPU: [20480], GPU_B: []}
    s.co_tenants = lambda uuid, key: beside[uuid] if key == "wide" else []
    s.placed_env(attempt("wide", 8192), decision(GPU, GPU_B))
    reasons = s.fence_reasons("wide")
    line = fence_line(reasons)
    assert len(reasons) == 1 and reasons[0].startswith(FENCE_REASON) and line is not None
    caps = (40960 - 512 - 20480 - CONTEXT, 40960 - 512 - CONTEXT)
    assert (
        line.startswith(f"capped at {caps[0]} MiB, {caps[1]} MiB per GPU (framework") and "re-set as co-tenants" in line
    )
    assert s.fence_reasons("wide") == []  # asked once, when the try starts
    unfenced = starter(tmp_path, isolation="none")
    unfenced.placed_env(attempt("free", 8192), DECISION)
    assert unfenced.fence_reasons("free") == []


def test_live_without_the_tenant_hook_falls_back_to_the_promise(tmp_path: Path) -> None:
    s = starter(tmp_path, isolation="framework", isolation_cap="live")
    env = s.placed_env(attempt("a", 8192), DECISION)
    assert env["CARMA_MEMORY_CAP_MIB"] == str(10240 - CONTEXT) and "CARMA_MEMORY_CAP_FILE" not in env
    assert env["CARMA_MEMORY_CAP_RULE"] == "promise"


def sim_starter(tmp_path: Path, **options: str) -> tuple[TryStarter, Ledger]:
    ledger = Ledger(tmp_path / "ledger.json")
    ledger.init([gpu_spec("A100-40GB")])
    return starter(tmp_path, gpu_backend="simulated", **options), ledger


def test_simulated_driver_limits_live_in_the_ledger_and_follow_placements(tmp_path: Path) -> None:
    s, ledger = sim_starter(tmp_path, isolation="driver", isolation_cap="live")
    placed: dict[str, int] = {}
    s.co_tenants = lambda uuid, key: [mib for k, mib in placed.items() if k != key]
    gpu = sim_uuid(0)
    placed["grower"] = 8192
    env = s.placed_env(attempt("grower", 8192), decision(gpu))
    assert env["CARMA_SIM_DRIVER_LEAF"] == "grower" and "CARMA_CGROUP_LEAF" not in env
    assert env["CARMA_CUDA_CONTEXT_MIB"] == "0"  # simulated GPUs hold no CUDA context
    assert ledger.limits() == {"grower": {gpu: (8192, 40960 - 512)}}  # soft = promise (live: no margin), hard = cap
    placed["neighbour"] = 20480
    s.placed_env(attempt("neighbour", 20480), decision(gpu))
    assert ledger.limits()["grower"] == {gpu: (8192, 40960 - 512 - 20480)}  # tightened at its placement
    del placed["neighbour"]
    s.refresh_caps(["grower"])
    assert set(ledger.limits()) == {"grower"} and ledger.limits()["grower"][gpu][1] == 40960 - 512
    s.refresh_caps([])
    assert ledger.limits() == {}


def test_the_scheduler_log_says_the_fence_in_force(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    s, _ = sim_starter(tmp_path, isolation="auto")
    with caplog.at_level(logging.INFO, logger="carma_airflow.executor"):
        s.placed_env(attempt("grower", 8192), decision(sim_uuid(0)))
    said = [r.getMessage() for r in caplog.records if "memory:" in r.getMessage()]
    assert said == [
        "Task grower memory: capped at 10240 MiB per GPU (framework: PyTorch's fraction, played by the simulated "
        "GPUs' ledger; fixed at the try's start: its promise, 10240 MiB per GPU)"
    ]
    s, _ = sim_starter(tmp_path / "driver", isolation="driver")
    with caplog.at_level(logging.INFO, logger="carma_airflow.executor"):
        s.placed_env(attempt("d", 8192), decision(sim_uuid(0)))
    assert "the simulated GPUs' ledger plays (no cgroup here)" in caplog.records[-1].getMessage()


def test_the_placer_keeps_each_tenants_promise_under_its_own_fence(tmp_path: Path) -> None:
    """What the executor's placer keeps above a tenant's reservation for its life (the simulator's
    rule, core/facts.py), by the mode the try asks (else the host's) with the host's cap rule:
    nothing more under a live cap, the margin under a cap fixed at start, and no promise at all
    unfenced or when the mode cannot start on this host."""
    assert starter(tmp_path, isolation="framework").kept_margin_mib() == 0  # the default rule: live
    fixed = starter(tmp_path, isolation="framework", isolation_cap="promise", isolation_margin_mib="1536")
    assert fixed.kept_margin_mib() == 1536
    assert fixed.kept_margin_mib("none") is None  # a try asking none is not fenced: no promise kept
    assert starter(tmp_path, isolation="none").kept_margin_mib() is None
    unfenced = starter(tmp_path, isolation="none", isolation_cap="promise", isolation_margin_mib="1536")
    assert unfenced.kept_margin_mib("framework") == 1536  # a try asking a fence is kept its promise
    assert unfenced.kept_margin_mib("auto") == 1536  # auto here: framework
    assert starter(tmp_path, isolation="mps").kept_margin_mib() is None  # no MPS daemon here: refused
    assert unfenced.kept_margin_mib("mps") is None
