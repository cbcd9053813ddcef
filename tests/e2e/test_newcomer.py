"""What a newcomer reads in a real Airflow (issue 42): a waiting try's priority and the tries of a higher
priority that go first, before what it waits for; a try that grew past its declaration alone on its
GPU, let through by the live cap, said in its own log and by `carma why` (tests/e2e/dags/carma_newcomer.py)."""

from __future__ import annotations

import time

import pytest

pytestmark = [pytest.mark.e2e, pytest.mark.db]
DAG_ID = "carma_newcomer"


@pytest.mark.parametrize("shared_backend", ["sqlite"], indirect=True)  # the store backend is not what it tests
def test_waiting_place_and_grown_try_are_said(default_stack) -> None:
    stack = default_stack
    run = stack.trigger(DAG_ID)
    seen = ""
    deadline = time.time() + 180
    while not seen and time.time() < deadline:  # until routine waits behind urgent, its place known
        why = stack.airflow("carma", "why", f"{DAG_ID}.routine")
        if why.returncode == 0 and "try 1: waiting" in why.stdout and "  priority 1;" in why.stdout:
            seen = why.stdout
        else:
            time.sleep(1)
    (stack.home / f"release-{run}").write_text("")  # hog may end now (it trained a fixed 30 s)
    assert seen, "routine was never seen waiting with its place"
    lines = seen.splitlines()
    at = next(i for i, line in enumerate(lines) if line.endswith("try 1: waiting"))
    first = f"  priority 1; 1 waiting try of a higher priority goes first: {DAG_ID}.urgent (50)"
    assert lines[at + 1].startswith(first), seen
    assert lines[at + 2].startswith("  waits for: "), seen
    assert stack.wait_run(DAG_ID, run, timeout=300) == "success"
    log = stack.run_log(DAG_ID, run, "grower", 1)
    assert log, "no log for grower"
    assert "[carma] this try grew to 11.7 GiB past its reserved 2.0 GiB and was not stopped" in log[0].read_text()
    why = stack.airflow("carma", "why", f"{DAG_ID}.grower")
    assert why.returncode == 0, why.stderr
    assert "grew to 11.7 GiB past its declared 2.0 GiB and was not stopped: the live cap" in why.stdout
