"""A PostgreSQL server of the test's own, which the test may stop and start again.

The machine's shared server (127.0.0.1:5432) serves every test running in parallel, so an
outage test must not stop it.  This one is a fresh cluster (``initdb``) in a temporary folder on
a free loopback port, run with the Debian binaries the shared server comes from.  PostgreSQL
refuses to run as root: as root, the folder is given to the ``postgres`` user and every command
runs as that user.
"""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path


def _pg_bin() -> Path:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    if not found and shutil.which("initdb"):
        return Path(str(shutil.which("initdb"))).parent
    if not found:
        raise RuntimeError("no PostgreSQL server binaries (initdb) on this machine: apt install postgresql")
    return Path(found[-1]).parent


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class PrivatePostgres:
    def __init__(self) -> None:
        self.bin = _pg_bin()
        self.dir = Path(tempfile.mkdtemp(prefix="carma-pg-"))
        self.data = self.dir / "data"
        self.port = _free_port()
        self._as_postgres = os.geteuid() == 0
        if self._as_postgres:
            shutil.chown(self.dir, "postgres", "postgres")
        self._run("initdb", "-D", str(self.data), "-A", "trust", "-U", "postgres", "--no-sync", "-E", "UTF8")

    @property
    def url(self) -> str:
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/postgres"

    def _run(self, tool: str, *args: str) -> None:
        argv = [str(self.bin / tool), *args]
        if self._as_postgres:
            argv = ["runuser", "-u", "postgres", "--", *argv]
        out = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False, cwd=self.dir)
        if out.returncode != 0:
            raise RuntimeError(f"{tool} failed ({out.returncode}): {out.stdout[-2000:]}{out.stderr[-2000:]}")

    def start(self) -> None:
        options = f"-p {self.port} -c listen_addresses=127.0.0.1 -k {self.dir} -c fsync=off"
        self._run("pg_ctl", "-D", str(self.data), "-o", options, "-l", str(self.dir / "server.log"), "-w", "start")

    def stop(self) -> None:
        """Stop the server as an administrator would: every connection is closed, new ones refused."""
        self._run("pg_ctl", "-D", str(self.data), "-m", "fast", "-w", "stop")

    def remove(self) -> None:
        with contextlib.suppress(RuntimeError):  # already stopped
            self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)
