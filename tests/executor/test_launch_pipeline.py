"""A pass sends all its placed tries to the launcher before it waits for any (launching/local.py).

Waiting for the launcher's fork after each try cost every try of a batch a scheduling slice of
the launcher on a loaded machine: in the 200-task dispatch benchmark a try waited a median
0.3 s between being taken and being started, with nothing to wait for in the placer.  These
tests stop the launcher (SIGSTOP) so that it cannot answer: sending must not wait, and a launch
that never gets an answer must hand its GPUs back and start again with a new launcher.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest
from executor_helpers import fake_run_workload, make_workload, run_until, seen_env, submit

from carma_airflow.launching import LauncherError, LauncherProcess, confirm
from carma_airflow.testing import try_runner_env


@pytest.fixture
def launcher(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> LauncherProcess:
    for name, value in try_runner_env(fake_run_workload).items():
        monkeypatch.setenv(name, value)
    out = tmp_path / "out"
    out.mkdir()
    monkeypatch.setenv("CARMA_TEST_OUT", str(out))
    monkeypatch.setenv("CARMA_TEST_BEHAVIOUR", '{"t0": {"seconds": 0.0}}')
    process = LauncherProcess()
    yield process
    process.close()


def _launcher_pid(launcher: LauncherProcess) -> int:
    assert launcher._proc is not None
    return launcher._proc.pid


def test_sending_does_not_wait_for_the_launcher(launcher: LauncherProcess, tmp_path: Path) -> None:
    pid = _launcher_pid(launcher)
    os.kill(pid, signal.SIGSTOP)  # it cannot fork nor answer now
    try:
        handles = [
            launcher.launch(make_workload(f"t{i}"), {}, tmp_path / f"r{i}.json", "here")  # all sent, none waited for
            for i in range(5)
        ]
    finally:
        os.kill(pid, signal.SIGCONT)
    for handle in handles:
        confirm(handle)
    pids = [h.pid for h in handles]
    assert all(isinstance(p, int) and p > 0 for p in pids) and len(set(pids)) == 5
    # each start time read by the launcher while the process surely lived, however soon it ends
    assert all(isinstance(h.pid_start, int) for h in handles)
    for handle in handles:
        deadline = time.monotonic() + 30
        while (ended := handle.poll()) is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert ended is not None and ended.exitcode == 0


def test_a_launch_the_launcher_never_answers_fails_clearly(launcher: LauncherProcess, tmp_path: Path) -> None:
    pid = _launcher_pid(launcher)
    os.kill(pid, signal.SIGSTOP)
    handle = launcher.launch(make_workload("t0"), {}, tmp_path / "r.json", "here")
    os.kill(pid, signal.SIGKILL)  # gone before it read the command
    with pytest.raises(LauncherError, match="did not start the try: no answer"):
        confirm(handle)
    ended = handle.poll()
    assert ended is not None and not ended.ok and ended.lost is not None and "no answer" in ended.lost
    assert handle.pid is None


def test_a_try_whose_launch_got_no_answer_is_started_again(executor_factory) -> None:  # type: ignore[no-untyped-def]
    ex = executor_factory(gpus="1xA100-40GB", behaviour={"a": {"seconds": 0.1}})
    first = ex.parts.launcher._proc.pid
    os.kill(first, signal.SIGSTOP)
    # the launcher dies after the try is sent, before it answers: once the pass waits for it
    original = LauncherProcess.answer

    def answer_after_death(self: LauncherProcess, launch_id: int, timeout_s: float):  # type: ignore[no-untyped-def]
        if self._proc is not None and self._proc.pid == first:
            os.kill(first, signal.SIGKILL)
            self._proc.wait()
        return original(self, launch_id, timeout_s)

    LauncherProcess.answer = answer_after_death  # type: ignore[method-assign]
    try:
        submit(ex, make_workload("a", config={"memory": "1GiB"}))
    finally:
        LauncherProcess.answer = original  # type: ignore[method-assign]
    assert "a" in {t.ti.task_id for t in ex.waiting.values()}  # back in the queue, its GPU free
    run_until(ex, lambda: not ex.waiting and not ex.active)
    assert ex.parts.launcher._proc.pid != first  # a new launcher started it
    assert seen_env("a")["CUDA_VISIBLE_DEVICES"]
    assert ex.store.latest_for("dag", "a")[0].outcome.value == "success"


def _children(pid: int) -> set[int]:
    return {int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()}


def test_tries_start_in_spares_forked_ahead_and_spares_end_with_the_launcher(
    launcher: LauncherProcess, tmp_path: Path
) -> None:
    from carma_airflow.taskrun.launcher import SPARES

    pid = _launcher_pid(launcher)
    deadline = time.monotonic() + 30
    while len(spares := _children(pid)) < SPARES and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(spares) == SPARES  # forked while nothing was asked
    handles = [launcher.launch(make_workload(f"t{i}"), {}, tmp_path / f"r{i}.json", "here") for i in range(3)]
    pids = {h.pid for h in handles}
    assert pids <= spares  # no fork on the way: a spare took each try
    for handle in handles:
        deadline = time.monotonic() + 30
        while (ended := handle.poll()) is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert ended is not None and ended.exitcode == 0
    left = _children(pid)
    launcher.close()
    assert launcher._proc is not None and launcher._proc.returncode == 0
    assert not [p for p in left if Path(f"/proc/{p}").exists() and "Z" not in Path(f"/proc/{p}/stat").read_text()]
