"""The launcher: a single-threaded process that starts every try of this host's CarmaExecutor.

Why a process of its own: forking a try from the scheduler copies a process that runs threads
(the GPU monitor, the store writer, Airflow's own); a child forked while one of them holds a
lock (logging, SQLite, NVML, the simulated ledger) keeps it held for ever.  Guards around our
own threads can never cover Airflow's or a library's.  The launcher is started by the
executor's ``start()`` as a fresh interpreter (fork+exec, so it inherits no thread and no lock),
imports Airflow's supervisor and what a try's task runner needs once (taskrun/warm.py), freezes
its heap, and from then on gives each try a child of its own: its own session (an executor
restart does not take it along; it is stopped as a group), the try's environment, then Airflow's
``run_workload`` as LocalExecutor runs it.  Forking a warm single-threaded process costs
milliseconds; exec'ing a fresh interpreter per try costs the Airflow import every time
(bench/launch.py measures both).  Those milliseconds are spent ahead: the launcher keeps
``SPARES`` children forked and waiting for a command, so that a launch only writes to a pipe.

Protocol (one JSON object per line): the executor writes commands to the launcher's stdin,
``{"op": "launch", "id": N, "workload": <ExecuteTask JSON>, "env": {...}, "server": URL,
"proctitle": str}``; the launcher answers on the file descriptor it was given,
``{"op": "started", "id": N, "pid": P}`` or ``{"op": "error", "id": N, "message": str}``, and
``{"op": "ended", "pid": P, "exitcode": C}`` when a child ends.  End of its stdin (the executor
stopped or died) ends the launcher; tries it started keep running, as they did before.

    python -m carma_airflow.taskrun.launcher --reply-fd FD
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import os
import select
import signal
import sys
from typing import Any

from carma_airflow.taskrun.driver_cap import enter_leaf
from carma_airflow.taskrun.procstat import process_start_ticks


def _try_process(command_fd: int) -> None:  # pragma: no cover - the child
    """Body of one try's process (a child of the launcher): never returns.

    Forked ahead of time (the spare pool) or for a batch, it waits for its try's command on its
    own pipe; end of the pipe with no command (the launcher ended) ends it unused.
    """
    code = 1
    try:
        os.setsid()  # survives an executor restart; stopped as a group
        signal.set_wakeup_fd(-1)  # the launcher's wake-up pipe is not the try's
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, 0)  # the launcher's stdin carries the executor's commands: not the try's
        os.close(devnull)
        # nothing of the launcher's stays open: its pipes, the other spares' command pipes
        os.closerange(3, command_fd)
        os.closerange(command_fd + 1, _MAX_FD)
        with contextlib.suppress(ImportError):  # what ps shows until Airflow's supervisor names it
            from setproctitle import setproctitle

            setproctitle("carma launcher: spare try process (waiting for a try)")
        data = b""
        while chunk := os.read(command_fd, 1 << 16):
            data += chunk
        os.close(command_fd)
        if not data.strip():
            code = 0
            return
        command = json.loads(data)
        os.environ.update(command["env"])
        enter_leaf(os.environ)  # isolation = driver: into its cgroup leaf before the supervisor starts
        workload = _workload(command["workload"])
        _try_runner()(
            workload,
            server=command.get("server"),
            proctitle=command.get("proctitle"),
            subprocess_logs_to_stdout=True,
        )
        # as LocalExecutor reports it: the workload ran (the task told the Execution API its own
        # state, a clear included); only a workload that could not run is a failure.  Reporting
        # the supervisor's exit code instead turned a try cleared while it ran into a retry.
        code = 0
    except BaseException as exc:  # the try fails; the launcher lives on
        print(f"carma launcher: try could not run: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
    finally:
        os._exit(code)


_MAX_FD = 1 << 20  # closerange uses close_range(2): the bound costs nothing
SPARES = 16  # try processes forked ahead of time: the scheduler queues up to 16 tries a loop


RUNNER_ENV = "CARMA_TRY_RUNNER"  # "module:function" instead of BaseExecutor.run_workload (testing.py)


def _workload(text: str) -> Any:
    """The workload a command carries: a task try (with the kill guard), or an executor callback."""
    if json.loads(text).get("type") == "ExecuteCallback":
        from airflow.executors.workloads import ExecuteCallback

        return ExecuteCallback.model_validate_json(text)
    from airflow.executors.workloads import ExecuteTask

    from carma_airflow.taskrun.killguard import install_kill_guard

    install_kill_guard()
    return ExecuteTask.model_validate_json(text)


def _try_runner() -> Any:
    """Airflow's ``BaseExecutor.run_workload``; tests name a fake of the same signature (the true
    boundary: the supervisor and the task itself) through RUNNER_ENV."""
    spec = os.environ.get(RUNNER_ENV)
    if spec:
        import importlib

        module, _, name = spec.partition(":")
        return getattr(importlib.import_module(module), name)
    from airflow.executors.base_executor import BaseExecutor

    return BaseExecutor.run_workload


class Launcher:
    def __init__(self, reply_fd: int, spares: int = SPARES) -> None:
        self.reply_fd = reply_fd
        self.buffer = b""
        self.children: set[int] = set()  # tries' processes: their ends are reported
        self.spare: list[tuple[int, int]] = []  # (pid, its command pipe) forked ahead, no try yet
        self.spares = spares

    def reply(self, message: dict[str, Any]) -> None:
        data = (json.dumps(message) + "\n").encode()
        while data:
            data = data[os.write(self.reply_fd, data) :]

    def fork(self) -> tuple[int, int]:
        """A try process waiting for its command: (pid, the pipe to write it to).  OSError if none."""
        read_end, write_end = os.pipe()
        try:
            pid = os.fork()
        except OSError:
            os.close(read_end)
            os.close(write_end)
            raise
        if pid == 0:  # pragma: no cover - the child
            _try_process(read_end)
        os.close(read_end)
        return pid, write_end

    def add_spare(self) -> None:
        """Fork one spare, between commands: a fork of this warm process takes milliseconds
        (6-7 ms for 130 MiB on the 2-core machine), which a launch then does not wait for."""
        try:
            self.spare.append(self.fork())
        except OSError as exc:
            print(f"carma launcher: no spare try process: {exc}", file=sys.stderr, flush=True)
            self.spares = len(self.spare)  # at the process limit: do with what there is

    def launch(self, commands: list[dict[str, Any]]) -> None:
        """One process per command, each answered at once: a spare where there is one, else a
        fork.  Every command is written only after the batch: a try that started would compete
        for the CPU with the launcher's next fork (16 tries on a 2-core machine took 0.8 s to
        fork instead of 0.1 s, and the executor waits for the pids)."""
        given = []
        for command in commands:
            try:
                pid, pipe = self.spare.pop(0) if self.spare else self.fork()  # the oldest spare first
            except OSError as exc:
                self.reply({"op": "error", "id": command.get("id"), "message": f"fork failed: {exc}"})
                continue
            self.children.add(pid)
            # its start time now, while it surely lives (it waits for its command): a try that
            # ends at once is still told apart from a later process with its PID
            self.reply({"op": "started", "id": command.get("id"), "pid": pid, "start": process_start_ticks(pid)})
            given.append((pipe, command))
        for pipe, command in given:
            data = json.dumps(command).encode()
            try:
                while data:
                    data = data[os.write(pipe, data) :]
            except OSError:  # it died waiting: its end is reported as any other
                pass
            os.close(pipe)

    def reap(self) -> None:
        for pid in list(self.children):
            try:
                done, status = os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                done, status = pid, 0
            if done:
                self.children.discard(pid)
                self.reply({"op": "ended", "pid": pid, "exitcode": os.waitstatus_to_exitcode(status)})
        for pid, pipe in list(self.spare):  # a spare that died unused is forgotten
            with contextlib.suppress(ChildProcessError):
                if os.waitpid(pid, os.WNOHANG)[0]:
                    self.spare.remove((pid, pipe))
                    os.close(pipe)

    def close_spares(self) -> None:
        for pid, pipe in self.spare:  # end of its pipe, no command: it exits
            os.close(pipe)
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, 0)
        self.spare.clear()

    def handle(self, lines: list[bytes]) -> None:
        launches = []
        for line in lines:
            if not line.strip():
                continue
            try:
                command = json.loads(line)
            except ValueError:
                print(f"carma launcher: not a command: {line[:200]!r}", file=sys.stderr, flush=True)
                continue
            if isinstance(command, dict) and command.get("op") == "launch":
                launches.append(command)
        if launches:
            self.launch(launches)

    def serve(self, commands: int) -> None:
        """Until the executor closes our stdin: take commands, start tries, report their ends;
        between commands, keep the spare pool full."""
        wake_r, wake_w = os.pipe()
        os.set_blocking(wake_w, False)
        # a child's end wakes the loop at once (no polling delay on the exit code)
        signal.set_wakeup_fd(wake_w)
        signal.signal(signal.SIGCHLD, lambda *_: None)
        poller = select.poll()
        for fd in (commands, wake_r):
            poller.register(fd, select.POLLIN | select.POLLHUP | select.POLLERR)
        try:
            while True:
                short = len(self.spare) < self.spares
                ready = [fd for fd, _ in poller.poll(0 if short else 1000)]
                if wake_r in ready:
                    os.read(wake_r, 4096)
                if commands in ready:
                    chunk = os.read(commands, 1 << 16)
                    if not chunk:
                        break  # the executor is gone: the tries run on in their own sessions
                    self.buffer += chunk
                    *lines, self.buffer = self.buffer.split(b"\n")
                    self.handle(lines)  # what came in one read is one batch
                self.reap()
                if short and not ready:
                    self.add_spare()
        finally:
            self.close_spares()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--reply-fd", type=int, required=True)
    args = parser.parse_args(argv)
    # what every try needs, imported once: a fork then starts with it loaded
    import airflow.executors.base_executor
    import airflow.executors.workloads
    import airflow.sdk.execution_time.supervisor  # noqa: F401

    import carma_airflow.taskrun.killguard  # noqa: F401
    from carma_airflow.taskrun.warm import preload

    preload()  # and what the try's task runner would import (taskrun/warm.py)
    _try_runner()  # a runner that cannot be imported fails the launcher's start, not every try
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C on the scheduler: end of stdin ends us
    gc.collect()
    gc.freeze()  # children share the imported heap instead of copying it on the first collection
    launcher = Launcher(args.reply_fd)
    launcher.reply({"op": "ready", "pid": os.getpid()})
    launcher.serve(sys.stdin.fileno())
    return 0


if __name__ == "__main__":
    sys.exit(main())
