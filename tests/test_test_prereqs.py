"""tools/test-prereqs, which `make test` runs first: one clear line and exit 2 when it cannot provide
what the suite needs, silence about services the tests were pointed elsewhere for, and no slow work.

No network and no side effects: the browser paths are overridden, PATH holds no apt-get or sudo,
and the services are marked as provided elsewhere through the tests' own URL variables.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "tools" / "test-prereqs"
BASH = shutil.which("bash") or "/bin/bash"


def _run(tmp_path: Path, **env: str) -> tuple[subprocess.CompletedProcess[str], float]:
    empty_bin = tmp_path / "bin"
    empty_bin.mkdir(exist_ok=True)
    full = {
        "PATH": str(empty_bin),  # no apt-get, no sudo, no service tools
        "HOME": str(tmp_path),
        "TMPDIR": str(tmp_path),
        # the tests' own variables: those servers are someone else's, leave them alone
        "CARMA_TEST_PG_URL": "postgresql+psycopg://postgres@db.invalid:5432/postgres",
        "CARMA_TEST_REDIS_URL": "redis://redis.invalid:6379/11",
        "CARMA_TEST_RABBITMQ_URL": "amqp://guest:guest@mq.invalid:5672//",
        **env,
    }
    start = time.monotonic()
    proc = subprocess.run([BASH, str(SCRIPT)], env=full, capture_output=True, text=True, timeout=30, check=False)
    return proc, time.monotonic() - start


def test_absent_chromium_without_apt_is_one_line_and_exit_2_at_once(tmp_path: Path) -> None:
    proc, took = _run(
        tmp_path,
        CARMA_CHROMIUM=str(tmp_path / "no" / "chromium"),
        CARMA_CHROMEDRIVER=str(tmp_path / "no" / "chromedriver"),
    )
    assert proc.returncode == 2, proc
    assert proc.stdout == ""
    lines = proc.stderr.splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("error: make test needs Debian's chromium and chromium-driver")
    assert "apt-get install -y chromium chromium-driver" in lines[0]
    assert took < 5, f"the cannot path took {took:.1f} s; it must stop in the first seconds"


def test_everything_present_is_quiet_and_fast(tmp_path: Path) -> None:
    fake = tmp_path / "fake-browser"
    fake.write_text("#!/bin/sh\n")
    fake.chmod(0o755)
    proc, took = _run(tmp_path, CARMA_CHROMIUM=str(fake), CARMA_CHROMEDRIVER=str(fake))
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.splitlines() == [
        "test-prereqs: chromium, chromedriver, PostgreSQL :5432, Redis :6379, RabbitMQ :5672: all present"
    ]
    assert took < 5
    assert set(os.listdir(tmp_path)) == {"bin", "fake-browser"}, "the present path must write nothing (no apt log)"


def test_make_test_runs_the_prereqs_first() -> None:
    make = shutil.which("make")
    assert make is not None, "make is needed (the README's two commands are make targets)"
    dry = subprocess.run(
        [make, "-n", "-C", str(ROOT), "--no-print-directory", "test"],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert dry.returncode == 0, dry.stderr
    assert dry.stdout.splitlines()[0] == "tools/test-prereqs", dry.stdout
    ci = (ROOT / ".ci" / "run").read_text()
    assert "exec make test" in ci and "apt-get" not in ci and "redis-server" not in ci
