"""The simulated GPU ledger: set-up, allocation, OOM, peaks, dead processes, real concurrency."""

from __future__ import annotations

import multiprocessing
import os
import re
import signal
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from monitor_helpers import A100_MIB, REPO, wait_for

from carma_airflow.core import ActivityProfile, FailureKind, classify_failure, gpu_spec, parse_gpu_list
from carma_airflow.monitor.ledger import (
    PEAK_KEEP_S,
    Ledger,
    LedgerError,
    SimulatedCudaOOM,
    format_size,
    pid_alive,
)

PROFILE = ActivityProfile(0.5, 0.3, 0.25)
GPU0, GPU1 = "GPU-SIM-0000", "GPU-SIM-0001"


def used_on(ledger: Ledger, uuid: str) -> int:
    return sum(a.mib for a in ledger.allocations() if a.uuid == uuid)


# -- set-up -----------------------------------------------------------------------------------


def test_init_creates_parent_dirs_and_names_gpus(tmp_path: Path) -> None:
    led = Ledger(tmp_path / "a" / "b" / "ledger.json")
    led.init(parse_gpu_list("2xA100-40GB,1xH100-80GB"))
    assert led.path.exists()
    gpus = led.gpus()
    assert [(u, i) for u, i, _ in gpus] == [("GPU-SIM-0000", 0), ("GPU-SIM-0001", 1), ("GPU-SIM-0002", 2)]
    assert gpus[2].spec == gpu_spec("H100-80GB")


def test_init_is_idempotent_for_the_same_gpus_and_resets_otherwise(ledger: Ledger) -> None:
    ledger.allocate(os.getpid(), GPU0, 1000, PROFILE, "t")
    ledger.init(parse_gpu_list("2xA100-40GB"))
    assert used_on(ledger, GPU0) == 1000
    ledger.init(parse_gpu_list("2xA100-40GB"), host="other")
    assert ledger.allocations() == []
    ledger.allocate(os.getpid(), GPU0, 1000, PROFILE, "t")
    ledger.init(parse_gpu_list("3xA100-40GB"), host="other")
    assert ledger.allocations() == []
    assert len(ledger.gpus()) == 3


def test_missing_ledger_says_what_to_do(tmp_path: Path) -> None:
    with pytest.raises(LedgerError, match="gpu_backend = simulated"):
        Ledger(tmp_path / "none.json").gpus()


def test_unknown_gpu_and_negative_amount_are_refused(ledger: Ledger) -> None:
    with pytest.raises(LedgerError, match="GPU-SIM-0000, GPU-SIM-0001"):
        ledger.allocate(os.getpid(), "GPU-SIM-0009", 1, PROFILE, "t")
    with pytest.raises(LedgerError, match="negative"):
        ledger.allocate(os.getpid(), GPU0, -1, PROFILE, "t")


# -- allocation and OOM -------------------------------------------------------------------------


def test_allocations_of_one_process_add_up_per_gpu(ledger: Ledger) -> None:
    pid = os.getpid()
    ledger.allocate(pid, GPU0, 1000, PROFILE, "t")
    ledger.allocate(pid, GPU0, 500, ActivityProfile(0.7, 0.4, 0.3), "t2")
    ledger.allocate(pid, GPU1, 200, PROFILE, "t")
    allocs = {a.uuid: a for a in ledger.allocations()}
    assert allocs[GPU0].mib == 1500 and allocs[GPU0].profile.sm_activity == 0.7 and allocs[GPU0].label == "t2"
    assert allocs[GPU1].mib == 200
    ledger.release(pid)
    assert ledger.allocations() == []


def test_oom_when_the_gpu_is_full_reads_like_pytorch_and_classifies_as_cuda_oom(ledger: Ledger) -> None:
    pid = os.getpid()
    ledger.allocate(pid, GPU1, A100_MIB - 100, PROFILE, "t")
    with pytest.raises(SimulatedCudaOOM) as info:
        ledger.allocate(pid, GPU1, 170, PROFILE, "t", ordinal=0)
    exc = info.value
    assert isinstance(exc, RuntimeError)
    assert str(exc).startswith(
        "CUDA out of memory. Tried to allocate 170.00 MiB. GPU 0 has a total capacity of 40.00 GiB "
        "of which 100.00 MiB is free. Including non-PyTorch memory, this process has 39.90 GiB memory in use."
    )
    assert (exc.uuid, exc.tried_mib, exc.free_mib, exc.total_mib) == (GPU1, 170, 100, A100_MIB)
    failure = classify_failure(type(exc).__name__, str(exc))
    assert failure.kind is FailureKind.CUDA_OOM
    # the message alone is enough too (e.g. when only the log line survives)
    assert classify_failure("RuntimeError", str(exc)).kind is FailureKind.CUDA_OOM
    assert used_on(ledger, GPU1) == A100_MIB - 100  # nothing half-allocated
    ledger.allocate(pid, GPU1, 100, PROFILE, "t")  # exactly full is fine
    assert used_on(ledger, GPU1) == A100_MIB


def test_format_size_follows_pytorch() -> None:
    assert format_size(0) == "0 bytes"
    assert format_size(14.69) == "14.69 MiB"
    assert format_size(40960) == "40.00 GiB"


# -- peaks ------------------------------------------------------------------------------------


def test_peak_is_the_largest_total_on_one_gpu_and_outlives_release_for_an_hour(tmp_path: Path) -> None:
    now = [1000.0]
    led = Ledger(tmp_path / "l.json", clock=lambda: now[0])
    led.init(parse_gpu_list("2xA100-40GB"))
    pid = os.getpid()
    assert led.peak(pid) is None
    led.allocate(pid, GPU0, 3000, PROFILE, "t")
    led.allocate(pid, GPU1, 2000, PROFILE, "t")
    led.allocate(pid, GPU0, 1000, PROFILE, "t")
    assert led.peak(pid) == 4000
    led.release(pid)
    now[0] += PEAK_KEEP_S - 1
    assert led.peak(pid) == 4000
    now[0] += 2
    assert led.peak(pid) is None


def test_a_reused_pid_starts_a_fresh_peak(ledger: Ledger) -> None:
    pid = os.getpid()
    ledger.allocate(pid, GPU0, 5000, PROFILE, "first")
    ledger.release(pid)
    ledger.allocate(pid, GPU0, 100, PROFILE, "second")
    assert ledger.peak(pid) == 100


# -- dead processes ---------------------------------------------------------------------------


def test_a_killed_process_is_dropped_and_its_peak_kept(ledger: Ledger) -> None:
    code = (
        "import os, sys, time\n"
        "from carma_airflow.core import ActivityProfile\n"
        "from carma_airflow.monitor.ledger import Ledger\n"
        "Ledger(sys.argv[1]).allocate(os.getpid(), 'GPU-SIM-0000', 2500, ActivityProfile(0.5, 0.3, 0.2), 'doomed')\n"
        "time.sleep(60)\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", code, str(ledger.path)], cwd=REPO)
    try:
        assert wait_for(lambda: any(a.pid == proc.pid for a in ledger.allocations())), "child never allocated"
        assert used_on(ledger, GPU0) == 2500
        os.kill(proc.pid, signal.SIGKILL)
        # not reaped yet: a zombie counts as dead
        assert wait_for(lambda: not pid_alive(proc.pid), timeout=5)
        assert ledger.allocations() == []
        assert ledger.peak(proc.pid) == 2500
    finally:
        proc.kill()
        proc.wait()
    # the freed memory is allocatable again
    ledger.allocate(os.getpid(), GPU0, A100_MIB, PROFILE, "whole GPU")


def test_pid_alive() -> None:
    assert pid_alive(os.getpid())
    assert not pid_alive(0)
    assert not pid_alive(-5)
    proc = subprocess.Popen(["true"])
    proc.wait()
    assert not pid_alive(proc.pid)


# -- concurrency with real processes ------------------------------------------------------------


def _race_once(path: str, mib: int, start: Any, done: Any, results: Any) -> None:
    led = Ledger(path)
    start.wait()
    try:
        led.allocate(os.getpid(), GPU0, mib, PROFILE, "racer")
        results.put(("ok", os.getpid()))
    except SimulatedCudaOOM as exc:
        results.put(("oom", str(exc)))
    done.wait(30)  # stay alive: a dead process's memory would be freed


def _race_many(path: str, mib: int, start: Any, done: Any, results: Any) -> None:
    led = Ledger(path)
    start.wait()
    got = 0
    oom = False
    for _ in range(200):
        try:
            led.allocate(os.getpid(), GPU0, mib, PROFILE, "racer")
            got += 1
        except SimulatedCudaOOM:
            oom = True
            break
    results.put((got, oom))
    done.wait(30)


def _run_racers(ledger: Ledger, target: Callable[..., None], mib: int) -> tuple[list[Any], list[int]]:
    ctx = multiprocessing.get_context("fork")
    start, done, results = ctx.Event(), ctx.Event(), ctx.Queue()
    procs = [ctx.Process(target=target, args=(str(ledger.path), mib, start, done, results)) for _ in range(4)]
    for p in procs:
        p.start()
    seen: list[int] = []
    stop = threading.Event()

    def watch() -> None:  # totals must never exceed capacity, at any moment
        while not stop.is_set():
            seen.append(used_on(ledger, GPU0))

    watcher = threading.Thread(target=watch)
    watcher.start()
    start.set()
    try:
        out = [results.get(timeout=20) for _ in procs]
    finally:
        stop.set()
        watcher.join()
        seen.append(used_on(ledger, GPU0))
        done.set()
        for p in procs:
            p.join(10)
    return out, seen


def test_four_processes_racing_for_one_gpu_never_exceed_it(ledger: Ledger) -> None:
    out, seen = _run_racers(ledger, _race_once, 15000)
    winners = [r for r in out if r[0] == "ok"]
    losers = [r for r in out if r[0] == "oom"]
    assert len(winners) == 2 and len(losers) == 2
    assert all("CUDA out of memory. Tried to allocate 14.65 GiB" in msg for _, msg in losers)
    assert max(seen) <= A100_MIB
    assert seen[-1] == 30000


def test_many_small_allocations_from_four_processes_add_up_exactly(ledger: Ledger) -> None:
    out, seen = _run_racers(ledger, _race_many, 1000)
    assert all(oom for _, oom in out), "every process ends on a full GPU"
    granted = sum(got for got, _ in out)
    assert granted == A100_MIB // 1000
    assert max(seen) <= A100_MIB
    assert seen[-1] == granted * 1000
    assert len(seen) > 3


def test_faults_are_set_and_cleared(ledger: Ledger) -> None:
    ledger.set_fault(GPU1, "NVMLError_GpuIsLost: GPU is lost")
    assert ledger.faults() == {GPU1: "NVMLError_GpuIsLost: GPU is lost"}
    ledger.set_fault(GPU1, None)
    assert ledger.faults() == {}
    with pytest.raises(LedgerError):
        ledger.set_fault("GPU-SIM-0042", "x")


def test_the_ledger_file_is_plain_json(ledger: Ledger) -> None:
    ledger.allocate(os.getpid(), GPU0, 1, PROFILE, "t")
    text = ledger.path.read_text()
    assert re.search(r'"uuid":"GPU-SIM-0000"', text)


def test_a_process_forked_while_the_lock_is_held_does_not_keep_it(tmp_path) -> None:
    # found by the 2,000-task load run: task processes forked while the executor's monitor
    # thread held the ledger lock kept it, and every later ledger access waited forever
    import os
    import time

    from carma_airflow.core.gpu import parse_gpu_list
    from carma_airflow.monitor.ledger import Ledger

    ledger = Ledger(tmp_path / "gpus.json")
    ledger.init(parse_gpu_list("1xA100-40GB"))
    with ledger._locked(exclusive=True):
        child = os.fork()
        if child == 0:  # holds a copy of the lock's descriptor, and lingers
            time.sleep(5)
            os._exit(0)
    started = time.monotonic()
    other = os.fork()
    if other == 0:  # another process takes the lock: it must not wait for the first child
        Ledger(tmp_path / "gpus.json").gpus()
        os._exit(0)
    _, status = os.waitpid(other, 0)
    took = time.monotonic() - started
    os.kill(child, 9)
    os.waitpid(child, 0)
    assert os.WEXITSTATUS(status) == 0 and took < 3
