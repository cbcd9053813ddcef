"""MPS pitfalls (executor/gpus/mps_guard.py, launching/local.py): a faulted MPS server is quarantined
for new placements until its daemon restarts or a timeout, its other clients are stopped for a
retry, and an MPS client gets a longer SIGTERM grace before SIGKILL."""

from __future__ import annotations

import signal
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from carma_airflow.core.gpu import GpuHealth, GpuState, gpu_spec
from carma_airflow.core.recovery import FailureKind, classify_failure
from carma_airflow.core.risk import MetricWindow
from carma_airflow.executor.gpus import MpsGuard, control_pipe_id, mps_fault_of
from carma_airflow.launching import KILL_GRACE_S, MPS_KILL_GRACE_S, kill_grace_s
from carma_airflow.launching import local as launch
from carma_airflow.taskrun.outcome import ResultState, TryResult

MPS_ERROR = "RuntimeError: CUDA error: CUDA_ERROR_MPS_CLIENT_TERMINATED"


class Handle:
    def __init__(self) -> None:
        self.killed = 0

    def kill(self) -> None:
        self.killed += 1


def a_try(key: str, *gpus: str) -> Any:
    return SimpleNamespace(rkey=key, gpu_uuids=gpus, fault=None, handle=Handle())


def failed(message: str) -> TryResult:
    kind = classify_failure("RuntimeError", message).kind
    return TryResult(ResultState.FAILED, failure=kind, message=message)


def gpus() -> tuple[GpuState, ...]:
    spec = gpu_spec("A100-40GB")
    return tuple(GpuState(f"G{i}", i, spec, spec.memory_mib, 0, MetricWindow()) for i in range(2))


class Server:
    def __init__(self) -> None:
        self.ident: object = ("inode", 1)

    def __call__(self) -> object:
        return self.ident


def test_mps_errors_are_gpu_faults_and_told_apart_from_other_faults() -> None:
    assert failed(MPS_ERROR).failure is FailureKind.GPU_FAULT
    assert mps_fault_of(failed(MPS_ERROR)) == "CUDA_ERROR_MPS_CLIENT_TERMINATED"
    assert mps_fault_of(failed("RuntimeError: GPU is lost")) is None  # a GPU fault, not MPS's
    assert mps_fault_of(TryResult(ResultState.FAILED, failure=FailureKind.OTHER, message=MPS_ERROR)) is None


def test_a_fault_quarantines_the_server_and_stops_the_other_clients() -> None:
    guard = MpsGuard(timeout_s=60, server_id=Server())
    faulty, neighbour, elsewhere = a_try("a", "G0"), a_try("b", "G0"), a_try("c", "G1")
    stopped = guard.after_end(faulty, failed(MPS_ERROR), [neighbour, elsewhere], now=100.0)
    assert stopped == [neighbour] and neighbour.handle.killed == 1 and elsewhere.handle.killed == 0
    assert "MPS server of GPU G0 faulted" in neighbour.fault and "CLIENT_TERMINATED" in neighbour.fault
    health = {g.uuid: g.health for g in guard.apply(gpus(), now=101.0)}
    assert health == {"G0": GpuHealth.QUARANTINED, "G1": GpuHealth.HEALTHY}
    # the neighbour then fails with its own MPS error: nobody is stopped twice
    assert guard.after_end(neighbour, failed(MPS_ERROR), [neighbour, elsewhere], now=102.0) == []
    assert neighbour.handle.killed == 1


def test_an_ordinary_failure_quarantines_nothing() -> None:
    guard = MpsGuard(server_id=Server())
    neighbour = a_try("b", "G0")
    assert guard.after_end(a_try("a", "G0"), failed("ValueError: bad input"), [neighbour], now=1.0) == []
    assert all(g.health is GpuHealth.HEALTHY for g in guard.apply(gpus(), now=2.0))


def test_the_quarantine_lifts_when_the_daemon_restarts_or_the_time_is_up() -> None:
    server = Server()
    guard = MpsGuard(timeout_s=60, server_id=server)
    guard.after_end(a_try("a", "G0"), failed(MPS_ERROR), [], now=0.0)
    assert guard.quarantined(30.0)
    server.ident = ("inode", 2)  # nvidia-cuda-mps-control -d again: a new control pipe
    assert not guard.quarantined(31.0)
    guard.after_end(a_try("a", "G0"), failed(MPS_ERROR), [], now=40.0)
    assert guard.quarantined(99.0) and not guard.quarantined(100.0)


def test_the_control_pipe_identity_changes_when_it_is_made_anew(tmp_path: Path) -> None:
    env = {"CUDA_MPS_PIPE_DIRECTORY": str(tmp_path)}
    assert control_pipe_id(env) is None
    (tmp_path / "control").write_text("")
    first = control_pipe_id(env)
    (tmp_path / "control").unlink()
    (tmp_path / "other").write_text("")  # keep the old inode taken
    (tmp_path / "control").write_text("")
    assert first is not None and control_pipe_id(env) != first


def test_an_mps_client_gets_sigterm_and_a_longer_wait_before_sigkill(monkeypatch: pytest.MonkeyPatch) -> None:
    assert kill_grace_s({"CARMA_ISOLATION": "mps"}) == MPS_KILL_GRACE_S > KILL_GRACE_S
    assert kill_grace_s({"CARMA_ISOLATION": "framework"}) == KILL_GRACE_S
    sent: list[signal.Signals] = []
    clock = [1000.0]
    monkeypatch.setattr(launch, "_signal_group", lambda pid, sig: sent.append(sig))
    monkeypatch.setattr("carma_airflow.launching.local.time.monotonic", lambda: clock[0])
    stop = launch._GroupStop(kill_grace_s({"CARMA_ISOLATION": "mps"}))
    stop.start(42)
    clock[0] += KILL_GRACE_S + 1  # a framework try would be killed by now; an MPS client is not
    stop.escalate(42)
    assert sent == [signal.SIGTERM]
    clock[0] += MPS_KILL_GRACE_S
    stop.escalate(42)
    assert sent == [signal.SIGTERM, signal.SIGKILL]
