"""A promise holds from placement on simulated GPUs (issue 22): the "load data, then allocate" pattern.

A grower declares 8 GiB and grows to 30 GiB; a neighbour declaring 20 GiB is placed beside it and
holds nothing yet (it loads data on the CPU), then allocates 12 GiB.  Whatever the order of
placement, under every mechanism the simulated GPUs play (framework fixed, framework live,
driver live, MPS fixed, MPS live), the grower is the one stopped, the OOM names it, and the neighbour gets its 12
GiB.  Each try is held as its real mechanism would hold it: the executor's own TryStarter sets
its fence, cap file or driver limits, the try reads them (taskrun/live_cap.py SimulatedCaps),
and the ledger enforces only what the mechanism set.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from carma_airflow.config.settings import CarmaSettings
from carma_airflow.core.decision import Decision, GpuVerdict, Outcome
from carma_airflow.core.gpu import gpu_spec
from carma_airflow.core.recovery import FailureKind, classify_failure
from carma_airflow.core.sharing import ActivityProfile
from carma_airflow.core.task import MemoryNeed, TaskRequest
from carma_airflow.executor.starting import TryStarter
from carma_airflow.monitor.ledger import Ledger, SimulatedCudaOOM, sim_uuid
from carma_airflow.taskrun.fence_env import fence_from_env
from carma_airflow.taskrun.live_cap import SimulatedCaps

P = ActivityProfile(0.5, 0.3, 0.25)
GPU = sim_uuid(0)
GIB = 1024


def attempt(key: str, mib: int) -> Any:
    request = TaskRequest(key, key, MemoryNeed(mib, "declared"))
    ti = SimpleNamespace(id=key, try_number=1, executor_config=None, dag_id="d", task_id=key, run_id="r", map_index=-1)
    config = SimpleNamespace(isolation=None)
    return SimpleNamespace(
        rkey=key, key=key, ti=ti, request=request, config=config, prior_ooms=0, taken_at=0.0, last_summary=""
    )


class Host:
    """One simulated A100-40GB, the executor's starter and its book of placements."""

    def __init__(self, tmp_path: Path, **options: str) -> None:
        self.ledger = Ledger(tmp_path / "ledger.json")
        self.ledger.init([gpu_spec("A100-40GB")])
        values = {"gpu_backend": "simulated", "state_dir": str(tmp_path), **options}
        self.starter = TryStarter(
            CarmaSettings.load(values.get, str(tmp_path)),
            None,  # type: ignore[arg-type]
            lambda ti: "",
            self.ledger.path,
        )
        self.placed: dict[str, int] = {}
        self.starter.co_tenants = lambda uuid, key: [mib for k, mib in self.placed.items() if k != key]
        self.caps: list[SimulatedCaps] = []

    def place(self, key: str, mib: int) -> tuple[dict[str, str], SimulatedCaps]:
        """The placer reserves it, the starter makes its environment; its process reads its fence."""
        self.placed[key] = mib
        verdict = GpuVerdict(GPU, 0, "A100-40GB", None, "ok")
        env = self.starter.placed_env(attempt(key, mib), Decision(key, Outcome.PLACED, (GPU,), (verdict,)))
        fence = fence_from_env(env, 1)
        assert fence is not None
        caps = SimulatedCaps(fence, env, period_s=0.05)
        self.caps.append(caps)
        return env, caps

    def allocate(self, pid: int, label: str, env: dict[str, str], caps: SimulatedCaps, mib: int) -> None:
        cap = caps.cap_mib(0)
        promise = int(env["CARMA_MEMORY_PROMISE_MIB"]) if cap is not None else None
        self.ledger.allocate(
            pid, GPU, mib, P, label, promise_mib=promise, cap_mib=cap, leaf=caps.leaf, held_by=caps.held_by_on(0)
        )

    def close(self) -> None:
        for caps in self.caps:
            caps.stop()


def settle(caps: SimulatedCaps, timeout_s: float = 10.0) -> None:
    """Wait until a live try's follower has read its cap file as the executor last wrote it."""
    follower = caps.follower
    if follower is None:
        return
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        follower.check()  # what its thread does once a period (the test does not wait for the period)
        if follower.last is not None and tuple(caps.current) == follower.last:
            return
        time.sleep(0.01)


MECHANISMS = [
    pytest.param(
        {"isolation": "auto", "isolation_cap": "promise"},
        "framework cap, fixed at the try's start",
        id="framework-promise",
    ),
    pytest.param({"isolation": "auto"}, "re-set as co-tenants", id="auto-default"),
    pytest.param({"isolation": "framework", "isolation_cap": "live"}, "re-set as co-tenants", id="framework-live"),
    pytest.param({"isolation": "driver", "isolation_cap": "live"}, "driver's hard limit", id="driver-live"),
    pytest.param({"isolation": "mps", "isolation_cap": "promise"}, "MPS's pinned memory limit", id="mps-promise"),
    # MPS live: the pinned limit fixed at start (+ margin) is above the cap here; PyTorch's live fraction stops it
    pytest.param({"isolation": "mps"}, "PyTorch's fraction, re-set as co-tenants come and go", id="mps-live"),
]


@pytest.mark.parametrize("grower_first", [True, False], ids=["grower-first", "neighbour-first"])
@pytest.mark.parametrize(("options", "held_by"), MECHANISMS)
def test_the_grower_is_stopped_and_the_loading_neighbour_gets_its_memory(
    tmp_path: Path, options: dict[str, str], held_by: str, grower_first: bool
) -> None:
    host = Host(tmp_path, **options)
    grower_pid, neighbour_pid = os.getpid(), os.getppid()  # both alive for the test's length
    try:
        if grower_first:
            grower_env, grower = host.place("grower", 8 * GIB)
            host.allocate(grower_pid, "d.grower", grower_env, grower, 8 * GIB)
            neighbour_env, neighbour = host.place("neighbour", 20 * GIB)  # placed 2 s later, on the CPU for 15 s
        else:
            neighbour_env, neighbour = host.place("neighbour", 20 * GIB)  # placed first, still loading data
            grower_env, grower = host.place("grower", 8 * GIB)
            host.allocate(grower_pid, "d.grower", grower_env, grower, 8 * GIB)
        settle(grower)  # a live framework cap: the follower's re-read (its exposure window) has passed
        assert host.ledger.state().on(GPU)[0].mib == 8 * GIB  # the neighbour holds nothing yet
        with pytest.raises(SimulatedCudaOOM) as err:
            host.allocate(grower_pid, "d.grower", grower_env, grower, 22 * GIB)  # 8 -> 30 GiB
        message = str(err.value)
        assert "this try (d.grower) is past its cap" in message and held_by in message
        assert classify_failure("SimulatedCudaOOM", message).kind is FailureKind.CAP_OOM
        host.allocate(neighbour_pid, "d.neighbour", neighbour_env, neighbour, 12 * GIB)  # within its 20 GiB
        assert sum(a.mib for a in host.ledger.state().on(GPU)) == 20 * GIB
    finally:
        host.close()


def test_unfenced_the_loading_neighbour_is_the_one_that_crashes(tmp_path: Path) -> None:
    """The same pattern without a fence: the test above can fail."""
    host = Host(tmp_path, isolation="none")
    grower_pid, neighbour_pid = os.getpid(), os.getppid()
    host.placed.update(grower=8 * GIB, neighbour=20 * GIB)
    host.ledger.allocate(grower_pid, GPU, 30 * GIB, P, "d.grower")
    with pytest.raises(SimulatedCudaOOM) as err:
        host.ledger.allocate(neighbour_pid, GPU, 12 * GIB, P, "d.neighbour")
    assert "past its cap" not in str(err.value)


def test_a_protective_cap_fixed_at_start_cannot_protect_a_later_neighbour(tmp_path: Path) -> None:
    """What ``isolation_cap = protective`` is on a mechanism set once (MPS): the grower placed first
    was capped before the neighbour existed, and no real MPS client re-reads its limit."""
    host = Host(tmp_path, isolation="mps", isolation_cap="protective")
    grower_pid, neighbour_pid = os.getpid(), os.getppid()
    grower_env, grower = host.place("grower", 8 * GIB)
    host.place("neighbour", 20 * GIB)
    assert grower.cap_mib(0) == 40960 - 512  # the GPU less the reserve: nobody else was there
    host.allocate(grower_pid, "d.grower", grower_env, grower, 30 * GIB)
    with pytest.raises(SimulatedCudaOOM) as err:  # the GPU is full: a plain OOM in the neighbour
        host.ledger.allocate(neighbour_pid, GPU, 12 * GIB, P, "d.neighbour")
    assert "past its cap" not in str(err.value)


def test_a_leafs_hard_limit_counts_all_its_processes(tmp_path: Path) -> None:
    ledger = Ledger(tmp_path / "ledger.json")
    ledger.init([gpu_spec("A100-40GB")])
    ledger.set_limits("ti-1", {GPU: (10 * GIB, 12 * GIB)})
    ledger.allocate(os.getpid(), GPU, 8 * GIB, P, "d.t", leaf="ti-1")
    with pytest.raises(SimulatedCudaOOM) as err:  # its child in the same leaf: 8 + 6 > 12
        ledger.allocate(os.getppid(), GPU, 6 * GIB, P, "d.t", leaf="ti-1")
    assert err.value.cap_mib == 12 * GIB and "past its cap" in str(err.value)
    ledger.allocate(os.getppid(), GPU, 4 * GIB, P, "d.t", leaf="ti-1")
    ledger.drop_limits(["ti-1"])  # the try ended: its leaf's limits go
    assert ledger.limits() == {}


def test_mps_live_a_grower_whose_co_tenant_left_grows_and_a_later_neighbour_keeps_its_promise(
    tmp_path: Path,
) -> None:
    """MPS under the default ``live``: the pinned limit is fixed at the grower's start beside a
    12 GiB co-tenant (the GPU less the reserve and it, plus the margin) and PyTorch's fraction,
    re-set from the cap file, moves beneath it.  The co-tenant leaves: the grower grows past its
    reservation and margin (10 GiB, where ``promise`` stopped it); a neighbour placed later is kept
    its 20 GiB by the live fraction, which the pinned limit alone could not."""
    host = Host(tmp_path, isolation="mps")
    grower_pid, neighbour_pid = os.getpid(), os.getppid()
    try:
        host.place("short", 12 * GIB)
        grower_env, grower = host.place("grower", 8 * GIB)
        pinned = 40960 - 512 - 12 * GIB + 2048
        assert grower_env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == f"0={pinned}M"  # simulated GPUs: no CUDA context
        assert grower_env["CARMA_MEMORY_CAP_MIB"] == str(40960 - 512 - 12 * GIB)  # PyTorch's, at the start
        assert grower_env["CARMA_MEMORY_CAP_LIVE"] == "1" and "CARMA_MEMORY_CAP_FILE" in grower_env
        said = host.starter.fence_reasons("grower")[0]
        assert f"pinned limit fixed at the try's start at {pinned} MiB per GPU" in said
        assert "PyTorch's fraction re-set live beneath it" in said
        host.allocate(grower_pid, "d.grower", grower_env, grower, 8 * GIB)
        del host.placed["short"]  # the co-tenant ended: the executor re-sets the caps of those left
        host.starter.refresh_caps(["grower"])
        settle(grower)
        host.allocate(grower_pid, "d.grower", grower_env, grower, 8 * GIB)  # 16 GiB: past 8 + 2
        with pytest.raises(SimulatedCudaOOM) as fixed:  # 30 GiB: past the pinned limit, which stays
            host.allocate(grower_pid, "d.grower", grower_env, grower, 14 * GIB)
        assert f"MPS's pinned memory limit, set at the client's start at {pinned} MiB" in str(fixed.value)
        neighbour_env, neighbour = host.place("neighbour", 20 * GIB)  # placed later, loading data
        settle(grower)
        with pytest.raises(SimulatedCudaOOM) as live:  # 20 GiB: into the neighbour's promise
            host.allocate(grower_pid, "d.grower", grower_env, grower, 4 * GIB)
        message = str(live.value)
        assert "this try (d.grower) is past its cap" in message and "PyTorch's fraction, re-set" in message
        host.allocate(neighbour_pid, "d.neighbour", neighbour_env, neighbour, 20 * GIB)  # its whole promise
        assert sum(a.mib for a in host.ledger.state().on(GPU)) == 36 * GIB
    finally:
        host.close()
