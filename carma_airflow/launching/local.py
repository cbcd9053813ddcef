"""This host's launcher: how a try placed on the executor's own host gets a process.

It implements the launcher seam (carma_airflow/launching/interface.py), beside the Celery launcher
(carma_airflow/distributed/dispatch.py).  :class:`LauncherProcess` hands each try of this host to
the launcher process (carma_airflow/taskrun/launcher.py: single-threaded, forks one child per try
in its own session), so the scheduler process, which runs threads, never forks;
:class:`PidHandle` follows a process started by an earlier executor (restart reconciliation).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from carma_airflow.launching.interface import Ended, LauncherError, TaskHandle
from carma_airflow.taskrun.outcome import read_result
from carma_airflow.taskrun.procstat import process_start_ticks

if TYPE_CHECKING:
    from airflow.executors.workloads import ExecuteTask


log = logging.getLogger(__name__)


KILL_GRACE_S = 5.0  # SIGTERM first; what still runs this long after gets SIGKILL
# an MPS client is given longer: NVIDIA documents that a client killed with GPU work outstanding
# can leave its server and the other clients in an undefined state, so it should end itself
MPS_KILL_GRACE_S = 30.0


def kill_grace_s(env: dict[str, str]) -> float:
    """How long a try started with ``env`` gets between SIGTERM and SIGKILL."""
    return MPS_KILL_GRACE_S if env.get("CARMA_ISOLATION") == "mps" else KILL_GRACE_S


class _GroupStop:
    """Stops a try's process group without blocking the scheduler loop: ``start`` sends SIGTERM,
    ``escalate`` (called from each poll) sends SIGKILL once the grace time has passed."""

    def __init__(self, grace_s: float = KILL_GRACE_S) -> None:
        self._kill_at: float | None = None
        self.grace_s = grace_s

    def start(self, pid: int) -> None:
        if self._kill_at is None:
            _signal_group(pid, signal.SIGTERM)
            self._kill_at = time.monotonic() + self.grace_s

    def escalate(self, pid: int) -> None:
        if self._kill_at is not None and time.monotonic() >= self._kill_at:
            _signal_group(pid, signal.SIGKILL)


def _signal_group(pid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)


class PidHandle:
    """A try whose process an earlier executor started (found again after a restart).

    The process is not our child: it is alive while /proc shows it with the recorded start
    time (a reused PID has another), and its exit code is not known, only its result file.
    """

    def __init__(self, pid: int, pid_start: int | None, result_path: Path) -> None:
        self._pid = pid
        self._pid_start = pid_start
        self.result_path = result_path
        self._stop = _GroupStop()

    @property
    def pid(self) -> int | None:
        return self._pid

    @property
    def pid_start(self) -> int | None:
        return self._pid_start

    def alive(self) -> bool:
        ticks = process_start_ticks(self._pid)
        return ticks is not None and (self._pid_start is None or ticks == self._pid_start)

    def poll(self) -> Ended | None:
        if self.alive():
            self._stop.escalate(self._pid)
            return None
        result = read_result(self.result_path)
        if result is None:
            return Ended(None, None, lost="the task process ended without a result while the executor was away")
        return Ended(0 if result.state == "success" else 1, result)

    def kill(self) -> None:
        if self.alive():
            self._stop.start(self._pid)


def _readable(fd: int, timeout_s: float) -> bool:
    """Whether ``fd`` has data (or its end) within ``timeout_s``.  poll(), not select(): a
    scheduler that runs thousands of LocalExecutor workers holds descriptors past select's 1024."""
    poller = select.poll()
    poller.register(fd, select.POLLIN | select.POLLHUP | select.POLLERR)
    return bool(poller.poll(timeout_s * 1000))


class LaunchedHandle:
    """A try sent to this executor's launcher process (carma_airflow/taskrun/launcher.py).

    Sending does not wait for the launcher's fork: a pass that places many tries sends them all,
    then :meth:`confirm` collects the pids (one wait for the lot, not one round trip per try,
    which on a loaded machine cost each try a scheduling slice of the launcher).  Its end comes
    from the launcher (the exit code, from waitpid); if the launcher itself is gone, the try is
    followed through /proc as an adopted one would be.
    """

    def __init__(
        self, launch_id: int, result_path: Path, launcher: LauncherProcess, grace_s: float = KILL_GRACE_S
    ) -> None:
        self._id = launch_id
        self._pid: int | None = None
        self._pid_start: int | None = None
        self._error: str | None = None
        self.result_path = result_path
        self._launcher = launcher
        self._stop = _GroupStop(grace_s)
        self._orphaned: PidHandle | None = None

    def confirm(self) -> None:
        """Wait for the launcher's answer; LauncherError if it could not start the try."""
        if self._pid is None and self._error is None:
            answer = self._launcher.answer(self._id, LAUNCH_REPLY_S)
            if answer is not None and answer.get("op") == "started":
                self._pid = int(answer["pid"])
                start = answer.get("start")  # read by the launcher while the child surely lived
                self._pid_start = int(start) if start is not None else process_start_ticks(self._pid)
            else:
                self._error = "no answer" if answer is None else str(answer.get("message"))
        if self._error is not None:
            raise LauncherError(f"the launcher did not start the try: {self._error}")

    @property
    def pid(self) -> int | None:
        with contextlib.suppress(LauncherError):
            self.confirm()
        return self._pid

    @property
    def pid_start(self) -> int | None:
        return self._pid_start if self.pid is not None else None

    def poll(self) -> Ended | None:
        if self._orphaned is not None:
            return self._orphaned.poll()
        try:
            self.confirm()
        except LauncherError as exc:
            return Ended(None, None, lost=str(exc))
        assert self._pid is not None
        self._launcher.pump()
        code = self._launcher.exit_code(self._pid)
        if code is not None:
            return Ended(code, read_result(self.result_path))
        if not self._launcher.knows(self._pid):  # its launcher died: follow it through /proc
            self._orphaned = PidHandle(self._pid, self._pid_start, self.result_path)
            self._orphaned._stop = self._stop  # same grace, same SIGTERM already sent
            return self._orphaned.poll()
        self._stop.escalate(self._pid)
        return None

    def kill(self) -> None:
        if self._orphaned is not None:
            self._orphaned.kill()
        elif self.pid is not None:
            self._stop.start(self.pid)


def confirm(handle: TaskHandle) -> None:
    """Wait until a just-launched try has its process; LauncherError if it got none.  Only a
    try sent to this host's launcher is pending; any other handle has its process already."""
    if isinstance(handle, LaunchedHandle):
        handle.confirm()


LAUNCHER_START_S = 120.0  # importing Airflow on a loaded machine
LAUNCH_REPLY_S = 30.0


class LauncherProcess:
    """This host's launcher process, from the executor's side: start it, send tries, read ends.

    Every call is made from the scheduler loop (one thread); a launch only writes a line to the
    launcher's pipe, and confirming it waits for the launcher's fork (milliseconds), never for
    the try.
    """

    def __init__(self) -> None:
        self._proc: subprocess.Popen[bytes] | None = None
        self._reply_fd = -1
        self._buffer = b""
        self._next_id = 0
        self._ended: dict[int, int] = {}  # pid -> exit code, until the handle has read it
        self._live: set[int] = set()
        self._answers: dict[int, dict[str, Any]] = {}
        self.start()

    def start(self) -> None:
        read_fd, write_fd = os.pipe()
        try:
            self._proc = subprocess.Popen(
                [sys.executable, "-m", "carma_airflow.taskrun.launcher", "--reply-fd", str(write_fd)],
                stdin=subprocess.PIPE,
                pass_fds=(write_fd,),
                start_new_session=True,  # a Ctrl-C to the scheduler's group is not ours; end of stdin is
                close_fds=True,
            )
        finally:
            os.close(write_fd)
        self._reply_fd = read_fd
        self._buffer = b""
        self._live.clear()
        if self._wait_for(lambda m: m.get("op") == "ready", LAUNCHER_START_S) is None:
            code = self._proc.poll()
            self.close(timeout_s=0.0)  # not left behind: its process (killed) and its pipe
            raise LauncherError(
                f"the CarmaExecutor launcher did not start within {LAUNCHER_START_S:.0f} s "
                f"(exit code {code}); see the scheduler's log for its error"
            )

    def alive(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def launch(self, workload: ExecuteTask, env: dict[str, str], result_path: Path, host: str) -> TaskHandle:
        from airflow.executors.base_executor import get_execution_api_server_url

        if not self.alive():
            log.error("CarmaExecutor launcher ended (exit code %s); starting a new one", self._exit_status())
            self.start()
        self._next_id += 1
        command = {
            "op": "launch",
            "id": self._next_id,
            "workload": workload.model_dump_json(),
            "env": env,
            "server": get_execution_api_server_url(),
            "proctitle": f"airflow worker -- CarmaExecutor: {workload.display_name}",
        }
        self._send(command)
        return LaunchedHandle(self._next_id, result_path, self, kill_grace_s(env))

    def answer(self, launch_id: int, timeout_s: float) -> dict[str, Any] | None:
        """The launcher's answer to launch ``launch_id`` (waiting up to ``timeout_s``), or None."""
        return self._wait_for(lambda m: m.get("id") == launch_id, timeout_s)

    def pump(self) -> None:
        """Read what the launcher reported so far, without waiting."""
        while self._reply_fd >= 0 and _readable(self._reply_fd, 0.0):
            if not self._read():
                break

    def exit_code(self, pid: int) -> int | None:
        return self._ended.pop(pid, None)

    def knows(self, pid: int) -> bool:
        """Whether the launcher will still report ``pid``'s end (it runs, or its end is read)."""
        return pid in self._ended or (pid in self._live and self.alive())

    def close(self, timeout_s: float = 10.0) -> None:
        if self._proc is None:
            return
        with contextlib.suppress(OSError):
            if self._proc.stdin is not None:
                self._proc.stdin.close()
        try:
            self._proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self._proc.kill()
        with contextlib.suppress(OSError):
            os.close(self._reply_fd)
        self._reply_fd = -1

    # -- the pipe ----------------------------------------------------------------------------
    def _exit_status(self) -> int | None:
        return None if self._proc is None else self._proc.poll()

    def _send(self, command: dict[str, Any]) -> None:
        assert self._proc is not None and self._proc.stdin is not None
        try:
            self._proc.stdin.write((json.dumps(command) + "\n").encode())
            self._proc.stdin.flush()
        except OSError as exc:
            raise LauncherError(f"the launcher is gone ({exc}); it is started again at the next launch") from None

    def _read(self) -> bool:
        """One read from the reply pipe; False at its end (the launcher exited)."""
        try:
            chunk = os.read(self._reply_fd, 1 << 16)
        except OSError:
            chunk = b""
        if not chunk:
            with contextlib.suppress(OSError):
                os.close(self._reply_fd)
            self._reply_fd = -1
            return False
        self._buffer += chunk
        *lines, self._buffer = self._buffer.split(b"\n")
        for line in lines:
            if not line.strip():
                continue
            message = json.loads(line)
            if message.get("op") == "ended":
                pid = int(message["pid"])
                self._live.discard(pid)
                self._ended[pid] = int(message["exitcode"])
            elif "id" in message or message.get("op") == "ready":
                if message.get("op") == "started":
                    self._live.add(int(message["pid"]))
                self._answers[int(message.get("id") or 0)] = message
        return True

    def _wait_for(self, match: Any, timeout_s: float) -> dict[str, Any] | None:
        deadline = time.monotonic() + timeout_s
        while True:
            for key, message in list(self._answers.items()):
                if match(message):
                    return self._answers.pop(key)
            left = deadline - time.monotonic()
            if left <= 0 or self._reply_fd < 0 or not self.alive():
                return None
            if _readable(self._reply_fd, min(left, 1.0)) and not self._read():
                return None


__all__ = [
    "KILL_GRACE_S",
    "MPS_KILL_GRACE_S",
    "LaunchedHandle",
    "LauncherProcess",
    "PidHandle",
    "confirm",
    "kill_grace_s",
]
