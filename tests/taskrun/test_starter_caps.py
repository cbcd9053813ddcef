"""The executor's side of the caps (executor/starter.py): each placed try's fence in its
environment, and ``isolation_cap = live`` keeping a PyTorch try's cap file current."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

from carma_airflow.core.decision import Decision, GpuVerdict, Outcome
from carma_airflow.core.task import MemoryNeed, TaskRequest
from carma_airflow.executor.starter import TryStarter
from carma_airflow.settings import CarmaSettings
from carma_airflow.taskrun.live_cap import read_caps

GPU = "GPU-11111111-2222-3333-4444-555555555555"


def starter(tmp_path: Path, **options: str) -> TryStarter:
    values = {"gpu_backend": "nvml", "state_dir": str(tmp_path), **options}
    settings = CarmaSettings.load(values.get, str(tmp_path))
    return TryStarter(settings, None, lambda ti: "", tmp_path / "ledger.json")  # type: ignore[arg-type]


def attempt(key: str, mib: int, isolation: str | None = None) -> Any:
    request = TaskRequest(key, key, MemoryNeed(mib, "declared"))
    ti = SimpleNamespace(id=key.replace("/", "-"), try_number=1, executor_config=None)
    config = SimpleNamespace(isolation=isolation)
    return SimpleNamespace(rkey=key, ti=ti, request=request, config=config, prior_ooms=0, taken_at=0.0, last_summary="")


DECISION = Decision(
    "k", Outcome.PLACED, (GPU,), (GpuVerdict(GPU, 0, "A100-40GB", None, "ok"),), summary="placed on GPU 0"
)


def test_a_placed_try_carries_its_cap_and_a_task_can_opt_out(tmp_path: Path) -> None:
    s = starter(tmp_path, isolation="framework")
    env = s.placed_env(attempt("a", 8192), DECISION)
    assert env["CARMA_ISOLATION"] == "framework" and env["CARMA_MEMORY_CAP_MIB"] == "10240"
    assert env["XLA_CLIENT_MEM_FRACTION"] == "0.2500"
    assert "CARMA_MEMORY_CAP_FILE" not in env  # isolation_cap = promise: fixed
    env = s.placed_env(attempt("b", 8192, isolation="none"), DECISION)
    assert env["CARMA_ISOLATION"] == "none" and "CARMA_MEMORY_CAP_MIB" not in env


def test_live_caps_follow_the_co_tenants(tmp_path: Path) -> None:
    s = starter(tmp_path, isolation="framework", isolation_cap="live")
    tenants: dict[str, list[int]] = {"a": []}
    s.co_tenants = lambda uuid, key: [mib for k, mibs in tenants.items() if k != key for mib in mibs]
    env = s.placed_env(attempt("a", 8192), DECISION)
    path = env["CARMA_MEMORY_CAP_FILE"]
    assert (
        read_caps(path) == (40960 - 512,) and env["CARMA_MEMORY_CAP_MIB"] == "40448"
    )  # alone: the GPU less the reserve
    tenants["b"] = [12288]  # a 12 GiB try placed beside it
    s.refresh_caps(["a", "b"])
    assert read_caps(path) == (40960 - 512 - 12288 - 2048,)
    del tenants["b"]
    s.refresh_caps(["a"])
    assert read_caps(path) == (40960 - 512,)
    s.refresh_caps([])  # it ended: its file goes
    assert not Path(path).exists()


def test_live_without_the_tenant_hook_falls_back_to_the_promise(tmp_path: Path) -> None:
    s = starter(tmp_path, isolation="framework", isolation_cap="live")
    env = s.placed_env(attempt("a", 8192), DECISION)
    assert env["CARMA_MEMORY_CAP_MIB"] == "10240" and "CARMA_MEMORY_CAP_FILE" not in env
