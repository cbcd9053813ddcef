"""An AirflowStack (what `carma demo --keep` leaves running) is not an open, all-admin Airflow:
the api-server listens on 127.0.0.1 only, and the REST API and the GPU page want a login."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from carma_airflow.dev.devstack import AirflowStack

pytestmark = [pytest.mark.e2e]


def listening_addresses(port: int) -> set[str]:
    """Local addresses of the sockets listening on ``port`` (IPv4 and IPv6), from /proc/net."""
    found = set()
    for table, family in (("tcp", socket.AF_INET), ("tcp6", socket.AF_INET6)):
        path = Path("/proc/net") / table
        if not path.exists():
            continue
        for line in path.read_text().splitlines()[1:]:
            fields = line.split()
            address, hex_port = fields[1].split(":")
            if int(hex_port, 16) != port or fields[3] != "0A":  # 0A: LISTEN
                continue
            raw = bytes.fromhex(address)
            # /proc/net prints each 32-bit word of the address in host (little-endian) order
            packed = b"".join(raw[i : i + 4][::-1] for i in range(0, len(raw), 4))
            found.add(socket.inet_ntop(family, packed))
    return found


def test_login_is_required_and_the_api_server_listens_on_loopback_only(default_stack: AirflowStack) -> None:
    stack = default_stack
    stack.wait_for_dag("carma_collocate")
    # anonymous: refused, and nothing of the deployment in the answer
    for path in ("/api/v2/dags", "/carma/", "/carma/api/state"):
        status, body = stack.http(path)
        assert status in (401, 403), (path, status, body[:300])
        assert "carma_collocate" not in body and "A100" not in body
    # the all-admins shortcut (GET /auth/token hands out an admin token to anyone) is off
    status, _ = stack.http("/auth/token")
    assert status == 403
    # a wrong password gets no token
    with pytest.raises(AssertionError, match="answered 401"):
        stack.token(password="guess")
    # logged in: the REST API and the page answer
    status, dags = stack.api("/api/v2/dags")
    assert status == 200, dags
    assert "carma_collocate" in {d["dag_id"] for d in dags["dags"]}
    status, page = stack.api("/carma/")
    assert status == 200 and "CARMA" in page
    # the login the stack reports is the one in the simple auth manager's passwords file
    assert stack.username in stack.passwords_file.read_text()
    assert stack.passwords_file.stat().st_mode & 0o077 == 0
    # the api-server listens on the loopback address only, never on 0.0.0.0 or ::
    assert listening_addresses(stack.port) == {"127.0.0.1"}


def test_the_login_the_demo_prints_gets_a_token(default_stack: AirflowStack) -> None:
    from rich.console import Console

    from carma_airflow.dev.demo import _print_login

    stack = default_stack
    console = Console(record=True, width=300)
    _print_login(console, stack)
    text = console.export_text()
    assert f"{stack.base_url}/" in text and stack.password in text
    # the curl command it prints, sent as it is
    payload = text.split("-d '", 1)[1].split("'", 1)[0]
    status, body = stack.http("/auth/token", headers={"Content-Type": "application/json"}, data=payload.encode())
    assert status == 201 and "access_token" in body, (status, body[:300])
