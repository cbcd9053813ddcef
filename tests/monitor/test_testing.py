"""simulated_training: the synthetic GPU workload, in-process and end to end in subprocesses."""

from __future__ import annotations

import os
import re
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from monitor_helpers import A100_MIB, finish, start_training, wait_for

from carma_airflow.core import ActivityProfile, FailureKind, classify_failure, parse_gpu_list
from carma_airflow.monitor import SimulatedProbe
from carma_airflow.monitor.ledger import Ledger
from carma_airflow.testing import SimulatedCudaOOM, simulated_training

GPU0, GPU1 = "GPU-SIM-0000", "GPU-SIM-0001"
OOM_LINE = re.compile(
    r"^(?P<type>[\w.]+): (?P<msg>CUDA out of memory\. Tried to allocate [\d.]+ [MG]iB\. GPU 0 has a total capacity "
    r"of 40\.00 GiB of which [\d.]+ (MiB|bytes|KiB) is free\..*)$",
    re.MULTILINE,
)


# -- in-process: the errors a task sees ---------------------------------------------------------


def test_no_visible_gpu_is_a_cuda_error(monkeypatch: pytest.MonkeyPatch, ledger: Ledger) -> None:
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    with pytest.raises(RuntimeError, match=r"^CUDA error: no CUDA-capable device is detected$"):
        simulated_training(100, 0.1, ledger_path=str(ledger.path))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", " ")
    with pytest.raises(RuntimeError, match=r"^CUDA error: no CUDA-capable device is detected$"):
        simulated_training(100, 0.1, ledger_path=str(ledger.path))


def test_no_ledger_says_how_to_get_one(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", GPU0)
    monkeypatch.delenv("CARMA_SIM_LEDGER", raising=False)
    with pytest.raises(RuntimeError, match="CARMA_SIM_LEDGER"):
        simulated_training(100, 0.1)


def test_an_unknown_gpu_uuid_is_named(monkeypatch: pytest.MonkeyPatch, ledger: Ledger) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", f"{GPU0},GPU-SIM-0007")
    monkeypatch.setenv("CARMA_SIM_LEDGER", str(ledger.path))
    with pytest.raises(RuntimeError, match="GPU-SIM-0007"):
        simulated_training(100, 0.1)


def test_oom_on_a_full_gpu_is_classified_and_leaves_nothing_behind(
    monkeypatch: pytest.MonkeyPatch, ledger: Ledger, sleepers: Callable[[], int]
) -> None:
    ledger.allocate(sleepers(), GPU1, A100_MIB - 1500, ActivityProfile(0.3, 0.2, 0.1), "squatter")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", GPU1)
    monkeypatch.setenv("CARMA_SIM_LEDGER", str(ledger.path))
    with pytest.raises(SimulatedCudaOOM) as info:
        simulated_training(4000, 1.0, ramp_s=0.04)
    exc = info.value
    assert isinstance(exc, RuntimeError)
    assert str(exc).startswith(
        "CUDA out of memory. Tried to allocate 1000.00 MiB. GPU 0 has a total capacity of 40.00 GiB of which "
        "500.00 MiB is free. Including non-PyTorch memory, this process has 1000.00 MiB memory in use."
    )
    assert classify_failure(type(exc).__name__, str(exc)).kind is FailureKind.CUDA_OOM
    pid = os.getpid()
    assert not [a for a in ledger.allocations() if a.pid == pid]
    assert ledger.peak(pid) == 1000  # what it reached before the crash


def test_in_process_run_on_two_gpus_returns_its_figures(monkeypatch: pytest.MonkeyPatch, ledger: Ledger) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", f"{GPU0}, {GPU1}")
    result = simulated_training(2003, 0.2, ramp_s=0.08, ledger_path=str(ledger.path), step_s=0.05)
    assert result["peak_mib"] == 2003 and result["gpus"] == [GPU0, GPU1]
    assert result["slowdown"] == pytest.approx(1.0)
    assert 0.28 <= result["wall_s"] < 1.0
    assert ledger.allocations() == []
    assert ledger.peak(os.getpid()) == 2003


def test_a_training_ends_early_once_its_until_file_exists(
    monkeypatch: pytest.MonkeyPatch, ledger: Ledger, tmp_path: Path
) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", GPU0)
    release = tmp_path / "release"
    held: list[int] = []
    written: list[float] = []

    def release_later() -> None:  # the memory is held until the file appears
        time.sleep(0.3)
        held.append(sum(a.mib for a in ledger.allocations()))
        written.append(time.monotonic())
        release.write_text("")

    releaser = threading.Thread(target=release_later)
    releaser.start()
    result = simulated_training(1000, 60, ramp_s=0.05, ledger_path=str(ledger.path), step_s=0.02, until_file=release)
    ended = time.monotonic()
    releaser.join()
    assert held == [1000] and result["peak_mib"] == 1000
    # it ran until the file appeared (its own clock starts after the releaser's), and not the 60 s asked
    assert ended >= written[0] and result["wall_s"] < 5.0
    assert ledger.allocations() == []
    # a file there from the start: the ramp, then no training
    assert simulated_training(1000, 60, ramp_s=0.05, ledger_path=str(ledger.path), until_file=release)["wall_s"] < 5.0


# -- end to end in real subprocesses --------------------------------------------------------------


def test_a_training_subprocess_holds_memory_the_probe_sees(ledger: Ledger) -> None:
    probe = SimulatedProbe(ledger, parse_gpu_list("2xA100-40GB"))
    proc = start_training(ledger, GPU1, peak_mib=6000, seconds=1.2, activity=0.7, ramp_s=0.2)
    try:
        assert wait_for(lambda: probe.sample()[1].memory_used_mib == 6000), "memory never showed up"
        seen = probe.sample()[1]
        assert [(p.pid, p.used_mib) for p in seen.processes] == [(proc.pid, 6000)]
        assert seen.smact == pytest.approx(0.7)
        assert seen.smocc == pytest.approx(0.42) and seen.drama == pytest.approx(0.35)
        assert probe.sample()[0].memory_used_mib == 0
    finally:
        code, result, err = finish(proc)
    assert code == 0, err
    assert result is not None and result["peak_mib"] == 6000 and result["gpus"] == [GPU1]
    after = probe.sample()[1]
    assert after.memory_used_mib == 0 and after.processes == ()
    assert ledger.peak(proc.pid) == 6000


def test_a_training_subprocess_dies_with_a_pytorch_style_oom(ledger: Ledger, sleepers: Callable[[], int]) -> None:
    ledger.allocate(sleepers(), GPU0, A100_MIB - 3000, ActivityProfile(0.3, 0.2, 0.1), "squatter")
    proc = start_training(ledger, GPU0, peak_mib=8000, seconds=0.5, ramp_s=0.1)
    code, _, err = finish(proc)
    assert code == 1
    match = OOM_LINE.search(err)
    assert match, err
    assert match.group("type").endswith("SimulatedCudaOOM")
    assert classify_failure(match.group("type"), match.group("msg")).kind is FailureKind.CUDA_OOM
    assert proc.pid not in {a.pid for a in ledger.allocations()}
    assert ledger.peak(proc.pid) == 2000  # two 2000 MiB steps fitted, the third did not


def test_a_collocated_task_runs_longer(ledger: Ledger, sleepers: Callable[[], int]) -> None:
    alone = start_training(ledger, GPU0, peak_mib=1000, seconds=0.6, activity=0.8, ramp_s=0.05)
    code, solo, err = finish(alone)
    assert code == 0 and solo is not None, err
    # a co-tenant as busy as the task: the model slows both by 1.6 * (1 + 0.5 * 0.8) = 2.24
    ledger.allocate(sleepers(), GPU0, 1000, ActivityProfile(0.8, 0.48, 0.4), "co-tenant")
    shared = start_training(ledger, GPU0, peak_mib=1000, seconds=0.6, activity=0.8, ramp_s=0.05)
    code, both, err = finish(shared)
    assert code == 0 and both is not None, err
    assert solo["slowdown"] == pytest.approx(1.0)
    assert both["slowdown"] == pytest.approx(2.24, rel=0.02)
    # each run took at least its modelled time (the shared one 2.24x the solo one's 0.6 s): lower
    # bounds, which load cannot break (sleeps only run long); a ratio of the two walls failed beside
    # the e2e suite, where the solo run's wall grew more than the shared one's
    assert solo["wall_s"] >= 0.6 * 0.95  # type: ignore[operator]
    assert both["wall_s"] >= 0.6 * 2.24 * 0.95  # type: ignore[operator]
    assert both["train_s"] == pytest.approx(0.6 * 2.24, rel=0.1)


# -- make_workload: what a test or a benchmark hands an executor --------------------------------


def test_make_workload_is_one_unmapped_try_with_fresh_ids() -> None:
    from carma_airflow.testing import make_workload

    config = {"carma": {"memory": "4GiB"}}
    a = make_workload("fit", dag_id="train", run_id="r1", try_number=2, executor_config=config, bundle="d")
    b = make_workload("fit")
    assert (a.ti.dag_id, a.ti.task_id, a.ti.run_id, a.ti.try_number, a.ti.map_index) == ("train", "fit", "r1", 2, -1)
    assert a.ti.executor_config == config
    assert (str(a.dag_rel_path), a.bundle_info.name, a.token) == ("dag.py", "d", "t")
    assert (b.ti.dag_id, b.ti.run_id, b.ti.try_number, b.ti.executor_config) == ("dag", "run1", 1, None)
    assert a.ti.id != b.ti.id
    assert a.ti.dag_version_id != b.ti.dag_version_id
